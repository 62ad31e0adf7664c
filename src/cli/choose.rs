//! `verifybench choose`: the flags; the choice itself is [`crate::commands::choose`].

use std::path::PathBuf;

use crate::choose::ChooseRequest;
use crate::cli::args::{BackendArg, GpuArgs, RepeatArgs};
use crate::cli::output::OutputArgs;
use crate::model::DType;
use crate::request::{ModelSettings, Workload};

const AFTER_HELP: &str = "\
The shapes: for each C of --concurrency, the decode step of C tokens, the verify of C x (k+1)
tokens, the EAGLE-3 draft step of C tokens and the logits all-gather of each, as `plan` builds
their schedules. Each all-reduce shape: NCCL's default, each --nccl-proto/--nccl-algo setting,
one-shot and two-shot; each all-gather shape: the NCCL settings (the P2P kernels are
all-reduces). Eager and CUDA graph, in --rounds rounds, each round every run once in its own
order (--seed); with --backend nccl every run is a fresh set of worker processes, and the first
round's short probe run checks every implementation's results exactly before anything is timed
and logs which algorithm and protocol NCCL chose.

The choice at a shape: the fastest candidate that beats NCCL's default by at least 1% and
0.25 us, with its whole paired 95% interval below 1 - bar, the bar being the larger of 1% and
the spread NCCL's default showed over the rounds; elsewhere NCCL's default stays, and the line
says whether nothing was told apart or every other candidate was slower.

--decision FILE keeps the decision under its key (GPU UUIDs and PCI addresses, the P2P matrix,
driver, NCCL file and version, verifybench version, world size, dtype, hidden size, tokens, the
NCCL settings compared; modeled: the cost-model profile): a later run with the same key reuses
it and says so; a run where a part differs names it and measures again.

Examples:
  verifybench choose --model kimi-k2.5 --tp 8 --concurrency 1,8 --backend model
  verifybench choose --tp 4 --nccl-proto LL,Simple --decision allreduce-tp4.json
  verifybench choose --model kimi-k2.5 --tp 8 --concurrency 1,8 --backend model --virtual-ranks
";

#[derive(Debug, Clone, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct ChooseArgs {
    /// Built-in model preset (see `plan --help`).
    #[arg(long, default_value = "kimi-k2.5")]
    pub(crate) model: String,
    /// A Hugging Face config.json instead of a preset.
    #[arg(long, value_name = "PATH")]
    pub(crate) model_config: Option<PathBuf>,
    /// Tensor-parallel size, 2 to 8 (default: --gpus, else the GPUs present with --backend
    /// nccl, else 8).
    #[arg(long)]
    pub(crate) tp: Option<u64>,
    /// Element type of the collectives.
    #[arg(long, default_value = "bf16")]
    pub(crate) dtype: DType,
    /// Vocabulary of the EAGLE-3 draft head (its logits all-gather).
    #[arg(long, default_value_t = 32000)]
    pub(crate) draft_vocab: u64,
    /// Requests in flight, comma-separated (1 to 16 values): each gives a decode of C tokens, a
    /// verify of C x (k+1) and a draft step of C.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,8",
        value_name = "C,..."
    )]
    pub(crate) concurrency: Vec<u64>,
    /// Draft steps k per cycle, 1 to 16.
    #[arg(long, default_value_t = 3)]
    pub(crate) draft_steps: u64,
    /// NCCL protocols compared beside NCCL's default, comma-separated: LL, LL128, Simple.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub(crate) nccl_proto: Vec<String>,
    /// NCCL algorithms compared beside NCCL's default, comma-separated: Ring, Tree (with
    /// --nccl-proto: every pair).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub(crate) nccl_algo: Vec<String>,
    /// Rounds, 1 to 100 (2 or more to measure the noise a choice must beat).
    #[arg(long, default_value_t = crate::sweep::rounds::DEFAULT_ROUNDS)]
    pub(crate) rounds: usize,
    /// Seed of the rounds' shuffled orders (recorded).
    #[arg(long, default_value_t = crate::sweep::rounds::DEFAULT_SEED)]
    pub(crate) seed: u64,
    /// The decision file: reused while its key holds, written (or rewritten) otherwise.
    #[arg(long, value_name = "FILE")]
    pub(crate) decision: Option<PathBuf>,
    /// Measure again even where --decision's key holds.
    #[arg(long)]
    pub(crate) remeasure: bool,
    /// Also run one-shot and two-shot at every all-reduce shape on --tp virtual ranks of one
    /// GPU: the exact check, then eager and graph times, labelled as not a P2P measurement.
    #[arg(long)]
    pub(crate) virtual_ranks: bool,
    /// Link profile of the cost model (--backend model), as `verify --link`.
    #[arg(long, default_value = "pcie-gen5")]
    pub(crate) link: String,
    /// Calibrated profile file written by `verifybench model fit` (overrides --link).
    #[arg(long, value_name = "FILE")]
    pub(crate) profile: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) backend: BackendArg,
    #[command(flatten)]
    pub(crate) gpu: GpuArgs,
    #[command(flatten)]
    pub(crate) repeat: RepeatArgs,
    #[command(flatten)]
    pub(crate) output: OutputArgs,
    /// Testing: the measured pipeline (fresh child processes per run, rounds, the first
    /// round's probe) with `collective --backend model` children, labelled modeled.
    #[arg(long, hide = true)]
    pub(crate) debug_children_on_model: bool,
}

request_from!(|a: &ChooseArgs| -> ChooseRequest {
    workload: Workload {
        model: a.model.clone(),
        model_config: a.model_config.clone(),
        tp: a.tp,
        dtype: a.dtype,
        draft_vocab: a.draft_vocab,
        ..Default::default()
    },
    concurrency,
    draft_steps,
    protos: a.nccl_proto.clone(),
    algos: a.nccl_algo.clone(),
    rounds,
    seed,
    repeat: (&a.repeat).into(),
    backend: a.backend.backend,
    gpu: (&a.gpu).into(),
    model: model_settings(a),
    decision,
    remeasure,
    virtual_ranks,
    children_on_model: a.debug_children_on_model,
    format: a.output.format,
});

/// The cost model of `--backend model`: NCCL's default is NCCL as this environment sets it, an
/// exported NCCL_PROTO or NCCL_ALGO is what the model prices for it too.
fn model_settings(a: &ChooseArgs) -> ModelSettings {
    let proto = std::env::var("NCCL_PROTO").ok();
    let algo = std::env::var("NCCL_ALGO").ok();
    ModelSettings {
        link: a.link.clone(),
        profile: a.profile.clone(),
        proto_from_env: proto.is_some(),
        algo_from_env: algo.is_some(),
        proto,
        algo,
        nccl_env: crate::util::nccl_env(),
    }
}
