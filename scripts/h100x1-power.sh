#!/usr/bin/env bash
# One GPU: the SM clock and the board power while `bandwidth` streams at 128, 256 and 512
# tokens (300 timed passes each), nvidia-smi sampling every 5 ms beside it (read-only queries:
# no clock or power setting is changed). Shows whether the card's power limit holds the SM
# clock under its maximum while the tensor-core kernel streams. Under a minute.
#
#   scripts/h100x1-power.sh BINARY [OUTDIR]   (OUTDIR defaults to $OUT or ./out)
#
# OUTDIR gets bw-T.txt (the bandwidth output) and smi-T.csv (timestamp, SM clock, power draw,
# clock event reasons: 0x4 is the software power cap) per token count, and summary.txt.
set -u
VB=$(realpath "${1:?binary}")
OUTDIR=${2:-${OUT:-out}}
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0   # never enable NVLink multicast, in any process started here
for T in 128 256 512; do
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active \
    --format=csv,noheader -lms 5 > "$OUTDIR/smi-$T.csv" 2>&1 &
  P=$!
  sleep 0.5
  "$VB" bandwidth -n 300 --tokens "$T" --op-sizes 16 > "$OUTDIR/bw-$T.txt" 2>&1
  sleep 0.3
  kill "$P"; wait "$P" 2>/dev/null
  sleep 2
done
for T in 128 256 512; do
  echo "== T=$T"
  grep -E "peak|^ +$T " "$OUTDIR/bw-$T.txt"
  echo "SM clock (MHz: samples):"
  awk -F', ' '{print $2}' "$OUTDIR/smi-$T.csv" | sort | uniq -c | sort -k2 -n | awk '{printf " %s:%s", $2, $1} END {print ""}'
  echo "highest power draw (W): $(awk -F', ' '{print $3}' "$OUTDIR/smi-$T.csv" | sort -n | tail -1)"
  echo "samples with the software power cap (0x4) active: $(grep -c 0x0000000000000004 "$OUTDIR/smi-$T.csv")"
done | tee "$OUTDIR/summary.txt"
