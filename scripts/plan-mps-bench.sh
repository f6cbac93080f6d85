#!/usr/bin/env bash
# The library allreduce plans against the ccl/ipc kernels of the same
# algorithm, 2 ranks sharing GPU 0 under MPS, eager and graph, bfloat16,
# 1 KB-256 MB; with a second build (BASE) its plans run interleaved with
# NEW's in the same call, so a change to algo/gpuexec is measured before
# and after on one card; NEW runs twice, with ordinary device tensors
# ("new") and with the tensors in IPC memory ("new-ipc", --ipc-tensors:
# what the ccl/ipc rows get), where plans that stage a buffer reach the
# caller's tensors directly. First TestGPUSharedMPS and the algo/run GPU
# correctness tests of NEW under the same daemon, each bounded. Each
# build compiles its kernels into a cache of its own, whose resource use
# (local memory per thread) cuobjdump prints at the end, where it exists;
# with NSYS=1 and nsys there, the kernel time per call of NEW's packet
# plan and of the ccl/ipc one-shot kernel at 1 KB and 4 MB (graph replays).
# Build each folder with scripts/gpu-build.sh (BASE: from a worktree of
# the old commit; only its chorus is used). Run from the repository root
# on the GPU machine.
# RANKS (default 2) ranks share GPU 0; MIN and MAX bound the sizes;
# PLANS (default: the four allreduce plans) names the plans, BASE_PLANS
# (default PLANS) those BASE also runs; TESTS=0 skips the tests.
# Usage: scripts/plan-mps-bench.sh NEW [BASE] OUT
#   OUT/log.txt (tests, table, resource use, kernel times), OUT/bench.jsonl
#   (rows, "version": "base", "new" or "new-ipc"), OUT/table.md
#   (scripts/plan-ratio.py), OUT/mps.log, OUT/run.log
set -u
if [ $# -eq 2 ]; then new=$1 base= out=$2; elif [ $# -eq 3 ]; then new=$1 base=$2 out=$3; else
  echo "usage: $0 NEW [BASE] OUT" >&2; exit 2
fi
mkdir -p "$out"
new=$(cd "$new" && pwd) # the tests run in their package folders
L=$out/log.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } | tee "$L"
export CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/chorus-mps/pipe} CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-/tmp/chorus-mps/log}
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
if ! nvidia-cuda-mps-control -d; then echo "FAIL: nvidia-cuda-mps-control -d did not start the daemon" | tee -a "$L"; exit 1; fi
trap 'echo quit | nvidia-cuda-mps-control' EXIT
export CHORUS_REQUIRE_GPU=1
if [ "${TESTS:-1}" != 0 ]; then
t0=$(date +%s)
(cd algo/gpuexec && timeout "${MPS_TIMEOUT:-130}" "$new/algo-gpuexec.test" -test.v -test.count=1 -test.run 'TestGPUSharedMPS') >"$out/mps.log" 2>&1
echo "TestGPUSharedMPS rc=$? $(($(date +%s) - t0))s" | tee -a "$L"
grep -E '^\s*--- |wrong|us a call' "$out/mps.log" | head -80 >>"$L"
t0=$(date +%s)
(cd algo/run && timeout "${RUN_TIMEOUT:-50}" "$new/algo-run.test" -test.v -test.count=1 -test.run 'TestGPUMatchesCPU|TestGPUPlanWaitTimeout') >"$out/run.log" 2>&1
echo "algo/run GPU tests rc=$? $(($(date +%s) - t0))s" | tee -a "$L"
grep -E '^\s*--- ' "$out/run.log" | head -40 >>"$L"
fi
plans=${PLANS:-allreduce_packet allreduce_oneshot allreduce_twoshot allreduce_twoshot_pull}
J=$out/bench.jsonl
: >"$J"
common="--devices 0 --workers ${RANKS:-2} --dtype bfloat16 --min ${MIN:-1K} --max ${MAX:-256M} --step 8 --json"
for mode in "" "--graph"; do
  t0=$(date +%s)
  # shellcheck disable=SC2086 # $common and $mode are lists of flags
  timeout 120 "$new/chorus" bench allreduce --backend ipc --strategy oneshot,twoshot $common $mode 2>>"$out/bench.err" | grep '^{' >>"$J"
  echo "ipc $mode rc=${PIPESTATUS[0]} $(($(date +%s) - t0))s" | tee -a "$L"
  for algo in $plans; do
    for v in base new new-ipc; do
      dir=$new kc=new extra=
      if [ $v = base ]; then
        [ -n "$base" ] || continue
        case " ${BASE_PLANS:-$plans} " in *" $algo "*) ;; *) continue ;; esac
        dir=$base kc=base
      fi
      if [ $v = new-ipc ]; then extra=--ipc-tensors; fi
      t0=$(date +%s)
      # shellcheck disable=SC2086
      CHORUS_KERNEL_CACHE=/tmp/chorus-kc-$kc timeout 60 "$dir/chorus" bench allreduce --algorithm $algo --device cuda $common $mode $extra 2>>"$out/bench.err" |
        grep '^{' | sed "s/^{/{\"version\":\"$v\",/" >>"$J"
      echo "$algo $v $mode rc=${PIPESTATUS[0]} $(($(date +%s) - t0))s" | tee -a "$L"
    done
  done
done
python3 "$(dirname "$0")/plan-ratio.py" "$J" | tee "$out/table.md" >>"$L"
od=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
if [ -x "$od" ]; then
  for kc in base new; do
    for f in /tmp/chorus-kc-$kc/*.cubin; do
      [ -e "$f" ] || continue
      echo "$kc $(basename "$f"): $("$od" -res-usage "$f" 2>&1 | grep -A1 chorus_plan | tr -s ' \n' ' ')"
    done
  done | tee -a "$L"
fi
ns=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ "${NSYS:-0}" = 1 ] && [ -n "$ns" ]; then
  # Kernel time per call (graph replays) of NEW's packet plan and the
  # ccl/ipc one-shot kernel: what the rows above spend outside the kernel.
  for size in 1K 4M; do
    for what in plan ipc; do
      args="--algorithm allreduce_packet --device cuda"
      [ $what = ipc ] && args="--backend ipc --strategy oneshot"
      # shellcheck disable=SC2086
      CHORUS_KERNEL_CACHE=/tmp/chorus-kc-new timeout 60 "$ns" profile --trace=cuda --force-overwrite=true -o "/tmp/nsys-$what-$size" \
        "$new/chorus" bench allreduce $args --devices 0 --workers ${RANKS:-2} --dtype bfloat16 --min $size --max $size --graph --json >/dev/null 2>>"$out/bench.err"
      echo "nsys $what $size rc=$?" | tee -a "$L"
      timeout 60 "$ns" stats --report cuda_gpu_kern_sum --format csv "/tmp/nsys-$what-$size.nsys-rep" 2>>"$out/bench.err" | grep -E 'chorus_plan|oneshot|Name' | tee -a "$L"
    done
  done
fi
date -u | tee -a "$L"
