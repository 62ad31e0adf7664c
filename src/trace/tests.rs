//! Tests of the whole pipeline on SYNTHETIC traces ([`super::synth`]): no two-GPU machine is
//! available to profile, so the known answers (an injected delay, a step count, eager or
//! graph) come from the simulation, not from a real run.

use std::path::{Path, PathBuf};

use super::synth::{self, SynthSpec};
use super::*;

fn analyse_spec(s: &SynthSpec) -> (tempfile::TempDir, Analysis) {
    let dir = tempfile::tempdir().unwrap();
    synth::write_dir(s, dir.path(), false).unwrap();
    let a = analyse(&TraceRequest::new(vec![dir.path().to_path_buf()])).unwrap();
    (dir, a)
}

#[test]
fn synthetic_two_ranks_injected_delay_is_recovered_within_10_percent() {
    // Rank 1 is 300 us late before every collective; the GPU work is shorter than the host
    // gaps, so rank 0's kernel waits ~300 us in each collective.
    let s = SynthSpec {
        late_rank: Some((1, 300.0)),
        jitter_us: 0.0,
        ..Default::default()
    };
    let (_d, a) = analyse_spec(&s);
    let t = a.attribution.as_ref().unwrap();
    let st = t.straggler.as_ref().unwrap();
    assert_eq!(st.rank, 1);
    assert!(st.share > 0.95, "{}", st.share);
    assert!(
        (st.median_lag_us - 300.0).abs() < 30.0,
        "lag {}",
        st.median_lag_us
    );
    let per_coll_wait0 = t.total.waiting_us[0] / t.matched as f64;
    assert!(
        (per_coll_wait0 - 300.0).abs() < 30.0,
        "waiting {per_coll_wait0}"
    );
    let per_coll_transfer = t.total.transfer_us / t.matched as f64;
    assert!(
        (per_coll_transfer - s.transfer_us).abs() < 0.5,
        "{per_coll_transfer}"
    );
    let step = a.step.as_ref().unwrap();
    assert_eq!(step.eager_steps, step.steps);
    let text = a.diagnosis.join(" ");
    assert!(
        text.contains("rank 1 last in 100% of collectives"),
        "{text}"
    );
    assert!(text.contains("run the verify from a CUDA graph"), "{text}");
}

#[test]
fn synthetic_steps_found_and_counted() {
    let s = SynthSpec {
        ranks: 1,
        steps: 6,
        ..Default::default()
    };
    let (_d, a) = analyse_spec(&s);
    let st = a.step.as_ref().unwrap();
    assert_eq!(st.steps, 6);
    assert_eq!(st.collectives_per_step, 124);
    assert_eq!(st.pattern, "123 all_reduce + 1 all_gather");
    assert_eq!(a.sequence.len(), 2);
    assert_eq!(
        (
            a.sequence[0].op.as_str(),
            a.sequence[0].per_step,
            a.sequence[0].bytes
        ),
        ("all_reduce", 123, Some(43008))
    );
    assert_eq!(
        (
            a.sequence[1].op.as_str(),
            a.sequence[1].elements,
            a.sequence[1].dtype.as_deref()
        ),
        ("all_gather", Some(61440), Some("bf16"))
    );
    // one rank: no split, and the diagnosis says why
    assert!(st.transfer_us.is_none());
    assert!(a.diagnosis.iter().any(|d| d.contains("One rank's trace")));
    // step = host-bound: 124 x (gap + launches) at least
    assert!(
        st.step_us.median > 124.0 * s.host_gap_us,
        "{}",
        st.step_us.median
    );
}

#[test]
fn synthetic_graph_steps_are_told_from_eager_ones() {
    let s = SynthSpec {
        graph: true,
        steps: 3,
        ..Default::default()
    };
    let (_d, a) = analyse_spec(&s);
    let st = a.step.as_ref().unwrap();
    assert_eq!((st.graph_steps, st.eager_steps), (3, 0));
    assert_eq!(st.mode_words(), "CUDA graph");
    // graph: kernels back to back, ranks together, so no waiting
    assert!(st.waiting_us.unwrap().median < 1.0);
}

