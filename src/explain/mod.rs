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
//! - the known traps, each with its evidence and the source of its rule ([`crate::trace::traps`]).
//!
//! Every figure carries its source: measured, modeled, inferred, given or derived.
//!
//! The files: [`request`] (what is asked), [`gather`] (the evidence read once), [`pricing`]
//! and [`fit`] (the cost model's figures), [`as_ran`] (the verify as it ran), [`scenarios`]
//! (the counterfactuals and the summary), [`advice`] (what to run next, the engines' flags),
//! [`figures`] (the pieces of the answer), [`render`] (text and Markdown).

pub mod advice;
pub mod as_ran;
pub mod calibration;
pub mod figures;
pub mod fit;
pub mod gather;
pub mod observed;
pub mod pricing;
pub mod render;
pub mod request;
pub mod scenarios;

use serde::Serialize;

use crate::costmodel::ModelSettings;
use crate::evidence::checks;
use crate::evidence::Source;
pub use crate::model::Engine;
use crate::speculative::inputs::{Acceptance, Flags};
use crate::trace::analysis::ms;
use crate::trace::traps;
use advice::{EngineFlag, NextStep};
pub use figures::{Cycle, Figure, Part, Scenario};
pub use gather::{gather, Gathered};
pub use observed::Observed;
use pricing::Pricing;
pub use request::ExplainRequest;

/// The whole answer (the `data` of the JSON record).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// What was read, one line per piece of evidence.
    pub evidence: Vec<String>,
    pub ranks: usize,
    /// The schedule the model priced (`kimi-k2.5 verify, TP=8, 3 tokens: 124 collectives`).
    pub schedule: String,
    /// The same, as fields: model, phase, TP, tokens, collective counts and bytes.
    pub workload: crate::record::Workload,
    pub pricing: Pricing,
    pub as_ran: Vec<Part>,
    pub scenarios: Vec<Scenario>,
    pub cycle: Cycle,
    /// The model held to the user's decode, the floor of every row, the stated error.
    pub calibration: Option<calibration::Calibration>,
    pub fit: Option<fit::JitterFit>,
    /// The few sentences of the answer.
    pub summary: Vec<String>,
    pub next: Vec<NextStep>,
    pub engine_flags: Vec<EngineFlag>,
    pub traps: Vec<traps::Finding>,
    pub notes: Vec<String>,
}

