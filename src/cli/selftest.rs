//! `verifybench selftest`: the flags only; the checks and the table are `commands::selftest`.

use crate::cli::args::GpuArgs;
use crate::cli::output::OutputArgs;
use crate::commands::selftest::SelftestRequest;

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SelftestArgs {
    #[command(flatten)]
    pub(crate) gpu: GpuArgs,
    /// Skip the fault checks (a worker that exits or hangs on purpose).
    #[arg(long)]
    pub(crate) no_faults: bool,
    /// Skip the P2P stress test and its negative controls (about a minute on one GPU).
    #[arg(long, conflicts_with = "stress_only")]
    pub(crate) no_stress: bool,
    /// Only the P2P access check of every GPU pair and the stress test with its negative
    /// controls: the first check on a new machine.
    #[arg(long)]
    pub(crate) stress_only: bool,
    /// Write the table as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) export_json: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub(crate) output: OutputArgs,
}

request_from!(|a: &SelftestArgs| -> SelftestRequest {
    gpu: (&a.gpu).into(),
    no_faults,
    no_stress,
    stress_only,
    export_json,
    format: a.output.format,
});
