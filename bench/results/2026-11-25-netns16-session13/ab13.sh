#!/bin/bash
# session 13: leaders' agreement and small gathers in Bruck rounds, A/B:
# old (a17e18e, all-to-all) right before new for every shape, Open MPI on
# the 4-host shapes, small and mid sizes; tarred into $OUT.
export PATH=$PWD/.carry/n/bin:$PATH
export PYTHON=$(command -v python3)
export CHORUS_BIN=$PWD/.carry/p/chorus BENCH_OLD_BIN=$PWD/.carry/p/chorus-old
nproc; uname -r; sysctl -n net.ipv4.tcp_congestion_control; date -u
export BENCH_HOSTS=${BH:-4}
for r in ${ROUNDS:-1}; do
  env BENCH_ONLY=1 BENCH_STREAMS=0 BENCH_SHAPES="${SHAPES:-4x1 4x2 2x1}" BENCH_MIN=${BMIN:-1K} BENCH_MAX=${BMAX:-4M} BENCH_STEP=${STEP:-4} \
    BENCH_MPI=${MPI:-1} MPI_SHAPES="${MPIS:-4x1 4x2}" BENCH_GLOO=${GLOO:-0} BENCH_GLOO_TARGET=${GT:-1} BENCH_GLOO_REPS=${GR:-3} BENCH_ENVS="$VARS" BENCH_NSTAT=${NSTAT:-0} \
    timeout ${T:-280} bash scripts/netns-check.sh --bench $OUT/r$r 2>&1 | tail -${TAIL:-14}
  python3 bench/netns_summary.py $OUT/r$r > $OUT/r$r/summary.txt 2>&1
  cp .carry/p/ab13.sh $OUT/r$r/
  ip netns list
done
cd $OUT && tar czf res.tgz r* && rm -rf r[0-9]*
