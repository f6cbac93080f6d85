#!/bin/bash
# session 9 final: old (b2faa5d) / new A/B, gloo timed as long as chorus,
# Open MPI, 2x1 and 4x1, one worker per host, 10 Gbit/s tbf; tarred into $OUT.
export PATH=$PWD/.carry/n/bin:$PATH
export PYTHON=$(command -v python3)
export CHORUS_BIN=$PWD/.carry/p/chorus BENCH_OLD_BIN=$PWD/.carry/p/chorus-old
nproc; uname -r; sysctl -n net.ipv4.tcp_congestion_control
for r in ${ROUNDS:-1}; do
  env BENCH_ONLY=1 BENCH_STREAMS=0 BENCH_SHAPES="${SHAPES:-2x1 4x1}" BENCH_MIN=${BMIN:-1K} BENCH_MAX=${BMAX:-64M} \
    MPI_SHAPES="${MPIS:-4x1}" BENCH_GLOO_TARGET=${GT:-1} BENCH_GLOO_REPS=${GR:-3} timeout ${T:-500} bash scripts/netns-check.sh --bench $OUT/r$r 2>&1 | tail -16
  python3 bench/netns_summary.py $OUT/r$r > $OUT/r$r/summary.txt 2>&1
  cp .carry/p/final.sh $OUT/r$r/
  ip netns list
done
cd $OUT && tar czf res.tgz r* && rm -rf r[0-9]*
