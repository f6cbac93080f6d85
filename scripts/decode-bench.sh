#!/usr/bin/env bash
# The decode benchmark of docs/benchmarks.md on one GPU: PyTorch's
# anchors first (bench/decoder_ref.py --bench-decode: eager, CUDA graph,
# torch.compile max-autotune; the same shapes, dtype and batches), then
# chorus bench decode with them in its table. Writes OUT/anchors.jsonl,
# OUT/decode.txt (the table) and OUT/decode.jsonl.
# Usage: scripts/decode-bench.sh BINDIR OUT [chorus bench decode flags]
#   BINDIR holds chorus and decoder_ref.py (scripts/gpu-build.sh's .carry/gpu),
#   and launch_cost where gpu-build.sh could compile it;
#   the default flags are --preset llama3-8b --batch 1,8,32 --ctx 128,4096
#   --kernels gemv,cublas --shapes.
# DECODE_TORCH_MODES (default eager,graph,compile) chooses the anchors;
# DECODE_COMPILE_CTX and DECODE_COMPILE_BATCH (default: every --ctx and
# --batch) the contexts and batches torch.compile runs at (each compiles
# the step again, about 2.5 minutes on an H100); DECODE_TORCH_BATCH_CTX
# (default: the first --ctx) the contexts of the anchors at batches
# above 1. One Python process per mode and batch group.
set -uo pipefail
bin=$1 out=$2
shift 2
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(--preset llama3-8b --batch 1,8,32 --ctx 128,4096 --kernels gemv,cublas --shapes)
ctx=128,4096 batch=1
for ((i = 0; i < ${#flags[@]}; i++)); do
  [ "${flags[$i]}" = --ctx ] && ctx=${flags[$((i + 1))]}
  [ "${flags[$i]}" = --batch ] && batch=${flags[$((i + 1))]}
done
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
: >"$out/anchors.jsonl"
modes=${DECODE_TORCH_MODES:-eager,graph,compile}
anchor() { # mode batches contexts
  python3 "$bin/decoder_ref.py" --bench-decode --batch "$2" --ctx "$3" --modes "$1" 2>"$out/torch-$1-${2//,/_}.log" | grep '^{' >>"$out/anchors.jsonl" ||
    echo "NOTE: PyTorch $1 at batch $2, ctx $3 failed (see $out/torch-$1-${2//,/_}.log)"
}
more=$(echo ",$batch," | sed 's/,1,/,/g; s/^,//; s/,$//')
for mode in ${modes//,/ }; do
  if [ "$mode" = compile ]; then
    anchor compile "${DECODE_COMPILE_BATCH:-$batch}" "${DECODE_COMPILE_CTX:-$ctx}"
    continue
  fi
  case ",$batch," in *,1,*) anchor "$mode" 1 "$ctx" ;; esac
  [ -n "$more" ] && anchor "$mode" "$more" "${DECODE_TORCH_BATCH_CTX:-${ctx%%,*}}"
done
"$bin/chorus" bench decode "${flags[@]}" --anchor "$out/anchors.jsonl" --json "$out/decode.jsonl" | tee "$out/decode.txt"
# The launch-cost anchor: an empty kernel launched from C through the
# driver API (bench/anchors/launch_cost.c), next to the table's "launch"
# row (the same launches through purego).
if [ -x "$bin/launch_cost" ]; then
  "$bin/launch_cost" 1000 | tee -a "$out/decode.jsonl"
fi
