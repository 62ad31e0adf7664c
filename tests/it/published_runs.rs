//! `explain` on the published speculative-decoding runs of 8 and 4 RTX PRO 6000 over PCIe
//! (tests/data/published-spec-runs.json), each given only what its user had: the plain decode
//! step (or plain tokens/s), the acceptance, k, the drafter, the model, the batch and the
//! context. `model fit-cycle` writes the `explain` command of each run; the test runs it and
//! holds the answer to the published step, the bounds and `fit-cycle`'s own price of the run.
//! The same commands and their whole outputs: scripts/published-runs.sh and
//! results/published-spec-runs/.
//!
//! Published figures checked by hand here (repository local-inference-lab/rtx6kpro):
//! - Kimi-K2.6, EAGLE-3, FULL CUDA graph, one request, models/kimi-k26-v2.md: 117.1 tok/s,
//!   86.9 plain, per-position acceptance (vLLM's fractions of all drafts) 0.645, 0.393, 0.240:
//!   accept length 1 + 0.645 + 0.393 + 0.240 = 2.278, plain step 1000 / 86.9 = 11.507 ms, the
//!   speculative step 2.278 x 1000 / 117.1 = 19.453 ms.
//! - GLM-5.1, MTP, DCP8, one request, glm-dcp8-mtp*/decode-matrix.json: step 37.47 ms
//!   (chunk_inter_token_latency_avg), plain 20.14 ms, vLLM accept rate 0.407 (accepted /
//!   drafted): accept length 1 + 3 x 0.407 = 2.221.
//! - GLM-5.3-Flash, TP4, a 7-token DFlash drafter, one request, models/glm-5.3-flash.md: 89.8
//!   verifier steps/s: step 1000 / 89.8 = 11.136 ms.

use std::collections::BTreeMap;

use crate::common::{json_of, num, vb};

/// The published step of a run, ms, from the runs file's published figures: the step where it
/// was published, else requests x accept length x 1000 / tok/s.
fn published_step_ms(run: &serde_json::Value) -> f64 {
    let p = &run["published"];
    if let Some(s) = p["step_ms"].as_f64() {
        return s;
    }
    let k = num(&run["draft_steps"]);
    let tau = if let Some(a) = run["accept_length"].as_f64() {
        a
    } else if let Some(r) = run["accept_rate"].as_f64() {
        1.0 + k * r
    } else {
        1.0 + run["accept_rates_of_drafts"]
            .as_array()
            .unwrap()
            .iter()
            .map(num)
            .sum::<f64>()
    };
    let c = run["concurrency"].as_f64().unwrap_or(1.0);
    c * tau * 1000.0 / num(&p["tokens_per_s"])
}

/// Every run: `explain` as its user would run it predicts the published step within 15%, its
/// range holds it, its step is `fit-cycle`'s to the digit, and no bound is broken.
#[test]
fn explain_holds_every_published_run_within_15_percent_and_its_range() {
    let runs_file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/published-spec-runs.json"
    );
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(runs_file).unwrap()).unwrap();
    let published: BTreeMap<String, f64> = file["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["id"].as_str().unwrap().to_string(), published_step_ms(r)))
        .collect();
    // The hand calculations of the header.
    assert!((published["kimi-k26-v2-c1"] - 19.453).abs() < 1e-3);
    assert!((published["glm51-dcp8-c1"] - 37.47).abs() < 1e-9);
    assert!((published["flash-dcp1-c1-dflash7"] - 11.136).abs() < 1e-9);

    let fit = json_of(&["model", "fit-cycle", runs_file]);
    let rows = fit["result"]["data"]["runs"].as_array().unwrap();
    assert_eq!(rows.len(), 18);
    let (mut in_range, mut held_in_range) = (0, 0);
    for row in rows {
        let id = row["id"].as_str().unwrap();
        let want = published[id];
        assert!((num(&row["published_step_ms"]) - want).abs() < 1e-9, "{id}");
        // Held out: the terms fitted without the run predict it within 15% too, its range from
        // the other runs' held-out errors.
        assert!(num(&row["held_out_error"]).abs() <= 0.15, "{id}: {row}");
        let [hlo, hhi] = [
            num(&row["held_out_range_ms"][0]),
            num(&row["held_out_range_ms"][1]),
        ];
        assert_eq!(
            row["published_in_range"],
            (hlo..=hhi).contains(&want),
            "{id}: {row}"
        );
        if (hlo..=hhi).contains(&want) {
            held_in_range += 1;
        }
        let args: Vec<String> = row["explain"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect();
        let v = json_of(&args);
        let d = &v["result"]["data"];
        let s = d["scenarios"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "predicted (CUDA graph)")
            .unwrap_or_else(|| panic!("{id}: no prediction: {d}"));
        let step = num(&s["step"]["step_us"]) / 1000.0;
        // One answer: explain's step is fit-cycle's price of the run with every run's terms.
        assert!(
            (step - num(&row["fitted_step_ms"])).abs() <= 1e-9 * step,
            "{id}: explain {step} ms, fit-cycle {}",
            row["fitted_step_ms"]
        );
        let err = step / want - 1.0;
        assert!(err.abs() <= 0.15, "{id}: {step:.2} ms against {want:.2}");
        let [lo, hi] = [
            num(&s["step"]["range_us"][0]),
            num(&s["step"]["range_us"][1]),
        ];
        assert!(lo <= step * 1000.0 && step * 1000.0 <= hi, "{id}: {s}");
        if (lo..=hi).contains(&(want * 1000.0)) {
            in_range += 1;
        }
        // Bounds: the verify never under the plain step; no more than the accept length
        // times decoding without speculation.
        let plain_ms = num(&row["plain_ms"]);
        assert!(num(&s["verify"]["us"]) / 1000.0 >= plain_ms, "{id}");
        let tau = num(&row["accept_length"]);
        assert!(num(&s["vs_baseline"]) <= tau + 1e-9, "{id}: {s}");
        let c = num(&row["concurrency"]);
        assert!(
            (num(&s["tokens_per_s"]) - c * tau * 1000.0 / step).abs()
                < 1e-6 * num(&s["tokens_per_s"]),
            "{id}: {s}"
        );
    }
    assert_eq!(in_range, 18, "the published step inside explain's range");
    // held out, the range holds the published step on at least 80% of the runs (17 of 18)
    assert!(
        held_in_range * 5 >= 18 * 4,
        "{held_in_range} of 18 in the held-out range"
    );
}

/// explain with the decode step alone predicts the verify and the step around it, and says
/// which parts are modeled.
#[test]
fn decode_alone_is_enough_to_predict_and_says_so() {
    let o = vb()
        .args([
            "explain",
            "--decode-ms",
            "11.51",
            "--accept-length",
            "2.278",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("The verify as the model prices it (not given)"),
        "{text}"
    );
    assert!(text.contains("predicted (CUDA graph)"), "{text}");
    assert!(text.contains("No verify given"), "{text}");
    assert!(text.contains("The step it divides by: verify"), "{text}");
    assert!(text.contains("draft forwards of"), "{text}");
    assert!(text.contains("(modeled)"), "{text}");
}
