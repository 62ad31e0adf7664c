//! End-to-end tests of the cost model (`--backend model`, the no-GPU fallback) and
//! `verifybench model fit`, through the real binary.

use std::path::Path;

use predicates::prelude::*;

use crate::common;
use common::{read_json as json, vb};

/// Runs and returns stdout, failing with stderr on a non-zero exit.
fn ok(args: &[&str]) -> String {
    let out = vb().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The verify table's (median_us, per_coll_us) of the row `mode launch`.
fn row(table: &str, mode: &str, launch: &str) -> (f64, f64) {
    let line = table
        .lines()
        .find(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() > 5 && w[0] == mode && w[1] == launch
        })
        .unwrap_or_else(|| panic!("no {mode} {launch} row in\n{table}"));
    // modeled rows show "-" for what was not measured (p99, stddev, n, outliers, #wrong)
    let w: Vec<&str> = line.split_whitespace().collect();
    (w[2].parse().unwrap(), w[5].parse().unwrap())
}

fn graph_eager_comm(args: &[&str]) -> (f64, f64, f64) {
    let t = ok(args);
    let (e, _) = row(&t, "comm", "eager");
    let (g, per) = row(&t, "comm", "graph");
    (e, g, per)
}

#[test]
fn verify_without_gpu_is_modeled_and_says_so() {
    // with two GPUs `--backend auto` measures: the fallback is not seen there
    if !common::runs_here(
        "verify --backend auto falls back to the cost model",
        common::Machine::WithoutDriver,
        verifybench::comm::device_count() < 2,
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("v.json");
    let out = vb()
        .args([
            "verify",
            "--model",
            "kimi-k2.5",
            "--tp",
            "8",
            "--export-json",
        ])
        .arg(&j)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    // The one-line notice on stderr, and the label on the table.
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("MODELED"), "{stderr}");
    // the default profile is 8 PCIe gen5 GPUs, and the table says how to pick another
    assert!(
        stdout.contains("MODELED by the cost model (profile pcie-gen5)"),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .take(3)
            .any(|l| l.contains("pick another with --link")),
        "{stdout}"
    );
    let (e, _) = row(&stdout, "comm", "eager");
    let (g, per) = row(&stdout, "comm", "graph");
    assert!(g < e, "graph {g} eager {e}");
    // 8 ranks of PCIe gen5: a 43 KB all-reduce in a graph takes 8-30 us (public: ~24 us).
    assert!((8.0..30.0).contains(&per), "{per}");
    assert!((g / 124.0 - per).abs() < 0.01);
    let v = json(&j);
    let r = &v[0];
    assert_eq!(r["source"], "modeled");
    assert_eq!(r["kind"], "verify");
    assert_eq!(r["provenance"]["backend"], "model");
    assert_eq!(r["provenance"]["model_profile"], "pcie-gen5");
    assert_eq!(r["result"]["runs"][0]["per_verify"]["n"], 1);
    assert!(r["provenance"]["notes"].as_array().unwrap().len() >= 3);
}

#[test]
fn pcie_gen5_8_gpus_is_slower_than_nvlink_and_graph_helps() {
    let (pe, pg, pper) = graph_eager_comm(&[
        "verify",
        "--backend",
        "model",
        "--gpus",
        "8",
        "--link",
        "pcie-gen5",
    ]);
    let (ne, ng, _) = graph_eager_comm(&[
        "verify",
        "--backend",
        "model",
        "--gpus",
        "8",
        "--link",
        "nvlink-h200",
    ]);
    assert!(pg < pe && ng < ne);
    assert!(pg > ng && pe > ne);
    // PCI: 14 hops of ~1 us plus a base latency and LL at half of ~42 GB/s: 15-40 us each.
    assert!((15.0..40.0).contains(&pper), "{pper}");
    // Without peer-to-peer it is slower still.
    let (_, sg, _) = graph_eager_comm(&[
        "verify",
        "--backend",
        "model",
        "--gpus",
        "8",
        "--link",
        "pcie-gen5-no-p2p",
    ]);
    assert!(sg > pg);
}

