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

/// The workload and the cost model that price the engine's step where another command than
/// `explain` asks for it (`breakeven`, `report`), with `explain`'s defaults: Kimi-K2.5 on 8
/// GPUs, an EAGLE-3 head, the pcie-gen5 profile.
#[derive(Debug, Clone)]
pub(crate) struct EngineSettings {
    pub(crate) gpus: Option<usize>,
    pub(crate) model: String,
    pub(crate) model_config: Option<PathBuf>,
    pub(crate) drafter: Option<crate::model::draft::DrafterKind>,
    pub(crate) link: String,
    pub(crate) profile: Option<PathBuf>,
    pub(crate) decode_eager: bool,
}

impl Default for EngineSettings {
    fn default() -> EngineSettings {
        EngineSettings {
            gpus: None,
            model: "kimi-k2.5".into(),
            model_config: None,
            drafter: None,
            link: ModelSettings::default().link,
            profile: None,
            decode_eager: false,
        }
    }
}

impl EngineSettings {
    /// The `explain` request that prices the step of `flags` (its decode `decode_ms`, its
    /// drafts, overhead and acceptance) for the batch `batch`.
    pub(crate) fn request(
        &self,
        flags: &Flags,
        decode_ms: f64,
        batch: &crate::request::Batch,
    ) -> ExplainRequest {
        ExplainRequest {
            cycle: Flags {
                decode_ms: Some(decode_ms),
                verify_ms: vec![],
                ..flags.clone()
            },
            decode_eager: self.decode_eager,
            drafter: crate::request::CycleFlags {
                drafter: self.drafter,
                ..Default::default()
            },
            gpus: self.gpus,
            workload: Workload {
                model: self.model.clone(),
                model_config: self.model_config.clone(),
                batch: *batch,
                ..Default::default()
            },
            model: ModelSettings {
                link: self.link.clone(),
                profile: self.profile.clone(),
                nccl_env: crate::util::nccl_env(),
                ..Default::default()
            },
            ..Default::default()
        }
    }
}
