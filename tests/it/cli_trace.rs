//! End-to-end tests of `verifybench trace` through the real binary, on SYNTHETIC traces made by
//! `tests/support/synth.rs` (a simulation with a known late rank, not a profile of a real
//! run) and on the real traces committed under tests/data/traces/ when present.

use std::path::Path;

use crate::synth::{self, SynthSpec};
use assert_cmd::Command;
use predicates::prelude::*;

fn vb() -> Command {
    Command::cargo_bin("verifybench").unwrap()
}

fn synthetic_run(dir: &Path, late: Option<(usize, f64)>) {
    let s = SynthSpec {
        ranks: 2,
        steps: 4,
        late_rank: late,
        ar_elements: 3 * 7168,
        ag_elements: 3 * 163840 / 2,
        ..Default::default()
    };
    synth::write_dir(&s, dir, true).unwrap();
}

#[test]
fn table_names_the_late_rank_and_the_split() {
    let d = tempfile::tempdir().unwrap();
    synthetic_run(d.path(), Some((1, 250.0)));
    vb().arg("trace")
        .arg(d.path())
        .assert()
        .success()
        .stdout(predicate::str::contains("123 all_reduce + 1 all_gather"))
        .stdout(predicate::str::contains("transfer"))
        .stdout(predicate::str::contains("rank 1 last in"))
        .stdout(predicate::str::contains("measured from the trace"))
        .stdout(predicate::str::contains("run the verify from a CUDA graph"));
}

#[test]
fn json_record_and_exports() {
    let d = tempfile::tempdir().unwrap();
    synthetic_run(d.path(), Some((0, 200.0)));
    let out = tempfile::tempdir().unwrap();
    let rec = out.path().join("trace.json");
    let sched = out.path().join("schedule.json");
    let o = vb()
        .args([
            "trace",
            "--format",
            "json",
            "--against-plan",
            "--model",
            "kimi-k2.5",
            "--tp",
            "2",
            "--tokens",
            "3",
        ])
        .arg(d.path())
        .arg("--export-json")
        .arg(&rec)
        .arg("--export-schedule")
        .arg(&sched)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // the record envelope: `other` payloads carry their name and data
    assert_eq!(
        (v["kind"].as_str(), v["result"]["name"].as_str()),
        (Some("other"), Some("trace"))
    );
    assert_eq!(v["source"], "measured");
    let r = &v["result"]["data"];
    assert_eq!(r["step"]["steps"], 4);
    assert_eq!(r["attribution"]["straggler"]["rank"], 0);
    assert_eq!(r["against_plan"]["same"], true);
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&rec).unwrap()).unwrap();
    assert_eq!(file["result"]["data"]["step"], r["step"]);
    let s = verifybench::model::schedule_file::ScheduleFile::load(&sched).unwrap();
    assert_eq!(s.schedule.ops.len(), 124);
    assert_eq!(s.schedule.tokens, 3);
    assert_eq!(s.host_gaps_us.unwrap().len(), 124);
}

#[test]
fn bad_input_exits_2_with_one_line_naming_the_file() {
    let d = tempfile::tempdir().unwrap();
    let bad = d.path().join("cut.json");
    std::fs::write(&bad, "{\"traceEvents\": [{\"ph\": \"X\"").unwrap();
    let o = vb().arg("trace").arg(&bad).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("cut.json") && err.contains("truncated"),
        "{err}"
    );

    let empty = d.path().join("none");
    std::fs::create_dir(&empty).unwrap();
    vb().arg("trace")
        .arg(&empty)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no traces in this folder"));
    vb().arg("trace")
        .arg(d.path().join("missing.json.gz"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("missing.json.gz"));
    let gz = d.path().join("junk.json.gz");
    std::fs::write(&gz, "plain text, not gzip").unwrap();
    vb().arg("trace")
        .arg(&gz)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("junk.json.gz"));
}

#[test]
fn a_partly_readable_folder_says_what_it_skipped() {
    let d = tempfile::tempdir().unwrap();
    synthetic_run(d.path(), None);
    std::fs::write(d.path().join("other.json"), "[1, 2, 3]").unwrap();
    vb().arg("trace")
        .arg(d.path())
        .assert()
        .success()
        .stderr(predicate::str::contains("skipped").and(predicate::str::contains("other.json")))
        .stdout(predicate::str::contains("2 ranks"));
}

#[test]
fn a_schedule_file_of_another_shape_and_a_bad_nccl_log_are_refused() {
    let d = tempfile::tempdir().unwrap();
    synthetic_run(d.path(), None);
    let log = d.path().join("nccl.log");
    std::fs::write(&log, "nothing from NCCL here\n").unwrap();
    vb().arg("trace")
        .arg(d.path().join("rank-0.json.gz"))
        .arg("--nccl-log")
        .arg(&log)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("nccl.log"));
    vb().arg("trace")
        .arg(d.path().join("rank-0.json.gz"))
        .args(["--step-label", "no_such_label"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no_such_label"));
}

/// An NCCL COLL log that matches [`synthetic_run`]: for each of 2 processes (the synthetic
/// traces' pids, 1000 + rank), 4 steps of 123 all-reduces of 21,504 bf16 and one all-gather of
/// 122,880 (what NCCL would log eagerly).
fn synthetic_log(dir: &Path) -> std::path::PathBuf {
    let mut s = String::new();
    for pid in [1000, 1001] {
        for _ in 0..4 {
            for i in 0..124 {
                let (op, n) = if i == 123 {
                    ("AllGather", 3 * 163840 / 2 / 2)
                } else {
                    ("AllReduce", 3 * 7168)
                };
                s += &format!("[rank{}]:host:{pid}:{pid} [{}] NCCL INFO {op}: opCount 0 sendbuff 0x1 recvbuff 0x1 count {n} datatype 9 op 0 root 0 comm 0xc{pid} [nranks=2] stream 0x1\n", pid - 1000, pid - 1000);
            }
        }
    }
    let p = dir.join("nccl.log");
    std::fs::write(&p, s).unwrap();
    p
}

#[test]
fn nccl_log_takes_one_file_so_trace_paths_may_follow_it() {
    let d = tempfile::tempdir().unwrap();
    synthetic_run(d.path(), None);
    let l = tempfile::tempdir().unwrap();
    let log = synthetic_log(l.path());
    vb().arg("trace")
        .arg("--nccl-log")
        .arg(&log)
        .arg(d.path())
        .assert()
        .success()
        .stdout(predicate::str::contains("123 all_reduce + 1 all_gather"))
        // every size came from the trace: the log was checked, not used, and says so
        .stdout(predicate::str::contains("gave no size"));
    // repeated, one file per flag
    vb().arg("trace")
        .arg("--nccl-log")
        .arg(&log)
        .arg("--nccl-log")
        .arg(&log)
        .arg(d.path())
        .assert()
        .success();
}

#[test]
fn export_tp_must_match_a_real_group_size() {
    let d = tempfile::tempdir().unwrap();
    synthetic_run(d.path(), None);
    let out = tempfile::tempdir().unwrap();
    let sched = out.path().join("s.json");
    vb().arg("trace")
        .arg(d.path())
        .args(["--tp", "4", "--export-schedule"])
        .arg(&sched)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--tp 4"))
        .stderr(predicate::str::contains("group size 2"));
    assert!(!sched.exists(), "nothing written on failure");
}
