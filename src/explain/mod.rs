//! `verifybench explain`: the user's evidence in, the answer out.
//!
//! Evidence is any of: a server's profiler traces (every rank; [`crate::trace`] reads and
//! splits them), the server log (acceptance as SGLang or vLLM prints it, and whether the verify
//! ran from a CUDA graph), NCCL logs (for the traps), a sweep's results file (the best NCCL
//! setting), or plain numbers (`--observed 122x0.2ms`, `--verify-ms`, `--decode-ms`,
//! `--accept-length`, `--gpus`). The answer:
//!
//! - the verify as it ran: in collectives = transfer + waiting, compute, idle; measured where a
//!   trace has it, else modeled ([`pricing`]) or inferred (the observed time less the modeled
//!   transfer, with the host-gap jitter that reproduces it: [`fit`]);
//! - what a CUDA graph, the best NCCL setting and the one-shot custom all-reduce would make of
//!   it, as verify time and as tokens/s through the break-even ([`crate::speculative`]), against
//!   decoding without speculation;
//! - what to run next (exact commands) and the engines' flags that decide CUDA-graph capture;
//! - the known traps, each with its evidence and the source of its rule ([`traps`]).
//!
//! Every figure carries its source: measured, modeled, inferred, given or derived.

pub mod fit;
pub mod gather;
pub mod observed;
pub mod pricing;
pub mod render;

use std::path::PathBuf;

use serde::Serialize;

use crate::costmodel::ModelSettings;
use crate::evidence::ServerLog;
use crate::evidence::{Labelled, Source};
pub use crate::model::Engine;
use crate::output::Format;
use crate::request::Workload;
use crate::speculative::inputs::{Acceptance, Flags};
use crate::trace::{traps, Analysis};
pub use gather::Gathered;
use gather::SweepBest;
pub use observed::Observed;
use pricing::Pricing;

/// Everything `verifybench explain` needs, free of any command-line parser.
#[derive(Debug, Clone, Default)]
pub struct ExplainRequest {
    /// Profiler traces (files or folders), one per rank.
    pub traces: Vec<PathBuf>,
    /// NCCL logs (INIT, GRAPH, ENV lines) for the traps.
    pub nccl_logs: Vec<PathBuf>,
    /// The server's log (SGLang or vLLM).
    pub server_log: Option<PathBuf>,
    /// A sweep's results file.
    pub sweep: Option<PathBuf>,
    /// What the profiler showed inside the collectives of one verify.
    pub observed: Option<Observed>,
    /// The verify step as it ran, ms.
    pub verify_ms: Option<f64>,
    /// Decode, draft, draft steps, overhead and acceptance, as `breakeven` takes them
    /// (`verify_ms` unused here).
    pub cycle: Flags,
    /// Ranks (GPUs of the tensor-parallel group).
    pub gpus: Option<usize>,
    /// Model, tp and tokens of the verify (the schedule the model prices).
    pub workload: Workload,
    /// Whether `--tokens` was given (else k + 1 when --draft-steps is, else 3).
    pub tokens_given: bool,
    pub model: ModelSettings,
    /// Which engine's flags to show (else the server log's engine, else both).
    pub engine: Option<Engine>,
    /// NCCL settings the user gave the server (NAME, VALUE), checked against its NCCL log.
    pub expect: Vec<(String, String)>,
    pub format: Format,
    pub export_json: Option<PathBuf>,
}

/// One figure, us, with its source and how it was obtained.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figure {
    pub us: f64,
    pub source: Source,
    pub how: String,
}

fn fig(us: f64, source: Source, how: impl Into<String>) -> Figure {
    Figure {
        us,
        source,
        how: how.into(),
    }
}

/// One line of the verify as it ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Part {
    pub name: String,
    /// 0: a whole; 1: a part of the line above.
    pub depth: u8,
    pub figure: Figure,
}

/// One counterfactual (or the verify as it ran) with what it gives.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scenario {
    pub name: String,
    pub verify: Figure,
    /// Tokens/s with speculation at the accept length (needs --decode-ms's baseline too).
    pub tokens_per_s: Option<f64>,
    /// Tokens/s over decoding without speculation.
    pub vs_baseline: Option<f64>,
    /// The accept length at which this verify breaks even (needs --decode-ms).
    pub breakeven_tau: Option<f64>,
}

/// One command to run next.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NextStep {
    pub why: String,
    pub command: String,
}

/// An engine flag that decides whether the verify runs from a CUDA graph, with its source.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EngineFlag {
    pub engine: Engine,
    pub flag: &'static str,
    pub effect: &'static str,
    pub source: &'static str,
}

/// The speculation cycle as resolved (for tokens/s).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cycle {
    pub decode_ms: Option<Labelled>,
    /// 1000 / decode ms: decoding without speculation.
    pub baseline_tokens_per_s: Option<f64>,
    pub accept_length: Option<Labelled>,
    pub draft_ms: Labelled,
    pub draft_steps: u64,
    pub overhead_ms: Labelled,
}

