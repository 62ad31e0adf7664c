#!/usr/bin/env bash
# nccl-tests beside verifybench, in the same run on the same GPUs: all-reduce bf16 8 KB-1 MB
# plus 43,008 B (the verify step's all-reduce at Kimi-K2.5 TP2 T3), eager and CUDA-graph
# launches, and the ratio verifybench / nccl-tests per size and mode.
#
#   scripts/nccltests.sh TARBALL [BINARY] [OUTDIR] [NGPUS]
#     TARBALL  nccl-tests-2.19.6.tar.gz (copy it into a git-ignored folder of the checkout
#              and carry that folder to the GPU machine)
#     BINARY   default target/release/verifybench;  OUTDIR default $OUT or ./out;  NGPUS default 2
#
# nccl-tests prints one launch mode per run: with -G N (N >= 1) every timed operation,
# out-of-place and in-place alike, is a CUDA-graph replay; -G 0 times eager launches. So each
# mode is run separately, once over the 8K-1M range and once at 43008 B (a size -f 2 skips).
# Its times are means per operation over the iterations; verifybench's are medians.
# Needs 2 or more GPUs. Every file is kept under OUTDIR even if a later step fails.
set -uo pipefail
TARBALL=${1:?usage: scripts/nccltests.sh TARBALL [BINARY] [OUTDIR] [NGPUS]}
VB=${2:-target/release/verifybench}
OUTDIR=${3:-${OUT:-out}}
N=${4:-2}
mkdir -p "$OUTDIR"
OUTDIR=$(realpath "$OUTDIR")
TARBALL=$(realpath "$TARBALL")
VB=$(realpath "$VB")
export NCCL_NVLS_ENABLE=0   # never enable NVLink multicast, in any process started here
W=$(mktemp -d)
t0=$(date +%s)
{
  echo "# nccltests.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ), verifybench $($VB --version 2>/dev/null)"
  echo "# GPUs: $N"; nvidia-smi -L 2>/dev/null
} > "$OUTDIR/nccltests-run.txt"

echo "=== build nccl-tests"
tar xzf "$TARBALL" -C "$W" || exit 1
( cd "$W"/nccl-tests-* && make -j16 MPI=0 CUDA_HOME=/usr/local/cuda NCCL_HOME=/usr \
    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" src.build ) > "$OUTDIR/nccltests-build.log" 2>&1 \
  || { echo "build failed: see nccltests-build.log"; tail -20 "$OUTDIR/nccltests-build.log"; exit 1; }
NT=$(echo "$W"/nccl-tests-*/build/all_reduce_perf)

for G in 0 20; do
  mode=$([ "$G" = 0 ] && echo eager || echo graph)
  echo "=== nccl-tests all_reduce_perf, $mode (-G $G)"
  : > "$OUTDIR/nccltests-$mode.txt"
  for range in "-b 8K -e 1M -f 2" "-b 43008 -e 43008"; do
    $NT $range -d bfloat16 -g "$N" -G "$G" -c 1 >> "$OUTDIR/nccltests-$mode.txt" 2>&1
  done
  cat "$OUTDIR/nccltests-$mode.txt"
done

echo "=== verifybench collective (threads, same sizes)"
$VB collective --backend nccl --launcher threads --gpus "$N" --op all_reduce -b 8K -e 1M -f 2 -d bf16 \
    --sizes 43008 -n 100 -w 10 --export-json "$OUTDIR/nccltests-verifybench.json" 2>&1 \
  | tee "$OUTDIR/nccltests-verifybench.txt"

echo "=== ratio verifybench / nccl-tests"
$VB compare --nccl-tests "$OUTDIR/nccltests-eager.txt" --nccl-tests "$OUTDIR/nccltests-graph.txt" \
    "$OUTDIR/nccltests-verifybench.json" 2>&1 | tee "$OUTDIR/nccltests-ratio.txt"
echo "wall $(( $(date +%s) - t0 )) s" | tee -a "$OUTDIR/nccltests-run.txt"
rm -rf "$W"
