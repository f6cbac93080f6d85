"""Session 14: every chorus sweep of a netns-check --bench folder (old,
new and -vLABEL variants) by size, p50/mean us, gloo's mean us (1 s
windows), and gloo / chorus p50 per sweep. Usage: compare14.py DIR...
"""
import json,glob,sys,os

def size(b):
    return f"{b>>20}M" if b >= 1<<20 else f"{b>>10}K"
for d in sys.argv[1:]:
    for sh in ("2hosts-1workers","4hosts-1workers","2hosts-2workers","4hosts-2workers"):
        g={}
        gf=f"{d}/gloo-{sh}.jsonl"
        if os.path.exists(gf):
            for l in open(gf):
                r=json.loads(l); g[r["bytes"]]=r["time_us"]
        vs=sorted(glob.glob(f"{d}/allreduce-{sh}*.jsonl"))
        if not vs: continue
        print(f"{d} {sh}")
        data={}
        for v in vs:
            lab=v.split(sh)[1].strip("-").replace(".jsonl","") or "new"
            for l in open(v):
                r=json.loads(l); data.setdefault(r["bytes"],{})[lab]=(r["p50_us"],r["time_us"])
        labs=sorted({l for x in data.values() for l in x})
        print("  size   "+"  ".join(f"{l:>18}" for l in labs)+"      gloo  | gloo/p50 per variant")
        for b in sorted(data):
            row=data[b]
            s=f"  {size(b):>5} "+"  ".join(f"{row[l][0]:8.0f}/{row[l][1]:8.0f}" if l in row else " "*17 for l in labs)
            gl=g.get(b)
            s+=f"  {gl:8.0f}  | " + " ".join(f"{gl/row[l][0]:.3f}" for l in labs if l in row) if gl else ""
            print(s)
