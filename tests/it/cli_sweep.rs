//! End-to-end tests of `verifybench sweep` through the real binary. None needs a GPU:
//! `--debug-mode` fakes the points (synthetic records and NCCL 2.28 logs) to test the whole
//! pipeline; the fault tests start real `verify --backend model` children and make one point's
//! child exit or hang through VERIFYBENCH_SWEEP_EXTRA_ARGS (`--inject-fault`).

use std::path::Path;
use std::time::{Duration, Instant};

use predicates::prelude::*;

use crate::common;
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
        "--rounds",
        "1",
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
        .args([
            "sweep",
            "--debug-mode",
            "--tp",
            "2",
            "-n",
            "30",
            "--rounds",
            "1",
        ])
        // No between-run noise: the ranking below is of the mock's settings factors.
        .env("VERIFYBENCH_MOCK_NOISE", "0")
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
        "--rounds",
        "1",
        "-L",
        "NCCL_PROTO=LL,Simple",
    ])
    .arg("--results")
    .arg(&res)
    .assert()
    .success();
    assert_eq!(lines(&res).len(), 3);
    vb().args([
        "sweep",
        "--debug-mode",
        "--tp",
        "2",
        "-n",
        "20",
        "--rounds",
        "1",
    ])
    .args(["-L", "NCCL_PROTO=LL,Simple,LL128"])
    .arg("--resume")
    .arg(&res)
    .assert()
    .success()
    .stdout(
        predicate::str::contains("4 points x 1 round(s)").and(predicate::str::contains(
            "4 runs (1 to run, 3 already in the resume file)",
        )),
    );
    let v = lines(&res);
    assert_eq!(v.len(), 4);
    assert_eq!(v[3]["result"]["data"]["overrides"][0][1], "LL128");
    vb().args([
        "sweep",
        "--debug-mode",
        "--tp",
        "2",
        "--tokens",
        "4",
        "--rounds",
        "1",
    ])
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
/// reason and the sweep goes on to the next point. The harness' own limit (300 s) only catches
/// a sweep that hangs.
fn faulty_sweep(fault: &str, timeout: &str, rounds: &str) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().unwrap();
    let res = dir.path().join("r.jsonl");
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
    .args(["--rounds", rounds])
    .arg("--results")
    .arg(&res)
    .env(
        "VERIFYBENCH_SWEEP_EXTRA_ARGS",
        format!("--inject-fault {fault}"),
    )
    .env("VERIFYBENCH_SWEEP_EXTRA_ARGS_WHEN", "NCCL_PROTO=LL")
    .timeout(Duration::from_secs(300))
    .assert()
    .stdout(predicate::str::contains("Notes:"));
    lines(&res)
}

#[test]
fn worker_that_exits_mid_point_is_recorded_and_the_sweep_goes_on() {
    // Two rounds: the failed point's second round is not run (its first failed), the other
    // points run in both.
    // a point timeout no loaded machine reaches: the exit is the only failure
    let v = faulty_sweep("exit", "300", "2");
    assert_eq!(v.len(), 5);
    let rounds_of = |prefix: &str| -> Vec<u64> {
        let mut r: Vec<u64> = v
            .iter()
            .map(|r| &r["result"]["data"])
            .filter(|d| d["point_id"].as_str().unwrap().starts_with(prefix))
            .map(|d| d["round"].as_u64().unwrap())
            .collect();
        r.sort();
        r
    };
    assert_eq!(rounds_of("p01"), vec![0]);
    assert_eq!(rounds_of("p00"), vec![0, 1]);
    assert_eq!(rounds_of("p02"), vec![0, 1]);
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
    let v = faulty_sweep("hang", "1", "1");
    assert_eq!(v.len(), 3);
    let ll = point(&v, "p01");
    assert_eq!(ll["status"], "failed");
    assert!(ll["reason"].as_str().unwrap().contains("--point-timeout"));
    // killed at the timeout, not before, on the sweep's own clock
    let wall = ll["probe_wall_s"].as_f64().unwrap() + ll["timed_wall_s"].as_f64().unwrap();
    assert!(wall >= 1.0, "{ll}");
}

