//! The ordered list of operations one rank performs in one forward, as SGLang runs a model under
//! pure tensor parallelism (see the module docs of [`crate::model`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::kv::{KvDType, KvSettings};
use super::shape::*;
use crate::error::usage;
use crate::record::vocab::DrafterKind;
pub use crate::record::vocab::{CollectiveKind, DType, Phase};

impl CollectiveKind {
    /// The name records and tables use (`all_reduce`); see [`CollectiveKind::ops`].
    pub fn name(self) -> &'static str {
        self.ops().name()
    }

    /// nccl-tests' bus-bandwidth factor for `n` ranks.
    pub(crate) fn bus_factor(self, n: usize) -> f64 {
        self.ops().bus_factor(n)
    }
}

/// What a compute op stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComputeKind {
    Attention,
    /// Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5).
    LinearAttention,
    /// Mamba-2 state-space mixer (Nemotron-H).
    Mamba,
    DenseMlp,
    Router,
    RoutedExperts,
    SharedExperts,
    DraftFc,
    LmHead,
    /// The KV cache (or a linear-attention state) the layer's attention reads: bytes of
    /// context, not weights (`--context`).
    KvCache,
}

impl ComputeKind {
    /// The name JSON gives it (`routed_experts`): the key of a record's `weight_formats`.
    pub(crate) fn key(self) -> &'static str {
        match self {
            ComputeKind::Attention => "attention",
            ComputeKind::LinearAttention => "linear_attention",
            ComputeKind::Mamba => "mamba",
            ComputeKind::DenseMlp => "dense_mlp",
            ComputeKind::Router => "router",
            ComputeKind::RoutedExperts => "routed_experts",
            ComputeKind::SharedExperts => "shared_experts",
            ComputeKind::DraftFc => "draft_fc",
            ComputeKind::LmHead => "lm_head",
            ComputeKind::KvCache => "kv_cache",
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            ComputeKind::Attention => "attention",
            ComputeKind::LinearAttention => "linear attention",
            ComputeKind::Mamba => "mamba mixer",
            ComputeKind::DenseMlp => "dense MLP",
            ComputeKind::Router => "router",
            ComputeKind::RoutedExperts => "routed experts",
            ComputeKind::SharedExperts => "shared expert",
            ComputeKind::DraftFc => "draft fc",
            ComputeKind::LmHead => "LM head",
            ComputeKind::KvCache => "KV cache",
        }
    }
}

/// The most ranks (--tp, --gpus, --devices) any command accepts, and a schedule's tp.
pub(crate) const MAX_RANKS: usize = 1024;
/// The most tokens per forward (--tokens), and a schedule's tokens.
pub(crate) const MAX_TOKENS: u64 = 65536;

/// One step of the forward on one rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    Collective {
        kind: CollectiveKind,
        dtype: DType,
        /// NCCL's `count` of the call: the buffer's elements for all-reduce and broadcast,
        /// each rank's send count for all-gather, the elements sent to each peer for
        /// all-to-all (a rank's send buffer holds `count x nranks`; see the collective's
        /// `send_elems`).
        count: u64,
        /// `count * dtype size`: the bytes NCCL's count stands for (for all-to-all, per peer).
        bytes_per_rank: u64,
        /// Where in the model it sits: `embedding`, `attention`, `mlp`, `logits`.
        site: String,
        layer: Option<u64>,
    },
    Compute {
        kind: ComputeKind,
        /// Bytes this rank streams: its TP shard of the weights, scales included (for
        /// [`ComputeKind::KvCache`], the KV cache it reads).
        weight_bytes: u64,
        layer: Option<u64>,
        /// The tokens each weight unit of the op meets, where not every unit meets every token
        /// of the forward (the routed experts: how many experts receive how many tokens);
        /// `None`: the whole op meets all the forward's tokens (attention, dense MLP, router,
        /// shared experts, LM head).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token_histogram: Option<TokenHistogram>,
    },
}

/// How many weight units of an op meet how many tokens: for the routed experts of one MoE layer,
/// the experts that receive exactly `tokens` of the forward's tokens, `units` of each count.
/// The op's `weight_bytes` is `unit_bytes` x the units (whole experts); a replay streams each
/// row's units once against its own token count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenHistogram {
    /// Weight bytes of one unit on this rank (one expert's TP shard).
    pub(crate) unit_bytes: u64,
    /// In increasing `tokens`, each with at least one unit.
    pub(crate) rows: Vec<TokenRow>,
}

/// `units` weight units that each meet `tokens` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TokenRow {
    pub(crate) tokens: u64,
    pub(crate) units: u64,
}

impl TokenHistogram {
    /// The units touched (experts that receive at least one token).
    pub(crate) fn units(&self) -> u64 {
        self.rows.iter().map(|r| r.units).sum()
    }

    /// The unit-token pairs (token-expert pairs: tokens x top-k when every pair is kept).
    pub(crate) fn pairs(&self) -> u64 {
        self.rows.iter().map(|r| r.units * r.tokens).sum()
    }

    /// "188 experts touched: 133 by 1 token, 44 by 2, 9 by 3, 2 by 4".
    pub(crate) fn describe(&self, unit: &str) -> String {
        let rows: Vec<String> = self
            .rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let tok = if i > 0 {
                    ""
                } else if r.tokens == 1 {
                    " token"
                } else {
                    " tokens"
                };
                format!("{} by {}{tok}", r.units, r.tokens)
            })
            .collect();
        format!("{} {unit} touched: {}", self.units(), rows.join(", "))
    }
}

/// How the routed experts selected by T tokens are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Routing {
    /// Expected distinct experts under uniform routing: E (1 - (1 - k/E)^T).
    Uniform,
    /// Every token picks different experts: min(E, T k).
    Worst,
}

