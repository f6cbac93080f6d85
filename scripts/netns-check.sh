#!/usr/bin/env bash
# netns-check.sh: multi-host sessions between network namespaces on one
# machine. It makes a controller namespace holding a bridge and HOSTS host
# namespaces, each joined to the bridge by a veth pair whose host end is
# shaped with tc netem (RATE, DELAY one way), runs one node agent per host
# namespace and the controller in its own, and runs:
#   - the cross-host suite (`chorus cluster check`) with a token, and with
#     mutual TLS on two hosts;
#   - fault tests: an agent SIGKILLed, SIGSTOPped, and cut off (its link
#     down): the controller must report the host within DEADLINE plus one
#     heartbeat, and no process may be left in any namespace;
#   - with --bench OUTDIR: allreduce sweeps on 2 and 4 hosts x 1 and 2
#     workers (float32, 1 KiB to 256 MiB), the session round trip, and the
#     anchors in the same namespaces: a plain TCP and a TLS 1.3 stream
#     between two hosts (`chorus cluster bench stream`), torch gloo and
#     Open MPI if installed; JSON lines in OUTDIR.
#
# Options (before --bench): --rate RATE (e.g. 1gbit; default 10gbit, or
# $RATE); without netem the tbf bucket is 1 ms at the rate ($BURST bytes
# overrides it). Environment for measurements: BENCH_ONLY=1 skips the suite and
# the fault tests; BENCH_SHAPES ("2x1 2x2 4x1 4x2"), BENCH_MIN (1K),
# BENCH_MAX (256M) narrow the sweeps, BENCH_STEP (4) is chorus's size
# multiplier between rows, BENCH_MPI=0 leaves Open MPI out,
# BENCH_GLOO=0 gloo, BENCH_STREAMS=0 the stream anchors (profiling runs); CHORUS_CPUPROFILE=DIR makes every
# worker write a CPU profile to DIR/<run>/worker-<id>.pprof; BENCH_OLD_BIN=PATH
# (another chorus binary) adds an old/new A/B: before every shape of
# BENCH_AB_SHAPES (default all) the sweep also runs with that binary
# (allreduce-*-old.jsonl); BENCH_PLAIN=1 also runs every shape with plaintext
# data links (CHORUS_HIER_PLAINTEXT=1 on every agent; allreduce-*-plain.jsonl;
# with BENCH_OLD_BIN the old binary too, right before: *-old-plain.jsonl);
# (BENCH_STRIPES and BENCH_STRIPE_MIN, the sweeps per stripe setting, are
# refused: the stripes are the code's measured choice.) MPI_SHAPES ("2x1 2x2 4x1 4x2")
# narrows the Open MPI anchor, MPI_ARGS adds mpirun arguments, MPI_UTS=0
# keeps the host namespaces' hostname (by default each gets its own with
# unshare --uts, where unshare exists); a failed run leaves its stderr in
# OUTDIR/openmpi-*.err. BENCH_NSTAT=1 records every sweep's TCP counters and
# qdisc statistics per host (OUTDIR/<sweep>.netstat); BENCH_CC (e.g. reno)
# sets the host namespaces' TCP congestion control; BENCH_GLOO_TARGET
# (seconds of timed calls per rep, default 0.1) and BENCH_GLOO_REPS (default
# 1; the median is reported) lengthen the gloo anchor's window.
# BENCH_UPLINK=1 samples every host uplink about every millisecond during
# each chorus sweep (bench/uplink.py: tx bytes of eth0) and writes
# OUTDIR/<sweep>.uplink.txt: the stretches the link ran at 90% or more,
# their exact use, and the idle spells between them (BENCH_UPLINK=keep
# also keeps the samples, OUTDIR/<sweep>.h<i>.tx, about 2 MB per host and
# minute).
# BENCH_HOSTS (default 4) is how many host namespaces --bench makes (the
# most hosts of any shape, e.g. 8 for "8x1").
# BENCH_ENVS ("LABEL:VAR=V,VAR=V ...") runs every new-binary sweep once
# per variant with those variables on every agent (allreduce-*-vLABEL.jsonl),
# e.g. tuning variables against the defaults.
# Only addresses inside these namespaces are used (10.77.0.0/24), and every
# namespace the script made is removed on exit, whatever happens.
#
# Needs root (to create namespaces), ip and tc (iproute2), Go (unless
# CHORUS_BIN names a built chorus binary); PYTHON (default /usr/bin/python3)
# is the Python whose torch runs the gloo anchor. Exit status 77: cannot
# run here.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -n "${BENCH_STRIPES:-}${BENCH_STRIPE_MIN:-}" ]; then
  echo "netns-check.sh: BENCH_STRIPES and BENCH_STRIPE_MIN are gone: the stripes are the code's measured choice (docs/multi-host.md)" >&2
  exit 2
