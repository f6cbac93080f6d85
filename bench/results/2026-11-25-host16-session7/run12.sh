#!/bin/bash
# session 7: A/B with new first (p99 check), then host.sh with the new binary
cd "$(dirname "$0")"
for r in 1 2 3; do for b in new old; do bin=./chorus-$b; [ $b = new ] && bin=./chorus;
  $bin bench session --sessions threaded,process-shm --workers 1,2,4,8 --iters 20000 --json 2>/dev/null | sed "s/^/$b $r /"
done; done > $OUT/s12.txt
python3 - <<'PY'
import json,collections,os
for f in ('s12.txt',):
    d=collections.defaultdict(list)
    for l in open(os.environ['OUT']+'/'+f):
        b,r,j=l.split(' ',2); j=json.loads(j)
        d[(j['session'],j['workers'],b)].append((j['p50_us'],j['p99_us']))
    for k in sorted(d): print(f, k, ' '.join('%.2f'%x[0] for x in d[k]), ' p99', ' '.join('%.1f'%x[1] for x in d[k]))
PY
HOST_INSTALL=0 HOST_MAX_WORKERS=8 bash ./host.sh . $OUT/host > $OUT/host.log 2>&1
tail -80 $OUT/host/host.md
cd $OUT && tar czf host.tgz host host.log && rm -rf host
