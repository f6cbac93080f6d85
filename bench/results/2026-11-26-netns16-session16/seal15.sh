#!/bin/bash
# session 15: sealed records (new, default) against crypto/tls records
# (old = a3b67ef, right before new in every sweep), gloo after; 1 ms
# tbf bucket (netns-check's default); tarred into $OUT.
export PATH=$PWD/.carry/n/bin:$PATH
export PYTHON=$(command -v python3)
export CHORUS_BIN=$PWD/.carry/p/chorus BENCH_OLD_BIN=$PWD/.carry/p/chorus-old
nproc; uname -r; sysctl -n net.ipv4.tcp_congestion_control; date -u
export BENCH_HOSTS=4; [ -n "${NOOLD:-}" ] && unset BENCH_OLD_BIN
for r in ${RUNS:-r1}; do
  env BENCH_ONLY=1 BENCH_STREAMS=0 BENCH_SHAPES="${SHAPES:-2x1 4x1}" BENCH_MIN=${BMIN:-256K} BENCH_MAX=${BMAX:-256M} BENCH_STEP=${STEP:-4} \
    BENCH_MPI=0 BENCH_GLOO=${GLOO:-1} BENCH_GLOO_TARGET=${GT:-1} BENCH_GLOO_REPS=${GR:-3} BENCH_NSTAT=${NSTAT:-0} BENCH_ENVS="${VARS:-}" \
    timeout ${T:-500} bash scripts/netns-check.sh --bench $OUT/$r 2>&1 | tail -${TAIL:-3}
  python3 bench/netns_summary.py $OUT/$r > $OUT/$r/summary.txt 2>&1
  ip netns list
done
cp .carry/p/seal15.sh $OUT/
cd $OUT && tar czf res-${RUNS:-r1}.tgz ${RUNS:-r1}; rm -rf ${RUNS:-r1}
