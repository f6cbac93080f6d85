#!/bin/bash
# session 17: old (HEAD before the change) right before new in every
# shape, gloo after; tarred into $OUT.
export PATH=$PWD/.carry/n/bin:$PATH PYTHON=$(command -v python3)
export CHORUS_BIN=$PWD/.carry/q/chorus BENCH_OLD_BIN=$PWD/.carry/q/chorus-old
[ -n "${NOOLD:-}" ] && unset BENCH_OLD_BIN
nproc; uname -r; date -u
for r in ${RUNS:-r1}; do
  env BENCH_ONLY=1 BENCH_STREAMS=0 BENCH_SHAPES="${SHAPES:-2x2 4x2}" BENCH_MIN=${BMIN:-4M} BENCH_MAX=${BMAX:-64M} BENCH_STEP=${STEP:-2} \
    BENCH_HOSTS=4 BENCH_MPI=0 BENCH_GLOO=${GLOO:-1} BENCH_GLOO_TARGET=${GT:-1} BENCH_GLOO_REPS=${GR:-3} BENCH_ENVS="${VARS:-}" \
    timeout ${T:-400} bash scripts/netns-check.sh --bench $OUT/$r 2>&1 | tail -${TAIL:-3}
  python3 bench/netns_summary.py $OUT/$r > $OUT/$r/summary.txt 2>&1
done
ip netns list
cp .carry/q/ab17.sh $OUT/
cd $OUT && tar czf res.tgz ${RUNS:-r1} && rm -rf ${RUNS:-r1}
