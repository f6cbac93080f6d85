#!/usr/bin/env python3
"""The table of scripts/decode-ab.sh: per decode row (mode, workers,
batch, context) the range of ms per step over the rounds of each build,
the fraction of the run's bound at the best, and each build's best
against the first build's (below 1: faster).
Usage: decode-ab.py OUT LABEL... (reads OUT/LABEL-*.jsonl)
"""
import glob
import json
import os
import sys


def rows(out, label):
    got = {}
    for path in sorted(glob.glob(os.path.join(out, label + "-*.jsonl"))):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                r = json.loads(line)
                if r.get("what") != "decode":
                    continue
                key = (r.get("mode", ""), r.get("workers", 1), r.get("batch", 0), r.get("ctx", 0))
                got.setdefault(key, []).append((r["ms"], r.get("of_bound", 0)))
    return got


def main(argv):
    if len(argv) < 3:
        sys.exit("usage: decode-ab.py OUT LABEL...")
    out, labels = argv[1], argv[2:]
    data = {l: rows(out, l) for l in labels}
    keys = sorted({k for d in data.values() for k in d})
    head = ["mode", "workers", "batch", "ctx"]
    for l in labels:
        head += [l + " ms", l + " of bound"]
    head += [l + "/" + labels[0] for l in labels[1:]]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * 4 + "---:|" * (len(head) - 4))
    for k in keys:
        cells = [str(x) for x in k]
        best = {}
        for l in labels:
            v = data[l].get(k)
            if not v:
                cells += ["", ""]
                continue
            ms = sorted(x[0] for x in v)
            b = min(v)
            best[l] = b[0]
            cells += ["%.3f" % ms[0] if len(ms) == 1 else "%.3f-%.3f" % (ms[0], ms[-1]), "%.3f" % b[1]]
        for l in labels[1:]:
            cells.append("%.3f" % (best[l] / best[labels[0]]) if l in best and labels[0] in best else "")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv)
