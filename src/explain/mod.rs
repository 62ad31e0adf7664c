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

pub(crate) mod advice;
pub(crate) mod as_ran;
pub(crate) mod calibration;
pub(crate) mod cycle;
pub(crate) mod figures;
pub(crate) mod fit;
pub(crate) mod gather;
pub(crate) mod observed;
pub(crate) mod pricing;
pub(crate) mod published;
pub(crate) mod render;
pub(crate) mod request;
pub(crate) mod scenarios;

use serde::Serialize;

use crate::costmodel::ModelSettings;
use crate::evidence::checks::{self, TracedStep};
use crate::evidence::{Labelled, ServerLog, Source};
pub(crate) use crate::model::Engine;
use crate::model::Schedule;
use crate::request::{RankInputs, RankRule, Workload, DEFAULT_RANKS, MAX_RANKS};
use crate::speculative::inputs::{Acceptance, Times};
use crate::trace::analysis::ms;
use crate::trace::traps;
use advice::{EngineFlag, NextStep};
use figures::Base;
pub(crate) use figures::{Cycle, Part, Row, Scenario};
use fit::JitterFit;
pub(crate) use gather::{gather, Gathered};
pub(crate) use observed::Observed;
use pricing::Pricing;
pub(crate) use request::{EngineSettings, ExplainRequest};

/// The whole answer (the `data` of the JSON record).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Explanation {
    /// What was read, one line per piece of evidence.
    pub(crate) evidence: Vec<String>,
    pub(crate) ranks: usize,
    /// The schedule the model priced (`kimi-k2.5 verify, TP=8, 3 tokens: 124 collectives`).
    pub(crate) schedule: String,
    /// The same, as fields: model, phase, TP, tokens, collective counts and bytes.
    pub(crate) workload: crate::record::RecordedWorkload,
    pub(crate) pricing: Pricing,
    pub(crate) as_ran: Vec<Part>,
    pub(crate) scenarios: Vec<Scenario>,
    pub(crate) cycle: Cycle,
    /// The model held to the user's decode, the floor of every row, the stated error.
    pub(crate) calibration: Option<calibration::Calibration>,
    pub(crate) fit: Option<JitterFit>,
    /// The few sentences of the answer.
    pub(crate) summary: Vec<String>,
    pub(crate) next: Vec<NextStep>,
    pub(crate) engine_flags: Vec<EngineFlag>,
    pub(crate) traps: Vec<traps::TrapCheck>,
    pub(crate) notes: Vec<String>,
}

/// The engine's step around the given times as `explain` prices it, for `breakeven` and
/// `report`: the draft forward and the overhead (given, else modeled through the engine terms)
/// and the step's terms (the floor, the draft forwards, the requests), so that the three
/// commands give one answer for one set of inputs. `decode` is the decode step resolved from the
/// flags or the records.
pub(crate) fn step_terms(
    e: &request::EngineSettings,
    flags: &crate::speculative::inputs::Flags,
    decode: &Labelled,
    batch: &crate::request::Batch,
) -> anyhow::Result<(Labelled, Labelled, crate::speculative::analysis::StepTerms)> {
    let req = e.request(flags, decode.value, batch);
    let x = explain(&req, &Gathered::default())?;
    let c = x.cycle;
    Ok((
        c.draft_ms,
        c.overhead_ms,
        crate::speculative::analysis::StepTerms {
            floor: x.calibration.map(|c| c.floor_ms),
            draft_forwards: c.draft_forwards,
            concurrency: c.concurrency,
        },
    ))
}

