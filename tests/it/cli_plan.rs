//! End-to-end tests of `verifybench plan` through the real binary.

use predicates::prelude::*;

use crate::common;
use common::vb;

fn plan_json(args: &[&str]) -> serde_json::Value {
    let out = vb()
        .args(["plan", "--format", "json"])
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

/// (all-reduce count, all-reduce bytes, all-gather count, all-gather bytes per rank)
fn collectives(v: &serde_json::Value) -> (usize, u64, usize, u64) {
    let ops = v["ops"].as_array().unwrap();
    let of = |k: &str| {
        let c: Vec<u64> = ops
            .iter()
            .filter(|o| o["op"] == "collective" && o["kind"] == k)
            .map(|o| o["bytes_per_rank"].as_u64().unwrap())
            .collect();
        assert!(c.windows(2).all(|w| w[0] == w[1]), "one size per kind");
        (c.len(), c.first().copied().unwrap_or(0))
    };
    let (ar, arb) = of("all_reduce");
    let (ag, agb) = of("all_gather");
    (ar, arb, ag, agb)
}

#[test]
fn kimi_tp8_acceptance_numbers() {
    let base = ["--model", "kimi-k2.5", "--tp", "8"];
    let v = plan_json(&[&base[..], &["--tokens", "3"]].concat());
    assert_eq!(collectives(&v), (123, 43008, 1, 122880));
    let v = plan_json(&[&base[..], &["--tokens", "4"]].concat());
    assert_eq!(collectives(&v), (123, 57344, 1, 163840));
    let v = plan_json(&[&base[..], &["--no-embedding-allreduce"]].concat());
    assert_eq!(collectives(&v).0, 122);
    let v = plan_json(&[&base[..], &["--logits", "none"]].concat());
    assert_eq!(collectives(&v).2, 0);
}

#[test]
fn table_output_shows_counts_and_gathered_bytes() {
    vb().args(["plan", "--model", "kimi-k2.5", "--tp", "8", "--tokens", "3"])
        .assert()
        .success()
        .stdout(predicate::str::contains("all_reduce"))
        .stdout(predicate::str::contains("123"))
        .stdout(predicate::str::contains("43,008"))
        .stdout(predicate::str::contains("983,040"))
        .stdout(predicate::str::contains("decode (T=1)"))
        .stdout(predicate::str::contains("EAGLE-3 draft step"));
}

#[test]
fn model_config_gives_the_same_schedule_as_the_preset() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("config.json");
    std::fs::write(&p, common::kimi_config_json(61)).unwrap();
    let path = p.to_str().unwrap();
    for tokens in ["3", "4"] {
        let from_cfg = plan_json(&["--model-config", path, "--tp", "8", "--tokens", tokens]);
        let preset = plan_json(&["--model", "kimi-k2.5", "--tp", "8", "--tokens", tokens]);
        assert_eq!(collectives(&from_cfg), collectives(&preset));
        assert_eq!(from_cfg["ops"], preset["ops"], "weights per op agree too");
    }
}

fn fails_with(args: &[&str], needle: &str) {
    vb().args(args)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(needle))
        .stderr(predicate::str::contains("panicked").not());
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    fails_with(&["plan", "--tp", "3"], "attention heads");
    fails_with(&["plan", "--tokens", "0"], "--tokens");
    fails_with(&["plan", "--model", "nope"], "kimi-k2.5, deepseek-v3");
    fails_with(
        &["plan", "--model-config", "/nonexistent/config.json"],
        "cannot read",
    );
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("config.json");
    std::fs::write(&bad, "{ this is not json").unwrap();
    fails_with(
        &["plan", "--model-config", bad.to_str().unwrap()],
        "is not JSON",
    );
    let mut v: serde_json::Value = serde_json::from_str(&common::kimi_config_json(61)).unwrap();
    v["text_config"]
        .as_object_mut()
        .unwrap()
        .remove("vocab_size");
    std::fs::write(&bad, v.to_string()).unwrap();
    let out = vb()
        .args(["plan", "--model-config", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("vocab_size") && err.contains("config.json"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

#[test]
fn tp_that_does_not_divide_vocab_or_intermediate() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("config.json");
    for (key, value, needle) in [
        ("vocab_size", 163_844, "vocabulary"),
        ("intermediate_size", 18_436, "intermediate size"),
        ("moe_intermediate_size", 2_052, "MoE intermediate size"),
    ] {
        let mut v: serde_json::Value = serde_json::from_str(&common::kimi_config_json(61)).unwrap();
        v["text_config"][key] = value.into();
        std::fs::write(&p, v.to_string()).unwrap();
        fails_with(
            &["plan", "--model-config", p.to_str().unwrap(), "--tp", "8"],
            needle,
        );
    }
}

#[test]
fn help_shows_examples() {
    vb().arg("--help")
        .assert()
        .success()
        .stdout(predicate::str::contains("Examples:"));
}

#[test]
fn a_closed_pipe_ends_quietly() {
    use std::io::Read;
    use std::process::{Command as P, Stdio};
    let mut child = P::new(assert_cmd::cargo::cargo_bin("verifybench"))
        .args(["plan", "--format", "json", "--model", "qwen3-235b-a22b"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // the JSON plan (67 KB) is larger than a pipe holds: read a little, then close our end
    // while the plan is still being written
    let mut out = child.stdout.take().unwrap();
    let mut buf = [0u8; 64];
    out.read_exact(&mut buf).unwrap();
    drop(out);
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
}
