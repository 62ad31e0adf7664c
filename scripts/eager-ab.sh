#!/usr/bin/env bash
# Two verifybench binaries' eager per-call times on one GPU, alternating (A, B, A, B, ...): the
# 1-rank NCCL all-reduce of 32 KB (`collective`, eager and graph) and selftest's one-shot timing on
# virtual ranks (labelled there "not a P2P measurement"), each in a fresh process.
#
#   scripts/eager-ab.sh BINARY_A BINARY_B [ROUNDS] [OUTDIR]   (ROUNDS 3, OUTDIR $OUT or ./out)
#
# Writes every run's output (coll-{a,b}.txt, selftest-{a,b}.txt) and summary.txt: per run the
# collective's eager and graph medians and the virtual-rank eager/graph times per call.
set -uo pipefail
A=$(realpath "${1:?binary A}"); B=$(realpath "${2:?binary B}")
N=${3:-3}
OUTDIR=${4:-${OUT:-out}}
mkdir -p "$OUTDIR"; OUTDIR=$(realpath "$OUTDIR")
export NCCL_NVLS_ENABLE=0   # never enable NVLink multicast, in any process started here
cd "$OUTDIR"
{ echo "# A: $("$A" --version) ($1)"; echo "# B: $("$B" --version) ($2)"; } > summary.txt
for i in $(seq 1 "$N"); do
  for s in a b; do
    bin=$A; [ $s = b ] && bin=$B
    "$bin" collective --backend nccl --gpus 1 --op all_reduce -b 32K -e 32K --graph both -n 200 -w 20 > run.txt 2>&1
    cat run.txt >> coll-$s.txt
    # the row of the 32 KB size: eager median is the 5th column, graph the 9th
    echo "$s run $i: collective 32 KB eager/graph us: $(awk '$1 == 32768 {print $5 " / " $9}' run.txt)" | tee -a summary.txt
    "$bin" selftest --no-faults > run.txt 2>&1
    cat run.txt >> selftest-$s.txt
    grep -oE '[0-9]+ ranks x 3 blocks: eager [0-9.]+ us, graph [0-9.]+ us' run.txt | sed "s/^/$s run $i: virtual /" | tee -a summary.txt
  done
done
rm -f run.txt
