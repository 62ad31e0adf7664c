//! `verifybench trace` on public traces that real jobs wrote (tests/data/traces/hta/,
//! hta-sampled/ and param-dlrm-8ranks/, see tests/data/traces/README.md for their sources and
//! licences). The expected values were computed independently of verifybench, by this Python
//! script over the same files (json + gzip only):
//!
//! ```python
//! import gzip, json, glob, collections, statistics
//! def by_span(d):
//!     ev = d['traceEvents']
//!     spans = sorted([e for e in ev if e.get('cat') == 'user_annotation'
//!                     and e['name'].startswith('ProfilerStep#')], key=lambda e: e['ts'])
//!     rt = {e['args']['correlation']: e for e in ev
//!           if e.get('cat') == 'cuda_runtime' and 'correlation' in e.get('args', {})}
//!     ks = sorted([e for e in ev if e.get('cat') == 'kernel'
//!                  and e['name'].startswith('nccl')], key=lambda e: e['ts'])
//!     # a kernel belongs to the span its launch (the correlated runtime call) falls in
//!     return [(s['name'], s['dur'], [k for k in ks
//!              if s['ts'] <= rt[k['args']['correlation']]['ts'] < s['ts'] + s['dur']])]
//!             for s in spans]
//! ```
//! HTA: spans #2..#6 of 345770, 365256, 346097, 344269, 336328 us, 404 NCCL all-reduce
//! kernels each (median 345770 us). PARAM: one span `ProfilerStep#10` per rank, 8 kernels
//! (5 SendRecv, 3 AllReduce); rank 0's span 14455 us; over the 8 collectives (the k-th kernel
//! of each rank), the rank that starts last is 7 five times, 5 twice, 4 once; the median of
//! (latest start - earliest start) is 559.0 us. HTA's sampled rank 0 (hta-sampled/): spans #551
//! and #552 of 607312 and 622928 us, 5 NCCL SendRecv kernels each (median 615120 us).

use std::path::PathBuf;

use predicates::prelude::*;
use verifybench::trace::{analyse, TraceRequest};

use crate::common;

fn data(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/traces")
        .join(p)
}

#[test]
fn hta_steps_are_the_five_profiler_step_spans() {
    let a = analyse(&TraceRequest::new(vec![data(
        "hta/df_index_resolver.json.gz",
    )]))
    .unwrap();
    assert!(a.step_rule.contains("ProfilerStep#"), "{}", a.step_rule);
    let r = &a.rank_traces[0];
    assert_eq!(r.rank, 1);
    assert_eq!(a.world_size, Some(2));
    assert_eq!(r.collectives.len(), 2020);
    let per: Vec<usize> = r.steps.iter().map(|s| s.end - s.first).collect();
    assert_eq!(per, [404; 5]);
    let durs: Vec<f64> = r.steps.iter().map(|s| s.dur_us).collect();
    assert_eq!(durs, [345770.0, 365256.0, 346097.0, 344269.0, 336328.0]);
    let st = a.step.as_ref().unwrap();
    assert_eq!(st.steps, 5);
    assert_eq!(st.step_us.median, 345770.0);
    assert!(a.sequence.iter().all(|g| g.op == "all_reduce"));
}

