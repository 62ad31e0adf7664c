//! End-to-end tests of the report's break-even inputs: a full-mode verify record (collectives
//! and compute) is compared with a decode step as the verify's time; a collectives-only one
//! only as a lower bound, marked so, in `report` and `breakeven` alike. Through the cost
//! model: no GPU needed.

use crate::common;
use common::vb;

#[test]
fn a_collectives_only_verify_is_shown_only_as_a_bound_in_report_and_breakeven() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let p = |n: &str| d.join(n).to_str().unwrap().to_string();
    vb().args([
        "verify",
        "--backend",
        "model",
        "--tp",
        "2",
        "--mode",
        "comm",
        "--export-json",
        &p("comm.json"),
    ])
    .assert()
    .success();
    vb().args([
        "verify",
        "--backend",
        "model",
        "--tp",
        "2",
        "--tokens",
        "1",
        "--phase",
        "decode",
        "--mode",
        "full",
        "--export-json",
        &p("decode.json"),
    ])
    .assert()
    .success();
    vb().args([
        "report",
        &p("comm.json"),
        &p("decode.json"),
        "-o",
        &p("rep"),
    ])
    .assert()
    .success();
    let md = std::fs::read_to_string(d.join("rep/report.md")).unwrap();
    // the row's origin column says bound; every tokens/s cell is an upper bound, none bold
    let row = md
        .lines()
        .find(|l| l.contains("| bound |"))
        .unwrap_or_else(|| panic!("no bound row: {md}"));
    assert!(row.starts_with('|'), "{row}");
    assert!(
        md.contains("*bound*: T_verify is a part of the verify only, its other part is missing"),
        "{md}"
    );
    assert!(md.contains("| <="), "{md}");
    assert!(
        !md.contains("| **"),
        "no bound cell is shown as a gain: {md}"
    );
    assert!(md.contains("lower bound, modeled (comm.json"), "{md}");
    // breakeven, given the same record, follows the same rule
    let out = vb()
        .args([
            "breakeven",
            "--from",
            &p("comm.json"),
            "--from",
            &p("decode.json"),
        ])
        .args(["--accept-length", "1.5"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    let row = text
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("bound"))
        .unwrap_or_else(|| panic!("no bound row: {text}"));
    // tau* a lower bound, tokens/s and speedup upper bounds, no '*' (beats) mark
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert!(cells[3].starts_with(">="), "{row}");
    assert!(
        cells[5].starts_with("<=") && cells[6].starts_with("<="),
        "{row}"
    );
    assert!(!row.ends_with('*'), "{row}");
    assert!(text.contains("never a measured speedup"), "{text}");
    // a collectives-only decode record is refused by both: a decode time below the real one
    // would overstate what speculation gains
    vb().args([
        "verify",
        "--backend",
        "model",
        "--tp",
        "2",
        "--tokens",
        "1",
        "--phase",
        "decode",
        "--mode",
        "comm",
        "--export-json",
        &p("decode-comm.json"),
    ])
    .assert()
    .success();
    vb().args([
        "breakeven",
        "--from",
        &p("comm.json"),
        "--from",
        &p("decode-comm.json"),
    ])
    .assert()
    .code(2)
    .stderr(predicates::str::contains(
        "the decode time is only a part of the forward",
    ));
    // with a full verify record the break-even is drawn from it
    vb().args([
        "verify",
        "--backend",
        "model",
        "--tp",
        "2",
        "--mode",
        "comm,full",
        "--export-json",
        &p("full.json"),
    ])
    .assert()
    .success();
    vb().args([
        "report",
        &p("full.json"),
        &p("decode.json"),
        "-o",
        &p("rep2"),
    ])
    .assert()
    .success();
    let md = std::fs::read_to_string(d.join("rep2/report.md")).unwrap();
    assert!(md.contains("beats plain decoding"), "{md}");
    // beside a whole verify, the collectives-only bound of comm.json adds nothing: left out
    vb().args([
        "report",
        &p("full.json"),
        &p("comm.json"),
        &p("decode.json"),
        "-o",
        &p("rep4"),
    ])
    .assert()
    .success();
    let md4 = std::fs::read_to_string(d.join("rep4/report.md")).unwrap();
    assert!(md4.contains("| T_verify |"), "{md4}");
    assert!(!md4.contains("lower bound"), "{md4}");
    assert!(!md4.contains("| bound |"), "{md4}");
    vb().args([
        "report",
        &p("full.json"),
        &p("decode-comm.json"),
        "-o",
        &p("rep3"),
    ])
    .assert()
    .success();
    let md3 = std::fs::read_to_string(d.join("rep3/report.md")).unwrap();
    assert!(md3.contains("no full-mode decode record"), "{md3}");
    assert!(!md3.contains("beats plain decoding"), "{md3}");
}
