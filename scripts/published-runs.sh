#!/usr/bin/env bash
# explain on the published speculative-decoding runs of 8 and 4 RTX PRO 6000 Blackwell over PCIe
# (tests/data/published-spec-runs.json: vLLM, GLM-5.1 MTP, Kimi-K2.6 EAGLE-3, GLM-5.3-Flash MTP
# and DFlash, at 1 to 128 requests), each given only what its user had: the plain decode step
# (or plain tok/s), the acceptance, k, the drafter, the model, the batch and the context. The
# speculative step and the tokens/s are the answers, set beside the published ones, beside the
# engine terms' held-out check (`model fit-cycle`) and beside AIConfigurator's estimates of the
# same runs (aiconfigurator.json, written by scripts/aiconfigurator-peer.py).
#
#   cargo build --release
#   scripts/published-runs.sh [BINARY] [OUTDIR]
#
# Writes OUTDIR (default results/published-spec-runs): fit-cycle.txt and fit-cycle.json (the
# terms, every run held out), commands.txt (each run's explain command, as `model fit-cycle`
# writes it), one RUN.txt and RUN.json per run, summary.md. Needs python3. No GPU.
# tests/it/published_runs.rs runs the same commands and holds them to the published steps.
set -euo pipefail

BIN=${1:-target/release/verifybench}
OUT=${2:-results/published-spec-runs}
RUNS=tests/data/published-spec-runs.json
mkdir -p "$OUT"

"$BIN" model fit-cycle "$RUNS" >"$OUT/fit-cycle.txt"
"$BIN" model fit-cycle "$RUNS" --format json >"$OUT/fit-cycle.json"

# id<TAB>explain arguments, one run per line (no argument holds a space or a tab).
python3 - "$OUT/fit-cycle.json" >"$OUT/runs.tsv" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["result"]["data"]["runs"]:
    print(r["id"] + "\t" + " ".join(r["explain"]))
PY

echo "# explain on the published runs: each run's command, as \`model fit-cycle $RUNS\` writes it" >"$OUT/commands.txt"
while IFS=$'\t' read -r id args; do
  echo "verifybench $args" >>"$OUT/commands.txt"
  # shellcheck disable=SC2086 # the arguments are words without spaces
  "$BIN" $args >"$OUT/$id.txt"
  # shellcheck disable=SC2086
  "$BIN" $args --format json -q >"$OUT/$id.json"
done <"$OUT/runs.tsv"
rm "$OUT/runs.tsv"

python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
fit = json.load(open(os.path.join(out, "fit-cycle.json")))["result"]["data"]
published = {r["id"]: r["published"] for r in json.load(open("tests/data/published-spec-runs.json"))["runs"]}
aic_path = os.path.join(out, "aiconfigurator.json")
aic = {}
if os.path.exists(aic_path):
    for r in json.load(open(aic_path))["runs"]:
        aic[r["id"]] = r
# The AIConfigurator file names the long-context runs by their eager rows.
aic_id = {"kimi-k26-ctx2k": "kimi-k26-eager-2k", "kimi-k26-ctx10k": "kimi-k26-eager-10k",
          "kimi-k26-ctx30k": "kimi-k26-eager-30k"}

def pct(x):
    return f"{x * 100:+.1f}%"

rows, errs, inside, aic_errs = [], [], 0, []
tps_errs, tps_inside, widths = [], 0, []
for r in fit["runs"]:
    rid = r["id"]
    rec = json.load(open(os.path.join(out, rid + ".json")))["result"]["data"]
    s = next(x for x in rec["scenarios"] if x["name"] == "predicted (CUDA graph)")
    step = s["step"]["step_us"] / 1000
    lo, hi = (u / 1000 for u in s["step"]["range_us"])
    pub = r["published_step_ms"]
    c, tau = r["concurrency"], r["accept_length"]
    pub_tps = published[rid].get("tokens_per_s")
    tps_cell = f"{pub_tps:.1f}" if pub_tps else f"{c * tau * 1000 / pub:.1f}*"
    err = step / pub - 1
    errs.append(err)
    ok = lo <= pub <= hi
    inside += ok
    tps = s["tokens_per_s"]
    tlo, thi = s["tokens_per_s_range"]
    pub_or_derived = pub_tps or c * tau * 1000 / pub
    tps_errs.append(tps / pub_or_derived - 1)
    tps_inside += tlo <= pub_or_derived <= thi
    widths.append(thi / tlo)
    a = aic.get(aic_id.get(rid, rid), {}).get("aiconfigurator", {})
    if "spec_step_ms" in a:
        ae = a["spec_step_ms"] / pub - 1
        aic_errs.append(ae)
        acell = f"{a['spec_step_ms']:.2f} ({pct(ae)})"
    else:
        acell = "not predicted"
    rows.append(
        f"| {rid} | {c} | {r['draft_steps']} {r['drafter']} | {r['context']} | {r['plain_ms']:.2f} | "
        f"{pub:.2f} | {step:.2f} ({lo:.2f}-{hi:.2f}) | {pct(err)} | {'yes' if ok else 'no'} | "
        f"{pct(r['held_out_error'])} | {tps_cell} | {tps:.1f} ({tlo:.1f}-{thi:.1f}) | "
        f"{pct(tps_errs[-1])} | {acell} |"
    )

