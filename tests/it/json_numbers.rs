//! Every figure of every `--format json` output is a JSON number or field, never carried only
//! inside a string: each command that writes JSON runs here (the cost model and the sample
//! files of tests/data stand in for GPUs and servers) and its output is walked for string
//! values that are data written as text: a number (`"43008"`, `"12.5 us"`, `"122x200us"`) or
//! a count of ops (`"123 all_reduce 21504 bf16 + 1 all_gather 245760 bf16"`). Sentences that
//! explain (notes, diagnoses, reasons) may quote figures the fields already hold; they are not
//! data strings and do not match. Genuine strings that look like numbers are allowed by their
//! key: the command line as given, a process's environment, hashes, versions.

use std::path::{Path, PathBuf};

use crate::common::vb;

fn data(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(p)
}

/// Keys whose strings are what they are (an argument as typed, a hash, a version, a process's
/// environment as it holds it: `inspect --pid` of this test process also lists the commands
/// other tests have started, with whatever settings they gave them).
const GENUINE: &[&str] = &[
    "command_line",
    "env",
    "schedule_hash",
    "git_commit",
    "tool_version",
    "version",
    "nccl_version",
    "driver",
];

/// Whether a string is data written as text.
fn data_string(s: &str) -> bool {
    static RE: std::sync::OnceLock<Vec<regex::Regex>> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        [
            // a number
            r"^-?[\d,]+(\.\d+)?([eE][-+]?\d+)?$",
            // a number with a unit
            r"^-?[\d,.]+ ?(us|ms|s|B|KB|MB|GB|KiB|MiB|GiB|GB/s|%|x)$",
            // counts of ops, with or without sizes: `123 all_reduce + 1 all_gather`
            r"^\d+ [a-z_]+( [\d,]+ [a-z0-9]+)?( \+ \d+ [a-z_]+( [\d,]+ [a-z0-9]+)?)*$",
            // COUNTxTIME
            r"^\d+x[\d.]+ ?(us|ms)$",
        ]
        .iter()
        .map(|p| regex::Regex::new(p).unwrap())
        .collect()
    })
    .iter()
    .any(|r| r.is_match(s.trim()))
}

/// The paths (`result.data.step.pattern`) and values of every data string under `v`.
fn hidden_numbers(v: &serde_json::Value, path: &str, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                if !GENUINE.contains(&k.as_str()) {
                    hidden_numbers(x, &format!("{path}.{k}"), out);
                }
            }
        }
        serde_json::Value::Array(a) => {
            for x in a {
                hidden_numbers(x, &format!("{path}[]"), out);
            }
        }
        serde_json::Value::String(s) if data_string(s) => out.push(format!("{path} = {s:?}")),
        _ => {}
    }
}

#[test]
fn the_detector_finds_data_strings_and_leaves_sentences() {
    for s in [
        "43008",
        "1,234.5",
        "12.5 us",
        "43,008 B",
        "122x200us",
        "123 all_reduce + 1 all_gather",
        "123 all_reduce 21504 bf16 + 1 all_gather 245760 bf16",
        "5 send_recv",
    ] {
        assert!(data_string(s), "{s}");
    }
    for s in [
        "kimi-k2.5",
        "bf16",
        "2.28.3+cuda13.0",
        "0x55e290bd32d0",
        "p01-ALGO-Tree",
        "rank 0: no NCCL kernels in the trace (a single rank launches none for an all-reduce)",
        "period of the collective sequence: 123 all_reduce + 1 all_gather",
    ] {
        assert!(!data_string(s), "{s}");
    }
    let mut out = vec![];
    hidden_numbers(
        &serde_json::json!({"a": {"step": "2 all_reduce 21504 bf16"}, "command_line": ["-n", "5"],
            "b": [{"c": "12 us"}]}),
        "",
        &mut out,
    );
    assert_eq!(
        out,
        [
            ".a.step = \"2 all_reduce 21504 bf16\"",
            ".b[].c = \"12 us\""
        ]
    );
}

