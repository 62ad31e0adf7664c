//! End-to-end tests of `verifybench compare` through the real binary, and of the record that
//! scripts/torch_baseline.py writes (its pure parts run with plain python3, no torch).

use std::path::{Path, PathBuf};
use std::process::Command as Process;

use predicates::prelude::*;

use verifybench::measure::Summary;
use verifybench::model::{self, CollectiveKind, Phase, Schedule};
use verifybench::record::{
    read_records, Body, CollectiveResult, Mode, Provenance, Record, RecordedWorkload, Source,
    VerifyRun,
};
use verifybench::util::now_utc;

use crate::common;
use common::vb;

fn kimi(tp: u64) -> Schedule {
    common::kimi(tp, 3, Phase::Verify)
}

fn run(graph: bool, median: f64) -> VerifyRun {
    let samples: Vec<f64> = (0..100).map(|i| median - 5.0 + (i % 11) as f64).collect();
    let s = Summary::from_samples(&samples).unwrap();
    VerifyRun {
        graph,
        mode: Mode::Comm,
        per_collective_us: s.median_us / 124.0,
        per_verify: s,
        breakdown: vec![],
        wrong: 0,
        iterations: 100,
        warmup: 10,
        in_collective: None,
    }
}

fn verify_record(backend: &str, tp: u64, eager: f64, graph: f64) -> Record {
    common::verify_record(
        Source::Measured,
        backend,
        &kimi(tp),
        vec![run(false, eager), run(true, graph)],
    )
}

fn write(dir: &Path, name: &str, r: &Record) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, r.to_json_pretty()).unwrap();
    p
}

fn stderr_one_line(out: &std::process::Output) -> String {
    let e = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
    e
}

#[test]
fn table_shows_both_files_with_ratios_and_notes() {
    let d = tempfile::tempdir().unwrap();
    let a = write(d.path(), "vb.json", &verify_record("nccl", 2, 600.0, 300.0));
    let b = write(
        d.path(),
        "torch.json",
        &verify_record("torch", 2, 1500.0, 650.0),
    );
    vb().arg("compare")
        .args([&a, &b])
        .assert()
        .success()
        .stdout(predicate::str::contains("kimi-k2.5 verify, TP=2"))
        .stdout(predicate::str::contains("1 (base)"))
        .stdout(predicate::str::contains("2.500 ±"))
        .stdout(predicate::str::contains("2.167 ±"))
        .stdout(predicate::str::contains("Where the difference comes from"))
        .stdout(predicate::str::contains("one standard error"));
}

#[test]
fn json_and_markdown_formats() {
    let d = tempfile::tempdir().unwrap();
    let a = write(d.path(), "vb.json", &verify_record("nccl", 2, 600.0, 300.0));
    let b = write(
        d.path(),
        "torch.json",
        &verify_record("torch", 2, 1200.0, 600.0),
    );
    let out = vb()
        .args(["compare", "--format", "json"])
        .args([&a, &b])
        .output()
        .unwrap();
    assert!(out.status.success());
    let rec: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rec["result"]["name"], "compare", "a record of kind compare");
    let v = &rec["result"]["data"];
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[0]["ratio"], 1.0);
    let torch_graph = rows
        .iter()
        .find(|r| r["graph"] == true && r["label"] == "torch.json")
        .unwrap();
    assert!((torch_graph["ratio"].as_f64().unwrap() - 2.0).abs() < 1e-9);
    assert!(torch_graph["ratio_err"].as_f64().unwrap() > 0.0);
    assert_eq!(v["entries"][1]["backend"], "torch");
    vb().args(["compare", "--format", "markdown"])
        .args([&a, &b])
        .assert()
        .success()
        .stdout(predicate::str::contains("| run | file | backend"))
        .stdout(predicate::str::contains(
            "| comm graph | torch.json | torch | measured",
        ));
}