/// Validates the request and explains the evidence.
pub(crate) fn explain(req: &ExplainRequest, g: &Gathered) -> anyhow::Result<Explanation> {
    let times = check_given(req, g)?;
    let mut notes = vec![];
    // A trace of another kind of job (training) is refused before anything is read from it.
    let traced = g.trace.as_ref().map(crate::trace::against::traced_step);
    if let Some(t) = &traced {
        checks::serving_step(t, "--trace", "verify", checks::GIVE_VERIFY)?;
    }
    let run = Run::resolve(req, g, traced.as_ref(), &mut notes)?;
    let calibration = calibration::calibrate(
        &run.workload,
        run.ranks,
        &req.model,
        &run.pricing,
        &calibration::GivenDecode {
            ms: times.decode_ms.as_ref().map(|d| d.value),
            eager: req.decode_eager,
            context: req.decode_context,
        },
        &req.drafter,
        run.k,
    )?;
    let cycle = resolve_cycle(req, &run, times, g, calibration.as_ref(), &mut notes)?;
    let (mut as_ran, mut evidence) = (vec![], vec![]);
    let (base, fit) = verify_as_ran(req, g, &run, &mut as_ran, &mut evidence, &mut notes)?;
    read_logs(req, g, &run, &mut evidence, &mut notes);
    notes.extend(verify_below_decode(&base, &cycle));
    let frame = scenarios::Frame {
        cycle: &cycle,
        calib: calibration.as_ref(),
    };
    let (scenarios, launch_sentence) = rows(&base, &run.pricing, g, &frame, &mut notes);
    let engines_gate = run.ranks > 2 && run.pricing.link_kind != "nvlink";
    // what the server log says of the custom all-reduce, where it is this server's
    let custom_ar = g
        .server_log
        .as_ref()
        .filter(|l| l.tensor_parallel.is_none_or(|tp| tp as usize == run.ranks))
        .and_then(ServerLog::custom_ar_words);
    let mut summary = scenarios::summary(
        &base,
        &scenarios,
        &cycle,
        fit.as_ref(),
        g.trace.is_some(),
        (engines_gate, custom_ar.as_deref()),
    );
    summary.splice(0..0, launch_sentence);
    let next = advice::next_steps(
        req,
        &run.workload,
        run.ranks,
        &base,
        fit.as_ref(),
        g,
        &run.pricing,
    );
    let engine = req.engine.or(g.server_log.as_ref().and_then(|l| l.engine));
    let traps = traps(req, g, &run);
    Ok(Explanation {
        evidence,
        ranks: run.ranks,
        schedule: run.words(),
        workload: crate::record::RecordedWorkload::of(&run.schedule),
        pricing: run.pricing,
        as_ran,
        scenarios,
        cycle,
        calibration,
        fit,
        summary,
        next,
        engine_flags: advice::engine_flags(engine),
        traps,
        notes,
    })
}

/// Something to explain, and every number given checked, before any evidence is weighed:
/// `--verify-ms`, then the times of the cycle and `--draft-steps` as `breakeven` checks them.
fn check_given(req: &ExplainRequest, g: &Gathered) -> anyhow::Result<Times<Option<Labelled>>> {
    let predict = g.trace.is_none() && req.observed.is_none() && req.verify_ms.is_none();
    if predict && req.cycle.decode_ms.is_none() {
        crate::usage_bail!(
            "nothing to explain: give the server's traces (--trace DIR, one trace per rank), what the profiler shows inside the collectives of one verify (--observed 122x0.2ms), the verify time (--verify-ms 30), or the plain decode step alone (--decode-ms 12.2) to have the verify predicted"
        );
    }
    if let Some(v) = req.verify_ms {
        crate::speculative::check_time("--verify-ms", v, true)?;
    }
    req.cycle.check_given()
}

/// How `explain` words its refusals of a rank count: one tensor-parallel group over all the
/// GPUs, with collectives, so at least 2.
const EXPLAIN_RANKS: RankRule = RankRule {
    world_vs_gpus: |w, n| {
        format!("--gpus {n} but the traces are of a world of {w} ranks: drop --gpus or give the traces of the {n}-GPU run")
    },
    gpus_vs_tp: |_, n, t| {
        format!("--gpus {n} and --tp {t}: explain prices one tensor-parallel group over all the GPUs; give the same number to both (or one of them)")
    },
    range: 2..=MAX_RANKS,
    out_of_range: |n| {
        format!("{n} GPUs: a verify with collectives needs 2 to {MAX_RANKS} ranks; give --gpus N (the GPUs of the tensor-parallel group)")
    },
};

