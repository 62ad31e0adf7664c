#!/usr/bin/env bash
# Two verifybench binaries' `bandwidth` on one GPU machine, alternating (A, B, A, B, ...), so
# that both streaming grids are measured in the same run on the same VM.
#
#   scripts/bandwidth-ab.sh BINARY_A BINARY_B [ROUNDS] [OUTDIR]   (ROUNDS 4, OUTDIR $OUT or ./out)
#
# Writes bandwidth-a.txt and bandwidth-b.txt (every run appended) and a summary of the
# streaming kernel's GB/s per token count, run by run.
set -uo pipefail
A=$(realpath "${1:?binary A}"); B=$(realpath "${2:?binary B}")
N=${3:-4}
OUTDIR=${4:-${OUT:-out}}
mkdir -p "$OUTDIR"; OUTDIR=$(realpath "$OUTDIR")
export NCCL_NVLS_ENABLE=0   # never enable NVLink multicast, in any process started here
cd "$OUTDIR"
{ echo "# A: $("$A" --version) ($1)"; echo "# B: $("$B" --version) ($2)"; } > summary.txt
for i in $(seq 1 "$N"); do
  for s in a b; do
    bin=$A; [ $s = b ] && bin=$B
    "$bin" bandwidth > run.txt 2>&1
    cat run.txt >> bandwidth-$s.txt
    echo "$s run $i: $(grep -oE 'T=[0-9]+: [0-9]+' run.txt | tr '\n' ' ')" | tee -a summary.txt
  done
done
rm -f run.txt
