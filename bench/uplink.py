#!/usr/bin/env python3
"""Uplink samples of a host namespace (scripts/netns-check.sh BENCH_UPLINK=1).

  uplink.py sample FILE [DEV]       in a host namespace, until killed or 30
                                    minutes: "unix_seconds tx_bytes rx_bytes"
                                    of DEV (eth0) about every millisecond
  uplink.py summary RATE_BPS FILE...  per file: the stretches of at least
                                    0.2 s where every 20 ms bin carried 90%
                                    of the link or more, with their exact
                                    use, and the idle spells inside the
                                    sweep (1 ms or more below 30%; those
                                    under 50 ms counted apart from the
                                    benchmark's pauses)

The link's rate is counted in frame bytes (tbf), while the device's
tx_bytes counts one header per segmentation-offload packet, so the full
link reads as RATE x 1448/1514 in tx bytes (TCP with timestamps, MTU
1500): "use" is tx bytes over that.
"""
import os
import signal
import sys
import time

FRAME = 1448 / 1514


def sample(path, dev="eth0"):
    base = f"/sys/class/net/{dev}/statistics/"
    end = time.time() + 1800
    # SIGTERM (netns-check's stop) ends the loop through SystemExit, so
    # the buffered samples reach the file.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with open(path, "w", buffering=1 << 16) as out:
        while time.time() < end:
            try:
                with open(base + "tx_bytes") as a, open(base + "rx_bytes") as b:
                    tx, rx = a.read().strip(), b.read().strip()
            except OSError:
                return
            out.write(f"{time.time():.6f} {tx} {rx}\n")
            time.sleep(0.0007)


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) == 3:
                rows.append((float(p[0]), int(p[1])))
    return rows


def summary(rate_bps, paths):
    full = rate_bps / 8 * FRAME
    for path in paths:
        rows = load(path)
        if len(rows) < 3:
            print(f"{os.path.basename(path)}: {len(rows)} samples")
            continue
        t0 = rows[0][0]
        bins, last = [], rows[0]
        for r in rows[1:]:
            if r[0] - last[0] >= 0.02:
                bins.append((last, r))
                last = r
        stretches, cur = [], []
        for a, b in bins:
            if (b[1] - a[1]) / (b[0] - a[0]) >= 0.9 * full:
                cur.append((a, b))
                continue
            if len(cur) >= 10:
                stretches.append(cur)
            cur = []
        if len(cur) >= 10:
            stretches.append(cur)
        print(f"{os.path.basename(path)}: {len(rows)} samples over {rows[-1][0] - t0:.1f} s")
        for s in stretches:
            a, b = s[0][0], s[-1][1]
            print(f"  busy {a[0] - t0:8.3f}-{b[0] - t0:8.3f} s: use {(b[1] - a[1]) / (b[0] - a[0]) / full:.4f}")
        # Idle spells between the first and the last busy bin.
        if not stretches:
            continue
        lo, hi = stretches[0][0][0][0], stretches[-1][-1][1][0]
        spells, cur = [], None
        for a, b in zip(rows, rows[1:]):
            if not lo <= a[0] <= hi:
                continue
            dt = b[0] - a[0]
            idle = dt - (b[1] - a[1]) / full
            if idle > 0.7 * dt:
                if cur and a[0] - cur[1] < 0.0015:
                    cur[1], cur[2] = b[0], cur[2] + idle
                else:
                    if cur:
                        spells.append(cur)
                    cur = [a[0], b[0], idle]
        if cur:
            spells.append(cur)
        spells = [s for s in spells if s[2] >= 0.001]
        # Under 50 ms: inside or between calls; longer: the benchmark's
        # pauses between rounds and sizes.
        short = [s for s in spells if s[2] < 0.05]
        print(f"  idle spells of 1-50 ms: {len(short)}, {sum(s[2] for s in short) * 1e3:.1f} ms in all;"
              f" pauses of 50 ms or more: {len(spells) - len(short)}")
        for s in spells[:40]:
            print(f"    {s[0] - t0:8.4f} s: {s[2] * 1e3:.2f} ms")


def main(argv):
    if len(argv) >= 2 and argv[0] == "sample":
        sample(argv[1], *(argv[2:3]))
    elif len(argv) >= 2 and argv[0] == "summary":
        summary(float(argv[1]), argv[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
