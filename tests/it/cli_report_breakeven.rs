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
    // `verify` through the cost model at TP 2 with `flags`, its record written to `name`
    let verify = |flags: &[&str], name: &str| {
        vb().args(["verify", "--backend", "model", "--tp", "2"])
            .args(flags)
            .args(["--export-json", &p(name)])
            .assert()
            .success();
    };
    // `report` of the records `names` into the folder `out`: its report.md
    let report = |names: &[&str], out: &str| {
        vb().arg("report")
            .args(names.iter().map(|n| p(n)))
            .args(["-o", &p(out)])
            .assert()
            .success();
        std::fs::read_to_string(d.join(out).join("report.md")).unwrap()
    };
    verify(&["--mode", "comm"], "comm.json");
    verify(
        &["--tokens", "1", "--phase", "decode", "--mode", "full"],
        "decode.json",
    );
    let md = report(&["comm.json", "decode.json"], "rep");
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
    verify(
        &["--tokens", "1", "--phase", "decode", "--mode", "comm"],
        "decode-comm.json",
    );
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
    verify(&["--mode", "comm,full"], "full.json");
    let md = report(&["full.json", "decode.json"], "rep2");
    assert!(md.contains("beats plain decoding"), "{md}");
    // beside a whole verify, the collectives-only bound of comm.json adds nothing: left out
    let md4 = report(&["full.json", "comm.json", "decode.json"], "rep4");
    assert!(md4.contains("| T_verify |"), "{md4}");
    assert!(!md4.contains("lower bound"), "{md4}");
    assert!(!md4.contains("| bound |"), "{md4}");
    let md3 = report(&["full.json", "decode-comm.json"], "rep3");
    assert!(md3.contains("no full-mode decode record"), "{md3}");
    assert!(!md3.contains("beats plain decoding"), "{md3}");
}
