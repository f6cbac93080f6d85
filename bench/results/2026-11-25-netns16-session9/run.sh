#!/bin/bash
# session 9: polled data-link reads, old (b2faa5d) / new A/B on the 16-core host,
# gloo and Open MPI in the same namespaces; two rounds.
export PATH=$PWD/.carry/n/bin:$PATH
export PYTHON=$(command -v python3)
nproc; uname -r; sysctl -n net.ipv4.tcp_congestion_control
export CHORUS_BIN=$PWD/.carry/p/chorus BENCH_OLD_BIN=$PWD/.carry/p/chorus-old
for r in ${ROUNDS:-1 2}; do
  env BENCH_ONLY=1 BENCH_STREAMS=0 BENCH_SHAPES="${SHAPES:-4x1 2x1 4x2}" BENCH_MIN=1K BENCH_MAX=${BMAX:-4M} \
    MPI_SHAPES="${MPIS:-4x1 2x2}" $EXTRA timeout ${T:-270} bash scripts/netns-check.sh --bench $OUT/r$r 2>&1 | tail -25
  python3 bench/netns_summary.py $OUT/r$r > $OUT/r$r/summary.txt 2>&1
  ip netns list
done