#[test]
fn synthetic_kernel_names_only_give_op_and_dtype_and_the_log_gives_sizes() {
    let s = SynthSpec {
        with_args: false,
        ranks: 1,
        steps: 3,
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    synth::write_dir(&s, dir.path(), false).unwrap();
    let a = analyse(&TraceRequest::new(vec![dir.path().to_path_buf()])).unwrap();
    let g = &a.sequence[0];
    assert_eq!(
        (g.op.as_str(), g.dtype.as_deref(), g.elements),
        ("all_reduce", Some("bf16"), None)
    );
    assert_eq!(g.size_from, extract::SizeFrom::Unknown);
    assert!(a.diagnosis.iter().any(|d| d.contains("sizes are unknown")));
    // One call of each by the traced process (the synthetic rank 0 is pid 1000): too few for
    // 3 eager steps, a log cut short or of another run.
    let log = dir.path().join("nccl.log");
    let ar = "h:1000:1000 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 21504 datatype 9 op 0 root 0 comm 0x5 [nranks=1] stream 0x2\n";
    let ag = "h:1000:1000 [0] NCCL INFO AllGather: opCount 0 sendbuff 0x1 recvbuff 0x1 count 61440 datatype 9 op 0 root 0 comm 0x5 [nranks=1] stream 0x2\n";
    std::fs::write(&log, format!("{ar}{ag}")).unwrap();
    let mut req = TraceRequest::new(vec![dir.path().join("rank-0.json")]);
    req.nccl_logs = vec![log.clone()];
    let e = analyse(&req).unwrap_err().to_string();
    assert!(
        e.contains("1 all_gather calls of process h:1000") && e.contains("ran 3 all_gather"),
        "{e}"
    );
    // What NCCL logs for 3 eager steps: every call.
    std::fs::write(&log, format!("{}{ag}", ar.repeat(123)).repeat(3)).unwrap();
    let a = analyse(&req).unwrap();
    let g = &a.sequence[0];
    assert_eq!(
        (g.elements, g.bytes, g.size_from),
        (Some(21504), Some(43008), extract::SizeFrom::NcclLog)
    );
    assert_eq!(a.sequence[1].elements, Some(61440));
}

#[test]
fn chrome_writer_round_trips_through_the_reader() {
    let s = SynthSpec {
        late_rank: Some((0, 100.0)),
        steps: 3,
        ..Default::default()
    };
    let (_d, a) = analyse_spec(&s);
    let tracks = chrome::tracks_of(&a.rank_traces);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("replay.json");
    chrome::write_file(&tracks, 2, &p).unwrap();
    let back = analyse(&TraceRequest::new(vec![p.clone()])).unwrap();
    assert_eq!(back.ranks.len(), 2);
    for (x, y) in a.rank_traces.iter().zip(&back.rank_traces) {
        assert_eq!(x.rank, y.rank);
        assert_eq!(x.collectives.len(), y.collectives.len());
        for (c, d) in x.collectives.iter().zip(&y.collectives) {
            assert_eq!(
                (&c.op, &c.dtype, c.elements, c.group_size),
                (&d.op, &d.dtype, d.elements, d.group_size)
            );
            assert!((c.gpu_dur_us.unwrap() - d.gpu_dur_us.unwrap()).abs() < 1e-6);
            assert_eq!(c.launch_us, d.launch_us);
        }
        assert_eq!(x.host_gaps_us, y.host_gaps_us);
    }
    let (s0, s1) = (a.attribution.unwrap(), back.attribution.unwrap());
    assert_eq!(s0.straggler.unwrap().rank, 0);
    assert_eq!(s1.straggler.unwrap().rank, 0);
    assert!((s0.total.transfer_us - s1.total.transfer_us).abs() < 1e-3);
}

fn kimi_tp2_spec() -> SynthSpec {
    // Kimi-K2.5 TP2, 3 tokens: all-reduce 3 x 7168, all-gather 3 x 163840 / 2
    SynthSpec {
        ranks: 2,
        steps: 3,
        ar_elements: 3 * 7168,
        ag_elements: 3 * 163840 / 2,
        ..Default::default()
    }
}

fn kimi_plan(tp: u64) -> crate::model::Schedule {
    let opt = crate::model::ScheduleOptions {
        tp,
        tokens: 3,
        ..Default::default()
    };
    crate::model::build(
        &crate::model::presets::preset("kimi-k2.5").unwrap(),
        &opt,
        crate::model::Phase::Verify,
    )
    .unwrap()
}

#[test]
fn synthetic_kimi_step_exports_the_plans_collectives() {
    let (_d, a) = analyse_spec(&kimi_tp2_spec());
    let plan = kimi_plan(2);
    let diff = against::against_plan(&a, &plan).unwrap();
    assert!(diff.same, "{diff:?}");
    let f = against::schedule_file(&a, 3).unwrap();
    let planned: Vec<_> = plan
        .ops
        .iter()
        .filter(|o| matches!(o, crate::model::Op::Collective { .. }))
        .map(|o| match o {
            crate::model::Op::Collective {
                kind,
                dtype,
                count,
                bytes_per_rank,
                ..
            } => (*kind, *dtype, *count, *bytes_per_rank),
            _ => unreachable!(),
        })
        .collect();
    let got: Vec<_> = f
        .schedule
        .ops
        .iter()
        .map(|o| match o {
            crate::model::Op::Collective {
                kind,
                dtype,
                count,
                bytes_per_rank,
                ..
            } => (*kind, *dtype, *count, *bytes_per_rank),
            _ => panic!("compute ops are left out"),
        })
        .collect();
    assert_eq!(planned, got);
    assert_eq!(f.schedule.tp, 2);
    let gaps = f.host_gaps_us.as_ref().unwrap();
    assert_eq!(gaps.len(), got.len());
    // between consecutive collective launches: the compute op's host gap and launch
    assert!(gaps[5] > kimi_tp2_spec().host_gap_us, "{}", gaps[5]);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.json");
    f.save(&p).unwrap();
    assert_eq!(
        crate::model::schedule_file::ScheduleFile::load(&p).unwrap(),
        f
    );
    // against TP 8 the all-reduces are the same (T x hidden) but the logits all-gather is not
    let d8 = against::against_plan(&a, &kimi_plan(8)).unwrap();
    assert!(!d8.same);
    assert_eq!(d8.first_difference.as_ref().unwrap().0, 123);
}

#[test]
fn gzip_traces_read_like_plain_ones() {
    let s = SynthSpec {
        steps: 2,
        ..Default::default()
    };
    let d1 = tempfile::tempdir().unwrap();
    let d2 = tempfile::tempdir().unwrap();
    synth::write_dir(&s, d1.path(), false).unwrap();
    synth::write_dir(&s, d2.path(), true).unwrap();
    let a = analyse(&TraceRequest::new(vec![d1.path().into()])).unwrap();
    let b = analyse(&TraceRequest::new(vec![d2.path().into()])).unwrap();
    assert_eq!(a.step, b.step);
    assert_eq!(a.sequence, b.sequence);
}

fn err(inputs: Vec<PathBuf>) -> anyhow::Error {
    analyse(&TraceRequest::new(inputs)).unwrap_err()
}

#[test]
fn bad_inputs_are_usage_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let empty = d.join("empty");
    std::fs::create_dir(&empty).unwrap();
    let e = err(vec![empty.clone()]);
    assert_eq!(crate::error::exit_code(&e), 2);
    assert!(e.to_string().contains("no traces in this folder"), "{e}");
    let other = d.join("browser.json");
    std::fs::write(
        &other,
        r#"{"traceEvents":[{"ph":"X","cat":"blink","name":"Paint","ts":1,"dur":2}]}"#,
    )
    .unwrap();
    let e = err(vec![other]);
    assert!(
        e.to_string().contains("browser.json") && e.to_string().contains("no GPU events"),
        "{e}"
    );
    // different world sizes
    let a = synth::to_strings(&SynthSpec {
        ranks: 2,
        steps: 2,
        ..Default::default()
    });
    let b = synth::to_strings(&SynthSpec {
        ranks: 4,
        steps: 2,
        ..Default::default()
    });
    let runs = d.join("runs");
    std::fs::create_dir(&runs).unwrap();
    std::fs::write(runs.join("rank-0.json"), &a[0]).unwrap();
    std::fs::write(runs.join("rank-1.json"), &b[1]).unwrap();
    let e = err(vec![runs.clone()]);
    assert_eq!(crate::error::exit_code(&e), 2);
    assert!(
        e.to_string().contains("world size") && e.to_string().contains("different runs"),
        "{e}"
    );
    // different step counts
    let c = synth::to_strings(&SynthSpec {
        ranks: 2,
        steps: 3,
        ..Default::default()
    });
    std::fs::write(runs.join("rank-1.json"), &c[1]).unwrap();
    let e = err(vec![runs.clone()]);
    assert!(
        e.to_string().contains("steps") && e.to_string().contains("different runs"),
        "{e}"
    );
}

