//! End-to-end test of the report's break-even inputs (issue 15, item 6): only full-mode verify
//! records (collectives and compute) are compared with a decode step; without one the report
//! says why there is no break-even. Through the cost model: no GPU needed.

use crate::common;
use common::vb;

#[test]
fn a_collectives_only_verify_is_not_compared_with_a_full_decode() {
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
    assert!(
        md.contains("Not drawn: the verify records hold no full run"),
        "{md}"
    );
    assert!(!md.contains("beats plain decoding"), "{md}");
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
}
