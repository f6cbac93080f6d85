#!/usr/bin/env bash
# Comparison anchors for chorus's CPU allreduce, in one run:
#   a. Open MPI  MPI_Allreduce           (mpi_allreduce.c, mpirun -np 2)
#   b. gloo      torch.distributed       (gloo_allreduce.py, 2 spawned processes)
#   c. chorus    chorus bench allreduce  (skipped with a note if the CLI lacks it)
# float32 SUM, 2 workers, 1 KB .. 64 MB in steps of 4x.
#
# Usage: bench/anchors/run.sh [outdir]          (any cwd; default outdir: mktemp -d)
# Env:   ANCHORS_TARGET_S  seconds of timed calls per rep (default 0.2)
#        ANCHORS_REPS      timed reps per size and backend; median reported (default 3)
# Writes $outdir/anchors.jsonl (all JSON lines) and $outdir/anchors.md (table).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$(mktemp -d -t chorus-anchors.XXXXXX)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
target=${ANCHORS_TARGET_S:-0.2}
reps=${ANCHORS_REPS:-3}
workers=2
# Debian's python3-torch lives in /usr/lib/python3/dist-packages: use the
# system interpreter, not whatever python3 (pyenv, venv) comes first in PATH.
py=/usr/bin/python3

log() { printf '== %s\n' "$*" >&2; }
die() { printf 'run.sh: error: %s\n' "$*" >&2; exit 1; }

