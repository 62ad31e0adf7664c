//! Flag groups shared by several commands, each converted into the library's plain type
//! (`WorkloadArgs` -> [`Workload`], `GpuArgs` -> [`GpuSpec`], ...). Environment fallbacks of
//! flags (`VERIFYBENCH_NCCL_LIB`, `NCCL_PROTO`, `NCCL_ALGO`) are read here, by clap.

use std::path::PathBuf;

use crate::cli::values::{self, affinity_arg, named, weight_choice, WeightChoice};
use crate::costmodel::ModelSettings;
use crate::measure::gaps::{GapPer, HostGap, HostGapRequest, LateRank};
use crate::model::draft::DrafterKind;
use crate::model::kv::KvDType;
use crate::model::shape::WeightOverride;
use crate::model::{DType, Logits, Phase, Routing};
use crate::request::{
    BackendKind, Batch, CycleFlags, GpuSpec, GraphChoice, HostGapFlags, Launcher, Repeat, Workload,
};

/// The batch and the context every forward serves: `plan`, `verify`, `sweep`, `trace`,
/// `explain` and `breakeven` take them.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct BatchArgs {
    /// Requests served together: a decode step carries C tokens, a verify C x its tokens per
    /// request, and the MoE layers read the experts all of them pick. 1 to 4096.
    #[arg(long, value_name = "C", default_value_t = 1, value_parser = values::CONCURRENCY, allow_negative_numbers = true)]
    pub(crate) concurrency: u64,
    /// Tokens of context per request whose KV cache every forward reads (MLA's latent on
    /// every rank, GQA's KV heads split over TP, a fixed state for linear attention); 0: the
    /// KV cache is not priced. At most 16777216.
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = values::CONTEXT, allow_negative_numbers = true)]
    pub(crate) context: u64,
    /// Element type of the KV cache read with --context.
    #[arg(long, value_parser = named::<KvDType>(), default_value = "bf16")]
    pub(crate) kv_dtype: KvDType,
    /// Decode context parallelism: the KV cache's context sharded D ways over the TP group
    /// (vLLM --decode-context-parallel-size); needs --context. 1 to 1024, dividing --tp.
    #[arg(long, value_name = "D", default_value_t = 1, value_parser = values::DCP, allow_negative_numbers = true)]
    pub(crate) dcp: u64,
}

request_from!(|a: &BatchArgs| -> Batch {
    concurrency,
    context,
    kv_dtype,
    dcp,
});

/// The weight formats to price instead of the checkpoint's.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WeightArgs {
    /// Price every quantizable weight group (attention, dense MLP, shared and routed experts,
    /// an MTP layer) in FORMAT instead of the checkpoint's: bf16, fp8 (128x128 blocks), int8,
    /// int4 (group 32), int4-gN, int4-gN-zp, nvfp4, mxfp4, or as-shipped (the default); the
    /// LM head keeps the checkpoint's format.
    #[arg(long, value_name = "FORMAT", value_parser = weight_choice)]
    pub(crate) weights: Option<WeightChoice>,
    /// The routed experts alone in FORMAT (after --weights), e.g. nvfp4 or int4 experts served
    /// from an fp8 checkpoint.
    #[arg(long, value_name = "FORMAT", value_parser = weight_choice)]
    pub(crate) expert_weights: Option<WeightChoice>,
}

request_from!(|a: &WeightArgs| -> WeightOverride {
    all: a.weights.and_then(|w| w.0),
    experts: a.expert_weights.and_then(|w| w.0),
});

/// The flags of `--phase cycle`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CycleFlagArgs {
    /// The drafter of --phase cycle: eagle3 (an EAGLE-3 head, the default), mtp (the model's
    /// own MTP module, num_nextn_predict_layers), block (a DFlash-like block drafter).
    #[arg(long, value_parser = named::<DrafterKind>())]
    pub(crate) drafter: Option<DrafterKind>,
    /// Draft tokens k per cycle of --phase cycle, 1 to 64 (default 3): the verify covers k+1
    /// tokens per request.
    #[arg(long, value_name = "K", value_parser = values::draft_steps(), allow_negative_numbers = true)]
    pub(crate) draft_steps: Option<u64>,
    /// The drafter's own config.json (an EAGLE-3 head's, with draft_vocab_size; a block
    /// drafter's) for --phase cycle; without it the drafter's shape is assumed and said so.
    #[arg(long, value_name = "PATH")]
    pub(crate) draft_config: Option<PathBuf>,
    /// A block drafter's decoder layers when no --draft-config gives them (default 5), 1 to 64.
    #[arg(long, value_name = "N", value_parser = values::DRAFT_LAYERS, allow_negative_numbers = true)]
    pub(crate) draft_layers: Option<u64>,
    /// Tokens per request the verify carries where the engine verifies a tree (SGLang
    /// --speculative-num-draft-tokens), 2 to 4096; default k+1.
    #[arg(long, value_name = "N", value_parser = values::TREE_TOKENS, allow_negative_numbers = true)]
    pub(crate) tree_tokens: Option<u64>,
}