crate::named_enum!(Routing {
    Uniform => "uniform": "Expected distinct experts under uniform routing: E (1 - (1 - k/E)^T).",
    Worst => "worst": "Every token picks different experts: min(E, T k).",
});

/// What the logits do at the end of the forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Logits {
    /// All-gather of the vocab-parallel logits to every rank (SGLang).
    Gather,
    /// No collective for the logits.
    None,
}

crate::named_enum!(Logits {
    Gather => "gather": "All-gather of the vocab-parallel logits to every rank (SGLang).",
    None => "none": "No collective for the logits.",
});

/// The serving engine whose names and fusions the plan follows ([`super::engine`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    #[default]
    Sglang,
    Vllm,
}

crate::named_enum!(Engine {
    Sglang => "sglang": "SGLang (python/sglang/srt): its call names, its all-reduce fusion rules.",
    Vllm => "vllm": "vLLM (vllm/model_executor): its call names, its compilation pass's fusions.",
});

impl Engine {
    /// The engine's own spelling.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Engine::Sglang => "SGLang",
            Engine::Vllm => "vLLM",
        }
    }
}

/// Knobs of a schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleOptions {
    pub tp: u64,
    pub tokens: u64,
    pub dtype: DType,
    pub routing: Routing,
    pub embedding_allreduce: bool,
    pub logits: Logits,
    pub draft_vocab: u64,
    /// The serving engine whose names and fusions `plan` shows (the ops do not depend on it:
    /// see [`super::engine`]).
    pub engine: Engine,
    /// The engine runs its all-reduce + residual + RMSNorm fusion (SGLang
    /// `--enable-flashinfer-allreduce-fusion`, vLLM's `AllReduceFusionPass`): the same
    /// collectives under other kernel names.
    pub allreduce_fusion: bool,
    /// Requests in the batch (`--concurrency`): a forward carries `concurrency x` the tokens
    /// of one request, and touches the experts of all of them.
    pub concurrency: u64,
    /// Context tokens per request whose KV cache each forward reads (`--context`; 0: none).
    pub context: u64,
    pub kv: KvSettings,
    /// The weight formats to price instead of the checkpoint's (`--weights`, ...).
    pub weights: WeightOverride,
}

impl Default for ScheduleOptions {
    fn default() -> Self {
        ScheduleOptions {
            tp: 8,
            tokens: 3,
            dtype: DType::Bf16,
            routing: Routing::Uniform,
            embedding_allreduce: true,
            logits: Logits::Gather,
            draft_vocab: 32000,
            engine: Engine::Sglang,
            allreduce_fusion: false,
            concurrency: 1,
            context: 0,
            kv: KvSettings {
                dtype: KvDType::Bf16,
                dcp: 1,
            },
            weights: WeightOverride::default(),
        }
    }
}

impl ScheduleOptions {
    /// The KV settings the schedule records: `None` without a context.
    pub(super) fn kv_facts(&self) -> Option<KvSettings> {
        (self.context > 0).then_some(self.kv)
    }
}

/// The ordered operations of one forward on one rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    pub(crate) model: String,
    pub(crate) phase: Phase,
    pub tp: u64,
    pub tokens: u64,
    pub(crate) dtype: DType,
    pub(crate) routing: Routing,
    /// Expected distinct routed experts per MoE layer (0 for dense models).
    pub(crate) experts_per_layer: f64,
    pub ops: Vec<Op>,
    /// How a `--model-config` was read and what it did not understand (shown by `plan`);
    /// `None` for presets and schedule files. Not part of the hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) config_reading: Option<Box<ConfigReading>>,
    /// What the forward was built for beyond its ops: the batch, the context, the weights'
    /// formats, the drafter (flattened into the schedule's JSON). Not part of the hash: the
    /// ops already hold what it changes.
    #[serde(default, flatten)]
    pub(crate) facts: Box<ScheduleFacts>,
}

/// The batch, the context, the weight formats and the drafter a schedule was built for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ScheduleFacts {
    /// Requests in the batch: `tokens` is this many times the tokens of one request.
    #[serde(default = "crate::util::one", skip_serializing_if = "is_one")]
    pub(crate) concurrency: u64,
    /// Context tokens per request whose KV cache the forward reads (0: none priced).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) context: u64,
    /// The KV cache's element type and context sharding, with a context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) kv: Option<KvSettings>,
    /// The storage format of each kind of weights the forward streams (empty for a schedule
    /// without weights, such as a trace export).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) weight_formats: BTreeMap<ComputeKind, WeightFormat>,
    /// `--weights` / `--expert-weights` as given, where they replaced the checkpoint's formats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) weights_override: Option<String>,
    /// The drafter of a draft forward of a cycle (`None`: `--phase draft`'s EAGLE-3 head, or
    /// not a draft).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) drafter: Option<DrafterKind>,
}

impl Default for ScheduleFacts {
    fn default() -> Self {
        ScheduleFacts {
            concurrency: 1,
            context: 0,
            kv: None,
            weight_formats: BTreeMap::new(),
            weights_override: None,
            drafter: None,
        }
    }
}

fn is_one(n: &u64) -> bool {
    *n == 1
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// How a model config became this schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ConfigReading {
    /// The architecture table's entry and the engine code it follows (`None`: not in the table).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) read_as: Option<String>,
    /// What the config did not say or the reading did not understand.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) warnings: Vec<String>,
}

/// One row of the grouped collective summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CollectiveGroup {
    pub(crate) kind: CollectiveKind,
    pub(crate) dtype: DType,
    pub(crate) count: u64,
    pub(crate) bytes_per_rank: u64,
    /// Bytes every rank ends up holding (all-gather: bytes_per_rank x tp).
    pub(crate) bytes_out: u64,
    pub(crate) n: u64,
}