#[test]
fn forced_protocol_changes_the_prediction() {
    let args = [
        "verify",
        "--backend",
        "model",
        "--gpus",
        "8",
        "--link",
        "pcie-gen5",
    ];
    let (_, auto, _) = graph_eager_comm(&args);
    let t = ok(&[&args[..], &["--proto", "Simple"]].concat());
    assert!(t.contains("--proto Simple"));
    assert!(t.contains("Ring/Simple"));
    let (_, simple) = row(&t, "comm", "graph");
    assert!(simple > auto / 124.0);
    vb().args(args)
        .args(["--proto", "LL256"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unknown value 'LL256'"));
}

#[test]
fn collective_model_table_and_bad_input() {
    let t = ok(&[
        "collective",
        "--backend",
        "model",
        "--gpus",
        "2",
        "--link",
        "nvlink-h200",
        "-b",
        "8K",
        "-e",
        "64K",
        "--sizes",
        "43008",
    ]);
    assert!(t.contains("MODELED"));
    let line = t
        .lines()
        .find(|l| l.trim_start().starts_with("43008"))
        .unwrap();
    let w: Vec<&str> = line.split_whitespace().collect();
    let (eager, graph): (f64, f64) = (w[4].parse().unwrap(), w[8].parse().unwrap());
    // The measured 2x H200 reference: 7.0-7.4 us graph, ~11 us eager from processes.
    assert!(
        (7.0..7.4).contains(&graph) && (10.5..11.5).contains(&eager),
        "{line}"
    );
    vb().args(["collective", "--backend", "model", "--gpus", "1"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("at least 2 ranks"));
    vb().args(["verify", "--backend", "model", "--link", "pcie-gen9"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "known: nvlink-h100, nvlink-h200, pcie-gen4, pcie-gen5, pcie-gen5-no-p2p, ib-ndr, pcie-gen5-dual-socket",
        ));
}

/// Writes a modeled collective sweep to `path`, relabelled as measured (synthetic data from
/// known parameters: the pcie-gen5-no-p2p profile, whose parameters are all fittable).
fn synthetic_measurement(path: &Path, extra: &[&str]) {
    let out = vb()
        .args([
            "collective",
            "--backend",
            "model",
            "--link",
            "pcie-gen5-no-p2p",
            "--gpus",
            "2",
        ])
        .args(extra)
        .arg("--export-json")
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let mut v = json(path);
    for r in v.as_array_mut().unwrap() {
        r["source"] = "measured".into();
    }
    std::fs::write(path, v.to_string()).unwrap();
}

#[test]
fn fit_recovers_a_known_profile_and_its_file_is_usable() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("pcie.json");
    synthetic_measurement(&data, &["-b", "8K", "-e", "1M"]);
    let prof = dir.path().join("fitted.json");
    let t = ok(&[
        "model",
        "fit",
        data.to_str().unwrap(),
        "-o",
        prof.to_str().unwrap(),
        "--base",
        "nvlink-h200",
    ]);
    // One row per size and launch mode, the medians, and a near-zero error on exact data.
    assert_eq!(
        t.lines().filter(|l| l.contains(" B n=2 ")).count(),
        16,
        "{t}"
    );
    assert!(t.contains("# median |error| of the fit: 0.0%"), "{t}");
    assert!(
        t.contains("# median |error| leave-one-out (refit without the point, predict it): 0.0%"),
        "{t}"
    );
    let rec = json(&prof);
    assert_eq!(rec["result"]["name"], "verifybench-cost-profile");
    assert_eq!(rec["schema_version"], 1);
    let p = &rec["result"]["data"];
    assert_eq!(p["profile"]["name"], "fitted");
    assert_eq!(p["fit"]["points"].as_array().unwrap().len(), 16);
    // The fitted profile predicts what pcie-gen5-no-p2p predicts, for a size it never saw.
    let at = |how: &[&str]| {
        let t = ok(&[
            &[
                "collective",
                "--backend",
                "model",
                "--gpus",
                "2",
                "-b",
                "43008",
                "-e",
                "43008",
            ][..],
            how,
        ]
        .concat());
        let line = t
            .lines()
            .find(|l| l.trim_start().starts_with("43008"))
            .unwrap()
            .to_string();
        (
            line.split_whitespace()
                .nth(8)
                .unwrap()
                .parse::<f64>()
                .unwrap(),
            t,
        )
    };
    let (want, _) = at(&["--link", "pcie-gen5-no-p2p"]);
    let (got, t) = at(&["--profile", prof.to_str().unwrap()]);
    assert!((got / want - 1.0).abs() < 0.01, "{got} vs {want}");
    assert!(t.contains("profile fitted (file"));
}

/// No link moves bytes faster than its rate: a fit of NVLink-speed data from a PCIe base is
/// refused before it writes (the fitted bandwidth passes PCIe 5.0's 63 GB/s), and a profile
/// file whose bandwidth was raised past its link's rate is refused where it is read.
#[test]
fn a_profile_past_its_links_rate_is_refused_where_fitted_and_where_read() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("nvlink.json");
    let out = vb()
        .args(["collective", "--backend", "model", "--link", "nvlink-h200"])
        .args(["--gpus", "2", "-b", "8K", "-e", "16M", "--export-json"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(out.status.success());
    let mut v = json(&data);
    for r in v.as_array_mut().unwrap() {
        r["source"] = "measured".into();
    }
    std::fs::write(&data, v.to_string()).unwrap();
    let prof = dir.path().join("p.json");
    let (d, p) = (data.to_str().unwrap(), prof.to_str().unwrap());
    common::refused(
        &["model", "fit", d, "-o", p, "--base", "pcie-gen5"],
        &[
            "not a profile of its link",
            "Simple rate (intra) = ",
            "is past 63.0000 (intra link rate 63 GB/s per direction x Simple payload share 1)",
            "--base",
        ],
    );
    assert!(!prof.exists(), "nothing written");
    // The same data from its own link's base fits; its file, raised past that link's rate
    // (NVLink 4's 450 GB/s), is refused by the command that reads it.
    ok(&["model", "fit", d, "-o", p, "--base", "nvlink-h200"]);
    let mut f = json(&prof);
    let intra = &mut f["result"]["data"]["profile"]["intra"];
    let rate = intra["rate_gbps"].as_f64().unwrap();
    intra["bw_gbps"] = (2.0 * rate).into();
    std::fs::write(&prof, f.to_string()).unwrap();
    common::refused(
        &["verify", "--backend", "model", "--profile", p],
        &[
            "profile file",
            &format!(
                "Simple rate (intra) = {:.4} GB/s is past {rate:.4}",
                2.0 * rate
            ),
            "no link moves bytes faster than its rate",
        ],
    );
}

#[test]
fn fit_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let prof = dir.path().join("p.json");
    // Too few points: one size in graph mode only, for two parameters.
    let one = dir.path().join("one.json");
    synthetic_measurement(&one, &["-b", "8K", "-e", "8K", "--graph", "on"]);
    vb().args(["model", "fit"])
        .arg(&one)
        .arg("-o")
        .arg(&prof)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("needs at least 2 measured points"));
    assert!(!prof.exists());
    // Modeled records are not measurements.
    let modeled = dir.path().join("modeled.json");
    vb().args([
        "collective",
        "--backend",
        "model",
        "--gpus",
        "2",
        "--export-json",
    ])
    .arg(&modeled)
    .assert()
    .success();
    vb().args(["model", "fit"])
        .arg(&modeled)
        .arg("-o")
        .arg(&prof)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("left out"))
        .stderr(predicate::str::contains("no measured"));
    // A profile of the wrong schema, and a results file given as a profile.
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"schema_version": 99, "kind": "verifybench-cost-profile", "profile": {}}"#,
    )
    .unwrap();
    vb().args(["verify", "--backend", "model", "--profile"])
        .arg(&bad)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("schema_version 99"));
    vb().args(["verify", "--backend", "model", "--profile"])
        .arg(&modeled)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("not a cost-model profile"));
    vb().args(["model", "fit", "-o", "x.json", "--base", "pcie-gen7"])
        .arg(&one)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unknown link profile 'pcie-gen7'"));
}

