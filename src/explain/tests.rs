//! Tests of the explanation on plain numbers (no files): the parts add up, the sources are
//! labelled, and the counterfactuals follow from the figures by hand arithmetic.

use super::gather::SweepBest;
use super::*;
use crate::evidence::Source;
use crate::request::Workload;
use crate::speculative::inputs::Flags;

fn req() -> ExplainRequest {
    ExplainRequest {
        observed: Some("122x0.2ms".parse().unwrap()),
        verify_ms: Some(30.0),
        cycle: Flags {
            decode_ms: Some(12.2),
            acceptance: Some(Acceptance::Length(2.5)),
            ..Default::default()
        },
        gpus: Some(8),
        ..Default::default()
    }
}

fn none() -> Gathered {
    Gathered {
        trace: None,
        server_log: None,
        nccl_logs: vec![],
        sweep: None,
        allreduce_choice: None,
    }
}

#[test]
fn observed_numbers_split_into_modeled_transfer_and_inferred_waiting() {
    let e = explain(&req(), &none()).unwrap();
    let part = |n: &str| {
        e.as_ran
            .iter()
            .find(|p| p.name == n)
            .unwrap()
            .figure
            .clone()
    };
    // 122 x 200 us inside the collectives, given.
    assert_eq!(part("in collectives").us, 24_400.0);
    assert_eq!(part("in collectives").source, Source::Given);
    // transfer = 122 x the model's mean collective; waiting = the rest, inferred.
    let x = 122.0 * e.pricing.transfer_us / e.pricing.per_collective_us.len() as f64;
    assert!((part("transfer").us - x).abs() < 1e-6);
    assert_eq!(part("transfer").source, Source::Modeled);
    assert!((part("waiting").us - (24_400.0 - x)).abs() < 1e-6);
    assert_eq!(part("waiting").source, Source::Inferred);
    // most of it is waiting
    assert!(
        part("waiting").us > 0.75 * 24_400.0,
        "{}",
        part("waiting").us
    );
    // 30 ms - 24.4 ms of compute and idle
    assert!((part("compute + idle").us - 5_600.0).abs() < 1e-6);
    // the graph row would be the verify less the waiting (8.5 ms), faster than the given
    // decode step of 12.2 ms: it is held at the floor, the decode step plus what the 3 tokens
    // add over 1 (the model's verify over its decode, scaled as the given decode scales the
    // model's: phi x D x (M_verify - M_decode) / M_decode, at the low end of the engine terms'
    // held-out spread); tokens/s = 2.5 / the step, the step = the verify + k = 2 draft forwards
    // (the draft's schedule scaled the same way, plus each forward's fixed cost o x D) + the
    // drafted tokens' bookkeeping (tau x 1 request x 2 tokens)
    let g = e.scenarios.iter().find(|s| s.row == Row::Graph).unwrap();
    let candidate = 30_000.0 - (24_400.0 - x);
    let cal = e.calibration.as_ref().unwrap();
    let (t, d) = (&cal.engine.terms, 12_200.0);
    let (md, mv) = (cal.model_decode_us, cal.model_verify_us);
    let extra = t.scaling * d * (mv - md) / md;
    let floor = d + extra / (1.0 + cal.engine.increment_spread[1]);
    assert!(candidate < 12_200.0 && floor >= 12_200.0);
    assert!((cal.floor_ms.ms * 1000.0 - floor).abs() < 1e-6);
    assert!(g.at_floor);
    assert!((g.verify.us - floor).abs() < 1e-6);
    let drafts = t.scaling * d * cal.model_drafts_us.unwrap() / md + 2.0 * t.draft_forward * d;
    let overhead = t.per_draft_token_us * 2.0;
    let step = floor + drafts + overhead;
    assert!(
        (g.step.step_us - step).abs() < 1e-6,
        "{} {step}",
        g.step.step_us
    );
    let tps = 2.5 * 1e6 / step;
    assert!((g.tokens_per_s.unwrap() - tps).abs() < 1e-6);
    assert!((g.vs_baseline.unwrap() - tps / (1000.0 / 12.2)).abs() < 1e-9);
    assert!(g.vs_baseline.unwrap() <= 2.5);
    // the engine's own work per step: (1 - phi) x the given decode
    let engine = cal.step.unwrap().engine_us;
    assert!((engine - (1.0 - t.scaling) * d).abs() < 1e-6);
    // the graph row's range reaches up by what the inference missed the floor by
    let [lo, hi] = g.range_us.unwrap();
    assert!(
        lo >= floor - 1e-6 && hi >= floor + (floor - candidate) - 1e-6,
        "{lo} {hi}"
    );
    // as it ran: 2.5 / (30 ms + the drafts and the bookkeeping)
    let ran = 2.5 * 1e6 / (30_000.0 + drafts + overhead);
    assert!((e.scenarios[0].tokens_per_s.unwrap() - ran).abs() < 1e-6);
    assert_eq!(e.cycle.draft_steps, 2);
    assert!(e
        .summary
        .iter()
        .any(|l| l.contains("inferred, not measured")));
}

