//! End-to-end tests of `--impl` (NCCL beside the P2P one-shot and two-shot all-reduces) through
//! the real binary, on the model and mock backends: the crossover table, the per-verify saving,
//! the records' per-implementation rows, and every refusal (unknown name, wrong collective,
//! a size over the P2P capacity, a profile without peer-to-peer).

use std::path::Path;

use predicates::prelude::*;
use verifybench::backend::{Backend, MockBackend};
use verifybench::commands;
use verifybench::model::{CollectiveKind, DType};
use verifybench::record::{read_records, Body, Impl, Mode, Record};
use verifybench::request::{
    BackendKind, CollectiveRequest, GpuSpec, GraphChoice, Repeat, VerifyRequest, Workload,
};

use crate::common;
use common::vb;

fn ok(args: &[&str]) -> String {
    let out = vb().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn one_record(path: &Path) -> Record {
    let mut r = read_records(path).unwrap();
    assert_eq!(r.len(), 1);
    r.remove(0)
}

/// Per size: (NCCL graph us, the custom implementation's graph us).
fn graph_times(r: &Record, imp: Impl) -> Vec<(u64, f64, f64)> {
    let Body::Collective(c) = &r.body else {
        panic!("a collective record")
    };
    c.rows
        .iter()
        .map(|row| {
            let nccl = row.graph.as_ref().expect("nccl graph").time_us;
            let t = row.p2p.iter().find(|t| t.imp == imp).expect("the impl row");
            (
                row.size_bytes,
                nccl,
                t.graph.as_ref().expect("graph").time_us,
            )
        })
        .collect()
}

#[test]
fn model_predicts_the_pcie_crossover_labelled_modeled() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("x.json");
    let out = ok(&[
        "collective",
        "--backend",
        "model",
        "--impl",
        "oneshot,nccl",
        "--link",
        "pcie-gen5",
        "--gpus",
        "8",
        "-b",
        "1K",
        "-e",
        "4M",
        "-f",
        "4",
        "--sizes",
        "43008",
        "--export-json",
        json.to_str().unwrap(),
    ]);
    assert!(out.contains("MODELED"), "{out}");
    assert!(out.contains("oneshot/twoshot MODELED"), "{out}");
    let line = |size: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(size))
            .unwrap_or_else(|| panic!("no row {size} in\n{out}"))
            .to_string()
    };
    assert!(
        line("1024").ends_with("oneshot (graph)"),
        "{}",
        line("1024")
    );
    assert!(
        line("4194304").ends_with("nccl (graph)"),
        "{}",
        line("4194304")
    );
    let rec = one_record(&json);
    let t = graph_times(&rec, Impl::OneShot);
    // small messages: one-shot ahead, at 43,008 B still ahead (the public S10 table: 16.5 us
    // against NCCL's 24.5 us at 32 KB); 4 MiB: NCCL's ring ahead
    let at = |s: u64| t.iter().find(|x| x.0 == s).copied().unwrap();
    assert!(at(1024).2 < at(1024).1);
    assert!(at(43008).2 < at(43008).1, "{:?}", at(43008));
    assert!(at(4 << 20).2 > at(4 << 20).1);
    // the crossover is one switch: once NCCL is ahead it stays ahead
    let first_nccl = t.iter().position(|x| x.1 < x.2).unwrap();
    assert!(t[first_nccl..].iter().all(|x| x.1 < x.2), "{t:?}");
}

