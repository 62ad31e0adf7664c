//! `verifybench report` over every kind of file the tool writes, through the real binary: what
//! it renders (collective, verify, sweep, bandwidth, selftest), what it names and skips (env,
//! compare, profiles, empty files, `[]`), the exit code when nothing is renderable, the NCCL
//! settings in legends; and the record envelope of bandwidth, selftest, env, compare and
//! model-fit files read back by their readers, beside the older envelope-less committed files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use verifybench::commands::bandwidth::{Bandwidth, KernelRate, Roofline};
use verifybench::measure::Summary;
use verifybench::model::{CollectiveKind, DType, Phase};
use verifybench::record::*;
use verifybench::util::now_utc;

use crate::common;
use common::{read_json as json, read_text as read, vb};

fn committed(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("results")
        .join(p)
}

/// The worker environment every run of the tool has, plus `extra`.
fn provenance(extra: &[(&str, &str)]) -> Provenance {
    let mut p = Provenance::here("nccl", now_utc());
    p.launcher = Some("threads".into());
    let mut env: BTreeMap<String, String> = [
        ("NCCL_NVLS_ENABLE", "0"),
        ("NCCL_VERSION", "2.28.3-1"),
        ("NCCL_DEBUG", "INFO"),
        ("NCCL_DEBUG_FILE", "logs/x.%h.%p.log"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    p.workers = (0..2)
        .map(|rank| WorkerInfo {
            rank,
            pid: 100 + rank as u32,
            device: rank,
            nccl_env: env.clone(),
        })
        .collect();
    p
}

fn collective(extra: &[(&str, &str)], base_us: f64) -> Record {
    let timing = |us: f64, bytes: u64| CollTiming {
        time_us: us,
        summary: Summary::from_samples(&[us, us * 1.01, us * 0.99]).unwrap(),
        algbw_gbps: algbw_gbps(bytes, us),
        busbw_gbps: algbw_gbps(bytes, us),
        wrong: 0,
    };
    let rows = (0..4)
        .map(|i| {
            let size = 8192u64 << (2 * i);
            CollectiveRow {
                size_bytes: size,
                count: size / 2,
                eager: Some(timing(base_us + 8.0 + size as f64 / 2e4, size)),
                graph: Some(timing(base_us + size as f64 / 2e4, size)),
                p2p: vec![],
            }
        })
        .collect();
    Record::new(
        Source::Measured,
        provenance(extra),
        Body::Collective(CollectiveResult {
            op: CollectiveKind::AllReduce,
            dtype: DType::Bf16,
            nranks: 2,
            rows,
        }),
    )
}

fn verify(mode: Mode, ms: f64) -> Record {
    let s = common::kimi(2, 3, Phase::Verify);
    let mut r = common::verify_record(
        Source::Measured,
        "nccl",
        &s,
        vec![common::verify_run(
            true,
            mode,
            &[ms * 1000.0, ms * 1010.0, ms * 990.0],
            124.0,
            1,
        )],
    );
    r.provenance = provenance(&[]);
    r
}

/// Runs a mock sweep (FAKE numbers, two rounds, a noise margin) into `path`; returns its stdout.
fn sweep(path: &Path) -> String {
    let o = vb()
        .args([
            "sweep",
            "--debug-mode",
            "--tp",
            "2",
            "-n",
            "20",
            "--rounds",
            "2",
            "--noise-margin",
            "0.01",
            "-L",
            "NCCL_PROTO=LL,Simple",
            "--results",
        ])
        .arg(path)
        .arg("--log-dir")
        .arg(path.with_extension("logs"))
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// A `bandwidth` record as `bandwidth --export-json` writes it (the command needs a GPU); GPU 1
/// states a tensor-core roofline (as a GPU of compute capability 8.0 and newer does).
fn bandwidth_record() -> Record {
    let gpu = |device: usize| Bandwidth {
        device,
        name: "NVIDIA H200".into(),
        bytes: 1 << 31,
        l2_bytes: 60 << 20,
        copy_rw_gbps: 4000.0,
        copy_read_gbps: 2000.0,
        stream_gbps: vec![(3, 3800.0)],
        kernels: vec![],
        roofline: None,
        per_op: vec![(1 << 20, 8.0, 131.0)],
    };
    let mut tc = gpu(1);
    // 512 tokens at 1100 GB/s: 1100 x 512 / 1000 = 563.2 TFLOP/s, 563.2 / 620 = 91% of the
    // compute term (min(512 x 4200 GB/s = 2150 TFLOP/s, 620)); knee 620e3 / 4200 = 148 tokens
    tc.kernels = vec![KernelRate {
        kernel: "tensor_cores",
        tokens: 512,
        gbps: 1100.0,
        gbps_median: 1090.0,
        tflops: 563.2,
        pct_copy_rw: 27.5,
        pct_copy_read: 55.0,
        roofline_tflops: Some(620.0),
        pct_roofline: Some(563.2 / 620.0 * 100.0),
        bound: Some("compute"),
        sm_mhz: None,
        sm_mhz_median: None,
        pct_roofline_at_clock: None,
    }];
    tc.roofline = Some(Roofline {
        read_gbps: 4200.0,
        tensor_peak_tflops: 620.0,
        tensor_peak_median_tflops: 615.0,
        tensor_peak_mhz: None,
        l2_tflops: 580.0,
        l2_tokens: 512,
        l2_pool_bytes: 16 << 20,
        knee_tokens: 620e3 / 4200.0,
    });
    Record::other(
        Source::Measured,
        provenance(&[]),
        kinds::BANDWIDTH,
        &vec![gpu(0), tc],
    )
    .unwrap()
}

/// The committed selftest checks (envelope-less) inside the record envelope, one failed.
fn selftest_record() -> Record {
    let mut checks = json(&committed("h200x2/selftest.json"));
    checks[3]["pass"] = false.into();
    checks[3]["detail"] = "4 wrong elements".into();
    Record::other(Source::Measured, provenance(&[]), kinds::SELFTEST, &checks).unwrap()
}

fn run_report(files: &[PathBuf], out: &Path) -> std::process::Output {
    vb().arg("report")
        .args(files)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap()
}

#[test]
fn report_renders_what_it_can_and_names_each_skipped_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ver = d.join("verify.json");
    common::write_records(&ver, &[verify(Mode::Full, 8.4)]);
    let sw = d.join("sweep.jsonl");
    let sweep_out = sweep(&sw);
    let bw = d.join("bandwidth.json");
    std::fs::write(&bw, bandwidth_record().to_json_pretty()).unwrap();
    let st = d.join("selftest.json");
    std::fs::write(&st, selftest_record().to_json_pretty()).unwrap();
    let prof = d.join("profile.json");
    vb().args(["model", "fit", "-q"])
        .arg(committed(
            "h200x2/collective-allreduce-default-threads.json",
        ))
        .arg("-o")
        .arg(&prof)
        .assert()
        .success();
    let empty = d.join("empty.json");
    std::fs::write(&empty, "").unwrap();
    let brackets = d.join("brackets.json");
    std::fs::write(&brackets, "[]\n").unwrap();
    let old_bw = d.join("old-bandwidth.json");
    std::fs::copy(committed("h200x2/bandwidth.json"), &old_bw).unwrap();

    let out = d.join("out");
    let o = run_report(&[ver, sw, bw, st, prof, empty, brackets, old_bw], &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    // One note per file it could not render, saying what the file is.
    let notes: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("note: skipped"))
        .collect();
    assert_eq!(notes.len(), 3, "{err}");
    for want in [
        "profile.json: a cost-model profile (from `verifybench model fit`",
        "empty.json: an empty file",
        "brackets.json: an empty JSON array (`[]`)",
    ] {
        assert!(
            notes.iter().any(|n| n.contains(want)),
            "no note {want:?} in\n{err}"
        );
    }
    let md = read(&out.join("report.md"));
    for want in [
        "## Verify time",
        "## Sweep rankings",
        "### sweep.jsonl: 3 point(s), 2 round(s), mode comm, noise margin 0.01, modeled",
        "## Memory bandwidth (measured)",
        "| bandwidth.json | 0 | NVIDIA H200 | 4000 | 2000 | T=3: 3800 (95%) |",
        "| bandwidth.json | 1 | 4200 | 620.0 | 148 | T=512: 563.2 (91%, compute) |",
        "| old-bandwidth.json | 1 | NVIDIA H200 | 4236 | 2118 |",
        "## Selftest (measured)",
        "| selftest.json | 120 | 119 | 1 | all_reduce bf16 count 21504 graph (threads) |",
        "- profile.json: a cost-model profile",
        "- empty.json: an empty file",
    ] {
        assert!(md.contains(want), "report.md lacks {want:?}\n{md}");
    }
    // The sweep's ranking exactly as `sweep` printed it: its table, paired ratios, noise floor,
    // verdicts and recommendation.
    let from = sweep_out
        .find("# round 1 of 2, per-verify time")
        .expect("sweep prints its table");
    let block: Vec<&str> = sweep_out[from..]
        .lines()
        .take_while(|l| !l.starts_with("wall time:"))
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert!(
        block.iter().any(|l| l.starts_with("Recommendation")),
        "{sweep_out}"
    );
    assert!(
        block.iter().any(|l| l.starts_with("noise floor")),
        "{sweep_out}"
    );
    for l in &block {
        assert!(
            md.contains(l),
            "report.md lacks the sweep's line {l:?}\n{md}"
        );
    }
}

#[test]
fn report_over_only_unrenderable_files_exits_2_with_one_line_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let env = d.join("env.json");
    let o = vb().args(["env", "--format", "json"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    std::fs::write(&env, &o.stdout).unwrap();
    let empty = d.join("empty.json");
    std::fs::write(&empty, "\n").unwrap();
    let brackets = d.join("brackets.json");
    std::fs::write(&brackets, "[]").unwrap();
    let files = vec![
        env,
        empty,
        brackets,
        committed("h200x2/model-profile-h200x2.json"),
        committed("h200x2/env.json"),
        committed("h200x2/compare-torch/compare.json"),
    ];
    let out = d.join("out");
    let o = run_report(&files, &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    for want in [
        "nothing to render in the 6 file(s)",
        "env.json: a machine description (from `verifybench env --format json`",
        "empty.json: an empty file",
        "brackets.json: an empty JSON array",
        "model-profile-h200x2.json: a cost-model profile",
        "compare.json: a comparison (from `verifybench compare --format json`",
    ] {
        assert!(err.contains(want), "stderr lacks {want:?}: {err}");
    }
    assert!(!out.exists(), "nothing is written when nothing renders");
}

#[test]
fn legends_and_the_collective_table_name_each_series_settings() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    type Series<'a> = (&'a str, &'a [(&'a str, &'a str)], f64);
    let series: [Series; 4] = [
        ("ll.json", &[("NCCL_PROTO", "LL")], 10.0),
        ("ll128.json", &[("NCCL_PROTO", "LL128")], 12.0),
        ("default.json", &[], 11.0),
        ("p2poff.json", &[("NCCL_P2P_DISABLE", "1")], 20.0),
    ];
    let mut files = vec![];
    for (name, env, us) in series {
        let p = d.join(name);
        common::write_records(&p, &[collective(env, us)]);
        files.push(p);
    }
    let out = d.join("out");
    let o = run_report(&files, &out);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let svg = read(&out.join("collective_latency.svg"));
    let labels = [
        "all_reduce 2 ranks, threads, NCCL_PROTO=LL, graph",
        "all_reduce 2 ranks, threads, NCCL_PROTO=LL128, graph",
        "all_reduce 2 ranks, threads, NCCL defaults, graph",
        "all_reduce 2 ranks, threads, NCCL_P2P_DISABLE=1, graph",
    ];
    for l in labels {
        assert!(svg.lines().any(|x| x.trim() == l), "legend lacks {l:?}");
    }
    // Nothing of what every run has, and no file-name fallback: the settings tell them apart.
    for noise in ["NCCL_NVLS_ENABLE", "NCCL_VERSION", "NCCL_DEBUG", ".json]"] {
        assert!(!svg.contains(noise), "legend shows {noise}");
    }
    let md = read(&out.join("report.md"));
    assert!(
        md.contains("| source | op | nranks | NCCL settings |"),
        "{md}"
    );
    for cell in [
        "| measured | all_reduce | 2 | NCCL_PROTO=LL | bf16 | 8192 |",
        "| measured | all_reduce | 2 | NCCL_PROTO=LL128 | bf16 | 8192 |",
        "| measured | all_reduce | 2 | NCCL defaults | bf16 | 8192 |",
        "| measured | all_reduce | 2 | NCCL_P2P_DISABLE=1 | bf16 | 8192 |",
    ] {
        assert!(md.contains(cell), "table lacks {cell:?}\n{md}");
    }
}

#[test]
fn model_fit_writes_an_enveloped_profile_that_its_readers_read_and_old_ones_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let prof = dir.path().join("fitted.json");
    vb().args(["model", "fit", "-q"])
        .arg(committed(
            "h200x2/collective-allreduce-default-threads.json",
        ))
        .arg("-o")
        .arg(&prof)
        .assert()
        .success();
    let v = json(&prof);
    assert_eq!(v["schema_version"], SCHEMA_VERSION);
    assert_eq!(v["kind"], "other");
    assert_eq!(v["result"]["name"], kinds::PROFILE);
    assert_eq!(v["source"], "modeled");
    assert_eq!(v["provenance"]["command_line"][1], "model");
    assert!(v["result"]["data"]["profile"]["intra"]["bw_gbps"].is_number());
    // Read by --profile (new and committed old form) and by --base-profile.
    for p in [prof.clone(), committed("h200x2/model-profile-h200x2.json")] {
        vb().args(["verify", "--backend", "model", "--tp", "2", "--profile"])
            .arg(&p)
            .assert()
            .success()
            .stdout(predicates::str::contains("modeled").or(predicates::str::contains("MODELED")));
    }
    vb().args(["model", "fit", "-q"])
        .arg(committed("h200x2/collective-allreduce-LL-threads.json"))
        .arg("--base-profile")
        .arg(&prof)
        .arg("-o")
        .arg(dir.path().join("refit.json"))
        .assert()
        .success();
    // Given where a results file belongs, it is named as a profile.
    common::refused(
        &[
            "breakeven",
            "--from",
            prof.to_str().unwrap(),
            "--decode-ms",
            "5",
        ],
        &["cost-model profile"],
    );
}

use predicates::prelude::PredicateBooleanExt;

#[test]
fn env_and_compare_json_carry_the_envelope_and_old_files_are_still_named() {
    let o = vb().args(["env", "--format", "json"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["schema_version"], SCHEMA_VERSION);
    assert_eq!(v["source"], "measured");
    assert_eq!(v["result"]["name"], kinds::ENV);
    assert!(v["result"]["data"]["problems"].is_array());
    assert!(v["provenance"]["host"].is_string());
    // Given to --resume, it is named for what it is.
    let dir0 = tempfile::tempdir().unwrap();
    let env = dir0.path().join("env.json");
    std::fs::write(&env, &o.stdout).unwrap();
    common::refused(
        &[
            "sweep",
            "--debug-mode",
            "--tp",
            "2",
            "-L",
            "NCCL_PROTO=LL",
            "--resume",
            env.to_str().unwrap(),
        ],
        &["is a machine description (from `verifybench env --format json`"],
    );

    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.json");
    let b = dir.path().join("b.json");
    for (p, tokens) in [(&a, "3"), (&b, "3")] {
        vb().args([
            "verify",
            "--backend",
            "model",
            "--tp",
            "2",
            "--tokens",
            tokens,
            "-q",
        ])
        .arg("--export-json")
        .arg(p)
        .assert()
        .success();
    }
    let o = vb()
        .args(["compare", "--format", "json"])
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["result"]["name"], kinds::COMPARE);
    assert_eq!(v["source"], "modeled");
    assert_eq!(v["result"]["data"]["entries"].as_array().unwrap().len(), 2);

    // A results reader given these files, new or old, says what each is.
    let c = dir.path().join("compare.json");
    std::fs::write(&c, &o.stdout).unwrap();
    common::refused(
        &["compare", c.to_str().unwrap(), a.to_str().unwrap()],
        &["compare reads verify records"],
    );
    for (old, what) in [
        ("h200x2/bandwidth.json", "a bandwidth measurement"),
        ("h200x2/selftest.json", "selftest results"),
        ("h200x2/env.json", "a machine description"),
        ("h200x2/compare-torch/compare.json", "a comparison"),
    ] {
        let p = committed(old);
        common::refused(
            &["compare", p.to_str().unwrap(), a.to_str().unwrap()],
            &[what],
        );
    }
}

#[test]
fn committed_sweep_and_old_selftest_files_render() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = run_report(
        &[
            committed("h200x2/sweep-proto-algo.jsonl"),
            committed("h200x2/selftest.json"),
            committed("h200x1/selftest/selftest.json"),
        ],
        &out,
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let md = read(&out.join("report.md"));
    let committed_txt = read(&committed("h200x2/sweep-proto-algo.txt"));
    // The committed sweep's ranking rows, as the sweep printed them at the time.
    let row = committed_txt
        .lines()
        .find(|l| l.starts_with("1 ") && l.contains("p01-PROTO-LL_ALGO-Ring"))
        .expect("the committed sweep output has its first-ranked row");
    assert!(md.contains(row.trim_end()), "report.md lacks {row:?}\n{md}");
    assert!(md.contains("| selftest.json | 120 | 120 | 0 | - |"), "{md}");
    assert!(md.contains("selftest (no envelope)"), "{md}");
}