#[test]
fn a_partly_readable_folder_skips_the_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    let s = SynthSpec {
        ranks: 2,
        steps: 2,
        ..Default::default()
    };
    synth::write_dir(&s, dir.path(), false).unwrap();
    let full = std::fs::read_to_string(dir.path().join("rank-1.json")).unwrap();
    std::fs::write(dir.path().join("rank-1.json"), &full[..full.len() / 2]).unwrap();
    std::fs::write(dir.path().join("notes.json"), "not json").unwrap();
    let a = analyse(&TraceRequest::new(vec![dir.path().into()])).unwrap();
    assert_eq!(a.ranks.len(), 1);
    assert_eq!(a.skipped.len(), 2);
    assert!(a
        .skipped
        .iter()
        .any(|s| s.reason.contains("rank-1.json") && s.reason.contains("truncated")));
    assert!(a
        .skipped
        .iter()
        .any(|s| s.reason.contains("notes.json") && s.reason.contains("not JSON")));
    // named directly, the same file is fatal
    let e = err(vec![dir.path().join("rank-1.json")]);
    assert_eq!(crate::error::exit_code(&e), 2);
}

// ---- real traces: torch.profiler on one H200 (tests/data/traces/README.md) ----

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/traces")
        .join(name)
}

fn real(name: &str) -> Analysis {
    analyse(&TraceRequest::new(vec![fixture(name)])).unwrap()
}