#[test]
fn no_evidence_and_contradictions_are_usage_errors() {
    let r = ExplainRequest {
        gpus: Some(8),
        ..Default::default()
    };
    let e = explain(&r, &none()).unwrap_err();
    assert_eq!(crate::error::exit_code(&e), 2);
    assert!(e.to_string().contains("nothing to explain"), "{e}");
    let r = ExplainRequest {
        verify_ms: Some(20.0),
        ..req()
    };
    let e = explain(&r, &none()).unwrap_err();
    assert!(
        e.to_string()
            .contains("below the time inside the collectives"),
        "{e}"
    );
    let r = ExplainRequest {
        gpus: Some(8),
        workload: Workload {
            tp: Some(4),
            ..Default::default()
        },
        ..req()
    };
    let e = explain(&r, &none()).unwrap_err();
    assert!(e.to_string().contains("--gpus 8 and --tp 4"), "{e}");
}

#[test]
fn a_sweep_ratio_scales_the_transfer_of_the_nccl_rows() {
    let mut g = none();
    g.sweep = Some(SweepBest {
        file: "s.jsonl".into(),
        setting: "NCCL_PROTO=Simple".into(),
        overrides: vec![("NCCL_PROTO".into(), "Simple".into())],
        ratio: 0.8,
        graph: true,
        mode: "comm".into(),
        source: "measured".into(),
        points: 2,
        tp: 8,
    });
    let e = explain(&req(), &g).unwrap();
    let x = e
        .as_ran
        .iter()
        .find(|p| p.name == "transfer")
        .unwrap()
        .figure
        .us;
    let row = |k: Row| e.scenarios.iter().find(|s| s.row == k).unwrap().verify.us;
    // 20% of the transfer comes off the eager verify; the graph row sits at the floor, and a
    // setting that cuts the transfer by 20% cuts the decode's too: its floor is 20% of the
    // decode's transfer lower, scaled as the given decode scales the model's (the scaling
    // share of the engine terms x given / model decode).
    assert!((row(Row::Nccl) - (30_000.0 - 0.2 * x)).abs() < 1e-6);
    let cal = e.calibration.as_ref().unwrap();
    let floor = cal.floor_ms.ms * 1000.0;
    assert!((row(Row::Graph) - floor).abs() < 1e-6);
    let scale = cal.engine.terms.scaling * cal.given_decode_us.unwrap() / cal.model_decode_us;
    let cut = 0.2 * cal.decode_transfer_us * scale;
    assert!(cut > 0.0 && cut < 0.2 * cal.decode_transfer_us);
    assert!((row(Row::NcclGraph) - (floor - cut)).abs() < 1e-6);
    for sc in &e.scenarios {
        assert!(sc.vs_baseline.unwrap() <= 2.5 + 1e-9, "{}", sc.row.name());
    }
    assert!(e.scenarios[2].verify.how.contains("s.jsonl"));
}

#[test]
fn a_vllm_log_shows_its_engine_and_its_traps() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("vllm.log");
    std::fs::write(
        &p,
        "INFO 05-01 09:59:00 [core.py:70] Initializing a V1 LLM engine with config: model='m', enforce_eager=True, tensor_parallel_size=8\n\
(Worker pid=375) WARNING 05-01 09:59:30 [custom_all_reduce.py:154] Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. To silence this warning, specify disable_custom_all_reduce=True explicitly.\n\
INFO 05-01 10:00:00 [metrics.py:86] SpecDecoding metrics: Mean acceptance length: 2.28, Accepted throughput: 10.00 tokens/s, Drafted throughput: 20.00 tokens/s, Accepted: 1278 tokens, Drafted: 3000 tokens, Per-position acceptance rate: 0.645, 0.393, 0.240, Avg Draft acceptance rate: 42.6%\n",
    )
    .unwrap();
    let l = crate::evidence::read_server_log(&p).unwrap();
    assert_eq!(l.engine, Some(Engine::Vllm));
    // vLLM's rates are fractions of all drafts: 1 + 0.645 + 0.393 + 0.240 = 2.278
    assert!((l.accept_length.as_ref().unwrap().value - 2.278).abs() < 1e-3);
    let mut r = req();
    r.cycle.acceptance = None;
    r.cycle.draft_steps = Some(3);
    let g = Gathered {
        server_log: Some(l),
        ..none()
    };
    let e = explain(&r, &g).unwrap();
    assert!(e.engine_flags.iter().all(|f| f.engine == Engine::Vllm));
    let status = |id: &str| e.traps.iter().find(|t| t.rule.id == id).unwrap().status;
    assert_eq!(status("eager-verify"), traps::Status::Found);
    assert_eq!(status("engine-custom-ar-off"), traps::Status::Found);
    assert_eq!(status("nccl-graph-search-sys"), traps::Status::NotChecked);
    // the accept length of the log drives tokens/s: 2.278 over the step, 30 ms and the three
    // draft forwards and the bookkeeping the engine terms price
    let sc = &e.scenarios[0];
    let c = &e.cycle;
    let step = 30_000.0 + 1000.0 * (3.0 * c.draft_ms.value + c.overhead_ms.value);
    assert!((sc.step.step_us - step).abs() < 1e-6);
    let t = sc.tokens_per_s.unwrap();
    assert!((t - 2.278 * 1e6 / step).abs() < 0.05, "{t}");
}

