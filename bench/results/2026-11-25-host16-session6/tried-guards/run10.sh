#!/bin/bash
# session 6: old 392ae85, prev 6fdea58, new (guards counted with plain stores, hang-watch stores before the Sync goes out)
cd "$(dirname "$0")"
for r in 1 2 3 4; do for b in old prev new; do bin=./chorus-$b; [ $b = new ] && bin=./chorus;
  $bin bench session --sessions threaded,process-shm --workers 1,2,4,8 --iters 20000 --json 2>/dev/null | sed "s/^/$b $r /"
done; done > $OUT/s11.txt
for r in 1 2; do for b in old new; do bin=./chorus-$b; [ $b = new ] && bin=./chorus;
  $bin bench session --sessions process-shm --workers 1,8 --idle 200us --iters 3000 --warmup 300 --json 2>/dev/null | sed "s/^/$b $r /"
done; done > $OUT/idle11.txt
python3 - <<'PY'
import json,collections,os
for f in ('s11.txt','idle11.txt'):
    d=collections.defaultdict(list)
    for l in open(os.environ['OUT']+'/'+f):
        b,r,j=l.split(' ',2); j=json.loads(j)
        d[(j['session'],j['workers'],b)].append((j['p50_us'],j['p99_us']))
    for k in sorted(d): print(f, k, ' '.join('%.2f'%x[0] for x in d[k]), ' p99', ' '.join('%.1f'%x[1] for x in d[k]))
PY
