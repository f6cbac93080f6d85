#!/usr/bin/env bash
# Build, on a CPU machine, everything scripts/gpu-check.sh runs on a GPU
# machine: the chorus CLI and one test binary per GPU package, all with
# CGO_ENABLED=0 (the GPU machines have no Go toolchain).
# Usage: scripts/gpu-build.sh [dir]   (default .carry/gpu; carry that folder)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.carry/gpu}
mkdir -p "$dir"
export CGO_ENABLED=0
go build -ldflags="-s -w" -o "$dir/chorus" ./cmd/chorus
for pkg in ./gpu/cuda ./gpu/nvrtc ./gpu/nccl ./gpu/device ./gpu/cublas ./ccl/ipc ./session ./compiler/vm ./internal/mlp ./cmd/chorus ./remote/cluster; do
  go test -c -ldflags="-s -w" -o "$dir/$(basename "$pkg").test" "$pkg"
  echo "$(basename "$pkg") ${pkg#./}"
done >"$dir/packages" # gpu-check.sh runs each test in its package's folder
cp scripts/gpu-check.sh scripts/gpu-bench.sh bench/torch_nccl_allreduce.py bench/torch_symm_mem_allreduce.py bench/torch_timing.py bench/summarize.py "$dir/"
echo "built into $dir: $(ls "$dir" | tr '\n' ' ')"
