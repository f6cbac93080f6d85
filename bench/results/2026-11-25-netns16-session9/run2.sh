#!/bin/bash
# session 9: tuning variants of one binary on the 16-core host, gloo and
# Open MPI in the same namespaces; results tarred into $OUT.
export PATH=$PWD/.carry/n/bin:$PATH
export PYTHON=$(command -v python3)
export CHORUS_BIN=$PWD/.carry/p/chorus
for r in ${ROUNDS:-1 2}; do
  env BENCH_ONLY=1 BENCH_STREAMS=0 BENCH_SHAPES="${SHAPES:-4x1 2x1}" BENCH_MIN=${BMIN:-16K} BENCH_MAX=${BMAX:-4M} \
    MPI_SHAPES="${MPIS:-4x1}" BENCH_ENVS="$VARS" timeout ${T:-270} bash scripts/netns-check.sh --bench $OUT/r$r 2>&1 | tail -${TAIL:-4}
  ip netns list
done
cd $OUT && tar czf res.tgz r* && rm -rf r[0-9]*