fn expect_kimi_sequence(a: &Analysis, ag_elements: u64) {
    let st = a.step.as_ref().unwrap();
    assert_eq!(st.steps, 3, "three profiled replays");
    assert_eq!(st.pattern, "123 all_reduce + 1 all_gather");
    assert_eq!(a.sequence.len(), 2, "{:?}", a.sequence);
    let (ar, ag) = (&a.sequence[0], &a.sequence[1]);
    assert_eq!(
        (
            ar.op.as_str(),
            ar.dtype.as_deref(),
            ar.elements,
            ar.bytes,
            ar.per_step,
            ar.group_size
        ),
        (
            "all_reduce",
            Some("bf16"),
            Some(21504),
            Some(43008),
            123,
            Some(1)
        )
    );
    assert_eq!(
        (
            ag.op.as_str(),
            ag.dtype.as_deref(),
            ag.elements,
            ag.bytes,
            ag.per_step
        ),
        (
            "all_gather",
            Some("bf16"),
            Some(ag_elements),
            Some(2 * ag_elements),
            1
        )
    );
    // every collective of the trace, not only the first step's
    let r = &a.rank_traces[0];
    assert_eq!(r.collectives.len(), 3 * 124);
    assert!(r
        .collectives
        .iter()
        .all(|c| c.size_from == extract::SizeFrom::Trace));
    assert_eq!(st.eager_steps, 3);
}

#[test]
fn real_eager_tp1_trace_collectives_and_steps() {
    let a = real("kimi-tp1-world1-eager-rank-0.trace.json.gz");
    expect_kimi_sequence(&a, 491520);
    assert_eq!(a.world_size, Some(1));
    let diff = against::against_plan(&a, &kimi_plan(1)).unwrap();
    assert!(diff.same, "{diff:?}");
    // the all-gather's device copy is its GPU side
    let ag = a.rank_traces[0]
        .collectives
        .iter()
        .find(|c| c.op == "all_gather")
        .unwrap();
    assert!(ag.gpu_dur_us.unwrap() > 0.0 && ag.gpu_dur_us.unwrap() < 100.0);
}

