#!/bin/bash
# session 7 final binary (512cb21) vs old 56541f0: 4 rounds, rotating order, threaded + process-shm 1,2,4,8
cd "$(dirname "$0")"
for r in 1 2 3 4; do for b in $([ $((r % 2)) = 1 ] && echo "old new" || echo "new old"); do bin=./chorus-$b; [ $b = new ] && bin=./chorus;
  $bin bench session --sessions threaded,process-shm --workers 1,2,4,8 --iters 20000 --json 2>/dev/null | sed "s/^/$b $r /"
done; done > $OUT/s17.txt
python3 - <<'PY'
import json,collections,os
d=collections.defaultdict(list)
for l in open(os.environ['OUT']+'/s17.txt'):
    b,r,j=l.split(' ',2); j=json.loads(j)
    d[(j['session'],j['workers'],b)].append((j['p50_us'],j['p99_us']))
for k in sorted(d): print(k, ' '.join('%.2f'%x[0] for x in d[k]), ' p99', ' '.join('%.1f'%x[1] for x in d[k]))
PY
