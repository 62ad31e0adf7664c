//! End-to-end tests of messages that must read as sentences and say what a file is (issue 15,
//! item 16). Through the cost model, the `--debug-mode` sweep and pure commands: no GPU needed.

use predicates::prelude::*;

use crate::common;
use common::{refused, vb};

fn s(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn messages_name_the_workload_and_the_file_kind() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // a sweep of tp 2, resumed with another workload: the phase is a word, not a Rust name
    let sweep = d.join("s.jsonl");
    vb().args([
        "sweep",
        "--debug-mode",
        "--tp",
        "2",
        "-L",
        "NCCL_PROTO=LL,Simple",
        "--rounds",
        "1",
        "--results",
        s(&sweep),
        "-q",
    ])
    .assert()
    .success();
    let line = refused(
        &[
            "sweep",
            "--debug-mode",
            "--tp",
            "4",
            "-L",
            "NCCL_PROTO=LL",
            "--resume",
            s(&sweep),
        ],
        &["kimi-k2.5 verify tp 2"],
    );
    assert!(!line.contains("Verify"), "{line}");
    // breakeven given a sweep file counts the kind once
    let line = refused(
        &[
            "breakeven",
            "--decode-ms",
            "12",
            "--draft-steps",
            "2",
            "--accept-length",
            "2",
            "--from",
            s(&sweep),
        ],
        &["3 'sweep_point' records"],
    );
    assert_eq!(line.matches("sweep_point").count(), 1, "{line}");
    // --resume of a verify export says what the file is, not a parser message
    let verify = d.join("v.json");
    vb().args([
        "verify",
        "--backend",
        "model",
        "--tp",
        "2",
        "--export-json",
        s(&verify),
    ])
    .assert()
    .success();
    let line = refused(
        &[
            "sweep",
            "--debug-mode",
            "--tp",
            "2",
            "-L",
            "NCCL_PROTO=LL",
            "--resume",
            s(&verify),
        ],
        &["'verify'", "not a sweep's results file"],
    );
    assert!(!line.contains("expected"), "{line}");
    // a model profile given where results are read
    let coll = d.join("c.json");
    vb().args([
        "collective",
        "--backend",
        "model",
        "--gpus",
        "2",
        "-b",
        "8K",
        "-e",
        "1M",
        "--export-json",
        s(&coll),
    ])
    .assert()
    .success();
    let t = std::fs::read_to_string(&coll)
        .unwrap()
        .replace("\"modeled\"", "\"measured\"");
    std::fs::write(&coll, t).unwrap();
    let prof = d.join("p.json");
    vb().args(["model", "fit", s(&coll), "-o", s(&prof), "-q"])
        .assert()
        .success();
    for args in [
        vec![
            "breakeven",
            "--decode-ms",
            "12",
            "--draft-steps",
            "2",
            "--accept-length",
            "2",
            "--from",
            s(&prof),
        ],
        vec!["compare", s(&prof)],
        vec!["model", "fit", s(&prof), "-o", s(&d.join("q.json"))],
    ] {
        let line = refused(&args, &["cost-model profile", "--profile"]);
        assert!(!line.contains("missing field"), "{line}");
    }
    // "for 1 token"
    vb().args(["plan", "--tokens", "1"])
        .assert()
        .success()
        .stdout(predicate::str::contains("for 1 tokens").not());
}