/// The whole answer (the `data` of the JSON record).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// What was read, one line per piece of evidence.
    pub evidence: Vec<String>,
    pub ranks: usize,
    /// The schedule the model priced (`kimi-k2.5 verify, TP=8, 3 tokens: 124 collectives`).
    pub schedule: String,
    pub pricing: Pricing,
    pub as_ran: Vec<Part>,
    pub scenarios: Vec<Scenario>,
    pub cycle: Cycle,
    pub fit: Option<fit::JitterFit>,
    /// The few sentences of the answer.
    pub summary: Vec<String>,
    pub next: Vec<NextStep>,
    pub engine_flags: Vec<EngineFlag>,
    pub traps: Vec<traps::Finding>,
    pub notes: Vec<String>,
}

/// Reads every file of `req` (no printing).
pub fn gather(req: &ExplainRequest) -> anyhow::Result<Gathered> {
    let trace = if req.traces.is_empty() {
        None
    } else {
        Some(gather::read_traces(&req.traces)?)
    };
    let server_log = match &req.server_log {
        Some(p) => Some(crate::evidence::read_server_log(p)?),
        None => None,
    };
    let nccl_logs = crate::evidence::read_nccl_logs(&req.nccl_logs)?;
    let sweep = match &req.sweep {
        Some(p) => Some(gather::read_sweep(p)?),
        None => None,
    };
    Ok(Gathered {
        trace,
        server_log,
        nccl_logs,
        sweep,
    })
}

/// The verify's collectives and the as-ran figures the counterfactuals start from.
struct Base {
    verify: Option<Figure>,
    transfer: Figure,
    /// What a CUDA graph removes (waiting), when known.
    waiting: Option<Figure>,
    /// The verify from a CUDA graph.
    graph: Option<Figure>,
    already_graph: bool,
}

fn ms(us: f64) -> String {
    crate::trace::analysis::ms(us)
}

