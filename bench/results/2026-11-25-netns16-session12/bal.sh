#!/bin/bash
# session 12: balanced leader rings A/B, one worker per host, old (the
# commit before) right before new and its variants, gloo timed as long as
# chorus (3 x 1 s) in the same run; tarred into $OUT.
export PATH=$PWD/.carry/n/bin:$PATH
export PYTHON=$(command -v python3)
export CHORUS_BIN=$PWD/.carry/p/chorus BENCH_OLD_BIN=$PWD/.carry/p/chorus-old
nproc; uname -r; sysctl -n net.ipv4.tcp_congestion_control; date -u
for r in ${ROUNDS:-1}; do
  env BENCH_ONLY=1 BENCH_STREAMS=0 BENCH_SHAPES="${SHAPES:-2x1 4x1}" BENCH_MIN=${BMIN:-1M} BENCH_MAX=${BMAX:-256M} BENCH_STEP=${STEP:-4} \
    BENCH_MPI=${MPI:-0} BENCH_GLOO=${GLOO:-1} BENCH_GLOO_TARGET=${GT:-1} BENCH_GLOO_REPS=${GR:-3} BENCH_ENVS="$VARS" BENCH_NSTAT=${NSTAT:-1} \
    timeout ${T:-560} bash scripts/netns-check.sh --bench $OUT/r$r 2>&1 | tail -${TAIL:-20}
  python3 bench/netns_summary.py $OUT/r$r > $OUT/r$r/summary.txt 2>&1
  cp .carry/p/bal.sh $OUT/r$r/
  ip netns list
done
cd $OUT && tar czf res.tgz r* && rm -rf r[0-9]*