impl Schedule {
    /// Collectives grouped by (kind, dtype, size), in order of first appearance.
    pub(crate) fn collective_groups(&self) -> Vec<CollectiveGroup> {
        let mut groups: Vec<CollectiveGroup> = Vec::new();
        for op in &self.ops {
            if let Op::Collective {
                kind,
                dtype,
                count,
                bytes_per_rank,
                ..
            } = op
            {
                if let Some(g) = groups.iter_mut().find(|g| {
                    g.kind == *kind && g.dtype == *dtype && g.bytes_per_rank == *bytes_per_rank
                }) {
                    g.n += 1;
                } else {
                    let out = kind.ops().bytes_out(*bytes_per_rank, self.tp);
                    groups.push(CollectiveGroup {
                        kind: *kind,
                        dtype: *dtype,
                        count: *count,
                        bytes_per_rank: *bytes_per_rank,
                        bytes_out: out,
                        n: 1,
                    });
                }
            }
        }
        groups
    }

    /// The token histogram of the first routed-expert op (every MoE layer's is the same in a
    /// built schedule); `None` for dense models and schedules without compute.
    pub(crate) fn routed_histogram(&self) -> Option<&TokenHistogram> {
        self.ops.iter().find_map(|o| match o {
            Op::Compute {
                kind: ComputeKind::RoutedExperts,
                token_histogram: Some(h),
                ..
            } => Some(h),
            _ => None,
        })
    }

    pub(crate) fn count_collectives(&self, kind: CollectiveKind) -> u64 {
        self.ops
            .iter()
            .filter(|o| matches!(o, Op::Collective { kind: k, .. } if *k == kind))
            .count() as u64
    }

    pub fn n_collectives(&self) -> u64 {
        self.ops
            .iter()
            .filter(|o| matches!(o, Op::Collective { .. }))
            .count() as u64
    }

    /// Bytes streamed per compute kind (weights, and the KV cache as its own kind), summed
    /// over the forward.
    pub(crate) fn weight_bytes_by_kind(&self) -> BTreeMap<ComputeKind, u64> {
        let mut m = BTreeMap::new();
        for op in &self.ops {
            if let Op::Compute {
                kind, weight_bytes, ..
            } = op
            {
                *m.entry(*kind).or_insert(0) += weight_bytes;
            }
        }
        m
    }

    /// The weight bytes one rank streams per forward (the KV cache apart); `None` when the
    /// schedule holds no compute op (the weights are unknown: collectives only), never 0 for
    /// unknown.
    pub(crate) fn weight_bytes(&self) -> Option<u64> {
        self.ops
            .iter()
            .any(|o| matches!(o, Op::Compute { .. }))
            .then(|| self.streamed_bytes() - self.kv_bytes())
    }

    /// The KV cache bytes one rank reads per forward (0 without a context).
    pub(crate) fn kv_bytes(&self) -> u64 {
        self.weight_bytes_by_kind()
            .get(&ComputeKind::KvCache)
            .copied()
            .unwrap_or(0)
    }

    /// Every byte the compute ops stream: the weights and the KV cache.
    pub(crate) fn streamed_bytes(&self) -> u64 {
        self.weight_bytes_by_kind().values().sum()
    }

    /// The tokens of one request in this forward (`tokens / concurrency`).
    pub(crate) fn tokens_per_request(&self) -> u64 {
        self.tokens / self.facts.concurrency.max(1)
    }

    pub(crate) fn total_collective_bytes(&self) -> u64 {
        self.ops
            .iter()
            .map(|o| match o {
                Op::Collective { bytes_per_rank, .. } => *bytes_per_rank,
                _ => 0,
            })
            .sum()
    }

    /// A short stable fingerprint of the workload (ops, tp, tokens, dtype): two runs with the same
    /// hash replay the same collectives and stream the same bytes.
    pub fn hash(&self) -> String {
        let text = serde_json::to_string(&(&self.ops, self.tp, self.tokens, self.dtype))
            .expect("schedule serializes");
        format!("{:016x}", fnv1a(text.as_bytes()))
    }
}

/// FNV-1a, 64 bits: a fingerprint stable across builds and platforms, unlike std's hasher.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

/// Expected distinct routed experts per layer for `tokens` tokens.
pub(crate) fn distinct_experts(moe: &Moe, tokens: u64, routing: Routing) -> f64 {
    let e = moe.routed_experts as f64;
    let k = moe.experts_per_token as f64;
    match routing {
        Routing::Uniform => e * (1.0 - (1.0 - k / e).powi(tokens as i32)),
        Routing::Worst => e.min(tokens as f64 * k),
    }
}

/// How many routed experts of one MoE layer receive how many of `tokens` tokens, in whole
/// experts: `(tokens j, experts)` rows in increasing j.
///
/// Uniform routing: each token picks `k` distinct experts of `E` at random, so one expert is hit
/// by one token with probability p = k / E, independently from token to token, and the expected
/// number of experts hit exactly j times is E x C(T, j) p^j (1 - p)^(T - j). The rule that makes
/// whole experts of it: for every j, the experts hit at least j times, E x P(X >= j) with X ~
/// Binomial(T, p), rounded to the nearest whole expert (the rows are the differences of these
/// counts, so the experts touched are the expected distinct experts, rounded); the token-expert
/// pairs, which are the sum of these counts over j, then differ from T x k by the rounding: the
/// difference is made up one pair at a time at the j whose count was rounded furthest the other
/// way (one expert moved from j - 1 to j tokens, or at j = 1 one expert more or less touched),
/// keeping the counts non-increasing in j. The pairs come out at T x k exactly.
///
/// Worst routing (every token picks experts no other token picked): T x k experts hit once; past
/// E experts, the T x k pairs spread as evenly as they go (every expert hit floor(T k / E) or one
/// more time).
pub(crate) fn expert_histogram(moe: &Moe, tokens: u64, routing: Routing) -> Vec<TokenRow> {
    let (e, k, t) = (
        moe.routed_experts,
        moe.experts_per_token.min(moe.routed_experts),
        tokens,
    );
    let rows = |pairs: Vec<(u64, u64)>| -> Vec<TokenRow> {
        pairs
            .into_iter()
            .filter(|&(j, n)| j > 0 && n > 0)
            .map(|(tokens, units)| TokenRow { tokens, units })
            .collect()
    };
    if e == 0 || k == 0 || t == 0 {
        return vec![];
    }
    match routing {
        Routing::Worst if t * k <= e => rows(vec![(1, t * k)]),
        Routing::Worst => {
            let (q, r) = (t * k / e, t * k % e);
            rows(vec![(q, e - r), (q + 1, r)])
        }
        Routing::Uniform if k == e => rows(vec![(t, e)]),
        Routing::Uniform => {
            let at_least = experts_hit_at_least(e, k, t);
            let counts = whole_experts(&at_least, e, t * k);
            rows(
                (1..=t as usize)
                    .map(|j| (j as u64, counts[j] - counts[j + 1]))
                    .collect(),
            )
        }
    }
}

