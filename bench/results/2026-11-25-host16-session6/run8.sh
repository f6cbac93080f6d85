#!/bin/bash
# session 6, third run: session A/B (old 392ae85, new), floor (LeanRound) in the same run
cd "$(dirname "$0")"
for r in 1 2 3 4; do for b in old new; do bin=./chorus-old; [ $b = new ] && bin=./chorus;
  $bin bench session --sessions threaded,process-shm --workers 1,2,4,8 --iters 20000 --json 2>/dev/null | sed "s/^/$b $r /"
done; done > $OUT/s8.txt
./session.test -test.run xxx -test.bench 'LeanRound/inline/(1|2|4|8)$' -test.benchtime 1s -test.count 2 > $OUT/lean.txt 2>&1
python3 - <<'PY'
import json,collections,os
d=collections.defaultdict(list)
for l in open(os.environ['OUT']+'/s8.txt'):
    b,r,j=l.split(' ',2); j=json.loads(j)
    d[(j['session'],j['workers'],b)].append(j['p50_us'])
for k in sorted(d): print(k, ' '.join('%.2f'%x for x in d[k]))
PY
grep Bench $OUT/lean.txt
