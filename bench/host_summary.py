#!/usr/bin/env python3
"""Tables of bench/host.sh: host_summary.py HOST.JSONL VERSIONS NOTES.

Anchors repeated in one file (several runs) are reduced to their median.
"""
import json
import statistics
import sys


def size(b):
    for u, s in ((1 << 20, "M"), (1 << 10, "K")):
        if b >= u and b % u == 0:
            return f"{b // u}{s}"
    return str(b)


def main():
    src, versions, notes = sys.argv[1:4]
    rows = [json.loads(l) for l in open(src) if l.startswith("{")]
    out = [l.rstrip("\n") for l in open(versions)]
    bw = [r for r in rows if r.get("bench") == "membw"]
    if bw:
        m = bw[-1]
        out += ["", f"Memory bandwidth (STREAM-like, {m['threads']} threads, {m['array_bytes'] >> 20} MiB arrays): "
                f"copy {m['copy_gbs']:.1f} GB/s, triad {m['triad_gbs']:.1f} GB/s; bound B = {max(m['copy_gbs'], m['triad_gbs']):.1f} GB/s."]

    sess, modes = {}, {}
    for r in rows:
        if r.get("bench") != "session":
            continue
        idle = r.get("idle_us", 0) or 0
        if idle == 0 and r.get("wait", "auto") == "auto":
            sess.setdefault(r["workers"], {})[r["transport"]] = r
        key = (r.get("wait") or r["transport"], "idle" if idle else "b2b")
        modes.setdefault(r["workers"], {})[key] = r
    if sess:
        out += ["", "Session round trip (no-op CallPacked + sync of every worker), us:", "",
                "| workers | threaded p50 | threaded p99 | process/shm p50 | process/shm p99 |",
                "| ---: | ---: | ---: | ---: | ---: |"]
        for n in sorted(sess):
            t, s = sess[n].get("inproc"), sess[n].get("shm")
            f = lambda r, k: "-" if r is None else f"{r[k]:.2f}"
            out.append(f"| {n} | {f(t, 'p50_us')} | {f(t, 'p99_us')} | {f(s, 'p50_us')} | {f(s, 'p99_us')} |")
    cols = [(m, k) for m in ("auto", "busy", "yield", "park") for k in ("b2b", "idle")] + [("shm", "idle")]
    if any(c in modes[n] for n in modes for c in cols if c != ("auto", "b2b")):
        out += ["", "Threaded session by CHORUS_SESSION_WAIT, p50 / p99 us; b2b: rounds back to back, "
                "idle: controller idle 200 us before each round (wakes parked workers); shm: process/shm:", "",
                "| workers | " + " | ".join(f"{m} {k}" for m, k in cols) + " |",
                "| ---: |" + " ---: |" * len(cols)]
        for n in sorted(modes):
            cell = lambda r: "-" if r is None else f"{r['p50_us']:.2f} / {r['p99_us']:.0f}"
            out.append(f"| {n} | " + " | ".join(cell(modes[n].get(c)) for c in cols) + " |")

    ar = {}
    for r in rows:
        if r.get("bench") != "allreduce":
            continue
        key = r["backend"] if r["backend"] != "cpu" else "chorus-" + r["session"]
        ar.setdefault(r["workers"], {}).setdefault(r["bytes"], {}).setdefault(key, []).append(r)

    def med(rs):
        if not rs:
            return None
        rs = sorted(rs, key=lambda r: r["time_us"])
        m = dict(rs[len(rs) // 2])
        m["wrong"] = max(r["wrong"] for r in rs)
        return m

    def us(r):
        if r is None:
            return "-"
        return f"{r['time_us']:.2f}" + (f" ({r['wrong']} WRONG)" if r["wrong"] else "")

    def ratio(a, b):
        return "-" if a is None or b is None else f"{a['time_us'] / b['time_us']:.2f}"

    def frac(r):
        return "-" if r is None or not r.get("mem_bound_frac") else f"{r['mem_bound_frac']:.2f}"

    for n in sorted(ar):
        out += ["", f"float32 SUM allreduce, {n} workers, time per call in us (max over ranks); "
                "bound = fraction of the memory-bandwidth bound 2nS/B:", "",
                "| size | chorus process | chorus threaded | openmpi | gloo | process/openmpi | gloo/process | process bound | threaded bound | process path |",
                "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for b in sorted(ar[n]):
            d = {k: med(v) for k, v in ar[n][b].items()}
            p, t, m, g = (d.get(k) for k in ("chorus-process", "chorus-threaded", "openmpi", "gloo"))
            out.append(f"| {size(b)} | {us(p)} | {us(t)} | {us(m)} | {us(g)} | {ratio(p, m)} | {ratio(g, p)} | "
                       f"{frac(p)} | {frac(t)} | {(p or {}).get('path', '') or '-'} |")
    ns = [l.rstrip("\n") for l in open(notes) if l.strip()]
    if ns:
        out += [""] + ns
    print("\n".join(out))


if __name__ == "__main__":
    main()
