#!/usr/bin/env bash
# Stall hunt for the custom all-reduce, on a GPU machine, from
# the binaries of scripts/gpu-build.sh. It alternates sizes, strategies,
# eager and graph-replayed runs, each a separate single-size command (the
# situation in which 0.5 ms stalls were seen), PASSES times in shuffled
# order, and fails when a run's mean time per call is more than FACTOR
# times the best mean of the same (size, strategy, mode), or its p99 is
# more than FACTOR times its own p50.
# One GPU: a single worker (the kernels and barriers run, with no peer);
# several GPUs: one worker per GPU. Ranks sharing a GPU time-slice, so
# their timings mean nothing and are not used here.
# Usage: gpu-stress.sh BINDIR OUTDIR [PASSES] [FACTOR]
set -uo pipefail
bin=${1:?usage: gpu-stress.sh BINDIR OUTDIR [PASSES] [FACTOR]}
out=${2:?usage: gpu-stress.sh BINDIR OUTDIR [PASSES] [FACTOR]}
passes=${3:-3}
factor=${4:-2}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$ngpu" -ge 1 ] || { echo "no GPU"; exit 1; }
devs=$(seq -s, 0 $((ngpu - 1)))
sizes=${SIZES:-"1K 64K 256K 1M 4M 16M 64M"}
strategies=${STRATEGIES:-"auto oneshot twoshot"}
log="$out/stress.jsonl"
: >"$log"
runs=()
for s in $sizes; do for st in $strategies; do for g in eager graph; do runs+=("$s $st $g"); done; done; done
for p in $(seq 1 "$passes"); do
  echo "== pass $p of $passes (${#runs[@]} runs, $ngpu GPU(s))"
  printf '%s\n' "${runs[@]}" | shuf | while read -r s st g; do
    flag=; [ "$g" = graph ] && flag=--graph
    "$bin/chorus" bench allreduce --backend nccl --strategy "$st" --devices "$devs" --workers "$ngpu" \
      --dtype bfloat16 --min "$s" --max "$s" --rounds 1 --json $flag 2>>"$out/stress.err" \
      | sed "s/}\$/,\"mode\":\"$g\",\"pass\":$p}/" >>"$log" || echo "   run failed: $s $st $g (see stress.err)"
  done
done
python3 - "$log" "$factor" <<'PY'
import json, sys
from collections import defaultdict
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
factor = float(sys.argv[2])
best = defaultdict(lambda: float("inf"))
for r in rows:
    k = (r["bytes"], r["backend"], r["mode"])
    best[k] = min(best[k], r["time_us"])
bad = 0
print(f"{'bytes':>10} {'algorithm':>12} {'mode':>5} {'pass':>4} {'mean':>9} {'best':>9} {'p50':>9} {'p99':>9} {'max':>9} wrong")
for r in sorted(rows, key=lambda r: (r["bytes"], r["backend"], r["mode"], r["pass"])):
    k = (r["bytes"], r["backend"], r["mode"])
    flags = []
    if r["time_us"] > factor * best[k]:
        flags.append(f"mean > {factor}x best")
    if r["p99_us"] > factor * r["p50_us"]:
        flags.append(f"p99 > {factor}x p50")
    if r["wrong"]:
        flags.append("WRONG")
    bad += bool(flags)
    print(f"{r['bytes']:>10} {r['backend']:>12} {r['mode']:>5} {r['pass']:>4} {r['time_us']:9.2f} {best[k]:9.2f} "
          f"{r['p50_us']:9.2f} {r['p99_us']:9.2f} {r['max_us']:9.2f} {r['wrong']} {' '.join(flags)}")
print(f"{len(rows)} runs, {bad} flagged")
sys.exit(1 if bad or not rows else 0)
PY
