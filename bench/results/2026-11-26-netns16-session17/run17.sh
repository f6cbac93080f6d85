#!/bin/bash
# session 17: uplink and per-flow sampling during sweeps (sample17.py per
# host namespace), then seal15.sh's sweep with laps; tarred into $OUT.
export PATH=$PWD/.carry/n/bin:$PATH
rm -rf /tmp/laps; mkdir -p $OUT/samp /tmp/laps
T=${T:-300}
( end=$((SECONDS+T)); declare -A seen
  while [ $SECONDS -lt $end ]; do
    for ns in $(ip netns list | awk '{print $1}' | grep -E -- '-h[0-9]+$'); do
      [ -n "${seen[$ns]:-}" ] && continue; seen[$ns]=1
      ip netns exec $ns python3 .carry/q/sample17.py $OUT/samp/$ns $PWD/.carry/n/bin/ss $T &
    done
    sleep 0.3
  done ) &
W=$!
export CHORUS_BIN=$PWD/.carry/q/chorus PYTHON=$(command -v python3)
nproc; uname -r; sysctl -n net.ipv4.tcp_congestion_control; date -u
env BENCH_ONLY=1 BENCH_STREAMS=0 BENCH_SHAPES="${SHAPES:-2x1 4x1}" BENCH_MIN=${BMIN:-16M} BENCH_MAX=${BMAX:-64M} BENCH_STEP=4 \
  BENCH_HOSTS=4 BENCH_MPI=0 BENCH_GLOO=${GLOO:-1} BENCH_GLOO_TARGET=${GT:-1} BENCH_GLOO_REPS=${GR:-3} BENCH_ENVS="${VARS:-}" \
  timeout $T bash scripts/netns-check.sh --bench $OUT/r 2>&1 | tail -${TAIL:-12}
kill $W 2>/dev/null; pkill -f sample17.py; sleep 0.5
python3 bench/netns_summary.py $OUT/r > $OUT/r/summary.txt 2>&1
cp -r /tmp/laps $OUT/r/ 2>/dev/null
ip netns list
cd $OUT && tar czf res.tgz r samp && rm -rf r samp
ls -la $OUT
