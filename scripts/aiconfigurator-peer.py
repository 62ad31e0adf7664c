#!/usr/bin/env python3
"""AIConfigurator, the estimator a user would pick instead, on the published speculative-decoding
runs of RTX PRO 6000 Blackwell: a peer baseline beside verifybench's own predictions
(summary.md of scripts/published-runs.sh), not a dependency of verifybench.

    pip install aiconfigurator==0.12.0     # Python 3.11 or newer; pulls in aiconfigurator-core
    python3 scripts/aiconfigurator-peer.py [OUTDIR]

Writes OUTDIR (default results/published-spec-runs)/aiconfigurator.json (per run: the inputs
given, AIConfigurator's plain step, speculative step and tok/s, or why it gave none) and
aiconfigurator.md (the table against the published figures). No GPU and no network:
AIConfigurator predicts from the per-operation databases and model configs inside its wheels; a
model it does not carry is reported as not predicted, never fetched from the model hub.

How each run is asked, as its user would ask it (the SDK's cli_estimate, the programmatic form of
`aiconfigurator cli estimate`; each run's JSON holds the equivalent command line):
- system rtx_pro_6000_server (8x RTX PRO 6000 Blackwell Server Edition, PCIe Gen5), backend vllm
  at the database version AIConfigurator calls current, database mode SILICON (its default), the
  quantisation modes it infers from the model's config (its default: the runs' quantisation is
  not among what a user gives; the Kimi rows also carry the other choices as variants);
- mode static_gen: one batch of C requests (the run's concurrency) decoding OSL tokens after an
  ISL-token prompt, no prefill, no in-flight batching; TPOT is the time per output token averaged
  over the output;
- tensor parallelism = the run's GPUs, MoE tensor parallelism the same, no expert parallelism
  (vLLM's default); AIConfigurator's estimate has no decode-context-parallel setting, so a DCP run
  is asked as plain TP (said in its row);
- ISL/OSL: the context-zero cells of llm_decode_bench are ISL 71 (its prompt at context 0) and
  OSL 2048 (its max_tokens); the eager-fix note's rows ISL 2,000 / 10,000 / 30,000 and OSL 300
  (its e2e_bench -c and --max-tokens);
- the plain step is TPOT with nextn = 0. With speculation: nextn = k and nextn_accepted = the mean
  accepted drafts per step, AIConfigurator's acceptance input. vLLM's accept rate a (accepted /
  drafted) gives k x a (GLM-5.1 DCP1 C4: 3 x 0.581 = 1.743, an accept length of 2.743); vLLM's
  per-position acceptance (fractions of all drafts) gives their sum (Kimi: 0.645 + 0.393 + 0.240
  = 1.278); GLM-5.3-Flash's tok/s / steps/s is the accept length, so minus 1. AIConfigurator
  reports TPOT = its iteration time / (1 + nextn_accepted): its speculative step is TPOT x (1 +
  nextn_accepted) and its tok/s C x (1 + nextn_accepted) / step (its own tokens/s).

The published figures (the facts of local-inference-lab/rtx6kpro named per family below) are
those scripts/published-runs.sh uses; the run ids are its ids, so the two tables join on them.
"""

import json
import logging
import os
import re
import statistics
import subprocess
import sys
from importlib import metadata

try:
    import aiconfigurator_core
    from aiconfigurator.cli.api import cli_estimate
    from aiconfigurator_core.sdk import common as aic_common
except ImportError as exc:
    sys.exit(f"aiconfigurator is not importable ({exc}): pip install aiconfigurator==0.12.0")

PINNED = "0.12.0"
SYSTEM = "rtx_pro_6000_server"
BACKEND = "vllm"
OUT = sys.argv[1] if len(sys.argv) > 1 else "results/published-spec-runs"
COMMAND = "python3 scripts/aiconfigurator-peer.py" + (f" {OUT}" if len(sys.argv) > 1 else "")

GLM51 = "nvidia/GLM-5.1-NVFP4"
KIMI = "moonshotai/Kimi-K2.5"
FLASH = "local-inference-lab/GLM-5.3-Flash-NVFP4"
FLASH_NEAREST = "nvidia/GLM-5.3-NVFP4"
KIMI_RATES = (0.645, 0.393, 0.240)

