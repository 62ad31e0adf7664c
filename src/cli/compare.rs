//! `verifybench compare`: the flags; the command is [`crate::commands::compare`].

use std::path::PathBuf;

use crate::cli::output::OutputArgsMd;
use crate::commands::compare::CompareRequest;

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CompareArgs {
    /// Verify results files (JSON, JSON array or JSON lines) from `verifybench verify
    /// --export-json` or scripts/torch_baseline.py. The first is the base of the ratios.
    #[arg(required = true, value_name = "FILE")]
    pub(crate) files: Vec<PathBuf>,
    /// Compare even when the files replay different schedules (their schedule_hash differs).
    #[arg(long)]
    pub(crate) force: bool,
    #[command(flatten)]
    pub(crate) output: OutputArgsMd,
    /// The text output of an nccl-tests binary (2.19; e.g. all_reduce_perf ... -G 20 for graph
    /// mode, -G 0 for eager); repeatable, one launch mode each. FILE is then the
    /// --export-json of `verifybench collective` on the same sizes, and the output is the
    /// ratio verifybench / nccl-tests per size and mode.
    #[arg(long = "nccl-tests", value_name = "OUTPUT")]
    pub(crate) nccl_tests: Vec<PathBuf>,
    /// A schedule file (`plan --format json`, `trace --export-schedule`): check that every
    /// record replayed exactly its schedule (same schedule hash), else exit 2 (with --force: a note).
    #[arg(long, value_name = "FILE")]
    pub(crate) schedule: Option<PathBuf>,
}

request_from!(|a: &CompareArgs| -> CompareRequest {
    files,
    force,
    format: a.output.format,
    nccl_tests,
    schedule,
});