/// Validates the request and explains the evidence.
pub fn explain(req: &ExplainRequest, g: &Gathered) -> anyhow::Result<Explanation> {
    if g.trace.is_none() && req.observed.is_none() && req.verify_ms.is_none() {
        crate::usage_bail!(
            "nothing to explain: give the server's traces (--trace DIR, one trace per rank), what the profiler shows inside the collectives of one verify (--observed 122x0.2ms), or the verify time (--verify-ms 30)"
        );
    }
    if let Some(v) = req.verify_ms {
        crate::speculative::check_time("--verify-ms", v, true)?;
    }
    req.cycle.check_given()?;
    let mut notes = vec![];
    let mut evidence = vec![];
    // Ranks: the trace's world, else --gpus, else --tp, else 8.
    let trace_world = g.trace.as_ref().and_then(|a| {
        a.world_size
            .or_else(|| (a.ranks.len() > 1).then_some(a.ranks.len()))
    });
    if trace_world == Some(1) {
        crate::usage_bail!(
            "--trace {}: one rank's trace of a world of one: its collectives cannot be split into transfer and waiting; give every rank's trace of the same run (a TP-N server writes one per rank)",
            g.trace.as_ref().map(|a| a.files.join(", ")).unwrap_or_default()
        );
    }
    let tp = req.workload.tp.map(|t| t as usize);
    let ranks = match (trace_world, req.gpus, tp) {
        (Some(w), Some(n), _) if w != n => crate::usage_bail!(
            "--gpus {n} but the traces are of a world of {w} ranks: drop --gpus or give the traces of the {n}-GPU run"
        ),
        (_, Some(n), Some(t)) if n != t => crate::usage_bail!(
            "--gpus {n} and --tp {t}: explain prices one tensor-parallel group over all the GPUs; give the same number to both (or one of them)"
        ),
        (Some(w), _, _) => w,
        (None, Some(n), _) => n,
        (None, None, Some(t)) => t,
        (None, None, None) => 8,
    };
    if !(2..=1024).contains(&ranks) {
        crate::usage_bail!(
            "{ranks} GPUs: a verify with collectives needs 2 to 1024 ranks; give --gpus N (the GPUs of the tensor-parallel group)"
        );
    }
    // Draft steps k and tokens k + 1.
    let rates = match &req.cycle.acceptance {
        Some(Acceptance::Rates(r)) | Some(Acceptance::DraftFractions(r)) => Some(r.len() as u64),
        _ => None,
    };
    let k = match (req.cycle.draft_steps, rates, req.tokens_given) {
        (Some(k), _, _) => k,
        (None, Some(n), _) => n,
        (None, None, _) => req.workload.tokens.saturating_sub(1).max(1),
    };
    let mut workload = req.workload.clone();
    workload.tp = Some(ranks as u64);
    if !req.tokens_given {
        workload.tokens = k + 1;
    } else if workload.tokens != k + 1 {
        notes.push(format!(
            "--tokens {} but k = {k} draft steps verify {} tokens: the model prices --tokens",
            workload.tokens,
            k + 1
        ));
    }
    let schedule = workload.schedule(ranks as u64)?;
    let pricing = pricing::price(&schedule, ranks, &req.model)?;
    let nsched = pricing.per_collective_us.len();
    let schedule_words = format!(
        "{} {}, TP={}, {} tokens: {} collectives ({})",
        schedule.model,
        schedule.phase.name(),
        schedule.tp,
        schedule.tokens,
        nsched,
        schedule
            .collective_groups()
            .iter()
            .map(|c| format!("{} {}", c.n, c.kind.name()))
            .collect::<Vec<_>>()
            .join(" + ")
    );
    // The speculation cycle.
    let cycle = resolve_cycle(req, k, g, &mut notes)?;

    let mut as_ran = vec![];
    let mut fit_result = None;
    let base = if let Some(a) = &g.trace {
        evidence.push(format!(
            "traces: {} ({} ranks, {} steps, measured)",
            a.files.join(", "),
            a.ranks.len(),
            a.step.as_ref().map_or(0, |s| s.steps)
        ));
        if req.observed.is_some() {
            notes.push("--observed is not used: the traces measured the collectives".into());
        }
        if let Some(v) = req.verify_ms {
            notes.push(format!(
                "--verify-ms {} is not used: the traces measured the step",
                crate::util::fmt_number(v)
            ));
        }
        from_trace(a, &pricing, &mut as_ran, &mut notes)
    } else if let Some(o) = req.observed {
        evidence.push(format!(
            "--observed {o}: {} collectives of {} per verify (given)",
            o.count,
            ms(o.time_us)
        ));
        if let Some(v) = req.verify_ms {
            evidence.push(format!(
                "--verify-ms {} (given)",
                crate::util::fmt_number(v)
            ));
        }
        let (b, f) = from_observed(
            o,
            req.verify_ms,
            &schedule,
            &pricing,
            ranks,
            &mut as_ran,
            &mut notes,
        )?;
        fit_result = f;
        b
    } else {
        let v = req.verify_ms.expect("checked above");
        evidence.push(format!(
            "--verify-ms {} (given)",
            crate::util::fmt_number(v)
        ));
        from_verify_only(v * 1000.0, &pricing, &mut as_ran, &mut notes)
    };
    if let Some(l) = &g.server_log {
        evidence.push(format!(
            "server log: {} ({})",
            l.file,
            l.engine.map_or("engine unknown", |e| e.label())
        ));
        notes.extend(l.notes.iter().cloned());
    }
    for l in &g.nccl_logs {
        evidence.push(format!("NCCL log: {}", l.name));
    }
    if let Some(s) = g.sweep.as_ref().filter(|s| s.tp as usize != ranks) {
        notes.push(format!(
            "the sweep ran at TP={} but the verify is TP={ranks}: its best setting's ratio is carried over as it is; sweep at TP={ranks} on the server's GPUs for the real one",
            s.tp
        ));
    }
    if let Some(s) = &g.sweep {
        evidence.push(format!(
            "sweep: {} ({} points, {}; best {} at {:.3}x the defaults, {} {})",
            s.file,
            s.points,
            s.source,
            s.setting,
            s.ratio,
            if s.graph { "graph" } else { "eager" },
            s.mode
        ));
    }

    let mut scenarios = scenarios(&base, &pricing, g.sweep.as_ref(), &cycle, &mut notes);
    if let Some(row) = g
        .server_log
        .as_ref()
        .and_then(|l| logged_row(l, &cycle, &mut notes))
    {
        scenarios.insert(scenarios.len().min(1), row);
    }
    let engine = req.engine.or(g.server_log.as_ref().and_then(|l| l.engine));
    let engines_gate = ranks > 2 && pricing.link_kind != "nvlink";
    let summary = summary(
        &base,
        &scenarios,
        &cycle,
        fit_result.as_ref(),
        g.trace.is_some(),
        engines_gate,
    );
    let next = next_steps(
        req,
        &workload,
        ranks,
        &base,
        fit_result.as_ref(),
        g,
        &pricing,
    );
    let engine_flags = engine_flags(engine);
    let mut traps = traps::check(&traps::Inputs {
        trace: g.trace.as_ref(),
        server_log: g.server_log.as_ref(),
        nccl_logs: &g.nccl_logs,
        sweep_best: g
            .sweep
            .as_ref()
            .filter(|s| !s.overrides.is_empty())
            .map(|s| s.setting.as_str()),
        expect: &req.expect,
        oneshot_us: pricing.oneshot_per_all_reduce_us(),
        profile: &pricing.profile,
    });
    // NCCL's search at its floor across sockets: what a topology file is worth, as the model
    // prices the same verify with and without the cross-socket penalty.
    if let Some(t) = traps
        .iter_mut()
        .find(|t| t.rule.id == "nccl-graph-search-sys" && t.status == traps::Status::Found)
    {
        let with = |link: &str| {
            let m = ModelSettings {
                link: link.into(),
                profile: None,
                ..req.model.clone()
            };
            pricing::price(&schedule, ranks, &m).map(|p| p.transfer_us)
        };
        if let (Ok(without_file), Ok(with_file)) =
            (with("pcie-gen5-dual-socket"), with("pcie-gen5"))
        {
            t.detail.push_str(&format!(
                "; modeled transfer per verify {} without a topology file (pcie-gen5-dual-socket) against {} with one (pcie-gen5)",
                ms(without_file),
                ms(with_file)
            ));
        }
    }
    Ok(Explanation {
        evidence,
        ranks,
        schedule: schedule_words,
        pricing,
        as_ran,
        scenarios,
        cycle,
        fit: fit_result,
        summary,
        next,
        engine_flags,
        traps,
        notes,
    })
}