t = fit["terms"]
with open(os.path.join(out, "summary.md"), "w") as f:
    f.write("# explain on the published speculative runs: predicted against published\n\n")
    f.write(
        "Written by scripts/published-runs.sh: each run's `explain` command is in commands.txt (as "
        "`model fit-cycle` writes it from tests/data/published-spec-runs.json), its output in "
        "RUN.txt and RUN.json; the terms and the held-out check in fit-cycle.txt and "
        "fit-cycle.json; AIConfigurator's estimates of the same runs in aiconfigurator.json "
        "(scripts/aiconfigurator-peer.py). Published figures: local-inference-lab/rtx6kpro (the "
        "file of each run is named in the runs file). The published step is the published one, "
        "else requests x accept length x 1000 / published tok/s.\n\n"
    )
    f.write(
        "step = the row `predicted (CUDA graph)`: the draft forwards, the verify and the "
        "bookkeeping, each priced by the cost model and held to the given plain step through the "
        "engine terms; range: the terms' held-out spread and the model's stated error. err: "
        "predicted / published - 1. held out: the same run predicted with the terms fitted on the "
        "other runs (`model fit-cycle`). Published tok/s as published (* where none was: requests x "
        "accept length x 1000 / the published step). AIConfigurator: its speculative step "
        "(TPOT x (1 + accepted)) and its error against the published step.\n\n"
    )
    f.write(
        f"Engine terms (fitted on all {fit['fitted_on']} runs): phi = {t['scaling']:.4f} of the "
        f"plain step scales with the modeled forward; o = {t['draft_forward']:.4f} x the plain "
        f"step per draft forward; tau_us = {t['per_draft_token_us']:.1f} us per request and "
        f"drafted token.\n\n"
    )
    f.write(
        "| run | C | k drafter | context | plain ms | published step ms | predicted step ms "
        "(range) | err | in | held out | published tok/s | predicted tok/s (range) | tok/s err | "
        "AIConfigurator step ms (err) |\n"
    )
    f.write("|---|---:|---|---:|---:|---:|---|---:|---|---:|---:|---|---:|---|\n")
    f.write("\n".join(rows) + "\n\n")
    n = len(errs)
    within = sum(abs(e) <= 0.15 for e in errs)
    held = [r["held_out_error"] for r in fit["runs"]]
    f.write(
        f"Predicted step within 15% of the published: {within} of {n} runs "
        f"({pct(min(errs))} to {pct(max(errs))}); the published step inside the predicted range: "
        f"{inside} of {n}. Held out (each run predicted without itself): {pct(min(held))} to "
        f"{pct(max(held))}, {sum(abs(e) <= 0.15 for e in held)} of {n} within 15%.\n"
    )
    widths.sort()
    f.write(
        f"Predicted tok/s within 15% of the published: {sum(abs(e) <= 0.15 for e in tps_errs)} of {n} "
        f"({pct(min(tps_errs))} to {pct(max(tps_errs))}); the published tok/s inside the predicted "
        f"range: {tps_inside} of {n}; the tok/s range's width (high / low): median "
        f"{widths[len(widths) // 2]:.2f}x, at most {widths[-1]:.2f}x.\n"
    )
    if aic_errs:
        med = sorted(abs(e) for e in aic_errs)[len(aic_errs) // 2]
        f.write(
            f"AIConfigurator predicts {len(aic_errs)} of {n} runs: its step {pct(min(aic_errs))} "
            f"to {pct(max(aic_errs))} of the published (median |error| {med * 100:.1f}%), "
            f"{sum(abs(e) <= 0.15 for e in aic_errs)} within 15%.\n"
        )
PY
echo "wrote $OUT"