#[test]
fn model_verify_prints_the_saving_per_verify() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("v.json");
    let out = ok(&[
        "verify",
        "--backend",
        "model",
        "--link",
        "pcie-gen5",
        "--gpus",
        "8",
        "--impl",
        "nccl,oneshot,twoshot",
        "--export-json",
        json.to_str().unwrap(),
    ]);
    assert!(out.contains("saving_vs_nccl_us"), "{out}");
    assert!(out.contains("the logits all-gather stays on NCCL"), "{out}");
    let Body::Verify(v) = one_record(&json).body else {
        panic!("a verify record")
    };
    assert_eq!(v.p2p.len(), 4, "oneshot and twoshot, eager and graph");
    for r in &v.p2p {
        let nccl = v.run(r.run.graph, r.run.mode).unwrap();
        assert!(r.run.per_verify.median_us < nccl.per_verify.median_us);
        // only the all-reduces changed: the all-gather part is NCCL's
        let part = |run: &verifybench::record::VerifyRun, name: &str| {
            run.breakdown
                .iter()
                .find(|p| p.name == name)
                .map(|p| p.us)
                .unwrap()
        };
        assert_eq!(part(&r.run, "all_gather"), part(nccl, "all_gather"));
        assert!(part(&r.run, "all_reduce") < part(nccl, "all_reduce"));
    }
}

#[test]
fn unknown_impl_is_a_usage_error_listing_the_names() {
    for cmd in ["collective", "verify"] {
        vb().args([cmd, "--backend", "model", "--impl", "nccl,threeshot"])
            .assert()
            .code(2)
            .stderr(predicate::str::contains("--impl"))
            .stderr(predicate::str::contains("nccl, oneshot, twoshot"));
    }
}

#[test]
fn sizes_over_the_capacity_and_other_collectives_are_refused() {
    vb().args([
        "collective",
        "--backend",
        "model",
        "--impl",
        "nccl,twoshot",
        "-e",
        "8M",
    ])
    .assert()
    .code(2)
    .stderr(predicate::str::contains("--impl twoshot"))
    .stderr(predicate::str::contains("4194304 B"));
    vb().args([
        "collective",
        "--backend",
        "model",
        "--impl",
        "oneshot",
        "--op",
        "all_gather",
    ])
    .assert()
    .code(2)
    .stderr(predicate::str::contains("--op all_gather"));
    vb().args([
        "collective",
        "--backend",
        "model",
        "--impl",
        "oneshot",
        "--gpus",
        "16",
        "--link",
        "ib-ndr",
    ])
    .assert()
    .code(2)
    .stderr(predicate::str::contains("2 to 8 ranks"));
}

#[test]
fn a_profile_without_p2p_skips_them_with_a_line() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("x.json");
    let args = [
        "collective",
        "--backend",
        "model",
        "--link",
        "pcie-gen5-no-p2p",
        "--impl",
        "nccl,oneshot,twoshot",
        "-b",
        "8K",
        "-e",
        "64K",
        "--export-json",
        json.to_str().unwrap(),
    ];
    vb().args(args)
        .assert()
        .success()
        .stderr(predicate::str::contains(
            "no peer-to-peer between the GPUs: oneshot, twoshot skipped",
        ));
    let rec = one_record(&json);
    assert!(rec.provenance.notes.iter().any(|n| n.contains("skipped")));
    let Body::Collective(c) = &rec.body else {
        panic!()
    };
    assert!(c.rows.iter().all(|r| r.p2p.is_empty() && r.graph.is_some()));
    // with nothing else asked, there is nothing to run: refused, nothing written
    let other = dir.path().join("y.json");
    vb().args([
        "collective",
        "--backend",
        "model",
        "--link",
        "pcie-gen5-no-p2p",
        "--impl",
        "oneshot",
        "--export-json",
        other.to_str().unwrap(),
    ])
    .assert()
    .code(2)
    .stderr(predicate::str::contains("oneshot skipped"));
    assert!(!other.exists());
}

/// A `collective` request for the mock backend (not offered on the command line).
fn mock_collective(impls: Vec<Impl>, op: CollectiveKind, max: u64) -> CollectiveRequest {
    CollectiveRequest {
        op,
        min_bytes: 8,
        max_bytes: max,
        step_factor: 2,
        sizes: vec![],
        dtype: DType::Bf16,
        graph: GraphChoice::Both,
        backend: BackendKind::Mock,
        gpu: GpuSpec {
            gpus: Some(2),
            ..Default::default()
        },
        repeat: Repeat {
            iters: 5,
            warmup: 1,
            ..Default::default()
        },
        model: Default::default(),
        export: Default::default(),
        format: Default::default(),
        impls,
        fresh_runs: 1,
        fresh_run: 0,
    }
}

