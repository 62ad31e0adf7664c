//! Model shapes and the verify schedule.
//!
//! Under pure tensor parallelism (SGLang, vLLM) a forward of T tokens does, on every rank:
//! the vocab-parallel embedding's all-reduce; per layer, attention -> all-reduce -> MLP/MoE ->
//! all-reduce; then the LM head and an all-gather of the vocab-parallel logits. Between the
//! collectives each rank streams its shard of the weights. The schedule is pure data: the NCCL
//! backend replays it, the cost model prices it, `plan` prints it.
//!
//! Not here: the workload flags and their defaults ([`crate::request::Workload`] builds a
//! schedule from them), running a schedule ([`crate::launch`]).

pub(crate) mod arch;
pub(crate) mod collective;
pub mod config;
pub(crate) mod engine;
pub mod presets;
pub mod schedule;
pub mod schedule_file;
pub mod shape;

pub(crate) use engine::Engine;
pub use schedule::{build, CollectiveKind, DType, Op, Phase, Schedule, ScheduleOptions};
pub(crate) use schedule::{Logits, Routing, TokenHistogram};
pub use shape::ModelShape;

use std::path::Path;

/// The shape from `--model-config PATH` if given, else the preset `--model NAME`.
pub(crate) fn resolve(model: &str, config: Option<&Path>) -> anyhow::Result<ModelShape> {
    match config {
        Some(p) => config::load(p),
        None => presets::preset(model),
    }
}