#[test]
fn no_json_output_of_any_command_hides_a_number_in_a_string() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = |args: &[&str]| -> serde_json::Value {
        let out = vb().current_dir(d).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: not one JSON document: {e}"))
    };
    let s = |p: PathBuf| p.to_str().unwrap().to_string();
    // two verify exports to compare and to price
    for (name, graph) in [("v.json", "both"), ("e.json", "off")] {
        vb().current_dir(d)
            .args([
                "verify",
                "--backend",
                "model",
                "--gpus",
                "8",
                "-n",
                "5",
                "-w",
                "1",
            ])
            .args(["--graph", graph, "-q", "--export-json", name])
            .assert()
            .success();
    }
    // a Mixtral config under a model_type the table lacks (renamed here on purpose)
    let mut c: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(data("configs/mistralai--Mixtral-8x7B-v0.1_config.json")).unwrap(),
    )
    .unwrap();
    c["model_type"] = "mixtral_renamed".into();
    std::fs::write(d.join("config.json"), c.to_string()).unwrap();
    let own_pid = std::process::id().to_string();
    // S02's two tables (2 x RTX 2080 Ti) at every 16th size (8 x 16^k B, and the 0 B rows),
    // the header's step 16 to match: 13 sizes instead of 54, so that the leave-one-size-out
    // fits of `model fit` and `model validate` take a second in a test build, not a minute.
    // Their JSON has the same fields as for the whole file (the same paths, of the same
    // types, when this was written), so no field is left unchecked.
    let whole = std::fs::read_to_string(data(
        "public-nccl/S02_anthonyhoo_2x2080ti_pcie3_switch_nop2p.txt",
    ))
    .unwrap();
    let kept = |l: &&str| match l.split_whitespace().next().map(str::parse::<u64>) {
        Some(Ok(b)) => {
            b == 0 || b % 8 == 0 && (b / 8).is_power_of_two() && (b / 8).trailing_zeros() % 4 == 0
        }
        _ => true,
    };
    let cut: Vec<String> = whole
        .lines()
        .filter(kept)
        .map(|l| l.replace("step: 2(factor)", "step: 16(factor)"))
        .collect();
    assert_eq!(cut.iter().filter(|l| l.contains(" float ")).count(), 15);
    std::fs::write(d.join("s02.txt"), cut.join("\n")).unwrap();
    let nccl_tests = "s02.txt".to_string();
    let commands: Vec<Vec<String>> = [
        vec!["plan", "--format", "json"],
        vec!["plan", "--model-config", "config.json", "--format", "json"],
        vec![
            "verify",
            "--backend",
            "model",
            "--gpus",
            "8",
            "-n",
            "5",
            "-w",
            "1",
            "--format",
            "json",
        ],
        vec![
            "collective",
            "--backend",
            "model",
            "--gpus",
            "8",
            "-b",
            "8K",
            "-e",
            "64K",
            "--format",
            "json",
        ],
        vec!["compare", "v.json", "e.json", "--format", "json"],
        vec![
            "breakeven",
            "--decode-ms",
            "20",
            "--verify-ms",
            "25",
            "--draft-ms",
            "2",
            "--draft-steps",
            "3",
            "--accept-length",
            "2.5",
            "--format",
            "json",
        ],
        vec![
            "breakeven",
            "--from",
            "v.json",
            "--decode-ms",
            "20",
            "--draft-ms",
            "2",
            "--draft-steps",
            "3",
            "--accept-length",
            "2.5",
            "--format",
            "json",
        ],
        vec![
            "explain",
            "--verify-ms",
            "25",
            "--decode-ms",
            "20",
            "--format",
            "json",
        ],
        vec!["env", "--format", "json"],
        vec!["inspect", "--pid", &own_pid, "--format", "json"],
        vec![
            "sweep",
            "--backend",
            "model",
            "--gpus",
            "8",
            "-L",
            "NCCL_PROTO=LL,Simple",
            "--results",
            "r.jsonl",
            "--format",
            "json",
        ],
        vec![
            "model",
            "validate",
            "--nccl-tests",
            &nccl_tests,
            "--format",
            "json",
        ],
        vec![
            "model",
            "fit",
            "--nccl-tests",
            &nccl_tests,
            "-o",
            "fit.json",
            "--format",
            "json",
        ],
    ]
    .iter()
    .map(|a| a.iter().map(|x| x.to_string()).collect())
    .chain([
        vec![
            "trace".into(),
            s(data("traces/kimi-tp1-world1-eager-rank-0.trace.json.gz")),
            "--format".into(),
            "json".into(),
        ],
        vec![
            "trace".into(),
            s(data("traces/hta-sampled")),
            "--format".into(),
            "json".into(),
        ],
        vec![
            "trace".into(),
            s(data(
                "nccl-coll-public/pytorch-torchtitan-issue1369_tp2.log",
            )),
            "--format".into(),
            "json".into(),
        ],
        // explain with evidence: what a profiler showed and a real NCCL INFO log (a training
        // trace or one rank's is refused as a verify's, so no trace here)
        vec![
            "explain".into(),
            "--verify-ms".into(),
            "25".into(),
            "--decode-ms".into(),
            "20".into(),
            "--observed".into(),
            "122x0.2ms".into(),
            "--nccl-log".into(),
            s(data("nccl-2.28.3-h200x2-procs-default.log")),
            "--format".into(),
            "json".into(),
        ],
    ])
    .collect();
    let mut found = vec![];
    for args in &commands {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let v = run(&a);
        let mut out = vec![];
        hidden_numbers(&v, "", &mut out);
        found.extend(out.into_iter().map(|o| format!("{} {}: {o}", a[0], a[1])));
    }
    assert!(
        found.is_empty(),
        "numbers carried only in strings:\n{}",
        found.join("\n")
    );
}
