"""PyTorch's symmetric-memory all-reduces (one_shot_all_reduce and
two_shot_all_reduce_) next to `chorus bench allreduce --strategy ...`: bf16
sum, one process per GPU, 1 KB..max bytes (x4), back-to-back calls timed on
the host then a synchronize (the rule chorus's bench uses; GRAPH=1: CUDA
graph replays, see torch_timing.py). NVLink
multicast stays off (TORCH_SYMM_MEM_DISABLE_MULTICAST=1). Prints JSON
lines in chorus's shape; sizes an op refuses are skipped (stderr says why).

Usage: python3 bench/torch_symm_mem_allreduce.py [max_bytes]
"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
import torch.multiprocessing as mp

from torch_timing import reduce_max, suffix, time_calls


def run(rank, world, max_bytes, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_NVLS_ENABLE="0",
                      TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    group = dist.group.WORLD.group_name
    buf = symm_mem.empty(max_bytes // 2, dtype=torch.bfloat16, device="cuda")
    symm_mem.rendezvous(buf, group)
    for name in ("one_shot", "two_shot"):
        size = 1024
        while size <= max_bytes:
            n = size // 2
            x = buf[:n]
            iters = int(min(200_000, max(5, (1 << 29) // size)))

            def call():
                if name == "one_shot":
                    return torch.ops.symm_mem.one_shot_all_reduce(x, "sum", group)
                return torch.ops.symm_mem.two_shot_all_reduce_(x, "sum", group)

            try:
                x.fill_(float(rank + 1))
                for _ in range(max(2, iters // 10)):
                    call()
                us = time_calls(call, iters)
            except Exception as e:  # an op may refuse a size
                if rank == 0:
                    print(f"symm-mem {name} {size} bytes: {e}", file=sys.stderr, flush=True)
                size *= 4
                continue
            st = reduce_max(us)
            if rank == 0:
                alg = size / st["time_us"] / 1e3
                print(json.dumps({"bench": "allreduce", "backend": f"torch-symm-{name}" + suffix(), "session": "process",
                                  "workers": world, "dtype": "bfloat16", "bytes": size, "time_us": st["time_us"],
                                  "p50_us": st["p50_us"], "p99_us": st["p99_us"], "max_us": st["max_us"], "algbw_gbs": alg, "busbw_gbs": alg * 2 * (world - 1) / world, "wrong": 0}), flush=True)
            size *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    world = torch.cuda.device_count()
    max_bytes = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 30
    mp.spawn(run, args=(world, max_bytes, 29513), nprocs=world)