/// Decode, draft, steps and acceptance, validated as `breakeven` validates them; without
/// --decode-ms there is no baseline and no tokens/s.
fn resolve_cycle(
    req: &ExplainRequest,
    k: u64,
    g: &Gathered,
    notes: &mut Vec<String>,
) -> anyhow::Result<Cycle> {
    let mut flags = req.cycle.clone();
    flags.verify_ms.clear();
    flags.draft_steps = Some(k);
    if flags.acceptance.is_none() {
        flags.measured_accept_length = g.server_log.as_ref().and_then(|l| l.accept_length.clone());
    } else if g
        .server_log
        .as_ref()
        .is_some_and(|l| l.accept_length.is_some())
    {
        notes.push("the acceptance flag wins over the server log's accept length".into());
    }
    if flags.decode_ms.is_none() {
        notes.push(
            "no --decode-ms: no baseline without speculation, so no tokens/s (give one plain decode step, ms)"
                .into(),
        );
        // Validate what was given all the same.
        let probe = Flags {
            decode_ms: Some(1.0),
            ..flags.clone()
        };
        let i = crate::speculative::inputs::resolve(&probe, &[], false)?;
        return Ok(Cycle {
            decode_ms: None,
            baseline_tokens_per_s: None,
            accept_length: i.accept_length,
            draft_ms: i.draft_ms,
            draft_steps: i.draft_steps,
            overhead_ms: i.overhead_ms,
        });
    }
    let i = crate::speculative::inputs::resolve(&flags, &[], false)?;
    if i.accept_length.is_none() {
        notes.push("no acceptance given (--accept-length, --accept-rates, --accept-rates-of-drafts, --accept-rate or a server log): the rows show the break-even accept length instead of tokens/s".into());
    }
    notes.extend(
        i.notes
            .iter()
            .filter(|n| n.starts_with("no --draft-ms"))
            .cloned(),
    );
    Ok(Cycle {
        baseline_tokens_per_s: Some(crate::speculative::baseline_tokens_per_s(i.decode_ms.value)),
        decode_ms: Some(i.decode_ms),
        accept_length: i.accept_length,
        draft_ms: i.draft_ms,
        draft_steps: i.draft_steps,
        overhead_ms: i.overhead_ms,
    })
}

fn from_trace(a: &Analysis, p: &Pricing, parts: &mut Vec<Part>, notes: &mut Vec<String>) -> Base {
    let s = a.step.as_ref().expect("checked when read");
    let t = &s.typical;
    let ncoll = s.collectives_per_step as f64;
    let step_how = format!(
        "median step (step {} of {}) of the traces, mean over ranks; {}",
        t.index + 1,
        s.steps,
        s.mode_words()
    );
    parts.push(Part {
        name: "verify step".into(),
        depth: 0,
        figure: fig(t.step_us, Source::Measured, step_how),
    });
    parts.push(Part {
        name: "in collectives".into(),
        depth: 1,
        figure: fig(
            t.collectives_us,
            Source::Measured,
            format!(
                "{} collectives' kernels, mean over ranks",
                s.collectives_per_step
            ),
        ),
    });
    let (transfer, waiting) = match (t.transfer_us, t.waiting_us) {
        (Some(x), Some(w)) => (
            fig(
                x,
                Source::Measured,
                "the shortest rank's kernel per collective (the last to arrive waits for no one)",
            ),
            fig(
                w,
                Source::Measured,
                "each rank's kernel less the transfer, mean over ranks",
            ),
        ),
        _ => {
            notes.push("one rank's trace: its collectives cannot be split into transfer and waiting by measurement; the transfer is modeled and the waiting inferred (give every rank's trace of the same run)".into());
            let x = ncoll * p.per_collective_mean_us();
            (
                fig(
                    x,
                    Source::Modeled,
                    format!(
                        "{ncoll} x {:.1} us, the model's mean collective ({})",
                        p.per_collective_mean_us(),
                        p.profile
                    ),
                ),
                fig(
                    (t.collectives_us - x).max(0.0),
                    Source::Inferred,
                    "in collectives less the modeled transfer",
                ),
            )
        }
    };
    parts.push(Part {
        name: "transfer".into(),
        depth: 2,
        figure: transfer.clone(),
    });
    parts.push(Part {
        name: "waiting".into(),
        depth: 2,
        figure: waiting.clone(),
    });
    parts.push(Part {
        name: "compute kernels".into(),
        depth: 1,
        figure: fig(
            t.compute_us,
            Source::Measured,
            "every other kernel's time, mean over ranks",
        ),
    });
    parts.push(Part {
        name: "GPU idle".into(),
        depth: 1,
        figure: fig(
            t.idle_us,
            Source::Measured,
            "no kernel running, mean over ranks",
        ),
    });
    let already_graph = s.graph_steps > 0 && s.eager_steps == 0;
    let graph = if already_graph {
        fig(
            t.step_us,
            Source::Measured,
            "the traced steps already ran from a CUDA graph",
        )
    } else {
        let us = transfer.us + t.compute_us + ncoll * p.launch_graph_us;
        fig(
            us,
            Source::Modeled,
            format!(
                "{} transfer + compute as measured, plus {:.1} us of graph node gap per collective ({}); the waiting and the GPU idle left out: a graph launches every kernel from the device",
                transfer.source.label(),
                p.launch_graph_us,
                p.profile
            ),
        )
    };
    Base {
        verify: Some(fig(t.step_us, Source::Measured, "the median step")),
        transfer,
        waiting: Some(waiting),
        graph: Some(graph),
        already_graph,
    }
}

