#!/usr/bin/env bash
# explain on published speculative-decoding runs (8x RTX PRO 6000 Blackwell, PCIe, vLLM), each
# given only what its user had: the plain decode step, the acceptance, k and the model. The MTP
# step and the tokens/s with speculation are the answers, set beside the published ones.
#
#   cargo build --release
#   scripts/published-runs.sh [BINARY] [OUTDIR]
#
# Writes OUTDIR (default results/published-spec-runs): commands.txt, one RUN.txt and RUN.json
# per run, summary.md. Needs python3 for the summary. No GPU.
#
# The published figures: repository local-inference-lab/rtx6kpro at commit e2c2b95,
# - GLM-5.1, vLLM MTP num_spec=3, TP8:
#   models/glm5.1/benchmarks/glm51-v2-full-68b3569f-20260514/glm-dcp*-mtp*/decode-matrix.json
#   (step: chunk_inter_token_latency_avg; accept rate: server_spec_accept_rate, accepted / drafted)
# - Kimi-K2.6, vLLM EAGLE-3 num_spec=3, FULL CUDA graph, TP8: models/kimi-k26-v2.md, kimi-k26-v4.md
# - the eager verify fixed by a FULL graph: models/kimi-k26-mtp-long-ctx-wip/README.md
set -euo pipefail

BIN=${1:-target/release/verifybench}
OUT=${2:-results/published-spec-runs}
mkdir -p "$OUT"

# Neither model has a preset: both run as kimi-k2.5, the DeepSeek-V3-style MLA + MoE preset
# with 4-bit routed experts (Kimi-K2.6 is Kimi-K2.5's architecture; GLM-5.1's published runs use
# 4-bit routed experts, b12x w4a16, and its own config.json is not among the public configs the
# project carries). The link is the default pcie-gen5 profile.
COMMON="--gpus 8 --model kimi-k2.5"

# RUN|ROW|PUBLISHED STEP MS|PUBLISHED TOK/S|WHERE THE STEP COMES FROM|FLAGS
# vLLM's accept rate is accepted / drafted tokens: accept length = 1 + k x rate.
# Kimi's plain decode step is 1000 / its plain tok/s at C1; its published step is the accept
# length over the published tok/s (2.278 x 1000 / tok/s).
RUNS=(
  "glm51-dcp8-c1|predicted (CUDA graph)|37.47|66.0|published (chunk_inter_token_latency_avg)|--decode-ms 20.14 --accept-length 2.221 --draft-steps 3"
  "kimi-k26-v2-c1|predicted (CUDA graph)|19.45|117.1|derived: 2.278 x 1000 / 117.1|--decode-ms 11.51 --accept-rates-of-drafts 0.645,0.393,0.240"
  "kimi-k26-v4-c1|predicted (CUDA graph)|18.67|122.0|derived: 2.278 x 1000 / 122.0|--decode-ms 10.82 --accept-rates-of-drafts 0.645,0.393,0.240"
  "kimi-k26-eager-2k|with a CUDA graph|19.54|116.6|derived: 2.278 x 1000 / 116.6|--verify-ms 30.37 --decode-ms 11.51 --accept-rates-of-drafts 0.645,0.393,0.240"
  "kimi-k26-eager-10k|with a CUDA graph|20.20|112.8|derived: 2.278 x 1000 / 112.8|--verify-ms 70.75 --decode-ms 11.51 --accept-rates-of-drafts 0.645,0.393,0.240"
  "kimi-k26-eager-30k|with a CUDA graph|21.19|107.5|derived: 2.278 x 1000 / 107.5|--verify-ms 90.04 --decode-ms 11.51 --accept-rates-of-drafts 0.645,0.393,0.240"
)

# Runs at more than one request: explain prices one request (the decode at T = 1, the verify at
# T = k + 1) and has no batch; a batch of C requests decodes C tokens and verifies C(k+1) per
# step, so --tokens C(k+1) would price the verify's batch against a decode of one token.
OUT_OF_SCOPE=(
  "glm51-dcp1-c4|45.35|247.3|plain decode 24.30 ms, accept rate 0.581, concurrency 4"
  "glm51-dcp1-c32|191.30|405.6|plain decode 101.26 ms, accept rate 0.533, concurrency 32"
  "kimi-k26-v2-c128|-|2089.8|plain 2109.8 tok/s, concurrency 128"
  "kimi-k26-v4-c128|-|2245.8|plain 2222.6 tok/s, concurrency 128"
)

