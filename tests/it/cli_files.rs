//! End-to-end tests of the output files of every command (issue 15, items 1-4): every output
//! path is checked before the work starts; an output never replaces an input or another
//! output; a failed write leaves nothing behind and creates no folder; a sweep never appends to
//! a file that is not its own results file, and its default names never collide. Through the
//! cost model, the `--debug-mode` sweep and `model fit` on files: no GPU needed.

use crate::common;
use common::{listing, refused, refused_in, vb};

fn s(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

/// A measured collective record to fit, written by the model backend and relabelled measured.
fn collective_file(dir: &std::path::Path) -> std::path::PathBuf {
    let p = dir.join("coll.json");
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
        "-f",
        "4",
        "--export-json",
        s(&p),
    ])
    .assert()
    .success();
    let t = std::fs::read_to_string(&p)
        .unwrap()
        .replace("\"modeled\"", "\"measured\"");
    std::fs::write(&p, t).unwrap();
    p
}

#[test]
fn sweep_refuses_to_append_to_a_file_that_is_not_its_results_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // a verify record
    let verify = d.join("verify.json");
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
    // a text file
    let text = d.join("notes.json");
    std::fs::write(&text, "hello\nworld\n").unwrap();
    // the sweep of another workload
    let other = d.join("other.jsonl");
    vb().args([
        "sweep",
        "--debug-mode",
        "--tp",
        "2",
        "-L",
        "NCCL_PROTO=LL",
        "--results",
        s(&other),
        "-q",
    ])
    .assert()
    .success();
    let before: Vec<(std::path::PathBuf, Vec<u8>)> = [&verify, &text, &other]
        .iter()
        .map(|p| (p.to_path_buf(), std::fs::read(p).unwrap()))
        .collect();
    let names = listing(d);
    for (f, why) in [
        (&verify, "not a sweep results file"),
        (&text, "not a sweep results file"),
        (&other, "another workload"),
    ] {
        refused(
            &[
                "sweep",
                "--debug-mode",
                "--tp",
                "2",
                "--tokens",
                "5",
                "-L",
                "NCCL_PROTO=LL",
                "--results",
                s(f),
            ],
            &["--results", s(f), why, "--resume"],
        );
    }
    // --resume of a text file is refused too (it used to warn and append)
    refused(
        &[
            "sweep",
            "--debug-mode",
            "--tp",
            "2",
            "-L",
            "NCCL_PROTO=LL",
            "--resume",
            s(&text),
        ],
        &[s(&text), "not a JSON record"],
    );
    for (p, b) in before {
        assert_eq!(std::fs::read(&p).unwrap(), b, "{} changed", p.display());
    }
    assert_eq!(listing(d), names, "nothing new in the folder");
    // the same workload's file is appended to, as before
    vb().args([
        "sweep",
        "--debug-mode",
        "--tp",
        "2",
        "-L",
        "NCCL_PROTO=Simple",
        "--results",
        s(&other),
        "-q",
    ])
    .assert()
    .success();
}

#[test]
fn default_sweep_names_are_unique_and_never_reuse_a_logs_folder() {
    let dir = tempfile::tempdir().unwrap();
    let run = |model: &str| {
        vb().current_dir(dir.path())
            .args([
                "sweep",
                "--debug-mode",
                "--tp",
                "2",
                "--model",
                model,
                "-L",
                "NCCL_PROTO=LL",
                "-q",
            ])
            .assert()
            .success();
    };
    run("kimi-k2.5");
    run("llama-3.1-70b");
    run("kimi-k2.5");
    let names = listing(dir.path());
    let results: Vec<&String> = names.iter().filter(|n| n.ends_with(".jsonl")).collect();
    let logs: Vec<&String> = names.iter().filter(|n| n.ends_with(".logs")).collect();
    assert_eq!(results.len(), 3, "{names:?}");
    assert_eq!(logs.len(), 3, "{names:?}");
    // a new --results whose logs folder exists already is refused
    std::fs::create_dir(dir.path().join("fresh.logs")).unwrap();
    refused_in(
        Some(dir.path()),
        &[],
        &[
            "sweep",
            "--debug-mode",
            "--tp",
            "2",
            "-L",
            "NCCL_PROTO=LL",
            "--results",
            "fresh.jsonl",
        ],
        &["fresh.logs", "already exists", "--log-dir"],
    );
    assert!(!dir.path().join("fresh.jsonl").exists());
}

