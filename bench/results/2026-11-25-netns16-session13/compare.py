#!/usr/bin/python3
"""Session 13's tables: per run folder and shape, the median call (p50,
us) of the old binary (a17e18e), the new one and its variants, Open MPI's
mean, old/new by p50, and the wire bound (ring bound x 1514/1448).
Usage: compare.py RUNDIR..."""
import glob, json, os, re, sys

def load(p):
    d = {}
    for l in open(p):
        if l.startswith('{'):
            j = json.loads(l)
            if 'bytes' in j:
                d[j['bytes']] = j
    return d

for d in sys.argv[1:]:
    print(f'== {d}')
    shapes = sorted({re.match(r'allreduce-(\d+)hosts-(\d+)workers', os.path.basename(f)).groups() for f in glob.glob(f'{d}/allreduce-*.jsonl')}, key=lambda s: (-int(s[0]), s[1]))
    for h, w in shapes:
        runs = {}
        for f in sorted(glob.glob(f'{d}/allreduce-{h}hosts-{w}workers*.jsonl')):
            label = os.path.basename(f)[len(f'allreduce-{h}hosts-{w}workers'):-len('.jsonl')].lstrip('-') or 'new'
            runs[label] = load(f)
        mpi = load(f'{d}/openmpi-{h}hosts-{w}workers.jsonl') if os.path.exists(f'{d}/openmpi-{h}hosts-{w}workers.jsonl') else {}
        labels = sorted(runs, key=lambda l: (l != 'old', l != 'new', l))
        print(f'{h}x{w}: ' + ' '.join(f'{l:>9}' for l in labels) + '   old/new   mpi   wire  path(new)')
        base = 'new' if 'new' in runs else labels[1] if len(labels) > 1 else labels[0]
        k = int(h)
        for b in sorted(runs[base]):
            wire = 2 * (k - 1) / k * b / 1.25e3 * 1514 / 1448
            cells = ' '.join(f"{runs[l][b]['p50_us']:9.1f}" if b in runs[l] else f"{'-':>9}" for l in labels)
            on = runs['old'][b]['p50_us'] / runs[base][b]['p50_us'] if 'old' in runs and b in runs['old'] else float('nan')
            m = mpi.get(b, {}).get('time_us')
            ms = '-' if m is None else str(round(m))
            print(f"{b:>9} {cells} {on:9.3f} {ms:>5} {wire:6.0f}  {runs[base][b].get('path')}")
