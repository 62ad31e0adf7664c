//! The plain vocabulary every record speaks: where a figure comes from ([`Source`]), element
//! types, collective kinds, phases, the collective implementation, and the statistics a record carries (a sample summary, repeated
//! runs, the straggler). Only the data lives here, at the bottom; what computes them stays with
//! the code that does (`model`, `measure`, `comm::p2p`), which re-exports these names.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::usage;

/// Where a figure comes from: the one provenance vocabulary of the tool. A record is
/// `measured` or `modeled` (the only two read back); a break-even input is also `given`,
/// `default` or `derived` (with the flag, file or inputs beside it: `evidence::Origin`); an
/// explained figure also `inferred`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// A command-line flag.
    #[serde(skip_deserializing)]
    Given,
    /// Not given: the documented default.
    #[serde(skip_deserializing)]
    Default,
    /// Timed on real GPUs, or read from a trace or log.
    Measured,
    /// Predicted by the cost model; never mistaken for a measurement.
    Modeled,
    /// The remainder of a given or measured figure after a modeled one (not measured).
    #[serde(skip_deserializing)]
    Inferred,
    /// Arithmetic on other figures.
    #[serde(skip_deserializing)]
    Derived,
}

impl Source {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Source::Given => "given",
            Source::Default => "default",
            Source::Measured => "measured",
            Source::Modeled => "modeled",
            Source::Inferred => "inferred",
            Source::Derived => "derived",
        }
    }
}

/// Element type of activations and collective buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    Bf16,
    F16,
    F32,
}

impl DType {
    pub(crate) fn size(self) -> u64 {
        match self {
            DType::Bf16 | DType::F16 => 2,
            DType::F32 => 4,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            DType::Bf16 => "bf16",
            DType::F16 => "f16",
            DType::F32 => "f32",
        }
    }
}

impl std::str::FromStr for DType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "bf16" | "bfloat16" => Ok(DType::Bf16),
            "f16" | "fp16" | "half" | "float16" => Ok(DType::F16),
            "f32" | "fp32" | "float" | "float32" => Ok(DType::F32),
            _ => Err(format!("unknown dtype '{s}' (use bf16, f16 or f32)")),
        }
    }
}

/// Element type of the KV cache a forward reads (`--kv-dtype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum KvDType {
    #[default]
    Bf16,
    Fp8,
}

crate::named_enum!(KvDType {
    Bf16 => "bf16": "2 bytes per element (the engines' default: the model's dtype).",
    Fp8 => "fp8": "1 byte per element (SGLang and vLLM --kv-cache-dtype fp8_e4m3).",
});

impl KvDType {
    pub(crate) fn size(self) -> u64 {
        match self {
            KvDType::Bf16 => 2,
            KvDType::Fp8 => 1,
        }
    }
}

/// What the KV reads of a schedule were priced with (recorded beside the context).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvSettings {
    pub(crate) dtype: KvDType,
    /// Decode context parallelism (`--dcp`): the attention caches' context sharded this many
    /// ways.
    pub(crate) dcp: u64,
}

/// Which drafter proposes the tokens of a speculative cycle (`--drafter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DrafterKind {
    #[default]
    Eagle3,
    Mtp,
    Block,
}

crate::named_enum!(DrafterKind {
    Eagle3 => "eagle3": "An EAGLE-3 head: one decoder layer over the target's hidden states (--draft-config: its config.json), k forwards per cycle.",
    Mtp => "mtp": "The target's own MTP module (num_nextn_predict_layers): one more target layer, MoE included, k forwards per cycle.",
    Block => "block": "A block drafter (DFlash-like): a few dense layers that propose all k tokens in one forward (--draft-config, or --draft-layers).",
});

/// A part of a speculative cycle's replay or price, beside the cycle itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CyclePart {
    /// The plain decode step of the same batch (one token per request).
    Decode,
    /// The k draft forwards of one cycle, as the engine runs them.
    Draft,
    /// The target's verify of the drafted tokens.
    Verify,
}

impl CyclePart {
    pub(crate) fn name(self) -> &'static str {
        match self {
            CyclePart::Decode => "decode",
            CyclePart::Draft => "draft",
            CyclePart::Verify => "verify",
        }
    }
}

/// Collective operations the schedule uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollectiveKind {
    AllReduce,
    AllGather,
    ReduceScatter,
    /// From rank 0 to every rank.
    Broadcast,
    /// Every rank sends one block to each rank (NCCL: grouped send/recv).
    AllToAll,
}

impl std::str::FromStr for CollectiveKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().replace('-', "_").as_str() {
            "all_reduce" | "allreduce" => Ok(CollectiveKind::AllReduce),
            "all_gather" | "allgather" => Ok(CollectiveKind::AllGather),
            "reduce_scatter" | "reducescatter" => Ok(CollectiveKind::ReduceScatter),
            "broadcast" => Ok(CollectiveKind::Broadcast),
            "all_to_all" | "alltoall" => Ok(CollectiveKind::AllToAll),
            _ => Err(format!(
                "unknown collective '{s}' (use all_reduce, all_gather, reduce_scatter, broadcast or all_to_all)"
            )),
        }
    }
}

