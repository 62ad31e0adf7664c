//! Tests of a whole choice on the cost model: the shapes decided as the model's own prices
//! say, the decision file reused while its key holds and measured again, naming the part, when
//! it does not, and the decision as `explain` prices it.

use std::cell::Cell;

use super::file::{reuse_or_measure, Outcome, Why};
use super::key::Fingerprint;
use super::measure::ModelMeasure;
use super::*;
use crate::comm::p2p::Impl;
use crate::costmodel::custom;
use crate::costmodel::predict;
use crate::record::{Provenance, Record, Source};
use crate::request::Launcher;

fn request(tp: u64) -> ChooseRequest {
    ChooseRequest {
        workload: Workload {
            tp: Some(tp),
            ..Default::default()
        },
        concurrency: vec![1, 8],
        draft_steps: 3,
        protos: vec![],
        algos: vec![],
        rounds: 3,
        seed: 7,
        repeat: Repeat::default(),
        backend: BackendKind::Model,
        gpu: GpuSpec::default(),
        model: ModelSettings::default(),
        decision: None,
        remeasure: false,
        virtual_ranks: false,
        children_on_model: false,
        format: crate::output::Format::Table,
    }
}

/// The decision of `r` on the cost model under `key`, and the record it is written as.
fn decide_on_model(r: &ChooseRequest, key: Fingerprint) -> (Record, Decision) {
    let j = job(r, r.workload.tp.unwrap() as usize).unwrap();
    let m = ModelMeasure {
        nranks: j.tp,
        model: r.model.clone(),
        launcher: r.gpu.launcher,
    };
    let frame = Frame {
        request: r,
        job: &j,
        key,
        links: Links::Pcie,
        modeled: true,
    };
    let (d, _) = measure_and_decide(frame, &m, &|| false, &mut |_, _, _| {}).unwrap();
    let rec = Record::other(
        Source::Modeled,
        Provenance::here("model", "t0".into()),
        crate::record::kinds::ALLREDUCE_CHOICE,
        &d,
    )
    .unwrap();
    (rec, d)
}

fn modeled_key(r: &ChooseRequest) -> Fingerprint {
    let j = job(r, r.workload.tp.unwrap() as usize).unwrap();
    Fingerprint::modeled("pcie-gen5", 1, &j.key_of_work())
}

#[test]
fn every_shape_is_chosen_as_the_models_own_prices_say() {
    let r = request(8);
    let (_, d) = decide_on_model(&r, modeled_key(&r));
    // Independently of the rounds and the judging: each all-reduce's graph time straight from
    // the model, NCCL as its tuner picks and the two kernels, and the rule by hand (1% and
    // 0.25 us faster than NCCL, the lowest time wins).
    let (p, _) = ModelSettings::default().resolve().unwrap();
    let force = predict::Force::parse(None, None).unwrap();
    for c in d
        .shapes
        .iter()
        .filter(|c| c.shape.kind == CollectiveKind::AllReduce)
    {
        let size = c.shape.size;
        let nccl = predict::op_time(&p, c.shape.kind, size, 8, true, Launcher::Processes, &force)
            .unwrap()
            .total();
        let mut best = ("nccl", nccl);
        for (id, imp) in [("oneshot", Impl::OneShot), ("twoshot", Impl::TwoShot)] {
            let t = custom::op_time(&p, imp, size, 8, true).unwrap().total();
            if t <= nccl * 0.99 && nccl - t >= 0.25 && t < best.1 {
                best = (id, t);
            }
        }
        assert_eq!(c.graph.choice, best.0, "{size} B");
        let f = c.graph.figure(best.0).unwrap();
        assert!((f.median_us - best.1).abs() < 1e-9, "{size} B: {f:?}");
        assert_eq!(f.per_round_us.len(), 3);
    }
    // On pcie-gen5 at TP8: one-shot for the small shapes, two-shot for the large ones (at
    // 57,344 B one-shot 1.0 + 6.32 + 7 x 57,344 / 26,440 = 22.5 us, two-shot 1.0 + 2 x 6.32 +
    // 1.75 x 57,344 / 26,440 = 17.4 us).
    assert_eq!(
        d.crossover_graph_words,
        "one-shot up to 14.0 KiB (14,336 B), two-shot above"
    );
    // The all-gathers compare NCCL's settings only.
    let ag = d
        .shapes
        .iter()
        .find(|c| c.shape.kind == CollectiveKind::AllGather)
        .unwrap();
    assert_eq!(ag.graph.figures.len(), 1);
    // The engines' lines: 8 GPUs over PCIe are refused by both engines.
    assert!(d
        .engines
        .iter()
        .filter(|e| e.setting == "more than 2 GPUs without full NVLink")
        .all(|e| e.advice.starts_with("refused here (8 GPUs over PCIe")));
}

