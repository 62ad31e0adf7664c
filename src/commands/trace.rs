//! `verifybench trace`: a server's profiler traces (or NCCL COLL logs alone) read and analysed
//! ([`crate::trace`]), the known traps they prove checked ([`crate::trace::traps`]), the
//! result printed and exported (`--export-json`, `--export-schedule`). Needs no GPU.

use crate::record::{Provenance, Record, Source};
use crate::request::Workload;
use crate::trace::{against, analyse_inputs, classify, log_report, nccl_log};
use crate::trace::{render, Inputs, TraceRequest};
use crate::util::now_utc;

/// What `verifybench trace` runs: the trace request, and the workload flags, whose schedule
/// `--against-plan` diffs the trace against (built first, when the command starts).
#[derive(Debug, Clone)]
pub(crate) struct TraceCommand {
    pub(crate) trace: TraceRequest,
    pub(crate) workload: Workload,
    pub(crate) against_plan: bool,
}

/// The record of what was read (`kind: name`, measured, `note` saying from what), printed: the
/// record itself with `--format json`, else `text`.
fn print_record(
    req: &TraceRequest,
    (name, note): (&str, String),
    data: &impl serde::Serialize,
    started: String,
    text: impl FnOnce() -> String,
) -> anyhow::Result<Record> {
    let mut p = Provenance::here("none", started);
    p.notes.push(note);
    let rec = Record::other(Source::Measured, p, name, data)?;
    if req.format.is_json() {
        println!("{}", rec.to_json_pretty());
    } else {
        print!("{}", text());
    }
    Ok(rec)
}

/// `--export-json`: the record as printed with `--format json`.
fn export(req: &TraceRequest, rec: &Record) -> anyhow::Result<i32> {
    if let Some(p) = &req.export_json {
        crate::util::write_file(p, (rec.to_json_pretty() + "\n").as_bytes())?;
    }
    Ok(0)
}

/// Runs `verifybench trace`: analyse, print, export, with the known traps the analysis proves
/// ([`crate::trace::traps::in_trace`]). The value is the exit code.
pub(crate) fn run(c: &TraceCommand) -> anyhow::Result<i32> {
    // Every output path is checked before any work: a folder, a missing folder, or one of the
    // inputs (a trace in a folder given, a log, the workload's files) is an error, and nothing
    // is overwritten.
    let mut files = crate::util::Files::new();
    files
        .inputs("FILE|DIR", &c.trace.inputs)
        .inputs("--nccl-log", &c.trace.nccl_logs);
    c.workload.add_to(&mut files);
    files
        .output("--export-schedule", c.trace.export_schedule.as_deref())
        .output("--export-json", c.trace.export_json.as_deref())
        .check()?;
    let mut req = c.trace.clone();
    if c.against_plan {
        req.against_plan = Some(c.workload.schedule(8)?);
    }
    let req = &req;
    let started = now_utc();
    if req.assume_size.is_some() && req.export_schedule.is_none() {
        crate::usage_bail!(
            "--assume-size sizes the collectives of an exported schedule; give --export-schedule FILE with it (or drop it)"
        );
    }
    let ins = classify(req)?;
    if ins.traces.is_empty() && !ins.logs.is_empty() {
        return run_logs(req, &ins, started);
    }
    let mut a = analyse_inputs(req, ins)?;
    a.traps = crate::trace::traps::in_trace(&a);
    for s in &a.skipped {
        crate::note!("verifybench: skipped {}", s.reason);
    }
    // Build every export before writing any, so that a failure writes nothing.
    let schedule = req.export_schedule.as_ref().map(|_| {
        let tokens = req.against_plan.as_ref().map(|p| p.tokens).unwrap_or(0);
        against::schedule_file_at_tp(&a, tokens, req.export_tp, req.assume_size)
    });
    let schedule = schedule.transpose()?;
    let note = format!("measured from profiler traces: {}", a.files.join(", "));
    let rec = print_record(req, ("trace", note), &a, started, || render::render(&a))?;
    if let (Some(p), Some((s, assumed))) = (&req.export_schedule, &schedule) {
        s.save(p)?;
        if let (false, Some(b)) = (assumed.is_empty(), req.assume_size) {
            crate::note!(
                "verifybench: {} of the {} collectives of the exported step take the ASSUMED size --assume-size {b} B (positions {})",
                assumed.len(),
                s.schedule.ops.len(),
                against::positions(assumed)
            );
        }
        crate::note!(
            "verifybench: schedule of one step written to {}",
            p.display()
        );
    }
    export(req, &rec)
}

/// `verifybench trace LOG...`: NCCL COLL logs on their own.
fn run_logs(req: &TraceRequest, ins: &Inputs, started: String) -> anyhow::Result<i32> {
    if req.export_schedule.is_some() || req.against_plan.is_some() {
        crate::usage_bail!(
            "--export-schedule and --against-plan need a trace (a log has no timing and no host gaps); give the traces with the log"
        );
    }
    for s in &ins.skipped {
        crate::note!("verifybench: skipped {}: {}", s.file, s.reason);
    }
    let r = log_report(ins);
    let note = format!("read from NCCL COLL logs: {}", r.files.join(", "));
    let rec = print_record(req, ("nccl_log", note), &r, started, || {
        nccl_log::render(&r)
    })?;
    export(req, &rec)
}