#[test]
fn real_eager_tp2_trace_exports_the_plans_ops() {
    let a = real("kimi-tp2-world1-eager-rank-0.trace.json.gz");
    expect_kimi_sequence(&a, 245760);
    let plan = kimi_plan(2);
    let f = against::schedule_file(&a, 3).unwrap();
    let planned: Vec<_> = plan
        .ops
        .iter()
        .filter(|o| matches!(o, crate::model::Op::Collective { .. }))
        .map(|o| match o {
            crate::model::Op::Collective {
                kind,
                dtype,
                count,
                bytes_per_rank,
                ..
            } => (*kind, *dtype, *count, *bytes_per_rank),
            _ => unreachable!(),
        })
        .collect();
    let got: Vec<_> = f
        .schedule
        .ops
        .iter()
        .map(|o| match o {
            crate::model::Op::Collective {
                kind,
                dtype,
                count,
                bytes_per_rank,
                ..
            } => (*kind, *dtype, *count, *bytes_per_rank),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(planned, got);
}

#[test]
fn real_traces_step_label_gives_the_same_steps() {
    let mut req = TraceRequest::new(vec![fixture("kimi-tp1-world1-eager-rank-0.trace.json.gz")]);
    req.step_label = Some("verify_step".into());
    let a = analyse(&req).unwrap();
    let st = a.step.as_ref().unwrap();
    assert_eq!((st.steps, st.collectives_per_step), (3, 124));
    assert!(a.step_rule.contains("verify_step"));
}

#[test]
fn real_delay_trace_shows_the_50_us_host_delay() {
    let median_gap = |name: &str| {
        let a = real(name);
        let g: Vec<f64> = a.rank_traces[0].host_gaps_us[1..].to_vec();
        crate::measure::attribution::Spread::of(&g).unwrap().median
    };
    let plain = median_gap("kimi-tp1-world1-eager-rank-0.trace.json.gz");
    let late = median_gap("kimi-tp1-world1-delay-eager-rank-0.trace.json.gz");
    assert!(
        (late - plain - 50.0).abs() < 15.0,
        "host gap {plain:.1} us without, {late:.1} us with the 50 us delay"
    );
}

#[test]
fn real_graph_trace_without_collectives_says_why() {
    let e = analyse(&TraceRequest::new(vec![fixture(
        "kimi-tp1-world1-graph-rank-0.trace.json.gz",
    )]))
    .unwrap_err();
    assert_eq!(crate::error::exit_code(&e), 2);
    assert!(e.to_string().contains("cudaGraphLaunch"), "{e}");
}

#[test]
fn old_style_kernel_names_only_with_the_nccl_log_fill_in() {
    // synthetic kernels without arguments + the real log of the TP1 run
    let s = SynthSpec {
        with_args: false,
        ranks: 1,
        steps: 2,
        ar_elements: 21504,
        ag_elements: 491520,
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    synth::write_dir(&s, dir.path(), false).unwrap();
    // The log's lines as if the synthetic process (pid 1000) had written them: a log of
    // another process is refused (matched by pid).
    let real = std::fs::read_to_string(fixture("kimi-tp1-world1-nccl-coll.log")).unwrap();
    let mut req = TraceRequest::new(vec![dir.path().into()]);
    req.nccl_logs = vec![fixture("kimi-tp1-world1-nccl-coll.log")];
    let e = analyse(&req).unwrap_err().to_string();
    assert!(e.contains("holds processes vm:485, but none"), "{e}");
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("coll.log");
    std::fs::write(&log, real.replace("vm:485:", "vm:1000:")).unwrap();
    req.nccl_logs = vec![log];
    let a = analyse(&req).unwrap();
    assert_eq!(a.sequence[0].elements, Some(21504));
    assert_eq!(a.sequence[1].elements, Some(491520));
    assert_eq!(a.sequence[1].size_from, extract::SizeFrom::NcclLog);
}

// ---- the event prefilter reads exactly what the reference serde path reads ----

fn same_read(bytes: &[u8], path: &Path, label: Option<&str>) {
    let opts = reader::ReadOptions {
        step_label: label.map(str::to_string),
        custom_ops: false,
    };
    // the reference reader's deserialization, from the slice (serde's reader of a stream
    // takes a byte per call: half this test's time in a test build, for the same events)
    let a = reader::read_slice(bytes, path, &opts).unwrap();
    let b = reader::read_fast(bytes, path, &opts)
        .unwrap_or_else(|| panic!("{}: the fast reader gave up", path.display()));
    let what = path.display();
    assert_eq!(a.gpu, b.gpu, "{what}");
    assert_eq!(a.runtime, b.runtime, "{what}");
    assert_eq!(a.comms, b.comms, "{what}");
    assert_eq!(a.labels, b.labels, "{what}");
    assert_eq!(a.profiler_steps, b.profiler_steps, "{what}");
    assert_eq!(a.engine_steps, b.engine_steps, "{what}");
    assert_eq!(a.names, b.names, "{what}");
    assert_eq!(a.events_seen, b.events_seen, "{what}");
    assert_eq!(
        (a.rank, a.world_size, a.rank_from_info),
        (b.rank, b.world_size, b.rank_from_info),
        "{what}"
    );
    assert!(
        !a.gpu.is_empty() || !a.comms.is_empty(),
        "{what}: nothing read"
    );
}

#[test]
fn prefilter_gives_the_reference_result_on_fixtures_and_synthetic_traces() {
    use std::io::Read;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/traces");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if !reader::is_trace_name(&p) {
            continue;
        }
        let mut bytes = Vec::new();
        let f = std::fs::File::open(&p).unwrap();
        if p.extension().is_some_and(|x| x == "gz") {
            flate2::read::MultiGzDecoder::new(f)
                .read_to_end(&mut bytes)
                .unwrap();
        } else {
            std::io::BufReader::new(f).read_to_end(&mut bytes).unwrap();
        }
        same_read(&bytes, &p, None);
        same_read(&bytes, &p, Some("verify_step"));
        n += 1;
    }
    assert!(n >= 3, "fixtures found: {n}");
    for graph in [false, true] {
        let s = SynthSpec {
            ranks: 2,
            steps: 3,
            graph,
            filler_cpu_ops: 2,
            ..Default::default()
        };
        for (r, doc) in synth::to_strings(&s).iter().enumerate() {
            same_read(doc.as_bytes(), Path::new(&format!("rank-{r}.json")), None);
        }
    }
}

/// [`prefilter_gives_the_reference_result_on_fixtures_and_synthetic_traces`] on several MB a
/// rank (a test of its own: the two run side by side).
#[test]
fn prefilter_gives_the_reference_result_on_a_server_like_mix() {
    // The server-like mix (Python events, 20 kernels per collective): one step is several MB
    // of JSON per rank, so events straddle the scanner's read chunks.
    let s = SynthSpec {
        ranks: 2,
        steps: 1,
        filler_cpu_ops: 1,
        kernels_per_collective: 20,
        python_functions: 4,
        ..Default::default()
    };
    for (r, doc) in synth::to_strings(&s).iter().enumerate() {
        assert!(doc.len() > 3 << 20, "{} bytes", doc.len());
        let p = PathBuf::from(format!("rank-{r}.json"));
        same_read(doc.as_bytes(), &p, None);
        same_read(doc.as_bytes(), &p, Some("verify_step"));
    }
}

#[test]
fn fast_reader_matches_the_reference_on_escapes_and_odd_events() {
    // Escaped quotes and braces in names, unicode escapes (one spelling record_param_comms,
    // one the label), a label span, numbers as strings, a category that is not a string.
    let doc = r#"{"schemaVersion":1,"traceEvents":[
 {"ph":"X","cat":"python_function","name":"f \"{}\" \u00e9 }","ts":1,"dur":1},
 {"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce_Sum_bf16_RING_LL","pid":0,"tid":7,"ts":10,"dur":5,
  "args":{"correlation":1,"External id":7,"Collective name":"allreduce","In msg nelems":21504,"dtype":"BFloat16","Group size":2,"Process Group Name":"0","Seq":0}},
 {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","ts":"8","dur":1,"args":{"correlation":1,"External id":7}},
 {"ph":"X","cat":"cpu_op","name":"record_param_\u0063omms","ts":7,"dur":3,
  "args":{"External id":7,"Collective name":"allreduce","In msg nelems":21504,"dtype":"BFloat16"}},
 {"ph":"X","cat":"user_annotation","name":"veri\u0066y_step","ts":6,"dur":20},
 {"ph":"X","cat":"user_annotation","name":"verify_step","ts":30,"dur":20},
 {"ph":"X","cat":"user_annotation","name":"verify\/step","ts":50,"dur":20},
 {"ph":"X","cat":"kernel","name":"k\\ {\"","ts":12,"dur":1,"args":{"stream":"7"}},
 {"ph":"X","cat":"cpu_op","name":"aten::mm","args":{"cat":"kernel","Input Dims":[[1,{"a":"}"}]]}},
 {"ph":"X","cat":"python_function","name":"vllm/v1/worker/gpu_worker.py(3): execute_model","ts":60,"dur":9},
 {"ph":"X","cat":"user_annotation","name":"[Executor] _forward_step 4: 0 ctx reqs","ts":70,"dur":9},
 {"ph":"X","cat":"python_function","name":"scheduler.py(5): run\u005fbatch","ts":80,"dur":9},
 {"ph":"X","cat":"python_function","name":"scheduler.py(5): run_batch_later","ts":90,"dur":9},
 {"ph":"X","cat":["kernel"],"name":"x"}
],"distributedInfo":{"rank":1,"world_size":2}}"#;
    let p = Path::new("odd.json");
    // The list-valued category makes serde refuse the document, both ways.
    let opts = reader::ReadOptions::default();
    assert!(reader::read_from(doc.as_bytes(), p, &opts).is_err());
    assert!(reader::read_fast(doc.as_bytes(), p, &opts).is_none());
    let doc = doc.replace(
        r#"{"ph":"X","cat":["kernel"],"name":"x"}"#,
        r#"{"ph":"X","cat":null,"name":"x"}"#,
    );
    same_read(doc.as_bytes(), p, None);
    same_read(doc.as_bytes(), p, Some("verify_step"));
    same_read(doc.as_bytes(), p, Some("verify/step"));
    let t = reader::read_fast(
        doc.as_bytes(),
        p,
        &reader::ReadOptions {
            step_label: Some("verify_step".into()),
            custom_ops: false,
        },
    )
    .unwrap();
    assert_eq!(
        (t.gpu.len(), t.runtime.len(), t.comms.len(), t.labels.len()),
        (2, 1, 1, 2)
    );
    assert_eq!(t.names[1], "k\\ {\"");
    assert_eq!(t.events_seen, 14);
    // Without a step label the fast reader keeps the engines' step markers (vLLM's
    // execute_model, TensorRT-LLM's range, SGLang's run_batch spelt with an escape; not
    // run_batch_later), as the reference reader reads them (same_read above).
    let t = reader::read_fast(doc.as_bytes(), p, &reader::ReadOptions::default()).unwrap();
    let got: Vec<(usize, f64)> = t.engine_steps.iter().map(|(i, s)| (*i, s.ts)).collect();
    assert_eq!(got, [(2, 60.0), (5, 70.0), (3, 80.0)]);
}

