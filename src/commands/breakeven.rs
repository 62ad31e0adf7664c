//! `verifybench breakeven`: speculative-decoding break-even from given or recorded times.
//! Pure arithmetic (see `crate::speculative`); needs no GPU.

use std::path::PathBuf;

use crate::evidence::Labelled;
use crate::output::Format;
use crate::report::breakeven::{print_out, render};
use crate::speculative::analysis::analyse;
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
    let mut inputs = inputs::resolve::<Labelled>(&flags, &times, true)?;
    inputs.notes.extend(file_notes);
    inputs.notes.extend(batch_note(&a.batch));
    let analysis = analyse(inputs);
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
