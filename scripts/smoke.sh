#!/usr/bin/env bash
# Quick check of the NCCL backend on a machine with 2+ GPUs.
# Usage: scripts/smoke.sh [BINARY] (default target/release/verifybench); writes into $OUT or ./out.
set -uo pipefail
VB=${1:-target/release/verifybench}
OUT=${OUT:-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0   # never enable NVLink multicast
nvidia-smi -L
for L in threads processes; do
  echo "== collective all_reduce ($L)"
  $VB collective --backend nccl --launcher $L --op all_reduce -b 8K -e 1M -f 2 --sizes 43008 -n 100 -w 10 \
      --export-json "$OUT/collective-allreduce-$L.json" 2>&1
  echo "== verify kimi-k2.5 tp2 ($L)"
  $VB verify --backend nccl --launcher $L --model kimi-k2.5 --tp 2 --tokens 3 -n 200 -w 20 \
      --export-json "$OUT/verify-kimi-tp2-$L.json" 2>&1
done
