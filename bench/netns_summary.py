#!/usr/bin/python3
"""Markdown tables from one `scripts/netns-check.sh --bench OUTDIR` run.

Usage: bench/netns_summary.py OUTDIR
Per shape (hosts x workers): chorus and gloo time per allreduce, their
ratio, the ring bound 2(K-1)/K x size / rate for K hosts (rate from
OUTDIR/setup.jsonl), and both against the bound; then the stream anchors
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


def main(d):
    setup = lines(os.path.join(d, "setup.jsonl"))[0]
    bps = rate_bps(setup["rate"])
    print(f"Link: {setup['shape']}, run {setup['date']}\n")
    for f in sorted(glob.glob(os.path.join(d, "allreduce-*.jsonl"))):
        k, w = map(int, re.search(r"(\d+)hosts-(\d+)workers", f).groups())
        ch = {r["bytes"]: r["time_us"] for r in lines(f)}
        gl = {r["bytes"]: r["time_us"] for r in lines(f.replace("allreduce-", "gloo-"))}
        print(f"{k} hosts x {w} workers:\n")
        print("| size | chorus us | gloo us | gloo/chorus | ring bound us | chorus/bound | gloo/bound |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for b in sorted(ch):
            bound = 2 * (k - 1) / k * b * 8 / bps * 1e6
            g = gl.get(b)
            gs = f"{g:.0f} | {g / ch[b]:.2f}" if g else "- | -"
            gb = f"{g / bound:.2f}" if g else "-"
            print(f"| {size(b)} | {ch[b]:.0f} | {gs} | {bound:.0f} | {ch[b] / bound:.2f} | {gb} |")
        print()
    st = lines(os.path.join(d, "stream.jsonl"))
    if st:
        print("Streams host 0 -> host 1 (256 MiB per direction, median of 3):\n")
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
    main(sys.argv[1])