/// A seed whose first round runs the baseline first and the LL point second (rounds are
/// shuffled), so that the baseline is recorded before the LL point hangs.
fn baseline_first_seed() -> u64 {
    use verifybench::sweep::{matrix, rounds::RoundPlan};
    let dims = matrix::dimensions(&["NCCL_PROTO=LL,Simple".to_string()], &[]).unwrap();
    let ids: Vec<String> = matrix::points(&dims, None)
        .into_iter()
        .map(|p| p.id)
        .collect();
    (0..1000)
        .find(|&s| {
            let plan = RoundPlan::new(&ids, &ids[0], 1, s).unwrap();
            plan.order[0].point_id == ids[0] && plan.order[1].point_id.starts_with("p01")
        })
        .expect("some seed puts the baseline first")
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
        .args(["-L", "NCCL_PROTO=LL,Simple", "--point-timeout", "600"])
        .args([
            "--rounds",
            "1",
            "--seed",
            &baseline_first_seed().to_string(),
        ])
        .arg("--results")
        .arg(&res)
        .env("VERIFYBENCH_SWEEP_EXTRA_ARGS", "--inject-fault hang")
        .env("VERIFYBENCH_SWEEP_EXTRA_ARGS_WHEN", "NCCL_PROTO=LL")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the baseline to be recorded; the LL point then hangs. The limits of the waits
    // below only catch a sweep that hangs (the hanging point's own timeout is 600 s).
    let t = Instant::now();
    while std::fs::read_to_string(&res).map_or(0, |s| s.lines().count()) < 1 {
        assert!(
            t.elapsed() < Duration::from_secs(300),
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
            t.elapsed() < Duration::from_secs(300),
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
        .args(["-L", "NCCL_PROTO=LL,Simple", "--rounds", "2"])
        .arg("--results")
        .arg(&res)
        .assert()
        .success()
        .stdout(
            predicate::str::contains("modeled numbers")
                .and(predicate::str::contains("Recommendation"))
                .and(predicate::str::contains(
                    "noise floor: none measured: the numbers are modeled",
                ))
                .and(predicate::str::contains("noise floor (graph)").not()),
        );
    let v = lines(&res);
    assert_eq!(v.len(), 6);
    // Each (point, round) keeps its own child record in the log folder.
    let logs = res.with_extension("logs");
    for f in ["p00-baseline.json", "p00-baseline.round2.json"] {
        assert!(logs.join(f).exists(), "{f} missing");
    }
    assert!(v.iter().all(|r| r["result"]["data"]["status"] == "ok"));
    assert!(v.iter().all(|r| r["source"] == "modeled"));
}

/// A debug-mode sweep of rounds with a planted gain on NCCL_NTHREADS=512 and between-run
/// noise of `noise` (both FAKE, through the mock's test hooks); returns stdout and the
/// results file's lines.
fn planted_sweep(
    gain: &str,
    noise: &str,
    rounds: &str,
    extra_env: &[(&str, &str)],
) -> (i32, String, Vec<serde_json::Value>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let res = dir.path().join("r.jsonl");
    let mut cmd = vb();
    cmd.args([
        "sweep",
        "--debug-mode",
        "--tp",
        "2",
        "-n",
        "20",
        "--rounds",
        rounds,
    ])
    .args(["-L", "NCCL_NTHREADS=256,512"])
    .arg("--results")
    .arg(&res)
    .env(
        "VERIFYBENCH_MOCK_PLANT",
        format!("NCCL_NTHREADS=512:{gain}"),
    )
    .env("VERIFYBENCH_MOCK_NOISE", noise);
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let v = if res.exists() { lines(&res) } else { vec![] };
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        v,
        dir,
    )
}

/// The graph-replay per-verify median of (point, round) in the results file.
fn graph_median_of(v: &[serde_json::Value], prefix: &str, round: u64) -> f64 {
    median_of(v, prefix, round, true)
}

/// The per-verify median of (point, round) in the results file, graph or eager replay.
fn median_of(v: &[serde_json::Value], prefix: &str, round: u64, graph: bool) -> f64 {
    let d = v
        .iter()
        .map(|r| &r["result"]["data"])
        .find(|d| d["point_id"].as_str().unwrap().starts_with(prefix) && d["round"] == round)
        .unwrap_or_else(|| panic!("no {prefix} round {round}"));
    d["verify"]["result"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["graph"] == graph)
        .unwrap()["per_verify"]["median_us"]
        .as_f64()
        .unwrap()
}

#[test]
fn rounds_recommend_a_planted_3_percent_gain_under_1_percent_noise() {
    let (code, out, v, _d) = planted_sweep("0.97", "0.01", "8", &[]);
    assert_eq!(code, 0, "{out}");
    // 3 points x 8 rounds, each pair once, the baseline in every round.
    assert_eq!(v.len(), 24);
    for prefix in ["p00", "p01", "p02"] {
        let mut rounds: Vec<u64> = v
            .iter()
            .map(|r| &r["result"]["data"])
            .filter(|d| d["point_id"].as_str().unwrap().starts_with(prefix))
            .map(|d| d["round"].as_u64().unwrap())
            .collect();
        rounds.sort();
        assert_eq!(rounds, (0..8).collect::<Vec<u64>>(), "{prefix}");
    }
    // Shuffled: the rounds do not all run in the same order.
    let order = |r: u64| -> Vec<String> {
        v.iter()
            .map(|x| &x["result"]["data"])
            .filter(|d| d["round"] == r)
            .map(|d| d["point_id"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(
        (1..8).any(|r| order(r) != order(0)),
        "every round in one order"
    );
    // The seed of the shuffles is recorded with every pair.
    let seeds: std::collections::BTreeSet<u64> = v
        .iter()
        .map(|x| x["result"]["data"]["seed"].as_u64().unwrap())
        .collect();
    assert_eq!(seeds.len(), 1);
    assert!(
        out.contains("Recommendation (graph replay, held over 8 rounds): NCCL_NTHREADS=512"),
        "{out}"
    );
    assert!(out.contains("export NCCL_NTHREADS=512"), "{out}");
    assert!(out.contains("graph replay: p02-"), "{out}");
    assert!(out.contains("eager replay: "), "eager judged too: {out}");
    // The printed paired ratio follows from the file: the geometric mean of the per-round
    // ratios of the point's graph median to the baseline's.
    let logs: f64 = (0..8)
        .map(|r| (graph_median_of(&v, "p02", r) / graph_median_of(&v, "p00", r)).ln())
        .sum();
    let ratio = (logs / 8.0).exp();
    let row = out
        .lines()
        .find(|l| l.contains("p02-") && l.contains('['))
        .unwrap_or_else(|| panic!("no ratio row: {out}"));
    let graph_cell = row
        .split("  ")
        .filter(|c| !c.trim().is_empty())
        .nth(2)
        .unwrap();
    assert!(
        graph_cell.trim().starts_with(&format!("{ratio:.3} [")),
        "{row} vs {ratio}"
    );
    // The measured noise floor is printed (not a constant).
    let base: Vec<f64> = (0..8).map(|r| graph_median_of(&v, "p00", r)).collect();
    let mut sorted = base.clone();
    sorted.sort_by(f64::total_cmp);
    let med = (sorted[3] + sorted[4]) / 2.0;
    let floor = base
        .iter()
        .map(|b| (b / med - 1.0).abs())
        .fold(0.0, f64::max);
    assert!(
        out.contains(&format!("noise floor (graph): ±{:.1}%", floor * 100.0)),
        "{out}"
    );
    // Where the time goes, and the wall time of the whole sweep.
    assert!(out.contains("wall time: "), "{out}");
}

#[test]
fn three_rounds_either_recommend_the_gain_or_say_how_many_rounds_would() {
    let (code, out, v, _d) = planted_sweep("0.97", "0.01", "3", &[]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(v.len(), 9);
    assert!(
        out.contains("Recommendation (graph replay, held over 3 rounds): NCCL_NTHREADS=512")
            || (out.contains("3 rounds are too few to resolve gains near the noise floor")
                && out.contains("--rounds ")),
        "{out}"
    );
}

#[test]
fn rounds_do_not_recommend_a_half_percent_gain_under_2_percent_noise() {
    for rounds in ["3", "8"] {
        let (code, out, _v, _d) = planted_sweep("0.995", "0.02", rounds, &[]);
        assert_eq!(code, 0, "{out}");
        assert!(
            out.contains(
                "graph replay: no setting beats the defaults beyond the noise measured here (±"
            ),
            "{rounds}: {out}"
        );
        assert!(
            out.contains("Recommendation: keep NCCL's defaults"),
            "{out}"
        );
    }
}

#[test]
fn an_interrupted_sweep_of_rounds_resumes_per_point_and_round() {
    let (code, _out, v, dir) = planted_sweep(
        "0.97",
        "0.01",
        "3",
        &[("VERIFYBENCH_MOCK_INTERRUPT_AFTER", "4")],
    );
    assert_eq!(code, 130);
    assert_eq!(v.len(), 4, "only the 4 finished pairs are kept");
    let res = dir.path().join("r.jsonl");
    let out = vb()
        .args([
            "sweep",
            "--debug-mode",
            "--tp",
            "2",
            "-n",
            "20",
            "--rounds",
            "3",
        ])
        .args(["-L", "NCCL_NTHREADS=256,512"])
        .arg("--resume")
        .arg(&res)
        .env("VERIFYBENCH_MOCK_PLANT", "NCCL_NTHREADS=512:0.97")
        .env("VERIFYBENCH_MOCK_NOISE", "0.01")
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains("9 runs (5 to run, 4 already in the resume file)"),
        "{out}"
    );
    let all = lines(&res);
    assert_eq!(all.len(), 9);
    let mut pairs: Vec<(String, u64)> = all
        .iter()
        .map(|r| &r["result"]["data"])
        .map(|d| {
            (
                d["point_id"].as_str().unwrap().to_string(),
                d["round"].as_u64().unwrap(),
            )
        })
        .collect();
    // The first 4 lines are the interrupted run's, unchanged.
    assert_eq!(all[..4], v[..]);
    pairs.sort();
    pairs.dedup();
    assert_eq!(pairs.len(), 9, "a (point, round) pair ran twice");
}

#[test]
fn bad_rounds_and_margins_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    for (args, want) in [
        (vec!["--rounds", "0"], "--rounds 0: give 1 to 100 rounds"),
        (
            vec!["--rounds", "101"],
            "--rounds 101: give 1 to 100 rounds",
        ),
        (
            vec!["--noise-margin", "0.7"],
            "--noise-margin 0.7: give a fraction",
        ),
        (
            vec!["--noise-floor=-0.1"],
            "--noise-margin -0.1: give a fraction",
        ),
    ] {
        vb().args(["sweep", "--debug-mode", "--tp", "2", "-L", "NCCL_PROTO=LL"])
            .args(&args)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(want));
    }
    vb().args(["sweep", "--debug-mode", "--tp", "2", "-L", "NCCL_PROTO=LL"])
        .env("VERIFYBENCH_MOCK_NOISE", "lots")
        .current_dir(dir.path())
        .assert()
        .code(2)
        .stderr(predicate::str::contains("VERIFYBENCH_MOCK_NOISE='lots'"));
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "a refused sweep writes nothing"
    );
}

/// `sweep` of Kimi-K2.5 at TP 8 through the cost model; the test adds the rest.
fn kimi_model_sweep() -> assert_cmd::Command {
    let mut c = vb();
    c.args([
        "sweep",
        "--backend",
        "model",
        "--model",
        "kimi-k2.5",
        "--tp",
        "8",
    ]);
    c
}

/// The variables of `--preset pcie` that the cost model does not price (its
/// `not modeled:` note), each in the id of the preset's points that set it.
const UNPRICED_IN_IDS: [&str; 4] = ["P2P-LEVEL", "NCHANNELS", "NTHREADS", "BUFFSIZE"];

#[test]
fn a_model_sweep_lists_unpriced_points_apart_and_never_calls_its_numbers_measured() {
    let dir = tempfile::tempdir().unwrap();
    let res = dir.path().join("r.jsonl");
    let csv = dir.path().join("rank.csv");
    let out = kimi_model_sweep()
        .args(["--preset", "pcie", "--rounds", "2", "--results"])
        .arg(&res)
        .arg("--export-table-csv")
        .arg(&csv)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    let unpriced = |l: &str| UNPRICED_IN_IDS.iter().any(|u| l.contains(u));
    // The ranking: from its header to the first blank line; no unpriced point in it.
    let ranking: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("rank "))
        .take_while(|l| !l.is_empty())
        .collect();
    // the preset's 16 variations + the baseline = 17 points; 2 P2P_LEVEL + 3 channel pairs
    // + 3 NTHREADS + 2 BUFFSIZE = 10 of them unpriced, so 7 ranked under the header
    assert_eq!(ranking.len(), 1 + 7, "{text}");
    assert!(!ranking.iter().any(|l| unpriced(l)), "{text}");
    assert!(
        text.contains("Not ranked: 10 point(s) set variables the cost model cannot price"),
        "{text}"
    );
    let listed: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("Not ranked:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert_eq!(listed.len(), 10, "{text}");
    assert!(listed
        .iter()
        .all(|l| unpriced(l) && l.contains(": not modeled: NCCL_")));
    // The rounds' table judges only priced points, and names the others apart.
    let judged: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("# modeled ratios to the baseline over 2 round(s)"))
        .skip(2)
        .take_while(|l| l.starts_with('p'))
        .collect();
    assert_eq!(
        judged.len(),
        6,
        "the 7 ranked points less the baseline: {text}"
    );
    assert!(!judged.iter().any(|l| unpriced(l)), "{text}");
    assert!(
        text.contains("not judged (the cost model cannot price their settings): p06-P2P-LEVEL-PHB")
    );
    // Nothing of a model sweep was measured: the word only appears to say so.
    for l in text.lines().filter(|l| l.contains("measured")) {
        assert!(
            l.starts_with("noise floor: none measured: the numbers are modeled"),
            "{l}"
        );
    }
    assert!(text.contains(
        "Recommendation: keep NCCL's defaults (graph replay): no setting the cost model prices has a modeled ratio below 1"
    ));
    // The exported ranking keeps every point: the unpriced ones with no rank and no timing.
    let rows = std::fs::read_to_string(&csv).unwrap();
    let unranked: Vec<&str> = rows
        .lines()
        .filter(|l| l.starts_with("not modeled,"))
        .collect();
    assert_eq!(unranked.len(), 10, "{rows}");
    assert!(
        unranked
            .iter()
            .all(|l| unpriced(l) && l.contains(",-,-,-,-,")),
        "{rows}"
    );
}