request_from!(|a: &CycleFlagArgs| -> CycleFlags {
    drafter,
    draft_steps,
    draft_config,
    draft_layers,
    tree_tokens,
});

/// `-G/--graph` as `collective` and `verify` declare it. `sweep` and `worker` declare their own:
/// their help says more (one child, or one worker, runs both modes, one column each).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct GraphArg {
    /// Eager launches, CUDA-graph replay, or both.
    #[arg(short = 'G', long, value_parser = named::<GraphChoice>(), default_value = "both")]
    pub(crate) graph: GraphChoice,
}

/// `--backend` as `collective` and `verify` declare it. `sweep` declares its own: its help says
/// that the model backend has no NCCL log, so a sweep point has no probe.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct BackendArg {
    /// nccl: real GPUs (2 or more); model: the cost model, anywhere (every number labelled
    /// modeled); auto: nccl with 2+ GPUs, else model.
    #[arg(long, value_parser = named::<BackendKind>(), default_value = "auto")]
    pub(crate) backend: BackendKind,
}

/// Which model, parallelism and token count: the workload every command replays or prices.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WorkloadArgs {
    /// Built-in model preset: kimi-k2.5, deepseek-v3, llama-3.1-70b, qwen3-235b-a22b.
    #[arg(long, default_value = "kimi-k2.5")]
    pub(crate) model: String,
    /// A Hugging Face config.json instead of a preset (DeepSeek-V3/Kimi-K2, Llama, Qwen3-MoE).
    #[arg(long, value_name = "PATH")]
    pub(crate) model_config: Option<PathBuf>,
    /// Tensor-parallel size (ranks), 1 to 1024. Defaults to the number of GPUs used, or 8
    /// without GPUs.
    #[arg(long, value_parser = values::ranks::<u64>(), allow_negative_numbers = true)]
    pub(crate) tp: Option<u64>,
    /// Tokens per verify forward. SGLang verifies num_steps+1 tokens when topk=1
    /// (--speculative-num-steps 3 means 4). 1 to 65536.
    #[arg(long, default_value_t = 3, value_parser = values::tokens(), allow_negative_numbers = true)]
    pub(crate) tokens: u64,
    /// Activation and collective element type.
    #[arg(long, default_value = "bf16")]
    pub(crate) dtype: DType,
    /// How many distinct routed experts T tokens select per MoE layer.
    #[arg(long, value_parser = named::<Routing>(), default_value = "uniform")]
    pub(crate) routing: Routing,
    /// Leave out the embedding all-reduce (for engines that skip or fuse it).
    #[arg(long)]
    pub(crate) no_embedding_allreduce: bool,
    /// What happens to the vocab-parallel logits.
    #[arg(long, value_parser = named::<Logits>(), default_value = "gather")]
    pub(crate) logits: Logits,
    /// Vocabulary of the EAGLE-3 draft head (the draft phase), 1 to 16777216.
    #[arg(long, default_value_t = 32000, value_parser = values::DRAFT_VOCAB, allow_negative_numbers = true)]
    pub(crate) draft_vocab: u64,
    /// Which forward: the verify of T tokens, one decode step, one EAGLE-3 draft step, or
    /// the speculative cycle (the k draft forwards, then the verify, with the plain decode
    /// step beside them: plan and verify).
    #[arg(long, value_parser = named::<Phase>(), default_value = "verify")]
    pub(crate) phase: Phase,
    /// Replay exactly the ops of a schedule file (`plan --format json` or `trace
    /// --export-schedule`) instead of the schedule of --model/--tokens/...; --tp is taken from
    /// the file (if given, it must equal the file's).
    #[arg(long, value_name = "FILE", conflicts_with_all = [
        "model", "model_config", "tokens", "dtype", "routing", "no_embedding_allreduce",
        "logits", "draft_vocab", "phase", "concurrency", "context", "kv_dtype", "dcp",
        "weights", "expert_weights", "drafter", "draft_steps", "draft_config", "draft_layers",
        "tree_tokens",
    ])]
    pub(crate) schedule: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) batch: BatchArgs,
    #[command(flatten)]
    pub(crate) weights: WeightArgs,
    #[command(flatten)]
    pub(crate) cycle: CycleFlagArgs,
}

