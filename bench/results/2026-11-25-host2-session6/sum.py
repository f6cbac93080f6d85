import json,glob,statistics as st,sys
d={}
for f in glob.glob('/work/ab/out/*.txt'):
    name=f.split('/')[-1].rsplit('-',1)[0]
    for l in open(f):
        if l.startswith('{'):
            j=json.loads(l); d.setdefault((name,j['bytes']),[]).append(j['time_us'])
for b in (1024,4096,16384):
    row=[f"{b:6d}"]
    for n in ('old-p','new-p','mpi','old-t','new-t'):
        v=d.get((n,b),[])
        row.append(f"{n} {min(v):.3f}/{st.median(v):.3f} (n={len(v)})" if v else n+" -")
    print("  ".join(row))
