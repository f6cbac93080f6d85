"""Timing shared by the PyTorch anchor scripts, the rule chorus's bench
uses: warm-up, then every call timed with CUDA events (mean, p50, p99, max
per call); with GRAPH=1 in the environment, 100 calls captured in one CUDA
graph, a few untimed replays, then every replay timed with CUDA events and
divided by the calls it holds (chorus bench --graph, nccl-tests -G).

The graph mode once captured up to 1000 calls and timed all replays on the
host: it reported 55-60 us per NCCL call at 1-256 KB on 2 x H200, while
100 calls captured and replayed took 10.8-13.7 us."""
import math
import os

import torch
import torch.distributed as dist

GRAPH = os.environ.get("GRAPH") == "1"
GRAPH_CALLS = 100
MAX_SAMPLES = 5000
MIN_SAMPLES = 10


def suffix():
    return "-graph" if GRAPH else ""


def _stats(us):
    us = sorted(us)
    n = len(us)
    def rank(p):  # nearest rank, as chorus's bench
        return us[min(max(math.ceil(p * n) - 1, 0), n - 1)]
    return {"time_us": sum(us) / n, "p50_us": rank(0.50), "p99_us": rank(0.99), "max_us": us[-1], "samples": n}


def _timed(fn, samples, per):
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(samples + 1)]
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    ev[0].record()
    for i in range(samples):
        fn()
        ev[i + 1].record()
    torch.cuda.synchronize()
    return _stats([ev[i].elapsed_time(ev[i + 1]) * 1e3 / per for i in range(samples)])


def time_calls(call, iters):
    """Per-call statistics of `call` (already warmed up): a dict with
    time_us (mean), p50_us, p99_us, max_us, samples."""
    if not GRAPH:
        return _timed(call, min(max(iters, MIN_SAMPLES), MAX_SAMPLES), 1)
    k = min(iters, GRAPH_CALLS)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(k):
            call()
    for _ in range(3):  # the first replay uploads the graph
        g.replay()
    res = _timed(g.replay, min(max(-(-iters // k), MIN_SAMPLES), MAX_SAMPLES), k)
    del g
    return res


def reduce_max(stats):
    """The worst rank's value of each statistic (every rank calls it)."""
    keys = ["time_us", "p50_us", "p99_us", "max_us"]
    t = torch.tensor([stats[k] for k in keys], device="cuda", dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    out = dict(stats)
    out.update({k: v for k, v in zip(keys, t.tolist())})
    return out