GLM51_SRC = (
    "local-inference-lab/rtx6kpro@e2c2b95 models/glm5.1/benchmarks/glm51-v2-full-68b3569f-20260514/"
    "glm-dcp*-mtp*/decode-matrix.json (step: chunk_inter_token_latency_avg; accept rate: "
    "server_spec_accept_rate)"
)
KIMI_SRC = "local-inference-lab/rtx6kpro@e2c2b95 models/kimi-k26-v{2,4}.md, DCP1 decode tables"
EAGER_SRC = "local-inference-lab/rtx6kpro@e2c2b95 models/kimi-k26-mtp-long-ctx-wip/README.md"
FLASH_SRC = 'local-inference-lab/rtx6kpro@10c2f4e9 models/glm-5.3-flash.md, "Qualified performance"'

WHY = {
    GLM51: "GLM-5.1 served in NVFP4 (ModelOpt FP4) with MTP; AIConfigurator's bundled GLM-5.1 "
    "checkpoint in the same format",
    KIMI: "the runs served moonshotai/Kimi-K2.6 (Kimi-K2.5's architecture, 4-bit integer routed "
    "experts); AIConfigurator bundles Kimi-K2.6 only in NVFP4, so its Kimi-K2.5 config (the same "
    "architecture and weight format) is the closest; the NVFP4 one is a variant",
    FLASH: "the published checkpoint's name; AIConfigurator carries no config for it, and the "
    "nearest one it carries, nvidia/GLM-5.3-NVFP4 (the full-size GLM-5.3: 78 layers, hidden size "
    "6144, 256 experts), is asked as a variant",
}


def glm51_runs():
    rows = [  # id, concurrency, DCP, MTP step, plain step, accept rate, tok/s MTP, tok/s plain
        ("glm51-dcp1-c4", 4, 1, 45.35, 24.30, 0.581, 247.3, 164.3),
        ("glm51-dcp1-c32", 32, 1, 191.30, 101.26, 0.533, 405.6, 318.1),
        ("glm51-dcp8-c1", 1, 8, 37.47, 20.14, 0.407, 66.0, 49.7),
    ]
    for rid, c, dcp, step, plain, rate, tps, tps_plain in rows:
        yield {
            "id": rid,
            "model": "GLM-5.1",
            "aic_model": GLM51,
            "source": GLM51_SRC,
            "drafter": "MTP (the model's own MTP layer), num_spec=3",
            "gpus": 8,
            "dcp": dcp,
            "c": c,
            "isl": 71,
            "osl": 2048,
            "k": 3,
            "acceptance": f"vLLM accept rate {rate} (accepted / drafted)",
            "accepted": round(3 * rate, 4),
            "mapping": f"nextn_accepted = k x accept rate = 3 x {rate}",
            "published": {
                "plain_step_ms": plain,
                "spec_step_ms": step,
                "tok_s": tps,
                "tok_s_plain": tps_plain,
                "how": "both steps published (chunk_inter_token_latency_avg)",
            },
            "variants": [{"database_mode": "HYBRID"}],
        }


def kimi_runs():
    acc = round(sum(KIMI_RATES), 4)
    common = {
        "model": "Kimi-K2.6",
        "aic_model": KIMI,
        "drafter": "EAGLE-3 MLA draft (lightseekorg/kimi-k2.5-eagle3-mla), num_spec=3, asked as "
        "AIConfigurator's MTP (its only drafter for this architecture)",
        "gpus": 8,
        "dcp": 1,
        "k": 3,
        "acceptance": "vLLM per-position acceptance 0.645 / 0.393 / 0.240 (DCP1)",
        "accepted": acc,
        "mapping": "nextn_accepted = 0.645 + 0.393 + 0.240",
        "variants": [{"model": "nvidia/Kimi-K2.6-NVFP4"}, {"kvcache_quant_mode": "fp8"}],
    }
    length = 1 + acc
    for page, c, tps, tps_plain in (
        ("v2", 1, 117.1, 86.9),
        ("v4", 1, 122.0, 92.4),
        ("v2", 128, 2089.8, 2109.8),
        ("v4", 128, 2245.8, 2222.6),
    ):
        how = f"plain step = {c} x 1000 / plain tok/s; step = {c} x {length:.3f} x 1000 / tok/s"
        if c > 1:
            how += " (the acceptance of DCP1 taken for C128 too: the page gives no other)"
        yield {
            "id": f"kimi-k26-{page}-c{c}",
            **common,
            "source": KIMI_SRC.replace("{2,4}", page[1]),
            "c": c,
            "isl": 71,
            "osl": 2048,
            "published": {
                "plain_step_ms": round(c * 1000 / tps_plain, 3),
                "spec_step_ms": round(c * length * 1000 / tps, 3),
                "tok_s": tps,
                "tok_s_plain": tps_plain,
                "how": how,
            },
        }
    for ctx, tps, eager in ((2000, 116.6, 75.0), (10000, 112.8, 32.2), (30000, 107.5, 25.3)):
        yield {
            "id": f"kimi-k26-eager-{ctx // 1000}k",
            **common,
            "source": EAGER_SRC,
            "c": 1,
            "isl": ctx,
            "osl": 300,
            "plain_at": {"isl": 71, "osl": 2048},
            "published": {
                "plain_step_ms": round(1000 / 86.9, 3),
                "spec_step_ms": round(length * 1000 / tps, 3),
                "tok_s": tps,
                "tok_s_eager": eager,
                "how": "tok/s with the FULL CUDA graph; step = 2.278 x 1000 / tok/s; the note "
                "gives no plain decode: plain step = the v2 page's C1 context-0 step (1000 / "
                "86.9), so the ratio on both sides is the step at this context over the plain "
                "step at context 0 (AIConfigurator's from the kimi-k26-v2-c1 inputs); the eager "
                f"verify's {eager} tok/s is not asked (AIConfigurator has no graph-mode setting)",
            },
        }