{
  echo "# explain on published runs: what each run's user had (plain decode step, acceptance, k, model)"
  echo "# the eager rows give the eager verify as it ran too: accept length x 1000 / the eager tok/s"
  echo "# (2k: 75.0, 10k: 32.2, 30k: 25.3 tok/s); their plain decode is the v2 page's C1 step (the"
  echo "# note gives none)"
} >"$OUT/commands.txt"
: >"$OUT/runs.tsv"
for r in "${RUNS[@]}"; do
  IFS='|' read -r id row step tps where flags <<<"$r"
  cmd="verifybench explain $COMMON $flags"
  echo "$id: $cmd" >>"$OUT/commands.txt"
  # shellcheck disable=SC2086
  "$BIN" explain $COMMON $flags -q >"$OUT/$id.txt"
  # shellcheck disable=SC2086
  "$BIN" explain $COMMON $flags --format json -q >"$OUT/$id.json"
  printf '%s\t%s\t%s\t%s\t%s\n' "$id" "$row" "$step" "$tps" "$where" >>"$OUT/runs.tsv"
done
printf '%s\n' "${OUT_OF_SCOPE[@]}" >"$OUT/out-of-scope.txt"

python3 - "$OUT" <<'EOF'
import json, sys
out = sys.argv[1]
rows = [l.rstrip("\n").split("\t") for l in open(f"{out}/runs.tsv")]
lines = [
    "# explain on published runs: predicted against published",
    "",
    "Written by scripts/published-runs.sh from the runs' own JSON records (RUN.json); the commands",
    "are in commands.txt. Published figures: local-inference-lab/rtx6kpro at commit e2c2b95 (files",
    "named in the script). Predicted step = the row's verify + k x draft + overhead (draft and",
    "overhead not given, so 0: the step is the verify); the ranges are the model's stated error on",
    "the row's modeled part. in: the published value lies in the predicted range. ratio: published",
    "/ predicted.",
    "",
    "| run | row | published step ms | predicted step ms (range) | in | ratio | published tok/s | predicted tok/s (range) | in | ratio |",
    "|---|---|---:|---|---|---:|---:|---|---|---:|",
]
inside, ratios, err = 0, [], None
for rid, row, step, tps, where in rows:
    d = json.load(open(f"{out}/{rid}.json"))["result"]["data"]
    err = d["calibration"]["error"]
    s = next(x for x in d["scenarios"] if x["name"] == row)
    c = d["cycle"]
    extra = c["draft_steps"] * c["draft_ms"]["value"] + c["overhead_ms"]["value"]
    v = s["verify"]["us"] / 1000 + extra
    lo, hi = (u / 1000 + extra for u in s["range_us"])
    t = s["tokens_per_s"]
    tlo, thi = s["tokens_per_s_range"]
    ps, pt = float(step), float(tps)
    yes = lambda x, a, b: "yes" if a <= x <= b else ("above" if x > b else "below")
    inside += yes(ps, lo, hi) == "yes" and yes(pt, tlo, thi) == "yes"
    ratios.append(ps / v)
    lines.append(
        f"| {rid} | {row} | {ps:.2f} ({where}) | {v:.2f} ({lo:.2f}-{hi:.2f}) | {yes(ps, lo, hi)} | {ps / v:.2f} "
        f"| {pt:.1f} | {t:.1f} ({tlo:.1f}-{thi:.1f}) | {yes(pt, tlo, thi)} | {pt / t:.2f} |"
    )
lines += [
    "",
    f"Published step and tok/s both inside the predicted range: {inside} of {len(rows)} runs; published step / predicted step: {min(ratios):.2f}-{max(ratios):.2f} (every published step at or above the predicted one).",
    f"Stated error of the model (every row's range): +-{err['rel'] * 100:.0f}%, {err['how']}.",
]
lines += ["", "Out of scope (explain prices one request: the decode at T = 1 and the verify at T = k + 1, no batch):", ""]
for l in open(f"{out}/out-of-scope.txt"):
    rid, step, tps, what = l.rstrip("\n").split("|")
    lines.append(f"- {rid}: published step {step} ms, {tps} tok/s with speculation ({what})")
open(f"{out}/summary.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
rm "$OUT/runs.tsv" "$OUT/out-of-scope.txt"