/// A public trace (`file` under tests/data/traces) with its `ProfilerStep#N` spans (`steps`)
/// renamed to `name(N)` of category `cat`, written into `dir`: the same spans, timestamps and
/// kernels, held by an engine's step marker instead. No public vLLM trace without
/// `ProfilerStep#` is stored here under a clear licence (those trace-analysis projects keep
/// are compressed binaries out of this repository's reach), so the closest public traces
/// stand in: real ones whose steps are known from their `ProfilerStep#` spans.
fn with_marker(
    dir: &std::path::Path,
    file: &str,
    steps: std::ops::RangeInclusive<usize>,
    cat: &str,
    name: &dyn Fn(usize) -> String,
) -> PathBuf {
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(data(file)).unwrap()),
        &mut text,
    )
    .unwrap();
    // memmem (built optimised) rather than str's searcher, which a test build runs
    // unoptimised over the whole trace
    use memchr::memmem;
    for n in steps {
        let from = format!(r#""cat": "user_annotation", "name": "ProfilerStep#{n}""#);
        let at: Vec<usize> = memmem::find_iter(text.as_bytes(), from.as_bytes()).collect();
        assert_eq!(at.len(), 1, "{from}");
        let to = format!(r#""cat": "{cat}", "name": "{}""#, name(n));
        text.replace_range(at[0]..at[0] + from.len(), &to);
    }
    assert!(memmem::find(text.as_bytes(), b"ProfilerStep#").is_none());
    let p = dir.join("marked.json");
    std::fs::write(&p, text).unwrap();
    p
}

/// `trace --format json` of `p`: the analysis.
fn trace_json(p: &std::path::Path) -> serde_json::Value {
    let o = common::vb()
        .args(["trace", "--format", "json"])
        .arg(p)
        .assert()
        .success();
    let v: serde_json::Value = serde_json::from_slice(&o.get_output().stdout).unwrap();
    v["result"]["data"].clone()
}

#[test]
fn a_trace_without_profiler_steps_is_cut_at_the_engines_step_marker() {
    let dir = tempfile::tempdir().unwrap();
    // HTA's sampled rank 0 (2 ProfilerStep# spans, #551 and #552) with vLLM's annotation
    // (Worker.annotate_profile) in their place: the steps of the unchanged trace, 2 of 5
    // SendRecv, median 615,120 us (the module's script), and the marker named
    let vllm = "execute_context_<n>(<tokens>)_generation_<m>(<tokens>)";
    let p = with_marker(
        dir.path(),
        "hta-sampled/sampled_rank-0.json.gz",
        551..=552,
        "user_annotation",
        &|n| format!("execute_context_0(0)_generation_16({n})"),
    );
    let d = trace_json(&p);
    assert_eq!(
        (&d["step_marker"]["engine"], &d["step_marker"]["marker"]),
        (&"vLLM".into(), &vllm.into())
    );
    assert_eq!(
        (&d["step_marker"]["spans"], &d["step_marker"]["steps"]),
        (&2.into(), &2.into())
    );
    assert_eq!(d["step"]["steps"], 2);
    assert_eq!(d["step"]["collectives_per_step"], 5);
    assert_eq!(d["step"]["step_us"]["median"], 615120.0);
    let rule = d["step_rule"].as_str().unwrap();
    assert!(
        rule.starts_with(&format!(
            "vLLM's step marker {vllm} (2 found, no ProfilerStep# span"
        )),
        "{rule}"
    );
    // PARAM's DLRM rank 0 (one ProfilerStep#10 of 8 collectives, 14,455 us) under each
    // engine's other markers, as their profilers write them
    let param = "param-dlrm-8ranks/worker0_step_12.1694128201545.pt.trace.json.gz";
    type Namer<'a> = &'a dyn Fn(usize) -> String;
    let cases: [(&str, Namer, &str, &str); 3] = [
        (
            "python_function",
            &|n| format!("vllm/v1/worker/gpu_model_runner.py({n}): execute_model"),
            "vLLM",
            "execute_model",
        ),
        (
            "python_function",
            &|n| format!("sglang/srt/managers/scheduler.py({n}): run_batch"),
            "SGLang",
            "run_batch",
        ),
        (
            "user_annotation",
            &|n| format!("[Executor] _forward_step {n}: 0 ctx reqs, 16 gen reqs"),
            "TensorRT-LLM",
            "_forward_step",
        ),
    ];
    for (cat, name, engine, marker) in cases {
        let p = with_marker(dir.path(), param, 10..=10, cat, name);
        let d = trace_json(&p);
        if engine == "vLLM" {
            common::vb()
                .arg("trace")
                .arg(&p)
                .assert()
                .success()
                .stdout(predicate::str::contains(format!(
                    "# steps: vLLM's step marker {marker} (1 found, no ProfilerStep# span"
                )));
        }
        assert_eq!(d["step_marker"]["engine"], engine, "{marker}");
        assert_eq!(d["step_marker"]["marker"], marker);
        assert!(
            d["step_rule"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{engine}'s step marker {marker} (1 found")),
            "{}",
            d["step_rule"]
        );
        assert_eq!(d["step"]["steps"], 1);
        assert_eq!(d["step"]["collectives_per_step"], 8);
        assert_eq!(d["step"]["step_us"]["median"], 14455.0);
    }
    // a name that is no engine's marker names none
    let d = trace_json(&with_marker(
        dir.path(),
        param,
        10..=10,
        "user_annotation",
        &|n| format!("my_step_{n}"),
    ));
    assert!(d.get("step_marker").is_none(), "{d}");
    assert!(!d["step_rule"].as_str().unwrap().contains("step marker"));
}

#[test]
fn hta_step_label_glob_selects_the_same_spans() {
    // HTA's sampled rank 0: spans #551 and #552 of 5 SendRecv each (the module's script)
    let mut req = TraceRequest::new(vec![data("hta-sampled/sampled_rank-0.json.gz")]);
    req.step_label = Some("ProfilerStep#*".into());
    let a = analyse(&req).unwrap();
    let per: Vec<usize> = a.rank_traces[0]
        .steps
        .iter()
        .map(|s| s.end - s.first)
        .collect();
    // A label's step runs from its first collective to its last (not the span): only the
    // counts are compared.
    assert_eq!(per, [5; 2]);
    assert!(
        a.step_rule.contains("'ProfilerStep#*' (2 found)"),
        "{}",
        a.step_rule
    );
}

#[test]
fn param_dlrm_eight_ranks_one_step_and_the_straggler() {
    let a = analyse(&TraceRequest::new(vec![data("param-dlrm-8ranks")])).unwrap();
    assert_eq!(a.ranks.len(), 8);
    assert_eq!(a.world_size, Some(8));
    for r in &a.rank_traces {
        assert_eq!(r.steps.len(), 1, "rank {}", r.rank);
        assert_eq!(r.collectives.len(), 8, "rank {}", r.rank);
        let sr = r.collectives.iter().filter(|c| c.op == "send_recv").count();
        let ar = r
            .collectives
            .iter()
            .filter(|c| c.op == "all_reduce")
            .count();
        assert_eq!((sr, ar), (5, 3), "rank {}", r.rank);
    }
    assert_eq!(a.rank_traces[0].steps[0].dur_us, 14455.0);
    let t = a.attribution.as_ref().unwrap();
    assert_eq!(t.matched, 8);
    let st = t.straggler.as_ref().unwrap();
    assert_eq!(st.rank, 7);
    assert!((st.share - 5.0 / 8.0).abs() < 1e-9, "{}", st.share);
    let last: Vec<usize> = a.ranks.iter().map(|r| r.times_last).collect();
    assert_eq!(last, [0, 0, 0, 0, 1, 2, 0, 5]);
}

#[test]
fn cli_says_which_method_found_the_steps() {
    common::vb()
        .arg("trace")
        .arg(data("param-dlrm-8ranks"))
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "steps: the trace's ProfilerStep# spans (1 found)",
        ))
        .stdout(predicate::str::contains("median start skew 559.0 us"));
}

