//! Flag groups shared by several commands.

use std::path::PathBuf;

use crate::model::{self, DType, Logits, Phase, Routing, Schedule, ScheduleOptions};

/// Which model, parallelism and token count: the workload every command replays or prices.
#[derive(Debug, Clone, clap::Args)]
pub struct WorkloadArgs {
    /// Built-in model preset: kimi-k2.5, deepseek-v3, llama-3.1-70b, qwen3-235b-a22b.
    #[arg(long, default_value = "kimi-k2.5")]
    pub model: String,
    /// A Hugging Face config.json instead of a preset (DeepSeek-V3/Kimi-K2, Llama, Qwen3-MoE).
    #[arg(long, value_name = "PATH")]
    pub model_config: Option<PathBuf>,
    /// Tensor-parallel size (ranks). Defaults to the number of GPUs used, or 8 without GPUs.
    #[arg(long)]
    pub tp: Option<u64>,
    /// Tokens per verify forward. SGLang verifies num_steps+1 tokens when topk=1
    /// (--speculative-num-steps 3 means 4).
    #[arg(long, default_value_t = 3)]
    pub tokens: u64,
    /// Activation and collective element type.
    #[arg(long, default_value = "bf16")]
    pub dtype: DType,
    /// How many distinct routed experts T tokens select per MoE layer.
    #[arg(long, value_enum, default_value_t = Routing::Uniform)]
    pub routing: Routing,
    /// Leave out the embedding all-reduce (for engines that skip or fuse it).
    #[arg(long)]
    pub no_embedding_allreduce: bool,
    /// What happens to the vocab-parallel logits.
    #[arg(long, value_enum, default_value_t = Logits::Gather)]
    pub logits: Logits,
    /// Vocabulary of the EAGLE-3 draft head (the draft phase).
    #[arg(long, default_value_t = 32000)]
    pub draft_vocab: u64,
    /// Which forward: the verify of T tokens, one decode step, or one EAGLE-3 draft step.
    #[arg(long, value_enum, default_value_t = Phase::Verify)]
    pub phase: Phase,
}

impl WorkloadArgs {
    pub fn options(&self, default_tp: u64) -> ScheduleOptions {
        ScheduleOptions {
            tp: self.tp.unwrap_or(default_tp),
            tokens: self.tokens,
            dtype: self.dtype,
            routing: self.routing,
            embedding_allreduce: !self.no_embedding_allreduce,
            logits: self.logits,
            draft_vocab: self.draft_vocab,
        }
    }

    pub fn shape(&self) -> anyhow::Result<model::ModelShape> {
        model::resolve(&self.model, self.model_config.as_deref())
    }

    /// The schedule of the chosen phase, with `default_tp` when --tp is absent.
    pub fn schedule(&self, default_tp: u64) -> anyhow::Result<Schedule> {
        let shape = self.shape()?;
        model::build(&shape, &self.options(default_tp), self.phase)
    }

    /// The flags that reproduce this workload on another command line (sweep workers).
    pub fn to_args(&self) -> Vec<String> {
        let mut a = vec![];
        match &self.model_config {
            Some(p) => a.extend(["--model-config".into(), p.display().to_string()]),
            None => a.extend(["--model".into(), self.model.clone()]),
        }
        if let Some(tp) = self.tp {
            a.extend(["--tp".into(), tp.to_string()]);
        }
        a.extend(["--tokens".into(), self.tokens.to_string()]);
        a.extend(["--dtype".into(), self.dtype.name().into()]);
        a.extend([
            "--routing".into(),
            format!("{:?}", self.routing).to_lowercase(),
        ]);
        if self.no_embedding_allreduce {
            a.push("--no-embedding-allreduce".into());
        }
        a.extend([
            "--logits".into(),
            format!("{:?}", self.logits).to_lowercase(),
        ]);
        a.extend(["--draft-vocab".into(), self.draft_vocab.to_string()]);
        a.extend(["--phase".into(), format!("{:?}", self.phase).to_lowercase()]);
        a
    }
}

/// Where the numbers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// NCCL when at least two GPUs are present, otherwise the cost model (and say so).
    Auto,
    /// Real NCCL collectives on real GPUs.
    Nccl,
    /// The calibrated cost model: runs anywhere, every number labelled modeled.
    Model,
}

/// How ranks are started.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Launcher {
    /// One thread per GPU in this process.
    Threads,
    /// One worker process per GPU, as serving engines run (default).
    Processes,
}

impl Launcher {
    pub fn name(self) -> &'static str {
        match self {
            Launcher::Threads => "threads",
            Launcher::Processes => "processes",
        }
    }
}

/// Which GPUs and how to reach NCCL.
#[derive(Debug, Clone, clap::Args)]
pub struct GpuArgs {
    /// Number of GPUs (ranks) to use: the first N visible devices.
    #[arg(long)]
    pub gpus: Option<usize>,
    /// Exact device ordinals to use, e.g. 0,1.
    #[arg(long, value_delimiter = ',', conflicts_with = "gpus")]
    pub devices: Option<Vec<usize>>,
    /// Ranks as threads of this process or as worker processes.
    #[arg(long, value_enum, default_value_t = Launcher::Processes)]
    pub launcher: Launcher,
    /// Path of libnccl.so to load (else: LD_LIBRARY_PATH, system paths, Python's nvidia-nccl wheel).
    #[arg(long, value_name = "PATH", env = "VERIFYBENCH_NCCL_LIB")]
    pub nccl_lib: Option<PathBuf>,
    /// Seconds any rendezvous, collective or worker may take before the run is aborted.
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
}

/// `-w/--warmup` and `-n/--iters`, as nccl-tests and hyperfine name them.
#[derive(Debug, Clone, clap::Args)]
pub struct RepeatArgs {
    /// Timed iterations (replays) per configuration.
    #[arg(short = 'n', long = "iters", default_value_t = 200)]
    pub iters: u64,
    /// Untimed warm-up iterations before timing.
    #[arg(short = 'w', long = "warmup", default_value_t = 20)]
    pub warmup: u64,
}

/// `--graph on|off|both`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GraphChoice {
    On,
    Off,
    Both,
}

impl GraphChoice {
    /// The graph flags to run, eager first.
    pub fn modes(self) -> Vec<bool> {
        match self {
            GraphChoice::On => vec![true],
            GraphChoice::Off => vec![false],
            GraphChoice::Both => vec![false, true],
        }
    }
}

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
        ]);
        let mut argv = vec!["t".to_string()];
        argv.extend(t.w.to_args());
        let back = T::parse_from(argv);
        assert_eq!(t.w.options(8), back.w.options(8));
        assert_eq!(back.w.model, "deepseek-v3");
    }
}