/// What the verify is: its ranks, its draft steps k (k + 1 tokens), the workload and schedule
/// the model prices, and the model's prices.
struct Run {
    ranks: usize,
    k: u64,
    workload: Workload,
    schedule: Schedule,
    pricing: Pricing,
}

impl Run {
    fn resolve(
        req: &ExplainRequest,
        g: &Gathered,
        traced: Option<&TracedStep>,
        notes: &mut Vec<String>,
    ) -> anyhow::Result<Run> {
        // Ranks: the trace's world, else --gpus, else --tp, else 8.
        let world = g.trace.as_ref().and_then(|a| {
            a.world_size
                .or_else(|| (a.ranks.len() > 1).then_some(a.ranks.len()))
        });
        if world == Some(1) {
            crate::usage_bail!(
                "--trace {}: one rank's trace of a world of one: its collectives cannot be split into transfer and waiting; give every rank's trace of the same run (a TP-N server writes one per rank)",
                g.trace.as_ref().map(|a| a.files.join(", ")).unwrap_or_default()
            );
        }
        let given = RankInputs {
            world,
            gpus: req.gpus,
            tp: req.workload.tp,
            ..Default::default()
        };
        let ranks = crate::request::ranks(&given, DEFAULT_RANKS, &EXPLAIN_RANKS)?;
        let k = draft_steps(req, g, notes);
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
        if let Some(t) = traced {
            notes.extend(checks::trace_against_schedule(t, &schedule, ranks)?);
        }
        let mut pricing = pricing::price(&schedule, ranks, &req.model)?;
        notes.extend(pricing.held.iter().cloned());
        // `--allreduce-choice FILE`: the one-shot rows take the decision's choice per size.
        if let Some(c) = &g.allreduce_choice {
            let (transfer, line) = crate::choose::for_explain::transfer_with_choice(
                c,
                &schedule,
                ranks,
                &pricing.per_collective_us,
            );
            pricing.oneshot_transfer_us = transfer;
            notes.push(line);
        }
        Ok(Run {
            ranks,
            k,
            workload,
            schedule,
            pricing,
        })
    }

    /// `kimi-k2.5 verify, TP=8, 3 tokens: 124 collectives (123 all_reduce + 1 all_gather)`.
    fn words(&self) -> String {
        let s = &self.schedule;
        format!(
            "{} {}, TP={}, {} tokens: {} collectives ({})",
            s.model,
            s.phase.name(),
            s.tp,
            s.tokens,
            self.pricing.per_collective_us.len(),
            s.collective_groups()
                .iter()
                .map(|c| format!("{} {}", c.n, c.kind.name()))
                .collect::<Vec<_>>()
                .join(" + ")
        )
    }
}

/// Draft steps k (the verify covers k + 1 tokens): `--draft-steps`, else the number of
/// per-position rates given, else the server log's (its speculative config), unless
/// `--tokens` says it, else `--tokens` less one; where the log's differs from the flags', a
/// note.
fn draft_steps(req: &ExplainRequest, g: &Gathered, notes: &mut Vec<String>) -> u64 {
    let rates = req
        .cycle
        .acceptance
        .as_ref()
        .and_then(Acceptance::positions);
    let flagged = req.cycle.draft_steps.or(rates);
    let logged = g.server_log.as_ref().and_then(|l| l.draft_steps.as_ref());
    let k = match (flagged, logged) {
        (Some(k), _) => k,
        (None, Some((n, _))) if !req.tokens_given => *n,
        _ => req.workload.tokens.saturating_sub(1).max(1),
    };
    if let Some((n, origin)) = logged {
        if flagged.is_none() && !req.tokens_given {
            notes.push(format!(
                "k = {n} draft steps, as the server log says ({})",
                origin.from
            ));
        } else if *n != k {
            notes.push(format!(
                "the server log says k = {n} draft steps ({}), but the flags give k = {k}: k = {k} is priced",
                origin.from
            ));
        }
    }
    k
}

