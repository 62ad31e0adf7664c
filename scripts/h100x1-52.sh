#!/usr/bin/env bash
# One H100 (or H200): issue 52's per-shape all-reduce choice on the one GPU there is. One GPU
# cannot measure a link: the decision is the cost model's (MODELED, pcie-gen5: 8 PCIe gen5 GPUs
# behind switches), and the P2P path runs on virtual ranks of the GPU (the real one-shot and
# two-shot kernels at every all-reduce shape of the cycle, the exact check of every element
# before anything is timed, eager and CUDA graph), labelled "not a P2P measurement".
#
#   scripts/h100x1-52.sh BINARY [OUTDIR]   (OUTDIR defaults to $OUT or ./out; under 2 minutes)
#
# OUTDIR gets 7 files:
# kimi-tp8.txt, kimi-tp8.json  Kimi-K2.5 TP8 at concurrency 1 and 8 on 8 virtual ranks (the
#                              decision file is kimi-tp8.json: the record, virtual ranks included)
# glm5-tp4.txt, glm5-tp4.json  a GLM-5-class model (its config.json) at TP4 on 4 virtual ranks,
#                              NCCL's LL and Simple compared too
# reuse.txt                    the Kimi command again: the decision file's key holds, so it is
#                              reused (said on stderr and in its last line), nothing measured
# commands.txt                 the commands, the binary's version, exit codes and wall times
# summary.txt                  the crossover lines and every exact-check line, printed last
# No nvcc: the kernels are compiled by NVRTC inside the binary. Every step has a time limit.
set -uo pipefail
VB=$(realpath "${1:?binary}")
OUTDIR=${2:-${OUT:-out}}
mkdir -p "$OUTDIR"; OUTDIR=$(realpath "$OUTDIR")
SCRIPTS=$(cd "$(dirname "$0")" && pwd)
GLM5="$SCRIPTS/../tests/data/configs/zai-org--GLM-5_config.json"
export NCCL_NVLS_ENABLE=0   # never enable NVLink multicast, in any process started here
cd "$OUTDIR"
start=$(date +%s)
{
  echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  echo "# $("$VB" --version)"
} > commands.txt
run() {  # NAME LIMIT_S CMD...: the output (stdout and stderr) into NAME.txt
  local name=$1 limit=$2; shift 2
  local t0; t0=$(date +%s)
  local shown="${*//$VB/./verifybench}"
  echo "$name.txt      ${shown//$SCRIPTS\/..\//}" >> commands.txt
  timeout "$limit" "$@" > "$name.txt" 2>&1
  echo "$name rc=$? wall=$(( $(date +%s) - t0 )) s" | tee -a commands.txt
}
C=(choose --backend model --concurrency 1,8 --virtual-ranks)
run kimi-tp8 45 "$VB" "${C[@]}" --model kimi-k2.5 --tp 8 --decision kimi-tp8.json
run glm5-tp4 45 "$VB" "${C[@]}" --model-config "$GLM5" --tp 4 --nccl-proto LL,Simple \
  --decision glm5-tp4.json
run reuse 20 "$VB" choose --backend model --concurrency 1,8 --model kimi-k2.5 --tp 8 \
  --decision kimi-tp8.json
{
  for f in kimi-tp8 glm5-tp4 reuse; do
    echo "== $f"
    grep -E "^crossover|^virtual ranks|pass:|FAIL:|^decision file|^Error" "$f.txt"
  done
} | tee summary.txt
echo "total wall $(( $(date +%s) - start )) s" | tee -a commands.txt
