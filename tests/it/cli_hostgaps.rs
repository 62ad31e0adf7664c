//! Host gaps, a late rank and the in-collective time (issue 17) through the real binary,
//! without a GPU: the cost model's prediction end to end, and bad values.

use std::path::Path;

use crate::common;
use common::{read_json as json, vb};

/// Kimi-K2.5's config.json cut to 10 layers, written into `dir`.
fn kimi_10_layers(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("config.json");
    std::fs::write(&p, common::kimi_config_json(10)).unwrap();
    p
}

/// Runs a modeled verify of Kimi-K2.5 cut to 10 layers (its config.json) and returns its
/// record. (The eager Monte-Carlo draws every launch's gap in 2000 verifies, slow in a debug
/// build: 10 layers instead of 61 cost a fifth, with every kind of launch still in it, and the
/// variants run on 2 ranks. Fewer layers give the one logits all-gather more weight: at 8
/// ranks and 200:50 us gaps the waiting is 6.1 times the transfer with 61 layers, 5.4 with 10,
/// 4.5 with 3, so 10 keeps the bound of 5 below.)
fn modeled(dir: &Path, gpus: &str, extra: &[&str]) -> serde_json::Value {
    let j = dir.join("v.json");
    let out = vb()
        .args(["verify", "--backend", "model", "--gpus", gpus])
        .arg("--model-config")
        .arg(kimi_10_layers(dir))
        .arg("--export-json")
        .arg(&j)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{extra:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&j);
    v.as_array().map_or(v.clone(), |a| a[0].clone())
}

fn in_coll(rec: &serde_json::Value, graph: bool) -> serde_json::Value {
    rec["result"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["graph"] == graph)
        .unwrap()["in_collective"]
        .clone()
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap()
}

#[test]
fn model_predicts_waiting_from_host_gaps_and_graph_waits_for_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let none = modeled(dir.path(), "8", &[]);
    let gaps = modeled(dir.path(), "8", &["--host-gap-us", "200:50"]);
    assert_eq!(gaps["source"], "modeled");
    let notes = gaps["provenance"]["notes"].to_string();
    assert!(notes.contains("ChaCha8 seed 0x5eed9a95"), "{notes}");
    assert!(notes.contains("gamma"), "{notes}");
    let (e0, e) = (in_coll(&none, false), in_coll(&gaps, false));
    // no gaps: nothing to wait for
    assert_eq!(f(&e0["waiting_us"]), 0.0);
    // 200:50 us gaps on 8 ranks: the waiting dwarfs the transfer, and the transfer is the same
    assert!((f(&e["transfer_us"]) - f(&e0["transfer_us"])).abs() < 1e-6);
    assert!(f(&e["waiting_us"]) > 5.0 * f(&e["transfer_us"]), "{e}");
    let total = f(&e["transfer_us"]) + f(&e["waiting_us"]);
    assert!((f(&e["in_collective_us"]) - total).abs() < 1e-6);
    // the re-synchronised model is the lower bound of the asynchronous one
    assert!(f(&e["lower_bound_us"]) <= f(&e["in_collective_us"]));
    assert!(f(&e["lower_bound_us"]) > f(&e["transfer_us"]));
    assert!(e["how"].as_str().unwrap().starts_with("modeled"));
    // graph replay has no host gaps
    let g = in_coll(&gaps, true);
    assert_eq!(f(&g["waiting_us"]), 0.0);
    // a late rank adds its lag to the others' waiting, and the seed changes the draw
    let two = modeled(dir.path(), "2", &["--host-gap-us", "200:50"]);
    let w2 = f(&in_coll(&two, false)["waiting_us"]);
    // fewer ranks wait less for the slowest of them
    assert!(w2 < f(&e["waiting_us"]));
    let late = modeled(
        dir.path(),
        "2",
        &["--host-gap-us", "200:50", "--late-rank", "1:100"],
    );
    assert!(f(&in_coll(&late, false)["waiting_us"]) > w2);
    let seeded = modeled(
        dir.path(),
        "2",
        &["--host-gap-us", "200:50", "--gap-seed", "7"],
    );
    assert!(seeded["provenance"]["notes"]
        .to_string()
        .contains("seed 0x7"));
    assert_ne!(f(&in_coll(&seeded, false)["waiting_us"]), w2);
}

