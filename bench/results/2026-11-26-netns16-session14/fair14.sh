#!/bin/bash
# session 14: is gloo's 0.0-0.4% edge on the wire bound tbf's bucket?
# The same shapes with the default bucket (4 ms at the rate) and a small
# one (BURST bytes), gloo timed in GT-second windows; tarred into $OUT.
export PATH=$PWD/.carry/n/bin:$PATH
export PYTHON=$(command -v python3)
export CHORUS_BIN=$PWD/.carry/p/chorus
nproc; uname -r; sysctl -n net.ipv4.tcp_congestion_control; date -u
export BENCH_HOSTS=${BH:-4} RUNS=${RUNS:-big s131072}
for r in $RUNS; do
  b=""; [ "$r" != big ] && b=${r#s}; b=${b%%[a-z]*}  # big: the default bucket; sN[x]: N bytes
  env BURST=$b BENCH_ONLY=1 BENCH_STREAMS=0 BENCH_SHAPES="${SHAPES:-2x1 4x1}" BENCH_MIN=${BMIN:-4M} BENCH_MAX=${BMAX:-256M} BENCH_STEP=${STEP:-4} \
    BENCH_MPI=${MPI:-0} MPI_SHAPES="${MPIS:-}" BENCH_GLOO=${GLOO:-1} BENCH_GLOO_TARGET=${GT:-1} BENCH_GLOO_REPS=${GR:-3} BENCH_PLAIN=${PLAIN:-0} BENCH_ENVS="$VARS" BENCH_NSTAT=${NSTAT:-0} \
    timeout ${T:-250} bash scripts/netns-check.sh --bench $OUT/$r 2>&1 | tail -${TAIL:-6}
  python3 bench/netns_summary.py $OUT/$r > $OUT/$r/summary.txt 2>&1
  cat $OUT/$r/summary.txt | head -60
  ip netns list
done
cp .carry/p/fair14.sh $OUT/
cd $OUT && tar czf res.tgz $RUNS; rm -rf $RUNS
