//! `verifybench breakeven`: speculative-decoding break-even from given or recorded times.
//! Pure arithmetic (see `crate::speculative`); needs no GPU.

use std::path::PathBuf;

use crate::output::Format;
use crate::report::breakeven::{print_out, render};
use crate::speculative::analysis::analyse;
use crate::speculative::inputs::{self, Flags, TraceInput};

/// The times and acceptance `breakeven` works from, and how it prints.
#[derive(Debug, Clone)]
pub struct BreakevenRequest {
    /// The times and acceptance given as flags.
    pub flags: Flags,
    /// Results files whose verify records give the times (flags win).
    pub from: Vec<PathBuf>,
    /// Profiler traces whose median step gives a time, each with its role.
    pub from_trace: Vec<TraceInput>,
    /// The server's log, for the measured accept length.
    pub accept_from_log: Option<PathBuf>,
    /// json: every input with its origin, every output.
    pub format: Format,
}

/// Runs `verifybench breakeven`.
pub fn run(a: &BreakevenRequest) -> anyhow::Result<i32> {
    let (mut times, mut file_notes) = inputs::read_verify_files(&a.from)?;
    times.extend(inputs::read_trace_times(&a.from_trace)?);
    let mut flags = a.flags.clone();
    if let Some(p) = &a.accept_from_log {
        let (tau, notes) = inputs::read_accept_log(p)?;
        flags.measured_accept_length = Some(tau);
        file_notes.extend(notes);
    }
    let mut inputs = inputs::resolve(&flags, &times, true)?;
    inputs.notes.extend(file_notes);
    let analysis = analyse(inputs);
    let text = if a.format.is_json() {
        serde_json::to_string_pretty(&analysis)? + "\n"
    } else {
        render(&analysis)
    };
    print_out(&text)?;
    Ok(0)
}