fn coll_log(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/nccl-coll-public")
        .join(name)
}

#[test]
fn a_log_alone_is_an_input_of_its_own() {
    // pytorch/torchtitan#1369: two processes (pids 191369 and 191370) of one TP=2 job.
    let o = common::vb()
        .arg("trace")
        .arg(coll_log("pytorch-torchtitan-issue1369_tp2.log"))
        .assert()
        .success();
    let out = String::from_utf8_lossy(&o.get_output().stdout).into_owned();
    assert!(out.contains("NCCL COLL log, 7 calls"), "{out}");
    assert!(
        out.contains("hopper01:191369 [0] comm 0x55e290bd32d0 nranks 2"),
        "{out}"
    );
    assert!(
        out.contains("hopper01:191370 [1] comm 0x55fca23fc0f0 nranks 2"),
        "{out}"
    );
    // the folder of all four logs, read recursively, as JSON
    let o = common::vb()
        .args(["trace", "--format", "json"])
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/nccl-coll-public"))
        .assert()
        .success();
    let v: serde_json::Value = serde_json::from_slice(&o.get_output().stdout).unwrap();
    // 7 + 4 + 7 + 7 lines with opCount in the four files (grep -c opCount)
    assert_eq!(v["result"]["data"]["calls"], 25, "{v}");
}