#[test]
fn verify_table_shows_the_in_collective_time_labelled_modeled() {
    let dir = tempfile::tempdir().unwrap();
    let out = vb()
        .args(["verify", "--backend", "model", "--gpus", "2"])
        .arg("--model-config")
        .arg(kimi_10_layers(dir.path()))
        .args(["--host-gap-us", "200:50"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let t = String::from_utf8(out.stdout).unwrap();
    assert!(t.contains("MODELED"), "{t}");
    assert!(t.contains("in collectives per verify"), "{t}");
    assert!(t.contains("graph replay has no host gaps"), "{t}");
}

fn fails(args: &[&str], flag: &str) {
    let out = vb().args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let e = String::from_utf8_lossy(&out.stderr);
    // one error line, naming the flag (clap adds its usual hint after invalid values)
    let errors: Vec<&str> = e
        .lines()
        .filter(|l| l.starts_with("error") || l.starts_with("Error"))
        .collect();
    assert_eq!(errors.len(), 1, "{args:?}: {e}");
    assert!(errors[0].contains(flag), "{args:?}: {e}");
    if errors[0].starts_with("Error") {
        assert_eq!(e.trim().lines().count(), 1, "{args:?}: {e}");
    }
}

#[test]
fn bad_host_gap_values_exit_2_naming_the_flag() {
    let v = ["verify", "--backend", "model", "--gpus", "8"];
    let with = |x: &[&'static str]| [&v[..], x].concat();
    fails(&with(&["--host-gap-us=-5"]), "--host-gap-us");
    fails(&with(&["--host-gap-us", "2000000"]), "--host-gap-us");
    fails(&with(&["--host-gap-us", "200:abc"]), "--host-gap-us");
    fails(&with(&["--host-gap-us", "0:50"]), "--host-gap-us");
    fails(&with(&["--host-gap-per", "token"]), "--host-gap-per");
    fails(&with(&["--late-rank", "8:100"]), "--late-rank 8:100");
    fails(&with(&["--late-rank", "1:-3"]), "--late-rank");
    fails(&with(&["--late-rank", "1"]), "--late-rank");
    fails(&with(&["--gap-seed", "x"]), "--gap-seed");
    // the sweep and the worker take the same flags
    fails(
        &["sweep", "--debug-mode", "--host-gap-us=-1"],
        "--host-gap-us",
    );
    fails(&["worker", "--late-rank", "x:1"], "--late-rank");
}

#[test]
fn host_gap_from_takes_a_schedule_file_of_this_schedule_only() {
    let dir = tempfile::tempdir().unwrap();
    let plan = vb()
        .args([
            "plan",
            "--model",
            "kimi-k2.5",
            "--tp",
            "2",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(plan.status.success());
    let mut s: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let nops = s["ops"].as_array().unwrap().len();
    let bare = dir.path().join("bare.json");
    std::fs::write(&bare, s.to_string()).unwrap();
    s["host_gaps_us"] = serde_json::json!(vec![40.0; nops]);
    let traced = dir.path().join("traced.json");
    std::fs::write(&traced, s.to_string()).unwrap();

    let j = dir.path().join("v.json");
    let out = vb()
        .args(["verify", "--backend", "model", "--tp", "2", "--export-json"])
        .arg(&j)
        .arg("--host-gap-from")
        .arg(&traced)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rec = json(&j);
    let rec = rec.as_array().map_or(rec.clone(), |a| a[0].clone());
    assert!(rec["provenance"]["notes"]
        .to_string()
        .contains(&format!("the {nops} per-op gaps measured in")));
    // the same gaps on every rank: nobody waits
    assert_eq!(f(&in_coll(&rec, false)["waiting_us"]), 0.0);

    let t = traced.to_str().unwrap();
    let b = bare.to_str().unwrap();
    let m = ["verify", "--backend", "model"];
    fails(
        &[&m[..], &["--tp", "8", "--host-gap-from", t]].concat(),
        "another schedule",
    );
    fails(
        &[&m[..], &["--tp", "2", "--host-gap-from", b]].concat(),
        "no host_gaps_us",
    );
    fails(
        &[
            &m[..],
            &["--tp", "2", "--host-gap-from", t, "--host-gap-us", "5"],
        ]
        .concat(),
        "--host-gap-from",
    );
    fails(
        &[
            &m[..],
            &["--tp", "2", "--host-gap-from", "/nonexistent/s.json"],
        ]
        .concat(),
        "/nonexistent/s.json",
    );
}
