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


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


# per run: held out (the terms fitted on the other runs: fit-cycle.json) and in sample
# (explain with the terms of every run: RUN.json)
held, held_in, held_tps, held_tps_in, widths = [], 0, [], 0, []
errs, inside, aic_errs, rows = [], 0, [], []
for r in fit["runs"]:
    rid = r["id"]
    c, tau = r["concurrency"], r["accept_length"]
    pub = r["published_step_ms"]
    pub_tps = published[rid].get("tokens_per_s")
    ptps = pub_tps or c * tau * 1000 / pub
    tps_cell = f"{pub_tps:.1f}" if pub_tps else f"{ptps:.1f}*"
    # held out
    h = r["held_out_step_ms"]
    hlo, hhi = r["held_out_range_ms"]
    held.append(r["held_out_error"])
    held_in += r["published_in_range"]
    ht = c * tau * 1000 / h
    htlo, hthi = c * tau * 1000 / hhi, c * tau * 1000 / hlo
    held_tps.append(ht / ptps - 1)
    held_tps_in += htlo <= ptps <= hthi
    widths.append(hthi / htlo)
    # in sample: explain as the user runs it
    rec = json.load(open(os.path.join(out, rid + ".json")))["result"]["data"]
    s = next(x for x in rec["scenarios"] if x["name"] == "predicted (CUDA graph)")
    step = s["step"]["step_us"] / 1000
    lo, hi = (u / 1000 for u in s["step"]["range_us"])
    errs.append(step / pub - 1)
    inside += lo <= pub <= hi
    a = aic.get(aic_id.get(rid, rid), {}).get("aiconfigurator", {})
    if "spec_step_ms" in a:
        ae = a["spec_step_ms"] / pub - 1
        aic_errs.append(ae)
        acell = f"{a['spec_step_ms']:.2f} ({pct(ae)})"
    else:
        acell = "not predicted"
    rows.append(
        f"| {rid} | {c} | {r['draft_steps']} {r['drafter']} | {r['context']} | {r['plain_ms']:.2f} | "
        f"{pub:.2f} | {h:.2f} ({hlo:.2f}-{hhi:.2f}) | {pct(held[-1])} | "
        f"{'yes' if r['published_in_range'] else 'no'} | {tps_cell} | {ht:.1f} ({htlo:.1f}-{hthi:.1f}) | "
        f"{pct(held_tps[-1])} | {step:.2f} ({lo:.2f}-{hi:.2f}) | {pct(errs[-1])} | {acell} |"
    )

t = fit["terms"]
n = len(rows)
with open(os.path.join(out, "summary.md"), "w") as f:
    f.write("# explain on the published speculative runs: predicted against published\n\n")
    f.write(
        "Written by scripts/published-runs.sh. Each run is predicted twice. **Held out**: with "
        "the engine terms fitted on the other runs, never on the run itself (`model fit-cycle`: "
        "fit-cycle.txt, fit-cycle.json), its range from the other runs' held-out errors, each "
        "fitted without this run too. **explain**: as a user runs it (commands.txt, RUN.txt, "
        "RUN.json), with the terms fitted on all the runs, this one included. AIConfigurator's "
        "estimates of the same runs: aiconfigurator.json (scripts/aiconfigurator-peer.py). "
        "Published figures: local-inference-lab/rtx6kpro (each run's file is named in "
        "tests/data/published-spec-runs.json). The published step is the published one, else "
        "requests x accept length x 1000 / published tok/s; published tok/s as published (* where "
        "none was: requests x accept length x 1000 / the published step).\n\n"
    )
    f.write(
        "step: the draft forwards, the verify and the bookkeeping, each priced by the cost model "
        "and held to the given plain step through the engine terms. err: predicted / published "
        "- 1. AIConfigurator: its speculative step (TPOT x (1 + accepted)) and its error against "
        "the published step.\n\n"
    )
    f.write(
        f"Engine terms fitted on all {fit['fitted_on']} runs (what explain uses): phi = "
        f"{t['scaling']:.4f} of the plain step scales with the modeled forward; o = "
        f"{t['draft_forward']:.4f} x the plain step per draft forward; tau_us = "
        f"{t['per_draft_token_us']:.1f} us per request and drafted token.\n\n"
    )
    f.write(
        "| run | C | k drafter | context | plain ms | published step ms | held-out step ms "
        "(range) | err | in | published tok/s | held-out tok/s (range) | err | explain step ms "
        "(range) | err | AIConfigurator step ms (err) |\n"
    )
    f.write("|---|---:|---|---:|---:|---:|---|---:|---|---:|---|---:|---|---:|---|\n")
    f.write("\n".join(rows) + "\n\n")
    f.write(
        f"Held out: the step within 15% of the published on "
        f"{sum(abs(e) <= 0.15 for e in held)} of {n} runs ({pct(min(held))} to {pct(max(held))}), "
        f"inside its range on {held_in} of {n}; the tok/s within 15% on "
        f"{sum(abs(e) <= 0.15 for e in held_tps)} of {n} ({pct(min(held_tps))} to "
        f"{pct(max(held_tps))}), inside its range on {held_tps_in} of {n}; the tok/s range's "
        f"width (high / low) median {median(widths):.2f}x, at most {max(widths):.2f}x.\n"
    )
    f.write(
        f"explain (in sample): the step within 15% on {sum(abs(e) <= 0.15 for e in errs)} of "
        f"{n} ({pct(min(errs))} to {pct(max(errs))}), inside its range on {inside} of {n}.\n"
    )
    if aic_errs:
        f.write(
            f"AIConfigurator predicts {len(aic_errs)} of {n} runs: its step {pct(min(aic_errs))} "
            f"to {pct(max(aic_errs))} of the published (median |error| "
            f"{median([abs(e) for e in aic_errs]) * 100:.1f}%), "
            f"{sum(abs(e) <= 0.15 for e in aic_errs)} within 15%.\n"
        )
PY
echo "wrote $OUT"
