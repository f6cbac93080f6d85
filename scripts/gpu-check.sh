#!/usr/bin/env bash
# Run every GPU test binary built by scripts/gpu-build.sh, on a GPU
# machine, and write the logs to a folder.
# TESTS (a list of test binaries' names, e.g. "algo-run model-decoder")
# runs only those; MPS=0 leaves out the section under MPS; PLAN_KERNELS=1
# adds the library plans' kernel resources (below).
# Usage: gpu-check.sh BINDIR OUTDIR
# NVLink multicast stays off (it can take a shared host's GPUs down).
set -uo pipefail
bin=${1:?usage: gpu-check.sh BINDIR OUTDIR}
out=${2:?usage: gpu-check.sh BINDIR OUTDIR}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# A GPU test that finds no GPU (or no driver, NVRTC, NCCL, cuBLAS) fails
# here instead of skipping (internal/testutil/gputest): the run promises
# the GPUs nvidia-smi lists, at least one. Tests needing more still skip.
if [ -z "${CHORUS_REQUIRE_GPU:-}" ]; then
  CHORUS_REQUIRE_GPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  [ "${CHORUS_REQUIRE_GPU:-0}" -ge 1 ] 2>/dev/null || CHORUS_REQUIRE_GPU=1
fi
export CHORUS_REQUIRE_GPU
{
  date -u
  echo "CHORUS_REQUIRE_GPU=$CHORUS_REQUIRE_GPU"
  nvidia-smi -L || true
  "$bin/chorus" info
} 2>&1 | tee "$out/info.log"
bin=$(cd "$bin" && pwd)
out=$(cd "$out" && pwd)
export CHORUS_KERNEL_CACHE="$out/kernel-cache"
rc=0
for t in "$bin"/*.test; do
  name=$(basename "$t" .test)
  case " ${TESTS:-$name} " in *" $name "*) ;; *) continue ;; esac
  # Tests read testdata relative to their package: run each in its
  # package's folder when the repository is here.
  dir=$(awk -v n="$name" '$1 == n {print $2}' "$bin/packages" 2>/dev/null)
  [ -n "$dir" ] && [ -d "$dir" ] || dir=.
  echo "== $name"
  if (cd "$dir" && "$t" -test.v -test.count=1) >"$out/$name.log" 2>&1; then
    echo "   PASS ($(grep -c '^--- PASS' "$out/$name.log") passed, $(grep -c '^--- SKIP' "$out/$name.log") skipped)"
  else
    rc=1
    echo "   FAIL"; grep -E '^\s*(--- FAIL|.*_test.go:[0-9]+:)' "$out/$name.log" | head -20
  fi
done
# With PLAN_KERNELS=1: every library plan's kernels at 2, 4 and 8 ranks
# through this machine's NVRTC (chorus plan compile, bfloat16 sum):
# registers, stack frames and spills, into plan-kernels.jsonl.
if [ "${PLAN_KERNELS:-0}" = 1 ]; then
  echo "== plan kernels (chorus plan compile)"
  pk=$(mktemp -d)
  for a in $("$bin/chorus" plan build --list | awk '$2 != "(hand-built)" {print $1}'); do
    for n in 2 4 8; do
      "$bin/chorus" plan build "$a" --ranks "$n" -o "$pk/$a-$n.json" 2>/dev/null || continue
      timeout 60 "$bin/chorus" plan compile "$pk/$a-$n.json" --json >>"$out/plan-kernels.jsonl" 2>>"$out/plan-kernels.err" || rc=1
    done
  done
  rm -rf "$pk"
  echo "   $(wc -l <"$out/plan-kernels.jsonl") kernels, $(grep -vc '"spill_store_bytes":0,' "$out/plan-kernels.jsonl") spilling"
fi
# Ranks sharing GPU 0 under MPS (docs/ipc.md, "Ranks sharing a GPU"): the
# daemon runs for this section only, with its pipe and logs in OUTDIR.
# TestGPUSharedMPS (2 and 4 ranks as processes on GPU 0, every ipc
# strategy and library plan) skips without it; TestDecoderGPU (2 and 4
# ranks share GPU 0 on a one-GPU machine: the decoder's all-reduces
# between its kernels) and TestCustomAllReduce (3 to 8 ranks as
# processes) run again beside each other's blocks instead of
# time-sliced. timeout bounds a hang.
if [ "${MPS:-1}" = 0 ]; then
  echo "== MPS: left out (MPS=0)"
elif command -v nvidia-cuda-mps-control >/dev/null 2>&1 && [ -x "$bin/algo-gpuexec.test" ]; then
  export CUDA_MPS_PIPE_DIRECTORY="$out/mps/pipe" CUDA_MPS_LOG_DIRECTORY="$out/mps/log"
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    for spec in algo-gpuexec:algo/gpuexec:TestGPUSharedMPS model-decoder:model/decoder:TestDecoderGPU runtime-session:runtime/session:TestCustomAllReduce; do
      name=${spec%%:*}; rest=${spec#*:}; dir=${rest%%:*}; test=${rest#*:}
      [ -x "$bin/$name.test" ] || continue
      [ -d "$dir" ] || dir=.
      echo "== MPS: $name $test (ranks sharing GPU 0)"
      if (cd "$dir" && timeout "${MPS_TIMEOUT:-600}" "$bin/$name.test" -test.v -test.count=1 -test.run "^$test\$") >"$out/mps-$name.log" 2>&1 &&
        grep -q "^--- PASS: $test" "$out/mps-$name.log"; then
        echo "   PASS"
      else
        rc=1
        echo "   FAIL"; grep -E '^\s*(--- (FAIL|SKIP)|.*_test.go:[0-9]+:)' "$out/mps-$name.log" | head -20
      fi
    done
    echo quit | nvidia-cuda-mps-control
  else
    rc=1
    echo "   FAIL: nvidia-cuda-mps-control -d did not start the daemon"
  fi
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
else
  echo "== MPS: nvidia-cuda-mps-control not found; the shared-GPU tests not run"
fi
exit $rc