request_from!(|a: &WorkloadArgs| -> Workload {
    model,
    model_config,
    tp,
    tokens,
    dtype,
    routing,
    no_embedding_allreduce,
    logits,
    draft_vocab,
    phase,
    schedule_file: a.schedule.clone(),
    batch: (&a.batch).into(),
    weights: (&a.weights).into(),
    cycle: (&a.cycle).into(),
});

/// Which GPUs and how to reach NCCL.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct GpuArgs {
    /// Number of GPUs (ranks) to use: the first N visible devices, 1 to 1024.
    #[arg(long, value_parser = values::gpus(), allow_negative_numbers = true)]
    pub(crate) gpus: Option<usize>,
    /// Exact device ordinals to use, e.g. 0,1.
    #[arg(long, value_delimiter = ',', conflicts_with = "gpus", value_parser = values::ordinal::<usize>(), allow_negative_numbers = true)]
    pub(crate) devices: Option<Vec<usize>>,
    /// Ranks as threads of this process or as worker processes.
    #[arg(long, value_parser = named::<Launcher>(), default_value = "processes")]
    pub(crate) launcher: Launcher,
    /// Path of libnccl.so to load (else: LD_LIBRARY_PATH, system paths, Python's nvidia-nccl wheel).
    #[arg(long, value_name = "PATH", env = "VERIFYBENCH_NCCL_LIB")]
    pub(crate) nccl_lib: Option<PathBuf>,
    /// Seconds any rendezvous, collective or worker may take before the run is aborted
    /// (greater than 0, at most 1000000).
    #[arg(long, default_value_t = 60.0, value_parser = values::TIMEOUT, allow_negative_numbers = true)]
    pub(crate) timeout: f64,
    /// Pin each rank (worker process, or rank thread of --launcher threads) to CPUs: auto (the
    /// CPUs of its GPU's NUMA node, as numactl does in serving deployments; left alone when
    /// sysfs does not tell the node), none (as inherited), or a Linux CPU list (0-7,16-23).
    #[arg(long, value_name = "auto|none|LIST", default_value = "auto", value_parser = affinity_arg)]
    pub(crate) cpu_affinity: crate::launch::affinity::CpuAffinity,
}

request_from!(|a: &GpuArgs| -> GpuSpec {
    gpus,
    devices,
    launcher,
    nccl_lib,
    timeout,
    cpu_affinity,
});

/// `-w/--warmup` and `-n/--iters`, as nccl-tests and hyperfine name them.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RepeatArgs {
    /// Timed iterations (replays) per configuration.
    #[arg(short = 'n', long = "iters", default_value_t = 200, value_parser = values::iters::<u64>(), allow_negative_numbers = true)]
    pub(crate) iters: u64,
    /// Untimed warm-up iterations before timing.
    #[arg(short = 'w', long = "warmup", default_value_t = 20, value_parser = values::warmup(), allow_negative_numbers = true)]
    pub(crate) warmup: u64,
    /// How the ranks' times of one sample become its time: max (the slowest rank, which
    /// bounds a verify step) or mean (over ranks, as nccl-tests reports with its default -a 1).
    #[arg(long = "rank-time", default_value = "max", value_name = "max|mean")]
    pub(crate) rank_time: crate::record::RankTime,
}

request_from!(|a: &RepeatArgs| -> Repeat {
    iters,
    warmup,
    rank_time,
});

