//! `verifybench explain`: the flags -> [`crate::explain::ExplainRequest`]; the command is
//! [`crate::commands::explain`].

use std::path::PathBuf;

use crate::cli::args::{BatchArgs, WeightArgs};
use crate::cli::breakeven::CycleArgs;
use crate::cli::output::OutputArgsMd;
use crate::cli::values::{self, named};

use crate::explain::{Engine, ExplainRequest, Observed};
use crate::model::draft::DrafterKind;
use crate::speculative::inputs::Acceptance;

fn engine(s: &str) -> Result<Engine, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "sglang" => Ok(Engine::Sglang),
        "vllm" => Ok(Engine::Vllm),
        _ => Err(format!("'{s}' is not one of: sglang, vllm")),
    }
}

fn expect_arg(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if k.starts_with("NCCL_") && !v.is_empty() => Ok((k.into(), v.into())),
        _ => Err(format!(
            "'{s}' is not NCCL_NAME=VALUE (e.g. NCCL_PROTO=LL): give a setting the server was started with"
        )),
    }
}

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ExplainArgs {
    /// The server's profiler traces (Kineto JSON, .json or .json.gz), one per rank, or folders
    /// of them (as `verifybench trace` reads them): the split is then measured. Repeatable.
    #[arg(long, value_name = "FILE|DIR")]
    pub(crate) trace: Vec<PathBuf>,
    /// What the profiler shows inside the collectives of one verify: COUNTxTIME, e.g.
    /// 122x0.2ms or 122x200us (the unit is required). Without traces the waiting is inferred
    /// from it: the observed time less the model's transfer.
    #[arg(long, value_name = "COUNTxTIME")]
    pub(crate) observed: Option<Observed>,
    /// The verify step as it ran (the target forward of k+1 tokens), in ms.
    #[arg(long, value_name = "MS", value_parser = values::millis(false, "30"), allow_negative_numbers = true)]
    pub(crate) verify_ms: Option<f64>,
    #[command(flatten)]
    pub(crate) cycle: CycleArgs,
    /// The --decode-ms step ran eagerly (without it, it is taken as run from a CUDA graph, the
    /// engines' default, and every row is held to it: a graphed verify is never faster).
    #[arg(long, requires = "decode_ms")]
    pub(crate) decode_eager: bool,
    /// The context per request --decode-ms was measured at, where it is not --context (a plain
    /// decode measured on short prompts, a speculative run at 30k): the model prices the
    /// decode there, and the cycle at --context.
    #[arg(long, value_name = "N", requires = "decode_ms", value_parser = values::CONTEXT, allow_negative_numbers = true)]
    pub(crate) decode_context: Option<u64>,
    /// The drafter: eagle3 (an EAGLE-3 head, the default), mtp (the model's own MTP module,
    /// num_nextn_predict_layers), block (a DFlash-like block drafter proposing k tokens in one
    /// forward). Its forwards are priced from its schedule.
    #[arg(long, value_parser = named::<DrafterKind>())]
    pub(crate) drafter: Option<DrafterKind>,
    /// The drafter's own config.json (an EAGLE-3 head's, with draft_vocab_size; a block
    /// drafter's); without it the drafter's shape is assumed and said so.
    #[arg(long, value_name = "PATH")]
    pub(crate) draft_config: Option<PathBuf>,
    /// A block drafter's decoder layers when no --draft-config gives them (default 5), 1 to 64.
    #[arg(long, value_name = "N", value_parser = values::DRAFT_LAYERS, allow_negative_numbers = true)]
    pub(crate) draft_layers: Option<u64>,
    /// Mean accept length tau: tokens kept per cycle, bonus token included (SGLang's
    /// "accept length"), between 1 and k+1.
    #[arg(long, value_name = "TAU", value_parser = values::ACCEPT_LENGTH, allow_negative_numbers = true, conflicts_with_all = ["accept_rates", "accept_rate", "accept_rates_of_drafts"])]
    pub(crate) accept_length: Option<f64>,
    /// Conditional per-position acceptance rates, one per draft step: tau = 1 + r1 + r1 r2 + ...
    #[arg(long, value_name = "R1,R2,..", value_delimiter = ',', value_parser = values::PROBABILITY, allow_negative_numbers = true, conflicts_with_all = ["accept_rate", "accept_rates_of_drafts"])]
    pub(crate) accept_rates: Option<Vec<f64>>,
    /// Per-position acceptance rates as vLLM prints them (fractions of all drafts): tau = 1 +
    /// a1 + a2 + ...
    #[arg(long, value_name = "A1,A2,..", value_delimiter = ',', value_parser = values::PROBABILITY, allow_negative_numbers = true, conflicts_with_all = ["accept_rate"])]
    pub(crate) accept_rates_of_drafts: Option<Vec<f64>>,
    /// One constant acceptance rate alpha: tau = (1 - alpha^(k+1)) / (1 - alpha). Not vLLM's
    /// accept rate (`Avg Draft acceptance rate`: accepted / drafted tokens, tau = 1 + k x rate):
    /// give that one as --accept-length.
    #[arg(long, value_name = "ALPHA", value_parser = values::PROBABILITY, allow_negative_numbers = true)]
    pub(crate) accept_rate: Option<f64>,
    /// The server's log, SGLang's or vLLM's: the accept length as the engine prints it (unless
    /// an acceptance flag is given), whether decode batches ran from a CUDA graph (`cuda graph:
    /// False`), `enforce_eager=True`, and the custom all-reduce warnings.
    #[arg(long, alias = "accept-from-log", value_name = "FILE")]
    pub(crate) server_log: Option<PathBuf>,
    /// NCCL logs of the server (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV): the
    /// variables each worker read and NCCL's topology search, for the traps. One file per flag.
    #[arg(long, value_name = "FILE")]
    pub(crate) nccl_log: Vec<PathBuf>,
    /// A sweep's results file (`verifybench sweep --results FILE`): its best NCCL setting
    /// against the defaults replaces the model's in the counterfactual rows.
    #[arg(long, value_name = "FILE")]
    pub(crate) sweep: Option<PathBuf>,
    /// A decision file of `verifybench choose --decision FILE`: the one-shot rows run each
    /// all-reduce as it chose for its size (one-shot, two-shot or NCCL).
    #[arg(long, value_name = "FILE")]
    pub(crate) allreduce_choice: Option<PathBuf>,
    /// GPUs of the tensor-parallel group (default: the traces' world size, else --tp, else 8).
    #[arg(long, value_name = "N", value_parser = values::gpus(), allow_negative_numbers = true)]
    pub(crate) gpus: Option<usize>,
    /// Built-in model preset the cost model prices: kimi-k2.5, deepseek-v3, llama-3.1-70b,
    /// qwen3-235b-a22b.
    #[arg(long, default_value = "kimi-k2.5")]
    pub(crate) model: String,
    /// A Hugging Face config.json instead of a preset.
    #[arg(long, value_name = "PATH")]
    pub(crate) model_config: Option<PathBuf>,
    /// Tensor-parallel size, 1 to 1024; must equal --gpus when both are given.
    #[arg(long, value_parser = values::ranks::<u64>(), allow_negative_numbers = true)]
    pub(crate) tp: Option<u64>,
    /// Tokens per verify forward, 1 to 65536 (default: --draft-steps + 1, else 3).
    #[arg(long, value_parser = values::tokens(), allow_negative_numbers = true)]
    pub(crate) tokens: Option<u64>,
    /// Link profile of the cost model: nvlink-h100, nvlink-h200, pcie-gen4, pcie-gen5
    /// (default), pcie-gen5-no-p2p, pcie-gen5-dual-socket, ib-ndr. Not with --profile (a
    /// fitted profile sets every parameter).
    #[arg(long, default_value = "pcie-gen5", conflicts_with = "profile")]
    pub(crate) link: String,
    /// Calibrated profile file written by `verifybench model fit` (instead of --link).
    #[arg(long, value_name = "FILE")]
    pub(crate) profile: Option<PathBuf>,
    /// An NCCL setting the server was started with, NAME=VALUE (repeatable): checked against the
    /// server's NCCL log (--nccl-log), whose `set by environment` lines say what NCCL read.
    #[arg(long, value_name = "NAME=VALUE", value_parser = expect_arg)]
    pub(crate) expect: Vec<(String, String)>,
    /// Whose server flags to show: sglang or vllm (default: the server log's engine, else both).
    #[arg(long, value_parser = engine)]
    pub(crate) engine: Option<Engine>,
    /// Also write the result record (what --format json prints) to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) export_json: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) batch: BatchArgs,
    #[command(flatten)]
    pub(crate) weights: WeightArgs,
    #[command(flatten)]
    pub(crate) output: OutputArgsMd,
}

