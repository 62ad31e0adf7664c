#!/usr/bin/env bash
# One H100 (or H200): the speculative cycle of issue 48 replayed as one rank's share of
# Kimi-K2.5 TP8 with an EAGLE-3 head, k = 3: the three draft forwards, then the verify, with the
# compute between the collectives and the exact check, from CUDA graphs captured as the engines
# capture them and eagerly, and the plain decode step of the same batch beside it.
#
#   scripts/h100x1-48.sh BINARY [OUTDIR]   (OUTDIR defaults to $OUT or ./out)
#
# OUTDIR gets summary.txt, commands.txt and h100x1-48.tgz, which holds these:
# cycle-c1.{txt,json}        --concurrency 1: decode 1 token, drafts 4 + 1 + 1, verify 4
# cycle-c8.{txt,json}        --concurrency 8: decode 8 tokens, drafts 32 + 8 + 8, verify 32
# cycle-c8-ctx2048.{txt,json} --concurrency 8 --context 2048: the KV cache read as well
# cycle-c32.{txt,json}       --concurrency 32: decode 32 tokens, drafts 128 + 32 + 32, verify 128
# model-c{1,8,32}.{txt,json} the cost model's price of the same cycles at TP8
#                            on its default machine (8 PCIe GPUs), beside them
# plan-c8.txt                the plan of the C=8 cycle (what each part streams and sends)
# smi.txt                    clocks, power and temperature before and after (read-only queries)
# summary.txt                per cycle, per launch mode: decode, drafts, verify, cycle (us) and
#                            the cycle over the decode step
# Each replay: --mode compute,full --graph both -n 100 -w 10 (collectives on a communicator of
# one rank: NCCL's launch and call cost, no transfer). Every step has a time limit and is
# skipped, saying so, when the 5 minutes would not hold it.
set -uo pipefail
VB=$(realpath "${1:?binary}")
OUTDIR=${2:-${OUT:-out}}
mkdir -p "$OUTDIR"; OUTDIR=$(realpath "$OUTDIR")
export NCCL_NVLS_ENABLE=0   # never enable NVLink multicast, in any process started here
start=$(date +%s)
# Everything is written to a scratch folder and packed into OUTDIR/h100x1-48.tgz at the end
# (also when the script is stopped), with summary.txt and commands.txt beside it: three files.
WORK=$(mktemp -d)
pack() {
  cp -f "$WORK/summary.txt" "$WORK/commands.txt" "$OUTDIR/" 2>/dev/null
  tar czf "$OUTDIR/h100x1-48.tgz" -C "$WORK" .
}
trap pack EXIT
cd "$WORK"
{
  echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  echo "# $("$VB" --version)"
} > commands.txt
left() { echo $(( 270 - ($(date +%s) - start) )); }
run() {  # NAME LIMIT_S CMD...: runs if the time allows, keeps the output
  local name=$1 limit=$2; shift 2
  if [ "$(left)" -lt "$limit" ]; then echo "$name: skipped to stay under 5 minutes" | tee -a commands.txt; return 1; fi
  local t0; t0=$(date +%s)
  local shown="${*//$VB/./verifybench}"   # the binary's folder is this machine's business
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

W=(--model kimi-k2.5 --tp 8 --phase cycle --drafter eagle3 --draft-steps 3)
R=(--mode compute,full --graph both)
N=(verify --backend nccl --gpus 1 "${W[@]}" "${R[@]}" -n 100 -w 10)
run cycle-c1 50 "$VB" "${N[@]}" --concurrency 1 --export-json cycle-c1.json
run cycle-c8 50 "$VB" "${N[@]}" --concurrency 8 --export-json cycle-c8.json
run cycle-c8-ctx2048 50 "$VB" "${N[@]}" --concurrency 8 --context 2048 \
  --export-json cycle-c8-ctx2048.json
run cycle-c32 90 "$VB" "${N[@]}" --concurrency 32 --export-json cycle-c32.json
smi after

M=(verify --backend model "${W[@]}" "${R[@]}")
run model-c1 10 "$VB" "${M[@]}" --concurrency 1 --export-json model-c1.json
run model-c8 10 "$VB" "${M[@]}" --concurrency 8 --export-json model-c8.json
run model-c32 10 "$VB" "${M[@]}" --concurrency 32 --export-json model-c32.json
run plan-c8 10 "$VB" plan "${W[@]}" --concurrency 8

python3 - "$WORK" <<'EOF' | tee summary.txt
# Per record: each run's parts (decode, draft, verify) and the cycle, us (median), and the
# cycle over the plain decode step of the same run.
import json, os, sys
work = sys.argv[1]
print(f"{'file':<24} {'mode':<8} {'launch':<6} {'decode':>9} {'drafts':>9} {'verify':>9} {'cycle':>9} {'cycle/decode':>12} {'#wrong':>6}")
for name in ["cycle-c1", "cycle-c8", "cycle-c8-ctx2048", "cycle-c32", "model-c1", "model-c8", "model-c32"]:
    p = os.path.join(work, name + ".json")
    if not os.path.exists(p):
        print(f"{name:<24} (no record: see {name}.txt)")
        continue
    recs = json.load(open(p))
    rec = recs[0] if isinstance(recs, list) else recs
    v = rec["result"]
    for run in v["runs"]:
        g, m = run["graph"], run["mode"]
        part = {p["part"]: p for p in v["parts"] if p["graph"] == g and p["mode"] == m}
        med = lambda r: r["per_verify"]["median_us"]
        d, c = med(part["decode"]), med(run)
        wrong = run["wrong"] + sum(p["wrong"] for p in part.values())
        print(f"{name:<24} {m:<8} {'graph' if g else 'eager':<6} {d:>9.1f} {med(part['draft']):>9.1f} "
              f"{med(part['verify']):>9.1f} {c:>9.1f} {c / d:>11.2f}x {wrong:>6}")
EOF
echo "total wall $(( $(date +%s) - start )) s" | tee -a commands.txt
