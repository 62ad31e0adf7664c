#!/usr/bin/env bash
# verifybench and its PyTorch peer (scripts/torch_baseline.py) back to back on the same GPUs,
# same schedule, iterations, warm-up and NCCL environment, then `verifybench compare`.
#
#   scripts/compare_torch.sh                 # Kimi-K2.5, TP 2, 3 tokens, into results/compare-torch-<time>/
#   TP=8 TOKENS=4 ITERS=500 scripts/compare_torch.sh results/kimi-tp8
#
# Needs: a built verifybench (release), python3 with torch (CUDA), and TP GPUs.
# Writes: vb.json, torch.json, plan.json, compare.txt, compare.md, compare.json, and the logs.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=${MODEL:-kimi-k2.5}
TP=${TP:-2}
TOKENS=${TOKENS:-3}
ITERS=${ITERS:-200}
WARMUP=${WARMUP:-20}
LAUNCHER=${LAUNCHER:-threads}
PYTHON=${PYTHON:-python3}
OUT=${1:-results/compare-torch-$(date -u +%Y%m%dT%H%M%SZ)}

# Never enable NVLink multicast; both runs see exactly this NCCL environment.
export NCCL_NVLS_ENABLE=0

VB=${VERIFYBENCH:-}
if [ -z "$VB" ]; then
    if [ -x target/release/verifybench ]; then
        VB=target/release/verifybench
    elif command -v verifybench >/dev/null; then
        VB=$(command -v verifybench)
    else
        cargo build --release --quiet
        VB=target/release/verifybench
    fi
fi
export VERIFYBENCH=$VB

mkdir -p "$OUT"
echo "== schedule: $MODEL TP=$TP tokens=$TOKENS -> $OUT/plan.json"
"$VB" plan --format json --model "$MODEL" --tp "$TP" --tokens "$TOKENS" > "$OUT/plan.json"

echo "== verifybench verify (eager and graph, $ITERS replays after $WARMUP warm-up)"
"$VB" verify --model "$MODEL" --tp "$TP" --tokens "$TOKENS" --graph both \
    -n "$ITERS" -w "$WARMUP" --launcher "$LAUNCHER" \
    --export-json "$OUT/vb.json" 2>&1 | tee "$OUT/vb.log"

echo "== PyTorch peer (torch.distributed, NCCL; eager and CUDA graph)"
"$PYTHON" scripts/torch_baseline.py --schedule "$OUT/plan.json" --graph both \
    -n "$ITERS" -w "$WARMUP" --out "$OUT/torch.json" 2>&1 | tee "$OUT/torch.log"

echo "== compare"
"$VB" compare "$OUT/vb.json" "$OUT/torch.json" | tee "$OUT/compare.txt"
"$VB" compare --format markdown "$OUT/vb.json" "$OUT/torch.json" > "$OUT/compare.md"
"$VB" compare --format json "$OUT/vb.json" "$OUT/torch.json" > "$OUT/compare.json"
echo "== written to $OUT"