/// A two-rank synthetic trace whose all-reduces run through `kernel` launched by `op`.
fn custom_spec(kernel: &str, op: &'static str) -> SynthSpec {
    SynthSpec {
        ranks: 2,
        steps: 3,
        all_reduces: 5,
        late_rank: Some((1, 200.0)),
        jitter_us: 0.0,
        // The name as a profile shows a template kernel (leaked: the spec holds &'static str).
        custom_all_reduce: Some((
            Box::leak(
                format!("void engine::{kernel}<__nv_bfloat16, 2>(void**, int)").into_boxed_str(),
            ),
            op,
        )),
        ..Default::default()
    }
}

#[test]
fn every_custom_kernel_family_is_a_collective_with_its_implementation_and_its_late_rank() {
    // Each table entry in turn replaces NCCL's all-reduce (the all-gather stays NCCL's);
    // the CPU op is vLLM's, whose Input Dims give the size of the all-reduces.
    let (_n, nccl) = analyse_spec(&SynthSpec {
        custom_all_reduce: None,
        ..custom_spec("x", "y")
    });
    for k in super::kernels::KERNELS {
        let s = custom_spec(k.name, "_C_custom_ar::all_reduce");
        let (_d, a) = analyse_spec(&s);
        let r = &a.rank_traces[0];
        assert_eq!(r.collectives.len(), 3 * 6, "{}", k.name);
        assert_eq!(r.steps.len(), 3, "{}: {}", k.name, a.step_rule);
        let custom: Vec<_> = r
            .collectives
            .iter()
            .filter(|c| c.implementation != "nccl")
            .collect();
        assert_eq!(custom.len(), 15, "{}", k.name);
        for c in &custom {
            assert_eq!(
                (c.implementation.as_str(), c.op.as_str()),
                (k.implementation, k.op)
            );
            assert_eq!(c.dtype.as_deref(), Some("bf16"), "{}", k.name);
            if k.op == "all_reduce" {
                // the op is an all-reduce: its Input Dims [[21504]] are the size
                assert_eq!(
                    (c.elements, c.bytes),
                    (Some(21504), Some(43008)),
                    "{}",
                    k.name
                );
                assert_eq!(c.size_from, extract::SizeFrom::Trace);
            } else {
                // an all-to-all kernel under an all-reduce op: the op's size is not taken
                assert_eq!(c.size_from, extract::SizeFrom::Unknown, "{}", k.name);
            }
        }
        // Attribution across ranks: rank 1 is 200 us late before every collective, and the
        // split is the one the same simulated run gives with NCCL's kernels.
        let st = a.attribution.as_ref().unwrap().straggler.clone().unwrap();
        assert_eq!(st.rank, 1, "{}", k.name);
        assert_eq!(
            Some(&st),
            nccl.attribution.as_ref().unwrap().straggler.as_ref()
        );
        assert!(st.median_lag_us > 200.0, "{}: {}", k.name, st.median_lag_us);
    }
}

