#!/usr/bin/env bash
# One H100 (or H200): issue 53 at serving batch sizes: the tensor-core streaming kernel checked
# and measured, and the Kimi-K2.5 TP8 one-rank verify with the routed experts fed their own
# tokens, against its prediction (bytes / rate + launches). Under 5 minutes.
#
#   scripts/h100x1-53.sh BINARY [OUTDIR]   (OUTDIR defaults to $OUT or ./out)
#   BASE=OTHER_BINARY scripts/h100x1-53.sh BINARY [OUTDIR]
#
# With BASE, the streaming kernels of both binaries are also measured alternately (BASE, BINARY,
# BASE, ... AB_RUNS times each, at AB_TOKENS: 128,256,512 unless given) into ab-base-N and
# ab-new-N, so that a kernel change is compared on the same machine in the same minutes.
#
# OUTDIR gets summary.txt, commands.txt and h100x1-53.tgz, which holds these:
# selftest.{txt,json}   selftest --no-stress --no-faults: the streaming kernels' exact sums
#                       (CUDA cores at 1-16 tokens, tensor cores at 1-512, PDL eager and graph),
#                       beside the one-rank NCCL checks and the P2P virtual ranks
# bw-N.{txt,json}       bandwidth (1, 4, 16, 32, 64, 128, 256, 512 tokens, both kernels where
#                       they apply, the roofline's terms), RUNS times in fresh processes
# mid-N.{txt,json}      bandwidth at 160-512 tokens (the counts between), twice
# small-N.{txt,json}    bandwidth at 1-16 tokens (11 too, where the switch point lies): the
#                       CUDA-core and tensor-core kernels side by side, SMALL_RUNS times
# verify-T.{txt,json}   the one-rank Kimi-K2.5 TP8 replay (compute and full, eager and graph) at
#                       32 and 128 tokens (8 and 32 requests x a 4-token verify), the routed
#                       experts fed their own tokens (one launch per group of experts with the
#                       same count); the compute against bytes / rate + launches x fixed cost,
#                       each token count's rate and cost measured in the same run; 512 tokens
#                       (compute only, fewer samples) if time is left
# verify-600.txt        --tokens 600, past the kernels' maximum: refused with exit 2 before
#                       start-up (no GPU work)
# torch.json            cuBLAS through PyTorch (if importable): a bf16 GEMM of decode shapes and
#                       an 8192^3 product, a reference for what an engine's GEMM reaches
# smi.txt               clocks, power and temperature before and after (read-only queries)
# ncu.txt               Nsight Compute, if installed and time is left: DRAM throughput,
#                       tensor-pipe activity and instructions per MMA of mma_peak and
#                       stream_mma (128 and 512 tokens)
# summary.txt           the table printed last
# No nvcc: the kernels are compiled by NVRTC inside the binary, as everywhere.
# Every step has a time limit and is skipped, saying so, when the 5 minutes (TOTAL_S, 285 s)
# would not hold it.
set -uo pipefail
VB=$(realpath "${1:?binary}")
BASE_VB=""; [ -n "${BASE:-}" ] && BASE_VB=$(realpath "$BASE")
OUTDIR=${2:-${OUT:-out}}
mkdir -p "$OUTDIR"; OUTDIR=$(realpath "$OUTDIR")
SCRIPTS=$(cd "$(dirname "$0")" && pwd)
export NCCL_NVLS_ENABLE=0   # never enable NVLink multicast, in any process started here
RUNS=${RUNS:-5}
SMALL_RUNS=${SMALL_RUNS:-3}
start=$(date +%s)
# Everything is written to a scratch folder and packed into OUTDIR/h100x1-53.tgz at the end
# (also when the script is stopped), with summary.txt and commands.txt beside it: three files.
WORK=$(mktemp -d)
pack() {
  cp -f "$WORK/summary.txt" "$WORK/commands.txt" "$OUTDIR/" 2>/dev/null
  tar czf "$OUTDIR/h100x1-53.tgz" -C "$WORK" .
}
trap pack EXIT
cd "$WORK"
{
  echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  echo "# $("$VB" --version)"
} > commands.txt
left() { echo $(( ${TOTAL_S:-285} - ($(date +%s) - start) )); }
run() {  # NAME LIMIT_S CMD...: runs if the time allows, keeps the output
  local name=$1 limit=$2; shift 2
  if [ "$(left)" -lt "$limit" ]; then echo "$name: skipped to stay under 5 minutes" | tee -a commands.txt; return 1; fi
  local t0; t0=$(date +%s)
  local shown="$*"                        # the binaries' folder is this machine's business
  [ -n "${BASE_VB:-}" ] && shown="${shown//$BASE_VB/./verifybench-base}"
  shown="${shown//$VB/./verifybench}"
  echo "$name.txt      $shown" >> commands.txt
  timeout "$limit" "$@" > "$name.txt" 2>&1
  local rc=$?
  echo "$name rc=$rc wall=$(( $(date +%s) - t0 )) s" | tee -a commands.txt
  return 0
}
smi() {
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv 2>&1 | sed "s/^/$1: /" >> smi.txt
}
smi before

