//! A modeled verify whose parts add up (issue 28 item 2): with host gaps, a late rank, either
//! launcher and both launch modes, every row has per-verify >= in-collective >= transfer, and
//! the lower bound printed beside the in-collective time is at most that time.
//!
//! The model is Kimi-K2.5 cut to 3 layers (its config.json, one dense layer and two MoE ones):
//! every kind of collective and launch of the 61-layer model is in it, and the parts add up
//! per collective and per launch, whatever their number. The eager rows simulate 2000 verifies
//! of every launch's host gap; with 3 layers instead of 61 that costs a twentieth.

use std::path::Path;

use crate::common::{kimi_config_json, read_json, vb};

fn runs(dir: &Path, extra: &[&str]) -> Vec<serde_json::Value> {
    let j = dir.join("v.json");
    let config = dir.join("config.json");
    std::fs::write(&config, kimi_config_json(3)).unwrap();
    let out = vb()
        .args([
            "verify",
            "--backend",
            "model",
            "--gpus",
            "4",
            "--mode",
            "comm,full",
        ])
        .arg("--model-config")
        .arg(&config)
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
    let v = read_json(&j);
    let v = v.as_array().map_or(v.clone(), |a| a[0].clone());
    v["result"]["runs"].as_array().unwrap().clone()
}

#[test]
fn verify_holds_in_collective_holds_transfer_on_every_modeled_row() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [&[&str]; 6] = [
        &["--host-gap-us", "200:50"],
        &["--host-gap-us", "200:50", "--late-rank", "3:200"],
        &["--late-rank", "1:300"],
        &["--host-gap-us", "50:40", "--launcher", "threads"],
        &[
            "--host-gap-us",
            "200:50",
            "--late-rank",
            "2:200",
            "--launcher",
            "threads",
        ],
        &["--host-gap-us", "20"],
    ];
    for extra in cases {
        let rows = runs(dir.path(), extra);
        assert_eq!(rows.len(), 4, "{extra:?}: eager and graph x comm and full");
        for r in &rows {
            let what = format!("{extra:?} graph={} mode={}", r["graph"], r["mode"]);
            let verify = r["per_verify"]["median_us"].as_f64().unwrap();
            let ic = &r["in_collective"];
            let inc = ic["in_collective_us"].as_f64().unwrap();
            let transfer = ic["transfer_us"].as_f64().unwrap();
            let lb = ic["lower_bound_us"].as_f64().unwrap();
            assert!(
                verify >= inc,
                "{what}: verify {verify} < in-collective {inc}"
            );
            assert!(
                inc >= transfer,
                "{what}: in-collective {inc} < transfer {transfer}"
            );
            assert!(
                lb <= inc + 1e-6,
                "{what}: lower bound {lb} > in-collective {inc}"
            );
            // the parts of the breakdown add up to the per-verify time
            let parts: f64 = r["breakdown"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["us"].as_f64().unwrap())
                .sum();
            assert!(
                (parts - verify).abs() <= 1e-6 * verify.max(1.0),
                "{what}: parts {parts} vs verify {verify}"
            );
        }
        // a named late rank is the straggler of the eager rows (graph replay has no late host)
        if let Some(i) = extra.iter().position(|a| *a == "--late-rank") {
            let rank: u64 = extra[i + 1].split(':').next().unwrap().parse().unwrap();
            for r in &rows {
                let s = &r["in_collective"]["straggler"];
                if r["graph"] == false {
                    assert_eq!(s["rank"], rank, "{extra:?}: {s}");
                } else {
                    assert!(s.is_null(), "{extra:?}: {s}");
                }
            }
        }
    }
}