fn from_observed(
    o: Observed,
    verify_ms: Option<f64>,
    s: &crate::model::Schedule,
    p: &Pricing,
    ranks: usize,
    parts: &mut Vec<Part>,
    notes: &mut Vec<String>,
) -> anyhow::Result<(Base, Option<fit::JitterFit>)> {
    let in_coll = o.total_us();
    let verify_us = verify_ms.map(|v| v * 1000.0);
    if let Some(v) = verify_us {
        if v < in_coll {
            crate::usage_bail!(
                "--verify-ms {} is below the time inside the collectives, --observed {o} = {}: the verify holds its collectives; give the whole verify step's time",
                crate::util::fmt_number(v / 1000.0),
                ms(in_coll)
            );
        }
        parts.push(Part {
            name: "verify step".into(),
            depth: 0,
            figure: fig(v, Source::Given, "--verify-ms"),
        });
    }
    let nsched = p.per_collective_us.len();
    if o.count as usize != nsched {
        notes.push(format!(
            "the profiler's {} collectives differ from the schedule's {nsched} (engines fuse all-reduce with norms, skip the embedding's, or add the draft model's): per-collective means are compared, the model's transfer is {:.1} us per collective",
            o.count,
            p.per_collective_mean_us()
        ));
    }
    let x = o.count as f64 * p.per_collective_mean_us();
    parts.push(Part {
        name: "in collectives".into(),
        depth: 1,
        figure: fig(in_coll, Source::Given, format!("--observed {o}")),
    });
    let transfer = fig(
        x,
        Source::Modeled,
        format!(
            "{} x {:.1} us, the model's mean collective ({}, {})",
            o.count,
            p.per_collective_mean_us(),
            p.choice,
            p.profile
        ),
    );
    parts.push(Part {
        name: "transfer".into(),
        depth: 2,
        figure: transfer.clone(),
    });
    let w = in_coll - x;
    let mut fitted = None;
    let waiting = if w <= 0.0 {
        notes.push(format!(
            "the observed {} inside the collectives is at or below the model's transfer {}: nothing is left for waiting; the machine is faster than the profile ({}): give --link or a fitted --profile",
            ms(in_coll),
            ms(x),
            p.profile
        ));
        fig(
            0.0,
            Source::Inferred,
            "in collectives less the modeled transfer (none left)",
        )
    } else {
        let (mean, from) = match verify_us {
            Some(v) => (
                v / nsched as f64,
                format!("--verify-ms over the schedule's {nsched} collectives: the eager engine spends the verify launching"),
            ),
            None => (
                o.time_us,
                "the observed time of one collective (give --verify-ms to pin it)".to_string(),
            ),
        };
        let target = o.time_us * nsched as f64;
        let f = fit::fit(s, ranks, &p.per_collective_us, mean, &from, target);
        let how = if f.reached {
            format!(
                "in collectives less the modeled transfer; host gaps of {:.0} +- {:.0} us per collective reproduce it in the model ({} modeled vs {} observed per verify of {nsched} collectives)",
                f.mean_us,
                f.jitter_us,
                ms(f.modeled_us),
                ms(f.target_us)
            )
        } else {
            format!(
                "in collectives less the modeled transfer; no host-gap jitter up to {:.0} us reproduces it in the model (at most {})",
                f.jitter_us,
                ms(f.modeled_us)
            )
        };
        fitted = Some(f);
        fig(w, Source::Inferred, how)
    };
    parts.push(Part {
        name: "waiting".into(),
        depth: 2,
        figure: waiting.clone(),
    });
    let graph = verify_us.map(|v| {
        parts.push(Part {
            name: "compute + idle".into(),
            depth: 1,
            figure: fig(
                v - in_coll,
                Source::Derived,
                "the verify less its collectives (not split without traces)",
            ),
        });
        fig(
            v - waiting.us,
            Source::Modeled,
            "as it ran less the inferred waiting; compute and idle kept whole (an upper bound: a graph removes the launch gaps too)",
        )
    });
    if verify_us.is_none() {
        notes.push("no --verify-ms: the in-collective split is shown, but no verify time or tokens/s (give the verify step's time, ms)".into());
    }
    Ok((
        Base {
            verify: verify_us.map(|v| fig(v, Source::Given, "--verify-ms")),
            transfer,
            waiting: Some(waiting),
            graph,
            already_graph: false,
        },
        fitted,
    ))
}

