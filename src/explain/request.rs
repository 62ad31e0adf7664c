//! What `verifybench explain` is asked.

use std::path::PathBuf;

use crate::costmodel::ModelSettings;
use crate::model::Engine;
use crate::output::Format;
use crate::request::Workload;
use crate::speculative::inputs::Flags;

use super::observed::Observed;

/// Everything `verifybench explain` needs, free of any command-line parser.
#[derive(Debug, Clone, Default)]
pub(crate) struct ExplainRequest {
    /// Profiler traces (files or folders), one per rank.
    pub(crate) traces: Vec<PathBuf>,
    /// NCCL logs (INIT, GRAPH, ENV lines) for the traps.
    pub(crate) nccl_logs: Vec<PathBuf>,
    /// The server's log (SGLang or vLLM).
    pub(crate) server_log: Option<PathBuf>,
    /// A sweep's results file.
    pub(crate) sweep: Option<PathBuf>,
    /// A decision file of `verifybench choose`: the one-shot rows take its choice per size.
    pub(crate) allreduce_choice: Option<PathBuf>,
    /// What the profiler showed inside the collectives of one verify.
    pub(crate) observed: Option<Observed>,
    /// The verify step as it ran, ms.
    pub(crate) verify_ms: Option<f64>,
    /// Decode, draft, draft steps, overhead and acceptance, as `breakeven` takes them
    /// (`verify_ms` unused here).
    pub(crate) cycle: Flags,
    /// The given decode step ran eagerly (else it is taken as run from a CUDA graph, the
    /// engines' default).
    pub(crate) decode_eager: bool,
    /// The context per request the given decode step was measured at, where it is not the
    /// cycle's `--context`.
    pub(crate) decode_context: Option<u64>,
    /// The drafter's flags (`--drafter`, `--draft-config`, `--draft-layers`; k is the cycle's
    /// draft steps): the cycle's draft forwards are priced from them.
    pub(crate) drafter: crate::request::CycleFlags,
    /// Ranks (GPUs of the tensor-parallel group).
    pub(crate) gpus: Option<usize>,
    /// Model, tp and tokens of the verify (the schedule the model prices).
    pub(crate) workload: Workload,
    /// Whether `--tokens` was given (else k + 1 when --draft-steps is, else 3).
    pub(crate) tokens_given: bool,
    pub(crate) model: ModelSettings,
    /// Which engine's flags to show (else the server log's engine, else both).
    pub(crate) engine: Option<Engine>,
    /// NCCL settings the user gave the server (NAME, VALUE), checked against its NCCL log.
    pub(crate) expect: Vec<(String, String)>,
    pub(crate) format: Format,
    pub(crate) export_json: Option<PathBuf>,
}
