#!/usr/bin/env bash
# carry-iproute2.sh DIR: copies this machine's ip and tc (iproute2), the
# shared libraries they load and the dynamic loader into DIR, with
# DIR/bin/{ip,tc} wrappers that run them through that loader. For hosts
# that have root and network namespaces but no iproute2 (the GPU
# machine's host): carry DIR there, put DIR/bin first in PATH, and
# scripts/netns-check.sh runs. Linux x86-64 and glibc only; the copied
# libc is used by ip and tc alone (the commands they start, e.g. `ip netns
# exec`, use the host's own).
set -euo pipefail
dir=${1:?usage: carry-iproute2.sh DIR}
mkdir -p "$dir/lib" "$dir/bin"
for t in ip tc; do
  src=$(command -v "$t") || { echo "carry-iproute2: $t not found here" >&2; exit 1; }
  cp -L "$src" "$dir/$t.real"
  ldd "$src" | awk '/=> \//{print $3} $1 ~ /^\/.*ld-linux/{print $1}' | while read -r l; do cp -L "$l" "$dir/lib/"; done
  cat >"$dir/bin/$t" <<W
#!/bin/sh
d=\$(cd "\$(dirname "\$0")/.." && pwd)
exec "\$d/lib/\$(ls "\$d/lib" | grep -m1 '^ld-linux')" --library-path "\$d/lib" "\$d/$t.real" "\$@"
W
  chmod +x "$dir/bin/$t"
done
"$dir/bin/ip" -V
