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
for pkg in ./algo/run ./algo/gpuexec ./gpu/cuda ./gpu/nvrtc ./gpu/nccl ./gpu/device ./gpu/cublas ./ccl/ipc ./ccl/nccl ./runtime/session ./compiler/vm ./compiler/kernels ./cmd/chorus/internal/mlp ./model/decoder ./model/hf ./cmd/chorus ./cluster ./model/shardload; do
  name=$(echo "${pkg#./}" | tr / -) # gpu/nccl and ccl/nccl share a base name
  go test -c -ldflags="-s -w" -o "$dir/$name.test" "$pkg"
  echo "$name ${pkg#./}"
done >"$dir/packages" # gpu-check.sh runs each test in its package's folder
# bench/host.sh runs from these on the GPU machine's host; it compiles the
# MPI anchor there only if that host has mpicc (an mpi_allreduce built here
# would need this machine's libmpi there).
# The launch-cost anchor in C (dlopens libcuda, so no CUDA headers):
# built here when a C compiler is, for scripts/decode-bench.sh.
if command -v cc >/dev/null; then
  cc -O2 -o "$dir/launch_cost" bench/anchors/launch_cost.c -ldl
fi
cp bench/host.sh bench/host_summary.py bench/anchors/mpi_allreduce.c bench/anchors/gloo_allreduce.py "$dir/"
cp scripts/gpu-check.sh scripts/gpu-bench.sh scripts/gpu-stress.sh scripts/gpu-collectives.sh scripts/gpu-plans.sh scripts/plan-ratio.py bench/torch_nccl_allreduce.py bench/torch_symm_mem_allreduce.py bench/torch_timing.py bench/decoder_ref.py bench/summarize.py bench/autotable.py "$dir/"
echo "built into $dir: $(ls "$dir" | tr '\n' ' ')"
