#!/bin/bash
cd "$(dirname "$0")"
for r in 1 2; do for b in old new; do bin=./chorus-old; [ $b = new ] && bin=./chorus;
  for w in 2 4; do for s in process threaded; do
  $bin bench allreduce --workers $w --session $s --min 256K --max 16M --json 2>/dev/null | grep '^{' | sed "s/^/$b $r /"
  done; done
done; done > $OUT/ar9.txt
python3 - <<'PY'
import json,collections,os
d=collections.defaultdict(list)
for l in open(os.environ['OUT']+'/ar9.txt'):
    b,r,j=l.split(' ',2); j=json.loads(j)
    d[(j['workers'],j['session'],j['bytes'],b)].append(j['time_us'])
for k in sorted(d): print(k, ' '.join('%.1f'%x for x in d[k]))
PY
