//! `verifybench plan`: the flags; the schedule itself is [`crate::commands::plan`].

use crate::cli::args::WorkloadArgs;
use crate::cli::output::OutputArgs;
use crate::cli::values::named;
use crate::commands::plan::PlanRequest;
use crate::model::Engine;

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct PlanArgs {
    #[command(flatten)]
    pub(crate) workload: WorkloadArgs,
    // --format json: the schedule itself (the input of scripts/torch_baseline.py).
    #[command(flatten)]
    pub(crate) output: OutputArgs,
    /// Also list every operation in order.
    #[arg(long)]
    pub(crate) ops: bool,
    /// The serving engine whose names for the collectives, fusions and profiler counts the
    /// plan shows (the ops themselves are the same in both).
    #[arg(long, value_parser = named::<Engine>(), default_value = "sglang")]
    pub(crate) engine: Engine,
    /// The engine fuses each all-reduce with the residual add and RMSNorm after it (SGLang
    /// --enable-flashinfer-allreduce-fusion, which it turns on by itself on SM90/SM100 GPUs
    /// for DeepSeek/Kimi, gpt-oss, GLM-4 MoE, Qwen3-MoE, Qwen3-Next; vLLM's
    /// AllReduceFusionPass): the same collectives under other kernel names.
    #[arg(long)]
    pub(crate) allreduce_fusion: bool,
}

request_from!(|a: &PlanArgs| -> PlanRequest {
    workload: (&a.workload).into(),
    format: a.output.format,
    ops,
    engine,
    allreduce_fusion,
});
