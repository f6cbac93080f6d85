#!/usr/bin/python3
"""torch.distributed gloo over TCP between hosts, for scripts/netns-check.sh.

One rank of the gloo anchor (gloo_allreduce.py: same sizes, rules and JSON
lines) started by hand on each host, rendezvous over TCP:
  gloo_tcp.py --rank R --world N --init tcp://ADDR:PORT [--max-mb 256]
Rank 0 prints one JSON object per size on stdout.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gloo_allreduce as g  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--init", required=True)
    ap.add_argument("--max-mb", type=int, default=256)
    ap.add_argument("--min-bytes", type=int, default=0, help="smallest size (default 1 KiB)")
    ap.add_argument("--max-bytes", type=int, default=0, help="largest size (overrides --max-mb)")
    ap.add_argument("--target", type=float, default=0.1)
    ap.add_argument("--reps", type=int, default=1)
    a = ap.parse_args()
    g.MAX_BYTES = a.max_bytes or (a.max_mb << 20)
    if a.min_bytes:
        g.MIN_BYTES = a.min_bytes
    g.run(a.rank, a.world, a.init, a.target, a.reps)


if __name__ == "__main__":
    main()
