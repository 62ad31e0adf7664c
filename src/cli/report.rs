//! `verifybench report`: the flags; the report is [`crate::commands::report`].

use std::path::PathBuf;

use crate::cli::breakeven::{CycleArgs, EngineArgs};
use crate::commands::report::ReportRequest;

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ReportArgs {
    /// Results files (JSON record, JSON array or JSON lines). Rendered: `explain` records first
    /// (the answer as explain printed it), collective and verify records (plots, tables,
    /// break-even), sweep results (`sweep --results`: the ranking as
    /// sweep prints it), bandwidth and selftest exports. Named and skipped with a note: env,
    /// compare and model-fit profiles, unknown kinds, empty files, `[]`; exit 2 when nothing at
    /// all is renderable.
    #[arg(value_name = "RESULTS", required = true)]
    pub(crate) results: Vec<PathBuf>,
    /// Directory to write report.md and its SVG plots into (created if missing; its parent folder
    /// must exist).
    #[arg(short = 'o', long = "out", value_name = "DIR")]
    pub(crate) out: PathBuf,
    /// Break-even inputs for the tokens/s plot (verify times come from the verify records).
    #[command(flatten)]
    pub(crate) cycle: CycleArgs,
    #[command(flatten)]
    pub(crate) engine: EngineArgs,
}

request_from!(|a: &ReportArgs| -> ReportRequest {
    results,
    out,
    cycle: a.cycle.flags(),
    engine: (&a.engine).into(),
});