#[test]
fn every_custom_op_gives_the_size_of_its_kernel() {
    for o in super::kernels::OPS {
        let s = custom_spec("cross_device_reduce_1stage", o.name);
        let (_d, a) = analyse_spec(&s);
        let c = &a.rank_traces[0].collectives[0];
        assert_eq!(
            (c.op.as_str(), c.elements),
            ("all_reduce", Some(21504)),
            "{}",
            o.name
        );
    }
    // An op outside the table leaves the size unknown (and says so), the kernel still counts.
    let s = custom_spec("cross_device_reduce_1stage", "my_engine::all_reduce");
    let (_d, a) = analyse_spec(&s);
    let c = &a.rank_traces[0].collectives[0];
    assert_eq!(
        (c.op.as_str(), c.size_from),
        ("all_reduce", extract::SizeFrom::Unknown)
    );
    assert!(
        a.notes.iter().any(|n| n.contains("carry no size")),
        "{:?}",
        a.notes
    );
}

#[test]
fn a_trace_of_mostly_unknown_collective_kernels_says_so_and_exports_nothing() {
    let s = custom_spec("fancy_allreduce_kernel", "my_engine::all_reduce");
    let (_d, a) = analyse_spec(&s);
    let r = &a.rank_traces[0];
    // 15 unknown all-reduce kernels, 3 NCCL all-gathers
    assert_eq!((r.unknown_collective_kernels, r.collectives.len()), (15, 3));
    assert!(
        a.diagnosis
            .iter()
            .any(|d| d.contains("sequence above is partial")),
        "{:?}",
        a.diagnosis
    );
    let e = against::schedule_file(&a, 3).unwrap_err();
    assert!(e.to_string().contains("would be partial"), "{e}");
    assert_eq!(crate::error::exit_code(&e), 2);
}