/// E x P(X >= j) for j = 0..=T + 1, X ~ Binomial(T, k / E) (0 < k < E): the expected experts hit
/// at least j times. The probabilities come from the log of the mass function, term by term
/// (C(T, j) p^j (1-p)^(T-j) = the previous term x (T - j + 1) / j x p / (1 - p)), and the tail
/// sums from the top, so that small tails keep their digits.
fn experts_hit_at_least(e: u64, k: u64, t: u64) -> Vec<f64> {
    let p = k as f64 / e as f64;
    let (lp, lq) = (p.ln(), (1.0 - p).ln());
    let mut log_pmf = Vec::with_capacity(t as usize + 1);
    let mut l = t as f64 * lq;
    log_pmf.push(l);
    for j in 1..=t {
        l += ((t - j + 1) as f64 / j as f64).ln() + lp - lq;
        log_pmf.push(l);
    }
    let mut at_least = vec![0.0; t as usize + 2];
    for j in (0..=t as usize).rev() {
        at_least[j] = at_least[j + 1] + log_pmf[j].exp();
    }
    at_least.iter().map(|x| x.min(1.0) * e as f64).collect()
}

/// Whole-expert counts of `at_least` (the expected experts hit at least j times, j = 0..=T + 1)
/// whose sum over j >= 1 is `pairs`: each rounded to the nearest, then moved by one at a time
/// toward `pairs` where the rounding went furthest the other way, keeping them non-increasing
/// (count 0 is all `e` experts, count T + 1 none). See [`expert_histogram`].
fn whole_experts(at_least: &[f64], e: u64, pairs: u64) -> Vec<u64> {
    let last = at_least.len() - 1;
    let mut c: Vec<i64> = at_least.iter().map(|x| x.round() as i64).collect();
    c[0] = e as i64;
    c[last] = 0;
    let mut diff = pairs as i64 - c[1..last].iter().sum::<i64>();
    while diff != 0 {
        let up = diff > 0;
        let pick = (1..last)
            .filter(|&j| if up { c[j] < c[j - 1] } else { c[j] > c[j + 1] })
            .map(|j| {
                let off = at_least[j] - c[j] as f64;
                (j, if up { off } else { -off })
            })
            .fold(None, |best: Option<(usize, f64)>, (j, o)| match best {
                Some((_, b)) if b >= o => best,
                _ => Some((j, o)),
            });
        let Some((j, _)) = pick else { break };
        c[j] += if up { 1 } else { -1 };
        diff += if up { -1 } else { 1 };
    }
    c.into_iter().map(|x| x.max(0) as u64).collect()
}

pub(super) fn check_divides(tp: u64, what: &str, n: u64) -> anyhow::Result<()> {
    if n % tp != 0 {
        return Err(usage(format!(
            "--tp {tp} does not divide the {what} ({n}); choose a tensor-parallel size that does"
        )));
    }
    Ok(())
}

/// Checks that `opt` fits `shape`: tp divides the sharded dimensions, tokens >= 1.
pub(crate) fn validate(shape: &ModelShape, opt: &ScheduleOptions) -> anyhow::Result<()> {
    if opt.tp == 0 {
        return Err(usage("--tp must be at least 1"));
    }
    if opt.tokens == 0 {
        return Err(usage("--tokens must be at least 1"));
    }
    if !shape.weights_known {
        // collectives only: they depend on hidden size, vocabulary and TP alone
        return check_divides(opt.tp, "vocabulary", shape.vocab);
    }
    let tp = opt.tp;
    let dcp = opt.kv.dcp;
    if dcp == 0 || tp % dcp != 0 {
        return Err(usage(format!(
            "--dcp {dcp} does not divide --tp {tp}: decode context parallelism shards the KV cache over ranks of the TP group; give a --dcp that divides it"
        )));
    }
    check_divides(tp, "attention heads", shape.attention.heads())?;
    check_divides(tp, "vocabulary", shape.vocab)?;
    let blocks = shape.layer_blocks();
    for b in &blocks {
        match b.ffn {
            Some(Ffn::Dense { intermediate, .. }) => {
                check_divides(tp, "intermediate size", intermediate)?
            }
            Some(Ffn::Moe {
                moe,
                dense_intermediate,
            }) => {
                check_divides(tp, "MoE intermediate size", moe.moe_intermediate)?;
                if moe.shared_experts > 0 {
                    check_divides(
                        tp,
                        "shared expert intermediate size",
                        moe.shared_intermediate(),
                    )?;
                }
                check_divides(tp, "intermediate size", dense_intermediate)?;
            }
            Some(Ffn::Linear) | None => {}
        }
    }
    for b in &blocks {
        match b.mixer {
            Some(Mixer::Attention(a)) => {
                check_divides(tp, "attention heads", a.heads())?;
                if let Attention::LatentMqa { o_groups, .. } = a {
                    check_divides(tp, "output groups (o_groups)", o_groups)?;
                }
                if let Attention::Gqa { kv_heads, .. } = a {
                    if kv_heads == 0 || (kv_heads % tp != 0 && tp % kv_heads != 0) {
                        return Err(usage(format!(
                            "--tp {tp} and the {kv_heads} KV heads do not divide one another"
                        )));
                    }
                }
            }
            Some(Mixer::GatedDeltaNet {
                key_heads,
                value_heads,
                ..
            }) => {
                check_divides(tp, "linear-attention key heads", key_heads)?;
                check_divides(tp, "linear-attention value heads", value_heads)?;
            }
            Some(Mixer::Mamba2 { heads, .. }) => check_divides(tp, "Mamba heads", heads)?,
            Some(Mixer::Linear) | None => {}
        }
    }
    Ok(())
}