#[test]
fn fit_says_what_it_held_and_a_profile_used_elsewhere_says_it_extrapolates() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("pcie.json");
    synthetic_measurement(&data, &["-b", "8K", "-e", "1M"]);
    let prof = dir.path().join("fitted.json");
    let t = ok(&[
        "model",
        "fit",
        data.to_str().unwrap(),
        "-o",
        prof.to_str().unwrap(),
    ]);
    // One rank count: the fit says so, and which parameters it fitted and which it held.
    assert!(t.contains("# fitted on 1 rank count(s): 2"), "{t}");
    assert!(t.lines().any(|l| l.starts_with("#   fitted ")), "{t}");
    assert!(t.lines().any(|l| l.starts_with("#   held ")), "{t}");
    let p = json(&prof);
    assert_eq!(
        p["result"]["data"]["profile"]["fitted_rank_counts"],
        serde_json::json!([2])
    );
    // Used at the rank count it was fitted on: no note; at 4 ranks: it extrapolates.
    let notes = |gpus: &str| -> Vec<String> {
        let out = dir.path().join(format!("c{gpus}.json"));
        vb().args(["collective", "--backend", "model", "--gpus", gpus])
            .args(["-b", "43008", "-e", "43008", "--profile"])
            .arg(&prof)
            .arg("--export-json")
            .arg(&out)
            .assert()
            .success();
        let v = json(&out);
        let rec = if v.is_array() { v[0].clone() } else { v };
        rec["provenance"]["notes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_string())
            .collect()
    };
    assert!(!notes("2").iter().any(|n| n.contains("extrapolates")));
    let n4 = notes("4");
    let n = n4
        .iter()
        .find(|n| n.contains("extrapolates"))
        .unwrap_or_else(|| panic!("{n4:?}"));
    assert!(
        n.contains("fitted on measurements at 2 ranks only: at 4 ranks"),
        "{n}"
    );
}

