//! `verifybench breakeven`: speculative-decoding break-even from given or recorded times.
//! Pure arithmetic (see `crate::speculative`); needs no GPU.

use std::path::PathBuf;

use crate::evidence::Labelled;
use crate::output::Format;
use crate::report::breakeven::{print_out, render};
use crate::speculative::analysis::{analyse_step, StepTerms};
use crate::speculative::inputs::{self, Flags};
use crate::trace::breakeven::TraceInput;

/// `breakeven`: the times and acceptance given as flags (`flags`), and the files the flags
/// of the same names read them from.
#[derive(Debug, Clone)]
pub(crate) struct BreakevenRequest {
    pub(crate) flags: Flags,
    pub(crate) from: Vec<PathBuf>,
    pub(crate) from_trace: Vec<TraceInput>,
    pub(crate) accept_from_log: Option<PathBuf>,
    /// `--concurrency`, `--context`, `--kv-dtype`, `--dcp`: the batch the times belong to.
    pub(crate) batch: crate::request::Batch,
    /// The model and machine the step's modeled parts are priced for (as `explain` does).
    pub(crate) engine: crate::explain::EngineSettings,
    pub(crate) format: Format,
}

/// Runs `verifybench breakeven`.
pub(crate) fn run(a: &BreakevenRequest) -> anyhow::Result<i32> {
    a.batch.check()?;
    let (mut times, mut file_notes) = crate::evidence::read_verify_files(&a.from)?;
    times.extend(crate::trace::breakeven::read_trace_times(&a.from_trace)?);
    let mut flags = a.flags.clone();
    if let Some(p) = &a.accept_from_log {
        let log = crate::evidence::read_accept_log(p)?;
        flags.measured_accept_length = Some(log.accept_length);
        flags.measured_draft_steps = log.draft_steps;
        flags.measured_from = format!("--accept-from-log '{}'", p.display());
        file_notes.extend(log.notes);
    }
    // A break-even needs the decode time: its baseline.
    let inputs = inputs::resolve::<Labelled>(&flags, &times, true)?;
    let (mut inputs, terms) = with_engine_step(inputs, &flags, &a.engine, &a.batch, &times)?;
    inputs.notes.extend(file_notes);
    inputs.notes.extend(batch_note(&a.batch));
    let analysis = analyse_step(inputs, &terms);
    let text = if a.format.is_json() {
        serde_json::to_string_pretty(&analysis)? + "\n"
    } else {
        render(&analysis)
    };
    print_out(&text)?;
    Ok(0)
}

/// The batch the times were given for, where it is not one request without context: said, so
/// that a result carries what it is about.
fn batch_note(b: &crate::request::Batch) -> Option<String> {
    let d = crate::request::Batch::default();
    if b.concurrency == d.concurrency && b.context == d.context {
        return None;
    }
    let kv = if b.context > 0 {
        format!(
            ", context {} tokens per request (KV cache {}{})",
            b.context,
            b.kv_dtype.name(),
            if b.dcp > 1 {
                format!(", --dcp {}", b.dcp)
            } else {
                String::new()
            }
        )
    } else {
        String::new()
    };
    Some(format!(
        "batch: {} request{} per forward{kv} (--concurrency, --context): the times given are taken as this batch's",
        b.concurrency,
        if b.concurrency == 1 { "" } else { "s" }
    ))
}

/// `inputs` within the engine's step of `engine` ([`crate::explain::step_terms`]): the draft
/// and overhead not given (by a flag or a record) priced as `explain` prices them, and the
/// step's terms (its floor, draft forwards and requests). What `breakeven` and `report` share
/// with `explain`, so that one set of inputs gets one answer.
pub(crate) fn with_engine_step(
    mut inputs: inputs::Inputs,
    flags: &Flags,
    engine: &crate::explain::EngineSettings,
    batch: &crate::request::Batch,
    times: &[crate::evidence::RecordTime],
) -> anyhow::Result<(inputs::Inputs, StepTerms)> {
    let (engine, of_record) = of_records(engine, times);
    let engine = &engine;
    let given = |l: &Labelled| l.origin.source != crate::record::Source::Default;
    let (given_draft, given_overhead) = (given(&inputs.draft_ms), given(&inputs.overhead_ms));
    let mut f = flags.clone();
    f.draft_steps = Some(inputs.draft_steps);
    f.draft_ms = given_draft.then_some(inputs.draft_ms.value);
    f.overhead_ms = given_overhead.then_some(inputs.overhead_ms.value);
    let (draft, overhead, terms) =
        crate::explain::step_terms(engine, &f, &inputs.decode_ms, batch)?;
    let what = match (given_draft, given_overhead) {
        (false, false) => Some("the draft forward and the overhead"),
        (false, true) => Some("the draft forward"),
        (true, false) => Some("the overhead"),
        (true, true) => None,
    };
    if let Some(what) = what {
        inputs.notes.push(format!(
            "{what}, not given, priced as `explain` prices the step: {} on {} GPUs{}, {} drafter, {} (--model, --gpus, --drafter, --link)",
            engine.model_config.as_ref().map_or(engine.model.clone(), |p| p.display().to_string()),
            engine.gpus.unwrap_or(8),
            if of_record { ", the verify record's workload" } else { "" },
            engine.drafter.unwrap_or_default(),
            engine.profile.as_ref().map_or(engine.link.clone(), |p| p.display().to_string()),
        ));
    }
    if !given_draft {
        // The draft is no longer free: its price replaces the note that said so.
        inputs.notes.retain(|n| !n.starts_with("no --draft-ms:"));
        inputs.draft_ms = draft;
    }
    if !given_overhead {
        inputs.overhead_ms = overhead;
    }
    Ok((inputs, terms))
}

/// The engine settings, with the model and GPUs of the verify records where the flags leave
/// them at their defaults (a record of a built-in preset at 2 or more ranks): the step is then
/// priced for the workload the times were measured on; true when so.
fn of_records(
    engine: &crate::explain::EngineSettings,
    times: &[crate::evidence::RecordTime],
) -> (crate::explain::EngineSettings, bool) {
    let default = crate::explain::EngineSettings::default();
    let defaults =
        engine.gpus.is_none() && engine.model == default.model && engine.model_config.is_none();
    let from = times
        .iter()
        .filter(|t| t.phase == crate::model::Phase::Verify)
        .find_map(|t| t.model_tp.clone())
        .filter(|(m, tp)| *tp >= 2 && crate::model::presets::PRESETS.contains(&m.as_str()));
    match from {
        Some((model, tp)) if defaults => (
            crate::explain::EngineSettings {
                model,
                gpus: Some(tp as usize),
                ..engine.clone()
            },
            true,
        ),
        _ => (engine.clone(), false),
    }
}
