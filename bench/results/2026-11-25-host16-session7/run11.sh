#!/bin/bash
# session 7: old 56541f0, new = broadcast log (CHORUS_SHM_LOG=1 default), nolog = new with CHORUS_SHM_LOG=0
cd "$(dirname "$0")"
for r in 1 2 3 4; do for b in old new nolog; do bin=./chorus-$b; env=; [ $b = new ] && bin=./chorus; [ $b = nolog ] && { bin=./chorus; env=CHORUS_SHM_LOG=0; }
  env $env $bin bench session --sessions threaded,process-shm --workers 1,2,4,8 --iters 20000 --json 2>/dev/null | sed "s/^/$b $r /"
done; done > $OUT/s11.txt
for b in old new; do bin=./chorus-$b; [ $b = new ] && bin=./chorus;
  $bin bench session --sessions process-shm --workers 12,16 --iters 10000 --json 2>/dev/null | sed "s/^/$b 1 /"
done > $OUT/s11big.txt
python3 - <<'PY'
import json,collections,os
for f in ('s11.txt','s11big.txt'):
    d=collections.defaultdict(list)
    for l in open(os.environ['OUT']+'/'+f):
        b,r,j=l.split(' ',2); j=json.loads(j)
        d[(j['session'],j['workers'],b)].append((j['p50_us'],j['p99_us']))
    for k in sorted(d): print(f, k, ' '.join('%.2f'%x[0] for x in d[k]), ' p99', ' '.join('%.1f'%x[1] for x in d[k]))
PY
