#!/usr/bin/env bash
# One H100: the one-rank verify and speculative cycle of a build, exact checks on: the rank
# paths a restructuring touched (the compute loaded per rank for the verify and the cycle).
#
#   scripts/h100x1-merged.sh BINARY [OUTDIR]   (OUTDIR defaults to $OUT or ./out)
set -uo pipefail
export NCCL_NVLS_ENABLE=0
VB=$(realpath "${1:?binary}")
O=${2:-${OUT:-out}}; mkdir -p "$O"
"$VB" --version
timeout 60 "$VB" verify --backend nccl --gpus 1 --tp 8 --model kimi-k2.5 --mode comm,compute,full --graph both -n 10 -w 2 --tokens 32 > "$O/verify.txt" 2>&1; echo "verify rc=$?"
timeout 90 "$VB" verify --backend nccl --gpus 1 --tp 8 --model kimi-k2.5 --phase cycle --drafter eagle3 --draft-steps 3 --mode compute,full --graph both -n 20 -w 3 --concurrency 8 > "$O/cycle.txt" 2>&1; echo "cycle rc=$?"
tail -25 "$O/verify.txt"; tail -25 "$O/cycle.txt"
