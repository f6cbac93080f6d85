#!/usr/bin/env bash
# Every multi-GPU check in a few device calls, from the binaries of
# scripts/gpu-build.sh (about 150 MB: carry them packed with tar cJf,
# 45 MB, under the device tool's 64 MiB), each part bounded so a call
# ends inside its limit and still returns what ran. Sections, in this
# order, each with its time limit in seconds (environment, defaults
# below): the GPU tests with CHORUS_REQUIRE_GPU set to the GPU count, in
# two halves (check-a: algo, ccl, cluster, cmd, compiler/kernels, about
# 5 minutes on 2 x H200 with algo/run's library 2.5 and compiler/kernels
# 1.5; check-b: the rest and the tests under MPS; T_CHECK each), the
# library's allreduce plans on IPC tensors against their kernels to 256
# MB, eager and graph (T_PLANS, scripts/gpu-plans.sh: the GPU executor's
# target in one section; BASE=DIR adds another build's plan rows), the
# reduce-scatter and allgather plans next to NCCL at 16-256 MB, eager and
# graph (T_COLL, scripts/gpu-collectives.sh),
# the all-reduce suite eager and graph-replayed to 1 GB with PyTorch's
# rows and the plans on device and IPC tensors (T_EAGER, T_GRAPH), the
# stall hunt (T_STRESS), and decode on 1 GPU and on all of them with
# both LM-head placements (T_DECODE each).
# SECTIONS (default "check plans coll eager graph stress decode") picks
# some by name ("check" runs both halves, "check-a" one); the defaults
# add up to more than one 10-minute call, so run, while the machine is
# warm, SECTIONS="plans decode" (560 s), SECTIONS="coll stress" (330 s),
# SECTIONS=check-a, SECTIONS=check-b (570 s each), then "eager graph"
# (480 s).
# Results: OUTDIR/res.tgz (one file, so the device tool returns it).
# Usage: gpu-multi.sh BINDIR OUTDIR   (the repository root as working folder)
set -uo pipefail
bin=$(cd "${1:?usage: gpu-multi.sh BINDIR OUTDIR}" && pwd)
out=${2:?usage: gpu-multi.sh BINDIR OUTDIR}
res=$(mktemp -d)/res
mkdir -p "$res" "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${n:-0}" -ge 2 ] || { echo "gpu-multi.sh: needs 2 or more GPUs (nvidia-smi lists ${n:-0})" >&2; exit 1; }
start=$(date +%s)
mark() { echo "[$(($(date +%s) - start))s] $*" | tee -a "$res/times.txt"; }
sections=" ${SECTIONS:-check plans coll eager graph stress decode} "
section() { # name limit command...
  local name=$1 limit=$2
  shift 2
  case $sections in *" $name "* | *" ${name%-*} "*) ;; *) return 0 ;; esac
  mark "$name (at most ${limit}s)"
  timeout "$limit" "$@" >"$res/$name.txt" 2>&1
  echo "rc=$?" >>"$res/$name.txt"
}
{ nvidia-smi -L; nvidia-smi topo -m; } >"$res/gpus.txt" 2>&1
first="algo-gpuexec algo-run ccl-ipc ccl-nccl cluster cmd-chorus-internal-mlp cmd-chorus compiler-kernels"
rest=$(cd "$bin" && for t in *.test; do case " $first " in *" ${t%.test} "*) ;; *) printf '%s ' "${t%.test}" ;; esac; done)
section check-a "${T_CHECK:-570}" env CHORUS_REQUIRE_GPU="$n" TESTS="$first" MPS=0 PLAN_KERNELS=1 "$bin/gpu-check.sh" "$bin" "$res/check-a"
section check-b "${T_CHECK:-570}" env CHORUS_REQUIRE_GPU="$n" TESTS="$rest" "$bin/gpu-check.sh" "$bin" "$res/check-b"
rm -rf "$res"/check-*/kernel-cache
section plans "${T_PLANS:-380}" "$bin/gpu-plans.sh" "$bin" "$res/plans" 256M
section coll "${T_COLL:-240}" "$bin/gpu-collectives.sh" "$bin" "$res/coll" 1 16M 256M
section eager "${T_EAGER:-300}" "$bin/gpu-bench.sh" "$bin" "$res/eager" 1 1G
section graph "${T_GRAPH:-180}" env GRAPH=1 "$bin/gpu-bench.sh" "$bin" "$res/graph" 1 1G
section stress "${T_STRESS:-90}" "$bin/gpu-stress.sh" "$bin" "$res/stress" 1 2
section decode-1 "${T_DECODE:-90}" "$bin/chorus" bench decode --preset llama3-8b --workers 1 --ctx 128 --prefill 0 --launch 0 \
  --batch 1,8 --json "$res/decode-w1.jsonl"
section decode-n "${T_DECODE:-90}" "$bin/chorus" bench decode --preset llama3-8b --workers "$n" --ctx 128 --prefill 0 --launch 0 \
  --lm-head replicated,split --batch 1,8 --json "$res/decode-w$n.jsonl"
mark done
tar czf "$out/res.tgz" -C "$(dirname "$res")" res

