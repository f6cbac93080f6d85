#!/bin/bash
# session 11: multi-ring groups (CHORUS_HIER_PIPE) A/B, 2 workers per host,
# old = 48955d6 right before new's variants, gloo in the same run; tarred into $OUT.
export PATH=$PWD/.carry/n/bin:$PATH
export PYTHON=$(command -v python3)
export CHORUS_BIN=$PWD/.carry/p/chorus BENCH_OLD_BIN=$PWD/.carry/p/chorus-old
nproc; uname -r; sysctl -n net.ipv4.tcp_congestion_control
for r in ${ROUNDS:-1}; do
  env BENCH_ONLY=1 BENCH_STREAMS=0 BENCH_SHAPES="${SHAPES:-2x2 4x2}" BENCH_MIN=${BMIN:-16M} BENCH_MAX=${BMAX:-256M} BENCH_STEP=${STEP:-4} \
    BENCH_MPI=${MPI:-0} BENCH_GLOO=${GLOO:-1} BENCH_GLOO_TARGET=${GT:-1} BENCH_GLOO_REPS=${GR:-3} BENCH_ENVS="$VARS" \
    timeout ${T:-540} bash scripts/netns-check.sh --bench $OUT/r$r 2>&1 | tail -${TAIL:-20}
  python3 bench/netns_summary.py $OUT/r$r > $OUT/r$r/summary.txt 2>&1
  cp .carry/p/pipe.sh $OUT/r$r/
  ip netns list
done
cd $OUT && tar czf res.tgz r* && rm -rf r[0-9]*