fn from_verify_only(v: f64, p: &Pricing, parts: &mut Vec<Part>, notes: &mut Vec<String>) -> Base {
    let n = p.per_collective_us.len() as f64;
    parts.push(Part {
        name: "verify step".into(),
        depth: 0,
        figure: fig(v, Source::Given, "--verify-ms"),
    });
    let transfer = fig(
        p.transfer_us,
        Source::Modeled,
        format!(
            "the schedule's {n} collectives, {} ({})",
            p.choice, p.profile
        ),
    );
    parts.push(Part {
        name: "transfer".into(),
        depth: 1,
        figure: transfer.clone(),
    });
    let compute = p.compute_us.unwrap_or(0.0);
    if p.compute_us.is_some() {
        parts.push(Part {
            name: "compute".into(),
            depth: 1,
            figure: fig(
                compute,
                Source::Modeled,
                "the weight shards streamed at the profile's HBM bandwidth",
            ),
        });
    }
    let rest = v - p.transfer_us - compute;
    parts.push(Part {
        name: "waiting + idle".into(),
        depth: 1,
        figure: fig(
            rest.max(0.0),
            Source::Inferred,
            "the verify less the modeled transfer and compute; not split without --observed or traces",
        ),
    });
    if rest < 0.0 {
        notes.push(format!(
            "the model's transfer and compute ({}) exceed the given verify ({}): the machine is faster than the profile ({})",
            ms(p.transfer_us + compute),
            ms(v),
            p.profile
        ));
    }
    let graph = p.transfer_us + compute + n * p.launch_graph_us;
    Base {
        verify: Some(fig(v, Source::Given, "--verify-ms")),
        transfer,
        waiting: None,
        graph: Some(fig(
            graph.min(v),
            Source::Modeled,
            format!(
                "modeled transfer + compute + {:.1} us of graph node gap per collective",
                p.launch_graph_us
            ),
        )),
        already_graph: false,
    }
}

fn with_cycle(name: &str, verify: Figure, c: &Cycle) -> Scenario {
    let v_ms = verify.us / 1000.0;
    let (k, d, o) = (c.draft_steps, c.draft_ms.value, c.overhead_ms.value);
    let tps = match (&c.accept_length, c.baseline_tokens_per_s) {
        (Some(t), Some(_)) => Some(crate::speculative::tokens_per_s(t.value, v_ms, d, k, o)),
        _ => None,
    };
    let tau = c
        .decode_ms
        .as_ref()
        .map(|dm| crate::speculative::breakeven_accept_length(v_ms, d, k, o, dm.value));
    Scenario {
        name: name.into(),
        vs_baseline: tps.zip(c.baseline_tokens_per_s).map(|(a, b)| a / b),
        tokens_per_s: tps,
        breakeven_tau: tau,
        verify,
    }
}

/// The verify as the server log's throughput implies it: one request at `tau` tokens per cycle
/// and X tok/s takes tau / X per cycle, of which k draft steps and the overhead are not the
/// verify. The tokens/s is the log's (measured); the verify time is derived from it.
fn logged_row(l: &ServerLog, c: &Cycle, notes: &mut Vec<String>) -> Option<Scenario> {
    let (tps, lines) = l.batch1_tokens_per_s?;
    let Some(tau) = &c.accept_length else {
        notes.push(format!(
            "{}: {tps:.1} tok/s with one running request, but no accept length to turn it into a verify time",
            l.file
        ));
        return None;
    };
    let cycle_ms = 1000.0 * tau.value / tps;
    let verify_ms = cycle_ms - c.draft_steps as f64 * c.draft_ms.value - c.overhead_ms.value;
    if verify_ms <= 0.0 {
        notes.push(format!(
            "{}: {tps:.1} tok/s at accept length {:.2} leaves no time for the verify after {} draft steps of {} ms: check --draft-ms",
            l.file, tau.value, c.draft_steps, c.draft_ms.value
        ));
        return None;
    }
    let mut s = with_cycle(
        "as the server log measured it",
        fig(
            verify_ms * 1000.0,
            Source::Derived,
            format!(
                "{}: {tps:.1} tok/s measured (mean of {lines} lines with one running request), at accept length {:.2}: cycle {cycle_ms:.2} ms less the drafts and overhead",
                l.file, tau.value
            ),
        ),
        c,
    );
    s.tokens_per_s = Some(tps);
    s.vs_baseline = c.baseline_tokens_per_s.map(|b| tps / b);
    Some(s)
}

fn scenarios(
    b: &Base,
    p: &Pricing,
    sweep: Option<&SweepBest>,
    c: &Cycle,
    notes: &mut Vec<String>,
) -> Vec<Scenario> {
    let Some(v) = &b.verify else {
        return vec![];
    };
    let x = b.transfer.us;
    let mut out = vec![with_cycle(
        if b.already_graph {
            "as it ran (CUDA graph)"
        } else {
            "as it ran (eager)"
        },
        v.clone(),
        c,
    )];
    let graph = b.graph.clone();
    if let Some(gr) = &graph {
        if !b.already_graph {
            out.push(with_cycle("with a CUDA graph", gr.clone(), c));
        }
    }
    // The best NCCL setting: the sweep's when given (measured or modeled as it says), else
    // the model's.
    let (ratio, setting, src, from) = match sweep {
        Some(s) => (
            s.ratio,
            s.setting.clone(),
            if s.source == "measured" {
                Source::Derived
            } else {
                Source::Modeled
            },
            format!(
                "{} ({}, {} {} runs)",
                s.file,
                s.source,
                if s.graph { "graph" } else { "eager" },
                s.mode
            ),
        ),
        None => (
            p.best_ratio(),
            p.best_setting.clone(),
            Source::Modeled,
            format!("the model's best ({})", p.profile),
        ),
    };
    let cut = x * (1.0 - ratio);
    if ratio >= 0.999 {
        notes.push(format!(
            "no NCCL setting row: {setting} is already the best ({from}); NCCL settings leave the verify as it is"
        ));
    }
    let nccl_how = |base: &str| format!("{base} with the transfer x {ratio:.3}: {setting}, {from}");
    if !b.already_graph && ratio < 0.999 {
        out.push(with_cycle(
            "best NCCL setting",
            fig(v.us - cut, src, nccl_how("as it ran")),
            c,
        ));
    }
    if let Some(gr) = graph.as_ref().filter(|_| ratio < 0.999) {
        out.push(with_cycle(
            if b.already_graph {
                "best NCCL setting (graph)"
            } else {
                "best NCCL setting + CUDA graph"
            },
            fig(gr.us - cut, modeled_from(src), nccl_how("the graph row")),
            c,
        ));
    }
    match &p.oneshot_transfer_us {
        Ok(one) => {
            let r1 = one / p.transfer_us;
            let cut1 = x * (1.0 - r1);
            let how = |base: &str| {
                format!(
                    "{base} with the transfer x {r1:.3}: the all-reduces by the one-shot P2P kernel, the all-gather on NCCL (modeled, {})",
                    p.profile
                )
            };
            if !b.already_graph {
                out.push(with_cycle(
                    "one-shot all-reduce",
                    fig(v.us - cut1, Source::Modeled, how("as it ran")),
                    c,
                ));
            }
            if let Some(gr) = &graph {
                out.push(with_cycle(
                    "one-shot all-reduce + CUDA graph",
                    fig(gr.us - cut1, Source::Modeled, how("the graph row")),
                    c,
                ));
            }
        }
        Err(why) => notes.push(format!("no one-shot row: {why}")),
    }
    out
}

