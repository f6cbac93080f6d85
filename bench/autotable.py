"""auto's table for the custom all-reduce, from scripts/gpu-bench.sh's JSON
lines (eager and GRAPH=1 runs of chorus-ipc-oneshot / -twoshot), and the
check that auto was within 5% of the best strategy at every size.

  python3 bench/autotable.py EAGER.jsonl [GRAPH.jsonl ...] > autotable.json
  python3 bench/autotable.py --check EAGER.jsonl [GRAPH.jsonl ...]

The table goes to ccl/ipc/autotable.json (built in) or to a file named by
CHORUS_IPC_AUTO_TABLE. At each measured size the strategy with the lowest
time_us (the median of the rounds) wins; a rule covers sizes up to the
last measured size it won, the last rule of each (ranks, mode) is open."""
import json
import sys
from collections import defaultdict

STRATS = ("oneshot", "twoshot")


def load(paths):
    rows = []
    for p in paths:
        for line in open(p):
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def key(r):
    b = r.get("backend", "")
    graph = b.endswith("-graph") or bool(r.get("graph"))
    name = b[: -len("-graph")] if b.endswith("-graph") else b
    if not name.startswith("chorus-ipc-"):
        return None
    return name[len("chorus-ipc-"):], graph


def times(rows):
    t = defaultdict(dict)  # (ranks, graph) -> bytes -> strategy -> time
    for r in rows:
        k = key(r)
        if k is None:
            continue
        strat, graph = k
        t[(r["workers"], graph)].setdefault(r["bytes"], {})[strat] = r["time_us"]
    return t


def table(rows, source):
    rules = []
    for (ranks, graph), by_size in sorted(times(rows).items()):
        best = [(b, min(STRATS, key=lambda s: v.get(s, float("inf"))))
                for b, v in sorted(by_size.items()) if any(s in v for s in STRATS)]
        for i, (b, s) in enumerate(best):
            last = i == len(best) - 1
            if last or best[i + 1][1] != s:
                rules.append({"ranks": ranks, "graph": graph, "max_bytes": 0 if last else b, "strategy": s})
    return {"source": source, "rules": rules}


def check(rows, tol=0.05):
    bad = 0
    for (ranks, graph), by_size in sorted(times(rows).items()):
        for b, v in sorted(by_size.items()):
            if "auto" not in v:
                continue
            best = min(v.get(s, float("inf")) for s in STRATS)
            ok = v["auto"] <= best * (1 + tol)
            bad += not ok
            print(f"ranks {ranks} {'graph' if graph else 'eager'} {b:>11} auto {v['auto']:9.2f} best {best:9.2f} "
                  f"{'ok' if ok else 'SLOWER by %.1f%%' % (100 * (v['auto'] / best - 1))}")
    return bad


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "--check":
        sys.exit(1 if check(load(args[1:])) else 0)
    json.dump(table(load(args), "bench/autotable.py from " + ", ".join(args)), sys.stdout, indent=1)
    print()