fi
HOSTS=${HOSTS:-3}
WORKERS=${WORKERS:-2}
RATE=${RATE:-10gbit}
DELAY=${DELAY:-50us}
DEADLINE=${DEADLINE:-3s}
PY=${PYTHON:-/usr/bin/python3}
HEARTBEAT=${HEARTBEAT:-1s}
BENCH_OUT=""
if [ "${1:-}" = "--rate" ]; then
  RATE=${2:?usage: netns-check.sh [--rate RATE] [--bench OUTDIR]}
  shift 2
fi
if [ "${1:-}" = "--bench" ]; then
  BENCH_OUT=${2:?usage: netns-check.sh [--bench OUTDIR]}
  mkdir -p "$BENCH_OUT"
  HOSTS=${BENCH_HOSTS:-4}
fi

skip() { echo "netns-check: SKIPPED: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "not root (creating network namespaces needs CAP_SYS_ADMIN)"
command -v ip >/dev/null || skip "ip (iproute2) not installed"
command -v tc >/dev/null || skip "tc (iproute2) not installed"
ip netns add "chorus-probe-$$" 2>/dev/null || skip "cannot create a network namespace here"
ip netns del "chorus-probe-$$"

TMP=$(mktemp -d /tmp/chorus-netns.XXXXXX)
P="c16-$$"            # namespace prefix, unique per run
CTL="$P-ctl"
NS=()
PIDS=()
AGENT_ENV=()

cleanup() {
  set +e
  for pid in "${PIDS[@]}"; do kill -CONT "$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null; done
  for ns in "${NS[@]}" "$CTL"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

BIN=${CHORUS_BIN:-}
if [ -z "$BIN" ]; then
  BIN="$TMP/chorus"
  CGO_ENABLED=0 go build -o "$BIN" ./cmd/chorus
fi

# tbf's bucket: 1 ms at the rate (1.25 MB at 10 Gbit/s, 125 KB at 1
# Gbit/s; at least 64 KiB, one GSO packet). A real link never sends above
# its rate; a bucket lets a host do so for as long as it holds. It once
# held 4 ms: that gave a program timed in windows that start
# idle (gloo's anchor: 1 s windows) up to 0.4% for free, and hid gaps of
# up to 4 ms in a busy link (they were made up at veth speed after). 128
# KB made tbf's own timer the limit (gloo 1.04-1.23x the wire bound);
# 1 MB let a single flow reach the wire bound (gloo 1.000-1.004x).
# docs/multi-host.md, "The link model".
rate_bits() { # 10gbit, 500mbit, 100kbit -> bits per second
  local n=${1%%[a-zA-Z]*} u=${1##*[0-9]}
  case $u in gbit) echo $((n * 1000000000)) ;; mbit) echo $((n * 1000000)) ;; kbit) echo $((n * 1000)) ;; *) echo "$n" ;; esac
}
BURST=${BURST:-$(( $(rate_bits "$RATE") / 8 / 1000 ))}
[ "$BURST" -ge 65536 ] 2>/dev/null || BURST=65536

# --- topology: bridge in the controller namespace, a shaped veth per host
ip netns add "$CTL"
ip -n "$CTL" link set lo up
ip -n "$CTL" link add br0 type bridge
ip -n "$CTL" addr add 10.77.0.254/24 dev br0
ip -n "$CTL" link set br0 up
CTL_ADDR=10.77.0.254
for i in $(seq 0 $((HOSTS - 1))); do
  ns="$P-h$i"
  ip netns add "$ns"
  NS+=("$ns")
  ip -n "$ns" link set lo up
  # BENCH_CC: the host namespaces' TCP congestion control (a namespace
  # may only pick one of net.ipv4.tcp_allowed_congestion_control).
  [ -n "${BENCH_CC:-}" ] && ip netns exec "$ns" sysctl -q -w net.ipv4.tcp_congestion_control="$BENCH_CC"
  ip -n "$ns" link add eth0 type veth peer name "h$i" netns "$CTL"
  ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$CTL" link set "h$i" master br0
  ip -n "$CTL" link set "h$i" up
  if ! ip netns exec "$ns" tc qdisc add dev eth0 root netem delay "$DELAY" rate "$RATE" limit 100000 2>/dev/null; then
    # Kernels without sch_netem (e.g. minimal VM kernels): a token bucket
    # limits the rate; no delay can be added.
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$RATE" burst "$BURST" latency 10ms
    SHAPE="$RATE (tbf burst $BURST: this kernel has no netem, so no added delay)"
  fi
