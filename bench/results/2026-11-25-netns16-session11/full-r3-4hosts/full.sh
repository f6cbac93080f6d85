#!/bin/bash
# session 11: every shape of issue 16, 1 KiB-256 MiB, gloo timed as long as
# chorus (3 x 1 s), Open MPI on every shape, one run; tarred into $OUT.
export PATH=$PWD/.carry/n/bin:$PATH
export PYTHON=$(command -v python3)
export CHORUS_BIN=$PWD/.carry/p/chorus
nproc; uname -r; sysctl -n net.ipv4.tcp_congestion_control
for r in ${ROUNDS:-1}; do
  env BENCH_ONLY=1 BENCH_STREAMS=0 BENCH_SHAPES="${SHAPES:-2x1 2x2 4x1 4x2}" BENCH_MIN=${BMIN:-1K} BENCH_MAX=${BMAX:-256M} \
    MPI_SHAPES="${MPIS:-2x1 2x2 4x1 4x2}" BENCH_GLOO_TARGET=${GT:-1} BENCH_GLOO_REPS=${GR:-3} $EXTRA timeout ${T:-580} bash scripts/netns-check.sh --bench $OUT/r$r 2>&1 | tail -24
  python3 bench/netns_summary.py $OUT/r$r > $OUT/r$r/summary.txt 2>&1
  cp .carry/p/full.sh $OUT/r$r/
  ip netns list
done
cd $OUT && tar czf res.tgz r* && rm -rf r[0-9]*
