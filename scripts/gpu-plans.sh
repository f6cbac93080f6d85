#!/usr/bin/env bash
# The library's allreduce plans against the ccl/ipc kernels of the same
# algorithm on every GPU of the machine (one process per GPU), the way
# the GPU executor's target reads (docs/gpu-executor.md): the plans on
# IPC tensors (the kernels' own placement), 1 KB-MAX in steps of 8x,
# eager and graph-replayed, with the kernels (one-shot, two-shot) and
# NCCL in the same call; then plan-ratio.py's table. Each command is
# bounded (T seconds, default 45) so one slow plan leaves the rest of
# the call; what ran is in OUTDIR either way (14 commands, at most T
# seconds each). Run from the binaries of scripts/gpu-build.sh. With
# BASE (a folder holding another build's chorus) each plan also runs
# with that build right after this one's (version "base-ipc"), so a
# change to the GPU executor is measured before and after in one call;
# BASE_PLANS (default: all five) narrows which.
# Usage: gpu-plans.sh BINDIR OUTDIR [MAX]
#   OUTDIR/plans.jsonl, OUTDIR/plan-ratio.md, OUTDIR/errors.txt, OUTDIR/times.txt
set -uo pipefail
bin=${1:?usage: gpu-plans.sh BINDIR OUTDIR [MAX]}
out=${2:?usage: gpu-plans.sh BINDIR OUTDIR [MAX]}
max=${3:-256M}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${ngpu:-0}" -ge 2 ] || { echo "gpu-plans.sh: needs 2 or more GPUs (nvidia-smi lists ${ngpu:-0})" >&2; exit 1; }
J=$out/plans.jsonl E=$out/errors.txt
: >"$J"
start=$(date +%s)
mark() { echo "[$(($(date +%s) - start))s] $*" >>"$out/times.txt"; }
common=(--devices "$(seq -s, 0 $((ngpu - 1)))" --workers "$ngpu" --dtype bfloat16 --min 1K --max "$max" --step 8 --json)
for g in "" --graph; do
  s=${g:+-graph}
  # shellcheck disable=SC2086 # $g is empty or one flag
  timeout "${T:-45}" "$bin/chorus" bench allreduce --backend ipc --strategy oneshot,twoshot --rounds 1 "${common[@]}" $g 2>>"$E" |
    sed "s/\"backend\":\"ipc-\([a-z]*\)\"/\"backend\":\"chorus-ipc-\1$s\"/" >>"$J"
  # shellcheck disable=SC2086
  timeout "${T:-45}" "$bin/chorus" bench allreduce --backend nccl --rounds 1 "${common[@]}" $g 2>>"$E" |
    sed "s/\"backend\":\"nccl\"/\"backend\":\"chorus-nccl$s\"/" >>"$J"
  mark "kernels and NCCL ${g:-eager}"
  for a in allreduce_packet allreduce_oneshot allreduce_twoshot allreduce_twoshot_pull allpairs-allreduce; do
    # shellcheck disable=SC2086
    timeout "${T:-45}" "$bin/chorus" bench allreduce --algorithm "$a" --device cuda --ipc-tensors "${common[@]}" $g 2>>"$E" |
      sed 's/^{/{"version":"ipc",/' >>"$J"
    mark "$a ${g:-eager}"
    case " ${BASE_PLANS:-$a} " in *" $a "*) ;; *) continue ;; esac
    if [ -n "${BASE:-}" ]; then
      # shellcheck disable=SC2086
      CHORUS_KERNEL_CACHE=/tmp/chorus-kc-base timeout "${T:-45}" "$BASE/chorus" bench allreduce --algorithm "$a" --device cuda --ipc-tensors "${common[@]}" $g 2>>"$E" |
        sed 's/^{/{"version":"base-ipc",/' >>"$J"
      mark "$a ${g:-eager} (BASE)"
    fi
  done
done
python3 "$(dirname "$0")/plan-ratio.py" "$J" >"$out/plan-ratio.md" 2>>"$E"
wc -l "$J"
