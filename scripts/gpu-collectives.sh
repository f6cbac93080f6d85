#!/usr/bin/env bash
# The library's allgather and reduce-scatter plans on the GPU executor
# next to NCCL (chorus's nccl backend) on every GPU of the machine, one
# process per GPU, bfloat16, MIN..MAX (default 1M..1G, steps of 4x),
# eager and graph-replayed, the plans on ordinary device tensors and on
# IPC tensors (version "ipc"), REPS rounds interleaved; then
# plan-ratio.py's table, plan / NCCL per size and mode. Run from the
# binaries of scripts/gpu-build.sh on a machine with 2 or more GPUs.
# Usage: gpu-collectives.sh BINDIR OUTDIR [REPS] [MIN] [MAX]
#   OUTDIR/collectives.jsonl, OUTDIR/table.md, OUTDIR/errors.txt
set -uo pipefail
bin=${1:?usage: gpu-collectives.sh BINDIR OUTDIR [REPS] [MIN] [MAX]}
out=${2:?usage: gpu-collectives.sh BINDIR OUTDIR [REPS] [MIN] [MAX]}
reps=${3:-1} min=${4:-1M} max=${5:-1G}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${ngpu:-0}" -ge 2 ] || { echo "gpu-collectives.sh: needs 2 or more GPUs (nvidia-smi lists ${ngpu:-0})" >&2; exit 1; }
devs=$(seq -s, 0 $((ngpu - 1)))
J=$out/collectives.jsonl
: >"$J"
common=(--devices "$devs" --workers "$ngpu" --dtype bfloat16 --min "$min" --max "$max" --json)
for r in $(seq 1 "$reps"); do
  for g in "" --graph; do
    for coll in allgather reducescatter; do
      # shellcheck disable=SC2086 # $g is empty or one flag
      "$bin/chorus" bench "$coll" --backend nccl --rounds 1 "${common[@]}" $g 2>>"$out/errors.txt" |
        sed "s/\"backend\":\"nccl\"/\"backend\":\"chorus-nccl${g:+-graph}\"/" >>"$J"
    done
    for pair in "reducescatter reducescatter_allpairs" "allgather allgather_mesh" "allgather allgather_ring"; do
      set -- $pair
      # shellcheck disable=SC2086
      "$bin/chorus" bench "$1" --algorithm "$2" --device cuda "${common[@]}" $g 2>>"$out/errors.txt" >>"$J"
      # shellcheck disable=SC2086
      "$bin/chorus" bench "$1" --algorithm "$2" --device cuda --ipc-tensors "${common[@]}" $g 2>>"$out/errors.txt" |
        sed 's/^{/{"version":"ipc",/' >>"$J"
    done
  done
done
python3 "$(dirname "$0")/plan-ratio.py" "$J" >"$out/table.md" 2>>"$out/errors.txt"
wc -l "$J"
