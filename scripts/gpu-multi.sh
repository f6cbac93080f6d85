#!/usr/bin/env bash
# Every multi-GPU check in two device calls, from the binaries of
# scripts/gpu-build.sh (about 140 MB: carry them packed with tar cJf,
# 40 MB, under the device tool's 64 MiB), each part bounded so a call
# ends inside its limit and still returns what ran. Sections, in this order, each with
# its time limit in seconds (environment, defaults below): the GPU tests
# with CHORUS_REQUIRE_GPU set to the GPU count (T_CHECK; on 2 x H200 the
# whole set takes about 5 minutes, algo/run's library alone 2.5), the
# all-reduce eager and graph-replayed to 1 GB with the plan rows
# (T_EAGER, T_GRAPH; plans on device and on IPC tensors), the stall hunt
# (T_STRESS), decode on 1 GPU and on all of them with both LM-head
# placements (T_DECODE each), and the allgather and reduce-scatter plans
# next to NCCL from 1 MB (T_COLL, scripts/gpu-collectives.sh).
# SECTIONS (default "check eager graph stress decode coll") picks some:
# the defaults add up to more than one 10-minute call, so run, while the
# machine is warm, SECTIONS=check (360 s), then SECTIONS="eager graph"
# (480 s), then SECTIONS="stress decode coll" (390 s).
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
sections=" ${SECTIONS:-check eager graph stress decode coll} "
section() { # name limit command...
  local name=$1 limit=$2
  shift 2
  case $sections in *" ${name%-*} "*) ;; *) return 0 ;; esac
  mark "$name (at most ${limit}s)"
  timeout "$limit" "$@" >"$res/$name.txt" 2>&1
  echo "rc=$?" >>"$res/$name.txt"
}
{ nvidia-smi -L; nvidia-smi topo -m; } >"$res/gpus.txt" 2>&1
section check "${T_CHECK:-360}" env CHORUS_REQUIRE_GPU="$n" "$bin/gpu-check.sh" "$bin" "$res/check"
rm -rf "$res/check/kernel-cache"
section eager "${T_EAGER:-300}" "$bin/gpu-bench.sh" "$bin" "$res/eager" 1 1G
section graph "${T_GRAPH:-180}" env GRAPH=1 "$bin/gpu-bench.sh" "$bin" "$res/graph" 1 1G
section stress "${T_STRESS:-90}" "$bin/gpu-stress.sh" "$bin" "$res/stress" 1 2
section decode-1 "${T_DECODE:-60}" "$bin/chorus" bench decode --preset llama3-8b --workers 1 --ctx 128 --prefill 0 --launch 0 --json "$res/decode-w1.jsonl"
section decode-n "${T_DECODE:-60}" "$bin/chorus" bench decode --preset llama3-8b --workers "$n" --ctx 128 --prefill 0 --launch 0 \
  --lm-head replicated,split --batch 1,8 --json "$res/decode-w$n.jsonl"
section coll "${T_COLL:-180}" "$bin/gpu-collectives.sh" "$bin" "$res/coll" 1 1M 1G
mark done
tar czf "$out/res.tgz" -C "$(dirname "$res")" res