#[test]
fn fresh_runs_of_the_model_say_there_is_no_between_run_noise() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("v.json");
    let t = ok(&[
        "verify",
        "--backend",
        "model",
        "--tp",
        "2",
        "--fresh-runs",
        "3",
        "--export-json",
        out.to_str().unwrap(),
    ]);
    assert!(t.contains("# modeled: no between-run noise"), "{t}");
    let v = json(&out);
    let rec = if v.is_array() { v[0].clone() } else { v };
    assert!(
        rec.get("repetitions").is_none(),
        "no invented spread: {rec}"
    );
    let t = ok(&[
        "collective",
        "--backend",
        "model",
        "--gpus",
        "2",
        "-b",
        "8K",
        "-e",
        "16K",
        "--fresh-runs",
        "2",
    ]);
    assert!(t.contains("# modeled: no between-run noise"), "{t}");
    for bad in ["0", "101"] {
        for cmd in [
            &["verify", "--tp", "2"][..],
            &["collective", "--gpus", "2"][..],
        ] {
            vb().args(cmd)
                .args(["--backend", "model", "--fresh-runs", bad])
                .assert()
                .code(2)
                .stderr(predicate::str::contains("give 1 to 100 fresh runs"));
        }
    }
}

#[test]
fn cpu_affinity_is_taken_everywhere_and_bad_values_exit_2() {
    // Valid values on every command that starts ranks (the model backend starts none, so
    // these check the flag's parsing and its passing to the sweep's children).
    for aff in ["auto", "none", "0"] {
        vb().args([
            "verify",
            "--backend",
            "model",
            "--tp",
            "2",
            "-q",
            "--cpu-affinity",
            aff,
        ])
        .assert()
        .success();
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
        .args(["--cpu-affinity", aff])
        .assert()
        .success();
    }
    let dir = tempfile::tempdir().unwrap();
    vb().args([
        "sweep",
        "--backend",
        "model",
        "--tp",
        "2",
        "-n",
        "5",
        "--rounds",
        "1",
    ])
    .args([
        "-L",
        "NCCL_PROTO=LL",
        "--cpu-affinity",
        "0",
        "-q",
        "--results",
    ])
    .arg(dir.path().join("r.jsonl"))
    .assert()
    .success();
    let child_args = std::fs::read_to_string(dir.path().join("r.jsonl")).unwrap();
    assert_eq!(
        child_args.lines().count(),
        2,
        "both points ran with the flag"
    );
    for cmd in [
        &["verify", "--backend", "model", "--tp", "2"][..],
        &["collective", "--backend", "model", "--gpus", "2"][..],
        &[
            "sweep",
            "--backend",
            "model",
            "--tp",
            "2",
            "-L",
            "NCCL_PROTO=LL",
        ][..],
        &["worker", "--rank", "0", "--world-size", "2"][..],
    ] {
        for (bad, why) in [
            ("0-x", "not a CPU number or range"),
            ("", "empty CPU list"),
            ("1000", "not allowed to this process"),
            ("1000000", "beyond the 1024 CPUs"),
        ] {
            vb().args(cmd)
                .args(["--cpu-affinity", bad])
                .assert()
                .code(2)
                .stderr(
                    predicate::str::contains("--cpu-affinity").and(predicate::str::contains(why)),
                );
        }
    }
}
