#!/bin/bash
# session 10: small-message variants (carried agreement, parallel sends/receives)
# on the 16-core host, one worker per host; results tarred into $OUT.
export PATH=$PWD/.carry/n/bin:$PATH
export PYTHON=$(command -v python3)
export CHORUS_BIN=$PWD/.carry/p/chorus
nproc; uname -r
for r in ${ROUNDS:-1 2}; do
  env BENCH_ONLY=1 BENCH_STREAMS=0 BENCH_GLOO=${GLOO:-0} BENCH_SHAPES="${SHAPES:-4x1 2x1}" BENCH_MIN=${BMIN:-1K} BENCH_MAX=${BMAX:-1M} BENCH_STEP=${STEP:-4} \
    MPI_SHAPES="${MPIS:-4x1}" BENCH_ENVS="$VARS" timeout ${T:-270} bash scripts/netns-check.sh --bench $OUT/r$r 2>&1 | tail -${TAIL:-4}
  ip netns list
done
cp $0 $OUT/
cd $OUT && tar czf res.tgz r* && rm -rf r[0-9]*
