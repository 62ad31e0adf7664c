#!/usr/bin/env bash
# One GPU: the SM clock and the board power while `bandwidth` streams at 128, 256 and 512
# tokens (300 timed passes each), nvidia-smi sampling every 5 ms beside it (read-only queries:
# no clock or power setting is changed). Shows whether the card's power limit holds the SM
# clock under its maximum while the tensor-core kernel streams. Under a minute.
#
#   scripts/h100x1-power.sh BINARY [OUTDIR]   (OUTDIR defaults to $OUT or ./out)
#   REPEAT=N ONLY_REPEAT=1 scripts/h100x1-power.sh BINARY [OUTDIR]
#
# OUTDIR gets bw-T.txt (the bandwidth output) and smi-T.csv (timestamp, SM clock, power draw,
# clock event reasons: 0x4 is the software power cap) per token count, and summary.txt.
# REPEAT=N then runs `bandwidth -n 20 --tokens 256,512` N times more, back to back as
# h100x1-53.sh does, each with nvidia-smi beside it (rep-N.json, rep-N.csv; packed into
# repeat.tgz), and adds one line per run to summary.txt: % of the stated roofline at 512 and
# 256 tokens, the SM clock against mma_peak's, and the share of samples under the power cap;
# ONLY_REPEAT=1 skips the three long runs.
set -u
VB=$(realpath "${1:?binary}")
OUTDIR=${2:-${OUT:-out}}
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0   # never enable NVLink multicast, in any process started here
[ -n "${ONLY_REPEAT:-}" ] || for T in 128 256 512; do
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active \
    --format=csv,noheader -lms 5 > "$OUTDIR/smi-$T.csv" 2>&1 &
  P=$!
  sleep 0.5
  "$VB" bandwidth -n 300 --tokens "$T" --op-sizes 16 > "$OUTDIR/bw-$T.txt" 2>&1
  sleep 0.3
  kill "$P"; wait "$P" 2>/dev/null
  sleep 2
done
[ -n "${ONLY_REPEAT:-}" ] || for T in 128 256 512; do
  echo "== T=$T"
  grep -E "peak|^ +$T " "$OUTDIR/bw-$T.txt"
  echo "SM clock (MHz: samples):"
  awk -F', ' '{print $2}' "$OUTDIR/smi-$T.csv" | sort | uniq -c | sort -k2 -n | awk '{printf " %s:%s", $2, $1} END {print ""}'
  echo "highest power draw (W): $(awk -F', ' '{print $3}' "$OUTDIR/smi-$T.csv" | sort -n | tail -1)"
  echo "samples with the software power cap (0x4) active: $(grep -c 0x0000000000000004 "$OUTDIR/smi-$T.csv")"
done | tee "$OUTDIR/summary.txt"

if [ -n "${REPEAT:-}" ]; then
  REP=$(mktemp -d)
  for i in $(seq 1 "$REPEAT"); do
    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active \
      --format=csv,noheader -lms 5 > "$REP/rep-$i.csv" 2>&1 &
    P=$!
    "$VB" bandwidth -n 20 --tokens 256,512 --export-json "$REP/rep-$i.json" > "$REP/rep-$i.txt" 2>&1
    kill "$P"; wait "$P" 2>/dev/null
    python3 - "$REP/rep-$i.json" "$REP/rep-$i.csv" "$i" <<'EOF' | tee -a "$OUTDIR/summary.txt"
import json, sys
g = json.load(open(sys.argv[1]))["result"]["data"][0]
peak = g["roofline"]["tensor_peak_mhz"]
rows = {k["tokens"]: k for k in g["kernels"] if k["kernel"] == "tensor_cores"}
lines = [l.split(", ") for l in open(sys.argv[2]) if l.count(",") >= 3]
def reasons(x):
    try:
        return int(x.strip(), 16)
    except ValueError:
        return 0
capped = sum(1 for l in lines if reasons(l[3]) & 0x4)
cells = [f"T={t}: {rows[t]['pct_roofline']:.1f}% of the roofline, clock {100 * rows[t]['sm_mhz'] / peak:.0f}% "
         f"of mma_peak's, {rows[t]['pct_roofline_at_clock']:.1f}% at its clock" for t in (512, 256)]
print(f"run {sys.argv[3]}: " + "; ".join(cells) + f"; power cap (0x4) in {capped} of {len(lines)} samples")
EOF
  done
  tar czf "$OUTDIR/repeat.tgz" -C "$REP" .
fi
