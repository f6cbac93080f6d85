"""PyTorch's NCCL all_reduce next to `chorus bench allreduce --backend nccl`:
bf16 sum, one process per GPU, sizes 1 KB..1 GB (x4), time per call measured
on the host around back-to-back calls followed by a synchronize (the same
rule chorus's bench uses; GRAPH=1: CUDA graph replays, see torch_timing.py).
Prints one JSON object per line, chorus's shape.

Usage: python3 bench/torch_nccl_allreduce.py [max_bytes]
"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from torch_timing import reduce_max, suffix, time_calls


def run(rank, world, max_bytes, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_NVLS_ENABLE="0")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    size = 1024
    while size <= max_bytes:
        n = size // 2
        x = torch.full((n,), float(rank + 1), dtype=torch.bfloat16, device="cuda")
        iters = int(min(200_000, max(5, (1 << 29) // size)))
        for _ in range(max(2, iters // 10)):
            dist.all_reduce(x)
        x.fill_(float(rank + 1))
        us = time_calls(lambda: dist.all_reduce(x), iters)
        st = reduce_max(us)
        if rank == 0:
            alg = size / st["time_us"] / 1e3
            print(json.dumps({"bench": "allreduce", "backend": "torch-nccl" + suffix(), "session": "process", "workers": world,
                              "dtype": "bfloat16", "bytes": size, "time_us": st["time_us"], "p50_us": st["p50_us"], "p99_us": st["p99_us"],
                              "max_us": st["max_us"], "algbw_gbs": alg,
                              "busbw_gbs": alg * 2 * (world - 1) / world, "wrong": 0}), flush=True)
        size *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    world = torch.cuda.device_count()
    max_bytes = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 30
    mp.spawn(run, args=(world, max_bytes, 29511), nprocs=world)