#[test]
fn host_gaps_take_effect_in_a_model_sweeps_eager_rows_only() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, gaps: &[&str]| {
        let res = dir.path().join(name);
        kimi_model_sweep()
            .args(["-L", "NCCL_PROTO=LL", "--rounds", "1", "--graph", "both"])
            .args(gaps)
            .arg("--results")
            .arg(&res)
            .assert()
            .success();
        lines(&res)
    };
    let plain = run("plain.jsonl", &[]);
    let gaps = run("gaps.jsonl", &["--host-gap-us", "200"]);
    for id in ["p00-baseline", "p01-PROTO-LL"] {
        let (e0, e1) = (
            median_of(&plain, id, 0, false),
            median_of(&gaps, id, 0, false),
        );
        // Kimi-K2.5 at TP 8 runs 123 all-reduces and 1 all-gather: at least 123 gaps of
        // 200 us lie between their launches, so an eager verify with them takes at least
        // 123 x 200 = 24,600 us of host time alone, far above the verify without them.
        assert!(e1 >= 123.0 * 200.0, "{id}: eager with gaps {e1} us");
        assert!(e0 < 123.0 * 200.0 / 2.0, "{id}: eager without gaps {e0} us");
        // A CUDA graph replays without the host: its rows do not move.
        assert_eq!(
            median_of(&plain, id, 0, true),
            median_of(&gaps, id, 0, true),
            "{id}"
        );
    }
}

