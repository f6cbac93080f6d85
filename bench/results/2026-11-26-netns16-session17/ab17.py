import json,glob,sys,os
W=1514/1448
def bound(h,b): return 2*(h-1)/h*b/1.25e9*W*1e6
def load(f):
    out={}
    if not os.path.exists(f): return out
    for l in open(f):
        d=json.loads(l)
        if 'bytes' in d: out[d['bytes']]=d
    return out
for run in sys.argv[1:]:
    for shape in ('2hosts-2workers','4hosts-2workers','2hosts-1workers','4hosts-1workers'):
        old=load(f'{run}/allreduce-{shape}-old.jsonl'); new=load(f'{run}/allreduce-{shape}.jsonl'); gl=load(f'{run}/gloo-{shape}.jsonl')
        if not new: continue
        h=int(shape[0])
        print(run, shape)
        for b in sorted(new):
            bd=bound(h,b); n=new[b]; o=old.get(b); g=gl.get(b)
            s='  %6.0fM new p50 %.3fx mean %.3fx' % (b/2**20, n['p50_us']/bd, n['time_us']/bd)
            if o: s+=' | old p50 %.3fx mean %.3fx | old/new p50 %.3f mean %.3f' % (o['p50_us']/bd, o['time_us']/bd, o['p50_us']/n['p50_us'], o['time_us']/n['time_us'])
            if g: s+=' | gloo %.3fx, gloo/new %.2f' % (g['time_us']/bd, g['time_us']/n['time_us'])
            s+='  '+n.get('path','')
            print(s)
