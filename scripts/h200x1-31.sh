#!/usr/bin/env bash
# One H200: the checks of the rank reduction, the bus factors and the fault paths, in one go.
#
#   scripts/h200x1-31.sh BINARY [OUTDIR] [NCCL_TESTS_TARBALL]   (OUTDIR defaults to $OUT or ./out)
#
# env:        the requirements, the NVRTC chosen and why.
# selftest:   streaming kernel, P2P virtual ranks, and NCCL at 1 rank (threads, processes).
# bandwidth:  three repetitions, each in its own process.
# one-rank:   collective with --rank-time max and mean, verify, through a communicator of size 1.
# sweep:      --rounds 3 of 4 points at 1 rank, each saying what NCCL's log proves there.
# nccl-tests: (if the tarball is given) all_reduce_perf -g 1 beside the --rank-time mean record,
#             eager (-G 0) and graph (-G 20), through `compare --nccl-tests`.
# faults:     an injected hang and exit (threads, processes) with --timeout 10: wall time,
#             the error printed, and whether any verifybench process is left.
# Budget: about 5 minutes in all (the sweep about 2, each fault at most 10 s plus start-up).
set -uo pipefail
VB=$(realpath "${1:?binary}")
OUTDIR=${2:-${OUT:-out}}
NT_TAR=${3:-}
[ -n "$NT_TAR" ] && NT_TAR=$(realpath "$NT_TAR")
mkdir -p "$OUTDIR"; OUTDIR=$(realpath "$OUTDIR")
export NCCL_NVLS_ENABLE=0   # never enable NVLink multicast, in any process started here
step() { echo; echo "=== $*"; }
cd "$OUTDIR"
T0=$(date +%s)
step env;       $VB env 2>&1 | tee env.txt
step selftest;  $VB selftest --export-json selftest.json 2>&1 | tee selftest.txt
step "bandwidth x 3"
for i in 1 2 3; do $VB bandwidth 2>&1 | tee -a bandwidth.txt; done
for rt in max mean; do
  step "collective --gpus 1 --rank-time $rt (1 rank)"
  $VB collective --backend nccl --gpus 1 --op all_reduce -b 32K -e 1M -f 4 --graph both -n 200 -w 20 \
     --rank-time $rt --export-json coll-1rank-$rt.json 2>&1 | tee coll-1rank-$rt.txt
done
if [ -n "$NT_TAR" ]; then
  step "nccl-tests -g 1 beside collective --rank-time mean"
  W=$(mktemp -d); tar xzf "$NT_TAR" -C "$W"
  ( cd "$W"/nccl-tests-* && make -j16 MPI=0 CUDA_HOME=/usr/local/cuda NCCL_HOME=/usr \
      NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" src.build ) > nccltests-build.log 2>&1
  NT=$(echo "$W"/nccl-tests-*/build/all_reduce_perf)
  for G in 0 20; do
    $NT -b 32K -e 1M -f 4 -d bfloat16 -g 1 -G $G -n 200 -w 20 2>&1 | tee nccltests-G$G.txt
  done
  $VB compare --nccl-tests nccltests-G0.txt --nccl-tests nccltests-G20.txt coll-1rank-mean.json 2>&1 | tee compare-nccltests-mean.txt
  $VB compare --nccl-tests nccltests-G0.txt --nccl-tests nccltests-G20.txt coll-1rank-max.json 2>&1 | tee compare-nccltests-max.txt
fi
step "verify --gpus 1 --tp 8 --mode full (1 rank)"
$VB verify --backend nccl --gpus 1 --tp 8 --mode full --model kimi-k2.5 --tokens 3 --graph both -n 50 -w 5 \
   --export-json verify-1rank.json 2>&1 | tee verify-1rank.txt
step "sweep --rounds 3, 4 points, 1 rank"
$VB sweep --backend nccl --gpus 1 --tp 8 --mode comm --model kimi-k2.5 --tokens 3 -n 30 -w 3 --rounds 3 \
   -L NCCL_PROTO=LL,Simple -L NCCL_MAX_NCHANNELS=2,8 --results sweep.jsonl 2>&1 | tee sweep.txt
step faults
for l in threads processes; do
  for f in hang:0 exit:0; do
    t0=$(date +%s%N)
    timeout 60 $VB verify --backend nccl --gpus 1 --tp 8 --mode comm --graph off -n 20 -w 2 \
        --launcher $l --timeout 10 --inject-fault $f > fault-$l-${f%%:*}.txt 2>&1
    rc=$?; t1=$(date +%s%N)
    sleep 1
    left=$(pgrep -fc "$(basename "$VB") verify" || true)
    printf 'fault %-9s %-6s rc=%s wall=%.1fs processes_left=%s | %s\n' $l ${f%%:*} $rc \
        "$(awk "BEGIN{print ($t1 - $t0) / 1e9}")" "$left" "$(grep -m1 -iE 'error|fault|timed|abort' fault-$l-${f%%:*}.txt | cut -c1-220)" | tee -a faults.txt
  done
done
step "done in $(( $(date +%s) - T0 )) s"; ls -la "$OUTDIR"
