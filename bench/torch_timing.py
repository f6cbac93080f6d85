"""Timing shared by the PyTorch anchor scripts: back-to-back calls timed on
the host and then a synchronize (the rule chorus's bench uses), or, with
GRAPH=1 in the environment, up to 1000 calls captured in one CUDA graph
whose replays are timed (chorus bench --graph, nccl-tests -G)."""
import os
import time

import torch
import torch.distributed as dist

GRAPH = os.environ.get("GRAPH") == "1"
MAX_GRAPH_CALLS = 1000


def suffix():
    return "-graph" if GRAPH else ""


def time_calls(call, iters):
    """Microseconds per call of `call` (already warmed up), all ranks
    started together."""
    if not GRAPH:
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            call()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / iters * 1e6
    k = min(iters, MAX_GRAPH_CALLS)
    launches = max(1, -(-iters // k))
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(k):
            call()
    g.replay()  # the first replay uploads the graph
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(launches):
        g.replay()
    torch.cuda.synchronize()
    us = (time.perf_counter() - t0) / (k * launches) * 1e6
    del g
    return us
