"""Summarize benchmark JSON lines (from chorus bench --json and the anchor
scripts) into a markdown table: median time per (backend, bytes) over all
rounds, and each backend's ratio to a base backend.

Usage: python3 bench/summarize.py FILE.jsonl [--base BACKEND] [--bench allreduce]
"""
import argparse
import json
import statistics
from collections import defaultdict


def human(n):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--base", default=None, help="backend the ratios divide by")
    ap.add_argument("--bench", default=None)
    a = ap.parse_args()
    times = defaultdict(list)
    busbw = defaultdict(list)
    wrong = defaultdict(int)
    order = []
    for line in open(a.file):
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if a.bench and r.get("bench") != a.bench:
            continue
        b = r["backend"]
        if b not in order:
            order.append(b)
        k = (b, r["bytes"])
        times[k].append(r["time_us"])
        busbw[k].append(r.get("busbw_gbs", 0))
        wrong[b] += r.get("wrong", 0)
    base = a.base or order[0]
    sizes = sorted({s for _, s in times})
    others = [b for b in order if b != base]
    hdr = ["size"] + [f"{b} us" for b in order] + [f"{b}/{base}" for b in others] + [f"{order[0]} busbw GB/s", "runs"]
    print("| " + " | ".join(hdr) + " |")
    print("|" + " ---: |" * len(hdr))
    for s in sizes:
        row = [human(s)]
        med = {b: statistics.median(times[(b, s)]) for b in order if (b, s) in times}
        row += [f"{med[b]:.1f}" if b in med else "-" for b in order]
        for b in others:
            row.append(f"{med[b] / med[base]:.2f}" if b in med and base in med else "-")
        bw = busbw.get((order[0], s))
        row.append(f"{statistics.median(bw):.1f}" if bw else "-")
        row.append(str(len(times.get((order[0], s), []))))
        print("| " + " | ".join(row) + " |")
    print()
    print("wrong elements: " + ", ".join(f"{b} {wrong[b]}" for b in order))


if __name__ == "__main__":
    main()
