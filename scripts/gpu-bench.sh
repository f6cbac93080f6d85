#!/usr/bin/env bash
# GPU benchmarks, run on a GPU machine from the binaries of
# scripts/gpu-build.sh, bf16 all-reduce, 1 KB..MAX, REPS rounds
# interleaved so machine noise hits all alike: chorus's custom IPC
# all-reduce (oneshot, twoshot, auto, and one-shot pushing IPC inputs too), chorus's NCCL backend, PyTorch's
# NCCL all_reduce and PyTorch's symmetric-memory one-shot and two-shot. JSON lines go to OUTDIR;
# bench/summarize.py turns them into the ratio tables of docs/benchmarks.md.
# GRAPH=1 times CUDA graph replays instead (chorus --graph, the PyTorch
# scripts' GRAPH=1); backends get a "-graph" suffix.
# Usage: gpu-bench.sh BINDIR OUTDIR [REPS] [MAX]
set -uo pipefail
bin=${1:?usage: gpu-bench.sh BINDIR OUTDIR [REPS] [MAX]}
out=${2:?usage: gpu-bench.sh BINDIR OUTDIR [REPS] [MAX]}
reps=${3:-2}
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
for r in $(seq 1 "$reps"); do
  echo "== round $r"
  for s in ${STRATEGIES:-auto oneshot twoshot}; do
    "$bin/chorus" bench allreduce --backend nccl --strategy "$s" --devices "$devs" --workers "$ngpu" --dtype bfloat16 --min 1K --max "$max" --json $gflag \
      | sed "s/\"backend\":\"ipc-$s\"/\"backend\":\"chorus-ipc-$s$gsuf\"/" >>"$out/allreduce.jsonl"
  done
  # one-shot pushing its IPC input as well (CHORUS_IPC_PUSH=always)
  CHORUS_IPC_PUSH=always "$bin/chorus" bench allreduce --backend nccl --strategy oneshot --devices "$devs" --workers "$ngpu" --dtype bfloat16 --min 1K --max "$max" --json $gflag \
    | sed "s/\"backend\":\"ipc-oneshot\"/\"backend\":\"chorus-ipc-push$gsuf\"/" >>"$out/allreduce.jsonl"
  "$bin/chorus" bench allreduce --backend nccl --devices "$devs" --workers "$ngpu" --dtype bfloat16 --min 1K --max "$max" --json $gflag \
    | sed "s/\"backend\":\"nccl\"/\"backend\":\"chorus-nccl$gsuf\"/" >>"$out/allreduce.jsonl"
  if python3 -c 'import torch' 2>/dev/null; then
    python3 "$here/torch_nccl_allreduce.py" "$maxb" >>"$out/allreduce.jsonl" 2>>"$out/torch.err"
    python3 "$here/torch_symm_mem_allreduce.py" "$maxb" >>"$out/allreduce.jsonl" 2>>"$out/torch.err"
  fi
done
# The tensor-parallel MLP on the VM, a step called and a step replayed as
# a CUDA graph, one worker per GPU (once, in the eager run).
if [ -z "$gflag" ]; then
  for g in "" --graph; do
    "$bin/chorus" bench mlp --device cuda --workers "$ngpu" --sessions process --dtype float16 --iters 200 --warmup 20 $g >>"$out/mlp.txt" 2>&1
  done
fi
wc -l "$out/allreduce.jsonl"
