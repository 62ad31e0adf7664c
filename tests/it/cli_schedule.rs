//! End-to-end tests of `--schedule FILE` (verify, sweep, compare, plan) through the real
//! binary: a schedule exported by `trace --export-schedule` from the committed real trace
//! tests/data/traces/kimi-tp2-world1-eager-rank-0.trace.json.gz (see its README) is replayed
//! exactly, and the flags it conflicts with are refused with exit 2.

use std::path::{Path, PathBuf};

use predicates::prelude::*;
use verifybench::model::schedule_file::ScheduleFile;
use verifybench::model::{Op, Phase};
use verifybench::record::{read_records, Body};

use crate::common;
use common::vb;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/traces")
        .join(name)
}

/// `trace --export-schedule` of the TP2 fixture (one rank replaying TP2's per-rank sizes,
/// so `--tp 2` names its tp) into `dir/exported.json`.
fn export(dir: &Path) -> PathBuf {
    let out = dir.join("exported.json");
    vb().arg("trace")
        .arg(fixture("kimi-tp2-world1-eager-rank-0.trace.json.gz"))
        .args(["--tp", "2", "--export-schedule"])
        .arg(&out)
        .assert()
        .success();
    out
}

/// (kind, dtype, count, bytes) of every collective, in order.
fn collectives(ops: &[Op]) -> Vec<String> {
    ops.iter()
        .filter_map(|o| match o {
            Op::Collective {
                kind,
                dtype,
                count,
                bytes_per_rank,
                ..
            } => Some(format!(
                "{} {} {count} {bytes_per_rank}",
                kind.name(),
                dtype.name()
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn the_export_holds_the_plans_collectives_and_verify_replays_it() {
    let d = tempfile::tempdir().unwrap();
    let file = export(d.path());
    let f = ScheduleFile::load(&file).unwrap();
    assert_eq!(f.schedule.tp, 2);
    assert!(f.origin.as_deref().unwrap().contains("tp 2 from --tp"));
    let plan = common::kimi(2, 3, Phase::Verify);
    assert_eq!(collectives(&f.schedule.ops), collectives(&plan.ops));
    assert_eq!(f.schedule.ops.len(), 124, "collectives only");

    let rec = d.path().join("v.json");
    vb().args(["verify", "--backend", "model", "--schedule"])
        .arg(&file)
        .arg("--export-json")
        .arg(&rec)
        .assert()
        .success()
        .stdout(predicate::str::contains("trace:kimi-tp2-world1-eager"))
        .stdout(predicate::str::contains("schedule from the file"));
    let r = read_records(&rec).unwrap();
    let Body::Verify(v) = &r[0].body else {
        panic!("a verify record")
    };
    assert_eq!(v.workload.schedule_hash, f.schedule.hash());
    assert_eq!((v.workload.tp, v.workload.n_all_reduce), (2, 123));
    assert!(r[0]
        .provenance
        .notes
        .iter()
        .any(|n| n.contains("kimi-tp2-world1-eager-rank-0.trace.json.gz")));
    // the same collectives priced from the config: the same comm times
    let planned = d.path().join("p.json");
    vb().args(["verify", "--backend", "model", "--tp", "2", "--tokens", "3"])
        .arg("--export-json")
        .arg(&planned)
        .assert()
        .success();
    let p = read_records(&planned).unwrap();
    let (Body::Verify(a), Body::Verify(b)) = (&r[0].body, &p[0].body) else {
        panic!("verify records")
    };
    let medians = |v: &verifybench::record::VerifyResult| {
        v.runs
            .iter()
            .map(|r| r.per_verify.median_us)
            .collect::<Vec<_>>()
    };
    assert_eq!(medians(a), medians(b));

    // compare: the record replays the file's schedule; the config-derived one does not
    vb().arg("compare")
        .arg(&rec)
        .arg("--schedule")
        .arg(&file)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "every record replays the schedule",
        ));
    vb().arg("compare")
        .arg(&planned)
        .arg("--schedule")
        .arg(&file)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("p.json"))
        .stderr(predicate::str::contains("exported.json"));
}

#[test]
fn sweep_children_replay_the_file() {
    let d = tempfile::tempdir().unwrap();
    let file = export(d.path());
    let res = d.path().join("r.jsonl");
    let json = d.path().join("v.json");
    // real child processes (`verify --backend model --schedule ABS`), not the debug mock
    vb().args([
        "sweep",
        "--backend",
        "model",
        "-n",
        "3",
        "-L",
        "NCCL_PROTO=LL,Simple",
    ])
    .arg("--schedule")
    .arg(&file)
    .arg("--results")
    .arg(&res)
    .arg("--export-json")
    .arg(&json)
    .assert()
    .success();
    let hash = ScheduleFile::load(&file).unwrap().schedule.hash();
    let recs = read_records(&json).unwrap();
    assert_eq!(recs.len(), 3);
    for r in &recs {
        let Body::Verify(v) = &r.body else {
            panic!("verify records")
        };
        assert_eq!(
            (v.workload.schedule_hash.as_str(), v.workload.tp),
            (hash.as_str(), 2)
        );
    }
    // and the in-process mock of --debug-mode
    vb().args(["sweep", "--debug-mode", "-n", "3", "-L", "NCCL_PROTO=LL"])
        .arg("--schedule")
        .arg(&file)
        .arg("--results")
        .arg(d.path().join("m.jsonl"))
        .assert()
        .success()
        .stdout(predicate::str::contains("trace:kimi-tp2-world1-eager"));
}

#[test]
fn plan_prints_and_checks_a_schedule_file() {
    let d = tempfile::tempdir().unwrap();
    let file = export(d.path());
    vb().arg("plan")
        .arg("--schedule")
        .arg(&file)
        .assert()
        .success()
        .stdout(predicate::str::is_match(r"all_reduce +bf16 +123 +21,504").unwrap())
        .stdout(predicate::str::is_match(r"all_gather +bf16 +1 +245,760").unwrap())
        .stdout(predicate::str::contains("collectives only: no compute ops"))
        .stdout(predicate::str::contains("host gaps: 124"));
    // a plain `plan --format json` is a schedule file too, and round-trips through plan
    let out = vb()
        .args(["plan", "--format", "json", "--tp", "2"])
        .output()
        .unwrap();
    let plain = d.path().join("plan.json");
    std::fs::write(&plain, &out.stdout).unwrap();
    let again = vb()
        .args(["plan", "--format", "json", "--schedule"])
        .arg(&plain)
        .output()
        .unwrap();
    let f: ScheduleFile = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(f.schedule, common::kimi(2, 3, Phase::Verify));
    // a broken file: exit 2 naming it
    let bad = d.path().join("bad.json");
    std::fs::write(&bad, "{\"ops\": []").unwrap();
    vb().arg("plan")
        .arg("--schedule")
        .arg(&bad)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("bad.json"));
}

#[test]
fn conflicting_flags_and_missing_compute_are_usage_errors() {
    let d = tempfile::tempdir().unwrap();
    let file = export(d.path());
    for flags in [
        &["--model", "deepseek-v3"][..],
        &["--tokens", "4"],
        &["--phase", "decode"],
    ] {
        vb().args(["verify", "--backend", "model", "--schedule"])
            .arg(&file)
            .args(flags)
            .assert()
            .code(2)
            .stderr(predicate::str::contains("--schedule"))
            .stderr(predicate::str::contains(flags[0]));
    }
    vb().args(["verify", "--backend", "model", "--tp", "4", "--schedule"])
        .arg(&file)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--tp 4"))
        .stderr(predicate::str::contains("TP2 schedule"));
    // --tp equal to the file's is accepted
    vb().args([
        "verify",
        "--backend",
        "model",
        "--tp",
        "2",
        "-q",
        "--schedule",
    ])
    .arg(&file)
    .assert()
    .success();
    for mode in ["full", "compute"] {
        vb().args(["verify", "--backend", "model", "--mode", mode, "--schedule"])
            .arg(&file)
            .assert()
            .code(2)
            .stderr(predicate::str::contains("no compute ops"));
        vb().args([
            "sweep",
            "--debug-mode",
            "-L",
            "NCCL_PROTO=LL",
            "--mode",
            mode,
        ])
        .arg("--schedule")
        .arg(&file)
        .arg("--results")
        .arg(d.path().join("x.jsonl"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no compute ops"));
    }
    vb().args(["verify", "--backend", "model", "--schedule"])
        .arg(d.path().join("missing.json"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("missing.json"));
}