#[test]
fn a_changed_part_is_named_and_measured_again_an_unchanged_key_reuses_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("decision.json");
    let r = request(2);
    let runs = Cell::new(0);
    let run = |key: &Fingerprint| {
        reuse_or_measure(Some(&path), false, key, |_| {
            runs.set(runs.get() + 1);
            Ok(decide_on_model(&r, key.clone()))
        })
        .unwrap()
    };
    let a = key::tests::two_gpus();
    assert!(matches!(run(&a), Outcome::Measured(_, Why::New)));
    assert_eq!(runs.get(), 1);
    // The same key: the file is reused, nothing is measured.
    match run(&a) {
        Outcome::Reused(b) => assert_eq!(b.1.key, a),
        other => panic!("{other:?}"),
    }
    assert_eq!(runs.get(), 1);
    // Each part changed alone: named, measured again, the file rewritten under the new key.
    let mut changes: Vec<(Fingerprint, &str)> = vec![];
    let mut k = a.clone();
    k.driver = Some("580.105.08".into());
    changes.push((k, "driver was 580.95.05, now 580.105.08"));
    let mut k = a.clone();
    k.nccl_file = Some("/opt/nccl-2.29/lib/libnccl.so.2".into());
    changes.push((
        k,
        "NCCL file was /usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3, now /opt/nccl-2.29/lib/libnccl.so.2",
    ));
    let mut k = a.clone();
    k.work.world_size = 4;
    changes.push((k, "world size was 2, now 4"));
    let mut k = a.clone();
    k.work.hidden_size = 6144;
    changes.push((k, "hidden size was 7168, now 6144"));
    let mut before = a.clone();
    for (k, said) in changes {
        // Back to the first key between two changes, so that each change is the only one.
        if before != a {
            run(&a);
        }
        let n = runs.get();
        match run(&k) {
            Outcome::Measured(_, Why::Changed(parts)) => assert_eq!(parts, vec![said.to_string()]),
            other => panic!("{said}: {other:?}"),
        }
        assert_eq!(runs.get(), n + 1, "{said}");
        assert_eq!(file::read(&path, "--decision").unwrap().1.key, k);
        before = k;
    }
    // --remeasure measures even where the key holds.
    let n = runs.get();
    let out = reuse_or_measure(Some(&path), true, &before, |_| {
        runs.set(runs.get() + 1);
        Ok(decide_on_model(&r, before.clone()))
    })
    .unwrap();
    assert!(matches!(out, Outcome::Measured(_, Why::Remeasure)));
    assert_eq!(runs.get(), n + 1);
}

#[test]
fn a_file_of_another_kind_is_refused_not_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(
        &path,
        "{\"model_type\": \"llama\", \"num_hidden_layers\": 2}",
    )
    .unwrap();
    let e = reuse_or_measure(Some(&path), false, &key::tests::two_gpus(), |_| {
        panic!("nothing is measured over a foreign file")
    })
    .unwrap_err();
    assert_eq!(crate::error::exit_code(&e), 2, "{e:#}");
    assert!(std::fs::read_to_string(&path).unwrap().contains("llama"));
}

#[test]
fn explain_prices_each_all_reduce_as_the_decision_chose() {
    let r = request(8);
    let (rec, d) = decide_on_model(&r, modeled_key(&r));
    let c = for_explain::LoadedChoice {
        file: "d.json".into(),
        source: rec.source,
        decision: d.clone(),
    };
    // A verify of 4 tokens: 123 all-reduces of 57,344 B, which the decision holds (two-shot),
    // and the logits all-gather, which stays on NCCL.
    let s = Workload {
        tp: Some(8),
        tokens: 4,
        ..Default::default()
    }
    .schedule(8)
    .unwrap();
    let per: Vec<f64> = (0..s.n_collectives()).map(|i| 10.0 + i as f64).collect();
    let one = d
        .shapes
        .iter()
        .find(|x| x.shape.bytes == 57_344)
        .unwrap()
        .graph
        .figure("twoshot")
        .unwrap()
        .ratio
        .unwrap();
    let (got, line) = for_explain::transfer_with_choice(&c, &s, 8, &per);
    // The all-gather is the last collective of the schedule.
    let n = per.len();
    let want: f64 = per[..n - 1].iter().map(|x| x * one).sum::<f64>() + per[n - 1];
    assert!((got.unwrap() - want).abs() < 1e-9);
    assert!(line.contains("two-shot at 57,344 B"), "{line}");
    // A size the file does not hold is priced on NCCL and named; another world size is refused.
    let s3 = Workload {
        tp: Some(8),
        ..Default::default()
    }
    .schedule(8)
    .unwrap();
    let (got, line) = for_explain::transfer_with_choice(&c, &s3, 8, &per);
    assert!((got.unwrap() - per.iter().sum::<f64>()).abs() < 1e-9);
    assert!(
        line.ends_with("): sizes the file does not hold priced on NCCL: 43,008 B"),
        "{line}"
    );
    let (got, _) = for_explain::transfer_with_choice(&c, &s3, 4, &per);
    assert!(got.unwrap_err().contains("for 8 ranks"));
}

#[test]
fn all_reduces_beyond_the_kernels_capacity_compare_nccl_only() {
    // 128 requests: a verify of 512 tokens, 512 x 14,336 B = 7,340,032 B per all-reduce, above
    // the P2P kernels' 4 MiB; the decode of 128 tokens (1,835,008 B) is below it.
    let mut r = request(8);
    r.concurrency = vec![128];
    let (_, d) = decide_on_model(&r, modeled_key(&r));
    let at = |bytes: u64| {
        d.shapes
            .iter()
            .find(|c| c.shape.kind == CollectiveKind::AllReduce && c.shape.bytes == bytes)
            .unwrap()
    };
    assert!(at(1_835_008).graph.figure("twoshot").is_some());
    let big = at(7_340_032);
    assert!(big.graph.figure("oneshot").is_none() && big.graph.figure("twoshot").is_none());
    assert!(big.graph.figure("nccl").is_some());
}
