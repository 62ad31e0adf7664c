//! End-to-end tests of `breakeven --from-trace ROLE=PATH` and `--accept-from-log FILE`
//! through the real binary, on the committed real trace
//! tests/data/traces/kimi-tp1-world1-eager-rank-0.trace.json.gz (see its README) and on
//! tests/data/sglang-decode-eagle3.log, written by hand in SGLang's log format.

use std::path::{Path, PathBuf};

use predicates::prelude::*;

use crate::common;
use common::vb;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn trace() -> PathBuf {
    data("traces/kimi-tp1-world1-eager-rank-0.trace.json.gz")
}

fn role(r: &str, p: &Path) -> String {
    format!("{r}={}", p.display())
}

fn json(args: &[String]) -> serde_json::Value {
    let out = vb()
        .args(["breakeven", "--format", "json"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_trace_gives_the_verify_time_and_the_log_the_accept_length() {
    // the step time `trace` reports for the same file
    let t = vb()
        .args(["trace", "--format", "json"])
        .arg(trace())
        .output()
        .unwrap();
    assert!(t.status.success());
    let rec: serde_json::Value = serde_json::from_slice(&t.stdout).unwrap();
    let step_ms = rec["result"]["data"]["step"]["step_us"]["median"]
        .as_f64()
        .unwrap()
        / 1000.0;

    let v = json(&[
        "--from-trace".into(),
        role("verify", &trace()),
        "--decode-ms".into(),
        "12".into(),
        "--draft-steps".into(),
        "3".into(),
        "--accept-from-log".into(),
        data("sglang-decode-eagle3.log").display().to_string(),
    ]);
    let i = &v["inputs"];
    let tv = &i["verify_ms"][0];
    assert!(
        (tv["value"].as_f64().unwrap() - step_ms).abs() < 1e-9,
        "{tv}"
    );
    // The trace holds collectives and no compute kernel (see its README): its step is a
    // lower bound of the verify, measured, never the verify's time.
    assert_eq!(tv["origin"], "lower_bound", "{tv}");
    assert_eq!(tv["modeled"], false, "{tv}");
    let detail = tv["detail"].as_str().unwrap();
    assert!(detail.contains("measured from the trace"), "{detail}");
    assert!(
        detail.contains(
            "no compute kernel in the trace, collectives only: the forward's compute is missing"
        ),
        "{detail}"
    );
    assert_eq!(tv["file"], "kimi-tp1-world1-eager-rank-0.trace.json.gz");
    let row = &v["rows"][0];
    assert_eq!(row["bound"], true, "{row}");
    // an upper bound of tokens/s proves no gain: no point of the row beats plain decoding
    assert!(
        row["grid"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["beats_baseline"] == false),
        "{row}"
    );
    assert!(i["notes"]
        .to_string()
        .contains("is a lower bound (see its origin): the verify's other part is missing"));
    // (2.40 + 2.60 + 2.20) / 3; the 0.00 line (no speculation) is left out
    let tau = &i["accept_length"];
    assert!((tau["value"].as_f64().unwrap() - 2.4).abs() < 1e-9, "{tau}");
    assert_eq!(tau["origin"], "measured");
    assert!(tau["detail"]
        .as_str()
        .unwrap()
        .contains("measured from the log"));
    let notes = i["notes"].to_string();
    assert!(notes.contains("cuda graph: False"), "{notes}");
}

#[test]
fn a_decode_trace_gives_the_decode_time_and_the_table_labels_it() {
    // SYNTHETIC: 8 ranks of 3 steps with a compute kernel before every collective
    // (tests/support/synth.rs): a whole forward, measured
    let dir = tempfile::tempdir().unwrap();
    let s = crate::synth::SynthSpec {
        ranks: 8,
        steps: 3,
        ..Default::default()
    };
    crate::synth::write_dir(&s, dir.path(), true).unwrap();
    vb().args(["breakeven", "--verify-ms", "30", "--draft-steps", "3"])
        .args(["--accept-length", "2.5", "--from-trace"])
        .arg(role("decode", dir.path()))
        .assert()
        .success()
        .stdout(predicate::str::is_match(r"T_decode +[0-9.]+ ms +measured \(rank-0\.json\.gz[^ ]*, .*decode step measured from the trace").unwrap());
}

#[test]
fn a_training_trace_is_no_decode_step() {
    // PARAM's DLRM training step (tests/data/traces/README.md): 8 ranks, 5 SendRecv and 3
    // AllReduce kernels per rank, backward kernels among the rest: refused, not taken as the
    // decode time
    vb().args(["breakeven", "--verify-ms", "30", "--draft-steps", "3"])
        .args(["--accept-length", "2.5", "--from-trace"])
        .arg(role("decode", &data("traces/param-dlrm-8ranks")))
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "--from-trace decode=",
        ))
        .stderr(predicate::str::contains(
            "a training trace, not a decode: 8 collectives per step (5 send_recv + 3 all_reduce) in a world of 8 ranks",
        ))
        .stderr(predicate::str::contains("(--decode-ms)"));
}

#[test]
fn a_collectives_only_decode_trace_is_refused() {
    // no compute kernel in it: a decode time below the real one would overstate what
    // speculation gains, so it is not taken, even as a bound
    vb().args(["breakeven", "--verify-ms", "30", "--draft-steps", "3"])
        .args(["--accept-length", "2.5", "--from-trace"])
        .arg(role("decode", &trace()))
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "the decode time is only a part of the forward (lower bound, measured (kimi-tp1-world1-eager-rank-0.trace.json.gz",
        ))
        .stderr(predicate::str::contains("give --decode-ms"));
}