#[test]
fn the_logged_throughput_gives_a_derived_verify_row() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("sglang.log");
    std::fs::write(
        &p,
        "[x TP0] Decode batch. #running-req: 1, #token: 64, token usage: 0.00, accept len: 2.50, cuda graph: True, gen throughput (token/s): 100.00, #queue-req: 0,\n",
    )
    .unwrap();
    let g = Gathered {
        server_log: Some(crate::evidence::read_server_log(&p).unwrap()),
        ..none()
    };
    let mut r = req();
    r.cycle.acceptance = None;
    r.cycle.draft_ms = Some(1.0);
    let e = explain(&r, &g).unwrap();
    let row = e.scenarios.iter().find(|s| s.row == Row::Logged).unwrap();
    // 2.5 tokens at 100 tok/s: a 25 ms cycle, less 2 draft steps of 1 ms and the drafted
    // tokens' bookkeeping (the engine terms: tau x 1 request x 2 tokens)
    let book = 1000.0 * e.cycle.overhead_ms.value;
    let t = &e.calibration.as_ref().unwrap().engine.terms;
    assert!((book - t.per_draft_token_us * 2.0).abs() < 1e-9);
    assert!(
        (row.verify.us - (23_000.0 - book)).abs() < 1e-6,
        "{}",
        row.verify.us
    );
    assert_eq!(row.verify.source, Source::Derived);
    assert_eq!(row.tokens_per_s, Some(100.0));
}

#[test]
fn no_row_beats_the_decode_step_or_gains_more_than_the_accept_length() {
    // The bounds hold for other accept lengths and draft costs: every row's verify is at least
    // the given decode step (less what the row's change saves on the decode too, against which
    // its gain is taken), and no row gains more than the accept length over plain decoding.
    for verify_ms in [30.0, 13.0, 6.0] {
        for tau in [1.2, 1.8, 2.5, 3.4, 4.0] {
            for draft in [0.0, 0.5, 3.0] {
                let r = ExplainRequest {
                    observed: None,
                    verify_ms: Some(verify_ms),
                    cycle: Flags {
                        decode_ms: Some(12.2),
                        draft_ms: Some(draft),
                        draft_steps: Some(3),
                        acceptance: Some(Acceptance::Length(tau)),
                        ..Default::default()
                    },
                    ..req()
                };
                let e = explain(&r, &none()).unwrap();
                let cal = e.calibration.as_ref().unwrap();
                assert!(cal.floor_ms.ms >= 12.2);
                for sc in &e.scenarios {
                    let plain = sc.plain_decode_ms.unwrap();
                    assert!(plain <= 12.2 + 1e-9, "{}", sc.row.name());
                    assert!(
                        sc.verify.us / 1000.0 >= plain - 1e-9,
                        "verify {verify_ms} tau {tau} draft {draft}: {} at {} us, faster than its decode {plain} ms",
                        sc.row.name(),
                        sc.verify.us
                    );
                    assert!(
                        sc.vs_baseline.unwrap() <= tau + 1e-9,
                        "verify {verify_ms} tau {tau} draft {draft}: {} gains {}",
                        sc.row.name(),
                        sc.vs_baseline.unwrap()
                    );
                    // the row's tokens/s is tau over its own cycle: the drafts, the verify and
                    // the drafted tokens' bookkeeping
                    let cycle = 3.0 * draft + sc.verify.us / 1000.0 + e.cycle.overhead_ms.value;
                    assert!((sc.tokens_per_s.unwrap() - 1000.0 * tau / cycle).abs() < 1e-6);
                    // every figure finite, and the point inside its range
                    if let Some([lo, hi]) = sc.step.range_us {
                        assert!(lo <= sc.step.step_us + 1e-6 && sc.step.step_us <= hi + 1e-6);
                    }
                }
                // a given verify below the given decode is warned about
                assert_eq!(
                    e.notes.iter().any(|n| n.starts_with("warning: the verify")),
                    verify_ms < 12.2
                );
            }
        }
    }
}
