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
pub mod cycle;
pub(crate) mod draft;
pub(crate) mod engine;
pub(crate) mod forward;
pub(crate) mod kv;
pub mod presets;
pub mod schedule;
pub mod schedule_file;
pub mod shape;

pub(crate) use engine::Engine;
pub use schedule::{CollectiveKind, DType, Op, Phase, Schedule, ScheduleOptions};
pub(crate) use schedule::{ComputeKind, Logits, Routing, TokenHistogram};
pub use shape::ModelShape;

use std::path::Path;

/// The shape from `--model-config PATH` if given, else the preset `--model NAME`.
pub(crate) fn resolve(model: &str, config: Option<&Path>) -> anyhow::Result<ModelShape> {
    match config {
        Some(p) => config::load(p),
        None => presets::preset(model),
    }
}

/// Builds the schedule of `phase` for `shape`: one forward of `opt.concurrency` requests,
/// each of `opt.tokens` tokens (verify) or one (decode, draft). `Phase::Cycle` is several
/// forwards: [`cycle::build`].
pub fn build(shape: &ModelShape, opt: &ScheduleOptions, phase: Phase) -> anyhow::Result<Schedule> {
    schedule::validate(shape, opt)?;
    let per_request = match phase {
        Phase::Verify => opt.tokens,
        Phase::Decode | Phase::Draft => 1,
        Phase::Cycle => {
            return Err(crate::error::usage(
                "--phase cycle is several forwards (the drafts, the verify, the decode beside them): `plan` and `verify` build it; this command takes one forward (--phase verify, decode or draft)",
            ))
        }
    };
    let tokens = per_request * opt.concurrency.max(1);
    if phase == Phase::Draft {
        schedule::check_divides(opt.tp, "draft vocabulary (--draft-vocab)", opt.draft_vocab)?;
        let head = draft::DenseHead::eagle3_assumed(shape, opt);
        let ops = head.forward(opt, tokens, true);
        let formats = forward::formats_of(&ops, &head.precision);
        return Ok(forward::assemble(
            shape, opt, phase, tokens, 0.0, ops, formats,
        ));
    }
    Ok(forward::target_forward(shape, opt, phase, tokens))
}