/// Validates the request and explains the evidence.
pub fn explain(req: &ExplainRequest, g: &Gathered) -> anyhow::Result<Explanation> {
    let predict = g.trace.is_none() && req.observed.is_none() && req.verify_ms.is_none();
    if predict && req.cycle.decode_ms.is_none() {
        crate::usage_bail!(
            "nothing to explain: give the server's traces (--trace DIR, one trace per rank), what the profiler shows inside the collectives of one verify (--observed 122x0.2ms), the verify time (--verify-ms 30), or the plain decode step alone (--decode-ms 12.2) to have the verify predicted"
        );
    }
    if let Some(v) = req.verify_ms {
        crate::speculative::check_time("--verify-ms", v, true)?;
    }
    req.cycle.check_given()?;
    let mut notes = vec![];
    let mut evidence = vec![];
    // A trace of another kind of job (training) is refused before anything is read from it.
    let traced = g.trace.as_ref().map(crate::trace::against::traced_step);
    if let Some(t) = &traced {
        checks::serving_step(t, "--trace", "verify", checks::GIVE_VERIFY)?;
    }
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
    let rates = req
        .cycle
        .acceptance
        .as_ref()
        .and_then(Acceptance::positions);
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
    // Evidence of another workload is refused before anything is priced from it.
    if let Some(t) = &traced {
        notes.extend(checks::trace_against_schedule(t, &schedule, ranks)?);
    }
    let pricing = pricing::price(&schedule, ranks, &req.model)?;
    notes.extend(pricing.held.iter().cloned());
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
        as_ran::from_trace(a, &pricing, &mut as_ran, &mut notes)
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
        let (b, f) = as_ran::from_observed(
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
    } else if let Some(v) = req.verify_ms {
        evidence.push(format!(
            "--verify-ms {} (given)",
            crate::util::fmt_number(v)
        ));
        as_ran::from_verify_only(v * 1000.0, &pricing, &mut as_ran, &mut notes)
    } else {
        evidence.push("no verify given: predicted from the decode step (--decode-ms)".into());
        as_ran::predicted(&pricing, &mut as_ran)
    };
    if let Some(l) = &g.server_log {
        evidence.push(format!(
            "server log: {} ({}{}{})",
            l.file,
            l.engine.map_or("engine unknown", |e| e.label()),
            l.model
                .as_ref()
                .map(|m| format!(", model {m}"))
                .unwrap_or_default(),
            l.launch
                .as_ref()
                .map(|x| format!(", the verify ran {}", x.mode.words()))
                .unwrap_or_default()
        ));
        let names = [req.workload.model.as_str(), schedule.model.as_str()];
        notes.extend(l.model.as_ref().and_then(|m| {
            checks::server_model_against(&l.file, m, &names, req.workload.model_config.as_deref())
        }));
    }
    for l in &g.nccl_logs {
        let m = crate::evidence::nccl::machine(l);
        evidence.push(format!("NCCL log: {} ({})", l.name, m.words()));
        notes.extend(checks::nccl_log_against(
            &l.name,
            &m,
            ranks,
            &pricing.link_kind,
            &pricing.profile,
        ));
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

    let calibration = calibration::calibrate(
        &workload,
        ranks,
        &req.model,
        &pricing,
        cycle.decode_ms.as_ref().map(|d| d.value),
        req.decode_eager,
    )?;
    if let (Some(v), Some(d)) = (
        base.verify.as_ref().filter(|v| v.source != Source::Modeled),
        cycle.decode_ms.as_ref(),
    ) {
        if v.us / 1000.0 < d.value {
            notes.push(format!(
                "warning: the verify ({}, {}) is faster than the decode step ({:.2} ms, {}): a verify is never faster than a decode step of the same model on the same machine; was one of them run from a CUDA graph and the other eagerly?",
                ms(v.us),
                v.source.label(),
                d.value,
                d.origin.kind()
            ));
        }
    }
    let frame = scenarios::Frame {
        cycle: &cycle,
        calib: calibration.as_ref(),
    };
    let mut scenarios = scenarios::scenarios(&base, &pricing, g.sweep.as_ref(), &frame, &mut notes);
    if let Some(row) = g
        .server_log
        .as_ref()
        .and_then(|l| scenarios::logged_row(l, &frame, &mut notes))
    {
        scenarios.insert(scenarios.len().min(1), row);
    }
    // The server log's word on the verify's launch, where no trace measured it: the row of the
    // verify as it ran says it, the answer quotes it; a graphed verify gains nothing from the
    // graph rows.
    let launch = g
        .server_log
        .as_ref()
        .and_then(|l| Some((l, l.launch.as_ref()?)));
    let mut launch_sentence = None;
    if let (Some((l, x)), None) = (launch, &g.trace) {
        if let Some(row) = scenarios
            .first_mut()
            .filter(|r| r.name.starts_with("as it ran"))
        {
            row.name = x.row_name();
            row.verify
                .how
                .push_str(&format!("; ran {} ({})", x.mode.words(), l.file));
        }
        if x.mode == crate::evidence::LaunchMode::Graph {
            notes.push(format!(
                "{}: `{}`: {}; the CUDA-graph rows price a graph over an eager verify, which this one was not",
                l.file, x.line, x.meaning
            ));
        } else {
            launch_sentence = Some(x.sentence(&l.file));
        }
    }
    let engine = req.engine.or(g.server_log.as_ref().and_then(|l| l.engine));
    let engines_gate = ranks > 2 && pricing.link_kind != "nvlink";
    let mut summary = scenarios::summary(
        &base,
        &scenarios,
        &cycle,
        fit_result.as_ref(),
        g.trace.is_some(),
        engines_gate,
    );
    summary.splice(0..0, launch_sentence);
    let next = advice::next_steps(
        req,
        &workload,
        ranks,
        &base,
        fit_result.as_ref(),
        g,
        &pricing,
    );
    let engine_flags = advice::engine_flags(engine);
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
        workload: crate::record::Workload::of(&schedule),
        pricing,
        as_ran,
        scenarios,
        cycle,
        calibration,
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
    let decode_given = flags.decode_ms.is_some();
    if !decode_given {
        notes.push(
            "no --decode-ms: no baseline without speculation, so no tokens/s (give one plain decode step, ms)"
                .into(),
        );
    }
    // Without --decode-ms what was given is validated all the same, with a stand-in decode time.
    let flags = Flags {
        decode_ms: flags.decode_ms.or(Some(1.0)),
        ..flags
    };
    let i = crate::speculative::inputs::resolve(&flags, &[], false)?;
    if decode_given {
        if i.accept_length.is_none() {
            notes.push("no acceptance given (--accept-length, --accept-rates, --accept-rates-of-drafts, --accept-rate or a server log): the rows show the break-even accept length instead of tokens/s".into());
        }
        let free_drafts = i.notes.iter().filter(|n| n.starts_with("no --draft-ms"));
        notes.extend(free_drafts.cloned());
    }
    Ok(Cycle {
        baseline_tokens_per_s: decode_given
            .then(|| crate::speculative::baseline_tokens_per_s(i.decode_ms.value)),
        decode_ms: decode_given.then_some(i.decode_ms),
        accept_length: i.accept_length,
        draft_ms: i.draft_ms,
        draft_steps: i.draft_steps,
        overhead_ms: i.overhead_ms,
    })
}

#[cfg(test)]
mod tests;
