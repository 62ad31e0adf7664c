//! End-to-end tests of `verifybench breakeven` through the real binary.

use std::path::Path;

use predicates::prelude::*;
use verifybench::measure::Summary;
use verifybench::model::{self, Phase};
use verifybench::record::*;
use verifybench::util::now_utc;

use crate::common;
use common::vb;

fn json(args: &[&str]) -> serde_json::Value {
    let out = vb()
        .args(["breakeven", "--format", "json"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap()
}

/// A verify record of kimi-k2.5 TP=8 for `phase` with a graph run of median `median_us`.
fn record(source: Source, phase: Phase, tokens: u64, median_us: f64) -> Record {
    let s = common::kimi(8, tokens, phase);
    let summary = Summary::from_samples(&[median_us * 0.99, median_us, median_us * 1.02]).unwrap();
    Record::new(
        source,
        Provenance::here("model", now_utc()),
        Body::Verify(VerifyResult::of(
            RecordedWorkload::of(&s),
            vec![
                VerifyRun {
                    graph: false,
                    mode: Mode::Full,
                    per_collective_us: 0.0,
                    per_verify: Summary::from_samples(&[median_us * 2.0]).unwrap(),
                    breakdown: vec![],
                    wrong: 0,
                    iterations: 1,
                    warmup: 0,
                    in_collective: None,
                },
                VerifyRun {
                    graph: true,
                    mode: Mode::Full,
                    per_collective_us: summary.median_us / 124.0,
                    per_verify: summary,
                    breakdown: vec![],
                    wrong: 0,
                    iterations: 3,
                    warmup: 1,
                    in_collective: None,
                },
            ],
        )),
    )
}

use common::write_records as write;

#[test]
fn worked_example_from_flags() {
    let v = json(&[
        "--decode-ms",
        "12.2",
        "--verify-ms",
        "30,19",
        "--verify-ms",
        "12",
        "--draft-steps",
        "3",
        "--draft-ms",
        "1.0",
        "--overhead-ms",
        "0",
        "--accept-length",
        "2.5",
    ]);
    assert!((f(&v["baseline_tokens_per_s"]) - 81.967).abs() < 1e-3);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    let taus: Vec<f64> = rows
        .iter()
        .map(|r| f(&r["breakeven_accept_length"]))
        .collect();
    assert!((taus[0] - 2.705).abs() < 1e-3);
    assert!((taus[1] - 1.803).abs() < 1e-3);
    // 12 ms is below the decode step (12.2 ms): held at the floor explain holds the same
    // inputs to (the decode plus what 4 tokens add over 1), cycle 3 x 1 + floor,
    // tau* = cycle / 12.2, tokens/s at tau 2.5 = 2500 / cycle.
    let floor = common::explain_floor_ms("3", &[]);
    assert!(floor > 12.2);
    assert!((taus[2] - (3.0 + floor) / 12.2).abs() < 1e-9);
    assert_eq!(rows[2]["at_floor"], true);
    assert!((f(&rows[2]["held_verify_ms"]) - floor).abs() < 1e-12);
    let at12 = &rows[2]["at_accept_length"];
    assert!((f(&at12["tokens_per_s"]) - 2500.0 / (3.0 + floor)).abs() < 1e-9);
    assert_eq!(at12["beats_baseline"], true);
    assert_eq!(rows[0]["at_accept_length"]["beats_baseline"], false);
    assert_eq!(rows[0]["verify_ms"]["origin"], "given");
    assert_eq!(rows[0]["verify_ms"]["flag"], "--verify-ms");
    // Default columns 1.5..4.0 for k = 3.
    assert_eq!(rows[0]["grid"].as_array().unwrap().len(), 6);
    assert!(v["assumption"].as_str().unwrap().contains("batch 1"));
}

#[test]
fn table_states_assumption_and_marks_cells() {
    // 12 ms is held at explain's floor for the same inputs: tau = 2 gives 2000 / floor.
    let at_floor = format!("{:.1}*", 2000.0 / common::explain_floor_ms("3", &[]));
    vb().args([
        "breakeven",
        "--decode-ms",
        "12.2",
        "--verify-ms",
        "30,19,12",
        "--draft-steps",
        "3",
        "--draft-ms",
        "0",
        "--overhead-ms",
        "0",
    ])
    .assert()
    .success()
    .stdout(predicate::str::contains("assumption: batch 1"))
    .stdout(predicate::str::contains("81.97 tok/s"))
    .stdout(predicate::str::contains("2.459"))
    .stdout(predicate::str::contains(at_floor))
    .stdout(predicate::str::contains("12.00^"))
    .stdout(predicate::str::contains(
        "warning: T_verify 12.00 ms (given) is faster than T_decode 12.20 ms (given)",
    ))
    .stdout(predicate::str::contains("given (--verify-ms)"));
}

#[test]
fn a_verify_faster_than_the_decode_is_warned_about_and_no_gain_passes_the_accept_length() {
    // As given, 2.5 / 6 ms = 416.7 tok/s would be 5.08x decoding at 12.2 ms; held at the
    // floor (the decode step and what 4 tokens add) and with the drafts and overhead as explain
    // prices them, the speedup is 2.5 x 12.2 / cycle: under the accept length.
    let v = json(&[
        "--decode-ms",
        "12.2",
        "--verify-ms",
        "6",
        "--draft-steps",
        "3",
        "--accept-length",
        "2.5",
    ]);
    let w = v["warnings"].as_array().unwrap();
    assert_eq!(w.len(), 1);
    assert!(w[0].as_str().unwrap().contains("CUDA graph"));
    let r = &v["rows"][0];
    assert_eq!(r["at_floor"], true);
    let speedup = f(&r["at_accept_length"]["speedup"]);
    assert!(
        (speedup - 2.5 * 12.2 / f(&r["cycle_ms"])).abs() < 1e-9,
        "{r}"
    );
    assert!(speedup < 2.5);
    for p in r["grid"].as_array().unwrap() {
        assert!(f(&p["speedup"]) <= f(&p["accept_length"]) + 1e-9);
    }
}

#[test]
fn acceptance_rates_and_constant_rate() {
    let base = [
        "--decode-ms",
        "10",
        "--verify-ms",
        "15",
        "--draft-steps",
        "3",
    ];
    let v = json(&[&base[..], &["--accept-rates", "0.8,0.6,0.45"]].concat());
    assert!((f(&v["inputs"]["accept_length"]["value"]) - 2.496).abs() < 1e-12);
    let v = json(&[&base[..], &["--accept-rate", "0"]].concat());
    assert_eq!(f(&v["inputs"]["accept_length"]["value"]), 1.0);
    let v = json(&[&base[..], &["--accept-rate", "1"]].concat());
    assert_eq!(f(&v["inputs"]["accept_length"]["value"]), 4.0);
    // The rates set k when --draft-steps is absent.
    let v = json(&[
        "--decode-ms",
        "10",
        "--verify-ms",
        "15",
        "--accept-rates",
        "0.9,0.9",
    ]);
    assert_eq!(v["inputs"]["draft_steps"], 2);
}

#[test]
fn from_a_measured_verify_record_with_decode_and_draft() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("kimi_verify.json");
    write(
        &p,
        &[
            record(Source::Measured, Phase::Verify, 4, 19_000.0),
            record(Source::Measured, Phase::Decode, 1, 12_200.0),
            record(Source::Measured, Phase::Draft, 1, 1_000.0),
        ],
    );
    let v = json(&[
        "--from",
        p.to_str().unwrap(),
        "--accept-length",
        "2.5",
        "--overhead-ms",
        "0",
    ]);
    let i = &v["inputs"];
    assert_eq!(f(&i["decode_ms"]["value"]), 12.2);
    assert_eq!(i["decode_ms"]["origin"], "measured");
    assert_eq!(i["decode_ms"]["file"], "kimi_verify.json");
    assert_eq!(f(&i["draft_ms"]["value"]), 1.0);
    assert_eq!(i["draft_steps"], 3);
    // The graph run (19 ms), not the eager one (38 ms).
    assert_eq!(f(&i["verify_ms"][0]["value"]), 19.0);
    assert!(i["verify_ms"][0]["detail"]
        .as_str()
        .unwrap()
        .contains("graph, full"));
    assert_eq!(v["modeled"], false);
    assert!((f(&v["rows"][0]["breakeven_accept_length"]) - 22.0 / 12.2).abs() < 1e-9);

    // Flags and records together: the flag verify time first, then the record's.
    let v = json(&[
        "--from",
        p.to_str().unwrap(),
        "--verify-ms",
        "30",
        "--decode-ms",
        "12.2",
    ]);
    assert_eq!(v["rows"].as_array().unwrap().len(), 2);
    assert_eq!(v["rows"][0]["verify_ms"]["origin"], "given");
    assert_eq!(v["rows"][1]["verify_ms"]["origin"], "measured");
}

#[test]
fn modeled_records_make_modeled_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("model.json");
    write(&p, &[record(Source::Modeled, Phase::Verify, 4, 15_000.0)]);
    let v = json(&["--from", p.to_str().unwrap(), "--decode-ms", "12.2"]);
    assert_eq!(v["modeled"], true);
    assert_eq!(v["inputs"]["verify_ms"][0]["origin"], "modeled");
    vb().args([
        "breakeven",
        "--from",
        p.to_str().unwrap(),
        "--decode-ms",
        "12.2",
    ])
    .assert()
    .success()
    .stdout(predicate::str::contains("MODELED"))
    .stdout(predicate::str::contains("modeled (model.json"));
}

