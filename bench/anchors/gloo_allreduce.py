#!/usr/bin/python3
"""torch.distributed (gloo) anchor for chorus's CPU allreduce.

float32 SUM allreduce, 2 processes (torch.multiprocessing.spawn, rendezvous
through a file:// init_method in a temporary folder), sizes 1 KB to 64 MB in
steps of 4x. Same rules as mpi_allreduce.c: warm-up, a calibration (max over
ranks) that picks the number of timed calls so that one rep takes about the
target time, then reps times: barrier, timed calls measured with
time.perf_counter inside each rank, time = max over ranks of the average time
per call. Reported time = the median of the reps (stderr lists every rep).

all_reduce is in place, so the timed calls run on a buffer whose values grow
(doubling per call; the speed of float adds does not depend on it). The check
is one more call on a freshly filled rank-dependent input (rank+1 + i%13),
compared with the expected sum; wrong elements are summed over ranks.

Usage: /usr/bin/python3 gloo_allreduce.py [--workers 2] [--target 0.2] [--reps 3]
Rank 0 prints one JSON object per line on stdout.
"""
import argparse
import json
import math
import statistics
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

MIN_BYTES = 1 << 10
MAX_BYTES = 64 << 20


def timed(t, iters):
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return (time.perf_counter() - t0) / iters


def max_over_ranks(v):
    x = torch.tensor([v], dtype=torch.float64)
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    return x.item()


def run(rank, n, init, target, reps):
    torch.set_num_threads(1)  # 2 ranks on a small machine: no intra-op threads
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=n)
    b = MIN_BYTES
    while b <= MAX_BYTES:
        count = b // 4
        idx = torch.arange(count, dtype=torch.int64) % 13
        inp = (idx + (rank + 1)).to(torch.float32)
        expected = (idx * n + n * (n + 1) // 2).to(torch.float32)

        buf = inp.clone()
        dist.barrier()
        timed(buf, 5)  # warm-up
        dist.barrier()
        probe = max_over_ranks(timed(buf, 3))
        iters = min(2000000, max(5, math.ceil(target / max(probe, 1e-9))))

        rt = []
        for _ in range(reps):
            buf.copy_(inp)
            dist.barrier()
            rt.append(max_over_ranks(timed(buf, iters)))
        t = statistics.median(rt)

        chk = inp.clone()
        dist.all_reduce(chk, op=dist.ReduceOp.SUM)
        wrong = torch.tensor([int((chk != expected).sum().item())], dtype=torch.int64)
        dist.all_reduce(wrong, op=dist.ReduceOp.SUM)

        if rank == 0:
            alg = b / t / 1e9
            print(json.dumps({
                "bench": "allreduce", "backend": "gloo", "session": "process",
                "workers": n, "dtype": "float32", "bytes": b,
                "time_us": round(t * 1e6, 3), "algbw_gbs": round(alg, 4),
                "busbw_gbs": round(alg * 2 * (n - 1) / n, 4),
                "wrong": int(wrong.item()),
            }, separators=(",", ":")), flush=True)
            print(f"gloo: {b} bytes: {reps} reps x {iters} calls, us/call: "
                  + " ".join(f"{x * 1e6:.3f}" for x in rt), file=sys.stderr, flush=True)
        b *= 4
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--target", type=float, default=0.2,
                    help="seconds of timed calls per rep (default 0.2)")
    ap.add_argument("--reps", type=int, default=3,
                    help="timed reps per size; the median is reported (default 3)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gloo-anchor-") as d:
        init = "file://" + os.path.join(d, "rendezvous")
        mp.spawn(run, args=(a.workers, init, a.target, max(1, a.reps)), nprocs=a.workers, join=True)


if __name__ == "__main__":
    main()