/// Which forward the schedule describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The target model's verify forward of T tokens.
    Verify,
    /// One normal decode step of the target model (T = 1).
    Decode,
    /// One EAGLE-3 draft step (one decoder layer, draft vocabulary, 1 token).
    Draft,
    /// The speculative cycle as engines run it: k draft forwards, then the verify (with the
    /// plain decode step of the same batch beside it).
    Cycle,
}

crate::named_enum!(Phase {
    Verify => "verify": "The target model's verify forward of T tokens.",
    Decode => "decode": "One normal decode step of the target model (T = 1).",
    Draft => "draft": "One EAGLE-3 draft step (one decoder layer, draft vocabulary, 1 token).",
    Cycle => "cycle": "The speculative cycle: k draft forwards (--drafter, --draft-steps), then the verify of k+1 tokens per request; the plain decode step beside it (plan and verify).",
});

/// A collective implementation: NCCL's, or one of the custom P2P all-reduces.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub enum Impl {
    /// NCCL's collective (the reference).
    #[default]
    #[serde(rename = "nccl")]
    Nccl,
    /// Copy in, one signal round, n-1 peer reads per rank.
    #[serde(rename = "oneshot")]
    OneShot,
    /// Reduce-scatter then all-gather through peer buffers: two signal rounds, 2(n-1)/n of the
    /// message over the links.
    #[serde(rename = "twoshot")]
    TwoShot,
}

impl Impl {
    pub(crate) const ALL: [Impl; 3] = [Impl::Nccl, Impl::OneShot, Impl::TwoShot];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Impl::Nccl => "nccl",
            Impl::OneShot => "oneshot",
            Impl::TwoShot => "twoshot",
        }
    }

    /// Whether the implementation is one of the custom P2P kernels (needs peer memory).
    pub(crate) fn is_p2p(self) -> bool {
        self != Impl::Nccl
    }

    /// Parses `--impl`'s comma list (`nccl,oneshot,twoshot`), in the given order, repeats
    /// dropped. An unknown name is a usage error that lists the valid ones.
    pub(crate) fn parse_list(s: &str) -> anyhow::Result<Vec<Impl>> {
        let mut out = vec![];
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let i: Impl = part
                .parse()
                .map_err(|e: String| usage(format!("--impl '{s}': {e}")))?;
            if !out.contains(&i) {
                out.push(i);
            }
        }
        if out.is_empty() {
            crate::usage_bail!("--impl '{s}' names no implementation (valid: {})", valid());
        }
        Ok(out)
    }
}

fn valid() -> String {
    Impl::ALL.map(Impl::name).join(", ")
}

impl fmt::Display for Impl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Impl {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "nccl" => Ok(Impl::Nccl),
            "oneshot" | "one-shot" => Ok(Impl::OneShot),
            "twoshot" | "two-shot" => Ok(Impl::TwoShot),
            _ => Err(format!("unknown implementation '{s}' (valid: {})", valid())),
        }
    }
}

/// Summary of a sample set (all values in microseconds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    pub median_us: f64,
    pub mean_us: f64,
    /// Sample standard deviation (n - 1); 0 for a single sample.
    pub stddev_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    /// 99th percentile (linear interpolation between closest ranks).
    pub p99_us: f64,
    /// Samples further than 3.5 modified z-scores (MAD-based) from the median.
    pub outliers: usize,
}

/// A 95% interval of a repeated measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RepInterval {
    pub(crate) lo_us: f64,
    pub(crate) hi_us: f64,
    /// `order statistics` or `t`.
    pub(crate) method: String,
    /// Nominal coverage: exact binomial for order statistics, 0.95 for t.
    pub(crate) coverage: f64,
}

/// A first repetition left out of the statistics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ColdStart {
    pub(crate) value_us: f64,
    pub(crate) reason: String,
}

/// R repetitions' medians and their summary, as a record carries them.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Repetitions {
    /// Every repetition's median (us), in run order, a cold start included.
    pub(crate) repetitions_us: Vec<f64>,
    /// Repetitions the statistics below use (all but a cold start).
    pub(crate) used: usize,
    /// Median of the used repetitions, us.
    pub(crate) median_us: f64,
    pub(crate) min_us: f64,
    pub(crate) max_us: f64,
    /// 95% interval; `None` for a single used repetition.
    pub(crate) interval: Option<RepInterval>,
    /// The first repetition, when it was a cold start.
    pub(crate) cold_start: Option<ColdStart>,
}

/// How often and by how much one rank arrived last.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Straggler {
    pub rank: usize,
    /// Collectives in which it started last.
    pub(crate) times_last: usize,
    /// Its share of the collectives with a known last rank.
    pub share: f64,
    /// Median of (its start - the earliest start) over the collectives it was last in.
    pub(crate) median_lag_us: f64,
}

/// How a run of one rank through NCCL (a communicator of size 1) is labelled.
pub(crate) const ONE_RANK: &str = "1 rank: NCCL's path, no transfer";
