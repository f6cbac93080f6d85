#!/usr/bin/env bash
# GPU benchmarks, run on a GPU machine from the binaries of
# scripts/gpu-build.sh, bf16 all-reduce, 1 KB..MAX, REPS rounds
# interleaved so machine noise hits all alike: chorus's custom IPC
# all-reduce (oneshot, twoshot, auto, and one-shot pushing IPC inputs too), chorus's NCCL backend, PyTorch's
# NCCL all_reduce and PyTorch's symmetric-memory one-shot and two-shot, and
# the link's bound (copy-engine peer copies), and chorus's DSL plans on the
# GPU executor (docs/gpu-executor.md). JSON lines go to OUTDIR;
# bench/summarize.py turns them into the ratio tables of bench/results/*/table.md (docs/benchmarks.md).
# GRAPH=1 times CUDA graph replays instead (chorus --graph, the PyTorch
# scripts' GRAPH=1); backends get a "-graph" suffix.
# Usage: gpu-bench.sh BINDIR OUTDIR [REPS] [MAX]
set -uo pipefail
bin=${1:?usage: gpu-bench.sh BINDIR OUTDIR [REPS] [MAX]}
out=${2:?usage: gpu-bench.sh BINDIR OUTDIR [REPS] [MAX]}
reps=${3:-3}
max=${4:-1G}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$ngpu" -ge 1 ] || { echo "no GPU"; exit 1; }
devs=$(seq -s, 0 $((ngpu - 1)))
maxb=$(python3 -c "import sys;s='$max';m={'K':1<<10,'M':1<<20,'G':1<<30};print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))")
here=$(cd "$(dirname "$0")" && pwd)
gflag= gsuf=
if [ "${GRAPH:-}" = 1 ]; then gflag=--graph gsuf=-graph; fi
# chorus: the strategies interleaved inside one command, 3 rounds, medians
# (each call timed with CUDA events: mean, p50, p99, max).
"$bin/chorus" bench allreduce --backend nccl --strategy "$(echo ${STRATEGIES:-auto oneshot twoshot} | tr ' ' ,)" --rounds "$reps" \
  --devices "$devs" --workers "$ngpu" --dtype bfloat16 --min 1K --max "$max" --json $gflag \
  | sed "s/\"backend\":\"ipc-\([a-z]*\)\"/\"backend\":\"chorus-ipc-\1$gsuf\"/" >>"$out/allreduce.jsonl"
"$bin/chorus" bench allreduce --backend nccl --rounds "$reps" --devices "$devs" --workers "$ngpu" --dtype bfloat16 --min 1K --max "$max" --json $gflag \
  | sed "s/\"backend\":\"nccl\"/\"backend\":\"chorus-nccl$gsuf\"/" >>"$out/allreduce.jsonl"
# chorus's DSL plans on the GPU executor (algo/gpuexec), one process per
# GPU: packet one-shot (allreduce_packet), one-shot reads (allreduce_oneshot),
# two-shot (allreduce_twoshot, and allreduce_twoshot_pull, which reads as
# ccl/ipc's two-shot does) and the hand-built all-pairs plan; backend
# chorus-plan-NAME[-graph]. Each size is calibrated (3 probe calls, then
# as many as fit in 0.5 s). PLANS overrides the list. Each plan runs on
# ordinary device tensors (staged through the executor's IPC buffers) and,
# unless PLAN_IPC=0, on IPC tensors as the ccl/ipc rows are (rows with
# "version":"ipc").
if [ "$ngpu" -ge 2 ]; then
  for r in $(seq 1 "$reps"); do
    for a in ${PLANS:-allreduce_packet allreduce_oneshot allreduce_twoshot allreduce_twoshot_pull allpairs-allreduce}; do
      "$bin/chorus" bench allreduce --algorithm "$a" --device cuda --devices "$devs" --workers "$ngpu" --dtype bfloat16 \
        --min 1K --max "$max" --json $gflag >>"$out/allreduce.jsonl" 2>>"$out/plans.err"
      if [ "${PLAN_IPC:-1}" = 1 ]; then
        "$bin/chorus" bench allreduce --algorithm "$a" --device cuda --ipc-tensors --devices "$devs" --workers "$ngpu" --dtype bfloat16 \
          --min 1K --max "$max" --json $gflag 2>>"$out/plans.err" | sed 's/^{/{"version":"ipc",/' >>"$out/allreduce.jsonl"
      fi
    done
  done
fi
# Each plan next to the hand-written ccl/ipc kernel of the same algorithm
# (packet and one-shot plans against the one-shot kernel, two-shot and
# all-pairs against the two-shot kernel), plan / kernel per size and mode.
if [ -f "$here/plan-ratio.py" ]; then
  python3 "$here/plan-ratio.py" "$out/allreduce.jsonl" >"$out/plan-ratio$gsuf.md" 2>>"$out/plans.err"
fi
# One GPU: what an op of the GPU executor costs (1-rank plans of K copy
# ops next to a device copy, eager and graph-replayed), and a 2-rank plan
# with its two processes sharing GPU 0, graph-replayed (once, in the
# eager run; SHARED=0 skips it).
if [ -z "$gflag" ] && [ "${SHARED:-1}" = 1 ]; then
  "$bin/chorus" bench planops --ops 1,8,64 --min 1K --max 16M --json >>"$out/planops.jsonl" 2>>"$out/plans.err"
  for a in allreduce_packet allreduce_twoshot; do
    "$bin/chorus" bench allreduce --algorithm "$a" --device cuda --devices 0 --workers 2 --graph --dtype bfloat16 \
      --min 1K --max 16M --step 16 --json 2>>"$out/plans.err" | sed 's/"backend":"chorus-plan-\([^"]*\)"/"backend":"chorus-plan-\1-shared"/' >>"$out/shared.jsonl"
  done
fi
# the link's bound: copy-engine peer copies, one way and both ways
if [ "$ngpu" -ge 2 ] && [ -z "$gflag" ]; then
  "$bin/chorus" bench peercopy --backend nccl --rounds "$reps" --devices "$devs" --workers "$ngpu" --dtype bfloat16 --min 1M --max "$max" --json >>"$out/peercopy.jsonl"
fi
if python3 -c 'import torch' 2>/dev/null; then
  for r in $(seq 1 "$reps"); do
    python3 "$here/torch_nccl_allreduce.py" "$maxb" >>"$out/allreduce.jsonl" 2>>"$out/torch.err"
    python3 "$here/torch_symm_mem_allreduce.py" "$maxb" >>"$out/allreduce.jsonl" 2>>"$out/torch.err"
  done
fi
# The tensor-parallel MLP on the VM, a step called and a step replayed as
# a CUDA graph, one worker per GPU (once, in the eager run).
if [ -z "$gflag" ]; then
  for g in "" --graph; do
    "$bin/chorus" bench mlp --device cuda --workers "$ngpu" --sessions process --dtype float16 --iters 200 --warmup 20 $g >>"$out/mlp.txt" 2>&1
  done
fi
wc -l "$out/allreduce.jsonl"
