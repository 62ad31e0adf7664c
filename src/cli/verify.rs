//! `verifybench verify`: the flags; the replay itself is [`crate::commands::verify`].

use crate::cli::args::{
    BackendArg, GpuArgs, GraphArg, HostGapArgs, ModelArgs, RepeatArgs, WorkloadArgs,
};
use crate::cli::output::{ExportArgs, OutputArgsMd};
use crate::cli::values::{self, named};
use crate::record::Mode;
use crate::request::VerifyRequest;

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct VerifyArgs {
    #[command(flatten)]
    pub(crate) workload: WorkloadArgs,
    #[command(flatten)]
    pub(crate) graph: GraphArg,
    /// What to replay: the collectives only, the compute only, or both interleaved.
    /// Repeat or comma-separate to get several (e.g. comm,compute,full gives the split).
    #[arg(long, value_parser = named::<Mode>(), value_delimiter = ',', default_value = "comm")]
    pub(crate) mode: Vec<Mode>,
    /// Tiny kernels launched per layer to model a real layer's many small kernels (norms,
    /// rotary, router, quantization): eager mode pays their launch cost, graph mode does not.
    /// 0 to 10000.
    #[arg(long, default_value_t = 0, value_parser = values::launches(), allow_negative_numbers = true)]
    pub(crate) launches_per_layer: u32,
    /// Launch the compute (weight-streaming) kernels with programmatic dependent launch, as an
    /// engine that enables PDL does: each may start, and issue its first weight loads, while
    /// the kernel before it drains. Needs compute capability 9.0 or newer; off: plain launches.
    #[arg(long)]
    pub(crate) pdl: bool,
    #[command(flatten)]
    pub(crate) backend: BackendArg,
    #[command(flatten)]
    pub(crate) gpu: GpuArgs,
    #[command(flatten)]
    pub(crate) repeat: RepeatArgs,
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    #[command(flatten)]
    pub(crate) export: ExportArgs,
    #[command(flatten)]
    pub(crate) host_gaps: HostGapArgs,
    /// Write the per-collective timing pass (one verify, every rank) as a Chrome trace to FILE:
    /// one track per rank with collectives, compute and host gaps; Perfetto and
    /// `verifybench trace FILE` read it.
    #[arg(long, value_name = "FILE")]
    pub(crate) export_trace: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub(crate) output: OutputArgsMd,
    /// Testing only: make a rank fail ("exit", "hang", "abort", or "p2p-silent": it makes no
    /// P2P all-reduce call; optionally ":RANK").
    #[arg(long, hide = true)]
    pub(crate) inject_fault: Option<String>,
    /// All-reduce implementations to replay the schedule with, comma-separated: nccl, oneshot,
    /// twoshot (the P2P all-reduces; 2 to 8 GPUs with peer access). Only the all-reduces change:
    /// the logits all-gather stays on NCCL. Prints the comm time per verify with each and the
    /// saving against NCCL.
    #[arg(long = "impl", value_name = "LIST", value_parser = crate::cli::values::impl_list, default_value = "nccl")]
    pub(crate) impls: crate::cli::values::ImplList,
    /// Repetitions, each in fresh workers (processes launcher: new worker processes; threads:
    /// new communicators), 1 to 100: the output adds the median of the repetitions' medians,
    /// their min-max and a 95% interval; a cold first repetition is named and left out.
    #[arg(long, default_value_t = 1, value_name = "R", value_parser = values::repetitions("fresh runs"), allow_negative_numbers = true)]
    pub(crate) fresh_runs: usize,
}

request_from!(|a: &VerifyArgs| -> VerifyRequest {
    workload: (&a.workload).into(),
    graph: a.graph.graph,
    mode,
    launches_per_layer,
    pdl,
    backend: a.backend.backend,
    gpu: (&a.gpu).into(),
    repeat: (&a.repeat).into(),
    model: (&a.model).into(),
    export: (&a.export).into(),
    format: a.output.format,
    quiet: a.output.quiet,
    inject_fault,
    impls: a.impls.0.clone(),
    host_gaps: (&a.host_gaps).into(),
    export_trace,
    fresh_runs,
    fresh_run: 0,
});