/// The verify as it ran, from the best evidence given (the traces, what the profiler showed
/// inside the collectives, the verify time, else the model's prediction), and its evidence
/// line.
fn verify_as_ran(
    req: &ExplainRequest,
    g: &Gathered,
    run: &Run,
    parts: &mut Vec<Part>,
    evidence: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> anyhow::Result<(Base, Option<JitterFit>)> {
    let given = |v: f64| format!("--verify-ms {} (given)", crate::util::fmt_number(v));
    if let Some(a) = &g.trace {
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
        Ok((as_ran::from_trace(a, &run.pricing, parts, notes), None))
    } else if let Some(o) = req.observed {
        evidence.push(format!(
            "--observed {o}: {} collectives of {} per verify (given)",
            o.count,
            ms(o.time_us)
        ));
        evidence.extend(req.verify_ms.map(given));
        let (s, p) = (&run.schedule, &run.pricing);
        as_ran::from_observed(o, req.verify_ms, s, p, run.ranks, parts, notes)
    } else if let Some(v) = req.verify_ms {
        evidence.push(given(v));
        let base = as_ran::from_verify_only(v * 1000.0, &run.pricing, parts, notes);
        Ok((base, None))
    } else {
        evidence.push("no verify given: predicted from the decode step (--decode-ms)".into());
        Ok((as_ran::predicted(&run.pricing, parts), None))
    }
}

/// The evidence lines of the logs and the sweep, and what they say against the run: the
/// server's model, the NCCL logs' machine, the sweep's TP.
fn read_logs(
    req: &ExplainRequest,
    g: &Gathered,
    run: &Run,
    evidence: &mut Vec<String>,
    notes: &mut Vec<String>,
) {
    if let Some(l) = &g.server_log {
        evidence.push(format!(
            "server log: {} ({}{}{}{})",
            l.file,
            l.engine.map_or("engine unknown", |e| e.label()),
            l.model
                .as_ref()
                .map(|m| format!(", model {m}"))
                .unwrap_or_default(),
            l.draft_steps
                .as_ref()
                .map(|(k, _)| format!(", k = {k} draft steps"))
                .unwrap_or_default(),
            l.launch
                .as_ref()
                .map(|x| format!(", the verify ran {}", x.mode.words()))
                .unwrap_or_default()
        ));
        let names = [req.workload.model.as_str(), run.schedule.model.as_str()];
        notes.extend(l.model.as_ref().and_then(|m| {
            checks::server_model_against(&l.file, m, &names, req.workload.model_config.as_deref())
        }));
    }
    for l in &g.nccl_logs {
        let m = crate::evidence::nccl::machine(l);
        evidence.push(format!("NCCL log: {} ({})", l.name, m.words()));
        let p = &run.pricing;
        notes.extend(checks::nccl_log_against(
            &l.name,
            &m,
            run.ranks,
            &p.link_kind,
            &p.profile,
        ));
    }
    let ranks = run.ranks;
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
}

/// A given or measured verify faster than the decode step: the warning.
fn verify_below_decode(base: &Base, cycle: &Cycle) -> Option<String> {
    let v = base
        .verify
        .as_ref()
        .filter(|v| v.source != Source::Modeled)?;
    let d = cycle.decode_ms.as_ref()?;
    (v.us / 1000.0 < d.value).then(|| format!(
        "warning: the verify ({}, {}) is faster than the decode step ({:.2} ms, {}): a verify is never faster than a decode step of the same model on the same machine; was one of them run from a CUDA graph and the other eagerly?",
        ms(v.us),
        v.source.label(),
        d.value,
        d.origin.kind()
    ))
}

/// The what-if rows, the server log's among them, and the server log's word on the verify's
/// launch where no trace measured it: the row of the verify as it ran says it, the answer
/// quotes it (the sentence returned); a graphed verify gains nothing from the graph rows.
fn rows(
    base: &Base,
    pricing: &Pricing,
    g: &Gathered,
    frame: &scenarios::Frame,
    notes: &mut Vec<String>,
) -> (Vec<Scenario>, Option<String>) {
    let mut rows = scenarios::scenarios(base, pricing, g.sweep.as_ref(), frame, notes);
    let log = g.server_log.as_ref();
    if let Some(row) = log.and_then(|l| scenarios::logged_row(l, frame, notes)) {
        rows.insert(rows.len().min(1), row);
    }
    let launch = log.and_then(|l| Some((l, l.launch.as_ref()?)));
    let (Some((l, x)), None) = (launch, &g.trace) else {
        return (rows, None);
    };
    if let Some(row) = rows.first_mut().filter(|r| matches!(r.row, Row::AsRan(_))) {
        row.row = Row::AsRan(x.mode);
        row.verify
            .how
            .push_str(&format!("; ran {} ({})", x.mode.words(), l.file));
    }
    if x.mode == crate::evidence::LaunchMode::Graph {
        notes.push(format!(
            "{}: `{}`: {}; the CUDA-graph rows price a graph over an eager verify, which this one was not",
            l.file, x.line, x.meaning
        ));
        (rows, None)
    } else {
        (rows, Some(x.sentence(&l.file)))
    }
}

/// The known traps, each with its evidence; NCCL's search at its floor across sockets priced:
/// what a topology file is worth, as the model prices the same verify with and without the
/// cross-socket penalty.
fn traps(req: &ExplainRequest, g: &Gathered, run: &Run) -> Vec<traps::TrapCheck> {
    let mut found = traps::check(&traps::Inputs {
        trace: g.trace.as_ref(),
        server_log: g.server_log.as_ref(),
        nccl_logs: &g.nccl_logs,
        sweep_best: g
            .sweep
            .as_ref()
            .filter(|s| !s.overrides.is_empty())
            .map(|s| s.setting.as_str()),
        expect: &req.expect,
        oneshot_us: run.pricing.oneshot_per_all_reduce_us(),
        profile: &run.pricing.profile,
        ranks: run.ranks,
        link_kind: &run.pricing.link_kind,
    });
    if let Some(t) = found
        .iter_mut()
        .find(|t| t.rule.id == "nccl-graph-search-sys" && t.status == traps::Status::Found)
    {
        let with = |link: &str| {
            let m = ModelSettings {
                link: link.into(),
                profile: None,
                ..req.model.clone()
            };
            pricing::price(&run.schedule, run.ranks, &m).map(|p| p.transfer_us)
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
    found
}

/// Decode, draft, steps and acceptance, checked as `breakeven` checks them (their times
/// already, by [`check_given`]); without --decode-ms there is no baseline and no tokens/s.
fn resolve_cycle(
    req: &ExplainRequest,
    run: &Run,
    times: Times<Option<Labelled>>,
    g: &Gathered,
    calib: Option<&calibration::Calibration>,
    notes: &mut Vec<String>,
) -> anyhow::Result<Cycle> {
    let k = run.k;
    let mut flags = req.cycle.clone();
    flags.draft_steps = Some(k);
    let logged = g.server_log.as_ref().and_then(|l| l.accept_length.clone());
    if flags.acceptance.is_none() {
        flags.measured_accept_length = logged;
        if let Some(p) = &req.server_log {
            flags.measured_from = format!("--server-log '{}'", p.display());
        }
    } else if logged.is_some() {
        notes.push("the acceptance flag wins over the server log's accept length".into());
    }
    let decode_given = times.decode_ms.is_some();
    if !decode_given {
        notes.push(
            "no --decode-ms: no baseline without speculation, so no tokens/s (give one plain decode step, ms)"
                .into(),
        );
    }
    let i = crate::speculative::inputs::complete(&flags, &[], times)?;
    notes.extend(acceptance_notes(req, g, i.draft_steps));
    if decode_given && i.accept_length.is_none() {
        notes.push("no acceptance given (--accept-length, --accept-rates, --accept-rates-of-drafts, --accept-rate or a server log): the rows show the break-even accept length instead of tokens/s".into());
    }
    let concurrency = run.workload.batch.concurrency.max(1);
    let (draft_ms, overhead_ms, draft_forwards) = calibrated_cycle(&i, calib, concurrency, notes);
    Ok(Cycle {
        baseline_tokens_per_s: i
            .decode_ms
            .as_ref()
            .map(|d| concurrency as f64 * crate::speculative::baseline_tokens_per_s(d.value)),
        decode_ms: i.decode_ms,
        accept_length: i.accept_length,
        draft_ms,
        draft_steps: i.draft_steps,
        draft_forwards,
        overhead_ms,
        concurrency,
    })
}

/// The draft forward and the overhead of the step: given, else the draft's schedule and the
/// drafted tokens' bookkeeping through the engine terms (never a silent 0 ms where the cycle is
/// known); the draft forwards per step.
fn calibrated_cycle(
    i: &crate::speculative::inputs::Inputs<Option<Labelled>>,
    calib: Option<&calibration::Calibration>,
    concurrency: u64,
    notes: &mut Vec<String>,
) -> (Labelled, Labelled, u64) {
    use crate::evidence::provenance::Origin;
    let k = i.draft_steps;
    let step = calib.and_then(|c| c.step.map(|s| (c, s)));
    let forwards = calib
        .filter(|c| c.model_drafts_us.is_some())
        .map_or(k, |c| c.draft_forwards.max(1));
    let given = |l: &Labelled| l.origin.source != Source::Default;
    let draft = match step {
        Some((c, s)) if !given(&i.draft_ms) => {
            let per = (s.drafts_us + s.draft_overhead_us) / forwards as f64 / 1000.0;
            Labelled {
                value: per,
                origin: Origin::read(
                    Source::Modeled,
                    "the draft's schedule through the engine terms".into(),
                    format!(
                        "{} {} forward{} modeled {:.3} ms, scaled as the given decode scales the model's, + {:.3} ms fixed cost each ({})",
                        forwards,
                        c.drafter.as_deref().unwrap_or("draft"),
                        if forwards == 1 { "" } else { "s" },
                        c.model_drafts_us.unwrap_or(0.0) / 1000.0,
                        s.draft_overhead_us / forwards as f64 / 1000.0,
                        c.engine.source
                    ),
                ),
            }
        }
        _ => {
            if !given(&i.draft_ms) && i.decode_ms.is_some() {
                notes.push(
                    "no --draft-ms and no graphed decode to scale the draft's schedule by: drafting is taken as free (0 ms), so the tokens/s is an upper bound".into(),
                );
            }
            i.draft_ms.clone()
        }
    };
    let overhead = match step {
        Some((c, s)) if !given(&i.overhead_ms) => Labelled {
            value: s.bookkeeping_us / 1000.0,
            origin: Origin::read(
                Source::Modeled,
                "the engine terms".into(),
                format!(
                    "{:.1} us per request and drafted token x {concurrency} x {k} ({})",
                    c.engine.terms.per_draft_token_us, c.engine.source
                ),
            ),
        },
        _ => i.overhead_ms.clone(),
    };
    (draft, overhead, forwards)
}

/// vLLM's acceptance figures mapped to the accept length, with the conversion (at the log's
/// own k where it gives one, else at `k`), and a warning where `--accept-rate` looks like
/// vLLM's accept rate (accepted / drafted tokens) rather than the per-token rate it takes.
fn acceptance_notes(req: &ExplainRequest, g: &Gathered, k: u64) -> Vec<String> {
    let mut notes = vec![];
    let log = g.server_log.as_ref();
    let logged_k = log.and_then(|l| l.draft_steps.as_ref()).map(|d| d.0);
    let figures = log.and_then(|l| Some((l.file.as_str(), l.vllm_acceptance.as_ref()?)));
    if let Some((file, a)) = figures {
        notes.push(a.conversion(file, logged_k.or(Some(k))));
    }
    if let Some(Acceptance::Rate(rate)) = &req.cycle.acceptance {
        let said = if req.engine == Some(Engine::Vllm) {
            Some("--engine vllm".to_string())
        } else {
            log.filter(|l| l.engine == Some(Engine::Vllm))
                .map(|l| format!("the server log ({})", l.file))
        };
        notes.extend(crate::evidence::vllm::accept_rate_warning(
            *rate,
            k,
            figures,
            said.as_deref(),
        ));
    }
    notes
}

#[cfg(test)]
mod tests;