done
echo "netns-check: $HOSTS hosts, $WORKERS workers each, host uplinks ${SHAPE:-$RATE with $DELAY one way (netem)}, controller in $CTL"

"$BIN" cert token -o "$TMP/token" >/dev/null
"$BIN" cert ca --dir "$TMP" >/dev/null
"$BIN" cert node --dir "$TMP" --name node >/dev/null
TOKEN=(--token-file "$TMP/token")
MTLS=(--ca "$TMP/ca.pem" --cert "$TMP/node.pem" --key "$TMP/node-key.pem")
PORT=29400

# run_session NAME NHOSTS WORKERS CRED-MODE CONTROLLER-ARGS...: start the
# controller in the controller namespace and one agent per host; leaves
# CTLPID and AGENTS set, output in $TMP/NAME.*
run_session() {
  local name=$1 nh=$2 nw=$3 mode=$4; shift 4
  local cred=("${TOKEN[@]}")
  [ "$mode" = mtls ] && cred=("${MTLS[@]}")
  PORT=$((PORT + 1))
  local prof=(${AGENT_ENV[@]+"${AGENT_ENV[@]}"})
  if [ -n "${CHORUS_CPUPROFILE:-}" ]; then
    mkdir -p "$CHORUS_CPUPROFILE/$name"
    prof+=(CHORUS_CPUPROFILE="$CHORUS_CPUPROFILE/$name")
  fi
  ip netns exec "$CTL" "$BIN" "$@" --listen "$CTL_ADDR:$PORT" --nodes "$nh" \
    --heartbeat "$HEARTBEAT" --deadline "$DEADLINE" "${cred[@]}" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  CTLPID=$!
  PIDS+=("$CTLPID")
  AGENTS=()
  for i in $(seq 0 $((nh - 1))); do
    ip netns exec "${NS[$i]}" env "${prof[@]}" "$BIN" node --connect "$CTL_ADDR:$PORT" --workers "$nw" --node-rank "$i" \
      --connect-timeout 30s "${cred[@]}" >"$TMP/$name.a$i" 2>&1 &
    AGENTS+=($!)
    PIDS+=($!)
  done
}