#[test]
fn outputs_never_overwrite_inputs_or_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let coll = collective_file(d);
    let before = std::fs::read(&coll).unwrap();
    refused(
        &["model", "fit", s(&coll), "-o", s(&coll)],
        &["-o/--output", s(&coll), "also an input"],
    );
    // the same file by another spelling
    let other_spelling = d.join(".").join("coll.json");
    refused(
        &["model", "fit", s(&coll), "-o", s(&other_spelling)],
        &["also an input"],
    );
    assert_eq!(std::fs::read(&coll).unwrap(), before);
    let out = d.join("out.json");
    refused(
        &[
            "verify",
            "--backend",
            "model",
            "--tp",
            "2",
            "--export-json",
            s(&out),
            "--export-csv",
            s(&out),
        ],
        &["--export-csv", "also given to --export-json"],
    );
    refused(
        &[
            "sweep",
            "--debug-mode",
            "--tp",
            "2",
            "-L",
            "NCCL_PROTO=LL",
            "--results",
            s(&out),
            "--export-table-csv",
            s(&out),
        ],
        &["--export-table-csv", "also given to --results"],
    );
    assert!(!out.exists());
}

#[test]
fn unwritable_outputs_fail_before_the_work_and_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let adir = d.join("adir.json");
    std::fs::create_dir(&adir).unwrap();
    let missing = d.join("nonexistent").join("x.json");
    for (args, wants) in [
        (
            vec![
                "verify",
                "--backend",
                "model",
                "--tp",
                "2",
                "--export-json",
                s(&adir),
            ],
            vec!["--export-json", "is a directory"],
        ),
        (
            vec![
                "collective",
                "--backend",
                "model",
                "--gpus",
                "2",
                "--export-csv",
                s(&missing),
            ],
            vec!["--export-csv", "does not exist"],
        ),
        (
            vec![
                "verify",
                "--backend",
                "model",
                "--tp",
                "2",
                "--export-json",
                "/proc/x.json",
            ],
            vec![
                "--export-json",
                "/proc/x.json",
                "cannot write into folder '/proc'",
            ],
        ),
        (
            vec![
                "sweep",
                "--debug-mode",
                "--tp",
                "2",
                "-L",
                "NCCL_PROTO=LL",
                "--results",
                "r.jsonl",
                "--log-dir",
                "/proc/logs",
            ],
            vec!["--log-dir", "/proc/logs"],
        ),
        (
            vec![
                "sweep",
                "--debug-mode",
                "--tp",
                "2",
                "-L",
                "NCCL_PROTO=LL",
                "--results",
                "r.jsonl",
                "--export-json",
                "/proc/x.json",
            ],
            vec!["--export-json", "/proc/x.json"],
        ),
        (
            vec![
                "sweep",
                "--debug-mode",
                "--tp",
                "2",
                "-L",
                "NCCL_PROTO=LL",
                "--results",
                "r.jsonl",
                "--export-table-csv",
                s(&missing),
            ],
            vec!["--export-table-csv", "does not exist"],
        ),
        (
            vec!["report", "results.json", "-o", s(&missing)],
            vec!["-o/--out", "does not exist"],
        ),
    ] {
        let before = listing(d);
        refused_in(Some(d), &[], &args, &wants);
        assert_eq!(listing(d), before, "{args:?} left something behind");
        assert_eq!(listing(&adir), Vec::<String>::new());
        assert!(
            !missing.parent().unwrap().exists(),
            "{args:?} created a folder"
        );
    }
    // model fit into a directory leaves no temp file
    let coll = collective_file(d);
    let before = listing(d);
    refused(
        &["model", "fit", s(&coll), "-o", s(&adir)],
        &["-o/--output", "is a directory"],
    );
    assert_eq!(listing(d), before);
    assert_eq!(listing(&adir), Vec::<String>::new());
}
