import sys
fn,a,b=sys.argv[1],float(sys.argv[2]),float(sys.argv[3])
rows=[tuple(map(float,l.split())) for l in open(fn)]
t0=rows[0][0]; FULL=1.25e9*1448/1514
rows=[(r[0]-t0,r[1]) for r in rows if a<=r[0]-t0<=b]
# deficit: cumulative (elapsed*FULL - bytes) -> find where link lags
gaps=[]; 
for i in range(1,len(rows)):
    dt=rows[i][0]-rows[i-1][0]; db=rows[i][1]-rows[i-1][1]
    idle=dt-db/FULL
    gaps.append((rows[i-1][0],dt,idle))
# merge consecutive samples where rate<30% into idle intervals
out=[];cur=None
for t,dt,idle in gaps:
    if idle>0.7*dt:
        if cur and t-cur[1]<0.0015: cur[1]=t+dt; cur[2]+=idle
        else:
            if cur: out.append(cur)
            cur=[t,t+dt,idle]
if cur: out.append(cur)
prev=None
for s,e,idle in out:
    if idle<0.0005: continue
    print('%8.4f idle %.2f ms%s'%(s,idle*1e3, '' if prev is None else '  (+%.1f ms since last)'%((s-prev)*1e3)))
    prev=s
