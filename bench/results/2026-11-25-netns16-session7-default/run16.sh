#!/bin/bash
# issue 16, helper 16f's check on the 16-core host: CC=default|reno
cc=${1:?cc}
sysctl net.ipv4.tcp_congestion_control net.ipv4.tcp_allowed_congestion_control net.ipv4.tcp_available_congestion_control
env $([ $cc = reno ] && echo BENCH_CC=reno) BENCH_ONLY=1 BENCH_MPI=0 BENCH_STREAMS=0 \
  BENCH_SHAPES="2x1 4x1" BENCH_MIN=256K BENCH_MAX=256M BENCH_STRIPES="1 4" \
  BENCH_NSTAT=1 BENCH_GLOO_TARGET=1 BENCH_GLOO_REPS=3 NS_TIMEOUT=540 NS_TAIL=20 \
  bash .carry/n/run.sh $OUT/$cc
python3 bench/netns_summary.py $OUT/$cc
cd $OUT && tar czf $cc.tgz $cc && rm -rf $cc