run selftest 90 "$VB" selftest --no-stress --no-faults --export-json selftest.json
grep -E "streaming kernel|^selftest:" selftest.txt | cut -c1-400

for i in $(seq 1 "$RUNS"); do
  run "bw-$i" 30 "$VB" bandwidth -n 20 --export-json "bw-$i.json"
done
if [ -n "${BASE_VB:-}" ]; then
  echo "# base: $("$BASE_VB" --version) (ab-base-N), this binary: ab-new-N" >> commands.txt
  for i in $(seq 1 "${AB_RUNS:-4}"); do
    run "ab-base-$i" 20 "$BASE_VB" bandwidth -n 20 --tokens "${AB_TOKENS:-128,256,512}" --export-json "ab-base-$i.json"
    run "ab-new-$i" 20 "$VB" bandwidth -n 20 --tokens "${AB_TOKENS:-128,256,512}" --export-json "ab-new-$i.json"
  done
fi
for i in $(seq 1 "$SMALL_RUNS"); do
  run "small-$i" 25 "$VB" bandwidth -n 20 --tokens 1,2,3,4,6,8,10,11,12,14,16 --op-sizes 1M \
    --export-json "small-$i.json"
done
# the token counts between the list's (the variants' edges and the two-group counts)
for i in 1 2; do
  run "mid-$i" 25 "$VB" bandwidth -n 20 --tokens 160,192,256,300,384,448,480,512 --op-sizes 16 \
    --export-json "mid-$i.json"
done
smi after-bandwidth

# Nsight Compute, where it is there and time is left: DRAM and tensor-pipe utilisation of
# mma_peak and stream_mma at 128 and 512 tokens (the clocks left as they are)
if command -v ncu >/dev/null; then
  run ncu 45 ncu --clock-control none --kernel-name regex:'stream_mma|mma_peak' --launch-count 10 \
    --section SpeedOfLight --metrics \
    sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,sm__inst_executed_pipe_tensor_op_hmma.sum \
    "$VB" bandwidth -n 1 --tokens 128,512 --op-sizes 16
fi

V=(verify --backend nccl --gpus 1 --tp 8 --model kimi-k2.5 --mode compute,full --graph both -n 20 -w 3)
run verify-32 40 "$VB" "${V[@]}" --tokens 32 --export-json verify-32.json
run verify-128 60 "$VB" "${V[@]}" --tokens 128 --export-json verify-128.json
run verify-600 15 "$VB" "${V[@]}" --tokens 600
run verify-512 40 "$VB" verify --backend nccl --gpus 1 --tp 8 --model kimi-k2.5 --mode compute \
  --graph both -n 5 -w 2 --tokens 512 --export-json verify-512.json

if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  run torch 30 python3 - <<'EOF'
# cuBLAS through PyTorch: y = x W^T with W 16384 x 7168 bf16 (235 MB, four of them in turn so that
# L2 never holds the next), T tokens; and an 8192^3 product. Random data. Median of 20 after 3.
import json, torch
dev = "cuda"
K, N = 7168, 16384
ws = [torch.randn(N, K, device=dev, dtype=torch.bfloat16) for _ in range(4)]
def timed(f, n=20):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(3):
        f(i)
    t = []
    for i in range(n):
        a.record(); f(i); b.record(); torch.cuda.synchronize()
        t.append(a.elapsed_time(b) * 1e-3)
    return sorted(t)[len(t) // 2]
rows = []
for T in [1, 4, 16, 32, 64, 128, 256, 512]:
    x = torch.randn(T, K, device=dev, dtype=torch.bfloat16)
    s = timed(lambda i: x @ ws[i % 4].T)
    rows.append({"tokens": T, "gbps": N * K * 2 / s / 1e9, "tflops": 2 * T * N * K / s / 1e12})
m = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
s = timed(lambda i: m @ m)
out = {"gemm_decode": rows, "gemm_8192_tflops": 2 * 8192**3 / s / 1e12, "torch": torch.__version__}
json.dump(out, open("torch.json", "w"), indent=1)
print(json.dumps(out))
EOF
fi
smi after

python3 "$SCRIPTS/h100x1-53-summary.py" "$WORK" | tee summary.txt
echo "total wall $(( $(date +%s) - start )) s" | tee -a commands.txt