fn attention_bytes(att: &Attention, f: WeightFormat, h: u64, tp: u64) -> u64 {
    match *att {
        Attention::Mla {
            heads,
            q_lora_rank,
            kv_lora_rank,
            qk_nope_head_dim,
            qk_rope_head_dim,
            v_head_dim,
        } => {
            let hl = heads / tp;
            let qk = qk_nope_head_dim + qk_rope_head_dim;
            let q = match q_lora_rank {
                // q_a_proj replicated, q_b_proj column-parallel
                Some(r) => f.matrix_bytes(r, h) + f.matrix_bytes(hl * qk, r),
                None => f.matrix_bytes(hl * qk, h),
            };
            // kv_a_proj_with_mqa replicated, kv_b_proj column-parallel, o_proj row-parallel
            let kv = f.matrix_bytes(kv_lora_rank + qk_rope_head_dim, h)
                + f.matrix_bytes(hl * (qk_nope_head_dim + v_head_dim), kv_lora_rank);
            let o = f.matrix_bytes(h, hl * v_head_dim);
            q + kv + o
        }
        Attention::LatentMqa {
            heads,
            head_dim,
            q_lora_rank,
            o_lora_rank,
            o_groups,
        } => {
            // vLLM deepseek_v4.py: fused_wqa_wkv replicated (H -> q_lora_rank + head_dim),
            // wq_b column-parallel (q_lora_rank -> heads/TP x head_dim), wo_a column-parallel
            // over the groups (heads x head_dim / groups -> groups/TP x o_lora_rank), wo_b
            // row-parallel (groups/TP x o_lora_rank -> H)
            let gl = o_groups / tp;
            f.matrix_bytes(q_lora_rank + head_dim, h)
                + f.matrix_bytes(heads / tp * head_dim, q_lora_rank)
                + f.matrix_bytes(gl * o_lora_rank, heads * head_dim / o_groups.max(1))
                + f.matrix_bytes(h, gl * o_lora_rank)
        }
        Attention::Gqa {
            heads,
            kv_heads,
            head_dim,
            v_head_dim,
            gated_q,
        } => {
            let v = v_head_dim.unwrap_or(head_dim);
            let q_rows = heads / tp * head_dim * if gated_q { 2 } else { 1 };
            let kv_local = if kv_heads >= tp { kv_heads / tp } else { 1 };
            // fused qkv column-parallel (KV heads replicated when TP > KV heads), o row-parallel
            let qkv = f.matrix_bytes(q_rows + kv_local * (head_dim + v), h);
            let o = f.matrix_bytes(h, heads / tp * v);
            qkv + o
        }
    }
}

/// A GQA attention's weights on one rank whose qkv projection reads `qkv_in` features (the
/// hidden size, or twice it for EAGLE-3's midlayer) and whose output is `h` wide.
pub(super) fn gqa_bytes(
    f: WeightFormat,
    qkv_in: u64,
    h: u64,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    tp: u64,
) -> u64 {
    let kv_local = if kv_heads >= tp { kv_heads / tp } else { 1 };
    f.matrix_bytes(heads / tp * head_dim + kv_local * 2 * head_dim, qkv_in)
        + f.matrix_bytes(h, heads / tp * head_dim)
}

/// The compute op a mixer stands for and the weight bytes one rank streams for it.
pub(super) fn mixer_weights(m: &Mixer, f: WeightFormat, h: u64, tp: u64) -> (ComputeKind, u64) {
    // depthwise conv weights are not Linear layers: bf16 in every checkpoint format
    let conv = |channels: u64, kernel: u64| WeightFormat::Bf16.matrix_bytes(channels, kernel);
    match *m {
        Mixer::Attention(a) => (ComputeKind::Attention, attention_bytes(&a, f, h, tp)),
        Mixer::GatedDeltaNet {
            key_heads,
            value_heads,
            key_head_dim,
            value_head_dim,
            conv_kernel,
        } => {
            // vLLM qwen3_next.py: in_proj_qkvz (q, k, v, z) and in_proj_ba column-parallel,
            // conv1d over q, k, v sharded the same way, out_proj row-parallel
            let kd = key_heads * key_head_dim / tp;
            let vd = value_heads * value_head_dim / tp;
            let b = f.matrix_bytes(2 * kd + 2 * vd, h)
                + f.matrix_bytes(2 * value_heads / tp, h)
                + conv(2 * kd + vd, conv_kernel)
                + f.matrix_bytes(h, vd);
            (ComputeKind::LinearAttention, b)
        }
        Mixer::Mamba2 {
            heads,
            head_dim,
            groups,
            state,
            conv_kernel,
        } => {
            // vLLM mamba_mixer2.py: in_proj (z, x, B, C, dt) column-parallel with the groups
            // spread over the ranks (replicated when fewer than TP), conv1d over x, B, C,
            // out_proj row-parallel
            let il = heads * head_dim / tp;
            let gl = groups.div_ceil(tp).max(1);
            let b = f.matrix_bytes(2 * il + 2 * gl * state + heads / tp, h)
                + conv(il + 2 * gl * state, conv_kernel)
                + f.matrix_bytes(h, il);
            (ComputeKind::Mamba, b)
        }
        // replicated: every rank reads the whole matrix
        Mixer::Linear => (ComputeKind::Attention, f.matrix_bytes(h, h)),
    }
}

