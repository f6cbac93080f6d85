#!/usr/bin/env python3
"""Each DSL plan next to the hand-written kernel of the same algorithm.

Reads the JSON lines of `chorus bench allreduce|allgather|reducescatter`
(plan rows: backend chorus-plan-NAME[-graph]; ccl/ipc rows:
chorus-ipc-STRATEGY[-graph] or ipc-STRATEGY; NCCL rows: chorus-nccl or
nccl[-graph]) and prints, per plan, mode (eager or graph) and size, the
anchor's mean time per call and, for each version of the executor, the
plan's and plan / anchor. A row's "version" field (added by the script
that ran two builds in one call, e.g. "base" and "new", or "ipc" for
plans on IPC tensors) names the version; rows without one are version
"-". The pairs: allreduce_packet and allreduce_oneshot against the
one-shot kernel, allreduce_twoshot, allreduce_twoshot_pull and
allpairs-allreduce (reduce-scatter, then all-gather) against the two-shot
kernel, the allgather and reduce-scatter plans against NCCL's collective
of the same size (no hand-written kernel). Times are medians over the
files' rows of the same key. The last column is the plan's traffic
against the kernel's algorithm's (the rows' peer_bytes and mem_bytes,
plan.Traffic; the kernel's are its plan's: allreduce_oneshot for the
one-shot kernel, allreduce_twoshot_pull for the two-shot; none for
NCCL): bytes through peers' memory, then all bytes, the least plan /
kernel a bandwidth-bound size can reach across GPUs and on one GPU.
Usage: plan-ratio.py FILE.jsonl... > table.md
"""
import json
import sys

PAIRS = {"allreduce_packet": "oneshot", "allreduce_oneshot": "oneshot",
         "allreduce_twoshot": "twoshot", "allreduce_twoshot_pull": "twoshot",
         "allpairs-allreduce": "twoshot", "allgather_": "nccl", "reducescatter_": "nccl"}
REF_PLAN = {"oneshot": "allreduce_oneshot", "twoshot": "allreduce_twoshot_pull"}
ANCHOR_PREFIXES = ("chorus-ipc-", "ipc-", "chorus-")


def med(v):
    v = sorted(v)
    return v[len(v) // 2]


def load(paths):
    """plans[name][(graph, bytes)][version] and kernels[(coll, name)][(graph, bytes)]:
    lists of times; traffic[(name, bytes)] = (peer, all); coll[name]."""
    plans, kernels, versions, traffic, coll = {}, {}, [], {}, {}
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
                    v = r.get("version", "-")
                    if v not in versions:
                        versions.append(v)
                    name = base[len("chorus-plan-"):]
                    coll[name] = r.get("bench", "allreduce")
                    plans.setdefault(name, {}).setdefault(key, {}).setdefault(v, []).append(t)
                    if r.get("mem_bytes"):
                        traffic[(name, r["bytes"])] = (r.get("peer_bytes", 0), r["mem_bytes"])
                    continue
                for p in ANCHOR_PREFIXES:
                    if base.startswith(p):
                        base = base[len(p):]
                        break
                if base in ("oneshot", "twoshot", "nccl"):
                    kernels.setdefault((r.get("bench", "allreduce"), base), {}).setdefault(key, []).append(t)
    return plans, kernels, versions, traffic, coll


def floor(traffic, name, kname, nbytes):
    """The plan's traffic over its kernel's algorithm's: "peer / all"."""
    mine, ref = traffic.get((name, nbytes)), traffic.get((REF_PLAN.get(kname), nbytes))
    if not mine or not ref:
        return "-"
    peer = f"{mine[0] / ref[0]:.2f}" if ref[0] else "-"
    return f"{peer} / {mine[1] / ref[1]:.2f}"


def table(plans, kernels, versions, traffic, coll):
    head = "| plan | anchor | mode | bytes | anchor us |"
    rule = "|---|---|---|---:|---:|"
    for v in versions:
        vv = "" if v == "-" else f" ({v})"
        head += f" plan us{vv} | plan / anchor{vv} |"
        rule += "---:|---:|"
    head += " bytes / kernel's (peer / all) |"
    rule += "---:|"
    out = [head, rule]
    for name in sorted(plans):
        kname = next((v for k, v in PAIRS.items() if name.startswith(k)), None)
        for (graph, nbytes) in sorted(plans[name]):
            k = kernels.get((coll[name], kname), {}).get((graph, nbytes))
            k = med(k) if k else None
            row = f"| {name} | {kname} | {'graph' if graph else 'eager'} | {nbytes} | {'-' if k is None else f'{k:.1f}'} |"
            for v in versions:
                ts = plans[name][(graph, nbytes)].get(v)
                if not ts:
                    row += " - | - |"
                    continue
                p = med(ts)
                row += f" {p:.1f} | {'-' if k is None else f'{p / k:.2f}'} |"
            row += f" {floor(traffic, name, kname, nbytes)} |"
            out.append(row)
    return "\n".join(out)


def main(paths):
    print(table(*load(paths)))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