#[test]
fn mock_runs_every_impl_side_by_side_deterministically() {
    let all = vec![Impl::Nccl, Impl::OneShot, Impl::TwoShot];
    let req = mock_collective(all, CollectiveKind::AllReduce, 4 << 20);
    let (a, b) = (
        MockBackend.collective(&req).unwrap(),
        MockBackend.collective(&req).unwrap(),
    );
    assert_eq!(a.body, b.body, "the mock is deterministic");
    assert_eq!(
        commands::collective::run_with(&MockBackend, &req).unwrap(),
        0
    );
    let out = verifybench::report::text::collective_table(&a);
    // FAKE numbers: nothing was checked, so no "0 OK" either
    assert!(out.contains("# Out of bounds values : - (modeled"), "{out}");
    let Body::Collective(c) = &a.body else {
        panic!()
    };
    assert!(c.rows.len() > 10);
    for row in &c.rows {
        let imps: Vec<Impl> = row.p2p.iter().map(|t| t.imp).collect();
        assert_eq!(imps, vec![Impl::OneShot, Impl::TwoShot]);
        assert!(row.eager.is_some() && row.graph.is_some());
    }
    // the header names every implementation over its columns, each row its fastest
    let head = out.lines().find(|l| l.contains("twoshot")).unwrap();
    assert!(head.contains("nccl") && head.contains("oneshot"), "{head}");
    let small = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some("8"))
        .unwrap();
    assert!(small.ends_with("oneshot (graph)"), "{small}");
    // a record with per-impl rows survives the JSON round trip
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.json");
    verifybench::util::write_file(&path, serde_json::to_string(&a).unwrap().as_bytes()).unwrap();
    let back = one_record(&path);
    let times = |r: &Record| -> Vec<(Impl, f64)> {
        let Body::Collective(c) = &r.body else {
            panic!()
        };
        c.rows
            .iter()
            .flat_map(|row| row.p2p.iter())
            .map(|t| (t.imp, t.graph.as_ref().unwrap().time_us))
            .collect()
    };
    let (x, y) = (times(&a), times(&back));
    assert_eq!(x.len(), y.len());
    for (p, q) in x.iter().zip(&y) {
        assert!(p.0 == q.0 && (p.1 - q.1).abs() < 1e-9 * p.1, "{p:?} {q:?}");
    }
}

#[test]
fn mock_refuses_what_a_gpu_would_refuse() {
    let e = MockBackend
        .collective(&mock_collective(
            vec![Impl::OneShot],
            CollectiveKind::AllGather,
            1 << 20,
        ))
        .unwrap_err();
    assert_eq!(verifybench::error::exit_code(&e), 2);
    assert!(format!("{e:#}").contains("--op all_gather"), "{e:#}");
    let e = MockBackend
        .collective(&mock_collective(
            vec![Impl::Nccl, Impl::OneShot],
            CollectiveKind::AllReduce,
            8 << 20,
        ))
        .unwrap_err();
    assert!(format!("{e:#}").contains("4194304 B"), "{e:#}");
}