fail() {
  echo "netns-check: FAIL: $*"
  for f in "$TMP"/*.out "$TMP"/*.err "$TMP"/*.a*; do [ -s "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done
  exit 1
}

# no_process_left: every host namespace is empty within 5 s.
no_process_left() {
  local ns left
  for _ in $(seq 50); do
    left=""
    for ns in "${NS[@]}"; do left="$left$(ip netns pids "$ns")"; done
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  for ns in "${NS[@]}"; do
    for pid in $(ip netns pids "$ns"); do echo "left in $ns: $(tr '\0' ' ' </proc/$pid/cmdline)"; done
  done
  return 1
}

wait_for() { # file pattern seconds
  for _ in $(seq $(($3 * 10))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

if [ "${BENCH_ONLY:-}" != 1 ]; then
# --- the cross-host suite
check_suite() { # name nhosts mode
  run_session "$1" "$2" "$WORKERS" "$3" cluster check
  wait "$CTLPID" || fail "$1: controller exited with an error"
  grep -q '^PASS' "$TMP/$1.out" || fail "$1: no PASS"
  for a in "${AGENTS[@]}"; do wait "$a" || fail "$1: an agent exited with an error"; done
  no_process_left || fail "$1: processes left behind"
  echo "ok   $1: $(grep -c '^ok' "$TMP/$1.out") checks on $2 hosts x $WORKERS workers ($3)"
}
check_suite suite-token "$HOSTS" token
check_suite suite-mtls 2 mtls

# A wrong token is refused and logged.
echo "0123456789abcdef0123456789abcdef" >"$TMP/wrong"
ip netns exec "$CTL" "$BIN" cluster check --listen "$CTL_ADDR:$((PORT + 1))" --nodes 1 "${TOKEN[@]}" --start-timeout 5s \
  >"$TMP/refuse.out" 2>"$TMP/refuse.err" &
c=$!; PIDS+=("$c"); PORT=$((PORT + 1))
sleep 0.3
if ip netns exec "${NS[0]}" "$BIN" node --connect "$CTL_ADDR:$PORT" --workers 1 --token-file "$TMP/wrong" \
  --connect-timeout 5s >"$TMP/refuse.a0" 2>&1; then fail "an agent with a wrong token was accepted"; fi
wait "$c" && fail "the controller formed a session with a wrong-token agent"
grep -q "refused.*wrong token proof" "$TMP/refuse.err" || fail "the refusal was not logged"
echo "ok   wrong token refused and logged"

# --- faults: the last host is killed, stopped, or cut off
dl_ns=$(echo "$DEADLINE" | sed 's/s$//')
hb_ns=$(echo "$HEARTBEAT" | sed 's/s$//')
limit=$(awk "BEGIN{print $dl_ns + $hb_ns}")
fault() { # kind
  local kind=$1 last=$((HOSTS - 1))
  run_session "fault-$kind" "$HOSTS" "$WORKERS" token cluster check --fault
  wait_for "$TMP/fault-$kind.out" FAULT-READY 30 || fail "fault-$kind: the suite did not reach the fault"
  local t0
  t0=$(date +%s%N)
  case $kind in
    kill) kill -KILL "${AGENTS[$last]}" ;;
    stop) kill -STOP "${AGENTS[$last]}" ;;
    partition) ip -n "${NS[$last]}" link set eth0 down ;;
  esac
  wait "$CTLPID" || fail "fault-$kind: controller exited with an error"
  local at
  at=$(sed -n 's/^LOST at \([0-9]*\):.*/\1/p' "$TMP/fault-$kind.out")
  [ -n "$at" ] || fail "fault-$kind: no loss reported"
  local secs
  secs=$(awk "BEGIN{printf \"%.2f\", ($at - $t0) / 1e9}")
  awk "BEGIN{exit !($secs <= $limit)}" || fail "fault-$kind: reported after ${secs}s > ${limit}s"
  grep -q "node $last" "$TMP/fault-$kind.out" || grep -q "node $last" "$TMP/fault-$kind.err" || fail "fault-$kind: the lost node is not named"
  case $kind in
    stop) kill -KILL "${AGENTS[$last]}" ;;   # its workers go with it (lifeline)
    partition) ;;                            # the agent gives up on its own
  esac
  for a in "${AGENTS[@]}"; do wait "$a" 2>/dev/null || true; done
  no_process_left || fail "fault-$kind: processes left behind"
  [ "$kind" = partition ] && ip -n "${NS[$last]}" link set eth0 up
  echo "ok   fault $kind: host $last reported lost after ${secs}s (deadline $DEADLINE), nothing left running"
}
fault kill
fault stop
fault partition
fi

