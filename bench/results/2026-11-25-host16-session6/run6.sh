#!/bin/bash
# session 6: clock, recorder micro-benchmarks, session and small-allreduce A/B (old 392ae85, new)
cd "$(dirname "$0")"
{ uname -a; nproc; cat /sys/devices/system/clocksource/clocksource0/current_clocksource /sys/devices/system/clocksource/clocksource0/available_clocksource; grep -m1 "model name" /proc/cpuinfo; grep -o -m1 'constant_tsc\|nonstop_tsc' /proc/cpuinfo | sort -u; } > $OUT/host.txt 2>&1
./tsc.test -test.v -test.count 1 > $OUT/tsc-test.txt 2>&1
./trace.test -test.run xxx -test.bench 'EventFlight' -test.count 3 > $OUT/trace-bench.txt 2>&1
for r in 1 2 3; do for b in old new; do bin=./chorus-old; [ $b = new ] && bin=./chorus;
  $bin bench session --sessions threaded,process-shm --workers 1,2,4,8 --iters 20000 --json 2>/dev/null | sed "s/^/$b $r /"
done; done > $OUT/s3.txt
for r in 1 2 3; do for b in old new; do bin=./chorus-old; [ $b = new ] && bin=./chorus;
  $bin bench allreduce --workers 2 --session process --min 1K --max 64K --json 2>/dev/null | grep '^{' | sed "s/^/$b $r /"
  $bin bench allreduce --workers 8 --session process --min 1K --max 64K --json 2>/dev/null | grep '^{' | sed "s/^/$b $r /"
done; done > $OUT/ar3.txt
python3 - <<'PY'
import json,collections,os
for f,key in (('s3.txt',('session','workers')),('ar3.txt',('workers','bytes'))):
    d=collections.defaultdict(list)
    for l in open(os.environ['OUT']+'/'+f):
        b,r,j=l.split(' ',2); j=json.loads(j)
        k=tuple(j[x] for x in key)+(b,)
        d[k].append(j['p50_us'] if f=='s3.txt' else j['time_us'])
    for k in sorted(d): print(f, k, ' '.join('%.2f'%x for x in d[k]))
PY