/// Flags of the cost model.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ModelArgs {
    /// Link profile the cost model assumes (`--backend model`): nvlink-h100, nvlink-h200,
    /// pcie-gen4, pcie-gen5 (default: 8 PCIe GPUs behind switches), pcie-gen5-no-p2p,
    /// pcie-gen5-dual-socket, ib-ndr. Not with --profile (a fitted profile sets every
    /// parameter).
    #[arg(long, default_value = "pcie-gen5", conflicts_with = "profile")]
    pub(crate) link: String,
    /// Calibrated profile file written by `verifybench model fit` (instead of --link).
    #[arg(long, value_name = "FILE")]
    pub(crate) profile: Option<PathBuf>,
    /// Protocols the model may pick, in NCCL_PROTO syntax (LL,LL128,Simple; ^LL128;
    /// allreduce:LL;allgather:Simple). Default: the fastest, as NCCL's tuner picks.
    #[arg(long, value_name = "LIST", env = "NCCL_PROTO")]
    pub(crate) proto: Option<String>,
    /// Algorithms the model may pick, in NCCL_ALGO syntax (Ring, Tree; ring;allreduce:tree).
    /// Default: the fastest, as NCCL's tuner picks.
    #[arg(long, value_name = "LIST", env = "NCCL_ALGO")]
    pub(crate) algo: Option<String>,
}

/// Whether a flag's value came from its environment variable (the flag is not on the command
/// line, and the variable holds the value).
fn from_env(value: &Option<String>, var: &str, flag: &str) -> bool {
    value.is_some()
        && std::env::var(var).ok() == *value
        && !std::env::args().any(|x| x == flag || x.starts_with(&format!("{flag}=")))
}

request_from!(|a: &ModelArgs| -> ModelSettings {
    link,
    profile,
    proto,
    algo,
    proto_from_env: from_env(&a.proto, "NCCL_PROTO", "--proto"),
    algo_from_env: from_env(&a.algo, "NCCL_ALGO", "--algo"),
    nccl_env: crate::util::nccl_env(),
});

/// The host-gap flags of `verify`, `sweep` and `worker`: a server's CPU time between
/// launches and a late rank, replayed in eager mode (a CUDA-graph replay has none).
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct HostGapArgs {
    /// Host (CPU) time busy-waited before each launch in eager replay: mean US and standard
    /// deviation JITTER in microseconds (0..=1000000 each; gamma-distributed, drawn per rank
    /// and per op or layer), e.g. 200:50. A CUDA-graph replay has no host gaps.
    #[arg(long, value_name = "US[:JITTER]", allow_negative_numbers = true)]
    pub(crate) host_gap_us: Option<HostGap>,
    /// Where a gap is spent: before every launch (op, default) or once per layer.
    #[arg(long, value_name = "op|layer")]
    pub(crate) host_gap_per: Option<GapPer>,
    /// One rank starts each layer US microseconds later (0..=1000000; RANK below the world
    /// size), as rank 0 is when it samples, e.g. 1:100.
    #[arg(long, value_name = "RANK:US", allow_negative_numbers = true)]
    pub(crate) late_rank: Option<LateRank>,
    /// The per-op host gaps a trace measured: a schedule file of this schedule with
    /// host_gaps_us (`verifybench trace ... --export-schedule`).
    #[arg(long, value_name = "SCHEDULE", conflicts_with = "host_gap_us")]
    pub(crate) host_gap_from: Option<PathBuf>,
    /// Seed of the gap generator (any u64; recorded with the result).
    #[arg(long, value_name = "N", value_parser = values::seed(), allow_negative_numbers = true)]
    pub(crate) gap_seed: Option<u64>,
}

request_from!(|a: &HostGapArgs| -> HostGapFlags {
    gaps: HostGapRequest {
        gap: a.host_gap_us,
        per: a.host_gap_per,
        late: a.late_rank,
        from_schedule: None,
        seed: a.gap_seed,
    },
    from: a.host_gap_from.clone(),
});

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        w: WorkloadArgs,
    }

    #[test]
    fn workload_args_round_trip_through_to_args() {
        let t = T::parse_from([
            "t",
            "--model",
            "deepseek-v3",
            "--tp",
            "4",
            "--tokens",
            "4",
            "--no-embedding-allreduce",
            "--phase",
            "draft",
            "--routing",
            "worst",
        ]);
        let w = Workload::from(&t.w);
        let mut argv = vec!["t".to_string()];
        argv.extend(w.to_args());
        let back = Workload::from(&T::parse_from(argv).w);
        assert_eq!(w.options(8), back.options(8));
        assert_eq!(w, back);
        assert_eq!(back.model, "deepseek-v3");
    }

    #[test]
    fn defaults_of_the_flags_are_the_librarys_defaults() {
        let t = T::parse_from(["t"]);
        assert_eq!(Workload::from(&t.w), Workload::default());
    }
}