def flash_runs():
    plain = {(1, 1): 169.9, (1, 8): 737.8, (4, 1): 151.8, (4, 8): 667.5}
    rows = [  # DCP, mode, k, C1 tok/s, C1 steps/s, C8 tok/s, C8 steps/s
        (1, "mtp3", 3, 247.8, 99.0, 903.2, 364.7),
        (1, "dflash7", 7, 221.1, 89.8, 689.6, 289.4),
        (4, "mtp3", 3, 227.0, 88.8, 830.9, 331.2),
        (4, "dflash7", 7, 206.7, 81.8, 630.8, 267.7),
    ]
    for c in (1, 8):
        for dcp, mode, k, t1, s1, t8, s8 in rows:
            tps, steps = (t1, s1) if c == 1 else (t8, s8)
            length = tps / steps
            drafter = (
                "the model's native 3-draft MTP"
                if mode == "mtp3"
                else "DFlash2, a block drafter proposing 7 tokens in one forward"
            )
            yield {
                "id": f"flash-dcp{dcp}-c{c}-{mode}",
                "model": "GLM-5.3-Flash",
                "aic_model": FLASH,
                "source": FLASH_SRC,
                "drafter": drafter,
                "gpus": 4,
                "dcp": dcp,
                "c": c,
                "isl": 71,
                "osl": 2048,
                "k": k,
                "acceptance": f"accept length = tok/s / steps/s = {tps} / {steps}",
                "accepted": round(length - 1, 4),
                "mapping": "nextn_accepted = accept length - 1",
                "published": {
                    "plain_step_ms": round(c * 1000 / plain[(dcp, c)], 3),
                    "spec_step_ms": round(c * 1000 / steps, 3),
                    "tok_s": tps,
                    "tok_s_plain": plain[(dcp, c)],
                    "how": f"plain step = {c} x 1000 / plain tok/s; step = {c} x 1000 / steps/s "
                    "(the page warns that other serving work was active on the host)",
                },
                "variants": [{"model": FLASH_NEAREST}],
            }


SITE = os.path.dirname(os.path.dirname(os.path.abspath(aiconfigurator_core.__file__)))


def clean(msg):
    """One line, without this machine's install paths."""
    msg = msg.replace(SITE + os.sep, "site-packages/")
    msg = re.sub(r"/\S*?/site-packages/", "site-packages/", msg)
    return " ".join(msg.split())


_CACHE = {}


