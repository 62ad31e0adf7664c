//! `verifybench verify`: the flags; the replay itself is [`crate::commands::verify`].

use crate::cli::args::{named, ExportArgs, GpuArgs, ModelArgs, RepeatArgs, WorkloadArgs};
use crate::record::Mode;
use crate::request::{BackendKind, GraphChoice, VerifyRequest};

#[derive(Debug, Clone, clap::Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Eager launches, CUDA-graph replay, or both.
    #[arg(short = 'G', long, value_parser = named::<GraphChoice>(), default_value = "both")]
    pub graph: GraphChoice,
    /// What to replay: the collectives only, the compute only, or both interleaved.
    /// Repeat or comma-separate to get several (e.g. comm,compute,full gives the split).
    #[arg(long, value_parser = named::<Mode>(), value_delimiter = ',', default_value = "comm")]
    pub mode: Vec<Mode>,
    /// Tiny kernels launched per layer to model a real layer's many small kernels (norms,
    /// rotary, router, quantization): eager mode pays their launch cost, graph mode does not.
    /// 0 to 10000.
    #[arg(long, default_value_t = 0)]
    pub launches_per_layer: u32,
    /// nccl: real GPUs (2 or more); model: the cost model, anywhere (every number labelled
    /// modeled); auto: nccl with 2+ GPUs, else model.
    #[arg(long, value_parser = named::<BackendKind>(), default_value = "auto")]
    pub backend: BackendKind,
    #[command(flatten)]
    pub gpu: GpuArgs,
    #[command(flatten)]
    pub repeat: RepeatArgs,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub export: ExportArgs,
    /// Print nothing but errors (the JSON export still happens).
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Testing only: make a rank fail ("exit", "hang" or "abort", optionally ":RANK").
    #[arg(long, hide = true)]
    pub inject_fault: Option<String>,
}

impl From<&VerifyArgs> for VerifyRequest {
    fn from(a: &VerifyArgs) -> VerifyRequest {
        VerifyRequest {
            workload: (&a.workload).into(),
            graph: a.graph,
            mode: a.mode.clone(),
            launches_per_layer: a.launches_per_layer,
            backend: a.backend,
            gpu: (&a.gpu).into(),
            repeat: (&a.repeat).into(),
            model: (&a.model).into(),
            export: (&a.export).into(),
            quiet: a.quiet,
            inject_fault: a.inject_fault.clone(),
        }
    }
}

pub fn run(a: &VerifyArgs) -> anyhow::Result<i32> {
    crate::commands::verify(&a.into())
}
