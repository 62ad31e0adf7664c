//! One set of inputs, one answer: `explain`, `breakeven` and `report` price the same verify,
//! decode, k and acceptance through the same step (the drafts and overhead not given priced
//! through the engine terms, the same floor) and agree to the digit; `report` given an
//! `explain` record renders the answer first.

use crate::common::{json_of, num, vb};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// The verify as it ran, given (30 ms: above the floor; 12.5 ms: under it, held there), on the
/// motivating numbers: explain's row and breakeven's row are the same step and tokens/s.
#[test]
fn explain_and_breakeven_agree_to_the_digit() {
    for verify in ["30", "12.5"] {
        let common = [
            "--decode-ms",
            "12.2",
            "--verify-ms",
            verify,
            "--accept-length",
            "2.5",
            "--draft-steps",
            "2",
            "--gpus",
            "8",
        ];
        let e = json_of(&[&["explain"][..], &common].concat());
        let d = &e["result"]["data"];
        let row = d["scenarios"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "as it ran (eager)")
            .unwrap();
        let b = json_of(&[&["breakeven"][..], &common].concat());
        let r = &b["rows"][0];
        // the same drafts and overhead, modeled, the same values
        let cyc = &d["cycle"];
        assert!(close(
            num(&b["inputs"]["draft_ms"]["value"]),
            num(&cyc["draft_ms"]["value"])
        ));
        assert_eq!(b["inputs"]["draft_ms"]["origin"], "modeled");
        assert!(close(
            num(&b["inputs"]["overhead_ms"]["value"]),
            num(&cyc["overhead_ms"]["value"])
        ));
        // the same verify (held at the same floor where it is under it), step and tokens/s
        assert_eq!(r["at_floor"], row["at_floor"], "--verify-ms {verify}");
        assert!(close(
            num(&r["held_verify_ms"]) * 1000.0,
            num(&row["verify"]["us"])
        ));
        assert!(close(
            num(&r["cycle_ms"]) * 1000.0,
            num(&row["step"]["step_us"])
        ));
        assert!(close(
            num(&r["at_accept_length"]["tokens_per_s"]),
            num(&row["tokens_per_s"])
        ));
        assert!(close(
            num(&r["breakeven_accept_length"]),
            num(&row["breakeven_tau"])
        ));
        assert!(close(
            num(&b["baseline_tokens_per_s"]),
            num(&cyc["baseline_tokens_per_s"])
        ));
        // the step by hand: k x draft + verify + overhead
        let by_hand = 2.0 * num(&cyc["draft_ms"]["value"])
            + num(&row["verify"]["us"]) / 1000.0
            + num(&cyc["overhead_ms"]["value"]);
        assert!(close(num(&r["cycle_ms"]), by_hand));
        if verify == "12.5" {
            assert_eq!(r["at_floor"], true);
            let floor = num(&d["calibration"]["floor_ms"]["ms"]);
            assert!(close(num(&r["held_verify_ms"]), floor) && floor > 12.5);
        }
    }
}

/// `breakeven --from` and `report` read the same records and print the same break-even; an
/// `explain` record given to `report` is its first section.
#[test]
fn breakeven_from_records_and_report_agree_and_report_opens_with_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).display().to_string();
    for (phase, file) in [("verify", "v.json"), ("decode", "d.json")] {
        vb().args([
            "verify",
            "--backend",
            "model",
            "--tp",
            "8",
            "--mode",
            "full",
            "--phase",
            phase,
        ])
        .args(["--tokens", if phase == "verify" { "3" } else { "1" }])
        .args(["-q", "--format", "json", "--export-json", &p(file)])
        .assert()
        .success();
    }
    vb().args(["explain", "--verify-ms", "30", "--decode-ms", "12.2"])
        .args([
            "--accept-length",
            "2.5",
            "--gpus",
            "8",
            "-q",
            "--format",
            "json",
        ])
        .args(["--export-json", &p("x.json")])
        .assert()
        .success();
    let b = json_of(&["breakeven", "--from", &p("v.json"), "--from", &p("d.json")]);
    let r = &b["rows"][0];
    vb().args([
        "report",
        &p("x.json"),
        &p("v.json"),
        &p("d.json"),
        "-o",
        &p("out"),
    ])
    .assert()
    .success();
    let md = std::fs::read_to_string(dir.path().join("out/report.md")).unwrap();
    // report's break-even row: | T_verify | source | cycle | tau* | as breakeven's
    let want = format!(
        "| {:.2} | modeled | {:.2} | {:.3} |",
        num(&r["verify_ms"]["value"]),
        num(&r["cycle_ms"]),
        num(&r["breakeven_accept_length"])
    );
    assert!(md.contains(&want), "report.md lacks {want:?}\n{md}");
    assert_eq!(b["inputs"]["draft_ms"]["origin"], "modeled", "{b}");
    // the answer first: the first section after the title is explain's
    let first = md.lines().find(|l| l.starts_with("## ")).unwrap();
    assert_eq!(first, "## The answer: explain (x.json)");
    for t in [
        "### What would change it",
        "| with a CUDA graph |",
        "### Next",
    ] {
        assert!(md.contains(t), "report.md lacks {t:?}");
    }
}