#[test]
fn a_log_with_a_launcher_prefix_on_every_line_is_read_as_a_log() {
    // The public torchtitan#1369 log as torchrun --tee / --local-ranks-filter writes it: the
    // prefix is added here, line by line, to the unchanged public lines (the thread pasted
    // them without one). A file that opens with `[rank0]:` is a log, not a JSON array.
    let text = std::fs::read_to_string(coll_log("pytorch-torchtitan-issue1369_tp2.log")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (name, prefix) in [
        ("rank.log", "[rank0]:"),
        ("default.log", "[default0]:"),
        ("mpirun.log", "[1,0]<stdout>:"),
        ("srun.log", "0: "),
        ("ray.log", "(RayWorkerWrapper pid=4121) "),
        ("rank-colon.log", "rank0: "),
        ("ts.log", "2024-05-01 12:00:00.123 "),
        ("bts.log", "[2024-05-01 12:00:00] "),
    ] {
        let p = dir.path().join(name);
        let lines: String = text.lines().map(|l| format!("{prefix}{l}\n")).collect();
        std::fs::write(&p, lines).unwrap();
        let o = common::vb()
            .args(["trace", "--format", "json"])
            .arg(&p)
            .assert()
            .success();
        let v: serde_json::Value = serde_json::from_slice(&o.get_output().stdout).unwrap();
        // the file's 7 lines, all read; the two processes of the job, not phantom ones
        let d = &v["result"]["data"];
        assert_eq!(d["calls"], 7, "{prefix}: {v}");
        let procs: Vec<String> = d["sequences"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| format!("{}:{}", s["host"].as_str().unwrap(), s["pid"]))
            .collect();
        assert_eq!(procs, ["hopper01:191369", "hopper01:191370"], "{prefix}");
    }
    // explain --nccl-log reads the same torchrun-prefixed file as a log, not as JSON
    common::vb()
        .args(["explain", "--verify-ms", "20", "--nccl-log"])
        .arg(dir.path().join("rank.log"))
        .assert()
        .success();
}

#[test]
fn a_log_of_another_run_is_refused_naming_both_sides() {
    // HTA's trace is rank 1 of a world of 2, its CPU events all of pid 783658 (read with json +
    // gzip: every event of `cat` cpu_op, cuda_runtime or user_annotation has it); the #203
    // log's 7 lines all begin `gpu1:13135:`. Both sides know their process, and none is the
    // other's.
    let o = common::vb()
        .arg("trace")
        .arg(data("hta/df_index_resolver.json.gz"))
        .arg("--nccl-log")
        .arg(coll_log("NVIDIA-nccl-issue203_tf_2gpu.log"))
        .assert()
        .code(2);
    let err = String::from_utf8_lossy(&o.get_output().stderr).into_owned();
    assert!(
        err.contains("holds processes gpu1:13135, but none of them is a traced process"),
        "{err}"
    );
    assert!(err.contains("pid 783658"), "{err}");
    assert!(
        err.contains("issue203") && err.contains("df_index_resolver"),
        "{err}"
    );
    // PARAM's 8-rank job (world size 8; its send/recv pairs are groups of 2, so the 2-rank
    // communicators of the log could be its own) against the torchtitan log: its ranks' CPU
    // events are pids 59811..59818 (rank r: 59811 + r), the log's processes hopper01:191369
    // and hopper01:191370.
    let o = common::vb()
        .arg("trace")
        .arg(data("param-dlrm-8ranks"))
        .arg("--nccl-log")
        .arg(coll_log("pytorch-torchtitan-issue1369_tp2.log"))
        .assert()
        .code(2);
    let err = String::from_utf8_lossy(&o.get_output().stderr).into_owned();
    assert!(
        err.contains("holds processes hopper01:191369, hopper01:191370, but none"),
        "{err}"
    );
    for r in 0..8 {
        assert!(err.contains(&format!("rank {r} ")), "rank {r}: {err}");
        assert!(
            err.contains(&format!("pid {}", 59811 + r)),
            "rank {r}: {err}"
        );
    }
    assert!(
        err.contains("issue1369") && err.contains("worker0"),
        "{err}"
    );
}

#[test]
fn a_file_that_is_neither_says_why() {
    // An INIT/TUNING log: NCCL lines but no COLL line.
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/nccl-info-2.28.9.log");
    common::vb()
        .arg("trace")
        .arg(p)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("neither a trace"))
        .stderr(predicate::str::contains("did not include COLL"));
}

#[test]
fn an_export_never_replaces_an_input_and_bad_paths_exit_2_first() {
    let d = tempfile::tempdir().unwrap();
    let t = d.path().join("t.json.gz");
    std::fs::copy(data("hta/df_index_resolver.json.gz"), &t).unwrap();
    let before = std::fs::read(&t).unwrap();
    for (flag, out) in [
        ("--export-schedule", t.clone()),
        ("--export-json", t.clone()),
        ("--export-schedule", d.path().to_path_buf()),
        ("--export-json", d.path().join("no/such/folder/x.json")),
    ] {
        common::vb()
            .arg("trace")
            .arg(&t)
            .arg(flag)
            .arg(&out)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(flag));
    }
    assert_eq!(std::fs::read(&t).unwrap(), before, "the input is untouched");
}

