#!/bin/bash
# session 8: push allreduce (new) vs d3bf861 (old), interleaved; then host.sh with new.
cd "$(dirname "$0")"
bw=$(./chorus-new bench membw --json 2>/dev/null | python3 -c 'import sys,json; j=[json.loads(l) for l in sys.stdin if l.startswith("{")][-1]; print("%.2f"%max(j["copy_gbs"],j["triad_gbs"]))' 2>/dev/null)
echo "membw $bw" | tee $OUT/bw.txt
./chorus-new bench membw > $OUT/membw.txt 2>&1
for r in 1 2 3 4; do for b in $([ $((r % 2)) = 1 ] && echo "old new" || echo "new old"); do
  for n in 2 4 8; do
    ./chorus-$b bench allreduce --backend cpu --session process --workers $n --dtype float32 --min 256K --max 64M --rounds 1 --membw "${bw:-0}" --json 2>/dev/null | grep '^{' | sed "s/^/$b $r process $n /"
  done
  ./chorus-$b bench allreduce --backend cpu --session threaded --workers 8 --dtype float32 --min 256K --max 64M --rounds 1 --membw "${bw:-0}" --json 2>/dev/null | grep '^{' | sed "s/^/$b $r threaded 8 /"
done; done > $OUT/ar18.txt
python3 - <<'PY' | tee $OUT/ar18.md
import json,collections,os
d=collections.defaultdict(list)
for l in open(os.environ['OUT']+'/ar18.txt'):
    b,r,s,n,j=l.split(' ',4); j=json.loads(j)
    d[(s,int(n),j['bytes'],b)].append((j['time_us'],j['p50_us'],j.get('mem_bound_frac',0),j.get('path','')))
for k in sorted(d): print(k, 'mean', ' '.join('%.1f'%x[0] for x in d[k]), ' p50', ' '.join('%.1f'%x[1] for x in d[k]), ' frac', ' '.join('%.2f'%x[2] for x in d[k]), d[k][0][3])
PY
tar czf $OUT/out18.tgz -C $OUT ar18.txt ar18.md bw.txt membw.txt