#[test]
fn bad_traces_roles_and_logs_exit_2_naming_the_file() {
    let base = ["breakeven", "--decode-ms", "12", "--draft-steps", "3"];
    // no role
    vb().args(base)
        .arg("--from-trace")
        .arg(trace())
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--from-trace"))
        .stderr(predicate::str::contains("verify=PATH"));
    vb().args(base)
        .args(["--from-trace", "prefill=x.json"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("role 'prefill'"));
    // a trace without collectives (a CUDA graph captured before profiling): no step
    let graph = data("traces/kimi-tp1-world1-graph-rank-0.trace.json.gz");
    vb().args(base)
        .arg("--from-trace")
        .arg(role("verify", &graph))
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "kimi-tp1-world1-graph-rank-0.trace.json.gz",
        ));
    // not a trace
    let d = tempfile::tempdir().unwrap();
    let junk = d.path().join("junk.json");
    std::fs::write(&junk, "not json").unwrap();
    vb().args(base)
        .arg("--from-trace")
        .arg(role("verify", &junk))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("junk.json"));
    // a log without accept lengths, a missing log
    vb().args(base)
        .args(["--verify-ms", "20", "--accept-from-log"])
        .arg(data("traces/kimi-tp1-world1-nccl-coll.log"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("kimi-tp1-world1-nccl-coll.log"));
    vb().args(base)
        .args(["--verify-ms", "20", "--accept-from-log"])
        .arg(d.path().join("missing.log"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("missing.log"));
    // one acceptance source only
    vb().args(base)
        .args([
            "--verify-ms",
            "20",
            "--accept-length",
            "2",
            "--accept-from-log",
        ])
        .arg(data("sglang-decode-eagle3.log"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--accept-length"));
    // a measured accept length above k+1 is refused like a given one
    vb().args(["breakeven", "--decode-ms", "12", "--draft-steps", "1"])
        .args(["--verify-ms", "20", "--accept-from-log"])
        .arg(data("sglang-decode-eagle3.log"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--accept-from-log"));
}

/// A vLLM MTP log (tests/data/vllm-glm51-mtp3-tp8.log, built from vLLM's log formats: see
/// tests/data/README.md) gives the draft count as well: k = 3 from its speculative config, so
/// `--accept-from-log` needs no --draft-steps; its figures are mapped to the accept length in a
/// note. The GLM-5.1 DCP8 C1 run's times (20.14 ms plain, 37.47 ms per MTP step, the drafts
/// inside it: no draft or overhead beside it): 2.221 / 37.47 ms = 59.27 tok/s.
#[test]
fn a_vllm_log_gives_k_and_its_accept_length() {
    let v = json(&[
        "--decode-ms".into(),
        "20.14".into(),
        "--verify-ms".into(),
        "37.47".into(),
        "--draft-ms".into(),
        "0".into(),
        "--overhead-ms".into(),
        "0".into(),
        "--accept-from-log".into(),
        data("vllm-glm51-mtp3-tp8.log").display().to_string(),
    ]);
    let i = &v["inputs"];
    assert_eq!(i["draft_steps"], 3, "{i}");
    assert_eq!(i["draft_steps_origin"]["origin"], "derived", "{i}");
    assert!(
        i["draft_steps_origin"]["from"]
            .as_str()
            .unwrap()
            .contains("num_spec_tokens=3"),
        "{i}"
    );
    // 1 + 5006 accepted / 4100 drafts
    let tau = i["accept_length"]["value"].as_f64().unwrap();
    assert!((tau - (1.0 + 5006.0 / 4100.0)).abs() < 1e-9, "{tau}");
    let notes = i["notes"].to_string();
    assert!(
        notes.contains("1 + k x rate = 1 + 3 x 0.407 = 2.22"),
        "{notes}"
    );
    let tps = v["rows"][0]["at_accept_length"]["tokens_per_s"]
        .as_f64()
        .unwrap();
    assert!((tps - 1000.0 * tau / 37.47).abs() < 1e-6, "{tps}");
    // --draft-steps still wins over the log
    let v = json(&[
        "--decode-ms".into(),
        "20.14".into(),
        "--verify-ms".into(),
        "37.47".into(),
        "--draft-steps".into(),
        "4".into(),
        "--accept-from-log".into(),
        data("vllm-glm51-mtp3-tp8.log").display().to_string(),
    ]);
    assert_eq!(v["inputs"]["draft_steps"], 4);
}