/// gate_up (column-parallel) + down (row-parallel) of one MLP of `inter` intermediate size.
pub(super) fn mlp_bytes(f: WeightFormat, h: u64, inter: u64, tp: u64) -> u64 {
    let il = inter / tp;
    f.matrix_bytes(2 * il, h) + f.matrix_bytes(h, il)
}

/// up (column-parallel) + down (row-parallel), no gate (Nemotron-H's relu2 MLP).
fn plain_mlp_bytes(f: WeightFormat, h: u64, inter: u64, tp: u64) -> u64 {
    let il = inter / tp;
    f.matrix_bytes(il, h) + f.matrix_bytes(h, il)
}

/// The compute ops of one feed-forward part, its routed experts touched as `experts` says (how
/// many receive how many tokens).
pub(super) fn ffn_ops(
    ffn: &Ffn,
    p: &Precision,
    h: u64,
    tp: u64,
    experts: &[TokenRow],
    l: u64,
) -> Vec<Op> {
    let op = |kind, weight_bytes| Op::Compute {
        kind,
        weight_bytes,
        layer: Some(l),
        token_histogram: None,
    };
    match *ffn {
        Ffn::Dense {
            intermediate,
            gated,
        } => {
            let b = if gated {
                mlp_bytes(p.dense_mlp, h, intermediate, tp)
            } else {
                plain_mlp_bytes(p.dense_mlp, h, intermediate, tp)
            };
            vec![op(ComputeKind::DenseMlp, b)]
        }
        Ffn::Linear => vec![op(ComputeKind::DenseMlp, p.dense_mlp.matrix_bytes(h, h))],
        Ffn::Moe {
            moe: m,
            dense_intermediate,
        } => {
            let mut v = Vec::new();
            if dense_intermediate > 0 {
                v.push(op(
                    ComputeKind::DenseMlp,
                    mlp_bytes(p.dense_mlp, h, dense_intermediate, tp),
                ));
            }
            let one = mlp_bytes(p.routed_experts, h, m.moe_intermediate, tp);
            v.push(op(
                ComputeKind::Router,
                WeightFormat::Bf16.matrix_bytes(m.routed_experts, h),
            ));
            let hist = TokenHistogram {
                unit_bytes: one,
                rows: experts.to_vec(),
            };
            v.push(Op::Compute {
                kind: ComputeKind::RoutedExperts,
                weight_bytes: hist.units() * one,
                layer: Some(l),
                token_histogram: Some(hist),
            });
            if m.shared_experts > 0 {
                v.push(op(
                    ComputeKind::SharedExperts,
                    m.shared_experts * mlp_bytes(p.shared_experts, h, m.shared_intermediate(), tp),
                ));
            }
            v
        }
    }
}

/// Parameters of the model as the config describes it, from the same per-layer shapes the
/// schedule streams (at TP=1, every expert counted): `(total, active per token)`, embedding
/// and LM head included (once when tied). `None` when the weights are not known.
pub fn parameter_counts(shape: &ModelShape) -> Option<(u64, u64)> {
    if !shape.weights_known {
        return None;
    }
    let p = Precision::uniform(WeightFormat::Bf16);
    let h = shape.hidden;
    let mut total = 0u64;
    let mut active = 0u64;
    for (l, b) in shape.layer_blocks().iter().enumerate() {
        if let Some(m) = &b.mixer {
            let w = mixer_weights(m, WeightFormat::Bf16, h, 1).1 / 2;
            total += w;
            active += w;
        }
        if let Some(f) = &b.ffn {
            let (all, k) = match f {
                Ffn::Moe { moe, .. } => (moe.routed_experts, moe.experts_per_token),
                _ => (0, 0),
            };
            let sum = |e: u64| -> u64 {
                let once = [TokenRow {
                    tokens: 1,
                    units: e,
                }];
                ffn_ops(f, &p, h, 1, &once, l as u64)
                    .iter()
                    .map(|o| match o {
                        Op::Compute { weight_bytes, .. } => weight_bytes / 2,
                        _ => 0,
                    })
                    .sum()
            };
            total += sum(all);
            active += sum(k);
        }
    }
    let table = shape.vocab * h;
    let head = if shape.tied_embeddings { 0 } else { table };
    // the embedding is a lookup: one row per token is active, the LM head is read whole
    Some((total + table + head, active + table))
}

