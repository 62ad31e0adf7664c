#!/usr/bin/env bash
# One H100 (or H200): the spread across fresh runs of the eager and graphed figures that
# results/README.md quotes from one run (h100x1/cycle-*, h100x1/stream-mma-*): the one-rank
# Kimi-K2.5 TP8 cycle with an EAGLE-3 head (k = 3) at 1 and 8 requests, and the one-rank verify
# at 32 and 128 tokens, each with --fresh-runs 3 (three sets of fresh workers: the median of
# their medians, their min-max and a 95% interval). Under 6 minutes.
#
#   scripts/h100x1-fresh.sh BINARY [OUTDIR]   (OUTDIR defaults to $OUT or ./out)
#
# OUTDIR gets commands.txt and one NAME.txt and NAME.json per run. No nvcc (NVRTC inside).
set -uo pipefail
VB=$(realpath "$1")
OUTDIR=$(realpath -m "${2:-${OUT:-out}}")
mkdir -p "$OUTDIR"
cd "$OUTDIR"
export NCCL_NVLS_ENABLE=0
{
  echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  echo "# $("$VB" --version)"
} > commands.txt
run() {  # NAME LIMIT_S ARGS...
  local name=$1 limit=$2; shift 2
  local t0; t0=$(date +%s)
  echo "$name.txt      ./verifybench $*" >> commands.txt
  timeout "$limit" "$VB" "$@" --export-json "$name.json" > "$name.txt" 2>&1
  echo "$name rc=$? wall=$(( $(date +%s) - t0 )) s" | tee -a commands.txt
}
C=(verify --backend nccl --gpus 1 --model kimi-k2.5 --tp 8 --phase cycle --drafter eagle3 --draft-steps 3 --mode full --graph both -n 100 -w 10 --fresh-runs 3)
run cycle-c1 120 "${C[@]}" --concurrency 1
run cycle-c8 150 "${C[@]}" --concurrency 8
V=(verify --backend nccl --gpus 1 --tp 8 --model kimi-k2.5 --mode compute,full --graph both -n 20 -w 3 --fresh-runs 3)
run verify-32 60 "${V[@]}" --tokens 32
run verify-128 100 "${V[@]}" --tokens 128
