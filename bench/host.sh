#!/usr/bin/env bash
# Everything measured about a host's use, in one run on the host it starts on:
#   1. the host's memory bandwidth (chorus bench membw: STREAM-like copy, triad);
#   2. session latency (chorus bench session), threaded and process/shm,
#      1, 2, 4, 8, 16 workers (bounded by the CPUs);
#   3. float32 SUM allreduce 1K..64M, 2, 4, 8, 16 workers (bounded by the
#      CPUs), chorus cpu backend in process and threaded sessions, next to
#      gloo (torch.distributed, where torch imports) and Open MPI (where
#      mpirun and mpicc exist, or can be installed with apt-get);
# and writes OUTDIR/host.jsonl (every JSON line) and OUTDIR/host.md (tables
# with ratios to the anchors and fractions of the memory-bandwidth bound).
# What is missing is skipped with a NOTE line saying so, never silently.
#
# Usage: bench/host.sh [BINDIR] [OUTDIR]
#   BINDIR holds a prebuilt chorus (scripts/gpu-build.sh puts it, this
#   script and the anchors' sources in .carry/gpu); without it, chorus is
#   built here with Go. OUTDIR defaults to a new mktemp -d.
# Env: HOST_MAX_WORKERS  most workers (default min(16, CPUs))
#      HOST_ROUNDS       interleaved rounds of each chorus allreduce sweep (default 1)
#      HOST_INSTALL      1: apt-get install openmpi-bin libopenmpi-dev
#                        python3-torch when missing (default 1 if root and
#                        apt-get exists; installing needs the network)
#      HOST_REPS         anchor repetitions per size, median kept (default 3)
#      HOST_TARGET_S     anchor seconds per size and rep (default 0.2)
#      HOST_ITERS        session iterations per row (default 20000)
#      HOST_MODE_ITERS   iterations per row of the wait-policy session runs (default 5000)
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=${1:-}
out=${2:-$(mktemp -d -t chorus-host.XXXXXX)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
ncpu=$(nproc)
maxw=${HOST_MAX_WORKERS:-$((ncpu < 16 ? ncpu : 16))}
reps=${HOST_REPS:-3}
target=${HOST_TARGET_S:-0.2}
iters=${HOST_ITERS:-20000}
jsonl=$out/host.jsonl
notes=$out/notes.txt
: >"$jsonl"
: >"$notes"
log() { printf '== %s\n' "$*" >&2; }
note() { printf 'NOTE %s\n' "$*" | tee -a "$notes" >&2; }

# Sources of the anchors: next to this script in BINDIR, or in the repo.
src() {
  for d in "$bin" "$here" "$here/anchors"; do
    [ -n "$d" ] && [ -f "$d/$1" ] && { echo "$d/$1"; return 0; }
  done
  return 1
}

# ---- chorus ------------------------------------------------------------------
if [ -n "$bin" ]; then
  chorus=$bin/chorus
  [ -x "$chorus" ] || { echo "host.sh: $chorus not found (build it with scripts/gpu-build.sh)" >&2; exit 1; }
else
  command -v go >/dev/null || { echo "host.sh: no BINDIR given and no go to build chorus" >&2; exit 1; }
  mkdir -p "$out/bin"
  (cd "$here/.." && CGO_ENABLED=0 go build -o "$out/bin/chorus" ./cmd/chorus) || exit 1
  chorus=$out/bin/chorus
fi

# Worker counts: powers of two up to maxw (sessions from 1, collectives from 2).
ws=()
for n in 1 2 4 8 16; do [ "$n" -le "$maxw" ] && ws+=("$n"); done
cws=()
for n in "${ws[@]}"; do [ "$n" -ge 2 ] && cws+=("$n"); done
[ ${#cws[@]} -eq 0 ] && cws=(2)

# ---- anchors: install what is missing, where we may ------------------------
install=${HOST_INSTALL:-}
if [ -z "$install" ]; then
  install=0
  [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null && install=1
fi
py=
for p in /usr/bin/python3 python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
    py=$p
    break
  fi
done
need=()
command -v mpirun >/dev/null || need+=(openmpi-bin)
command -v mpicc >/dev/null || need+=(libopenmpi-dev)
[ -z "$py" ] && need+=(python3-torch)
if [ ${#need[@]} -gt 0 ] && [ "$install" = 1 ]; then
  log "installing ${need[*]} (apt-get; needs the network)"
  if timeout 120 apt-get update -qq >/dev/null 2>&1 &&
    DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq "${need[@]}" >/dev/null 2>&1; then
    log "installed ${need[*]}"
  else
    note "apt-get install ${need[*]} failed (no network or no such packages)"
  fi
  [ -z "$py" ] && /usr/bin/python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null && py=/usr/bin/python3
fi

mpi=
if command -v mpirun >/dev/null; then
  if command -v mpicc >/dev/null && s=$(src mpi_allreduce.c); then
    mpicc -O2 -o "$out/mpi_allreduce" "$s" -lm && mpi=$out/mpi_allreduce
  fi
  [ -z "$mpi" ] && note "Open MPI skipped: mpicc or mpi_allreduce.c missing (mpirun exists)"
else
  note "Open MPI skipped: mpirun not found"
fi
[ -z "$py" ] && note "gloo skipped: torch.distributed with gloo does not import"

{
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# host: $(hostname), $ncpu CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -srm)"
  echo "# chorus: $chorus"
  [ -n "$mpi" ] && echo "# openmpi: $(mpirun --version 2>/dev/null | head -1)"
  [ -n "$py" ] && echo "# torch: $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null) ($py)"
  echo "# session workers: ${ws[*]}; collective workers: ${cws[*]}"
  # What the session wait policy depends on (docs/performance.md): CPUs,
  # hyper-threads, a cgroup CPU limit, the clock source, timer slack.
  echo "# cpus: $(lscpu 2>/dev/null | awk -F: '/^Thread\(s\) per core|^Core\(s\) per socket|^Socket\(s\)|^NUMA node\(s\)/ {gsub(/^ +/, "", $2); printf "%s=%s; ", $1, $2}')affinity $(taskset -pc $$ 2>/dev/null | sed 's/.*: //')"
  echo "# cgroup cpu.max: $(cat /sys/fs/cgroup/cpu.max 2>/dev/null || echo none); clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null); timerslack_ns: $(cat /proc/self/timerslack_ns 2>/dev/null); cpuidle: $(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || echo none)"
} | tee "$out/versions.txt" >&2

# ---- 1. memory bandwidth -----------------------------------------------------
log "memory bandwidth"
"$chorus" bench membw --json | tee -a "$jsonl" >&2
bw=$(tail -1 "$jsonl" | sed -n 's/.*"copy_gbs":\([0-9.e+-]*\).*"triad_gbs":\([0-9.e+-]*\).*/\1 \2/p' | awk '{print ($1 > $2) ? $1 : $2}')

# ---- 2. session latency -------------------------------------------------------
log "session latency, workers ${ws[*]}"
wl=$(IFS=,; echo "${ws[*]}")
"$chorus" bench session --sessions threaded,process-shm --workers "$wl" --iters "$iters" --json | tee -a "$jsonl" >&2 ||
  note "chorus bench session failed"
# The threaded session under each wait policy, back to back (waiters poll)
# and with the controller idle 200 us before each round (every round wakes
# parked workers), and process/shm idle: where a slow row comes from.
miters=${HOST_MODE_ITERS:-5000}
for mode in busy yield park auto; do
  log "threaded session, CHORUS_SESSION_WAIT=$mode"
  if [ "$mode" != auto ]; then
    CHORUS_SESSION_WAIT=$mode "$chorus" bench session --sessions threaded --workers "$wl" --iters "$miters" --warmup 500 --json |
      tee -a "$jsonl" >&2 || note "chorus bench session with CHORUS_SESSION_WAIT=$mode failed"
  fi
  CHORUS_SESSION_WAIT=$mode "$chorus" bench session --sessions threaded --workers "$wl" --iters 1000 --warmup 100 --idle 200us --json |
    tee -a "$jsonl" >&2 || note "chorus bench session --idle 200us with CHORUS_SESSION_WAIT=$mode failed"
done
"$chorus" bench session --sessions process-shm --workers "$wl" --iters 1000 --warmup 100 --idle 200us --json |
  tee -a "$jsonl" >&2 || note "chorus bench session process-shm --idle 200us failed"

# ---- 3. allreduce ------------------------------------------------------------
for n in "${cws[@]}"; do
  for s in process threaded; do
    log "chorus allreduce, $s session, $n workers"
    "$chorus" bench allreduce --backend cpu --session "$s" --workers "$n" --dtype float32 --min 1K --max 64M --rounds "${HOST_ROUNDS:-1}" --membw "${bw:-0}" --json |
      tee -a "$jsonl" >&2 || note "chorus allreduce $s $n failed"
  done
  if [ -n "$mpi" ]; then
    log "Open MPI allreduce, $n ranks"
    flags=(-np "$n")
    [ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
    [ "$ncpu" -lt "$n" ] && flags+=(--oversubscribe)
    timeout 900 mpirun "${flags[@]}" "$mpi" "$target" "$reps" 2>"$out/mpi-$n.err" | tee -a "$jsonl" >&2 ||
      note "Open MPI with $n ranks failed: $(tail -2 "$out/mpi-$n.err" | tr '\n' ' ')"
  fi
  if [ -n "$py" ] && g=$(src gloo_allreduce.py); then
    log "gloo allreduce, $n ranks"
    timeout 900 "$py" "$g" --workers "$n" --target "$target" --reps "$reps" 2>"$out/gloo-$n.err" | tee -a "$jsonl" >&2 ||
      note "gloo with $n ranks failed: $(tail -2 "$out/gloo-$n.err" | tr '\n' ' ')"
  fi
done

# ---- 4. (the allreduce experiments of settled settings: one-shot limit,
# staging instead of cma, one thread per rank, shared tensors off; their
# variables became the code, docs/configuration.md)

# ---- tables -------------------------------------------------------------------
summ=$(src host_summary.py) || { note "host_summary.py missing: no table"; exit 0; }
if command -v python3 >/dev/null; then
  python3 "$summ" "$jsonl" "$out/versions.txt" "$notes" | tee "$out/host.md"
else
  note "no python3: no table (the JSON lines are in $jsonl)"
fi
log "wrote $jsonl and $out/host.md"