# --- benchmarks
if [ -n "$BENCH_OUT" ]; then
  SHAPES=${BENCH_SHAPES:-2x1 2x2 4x1 4x2}
  size_bytes() { # 1K, 64M, 1G -> bytes
    case $1 in
      *K) echo $((${1%K} << 10)) ;; *M) echo $((${1%M} << 20)) ;; *G) echo $((${1%G} << 30)) ;; *) echo "$1" ;;
    esac
  }
  BMIN=${BENCH_MIN:-1K}
  # BENCH_NSTAT=1: every sweep's TCP counters (nstat deltas: retransmits,
  # tail-loss probes, ...) and each host uplink's qdisc statistics (drops,
  # overlimits), per host namespace, in OUTDIR/<sweep>.netstat.
  netstat_mark() {
    [ "${BENCH_NSTAT:-}" = 1 ] || return 0
    local i
    for i in $(seq 0 $((HOSTS - 1))); do
      ip netns exec "${NS[$i]}" env NSTAT_HISTORY="$TMP/nstat.h$i" nstat -n
      ip netns exec "${NS[$i]}" tc -s qdisc show dev eth0 >"$TMP/qdisc.h$i"
    done
  }
  netstat_save() { # sweep-name nhosts
    [ "${BENCH_NSTAT:-}" = 1 ] || return 0
    local i
    for i in $(seq 0 $(($2 - 1))); do
      { echo "== host $i: nstat delta"; ip netns exec "${NS[$i]}" env NSTAT_HISTORY="$TMP/nstat.h$i" nstat
        echo "== host $i: qdisc before"; cat "$TMP/qdisc.h$i"
        echo "== host $i: qdisc after"; ip netns exec "${NS[$i]}" tc -s qdisc show dev eth0; } >>"$BENCH_OUT/$1.netstat"
    done
  }
  # BENCH_UPLINK: bench/uplink.py samples each host's eth0 during a sweep.
  UPLINK_PIDS=()
  uplink_start() { # sweep-name nhosts
    [ -n "${BENCH_UPLINK:-}" ] && [ "${BENCH_UPLINK}" != 0 ] || return 0
    local i
    UPLINK_PIDS=()
    for i in $(seq 0 $(($2 - 1))); do
      ip netns exec "${NS[$i]}" "$PY" bench/uplink.py sample "$TMP/$1.h$i.tx" &
      UPLINK_PIDS+=($!); PIDS+=($!)
    done
  }
  uplink_stop() { # sweep-name nhosts
    [ ${#UPLINK_PIDS[@]} -gt 0 ] || return 0
    local i files=()
    kill "${UPLINK_PIDS[@]}" 2>/dev/null || true
    wait "${UPLINK_PIDS[@]}" 2>/dev/null || true
    UPLINK_PIDS=()
    for i in $(seq 0 $(($2 - 1))); do files+=("$TMP/$1.h$i.tx"); done
    "$PY" bench/uplink.py summary "$(rate_bits "$RATE")" "${files[@]}" >"$BENCH_OUT/$1.uplink.txt" 2>&1 || true
    [ "${BENCH_UPLINK}" = keep ] && cp "${files[@]}" "$BENCH_OUT/" 2>/dev/null
    rm -f "${files[@]}"
  }
  BMAX=${BENCH_MAX:-256M}
  echo "{\"bench\":\"netns\",\"rate\":\"$RATE\",\"shape\":\"${SHAPE:-$RATE netem $DELAY}\",\"date\":\"$(date -u +%FT%TZ)\"}" >"$BENCH_OUT/setup.jsonl"
  # What the link carries at all: plain TCP and TLS 1.3 (the data links'
  # settings) from host 0 to host 1, one direction and both at once.
  for mode in tcp tls; do
    [ "${BENCH_STREAMS:-1}" = 1 ] || break
    for dir in uni bidi; do
      PORT=$((PORT + 1))
      extra=(); [ "$mode" = tls ] && extra=(--tls "${TOKEN[@]}")
      d=(); [ "$dir" = bidi ] && d=(--bidi)
      ip netns exec "${NS[1]}" "$BIN" cluster bench stream --serve --listen "10.77.0.2:$PORT" --conns 3 --timeout 60s "${extra[@]}" \
        >"$TMP/stream-$mode-$dir.srv" 2>&1 &
      sp=$!; PIDS+=("$sp")
      sleep 0.3
      ip netns exec "${NS[0]}" "$BIN" cluster bench stream --connect "10.77.0.2:$PORT" --reps 3 --bytes 256M --timeout 60s \
        "${extra[@]}" "${d[@]}" >"$TMP/stream-$mode-$dir.out" 2>&1 || fail "stream $mode $dir: $(cat "$TMP/stream-$mode-$dir.out")"
      wait "$sp" || fail "stream server $mode $dir: $(cat "$TMP/stream-$mode-$dir.srv")"
      cat "$TMP/stream-$mode-$dir.out" "$TMP/stream-$mode-$dir.srv" >>"$BENCH_OUT/stream.jsonl"
      echo "ok   stream $mode $dir: $(sed -n 's/.*"gbit_s":\([0-9.]*\).*/\1/p' "$TMP/stream-$mode-$dir.out" | cut -c1-5 | tr '\n' ' ')Gbit/s"
    done
  done
  # With BENCH_OLD_BIN (another chorus binary, e.g. the parent commit's):
  # an old/new A/B in the same namespaces, old right before new for every
  # shape in BENCH_AB_SHAPES (default: all of SHAPES).
  NEW_BIN=$BIN
  for shape in $SHAPES; do
    nh=${shape%x*}; nw=${shape#*x}
    vs=(new)
    if [ -n "${BENCH_OLD_BIN:-}" ] && [[ " ${BENCH_AB_SHAPES:-$SHAPES} " == *" $shape "* ]]; then vs=(old new); fi
    if [ "${BENCH_PLAIN:-}" = 1 ]; then
      [ "${vs[0]}" = old ] && vs+=(oldplain)
      vs+=(plain)
    fi
    for v in "${vs[@]}"; do
      # BENCH_STRIPES: the new binary once per stripe setting (-sN files);
      # the old binary (which may not know stripes) once.
      sts=("")
      [ -n "${BENCH_STRIPES:-}" ] && [ "$v" != old ] && [ "$v" != oldplain ] && read -r -a sts <<<"$BENCH_STRIPES"
      # BENCH_ENVS: the new binary once per variant "LABEL:VAR=V,VAR=V"
      # (-vLABEL files), e.g. tuning variables against the defaults.
      vars=("")
      [ -n "${BENCH_ENVS:-}" ] && [ "$v" = new ] && read -r -a vars <<<"$BENCH_ENVS"
      for var in "${vars[@]}"; do
      for st in "${sts[@]}"; do
        suf=""; BIN=$NEW_BIN; AGENT_ENV=()
        if [ -n "$var" ]; then
          suf="-v${var%%:*}"
          IFS=, read -r -a AGENT_ENV <<<"${var#*:}"
        fi
        [ "$v" = old ] && { suf="-old"; BIN=$BENCH_OLD_BIN; }
        [ "$v" = plain ] && { suf="-plain"; AGENT_ENV=(CHORUS_HIER_PLAINTEXT=1); }
        [ "$v" = oldplain ] && { suf="-old-plain"; BIN=$BENCH_OLD_BIN; AGENT_ENV=(CHORUS_HIER_PLAINTEXT=1); }
        [ -n "$st" ] && { suf="$suf-s$st"; AGENT_ENV+=(CHORUS_HIER_STRIPES="$st"); }
        [ -n "${BENCH_STRIPE_MIN:-}" ] && AGENT_ENV+=(CHORUS_HIER_STRIPE_MIN="$(size_bytes "$BENCH_STRIPE_MIN")")
        name="bench-${nh}x$nw$suf"
        netstat_mark
        uplink_start "allreduce-${nh}hosts-${nw}workers$suf" "$nh"
        run_session "$name" "$nh" "$nw" token cluster bench allreduce --min "$BMIN" --max "$BMAX" --step "${BENCH_STEP:-4}" --json
        wait "$CTLPID" || fail "$name"
        for a in "${AGENTS[@]}"; do wait "$a" || true; done
        uplink_stop "allreduce-${nh}hosts-${nw}workers$suf" "$nh"
        cp "$TMP/$name.out" "$BENCH_OUT/allreduce-${nh}hosts-${nw}workers$suf.jsonl"
        netstat_save "allreduce-${nh}hosts-${nw}workers$suf" "$nh"
        echo "ok   $name${AGENT_ENV[*]+ (${AGENT_ENV[*]})}"
      done
      done
    done
  done
  BIN=$NEW_BIN
  if [ "${BENCH_ONLY:-}" != 1 ]; then
    for nh in 2 4; do
      run_session "session-$nh" "$nh" 1 token cluster bench session --json
      wait "$CTLPID" || fail "session-$nh"
      for a in "${AGENTS[@]}"; do wait "$a" || true; done
      cp "$TMP/session-$nh.out" "$BENCH_OUT/session-${nh}hosts.jsonl"
    done
  fi
  # The anchor: torch.distributed gloo over TCP between the same
  # namespaces, one process per worker, if torch is importable.
  if [ "${BENCH_GLOO:-1}" != 1 ]; then
    echo "netns-check: BENCH_GLOO=0: no gloo anchor"
  elif "$PY" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
    for shape in $SHAPES; do
        nh=${shape%x*}; nw=${shape#*x}
        PORT=$((PORT + 1)); gp=()
        netstat_mark
        uplink_start "gloo-${nh}hosts-${nw}workers" "$nh"
        for r in $(seq 0 $((nh * nw - 1))); do
          h=$((r / nw))
          ip netns exec "${NS[$h]}" env GLOO_SOCKET_IFNAME=eth0 "$PY" bench/anchors/gloo_tcp.py \
            --rank "$r" --world $((nh * nw)) --init "tcp://10.77.0.1:$PORT" --min-bytes "$(size_bytes "$BMIN")" --max-bytes "$(size_bytes "$BMAX")" \
            --target "${BENCH_GLOO_TARGET:-0.1}" --reps "${BENCH_GLOO_REPS:-1}" \
            >"$TMP/gloo-$nh-$nw.$r" 2>&1 &
          gp+=($!); PIDS+=($!)
        done
        for p in "${gp[@]}"; do wait "$p" || fail "gloo ${nh}x$nw"; done
        uplink_stop "gloo-${nh}hosts-${nw}workers" "$nh"
        netstat_save "gloo-${nh}hosts-${nw}workers" "$nh"
        grep '^{' "$TMP/gloo-$nh-$nw.0" >"$BENCH_OUT/gloo-${nh}hosts-${nw}workers.jsonl"
        grep -v '^{' "$TMP/gloo-$nh-$nw.0" >"$BENCH_OUT/gloo-${nh}hosts-${nw}workers.log" || true
        echo "ok   gloo ${nh}x$nw"
    done
  else
    echo "netns-check: torch (gloo) not importable by $PY: no anchor"
  fi
  # The other anchor: Open MPI's MPI_Allreduce over its TCP transport
  # between the namespaces (shared memory inside one), started by mpirun
  # in the controller namespace through an rsh agent that enters the host
  # namespaces instead of ssh ("--mca plm rsh": an environment may select
  # another launcher, e.g. OMPI_MCA_plm=isolated on the GPU machine, which
  # starts nothing remote and fails with "All nodes ... already filled").
  if [ "${BENCH_MPI:-1}" = 1 ] && command -v mpirun >/dev/null && command -v mpicc >/dev/null; then
    mpicc -O2 -DMAX_BYTES='(256L << 20)' -o "$TMP/mpi_allreduce" bench/anchors/mpi_allreduce.c -lm
    cat >"$TMP/nsrsh" <<RSH
#!/bin/sh
host=\$1; shift
i=\$(( \${host##*.} - 1 ))
if [ "${MPI_UTS:-1}" = 1 ] && command -v unshare >/dev/null; then
  # Each host namespace its own hostname: Open MPI names its shared-memory
  # segments (in the one /dev/shm all namespaces see) after the hostname,
  # and two "hosts" of the same name crashed each other (4.1.6).
  exec ip netns exec "$P-h\$i" unshare --uts sh -c "hostname nsh\$i; \$*"
fi
exec ip netns exec "$P-h\$i" sh -c "\$*"
RSH
    chmod +x "$TMP/nsrsh"
    for shape in ${MPI_SHAPES:-2x1 2x2 4x1 4x2}; do
      nh=${shape%x*} nw=${shape#*x}
      hl=$(for i in $(seq 1 "$nh"); do printf '10.77.0.%d:%d,' "$i" "$nw"; done)
      # MPI_ARGS: extra mpirun arguments (diagnosis, e.g. --display-allocation).
      # shellcheck disable=SC2086
      if ip netns exec "$CTL" env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        mpirun --allow-run-as-root ${MPI_ARGS:-} -np $((nh * nw)) -H "${hl%,}" --mca plm rsh --mca plm_rsh_agent "$TMP/nsrsh" \
        --mca oob_tcp_if_include 10.77.0.0/24 --mca btl tcp,self,vader --mca btl_tcp_if_include 10.77.0.0/24 \
        "$TMP/mpi_allreduce" 0.1 1 >"$TMP/mpi-$nh-$nw.out" 2>"$TMP/mpi-$nh-$nw.err"; then
        cp "$TMP/mpi-$nh-$nw.out" "$BENCH_OUT/openmpi-${nh}hosts-${nw}workers.jsonl"
        echo "ok   openmpi ${nh}x$nw"
      else
        cp "$TMP/mpi-$nh-$nw.err" "$BENCH_OUT/openmpi-${nh}hosts-${nw}workers.err"
        echo "netns-check: Open MPI ${nh}x$nw did not run: $(tail -3 "$TMP/mpi-$nh-$nw.err" | tr '\n' ' ')"
      fi
    done
  fi
  echo "netns-check: benchmarks in $BENCH_OUT"
fi
echo "netns-check: PASS"