def estimate(model, tp, c, isl, osl, nextn, accepted, database_mode="SILICON", **quant):
    """AIConfigurator's static_gen estimate, or its error."""
    key = (model, tp, c, isl, osl, nextn, accepted, database_mode, tuple(sorted(quant.items())))
    if key in _CACHE:
        return _CACHE[key]
    cmd = (
        f"aiconfigurator cli estimate --model-path {model} --system {SYSTEM} --backend {BACKEND} "
        f"--database-mode {database_mode} --estimate-mode static_gen --tp {tp} --moe-tp-size {tp} "
        f"--moe-ep-size 1 --batch-size {c} --isl {isl} --osl {osl}"
    )
    for name, value in quant.items():
        cmd += f" --{name.replace('_', '-')} {value}"
    if nextn:
        cmd += f" --nextn {nextn} --nextn-accepted {accepted}"
    out = {"command": cmd}
    if model not in aic_common.DefaultHFModels:
        glm = [a for a in aic_common.ARCHITECTURE_TO_MODEL_FAMILY if a.lower().startswith("glm")]
        out["error"] = (
            f"no bundled model config for {model} (given that name AIConfigurator downloads "
            "config.json from the model hub; this script stays offline), and the only GLM "
            f"architecture it models is {', '.join(glm)}"
        )
        _CACHE[key] = out
        return out
    try:
        r = cli_estimate(
            model,
            SYSTEM,
            mode="static_gen",
            backend_name=BACKEND,
            database_mode=database_mode,
            isl=isl,
            osl=osl,
            batch_size=c,
            tp_size=tp,
            moe_tp_size=tp,
            moe_ep_size=1,
            nextn=nextn,
            nextn_accepted=accepted if nextn else None,
            **quant,
        )
    except Exception as exc:  # AIConfigurator's own refusal is the answer for this run
        out["error"] = clean(f"{type(exc).__name__}: {exc}")
        _CACHE[key] = out
        return out
    step = r.tpot * (1 + (accepted if nextn else 0))
    ops = r.summary.get_generation_latency_dict()
    total = sum(ops.values()) or 1.0
    out.update(
        tpot_ms=round(r.tpot, 4),
        step_ms=round(step, 4),
        tokens_per_s=round(r.raw["tokens/s"], 2),
        backend_version=r.backend_version,
        quant={q: r.raw[q] for q in ("gemm", "moe", "kvcache", "fmha", "comm")},
        memory_gib=round(r.raw["memory"], 2),
        kv_cache_oom=bool(r.summary.check_kv_cache_oom()),
        step_ops_ms={n: round(v / total * step, 4) for n, v in ops.items() if v},
        sources=r.summary.get_generation_source_dict(),
    )
    _CACHE[key] = out
    return out


def err(pred, pub):
    return round((pred - pub) / pub * 100, 1)


def ask(run, overrides):
    """Plain and speculative estimates of one run under one configuration."""
    model = overrides.get("model", run["aic_model"])
    dbm = overrides.get("database_mode", "SILICON")
    quant = {k: v for k, v in overrides.items() if k.endswith("_quant_mode")}
    tp, c = run["gpus"], run["c"]
    at = run.get("plain_at", {"isl": run["isl"], "osl": run["osl"]})
    plain = estimate(model, tp, c, at["isl"], at["osl"], 0, 0.0, dbm, **quant)
    res = {
        "version": metadata.version("aiconfigurator"),
        "system": SYSTEM,
        "backend": BACKEND,
        "model": model,
        "database_mode": dbm,
        **({"quant_asked": quant} if quant else {}),
    }
    res["plain"] = plain
    if "error" in plain:
        res["status"] = "not predicted"
        res["error"] = plain["error"]
        return res
    spec = estimate(model, tp, c, run["isl"], run["osl"], run["k"], run["accepted"], dbm, **quant)
    res["spec"] = spec
    if "error" in spec:
        res["status"] = "not predicted"
        res["error"] = spec["error"]
        return res
    if "plain_at" in run:
        same = estimate(model, tp, c, run["isl"], run["osl"], 0, 0.0, dbm, **quant)
        res["plain_same_context"] = same
    pub = run["published"]
    ratio = spec["step_ms"] / plain["step_ms"]
    tps = c * (1 + run["accepted"]) / spec["step_ms"] * 1000
    res.update(
        status="predicted",
        plain_step_ms=plain["step_ms"],
        spec_step_ms=spec["step_ms"],
        ratio=round(ratio, 4),
        tok_s=round(tps, 2),
        error_pct={
            "plain_step": err(plain["step_ms"], pub["plain_step_ms"]),
            "spec_step": err(spec["step_ms"], pub["spec_step_ms"]),
            "ratio": err(ratio, pub["spec_step_ms"] / pub["plain_step_ms"]),
            "tok_s": err(tps, pub["tok_s"]),
        },
    )
    return res


def notes(run):
    out = []
    if run["dcp"] > 1:
        out.append(f"DCP{run['dcp']} asked as plain TP{run['gpus']} (no DCP setting)")
    if run["gpus"] == 4:
        out.append("published on the Workstation Edition; AIConfigurator has the Server Edition")
    if "dflash" in run["id"]:
        out.append("AIConfigurator has no DFlash drafter (nextn prices target-shaped MTP layers)")
    return out


