#!/usr/bin/env python3
"""Each DSL plan next to the hand-written kernel of the same algorithm.

Reads the JSON lines of `chorus bench allreduce` (plan rows: backend
chorus-plan-NAME[-graph]; ccl/ipc rows: chorus-ipc-STRATEGY[-graph] or
ipc-STRATEGY) and prints, per plan, mode (eager or graph) and size, the
plan's mean time per call, the kernel's, and plan / kernel. The pairs:
allreduce_packet and allreduce_oneshot against the one-shot kernel,
allreduce_twoshot and allpairs-allreduce (all-pairs reduce-scatter, then
all-gather) against the two-shot kernel.
Usage: plan-ratio.py FILE.jsonl... > table.md
"""
import json
import sys

PAIRS = {"allreduce_packet": "oneshot", "allreduce_oneshot": "oneshot",
         "allreduce_twoshot": "twoshot", "allpairs-allreduce": "twoshot"}


def main(paths):
    plans, kernels = {}, {}
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                r = json.loads(line)
                b = r.get("backend", "")
                t = r.get("time_us") or 0
                if t <= 0 or r.get("wrong", 0):
                    continue
                graph = b.endswith("-graph") or bool(r.get("graph"))
                base = b[:-len("-graph")] if b.endswith("-graph") else b
                key = (graph, r["bytes"])
                if base.startswith("chorus-plan-"):
                    name = base[len("chorus-plan-"):]
                    plans.setdefault(name, {}).setdefault(key, []).append(t)
                else:
                    for p in ("chorus-ipc-", "ipc-"):
                        if base.startswith(p):
                            kernels.setdefault(base[len(p):], {}).setdefault(key, []).append(t)

    def med(v):
        v = sorted(v)
        return v[len(v) // 2]

    print("| plan | kernel | mode | bytes | plan us | kernel us | plan / kernel |")
    print("|---|---|---|---:|---:|---:|---:|")
    for name in sorted(plans):
        for (graph, nbytes) in sorted(plans[name]):
            kname = next((v for k, v in PAIRS.items() if name.startswith(k)), None)
            k = kernels.get(kname, {}).get((graph, nbytes))
            p = med(plans[name][(graph, nbytes)])
            if not k:
                print(f"| {name} | {kname} | {'graph' if graph else 'eager'} | {nbytes} | {p:.1f} | - | - |")
                continue
            k = med(k)
            print(f"| {name} | {kname} | {'graph' if graph else 'eager'} | {nbytes} | {p:.1f} | {k:.1f} | {p / k:.2f} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
