#!/usr/bin/env bash
# One H200: the P2P stress test after the host-side mends (bounded run-ahead, every rank's stream
# asked in turn instead of waiting on one), with read-phase pauses and the negative controls on
# every rank set; then the variants that show what the 8-virtual-rank stall was.
#
#   scripts/h200x1-40b.sh BINARY [OUTDIR]   (OUTDIR defaults to $OUT or ./out)
#
# Each step is `selftest --stress-only` with VERIFYBENCH_STRESS (comm/p2p/stress.rs): the stress
# test (10,000 calls, eager and graph, real kernels and with read-phase pauses) and both negative
# controls, counted only when caught by wrong elements; each line on stderr as it comes.
# stress8.txt     8 virtual ranks, waits bounded at 2 s (a stall costs 2 s, not 10)
# stress2.txt, stress4.txt   2 and 4 virtual ranks
# sync8.txt       8 ranks, the host waiting on each rank's stream in turn (as before the mend)
# blocks8.txt, eager-load.txt   only when stress8 fails: a grid cap of 8 blocks (residency), and
#                 CUDA_MODULE_LOADING=EAGER (lazy loading)
# unbounded8.txt  8 ranks, the whole plan enqueued at once
# The script stays under 8 minutes: every step has a time limit.
set -uo pipefail
VB=$(realpath "${1:?binary}")
OUTDIR=${2:-${OUT:-out}}
mkdir -p "$OUTDIR"; OUTDIR=$(realpath "$OUTDIR")
export NCCL_NVLS_ENABLE=0   # never enable NVLink multicast, in any process started here
start=$(date +%s)
cd "$OUTDIR"
{
  echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  echo "# $("$VB" --version)"
} > commands.txt
left() { echo $(( 440 - ($(date +%s) - start) )); }
run() {  # NAME LIMIT_S CMD...: runs if the time allows, keeps the output
  local name=$1 limit=$2; shift 2
  if [ "$(left)" -lt "$limit" ]; then echo "$name: skipped to stay under 8 minutes" | tee -a commands.txt; return 1; fi
  local t0; t0=$(date +%s)
  local shown="${*//$VB/./verifybench}"   # the binary's folder is this machine's business
  echo "$name.txt      $shown" >> commands.txt
  echo; echo "=== $name: $shown"
  timeout "$limit" "$@" > "$name.txt" 2>&1
  echo "$name rc=$? wall=$(( $(date +%s) - t0 )) s" | tee -a commands.txt
  grep -E "p2p stress|p2p access|^selftest:" "$name.txt" | cut -c1-700
}
S=VERIFYBENCH_STRESS
run stress8 150 env $S=ranks=8,timeout=2 "$VB" selftest --stress-only
run stress2 60 env $S=ranks=2 "$VB" selftest --stress-only
run stress4 60 env $S=ranks=4 "$VB" selftest --stress-only
run sync8 90 env $S=ranks=8,timeout=2,wait=sync "$VB" selftest --stress-only
if grep -qE "p2p stress, 8 virtual ranks: (eager|graph)[^:]*: FAIL" stress8.txt; then
  run blocks8 80 env $S=ranks=8,timeout=2,blocks=8 "$VB" selftest --stress-only
  run eager-load 80 env CUDA_MODULE_LOADING=EAGER $S=ranks=8,timeout=2 "$VB" selftest --stress-only
fi
run unbounded8 80 env $S=ranks=8,timeout=2,ahead=0 "$VB" selftest --stress-only
echo "total wall $(( $(date +%s) - start )) s" | tee -a commands.txt
