#!/usr/bin/env bash
# The decode benchmark of docs/benchmarks.md on one GPU: PyTorch's
# anchors first (bench/decoder_ref.py --bench-decode: eager, CUDA graph,
# torch.compile max-autotune; the same shapes and dtype), then chorus bench
# decode with them in its table. Writes OUT/anchors.jsonl, OUT/decode.txt
# (the table) and OUT/decode.jsonl.
# Usage: scripts/decode-bench.sh BINDIR OUT [chorus bench decode flags]
#   BINDIR holds chorus and decoder_ref.py (scripts/gpu-build.sh's .carry/gpu);
#   the default flags are --preset llama3-8b --ctx 128,4096 --kernels gemv,cublas --shapes.
# DECODE_TORCH_MODES (default eager,graph,compile) chooses the anchors;
# DECODE_COMPILE_CTX (default: every --ctx) the contexts torch.compile runs
# at (each compiles the step again, about 2.5 minutes on an H100).
set -uo pipefail
bin=$1 out=$2
shift 2
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(--preset llama3-8b --ctx 128,4096 --kernels gemv,cublas --shapes)
ctx=128,4096
for ((i = 0; i < ${#flags[@]}; i++)); do
  [ "${flags[$i]}" = --ctx ] && ctx=${flags[$((i + 1))]}
done
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
: >"$out/anchors.jsonl"
modes=${DECODE_TORCH_MODES:-eager,graph,compile}
for mode in ${modes//,/ }; do
  cs=$ctx
  [ "$mode" = compile ] && cs=${DECODE_COMPILE_CTX:-$ctx}
  for c in ${cs//,/ }; do
    python3 "$bin/decoder_ref.py" --bench-decode --ctx "$c" --modes "${mode}" 2>"$out/torch-$mode-$c.log" | grep '^{' >>"$out/anchors.jsonl" ||
      echo "NOTE: PyTorch $mode at ctx $c failed (see $out/torch-$mode-$c.log)"
  done
done
"$bin/chorus" bench decode "${flags[@]}" --anchor "$out/anchors.jsonl" --json "$out/decode.jsonl" | tee "$out/decode.txt"
