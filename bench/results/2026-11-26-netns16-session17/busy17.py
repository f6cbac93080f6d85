import sys
fn=sys.argv[1]; a=float(sys.argv[2]); b=float(sys.argv[3])
rows=[tuple(map(float,l.split())) for l in open(fn)]
t0=rows[0][0]; FULL=1.25e9*1448/1514
rows=[(r[0]-t0,r[1]) for r in rows if a<=r[0]-t0<=b]
# segments: maximal stretches where 20ms-bin util >= 0.9, bounded at dips
# compute 20ms bins
bins=[]; last=rows[0]
for r in rows[1:]:
    if r[0]-last[0]>=0.02:
        bins.append((last[0], r[0], (r[1]-last[1])/(r[0]-last[0])/FULL)); last=r
segs=[]; cur=[]
for x in bins:
    if x[2]>=0.9: cur.append(x)
    else:
        if len(cur)>=10: segs.append(cur)
        cur=[]
if len(cur)>=10: segs.append(cur)
for s in segs:
    # exact utilisation from raw rows within [start,end]
    s0,s1=s[0][0],s[-1][1]
    r0=min(rows,key=lambda r:abs(r[0]-s0)); r1=min(rows,key=lambda r:abs(r[0]-s1))
    u=(r1[1]-r0[1])/(r1[0]-r0[0])/FULL
    print('%7.3f-%7.3f %5.3f s util %.4f' % (r0[0], r1[0], r1[0]-r0[0], u))
