//! `verifybench trace`: the flags; the command is [`crate::commands::trace`].

use std::path::PathBuf;

use crate::cli::args::WorkloadArgs;
use crate::cli::output::OutputArgs;
use crate::commands::trace::TraceCommand;
use crate::trace::TraceRequest;

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct TraceArgs {
    /// PyTorch profiler traces (.json, .json.gz), one per rank, or folders of them.
    #[arg(required = true, value_name = "FILE|DIR")]
    pub(crate) inputs: Vec<PathBuf>,
    // --format json: the result record, as --export-json writes it.
    #[command(flatten)]
    pub(crate) output: OutputArgs,
    /// Also write the result record to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) export_json: Option<PathBuf>,
    /// Write one step's collective sequence (and its host gaps) as a schedule file, for
    /// `verify/sweep/plan/compare --schedule`. Its tp is the collectives' group size; a trace of
    /// one rank (group size 1) takes --tp N, and --against-plan's --tokens labels its tokens.
    #[arg(long, value_name = "FILE")]
    pub(crate) export_schedule: Option<PathBuf>,
    /// A record_function label whose spans are the steps: a name, or a pattern where `*` is any
    /// text (`ProfilerStep#*`). Without it the trace's ProfilerStep#N spans are the steps when
    /// it has them, else the repeating period of the collectives is found.
    #[arg(long, value_name = "NAME|PATTERN")]
    pub(crate) step_label: Option<String>,
    /// NCCL logs with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL (one per process) for sizes the
    /// trace lacks.
    /// One file per flag: repeat the flag for several (`--nccl-log a.log --nccl-log b.log`).
    #[arg(long, value_name = "FILE")]
    pub(crate) nccl_log: Vec<PathBuf>,
    /// With --export-schedule: the input bytes of each collective whose size neither the trace
    /// nor --nccl-log gives (K/M/G suffixes); the export and the screen name the positions
    /// that took it. Without it such a step is not exported.
    #[arg(long, value_name = "BYTES", value_parser = crate::cli::values::COLLECTIVE_BYTES, allow_negative_numbers = true)]
    pub(crate) assume_size: Option<u64>,
    /// The ranks ran on more than one host: compare kernel durations only (skew unknown).
    #[arg(long)]
    pub(crate) multi_host: bool,
    /// Diff the trace's step against the schedule of the workload flags (--model, --tp, --tokens),
    /// or of a schedule file (--schedule FILE).
    #[arg(long)]
    pub(crate) against_plan: bool,
    #[command(flatten)]
    pub(crate) workload: WorkloadArgs,
}

request_from!(|a: &TraceArgs| -> TraceCommand {
    trace: TraceRequest {
        inputs: a.inputs.clone(),
        step_label: a.step_label.clone(),
        nccl_logs: a.nccl_log.clone(),
        multi_host: a.multi_host,
        format: a.output.format,
        export_json: a.export_json.clone(),
        export_schedule: a.export_schedule.clone(),
        against_plan: None,
        export_tp: a.workload.tp,
        assume_size: a.assume_size,
    },
    workload: (&a.workload).into(),
    against_plan,
});