fn fails_with(args: &[&str], msg: &str) {
    let out = vb().arg("breakeven").args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "args {args:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(msg), "args {args:?}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

#[test]
fn bad_input_exits_2_with_one_line() {
    let base = [
        "--decode-ms",
        "12.2",
        "--verify-ms",
        "19",
        "--draft-steps",
        "3",
    ];
    let with = |extra: &[&'static str]| [&base[..], extra].concat();
    fails_with(&with(&["--accept-rate", "1.5"]), "--accept-rate 1.5");
    fails_with(&with(&["--accept-rates", "0.8,-0.2,0.5"]), "--accept-rates");
    fails_with(
        &with(&["--accept-rates", "0.8,0.6"]),
        "one rate per draft step",
    );
    fails_with(&with(&["--accept-length", "4.5"]), "between 1 and k+1 = 4");
    fails_with(&with(&["--accept-length", "0.5"]), "--accept-length 0.5");
    fails_with(&with(&["--draft-ms", "-1"]), "--draft-ms -1");
    fails_with(
        &[
            "--decode-ms",
            "0",
            "--verify-ms",
            "19",
            "--draft-steps",
            "3",
        ],
        "--decode-ms 0",
    );
    fails_with(
        &[
            "--decode-ms",
            "12",
            "--verify-ms",
            "-3",
            "--draft-steps",
            "3",
        ],
        "--verify-ms -3",
    );
    fails_with(
        &["--decode-ms", "12", "--draft-steps", "3"],
        "no verify time",
    );
    fails_with(
        &["--verify-ms", "19", "--draft-steps", "3"],
        "no decode time",
    );
}

#[test]
fn wrong_results_files_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    // A collective record is the wrong kind.
    let coll = dir.path().join("coll.json");
    let rec = Record::new(
        Source::Measured,
        Provenance::here("nccl", now_utc()),
        Body::Collective(CollectiveResult {
            op: model::CollectiveKind::AllReduce,
            dtype: model::DType::Bf16,
            nranks: 2,
            rows: vec![],
        }),
    );
    write(&coll, &[rec]);
    let base = ["--decode-ms", "12.2", "--draft-steps", "3", "--from"];
    fails_with(
        &[&base[..], &[coll.to_str().unwrap()]].concat(),
        "breakeven reads verify records",
    );
    // Another schema version.
    let old = dir.path().join("old.json");
    let mut v = serde_json::to_value(record(Source::Measured, Phase::Verify, 4, 19_000.0)).unwrap();
    v["schema_version"] = 99.into();
    std::fs::write(&old, v.to_string()).unwrap();
    fails_with(
        &[&base[..], &[old.to_str().unwrap()]].concat(),
        "schema_version 99",
    );
    // Not there.
    fails_with(
        &[&base[..], &["/nonexistent/x.json"]].concat(),
        "cannot read",
    );
}

/// The acceptance path end to end: records written by the cost-model backend of `verify`
/// (verify and decode phases) feed `breakeven`, whose outputs are labelled modeled.
#[test]
fn from_records_written_by_the_cost_model_backend() {
    let dir = tempfile::tempdir().unwrap();
    let verify = dir.path().join("verify.json");
    let decode = dir.path().join("decode.json");
    for (phase, path) in [("verify", &verify), ("decode", &decode)] {
        vb().args([
            "verify",
            "--backend",
            "model",
            "--model",
            "kimi-k2.5",
            "--tp",
            "8",
            "--tokens",
            "3",
            "--mode",
            "full",
            "--phase",
            phase,
            "-q",
            "--export-json",
        ])
        .arg(path)
        .assert()
        .success();
    }
    let v = json(&[
        "--from",
        verify.to_str().unwrap(),
        "--from",
        decode.to_str().unwrap(),
        "--accept-length",
        "2.5",
        "--draft-ms",
        "0",
        "--overhead-ms",
        "0",
    ]);
    assert_eq!(v["modeled"], true, "{v}");
    let row = &v["rows"][0];
    assert_eq!(row["verify_ms"]["origin"], "modeled");
    // the break-even accept length is the cycle over the decode step, both from the records
    let rec = |p: &Path| -> f64 {
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
        let runs = r[0]["result"]["runs"].as_array().unwrap().clone();
        let g = runs
            .iter()
            .find(|x| x["graph"] == true && x["mode"] == "full")
            .unwrap();
        g["per_verify"]["median_us"].as_f64().unwrap() / 1000.0
    };
    let (tv, td) = (rec(&verify), rec(&decode));
    assert!(tv > td && td > 0.0, "verify {tv} ms, decode {td} ms");
    assert!(
        (f(&row["breakeven_accept_length"]) - tv / td).abs() < 1e-9,
        "{row}"
    );
    assert!((f(&v["baseline_tokens_per_s"]) - 1000.0 / td).abs() < 1e-6);
}