#[test]
fn mock_verify_without_nccl_has_only_custom_runs() {
    let req = VerifyRequest {
        workload: Workload {
            tp: Some(8),
            ..Default::default()
        },
        graph: GraphChoice::Both,
        mode: vec![Mode::Comm],
        launches_per_layer: 0,
        pdl: false,
        backend: BackendKind::Mock,
        gpu: GpuSpec::default(),
        repeat: Repeat {
            iters: 5,
            warmup: 1,
            ..Default::default()
        },
        model: Default::default(),
        export: Default::default(),
        format: Default::default(),
        quiet: true,
        inject_fault: None,
        impls: vec![Impl::TwoShot],
        host_gaps: Default::default(),
        export_trace: None,
        fresh_runs: 1,
        fresh_run: 0,
    };
    let (b, job) = verifybench::backend::verify_job(&req, || Box::new(MockBackend)).unwrap();
    let rec = b.run_verify(&job).unwrap();
    let Body::Verify(v) = &rec.body else { panic!() };
    assert!(v.runs.is_empty());
    assert_eq!(v.p2p.len(), 2);
    assert!(v.p2p.iter().all(|r| r.imp == Impl::TwoShot));
    let table = verifybench::report::text::verify_table(&rec);
    assert!(table.contains("twoshot  comm"), "{table}");
}

#[test]
fn model_fit_calibrates_the_p2p_terms_on_the_p2p_rows() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("x.json");
    // Timings with known P2P terms (the pcie-gen5 profile's), relabelled as measurements so
    // that the fit reads them: it must recover the terms they were made with.
    ok(&[
        "collective",
        "--backend",
        "model",
        "--link",
        "pcie-gen5",
        "--gpus",
        "8",
        "--impl",
        "nccl,oneshot,twoshot",
        "-b",
        "1K",
        "-e",
        "1M",
        "-f",
        "4",
        "--export-json",
        json.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&json).unwrap();
    std::fs::write(
        &json,
        text.replace("\"source\": \"modeled\"", "\"source\": \"measured\""),
    )
    .unwrap();
    let prof = dir.path().join("fitted.json");
    let out = ok(&[
        "model",
        "fit",
        json.to_str().unwrap(),
        "--base",
        "pcie-gen5",
        "-o",
        prof.to_str().unwrap(),
    ]);
    assert!(out.contains("fitted p2p.signal_us"), "{out}");
    assert!(out.contains("fitted p2p.read_gbps"), "{out}");
    assert!(out.contains("fitted on the 24 P2P rows only"), "{out}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&prof).unwrap()).unwrap();
    let p2p = &v["result"]["data"]["profile"]["p2p"];
    let signal = p2p["signal_us"].as_f64().unwrap();
    let read = p2p["read_gbps"].as_f64().unwrap();
    // the built-in pcie-gen5 terms the "measurements" were made with (its S10 fit)
    assert!((signal - 6.3213).abs() < 0.05, "{p2p}");
    assert!((read - 26.44).abs() < 0.3, "{p2p}");
}

#[test]
fn an_injected_silent_rank_is_named_and_needs_a_p2p_impl() {
    vb().args([
        "verify",
        "--backend",
        "model",
        "--impl",
        "nccl,oneshot",
        "--inject-fault",
        "p2p-silent:1",
    ])
    .assert()
    .code(1)
    .stderr(predicate::str::contains("rank 1 never signalled"));
    vb().args([
        "verify",
        "--backend",
        "model",
        "--inject-fault",
        "p2p-silent:1",
    ])
    .assert()
    .code(2)
    .stderr(predicate::str::contains(
        "--inject-fault p2p-silent needs a P2P implementation",
    ));
}

#[test]
fn csv_export_carries_the_impl_rows_in_a_table_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("x.csv");
    ok(&[
        "collective",
        "--backend",
        "model",
        "--impl",
        "nccl,twoshot",
        "-b",
        "8K",
        "-e",
        "16K",
        "--export-csv",
        csv.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&csv).unwrap();
    let tables: Vec<&str> = text.split("\n\n").collect();
    assert_eq!(tables.len(), 2, "{text}");
    assert!(!tables[0].contains("twoshot"), "NCCL's table as before");
    let mut lines = tables[1].lines();
    assert!(lines.next().unwrap().contains(",count,impl,eager_time_us"));
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.contains(",twoshot,")), "{rows:?}");
}