#[test]
fn kernels_that_cannot_overlap_on_one_clock_are_counted_and_the_diagnosis_agrees_with_the_skew() {
    // HTA's sampled_rank-{0,1}: pairing the k-th NCCL kernel of each rank (10 each), 6 pairs
    // have min(end) < max(start) (Python over the files: sum(min(a.ts+a.dur, b.ts+b.dur) <
    // max(a.ts, b.ts) for a, b in zip(k0, k1)) == 6).
    let a = analyse(&TraceRequest::new(vec![data("hta-sampled")])).unwrap();
    let t = a.attribution.as_ref().unwrap();
    assert_eq!((t.matched, t.impossible_overlaps), (10, 6));
    assert!(
        a.notes.iter().any(|n| n.starts_with("6 of 10 matched")),
        "{:?}",
        a.notes
    );
    let d = a.diagnosis.join(" ");
    // A 37.6 ms median skew with rank 1 last in 80%: never "the ranks arrive nearly together".
    assert!(t.total.median_skew_us.unwrap() > 30_000.0);
    assert!(!d.contains("nearly together"), "{d}");
    assert!(d.contains("not reliable"), "{d}");
    // backward kernels: the advice is a training job's, not SGLang's
    assert!(d.contains("training job") && !d.contains("SGLang"), "{d}");
}

#[test]
fn a_tp8_kimi_schedule_exported_from_eight_synthetic_ranks_replays_like_plan_tp8() {
    use crate::synth::{self, SynthSpec};
    use verifybench::record::{read_records, Body};
    // SYNTHETIC traces (a simulation, not a profile): 8 ranks, the Kimi-K2.5 TP=8 verify of 3
    // tokens: 123 all-reduces of 3 x 7168 bf16 and one all-gather of 3 x 163840 / 8 per rank.
    let d = tempfile::tempdir().unwrap();
    let s = SynthSpec {
        ranks: 8,
        steps: 3,
        ar_elements: 3 * 7168,
        ag_elements: 3 * 163840 / 8,
        ..Default::default()
    };
    synth::write_dir(&s, d.path(), true).unwrap();
    let out = tempfile::tempdir().unwrap();
    let sched = out.path().join("s.json");
    common::vb()
        .arg("trace")
        .arg(d.path())
        .args([
            "--against-plan",
            "--model",
            "kimi-k2.5",
            "--tp",
            "8",
            "--tokens",
            "3",
        ])
        .arg("--export-schedule")
        .arg(&sched)
        .assert()
        .success();
    let rec = out.path().join("v.json");
    common::vb()
        .args(["verify", "--backend", "model", "--schedule"])
        .arg(&sched)
        .arg("--export-json")
        .arg(&rec)
        .assert()
        .success();
    let planned = out.path().join("p.json");
    common::vb()
        .args(["verify", "--backend", "model", "--tp", "8", "--tokens", "3"])
        .arg("--export-json")
        .arg(&planned)
        .assert()
        .success();
    let (r, p) = (read_records(&rec).unwrap(), read_records(&planned).unwrap());
    let (Body::Verify(a), Body::Verify(b)) = (&r[0].body, &p[0].body) else {
        panic!("verify records")
    };
    assert_eq!((a.workload.tp, a.workload.n_all_reduce), (8, 123));
    let medians = |v: &verifybench::record::VerifyResult| {
        v.runs
            .iter()
            .map(|r| r.per_verify.median_us)
            .collect::<Vec<_>>()
    };
    // the exported collectives priced by the cost model equal plan --tp 8's
    assert_eq!(medians(a), medians(b));
    // and the trace's step is plan's sequence, op for op
    let o = common::vb()
        .args([
            "trace",
            "--format",
            "json",
            "--against-plan",
            "--model",
            "kimi-k2.5",
        ])
        .args(["--tp", "8", "--tokens", "3"])
        .arg(d.path())
        .assert()
        .success();
    let v: serde_json::Value = serde_json::from_slice(&o.get_output().stdout).unwrap();
    assert_eq!(v["result"]["data"]["against_plan"]["same"], true, "{v}");
}