# ---- 1. install what is missing (a second run installs nothing) ------------
need=()
for p in openmpi-bin libopenmpi-dev python3-torch; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
command -v mpicc >/dev/null 2>&1 || need+=(libopenmpi-dev)
command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin)
if ((${#need[@]})); then
  mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "not root and no sudo: install ${need[*]} by hand"
    sudo=(sudo)
  fi
  log "installing: ${need[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${need[@]}" >&2 \
    || die "apt-get install ${need[*]} failed"
else
  log "openmpi-bin, libopenmpi-dev, python3-torch already installed"
fi
[ -x "$py" ] || die "$py not found (python3-torch needs Debian's python3)"
"$py" -c 'import torch.distributed as d; assert d.is_available() and d.is_gloo_available()' \
  || die "torch.distributed with gloo is not usable from $py"

# ---- Open MPI in this container ---------------------------------------------
# No OMPI_MCA_* variable is needed here (tested in a Debian 12 container as
# root: ob1 + vader shared memory, CMA single-copy works). Flags:
# --allow-run-as-root: only when root (mpirun refuses to start as root otherwise).
# --oversubscribe: only when the machine has fewer CPUs than ranks.
# If a container denies process_vm_readv (no CAP_SYS_PTRACE), large messages
# fail with "Read -1, expected ...": then run with
# OMPI_MCA_btl_vader_single_copy_mechanism=none (mpirun passes it on).
mpirun_flags=(-np "$workers")
[ "$(id -u)" -eq 0 ] && mpirun_flags+=(--allow-run-as-root)
[ "$(nproc)" -lt "$workers" ] && mpirun_flags+=(--oversubscribe)

jsonl="$out/anchors.jsonl"
: >"$jsonl"
{
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -srm)"
  echo "# openmpi: $(ompi_info --version 2>/dev/null | head -1)"
  echo "# torch: $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  echo "# debian packages: $(dpkg-query -W -f '${Package} ${Version}, ' openmpi-bin python3-torch | sed 's/, $//')"
} | tee "$out/versions.txt" >&2

# ---- a. Open MPI -----------------------------------------------------------
log "a. Open MPI: mpicc -O2 + mpirun ${mpirun_flags[*]}"
mpicc -O2 -o "$out/mpi_allreduce" "$here/mpi_allreduce.c" -lm
mpirun "${mpirun_flags[@]}" "$out/mpi_allreduce" "$target" "$reps" | tee -a "$jsonl" \
  || die "mpirun failed (see above)"

# ---- b. gloo ---------------------------------------------------------------
log "b. torch.distributed gloo: $py gloo_allreduce.py"
"$py" "$here/gloo_allreduce.py" --workers "$workers" --target "$target" --reps "$reps" | tee -a "$jsonl" \
  || die "gloo benchmark failed (see above)"

# ---- c. chorus (optional: another engineer is writing `bench allreduce`) ---
log "c. chorus bench allreduce --backend cpu"
chorus_note=""
if ! command -v go >/dev/null 2>&1; then
  chorus_note="skipped: go not found in PATH"
elif ! (cd "$repo" && CGO_ENABLED=0 go build -o "$out/chorus" ./cmd/chorus) 2>"$out/chorus-build.err"; then
  chorus_note="skipped: go build ./cmd/chorus failed: $(head -3 "$out/chorus-build.err" | tr '\n' ' ')"
else
  set +e
  : >"$out/chorus.jsonl"
  rc=0
  # Same rules as the anchors: $reps repetitions, the median is reported.
  for _ in $(seq "$reps"); do
    (cd "$repo" && "$out/chorus" bench allreduce --backend cpu --session process \
        --workers "$workers" --dtype float32 --min 1K --max 64M --json) \
        >>"$out/chorus.jsonl" 2>"$out/chorus.err" || { rc=$?; break; }
  done
  set -e
  if [ "$rc" -eq 0 ]; then
    "$py" - "$out/chorus.jsonl" <<'MEDIAN' | tee -a "$jsonl" || chorus_note="ran, but printed no JSON line"
import json, sys, statistics
by = {}
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        by.setdefault(r["bytes"], []).append(r)
for b in sorted(by):
    rs = sorted(by[b], key=lambda r: r["time_us"])
    med = rs[len(rs) // 2]
    med["wrong"] = max(r["wrong"] for r in rs)
    print(json.dumps(med, separators=(",", ":")))
MEDIAN
  elif grep -q 'unknown benchmark' "$out/chorus.err"; then
    chorus_note="skipped: this chorus has no 'bench allreduce' yet ($(head -1 "$out/chorus.err"))"
  else
    chorus_note="failed (exit $rc): $(head -3 "$out/chorus.err" | tr '\n' ' ')"
    grep '^{' "$out/chorus.jsonl" >>"$jsonl" || true
  fi
fi
[ -n "$chorus_note" ] && log "NOTE chorus: $chorus_note"

# ---- table -----------------------------------------------------------------
"$py" - "$jsonl" "$out/anchors.md" "$out/versions.txt" "$chorus_note" <<'EOF'
import json, sys
src, dst, versions, note = sys.argv[1:5]
rows = {}
for line in open(src):
    if line.startswith("{"):
        r = json.loads(line)
        rows.setdefault(r["bytes"], {})[r["backend"]] = r
def size(b):
    for u, s in ((1 << 20, "M"), (1 << 10, "K")):
        if b >= u and b % u == 0:
            return f"{b // u}{s}"
    return str(b)
def us(r):
    return "-" if r is None else f"{r['time_us']:.2f}" + ("" if not r["wrong"] else f" ({r['wrong']} WRONG)")
def ratio(a, b):
    return "-" if a is None or b is None else f"{a['time_us'] / b['time_us']:.2f}"
lines = [l.rstrip("\n") for l in open(versions)]
lines += ["", "float32 SUM allreduce, 2 workers, time per call in microseconds (max over ranks of the average per call, median of the reps).", ""]
lines += ["| size | openmpi us | gloo us | chorus us | chorus/openmpi | gloo/chorus |",
          "| ---: | ---: | ---: | ---: | ---: | ---: |"]
for b in sorted(rows):
    m, g, c = (rows[b].get(k) for k in ("openmpi", "gloo", "cpu"))
    lines.append(f"| {size(b)} | {us(m)} | {us(g)} | {us(c)} | {ratio(c, m)} | {ratio(g, c)} |")
if note:
    lines += ["", f"chorus: {note}"]
text = "\n".join(lines) + "\n"
open(dst, "w").write(text)
print(text)
EOF
log "wrote $jsonl and $out/anchors.md"
