#!/usr/bin/python3
"""Side-by-side tables of `scripts/netns-check.sh --bench` runs with
BENCH_ENVS variants (allreduce-*-vLABEL.jsonl), next to gloo, Open MPI and
the old/new sweeps where present.

Usage: bench/variants_summary.py RUNDIR [RUNDIR...]
Per shape, one row per size and one column per variant: the mean time per
allreduce of each run, separated by "/", then the runs' median calls
(p50) in brackets, so the spread between runs stays visible.
"""
import glob
import json
import os
import re
import sys

dirs=sys.argv[1:]
def load(p):
    d={}
    if not os.path.exists(p): return d
    for l in open(p):
        if l.startswith('{'):
            j=json.loads(l)
            if 'bytes' in j: d[j['bytes']]=j
    return d
for shape in ['4hosts-1workers','2hosts-1workers','4hosts-2workers','2hosts-2workers']:
    vs=sorted({re.sub(r'.*-v(\w+)\.jsonl',r'\1',f) for d in dirs for f in glob.glob(f'{d}/allreduce-{shape}-v*.jsonl')})
    if not vs: continue
    print('==',shape,'(mean us per run; p50 in brackets)')
    rows={}
    sizes=set()
    for v in vs+['gloo','openmpi','old','new']:
        for d in dirs:
            p={'gloo':f'{d}/gloo-{shape}.jsonl','openmpi':f'{d}/openmpi-{shape}.jsonl','old':f'{d}/allreduce-{shape}-old.jsonl','new':f'{d}/allreduce-{shape}.jsonl'}.get(v,f'{d}/allreduce-{shape}-v{v}.jsonl')
            for b,j in load(p).items():
                rows.setdefault(v,{}).setdefault(b,[]).append((j.get('time_us'),j.get('p50_us')))
                sizes.add(b)
    vs=[v for v in vs+['gloo','openmpi','old','new'] if v in rows]
    print('size'.rjust(8),*[v.rjust(16) for v in vs])
    for b in sorted(sizes):
        cells=[]
        for v in vs:
            xs=rows[v].get(b,[])
            cells.append(('/'.join('%.0f'%m for m,_ in xs)+(' [%s]'%'/'.join('%.0f'%p for _,p in xs if p) if any(p for _,p in xs) else '')).rjust(16) if xs else '-'.rjust(16))
        print(('%dK'%(b//1024)).rjust(8),*cells)
