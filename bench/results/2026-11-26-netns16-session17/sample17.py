#!/usr/bin/env python3
# Samples one host namespace's uplink (eth0 tx/rx bytes, about every ms)
# and its TCP connections (ss -tin, every 50 ms) until killed or TMAX s.
import subprocess, sys, time
out, ss, tmax = sys.argv[1], sys.argv[2], float(sys.argv[3])
f = open(out + ".tx", "w", buffering=1 << 16)
g = open(out + ".ss", "w")
t0 = time.time(); next_ss = 0.0; n = 0
base = "/sys/class/net/eth0/statistics/"
while time.time() - t0 < tmax:
    try:
        with open(base + "tx_bytes") as a, open(base + "rx_bytes") as b:
            tx, rx = a.read().strip(), b.read().strip()
    except OSError:
        break
    now = time.time()
    f.write(f"{now:.6f} {tx} {rx}\n")
    if now >= next_ss:
        r = subprocess.run([ss, "-tinH", "state", "established"], capture_output=True, text=True)
        g.write(f"@ {now:.6f}\n{r.stdout}")
        g.flush(); f.flush()
        next_ss = now + 0.05
    time.sleep(0.0007)
f.close(); g.close()