/// A figure computed by the model from one of `source` is modeled (measured stays derived).
fn modeled_from(source: Source) -> Source {
    match source {
        Source::Measured | Source::Given | Source::Derived => Source::Derived,
        _ => Source::Modeled,
    }
}

fn pct(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        100.0 * a / b
    } else {
        0.0
    }
}

fn summary(
    b: &Base,
    sc: &[Scenario],
    c: &Cycle,
    f: Option<&fit::JitterFit>,
    traced: bool,
    engines_gate: bool,
) -> Vec<String> {
    let mut out = vec![];
    if let Some(w) = &b.waiting {
        let in_coll = b.transfer.us + w.us;
        out.push(format!(
            "Of the {} inside the collectives, {} ({:.0}%) is waiting for the last rank ({}) and {} transfer ({}): NCCL settings can change at most the transfer.",
            ms(in_coll),
            ms(w.us),
            pct(w.us, in_coll),
            if traced && w.source == Source::Measured {
                "measured".to_string()
            } else {
                "inferred, not measured".to_string()
            },
            ms(b.transfer.us),
            b.transfer.source.label()
        ));
    }
    if let Some(f) = f {
        if f.reached {
            out.push(format!(
                "Waiting inferred, not measured: host gaps of {:.0} +- {:.0} us before each collective (an eager engine's CPU time between launches, different on every rank) reproduce it in the cost model.",
                f.mean_us, f.jitter_us
            ));
        } else {
            out.push(format!(
                "Waiting inferred, not measured, and larger than host-gap jitter up to {:.0} us explains in the model: look for a late rank (a trace of every rank shows it).",
                f.jitter_us
            ));
        }
    }
    let row = |name: &str| sc.iter().find(|s| s.name == name);
    let tps = |s: &Scenario| match (s.tokens_per_s, s.vs_baseline) {
        (Some(t), Some(x)) => format!(", {t:.1} tok/s ({x:.2}x decoding without speculation)"),
        _ => s
            .breakeven_tau
            .map(|t| format!(", breaking even at accept length {t:.2}"))
            .unwrap_or_default(),
    };
    if let (Some(now), Some(g)) = (sc.first(), row("with a CUDA graph")) {
        out.push(format!(
            "A CUDA graph removes the waiting: verify {} -> {} ({}){}{}.",
            ms(now.verify.us),
            ms(g.verify.us),
            g.verify.source.label(),
            tps(g),
            match (now.tokens_per_s, c.baseline_tokens_per_s) {
                (Some(t), Some(bl)) => format!(
                    ", against {t:.1} tok/s as it ran and {bl:.1} tok/s without speculation"
                ),
                _ => String::new(),
            }
        ));
    } else if b.already_graph {
        out.push("The verify already ran from a CUDA graph: its collectives' time is transfer and skew the graph cannot remove.".into());
    }
    match (
        sc.first(),
        row("best NCCL setting").or(row("best NCCL setting (graph)")),
    ) {
        (Some(now), Some(n)) => out.push(format!(
            "The best NCCL setting saves {} per verify ({}).",
            ms((now.verify.us - n.verify.us).max(0.0)),
            n.verify.source.label()
        )),
        (Some(_), None) => out.push(
            "NCCL's default choice is already the best setting the evidence knows: NCCL settings change nothing here (a sweep of the real machine, --sweep, may know better).".into(),
        ),
        _ => {}
    }
    if let Some(o) = row("one-shot all-reduce + CUDA graph") {
        out.push(format!(
            "The one-shot all-reduce with a CUDA graph: verify {} (modeled){}{}",
            ms(o.verify.us),
            tps(o),
            if engines_gate {
                "; SGLang and vLLM keep their custom all-reduce off on more than two GPUs without full NVLink, so this row needs an engine change."
            } else {
                "."
            }
        ));
    }
    out
}