request_from!(|a: &ExplainArgs| -> ExplainRequest {
    traces: a.trace.clone(),
    nccl_logs: a.nccl_log.clone(),
    server_log,
    sweep,
    allreduce_choice,
    observed,
    verify_ms,
    cycle: crate::speculative::inputs::Flags {
        acceptance: Acceptance::from_flags(
            a.accept_length,
            a.accept_rates.as_ref(),
            a.accept_rates_of_drafts.as_ref(),
            a.accept_rate,
        ),
        ..a.cycle.flags()
    },
    decode_eager,
    decode_context,
    drafter: crate::request::CycleFlags {
        drafter: a.drafter,
        draft_config: a.draft_config.clone(),
        draft_layers: a.draft_layers,
        ..Default::default()
    },
    gpus,
    workload: crate::request::Workload {
        model: a.model.clone(),
        model_config: a.model_config.clone(),
        tp: a.tp,
        tokens: a.tokens.unwrap_or(3),
        batch: (&a.batch).into(),
        weights: (&a.weights).into(),
        ..Default::default()
    },
    tokens_given: a.tokens.is_some(),
    model: crate::costmodel::ModelSettings {
        link: a.link.clone(),
        profile: a.profile.clone(),
        nccl_env: crate::util::nccl_env(),
        ..Default::default()
    },
    engine,
    expect,
    format: a.output.format,
    export_json,
});
