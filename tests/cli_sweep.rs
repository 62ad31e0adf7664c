//! End-to-end tests of `verifybench sweep` through the real binary. None needs a GPU:
//! `--debug-mode` fakes the points (synthetic records and NCCL 2.28 logs) to test the whole
//! pipeline; the fault tests start real `verify --backend model` children and make one point's
//! child exit or hang through VERIFYBENCH_SWEEP_EXTRA_ARGS (`--inject-fault`).

use std::path::Path;
use std::time::{Duration, Instant};

use predicates::prelude::*;

mod common;
use common::vb;

fn lines(p: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn point<'a>(v: &'a [serde_json::Value], id_prefix: &str) -> &'a serde_json::Value {
    v.iter()
        .map(|r| &r["result"]["data"])
        .find(|d| d["point_id"].as_str().unwrap().starts_with(id_prefix))
        .unwrap_or_else(|| panic!("no point {id_prefix}"))
}

#[test]
fn nothing_to_sweep_and_empty_lists_are_usage_errors() {
    vb().args(["sweep", "--tp", "2", "--debug-mode"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("nothing to sweep"));
    vb().args(["sweep", "--tp", "2", "--debug-mode", "-L", "NCCL_PROTO="])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("empty value"));
    vb().args(["sweep", "--tp", "2", "-L", "NCCL_PROTO"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("expected NAME=VALUE"));
    vb().args(["sweep", "--tp", "2", "-L", "NCCL_NVLS_ENABLE=1"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("never enables NVLink multicast"));
    vb().args(["sweep", "--tp", "2", "--preset", "nvlink"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unknown preset"));
}

#[test]
fn misspelt_variable_warns_and_runs_anyway() {
    let dir = tempfile::tempdir().unwrap();
    let res = dir.path().join("r.jsonl");
    vb().args([
        "sweep",
        "--debug-mode",
        "--tp",
        "2",
        "-n",
        "20",
        "-L",
        "NCCL_PRTO=LL",
    ])
    .arg("--results")
    .arg(&res)
    .assert()
    .success()
    .stderr(predicate::str::contains(
        "NCCL_PRTO is not a variable NCCL knows (did you mean NCCL_PROTO?)",
    ));
    let v = lines(&res);
    assert_eq!(v.len(), 2);
    assert_eq!(point(&v, "p01")["unknown_vars"][0], "NCCL_PRTO");
}

#[test]
fn debug_sweep_ranks_fails_global_tree_with_a_hint_and_exports() {
    let dir = tempfile::tempdir().unwrap();
    let res = dir.path().join("r.jsonl");
    let md = dir.path().join("t.md");
    let csv = dir.path().join("t.csv");
    let json = dir.path().join("v.json");
    let out = vb()
        .args(["sweep", "--debug-mode", "--tp", "2", "-n", "30"])
        .args(["-L", "NCCL_PROTO=LL,Simple", "-L", "NCCL_ALGO=Ring,Tree"])
        .args(["--set", "NCCL_ALGO=ring;allreduce:tree"])
        .arg("--results")
        .arg(&res)
        .arg("--export-table-markdown")
        .arg(&md)
        .arg("--export-table-csv")
        .arg(&csv)
        .arg("--export-json")
        .arg(&json)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("NCCL_DEBUG unset"), "{text}");
    assert!(
        text.contains("--set 'NCCL_ALGO=ring;allreduce:tree'"),
        "hint missing: {text}"
    );
    assert!(text.contains("Recommendation"), "{text}");
    let v = lines(&res);
    // Baseline + 2 x 3 cross product.
    assert_eq!(v.len(), 7);
    assert!(v
        .iter()
        .all(|r| r["kind"] == "other" && r["result"]["name"] == "sweep_point"));
    let tree = point(&v, "p02");
    assert_eq!(tree["overrides"][1][1], "Tree");
    assert_eq!(tree["status"], "failed");
    assert!(tree["reason"]
        .as_str()
        .unwrap()
        .contains("no algorithm/protocol available for function AllGather"));
    assert!(Path::new(tree["log_paths"][0].as_str().unwrap()).exists());
    let per_fn = point(&v, "p03");
    assert_eq!(per_fn["status"], "ok");
    assert_eq!(per_fn["effective"]["all_reduce"]["algo"], "TREE");
    assert_eq!(per_fn["effective"]["all_gather"]["algo"], "RING");
    assert_eq!(per_fn["env_check"]["status"], "ok");
    let md = std::fs::read_to_string(md).unwrap();
    assert!(md.contains("| rank |") && md.contains("failed"), "{md}");
    let csv = std::fs::read_to_string(csv).unwrap();
    assert_eq!(csv.lines().count(), 8);
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    assert_eq!(
        j.as_array().map(|a| a.len()),
        Some(5),
        "verify records of ok points"
    );
    // The ranking, its times and ratios must follow from the exported records, computed here
    // independently of the sweep's ranking code: rows in order of the graph median, each
    // ratio the point's median over the baseline's.
    let graph_median = |settings: &str| -> f64 {
        let want: Vec<(&str, &str)> = settings
            .split_whitespace()
            .filter(|s| *s != "(defaults)")
            .map(|kv| kv.split_once('=').unwrap())
            .collect();
        let rec = j
            .as_array()
            .unwrap()
            .iter()
            .find(|r| {
                let env = &r["provenance"]["workers"][0]["nccl_env"];
                ["NCCL_PROTO", "NCCL_ALGO"]
                    .iter()
                    .all(|k| env[*k].as_str() == want.iter().find(|(n, _)| n == k).map(|(_, v)| *v))
            })
            .unwrap_or_else(|| panic!("no exported record for {settings}"));
        rec["result"]["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["graph"] == true)
            .unwrap()["per_verify"]["median_us"]
            .as_f64()
            .unwrap()
    };
    let rows: Vec<Vec<String>> = csv::Reader::from_reader(csv.as_bytes())
        .records()
        .map(|r| r.unwrap().iter().map(String::from).collect())
        .collect();
    let ranked: Vec<&Vec<String>> = rows.iter().filter(|r| r[0] != "failed").collect();
    assert_eq!(ranked.len(), 5);
    let base = graph_median(&ranked[0][2]);
    assert_eq!(ranked[0][1], "p00-baseline");
    let mut last = 0.0;
    for (i, r) in ranked.iter().enumerate() {
        assert_eq!(r[0], (i + 1).to_string());
        let m = graph_median(&r[2]);
        if i > 1 {
            assert!(m >= last, "row {} is slower than the row above it", i + 1);
        }
        last = m;
        assert!(r[3].starts_with(&format!("{m:.1} ± ")), "{r:?} vs {m}");
        if i > 0 {
            assert!(
                r[4].starts_with(&format!("{:.3} ± ", m / base)),
                "{r:?}: ratio {m} / {base}"
            );
        }
    }
    // the failed points' reasons quote the NCCL warning found in their own log
    for r in rows.iter().filter(|r| r[0] == "failed") {
        let p = point(&v, &r[1][..3]);
        let log = std::fs::read_to_string(p["log_paths"][0].as_str().unwrap()).unwrap();
        let warn = log.lines().find(|l| l.contains("NCCL WARN")).unwrap();
        let warn = warn.split("NCCL WARN ").nth(1).unwrap();
        assert!(r[11].contains(warn), "{:?} lacks {warn}", r[11]);
    }
}

#[test]
fn resume_skips_finished_points_and_refuses_another_workload() {
    let dir = tempfile::tempdir().unwrap();
    let res = dir.path().join("r.jsonl");
    vb().args([
        "sweep",
        "--debug-mode",
        "--tp",
        "2",
        "-n",
        "20",
        "-L",
        "NCCL_PROTO=LL,Simple",
    ])
    .arg("--results")
    .arg(&res)
    .assert()
    .success();
    assert_eq!(lines(&res).len(), 3);
    vb().args(["sweep", "--debug-mode", "--tp", "2", "-n", "20"])
        .args(["-L", "NCCL_PROTO=LL,Simple,LL128"])
        .arg("--resume")
        .arg(&res)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "4 points (1 to run, 3 already in the resume file)",
        ));
    let v = lines(&res);
    assert_eq!(v.len(), 4);
    assert_eq!(v[3]["result"]["data"]["overrides"][0][1], "LL128");
    vb().args(["sweep", "--debug-mode", "--tp", "2", "--tokens", "4"])
        .args(["-L", "NCCL_PROTO=LL"])
        .arg("--resume")
        .arg(&res)
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("refusing to resume")
                .and(predicate::str::contains("another workload")),
        );
    assert_eq!(lines(&res).len(), 4, "a refused resume writes nothing");
}

/// A sweep whose LL point's child exits or hangs: that point is recorded as failed with its
/// reason and the sweep goes on to the next point.
fn faulty_sweep(fault: &str, timeout: &str) -> (Vec<serde_json::Value>, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let res = dir.path().join("r.jsonl");
    let t = Instant::now();
    // The exit code depends on whether the cost model can time the other points; the results
    // file must hold every point either way.
    vb().args([
        "sweep",
        "--backend",
        "model",
        "--tp",
        "2",
        "-n",
        "5",
        "-w",
        "1",
    ])
    .args(["-L", "NCCL_PROTO=LL,Simple", "--point-timeout", timeout])
    .arg("--results")
    .arg(&res)
    .env(
        "VERIFYBENCH_SWEEP_EXTRA_ARGS",
        format!("--inject-fault {fault}"),
    )
    .env("VERIFYBENCH_SWEEP_EXTRA_ARGS_WHEN", "NCCL_PROTO=LL")
    .timeout(Duration::from_secs(60))
    .assert()
    .stdout(predicate::str::contains("Notes:"));
    (lines(&res), t.elapsed())
}

#[test]
fn worker_that_exits_mid_point_is_recorded_and_the_sweep_goes_on() {
    let (v, _) = faulty_sweep("exit", "30");
    assert_eq!(v.len(), 3);
    let ll = point(&v, "p01");
    assert_eq!(ll["status"], "failed");
    let why = ll["reason"].as_str().unwrap();
    assert!(why.contains("exited with code 3"), "{why}");
    assert!(ll["stderr_tail"]
        .as_str()
        .unwrap()
        .contains("injected fault"));
    // The next point ran (its own fate depends on the cost model, not on the fault).
    assert_ne!(
        point(&v, "p02")["reason"].as_str().unwrap_or(""),
        why,
        "the fault reached another point"
    );
}

#[test]
fn worker_that_hangs_is_killed_at_the_point_timeout() {
    let (v, took) = faulty_sweep("hang", "1");
    assert_eq!(v.len(), 3);
    let ll = point(&v, "p01");
    assert_eq!(ll["status"], "failed");
    assert!(ll["reason"].as_str().unwrap().contains("--point-timeout"));
    assert!(took < Duration::from_secs(30), "{took:?}");
}

#[test]
fn ctrl_c_stops_cleanly_and_keeps_finished_points() {
    let dir = tempfile::tempdir().unwrap();
    let res = dir.path().join("r.jsonl");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("verifybench"))
        .args([
            "sweep",
            "--backend",
            "model",
            "--tp",
            "2",
            "-n",
            "5",
            "-w",
            "1",
        ])
        .args(["-L", "NCCL_PROTO=LL,Simple", "--point-timeout", "60"])
        .arg("--results")
        .arg(&res)
        .env("VERIFYBENCH_SWEEP_EXTRA_ARGS", "--inject-fault hang")
        .env("VERIFYBENCH_SWEEP_EXTRA_ARGS_WHEN", "NCCL_PROTO=LL")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the baseline to be recorded; the LL point then hangs.
    let t = Instant::now();
    while std::fs::read_to_string(&res).map_or(0, |s| s.lines().count()) < 1 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "baseline never finished"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: signals the sweep process this test started.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "sweep ignored Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(
        err.contains("interrupted") && err.contains("--resume"),
        "{err}"
    );
    let v = lines(&res);
    assert_eq!(v.len(), 1, "only the finished baseline is kept");
    assert_eq!(v[0]["result"]["data"]["point_id"], "p00-baseline");
}

#[test]

fn model_backend_sweep_runs_every_point_in_a_fresh_child() {
    let dir = tempfile::tempdir().unwrap();
    let res = dir.path().join("r.jsonl");
    vb().args(["sweep", "--backend", "model", "--tp", "2", "-n", "20"])
        .args(["-L", "NCCL_PROTO=LL,Simple"])
        .arg("--results")
        .arg(&res)
        .assert()
        .success()
        .stdout(
            predicate::str::contains("modeled numbers")
                .and(predicate::str::contains("Recommendation")),
        );
    let v = lines(&res);
    assert_eq!(v.len(), 3);
    assert!(v.iter().all(|r| r["result"]["data"]["status"] == "ok"));
    assert!(v.iter().all(|r| r["source"] == "modeled"));
}