def git_commit():
    try:
        return subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=7"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    logging.disable(logging.WARNING)
    versions = {p: metadata.version(p) for p in ("aiconfigurator", "aiconfigurator-core")}
    if versions["aiconfigurator"] != PINNED:
        print(
            f"warning: aiconfigurator {versions['aiconfigurator']}; the committed results "
            f"were made with {PINNED}"
        )
    runs = [*glm51_runs(), *kimi_runs(), *flash_runs()]
    for run in runs:
        run["accept_length"] = round(1 + run["accepted"], 4)
        run["aic_model_why"] = WHY[run["aic_model"]]
        run["notes"] = notes(run)
        run["aiconfigurator"] = ask(run, {})
        run["aiconfigurator"]["variants"] = [ask(run, v) for v in run.pop("variants")]
        a = run["aiconfigurator"]
        print(f"{run['id']}: {a['status']}" + (f", tok/s {a['tok_s']}" if "tok_s" in a else ""))
    record = {
        "what": "AIConfigurator's predictions for the published speculative-decoding runs",
        "command": COMMAND,
        "git_commit": git_commit(),
        "aiconfigurator_versions": versions,
        "system": SYSTEM,
        "backend": BACKEND,
        "mode": "static_gen",
        "runs": runs,
    }
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "aiconfigurator.json"), "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    with open(os.path.join(OUT, "aiconfigurator.md"), "w") as f:
        f.write(markdown(record))


def cell(text):
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("`", "'")


def pct(x):
    return f"{x:+.1f}%"


