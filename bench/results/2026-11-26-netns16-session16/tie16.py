"""Session 16: one worker per host, chorus (default) against gloo at the
wire bound. Per folder, shape and size: chorus p50 and mean, gloo's mean
(1 s windows), each over the wire bound 2(k-1)/k * bytes / 1.25e9 s *
1514/1448 (10 Gbit/s, MSS 1448 with timestamps, 66 bytes per segment on
the wire); then, where the folder has nstat counters, the wire bytes
beyond the payload's segments: pure ACKs (TcpOutSegs - TCPOrigDataSent -
TcpRetransSegs, 66 bytes each) and retransmitted segments (1514 each),
per data segment. Usage: tie16.py DIR...
"""
import json, glob, os, sys

def wire_us(k, b):
    return 2 * (k - 1) / k * b / 1.25e9 * 1514 / 1448 * 1e6

def load(f):
    return {json.loads(l)["bytes"]: json.loads(l) for l in open(f)}

def nstat(f):
    tot = {}
    for l in open(f):
        p = l.split()
        if len(p) >= 2 and p[1].isdigit():
            tot[p[0]] = tot.get(p[0], 0) + int(p[1])
    data = tot["TcpExtTCPOrigDataSent"]
    acks = tot["TcpOutSegs"] - data - tot["TcpRetransSegs"]
    return acks * 66 / (data * 1514), tot["TcpRetransSegs"] / data

def sweeps(dirs):
    """Each default sweep (def, vdef) with its folder's gloo: (d, k, f,
    gloo file, chorus rows, gloo rows), one worker per host."""
    for d in dirs:
        for k in (2, 4):
            sh = f"{k}hosts-1workers"
            gf = f"{d}/gloo-{sh}.jsonl"
            if not os.path.exists(gf):
                continue
            g = load(gf)
            for f in sorted(glob.glob(f"{d}/allreduce-{sh}*.jsonl")):
                lab = f.split(sh)[1].strip("-").replace(".jsonl", "") or "def"
                if lab in ("def", "vdef"):
                    yield d, k, f, gf, load(f), g

rows = {}  # (k, bytes) -> ratios of every sweep, for the summary
for d, k, f, gf, c, g in sweeps(sys.argv[1:]):
    for b in sorted(c):
        if b < 4 << 20 or b not in g:
            continue
        w = wire_us(k, b)
        rows.setdefault((k, b), []).append((g[b]["time_us"] / c[b]["p50_us"], g[b]["time_us"] / c[b]["time_us"], c[b]["p50_us"] / w, c[b]["time_us"] / w, g[b]["time_us"] / w))
        print(f"{d:3} {k}x1 {b >> 20:4}M  chorus p50 {c[b]['p50_us'] / w:.4f} mean {c[b]['time_us'] / w:.4f}"
              f"  gloo {g[b]['time_us'] / w:.4f}  gloo/chorus p50 {g[b]['time_us'] / c[b]['p50_us']:.3f} mean {g[b]['time_us'] / c[b]['time_us']:.3f}")
    ns = f.replace(".jsonl", ".netstat")
    if os.path.exists(ns):
        ca, cr = nstat(ns)
        ga, gr = nstat(gf.replace(".jsonl", ".netstat"))
        print(f"{d:3} {k}x1 wire beyond the data segments: chorus acks {ca:.3%} retransmits {cr:.3%}; gloo acks {ga:.3%} retransmits {gr:.3%}")

# Summary over every folder given: per shape and size.
print("\nshape size sweeps | gloo/chorus p50: min med max | by mean: min med max | /wire median: chorus p50, chorus mean, gloo")
med = lambda xs: sorted(xs)[len(xs) // 2]
for (k, b), rs in sorted(rows.items()):
    col = lambda i: [r[i] for r in rs]
    print(f"{k}x1 {b >> 20:4}M {len(rs):3} | {min(col(0)):.3f} {med(col(0)):.3f} {max(col(0)):.3f} | {min(col(1)):.3f} {med(col(1)):.3f} {max(col(1)):.3f} | {med(col(2)):.4f} {med(col(3)):.4f} {med(col(4)):.4f}")
