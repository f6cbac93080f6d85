#!/usr/bin/env bash
# Session latency, in one run: the C pipe/socket round-trip baseline, then
# `chorus bench session` for every session kind at 1, 2, 4 and 8 workers.
# Usage: bench/session.sh [output-dir]   (needs gcc and Go)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-$(mktemp -d)}
mkdir -p "$out"
gcc -O2 -o "$out/pipe_rtt" bench/pipe_rtt.c
CGO_ENABLED=0 go build -o "$out/chorus" ./cmd/chorus
{
  echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  "$out/pipe_rtt" pipe
  "$out/pipe_rtt" socket
  "$out/chorus" bench session --json
} | tee "$out/session.jsonl"
"$out/chorus" bench session 2>/dev/null