/// A SYNTHETIC vLLM trace of one TP rank (no public vLLM trace without `ProfilerStep#` is at
/// hand, so it is built here after the form vLLM's profiler writes): `execute_model` twice
/// nested (the worker's and the model runner's, python_function events), holding 73
/// all-reduces through PyTorch's symmetric-memory kernel (one of the embedding, two per
/// layer of 36), sized by their CPU op's Input Dims (888 tokens x 2880, bf16); `steps` such
/// executions one after the other; `marker` false leaves the execute_model events out.
fn vllm_trace(steps: usize, marker: bool) -> String {
    let mut ev: Vec<String> = Vec::new();
    let mut id = 0u64;
    for s in 0..steps {
        let t0 = 20_000.0 * s as f64;
        if marker {
            ev.push(format!(r#"{{"ph":"X","cat":"python_function","name":"vllm/v1/worker/gpu_worker.py(412): execute_model","pid":77,"tid":77,"ts":{t0},"dur":15000}}"#));
            ev.push(format!(r#"{{"ph":"X","cat":"python_function","name":"vllm/v1/worker/gpu_model_runner.py(1502): execute_model","pid":77,"tid":77,"ts":{},"dur":14900}}"#, t0 + 50.0));
        }
        for i in 0..73 {
            id += 1;
            let h = t0 + 100.0 + 150.0 * i as f64;
            ev.push(format!(r#"{{"ph":"X","cat":"cpu_op","name":"symm_mem::two_shot_all_reduce_","pid":77,"tid":77,"ts":{h},"dur":20,"args":{{"External id":{id},"Input Dims":[[888,2880]],"Input type":["c10::BFloat16"]}}}}"#));
            ev.push(format!(r#"{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":77,"tid":77,"ts":{},"dur":5,"args":{{"External id":{id},"correlation":{id}}}}}"#, h + 5.0));
            ev.push(format!(r#"{{"ph":"X","cat":"kernel","name":"void c10d::symmetric_memory::two_shot_all_reduce_kernel<c10::BFloat16, 16, 8>(c10::BFloat16**, unsigned long, unsigned long, unsigned int**, unsigned long, unsigned long, unsigned long)","pid":0,"tid":7,"ts":{},"dur":40,"args":{{"External id":{id},"correlation":{id},"device":0,"stream":7}}}}"#, h + 12.0));
        }
    }
    format!(
        r#"{{"distributedInfo":{{"backend":"nccl","rank":0,"world_size":8}},"traceEvents":[{}]}}"#,
        ev.join(",\n")
    )
}

#[test]
fn a_vllm_trace_without_profiler_steps_is_cut_at_execute_model() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("vllm-rank-0.json");
    std::fs::write(&p, vllm_trace(1, true)).unwrap();
    let a = analyse(&TraceRequest::new(vec![p.clone()])).unwrap();
    let r = &a.rank_traces[0];
    assert_eq!(r.collectives.len(), 73);
    assert!(r
        .collectives
        .iter()
        .all(|c| c.op == "all_reduce" && c.elements == Some(888 * 2880)));
    // one step: the whole forward's 73 all-reduces, not 73 or 36 "steps" of a period
    assert_eq!(r.steps.len(), 1, "{}", a.step_rule);
    assert_eq!(r.steps[0].end - r.steps[0].first, 73);
    let m = a.step_marker.as_ref().expect("the marker is named");
    // the two nested execute_model spans count once
    assert_eq!(
        (m.engine, m.marker, m.spans, m.steps),
        ("vLLM", "execute_model", 1, 1)
    );
    assert!(
        a.step_rule
            .starts_with("vLLM's step marker execute_model (1 found"),
        "{}",
        a.step_rule
    );
    let v = serde_json::to_value(&a).unwrap();
    assert_eq!(v["step_marker"]["engine"], "vLLM");
    assert_eq!(v["step_marker"]["steps"], 1);
    // three executions: three steps of 73
    std::fs::write(&p, vllm_trace(3, true)).unwrap();
    let a = analyse(&TraceRequest::new(vec![p.clone()])).unwrap();
    let steps: Vec<usize> = a.rank_traces[0]
        .steps
        .iter()
        .map(|s| s.end - s.first)
        .collect();
    assert_eq!(steps, [73, 73, 73]);
    // the same trace without the marker is cut by another rule, and names no marker
    std::fs::write(&p, vllm_trace(1, false)).unwrap();
    let a = analyse(&TraceRequest::new(vec![p])).unwrap();
    assert!(a.step_marker.is_none());
    assert_ne!(a.rank_traces[0].steps.len(), 1, "{}", a.step_rule);
}
