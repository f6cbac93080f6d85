#!/usr/bin/env bash
# Decode step times of several builds in one call, interleaved (each
# round runs the builds in order, then in reverse: ABBA...), so that a
# change is measured against the build before it on the same GPUs.
# Writes OUT/<label>-<round>.jsonl and .txt (chorus bench decode) and
# OUT/ab.md (scripts/decode-ab.py, after every round: per row the range over rounds of each
# build and each build's best against the first's).
# Usage: scripts/decode-ab.sh OUT LABEL=BINDIR [LABEL=BINDIR...] -- [chorus bench decode flags]
#   the default flags are --preset llama3-8b --batch 1,8 --ctx 128,4096
#   --modes graph --prefill 0 --launch 0 --session threaded;
#   DECODE_AB_ROUNDS (default 2) is how many rounds; DECODE_AB_TIMEOUT
#   (default 180) bounds each run in seconds.
set -uo pipefail
out=${1:?usage: decode-ab.sh OUT LABEL=BINDIR... -- [flags]}
shift
builds=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  case $1 in
  *=*) builds+=("$1") ;;
  *) echo "decode-ab.sh: $1: want LABEL=BINDIR" >&2; exit 2 ;;
  esac
  shift
done
[ $# -gt 0 ] && shift # --
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(--preset llama3-8b --batch 1,8 --ctx 128,4096 --modes graph --prefill 0 --launch 0 --session threaded)
[ ${#builds[@]} -ge 1 ] || { echo "decode-ab.sh: no LABEL=BINDIR" >&2; exit 2; }
for b in "${builds[@]}"; do
  [ -x "${b#*=}/chorus" ] || { echo "decode-ab.sh: ${b#*=}/chorus is not there" >&2; exit 2; }
done
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
rounds=${DECODE_AB_ROUNDS:-2}
labels=()
for b in "${builds[@]}"; do labels+=("${b%%=*}"); done
rc=0
for ((r = 1; r <= rounds; r++)); do
  order=("${builds[@]}")
  if ((r % 2 == 0)); then
    order=()
    for ((i = ${#builds[@]} - 1; i >= 0; i--)); do order+=("${builds[$i]}"); done
  fi
  for b in "${order[@]}"; do
    label=${b%%=*} dir=${b#*=}
    timeout "${DECODE_AB_TIMEOUT:-180}" "$dir/chorus" bench decode "${flags[@]}" --json "$out/$label-$r.jsonl" >"$out/$label-$r.txt" 2>&1
    s=$?
    echo "$label round $r rc=$s"
    [ $s -eq 0 ] || rc=1
  done
  # The table so far after every round (OUT/ab.md holds the latest), so
  # that a call cut short by its time limit still reports what it measured.
  if ((r < rounds)); then
    python3 "$(dirname "$0")/decode-ab.py" "$out" "${labels[@]}" >"$out/ab.md" && echo "after round $r:" && cat "$out/ab.md"
  fi
done
python3 "$(dirname "$0")/decode-ab.py" "$out" "${labels[@]}" | tee "$out/ab.md"
exit $rc