/// The system's `libnccl.so.2.28.3` and a pip wheel's bare `libnccl.so.2` (2.28.9 by its
/// metadata), resolved.
fn two_libraries(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let sys = dir.join("libnccl.so.2.28.3");
    std::fs::write(&sys, crate::fake_elf::fake_nccl()).unwrap();
    let lib = dir.join("site/nvidia/nccl/lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(lib.join("libnccl.so.2"), crate::fake_elf::fake_nccl()).unwrap();
    std::fs::create_dir(dir.join("site/nvidia_nccl_cu13-2.28.9.dist-info")).unwrap();
    (
        std::fs::canonicalize(sys).unwrap(),
        std::fs::canonicalize(lib.join("libnccl.so.2")).unwrap(),
    )
}

#[test]
fn a_library_sweep_proves_each_points_build_and_names_the_winner_with_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let (sys, wheel) = two_libraries(dir.path());
    let res = dir.path().join("r.jsonl");
    let out = vb()
        .args([
            "sweep",
            "--debug-mode",
            "--tp",
            "2",
            "-n",
            "20",
            "--rounds",
            "4",
        ])
        .arg("--nccl-lib")
        .arg(format!("{},{}", sys.display(), wheel.display()))
        .args(["-L", "NCCL_PROTO=LL,Simple"])
        .arg("--results")
        .arg(&res)
        // FAKE: every point on the wheel's build 10% faster, 0.5% between-run noise
        .env(
            "VERIFYBENCH_MOCK_PLANT",
            format!("NCCL_LIB={}:0.9", wheel.display()),
        )
        .env("VERIFYBENCH_MOCK_NOISE", "0.005")
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let v = lines(&res);
    // (1 baseline + 2 protocols) x 2 libraries x 4 rounds
    assert_eq!(v.len(), 24);
    for r in &v {
        let d = &r["result"]["data"];
        let id = d["point_id"].as_str().unwrap();
        let (path, version) = if id.contains("LIB-2") {
            (&wheel, "2.28.9")
        } else {
            (&sys, "2.28.3")
        };
        assert_eq!(d["library"]["status"], "ok", "{id}");
        assert_eq!(d["library"]["path"], path.display().to_string(), "{id}");
        for w in d["library"]["workers"].as_array().unwrap() {
            assert_eq!(w["version"], version, "{id}");
        }
    }
    // The wheel's defaults or its LL point wins (the mock's default protocol is LL); the
    // recommendation exports no NCCL_LIB but names the build and its version.
    assert!(
        stdout.contains(&format!(
            "Recommendation (graph replay, held over 4 rounds): NCCL_LIB={}",
            wheel.display()
        )),
        "{stdout}"
    );
    assert!(!stdout.contains("export NCCL_LIB"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "  build: NCCL 2.28.9 from {} (the library of the recommended point",
            wheel.display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "L1 {}: NCCL 2.28.3 (log: 2.28.3+cuda13.0); proven in 3 of 3 point(s)",
            sys.display()
        )),
        "{stdout}"
    );
}

#[test]
fn bad_library_lists_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (sys, wheel) = two_libraries(dir.path());
    let both = format!("{},{}", sys.display(), wheel.display());
    vb().args(["sweep", "--debug-mode", "--tp", "2", "--nccl-lib"])
        .arg(format!("{},/nonexistent/libnccl.so.2", sys.display()))
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "/nonexistent/libnccl.so.2': no such file or folder",
        ));
    vb().args([
        "sweep",
        "--backend",
        "model",
        "--tp",
        "2",
        "--nccl-lib",
        &both,
    ])
    .assert()
    .code(2)
    .stderr(predicate::str::contains("cannot compare libraries"));
    vb().args(["sweep", "--debug-mode", "--tp", "2", "--nccl-lib", &both])
        .arg("-L")
        .arg(format!("NCCL_LIB={}", sys.display()))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("give the list once"));
    // one library alone varies nothing
    vb().args(["sweep", "--debug-mode", "--tp", "2", "--nccl-lib"])
        .arg(&sys)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("nothing to sweep"));
}