#[test]
fn different_workloads_are_refused_without_force() {
    let d = tempfile::tempdir().unwrap();
    let a = write(
        d.path(),
        "tp2.json",
        &verify_record("nccl", 2, 600.0, 300.0),
    );
    let b = write(
        d.path(),
        "tp8.json",
        &verify_record("nccl", 8, 900.0, 400.0),
    );
    let out = vb().arg("compare").args([&a, &b]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = stderr_one_line(&out);
    assert!(
        e.contains("different workload") && e.contains("--force"),
        "{e}"
    );
    vb().args(["compare", "--force"])
        .args([&a, &b])
        .assert()
        .success()
        .stdout(predicate::str::contains("different workloads (--force)"));
}

#[test]
fn bad_files_exit_2_with_one_line() {
    let d = tempfile::tempdir().unwrap();
    let good = write(d.path(), "vb.json", &verify_record("nccl", 2, 600.0, 300.0));
    let missing = d.path().join("nope.json");
    let coll = write(
        d.path(),
        "coll.json",
        &Record::new(
            Source::Measured,
            Provenance::here("nccl", now_utc()),
            Body::Collective(CollectiveResult {
                op: CollectiveKind::AllReduce,
                dtype: model::DType::Bf16,
                nranks: 2,
                rows: vec![],
            }),
        ),
    );
    let old = d.path().join("old.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&verify_record("nccl", 2, 1.0, 1.0).to_json_pretty()).unwrap();
    v["schema_version"] = 99.into();
    std::fs::write(&old, v.to_string()).unwrap();
    let junk = d.path().join("junk.json");
    std::fs::write(&junk, "not json at all").unwrap();
    for (bad, says) in [
        (&missing, "cannot read"),
        (&coll, "'collective' record"),
        (&old, "schema_version 99"),
        (&junk, "not JSON"),
    ] {
        let out = vb().arg("compare").args([&good, bad]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", bad.display());
        let e = stderr_one_line(&out);
        assert!(e.contains(says), "{says}: {e}");
    }
    vb().arg("compare").assert().failure().code(2);
}

#[test]
fn committed_torch_fixture_is_a_valid_record() {
    let p =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/torch_baseline_dry_run.json");
    let recs = read_records(&p).unwrap();
    assert_eq!(recs.len(), 1);
    let r = &recs[0];
    assert_eq!(r.provenance.backend, "torch");
    assert_eq!(r.source, Source::Modeled, "a dry run is not a measurement");
    let Body::Verify(v) = &r.body else {
        panic!("kind {}", r.body.kind())
    };
    assert_eq!(v.runs.len(), 2);
    assert!(v.runs.iter().all(|x| x.mode == Mode::Comm && x.wrong == 0));
    assert_eq!(v.workload.tp, 2);
}

// ----- scripts/torch_baseline.py, pure parts (python3 only; no torch) -----

fn python() -> Option<&'static str> {
    let ok = Process::new("python3")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        eprintln!("python3 not found: skipping the torch_baseline.py checks");
    }
    ok.then_some("python3")
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/torch_baseline.py")
}

fn plan_file(dir: &Path, tp: u64) -> PathBuf {
    let p = dir.join(format!("plan{tp}.json"));
    std::fs::write(&p, serde_json::to_string_pretty(&kimi(tp)).unwrap()).unwrap();
    p
}

#[test]
fn script_self_test_passes() {
    let Some(py) = python() else { return };
    let out = Process::new(py)
        .arg(script())
        .arg("--self-test")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn script_workload_and_hash_match_verifybench() {
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    for tp in [2, 8] {
        let plan = plan_file(d.path(), tp);
        let out = Process::new(py)
            .arg(script())
            .args(["--print-workload", "--schedule"])
            .arg(&plan)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let want = serde_json::to_value(RecordedWorkload::of(&kimi(tp))).unwrap();
        assert_eq!(got, want, "tp {tp}");
    }
}

#[test]
fn script_statistics_match_summary() {
    let Some(py) = python() else { return };
    let mut far: Vec<f64> = (0..100).map(|i| 10.0 + (i % 5) as f64 * 0.1).collect();
    far.push(50.0);
    let sets: Vec<Vec<f64>> = vec![
        vec![5.0, 1.0, 3.0, 2.0, 4.0],
        vec![1.0, 2.0, 3.0, 10.0],
        far,
        [vec![7.0; 50], vec![9.0]].concat(),
        (0..1000)
            .map(|i| 400.0 + ((i * 7919) % 113) as f64 / 7.0)
            .collect(),
    ];
    for s in sets {
        let text: Vec<String> = s.iter().map(|x| format!("{x:?}")).collect();
        let mut child = Process::new(py)
            .arg(script())
            .arg("--summarize")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.join(" ").as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        let got: Summary = serde_json::from_slice(&out.stdout).unwrap();
        let want = Summary::from_samples(&s).unwrap();
        assert_eq!((got.n, got.outliers), (want.n, want.outliers));
        for (g, w) in [
            (got.median_us, want.median_us),
            (got.mean_us, want.mean_us),
            (got.stddev_us, want.stddev_us),
            (got.min_us, want.min_us),
            (got.max_us, want.max_us),
            (got.p99_us, want.p99_us),
        ] {
            assert!((g - w).abs() <= 1e-9 * w.abs().max(1.0), "{g} vs {w}");
        }
    }
}

#[test]
fn script_dry_run_record_is_read_and_compared() {
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    let plan = plan_file(d.path(), 2);
    let out_file = d.path().join("torch.json");
    let out = Process::new(py)
        .arg(script())
        .args(["--dry-run", "-n", "30", "-w", "3", "--schedule"])
        .arg(&plan)
        .arg("--out")
        .arg(&out_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recs = read_records(&out_file).unwrap();
    let Body::Verify(v) = &recs[0].body else {
        panic!("not a verify record")
    };
    assert_eq!(v.workload, RecordedWorkload::of(&kimi(2)));
    assert_eq!((v.runs[0].iterations, v.runs[0].warmup), (30, 3));
    assert_eq!(recs[0].provenance.backend, "torch");
    // Same schedule as verifybench's own record: compare accepts it without --force.
    let vbf = write(d.path(), "vb.json", &verify_record("nccl", 2, 600.0, 300.0));
    vb().arg("compare")
        .args([&vbf, &out_file])
        .assert()
        .success()
        .stdout(predicate::str::contains("torch.json"));
}

#[test]
fn script_bad_input_exits_2() {
    let Some(py) = python() else { return };
    let d = tempfile::tempdir().unwrap();
    let junk = d.path().join("junk.json");
    std::fs::write(&junk, "{\"ops\": 3}").unwrap();
    for args in [
        vec![
            "--schedule".to_string(),
            d.path().join("none.json").display().to_string(),
        ],
        vec!["--schedule".to_string(), junk.display().to_string()],
        vec!["-n".to_string(), "0".to_string(), "--self-test".to_string()],
    ] {
        let out = Process::new(py).arg(script()).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(
            e.starts_with("error: ") && e.trim_end().lines().count() == 1,
            "{e}"
        );
    }
}

/// nccl-tests 2.19's table layout (util.cu), numbers written for this test.
fn nccl_tests_output(graph: u32, us_8k: f64, us_43k: f64) -> String {
    format!(
        "\
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 2 minBytes 8192 maxBytes 65536 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: {graph} unalign: 0
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
        8192          4096  bfloat16     sum      -1  {us_8k:7.2}    1.26    1.26       0     6.42    1.28    1.28       0
       43008         21504  bfloat16     sum      -1  {us_43k:7.2}    6.06    6.06       0     7.02    6.13    6.13       0
# Out of bounds values : 0 OK
"
    )
}

#[test]
fn nccl_tests_side_by_side_gives_the_ratio_per_size_and_mode() {
    let dir = tempfile::tempdir().unwrap();
    let vbj = dir.path().join("vb.json");
    vb().args([
        "collective",
        "--backend",
        "model",
        "--gpus",
        "2",
        "-b",
        "8K",
        "-e",
        "8K",
    ])
    .args(["--sizes", "43008", "-d", "bf16", "--export-json"])
    .arg(&vbj)
    .assert()
    .success();
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&vbj).unwrap()).unwrap();
    let rec = if rec.is_array() { rec[0].clone() } else { rec };
    let time = |size: u64, mode: &str| -> f64 {
        rec["result"]["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["size_bytes"] == size)
            .unwrap()[mode]["time_us"]
            .as_f64()
            .unwrap()
    };
    let g = dir.path().join("graph.txt");
    let e = dir.path().join("eager.txt");
    std::fs::write(&g, nccl_tests_output(20, 6.5, 7.1)).unwrap();
    std::fs::write(&e, nccl_tests_output(0, 9.5, 10.25)).unwrap();
    let out = vb()
        .args(["compare", "--nccl-tests"])
        .arg(&g)
        .arg("--nccl-tests")
        .arg(&e)
        .arg(&vbj)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    for (size, mode, nt) in [
        (8192, "graph", 6.5),
        (43008, "graph", 7.1),
        (43008, "eager", 10.25),
    ] {
        let want = time(size, mode) / nt;
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with(&size.to_string()) && l.contains(mode))
            .unwrap_or_else(|| panic!("{size} {mode}: {out}"));
        assert!(
            line.trim_end().ends_with(&format!("{want:.3}")),
            "{line} vs {want}"
        );
    }
    // Not nccl-tests output, or no collective record: exit 2, one line naming the file.
    std::fs::write(dir.path().join("x.txt"), "hello\n").unwrap();
    vb().args(["compare", "--nccl-tests"])
        .arg(dir.path().join("x.txt"))
        .arg(&vbj)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("x.txt").and(predicate::str::contains("nThread")));
}
