#!/usr/bin/python3
"""Markdown tables from one `scripts/netns-check.sh --bench OUTDIR` run.

Usage: bench/netns_summary.py OUTDIR [OUTDIR...]
With several runs (same rate), every time is the median over the runs
that measured it. Runs with BENCH_OLD_BIN add old/new columns, runs
with BENCH_PLAIN=1 plaintext-data-link columns (and the old binary's
plaintext times when both are set); runs with BENCH_STRIPES one table per
stripe setting (allreduce-*-sN.jsonl, plaintext -plain-sN). Per shape (hosts x workers): chorus and gloo time per allreduce, their
ratio, the ring bound 2(K-1)/K x size / rate for K hosts (rate from
OUTDIR/setup.jsonl), and both against the bound; chorus's median call
(p50: the mean hides whether a gap is every call or a few stalled ones)
and chorus p50 and gloo against the wire bound (the ring bound times
1514/1448: the frame of a full TCP segment at MTU 1500 with timestamps
against its payload, which is what tbf counts); then the stream anchors
(median over repetitions, Gbit/s per direction and CPU seconds per GB
moved, client and server).
"""
import glob
import json
import os
import re
import statistics
import sys


def lines(path):
    if not os.path.exists(path):
        return []
    return [json.loads(l) for l in open(path) if l.startswith("{")]


def rate_bps(rate):
    m = re.fullmatch(r"(\d+)(g|m|k)?bit", rate)
    return int(m.group(1)) * {"g": 1e9, "m": 1e6, "k": 1e3, None: 1}[m.group(2)]


def size(b):
    for unit, s in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << s and b % (1 << s) == 0:
            return f"{b >> s}{unit}"
    return str(b)


def times(dirs, name, key="time_us"):
    """bytes -> median key (time_us) over the runs in dirs that have name."""
    by = {}
    for d in dirs:
        for r in lines(os.path.join(d, name)):
            if key in r:
                by.setdefault(r["bytes"], []).append(r[key])
    return {b: statistics.median(v) for b, v in by.items()}


# WIRE: bytes on the shaped link per payload byte of a full TCP segment
# (MTU 1500, IPv4, TCP timestamps: 1448 payload bytes in a 1514-byte frame).
WIRE = 1514 / 1448


def main(dirs):
    d = dirs[0]
    setups = [lines(os.path.join(x, "setup.jsonl"))[0] for x in dirs]
    setup = setups[0]
    if any(s["rate"] != setup["rate"] for s in setups):
        sys.exit("netns_summary: runs at different rates")
    bps = rate_bps(setup["rate"])
    print(f"Link: {setup['shape']}, runs {', '.join(s['date'] for s in setups)}"
          + (" (medians over the runs)" if len(dirs) > 1 else "") + "\n")
    # allreduce-KhostsWworkers.jsonl, or -sN.jsonl with BENCH_STRIPES.
    pat = re.compile(r"allreduce-(\d+)hosts-(\d+)workers(?:-s(\d+))?\.jsonl")
    names = sorted({os.path.basename(f) for x in dirs for f in glob.glob(os.path.join(x, "allreduce-*.jsonl"))
                    if pat.fullmatch(os.path.basename(f))},
                   key=lambda n: tuple(int(g or 0) for g in pat.fullmatch(n).groups()))
    for f in names:
        k, w, ns = pat.fullmatch(f).groups()
        k, w = int(k), int(w)
        stem, st = f"allreduce-{k}hosts-{w}workers", f"-s{ns}" if ns else ""
        ch = times(dirs, f)
        p50 = times(dirs, f, "p50_us")
        gl = times(dirs, f"gloo-{k}hosts-{w}workers.jsonl")
        # An old/new A/B (BENCH_OLD_BIN): the old binary's times (one
        # setting: it may not know stripes); with BENCH_PLAIN, plaintext
        # data links' times (of the same stripe setting).
        old = times(dirs, stem + "-old.jsonl")
        plain = times(dirs, stem + "-plain" + st + ".jsonl")
        oldplain = times(dirs, stem + "-old-plain.jsonl")
        print(f"{k} hosts x {w} workers" + (f", {ns} stripes (CHORUS_HIER_STRIPES={ns})" if ns else "") + ":\n")
        oh, ol = (" old us | old/new |", " ---: | ---: |") if old else ("", "")
        ph, pl = (" plaintext us | gloo/plaintext | plaintext/bound |", " ---: | ---: | ---: |") if plain else ("", "")
        if oldplain:
            ph, pl = ph + " old plaintext us | old/new plaintext | gloo/old plaintext |", pl + " ---: | ---: | ---: |"
        print(f"| size | chorus us |{oh} gloo us | gloo/chorus | ring bound us | chorus/bound | gloo/bound | chorus p50 us | p50/wire | gloo/wire |{ph}")
        print(f"| ---: | ---: |{ol} ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |{pl}")
        for b in sorted(ch):
            bound = 2 * (k - 1) / k * b * 8 / bps * 1e6
            g = gl.get(b)
            gs = f"{g:.0f} | {g / ch[b]:.2f}" if g else "- | -"
            gb = f"{g / bound:.2f}" if g else "-"
            os_ = ""
            if old:
                o = old.get(b)
                os_ = f" {o:.0f} | {o / ch[b]:.2f} |" if o else " - | - |"
            ps = ""
            if plain:
                p = plain.get(b)
                ps = (f" {p:.0f} | {g / p:.2f} |" if g else f" {p:.0f} | - |") + f" {p / bound:.2f} |" if p else " - | - | - |"
            if oldplain:
                o, p = oldplain.get(b), plain.get(b)
                ps += (f" {o:.0f} |" + (f" {o / p:.2f} |" if p else " - |") + (f" {g / o:.2f} |" if g else " - |")) if o else " - | - | - |"
            wire = bound * WIRE
            m = p50.get(b)
            ms = f" {m:.0f} | {m / wire:.3f} |" if m else " - | - |"
            gw = f" {g / wire:.3f} |" if g else " - |"
            print(f"| {size(b)} | {ch[b]:.0f} |{os_} {gs} | {bound:.0f} | {ch[b] / bound:.2f} | {gb} |{ms}{gw}{ps}")
        print()
    st = [r for x in dirs for r in lines(os.path.join(x, "stream.jsonl"))]
    if st:
        print(f"Streams host 0 -> host 1 (256 MiB per direction, median of {3 * len(dirs)}):\n")
        print("| stream | Gbit/s per direction | client CPU s/GB | server CPU s/GB |")
        print("| --- | ---: | ---: | ---: |")
        for mode in ("tcp", "tls"):
            for dr in ("uni", "bidi"):
                rs = [r for r in st if r["mode"] == mode and r["dir"] == dr]
                if not rs:
                    continue

                def cpu(role):
                    xs = [(r["cpu_user_s"] + r["cpu_sys_s"]) / (r["bytes"] / 1e9) for r in rs if r["role"] == role]
                    return statistics.median(xs) if xs else float("nan")

                g = statistics.median(r["gbit_s"] for r in rs if r["role"] == "client")
                print(f"| {mode.upper()} {'both ways' if dr == 'bidi' else 'one way'} | {g:.2f} | {cpu('client'):.2f} | {cpu('server'):.2f} |")
        print()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