def markdown(rec):
    v = rec["aiconfigurator_versions"]
    bver = next(
        (
            r["aiconfigurator"]["spec"]["backend_version"]
            for r in rec["runs"]
            if "spec" in r["aiconfigurator"]
        ),
        "current",
    )
    lines = [
        "# AIConfigurator on the published speculative-decoding runs",
        "",
        f"Written by `{rec['command']}` (commit {rec['git_commit']}) with aiconfigurator "
        f"{v['aiconfigurator']} and aiconfigurator-core {v['aiconfigurator-core']}: system "
        f"`{rec['system']}`, backend `{rec['backend']}` (database {bver}), database mode SILICON, "
        "estimate mode `static_gen`, quantisation as AIConfigurator infers it from the model's "
        "config. Per run, `aiconfigurator.json` holds the inputs, the equivalent `aiconfigurator "
        "cli estimate` command lines, the per-operation split of each step and the variants. The "
        "script's header says how each published run is mapped to AIConfigurator's inputs; the "
        "run ids are those of `summary.md` (scripts/published-runs.sh).",
        "",
        "Inputs: the run's GPUs as TP (MoE TP the same), its concurrency as the batch, ISL/OSL "
        "of its benchmark, k as `--nextn`, the mean accepted drafts per step as "
        "`--nextn-accepted`. Answers: plain step = TPOT without speculation; speculative step = "
        "TPOT x (1 + accepted); ratio = speculative step / plain step; tok/s = C x (1 + "
        "accepted) / speculative step. err: (AIConfigurator - published) / published.",
        "",
        "| run | AIConfigurator model | C | ISL/OSL | k, accepted | published plain step ms | "
        "AIC plain step ms (err) | published ratio | AIC ratio (err) | published tok/s | "
        "AIC tok/s (err) |",
        "|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    done, why = [], []
    for r in rec["runs"]:
        a, p = r["aiconfigurator"], r["published"]
        head = (
            f"| {r['id']} | {a['model']} | {r['c']} | {r['isl']}/{r['osl']} | {r['k']}, "
            f"{r['accepted']:.3f} | {p['plain_step_ms']:.2f} |"
        )
        pub_ratio = p["spec_step_ms"] / p["plain_step_ms"]
        if a["status"] == "predicted":
            e = a["error_pct"]
            done.append(r)
            lines.append(
                f"{head} {a['plain_step_ms']:.2f} ({pct(e['plain_step'])}) | {pub_ratio:.2f} | "
                f"{a['ratio']:.2f} ({pct(e['ratio'])}) | {p['tok_s']:.1f} | {a['tok_s']:.1f} "
                f"({pct(e['tok_s'])}) |"
            )
        else:
            why.append(r)
            lines.append(
                f"{head} not predicted: {cell(a['error'])} | {pub_ratio:.2f} | - | "
                f"{p['tok_s']:.1f} | - |"
            )
    lines += summary_lines(rec["runs"], done)
    lines += HOW
    lines += variant_lines(rec["runs"])
    lines += [
        "",
        "The runs' families (published source; drafter; the model AIConfigurator is given):",
        "",
    ]
    families = {}
    for r in rec["runs"]:
        f = families.setdefault(r["model"], {"src": [], "drafter": [], "run": r})
        for key, value in (("src", r["source"]), ("drafter", r["drafter"])):
            if value not in f[key]:
                f[key].append(value)
    for name, f in families.items():
        r = f["run"]
        lines.append(
            f"- {name}: {'; '.join(f['src'])}; {' / '.join(f['drafter'])}; given as "
            f"{r['aic_model']}: {r['aic_model_why']}."
        )
    lines += [
        "",
        "Per run (where the published figures come from, what AIConfigurator was not told):",
        "",
    ]
    for r in rec["runs"]:
        a = r["aiconfigurator"]
        oom = [
            f"AIConfigurator flags its {a[k]['quant']['kvcache']} KV cache over capacity for the "
            f"{k} estimate (kv_cache_oom) and answers anyway"
            for k in ("plain", "spec")
            if a.get(k, {}).get("kv_cache_oom")
        ]
        lines.append(f"- {r['id']}: " + "; ".join([r["published"]["how"], *r["notes"], *oom]) + ".")
    return "\n".join(lines) + "\n"


HOW = [
    "",
    "How AIConfigurator 0.12.0 prices these runs (read from its sources): a speculative iteration "
    "is the target's per-layer operations counted (L + nextn) / L times (L target layers) at a "
    "decode batch widened to C x (nextn + 1) tokens: no drafter of its own, no sequential draft "
    "steps (an EAGLE-3 head or a DFlash block drafter is priced as nextn target-shaped layers); "
    "the acceptance only divides TPOT by 1 + nextn_accepted. The TP all-reduce comes from its "
    "measured vLLM custom all-reduce table for this system (CUDA-graph rows, 8 GPUs: 23.6 us at "
    "128 bf16 elements to 31.2 us at 32,768; 27.3 us at one token of Kimi's 7,168); the "
    "system file's p2p_latency (10 us) prices only "
    "pipeline-parallel transfers, unused here. With an fp8 KV cache (the Kimi variant, and what "
    "it infers for the NVFP4 checkpoints) vLLM's MLA decode table for this system has no rows at "
    "8 heads per rank and it falls back to TRT-LLM's MLA rows, whose attention time grows with "
    "the context (the eager rows' variants); with the bf16 KV cache it infers for "
    "moonshotai/Kimi-K2.5 it reads vLLM's TRITON_MLA rows.",
]


def summary_lines(runs, done):
    out = [""]
    out.append(f"Predicted: {len(done)} of {len(runs)} runs.")
    if done:
        et = [abs(r["aiconfigurator"]["error_pct"]["tok_s"]) for r in done]
        er = [abs(r["aiconfigurator"]["error_pct"]["ratio"]) for r in done]
        ep = [abs(r["aiconfigurator"]["error_pct"]["plain_step"]) for r in done]
        out.append(
            f"Of those, tok/s within 15% of the published: {sum(x <= 15 for x in et)}, ratio "
            f"within 15%: {sum(x <= 15 for x in er)}; median "
            f"|error| tok/s {statistics.median(et):.1f}%, ratio {statistics.median(er):.1f}%, "
            f"plain step {statistics.median(ep):.1f}% (the plain step is an input to verifybench, "
            "a prediction of AIConfigurator's)."
        )
    return out


def variant_lines(runs):
    out = [
        "",
        "Variants (other choices a user could make; same inputs otherwise):",
        "",
        "| run | variant | plain step ms (err) | ratio (err) | tok/s (err) |",
        "|---|---|---:|---:|---:|",
    ]
    for r in runs:
        for v in r["aiconfigurator"]["variants"]:
            name = v["model"] + (
                f", {v['database_mode']}" if v["database_mode"] != "SILICON" else ""
            )
            name += "".join(
                f", {k.replace('_quant_mode', '')} {q}" for k, q in v.get("quant_asked", {}).items()
            )
            if v["status"] == "predicted":
                e = v["error_pct"]
                out.append(
                    f"| {r['id']} | {name} | {v['plain_step_ms']:.2f} ({pct(e['plain_step'])}) | "
                    f"{v['ratio']:.2f} ({pct(e['ratio'])}) | {v['tok_s']:.1f} ({pct(e['tok_s'])}) |"
                )
            else:
                out.append(f"| {r['id']} | {name} | not predicted: {cell(v['error'])} | - | - |")
    return out


if __name__ == "__main__":
    main()