fn next_steps(
    req: &ExplainRequest,
    w: &Workload,
    ranks: usize,
    b: &Base,
    f: Option<&fit::JitterFit>,
    g: &Gathered,
    p: &Pricing,
) -> Vec<NextStep> {
    let wl = format!("--model {} --tp {} --tokens {}", w.model, ranks, w.tokens);
    let mut out = vec![];
    let gaps = f
        .filter(|f| f.reached)
        .map(|f| format!(" --host-gap-us {:.0}:{:.0}", f.mean_us, f.jitter_us))
        .unwrap_or_default();
    if g.trace.is_none() {
        out.push(NextStep {
            why: "measure the split instead of inferring it: profile the server (every rank) and explain its traces".into(),
            command: format!(
                "verifybench explain --trace TRACE_DIR --decode-ms {}",
                req.cycle
                    .decode_ms
                    .map(crate::util::fmt_number)
                    .unwrap_or_else(|| "MS".into())
            ),
        });
    } else {
        out.push(NextStep {
            why: "replay the server's own collective sequence, eager and from a CUDA graph".into(),
            command: "verifybench trace TRACE_DIR --export-schedule server.json && verifybench verify --backend nccl --schedule server.json --graph both".into(),
        });
    }
    if !b.already_graph {
        out.push(NextStep {
            why: if gaps.is_empty() {
                "confirm on the real machine what a CUDA graph gives (eager against graph)".into()
            } else {
                "confirm the waiting and what a CUDA graph gives on the real machine: the fitted host gaps, eager against graph".into()
            },
            command: format!(
                "verifybench verify --backend nccl --gpus {ranks} {wl}{gaps} --graph both"
            ),
        });
    }
    out.push(NextStep {
        why: "find the best NCCL setting on the real machine, then explain with it".into(),
        command: format!(
            "verifybench sweep --backend nccl --gpus {ranks} {wl} -L NCCL_PROTO=LL,LL128,Simple -L NCCL_ALGO=Ring,Tree --graph both --results sweep.jsonl && verifybench explain --sweep sweep.jsonl ..."
        ),
    });
    let expect = req
        .expect
        .first()
        .or(g.sweep.as_ref().and_then(|s| s.overrides.first()))
        .map(|(k, v)| format!("{k}={v}"))
        .unwrap_or_else(|| "NCCL_PROTO=LL".into());
    out.push(NextStep {
        why: "check that the setting reached every worker of the running server".into(),
        command: format!("verifybench inspect --pid SERVER_PID --expect {expect}"),
    });
    if p.oneshot_transfer_us.is_ok() && ranks <= 8 {
        out.push(NextStep {
            why: "measure the one-shot custom all-reduce against NCCL on these GPUs".into(),
            command: format!(
                "verifybench verify --backend nccl --gpus {ranks} {wl} --impl nccl,oneshot --graph both"
            ),
        });
    }
    out
}

/// The engines' flags that decide whether the verify runs from a CUDA graph (and whether the
/// custom all-reduce runs), each with the file it is defined in.
pub(crate) const ENGINE_FLAGS: &[(Engine, &str, &str, &str)] = &[
    (
        Engine::Sglang,
        "--disable-cuda-graph",
        "must be absent: with it every decode and verify step runs eagerly",
        "sgl-project/sglang python/sglang/srt/server_args.py",
    ),
    (
        Engine::Sglang,
        "--cuda-graph-max-bs N / --cuda-graph-bs N..",
        "the verify's batch (requests x (k+1) tokens with EAGLE) must be among the captured sizes, else it runs eagerly (`cuda graph: False` in the decode log)",
        "sgl-project/sglang python/sglang/srt/server_args.py",
    ),
    (
        Engine::Sglang,
        "--disable-custom-all-reduce",
        "NCCL for every all-reduce; on more than two PCIe GPUs the custom all-reduce is off anyway",
        "sgl-project/sglang python/sglang/srt/server_args.py; python/sglang/srt/distributed/device_communicators/custom_all_reduce.py",
    ),
    (
        Engine::Vllm,
        "--enforce-eager",
        "must be absent: with it no CUDA graph is captured",
        "vllm-project/vllm vllm/engine/arg_utils.py",
    ),
    (
        Engine::Vllm,
        "--compilation-config '{\"cudagraph_mode\": \"FULL_AND_PIECEWISE\"}'",
        "NONE runs eagerly; PIECEWISE leaves attention (and what sits between the pieces) outside the graph; the capture sizes (cudagraph_capture_sizes) must cover the verify's batch",
        "vllm-project/vllm vllm/config/compilation.py",
    ),
    (
        Engine::Vllm,
        "--disable-custom-all-reduce",
        "NCCL for every all-reduce; on more than two PCIe GPUs the custom all-reduce is off anyway",
        "vllm-project/vllm vllm/engine/arg_utils.py; vllm/distributed/device_communicators/custom_all_reduce.py",
    ),
];

fn engine_flags(engine: Option<Engine>) -> Vec<EngineFlag> {
    ENGINE_FLAGS
        .iter()
        .filter(|(e, ..)| engine.is_none_or(|x| x == *e))
        .map(|&(engine, flag, effect, source)| EngineFlag {
            engine,
            flag,
            effect,
            source,
        })
        .collect()
}

#[cfg(test)]
mod tests;
