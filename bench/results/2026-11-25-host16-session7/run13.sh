#!/bin/bash
# p99 at 8 process workers: old / new / nolog, rotating order, 6 rounds; table rows (p50 p99 mean)
cd "$(dirname "$0")"
order=(old new nolog)
for r in 1 2 3 4 5 6; do
  for k in 0 1 2; do b=${order[$(( (k + r) % 3 ))]}; bin=./chorus-$b; env=; [ $b = new ] && bin=./chorus; [ $b = nolog ] && { bin=./chorus; env=CHORUS_SHM_LOG=0; }
    echo "$b $r $(env $env $bin bench session --sessions process-shm --workers 8 --iters 40000 2>/dev/null | tail -1)"
  done
done | tee $OUT/s13.txt | sort -s -k1,1