/// The workload line a record carries, from the schedule it ran.
impl crate::record::RecordedWorkload {
    pub fn of(s: &Schedule) -> crate::record::RecordedWorkload {
        let first = |k: CollectiveKind| {
            s.collective_groups()
                .into_iter()
                .find(|g| g.kind == k)
                .map(|g| g.bytes_per_rank)
                .unwrap_or(0)
        };
        crate::record::RecordedWorkload {
            model: s.model.clone(),
            phase: s.phase,
            tp: s.tp,
            tokens: s.tokens,
            dtype: s.dtype,
            schedule_hash: s.hash(),
            n_all_reduce: s.count_collectives(CollectiveKind::AllReduce),
            n_all_gather: s.count_collectives(CollectiveKind::AllGather),
            all_reduce_bytes_per_rank: first(CollectiveKind::AllReduce),
            all_gather_bytes_per_rank: first(CollectiveKind::AllGather),
            weight_bytes_per_rank: s.weight_bytes(),
            facts: Box::new(crate::record::WorkloadFacts {
                concurrency: s.facts.concurrency,
                context: s.facts.context,
                kv: s.facts.kv,
                kv_bytes_per_rank: (s.facts.context > 0).then(|| s.kv_bytes()),
                weight_formats: s
                    .facts
                    .weight_formats
                    .iter()
                    .map(|(k, f)| (k.key().to_string(), f.label()))
                    .collect(),
                weights_override: s.facts.weights_override.clone(),
                cycle: None,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::build;
    use crate::model::presets::preset;

    fn kimi(tp: u64, tokens: u64) -> Schedule {
        let opt = ScheduleOptions {
            tp,
            tokens,
            ..Default::default()
        };
        build(&preset("kimi-k2.5").unwrap(), &opt, Phase::Verify).unwrap()
    }

    #[test]
    fn kimi_tp8_three_tokens() {
        let s = kimi(8, 3);
        let g = s.collective_groups();
        assert_eq!(g.len(), 2);
        assert_eq!(
            (g[0].kind, g[0].n, g[0].count, g[0].bytes_per_rank),
            (CollectiveKind::AllReduce, 123, 21504, 43008)
        );
        assert_eq!(
            (g[1].kind, g[1].n, g[1].bytes_per_rank, g[1].bytes_out),
            (CollectiveKind::AllGather, 1, 122880, 983040)
        );
    }

    #[test]
    fn kimi_tp8_four_tokens_and_no_embedding() {
        let g = kimi(8, 4).collective_groups();
        assert_eq!((g[0].bytes_per_rank, g[1].bytes_per_rank), (57344, 163840));
        let opt = ScheduleOptions {
            embedding_allreduce: false,
            ..Default::default()
        };
        let s = build(&preset("kimi-k2.5").unwrap(), &opt, Phase::Verify).unwrap();
        assert_eq!(s.count_collectives(CollectiveKind::AllReduce), 122);
    }

    #[test]
    fn collectives_alternate_with_compute_in_layer_order() {
        let s = kimi(8, 3);
        let sites: Vec<&str> = s
            .ops
            .iter()
            .filter_map(|o| match o {
                Op::Collective { site, .. } => Some(site.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            &sites[..5],
            &["embedding", "attention", "mlp", "attention", "mlp"]
        );
        assert_eq!(*sites.last().unwrap(), "logits");
        // first layer is dense in Kimi, the rest MoE
        let w = s.weight_bytes_by_kind();
        assert!(w[&ComputeKind::DenseMlp] > 0 && w[&ComputeKind::RoutedExperts] > 0);
        assert!(matches!(
            s.ops.last(),
            Some(Op::Collective {
                kind: CollectiveKind::AllGather,
                ..
            })
        ));
    }

    #[test]
    fn kimi_weight_bytes_per_rank_by_hand() {
        let s = kimi(8, 3);
        let w = s.weight_bytes_by_kind();
        // LM head: 7168 x 20480 bf16
        assert_eq!(w[&ComputeKind::LmHead], 7168 * 20480 * 2);
        // dense MLP (layer 0 only): 3 x 7168 x 2304 bf16
        assert_eq!(w[&ComputeKind::DenseMlp], 3 * 7168 * 2304 * 2);
        // MLA attention per layer: q_a 7168x1536 + q_b 1536x(8x192) + kv_a 7168x576
        // + kv_b 512x(8x256) + o 1024x7168, all bf16
        let per_layer = 2 * (7168 * 1536 + 1536 * 1536 + 7168 * 576 + 512 * 2048 + 1024 * 7168);
        assert_eq!(w[&ComputeKind::Attention], 61 * per_layer);
        // shared expert: 3 x 7168 x 256 bf16 in each of the 60 MoE layers
        assert_eq!(w[&ComputeKind::SharedExperts], 60 * 3 * 7168 * 256 * 2);
    }

    #[test]
    fn distinct_experts_bounds() {
        let m = preset("kimi-k2.5").unwrap().moe.unwrap();
        assert!((distinct_experts(&m, 1, Routing::Uniform) - 8.0).abs() < 1e-9);
        let u3 = distinct_experts(&m, 3, Routing::Uniform);
        assert!(u3 < 24.0 && u3 > 23.0, "{u3}");
        assert_eq!(distinct_experts(&m, 3, Routing::Worst), 24.0);
        assert_eq!(distinct_experts(&m, 100, Routing::Worst), 384.0);
    }

    #[test]
    fn experts_fed_their_own_tokens_at_32_tokens_by_hand() {
        // Uniform routing, T = 32 tokens, E = 384 experts, top-8: an expert is hit by one token
        // with p = 8/384 = 1/48, q = 47/48, independently per token; X ~ Binomial(32, 1/48).
        //   P(X = 0) = q^32 = exp(32 ln(47/48)) = exp(-0.673709) = 0.509818
        //   P(X = 1) = 32 p q^31 = (32/47) P(0)          = 0.347110
        //   P(X = 2) = P(1) x (31/2) x (p/q) = x 31/94   = 0.114474
        //   P(X = 3) = P(2) x (30/3) / 47                = 0.024356
        //   P(X = 4) = P(3) x (29/4) / 47                = 0.0037570
        //   P(X = 5) = P(4) x (28/5) / 47                = 0.00044764, P(X >= 6) = 0.0000466
        // Experts hit at least j times, 384 x P(X >= j), and rounded:
        //   j = 1: 384 x 0.490182 = 188.23 -> 188 (the expected distinct experts)
        //   j = 2: 188.23 - 133.29 = 54.94  -> 55
        //   j = 3: 54.94 - 43.96   = 10.98  -> 11
        //   j = 4: 10.98 - 9.35    = 1.63   -> 2
        //   j = 5: 1.63 - 1.44     = 0.19   -> 0
        // Pairs: 188 + 55 + 11 + 2 = 256 = 32 x 8, no adjustment. Experts hit exactly j times:
        // 188 - 55 = 133 by 1, 55 - 11 = 44 by 2, 11 - 2 = 9 by 3, 2 by 4 (expected 133.29,
        // 43.96, 9.35, 1.44).
        let m = preset("kimi-k2.5").unwrap().moe.unwrap();
        let rows: Vec<(u64, u64)> = expert_histogram(&m, 32, Routing::Uniform)
            .iter()
            .map(|r| (r.tokens, r.units))
            .collect();
        assert_eq!(rows, [(1, 133), (2, 44), (3, 9), (4, 2)]);
        // the schedule's routed-expert ops carry them, each expert's TP shard once: gate_up
        // (2 x 2048 / 8 x 7168) + down (7168 x 2048 / 8) weights in INT4 with one bf16 scale
        // per 32 (4.5 bits, 9/16 B per weight) = 3 x 7168 x 256 x 9/16 B
        let s = kimi(8, 32);
        let h = s.routed_histogram().unwrap();
        assert_eq!(h.unit_bytes, 3 * 7168 * 256 * 9 / 16);
        assert_eq!((h.units(), h.pairs()), (188, 256));
        assert_eq!(
            h.describe("experts"),
            "188 experts touched: 133 by 1 token, 44 by 2, 9 by 3, 2 by 4"
        );
        let w = s.weight_bytes_by_kind();
        assert_eq!(w[&ComputeKind::RoutedExperts], 60 * 188 * h.unit_bytes);
        // one token: its 8 experts, each once
        let one = expert_histogram(&m, 1, Routing::Uniform);
        assert_eq!(
            one,
            [TokenRow {
                tokens: 1,
                units: 8
            }]
        );
    }

    #[test]
    fn whole_experts_keep_every_token_expert_pair() {
        // at every token count the pairs are T x k exactly, the experts touched the expected
        // distinct experts within one, and the counts of each row positive
        let m = preset("kimi-k2.5").unwrap().moe.unwrap();
        for t in 1..=512u64 {
            let rows = expert_histogram(&m, t, Routing::Uniform);
            let h = TokenHistogram {
                unit_bytes: 1,
                rows,
            };
            assert_eq!(h.pairs(), t * 8, "T={t}");
            let d = distinct_experts(&m, t, Routing::Uniform);
            assert!(
                (h.units() as f64 - d).abs() <= 1.0,
                "T={t}: {} vs {d}",
                h.units()
            );
            assert!(h.units() <= 384 && h.rows.iter().all(|r| r.units > 0));
            assert!(h.rows.windows(2).all(|w| w[0].tokens < w[1].tokens));
        }
        // worst routing: 32 x 8 = 256 experts once each; 64 x 8 = 512 pairs over 384 experts:
        // 128 of them twice, 256 once
        let w32 = expert_histogram(&m, 32, Routing::Worst);
        assert_eq!(
            w32,
            [TokenRow {
                tokens: 1,
                units: 256
            }]
        );
        let w64: Vec<(u64, u64)> = expert_histogram(&m, 64, Routing::Worst)
            .iter()
            .map(|r| (r.tokens, r.units))
            .collect();
        assert_eq!(w64, [(1, 256), (2, 128)]);
    }

    #[test]
    fn bad_tp_and_tokens_are_usage_errors() {
        let k = preset("kimi-k2.5").unwrap();
        for (tp, tokens, needle) in [
            (3, 3, "attention heads"),
            (0, 3, "--tp"),
            (8, 0, "--tokens"),
        ] {
            let opt = ScheduleOptions {
                tp,
                tokens,
                ..Default::default()
            };
            let e = build(&k, &opt, Phase::Verify).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2);
            assert!(e.to_string().contains(needle), "{e}");
        }
        // Llama: 64 heads divide 16 but 8 KV heads and 16 do too; 128256 vocab / 16 ok;
        // 28672 / 16 ok. TP 128 divides nothing useful.
        let l = preset("llama-3.1-70b").unwrap();
        let opt = ScheduleOptions {
            tp: 128,
            ..Default::default()
        };
        assert!(build(&l, &opt, Phase::Verify).is_err());
    }

    #[test]
    fn decode_and_draft_phases() {
        let k = preset("kimi-k2.5").unwrap();
        let opt = ScheduleOptions::default();
        let d = build(&k, &opt, Phase::Decode).unwrap();
        assert_eq!(d.tokens, 1);
        assert_eq!(d.collective_groups()[0].bytes_per_rank, 7168 * 2);
        let dr = build(&k, &opt, Phase::Draft).unwrap();
        assert_eq!(dr.count_collectives(CollectiveKind::AllReduce), 3);
        assert_eq!(dr.count_collectives(CollectiveKind::AllGather), 1);
        let g = dr.collective_groups();
        assert_eq!(g.last().unwrap().bytes_per_rank, 32000 / 8 * 2);
    }

    #[test]
    fn a_kinds_key_is_its_json_name() {
        for k in [
            ComputeKind::Attention,
            ComputeKind::LinearAttention,
            ComputeKind::Mamba,
            ComputeKind::DenseMlp,
            ComputeKind::Router,
            ComputeKind::RoutedExperts,
            ComputeKind::SharedExperts,
            ComputeKind::DraftFc,
            ComputeKind::LmHead,
            ComputeKind::KvCache,
        ] {
            assert_eq!(serde_json::to_value(k).unwrap(), k.key());
        }
    }

    #[test]
    fn hash_is_stable_and_sensitive() {
        assert_eq!(kimi(8, 3).hash(), kimi(8, 3).hash());
        assert_ne!(kimi(8, 3).hash(), kimi(8, 4).hash());
    }
}
