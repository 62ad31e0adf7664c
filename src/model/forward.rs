//! The pieces every forward is built of, in order: the embedding's all-reduce, each layer's
//! weights, KV cache and all-reduces, the LM head and the logits' all-gather; and a forward's
//! ops with what it was built for as a [`Schedule`]. The target's forward is here
//! ([`target_forward`]); a drafter's is in [`super::draft`] and [`super::cycle`].

use std::collections::BTreeMap;

use super::schedule::{
    distinct_experts, expert_histogram, ffn_ops, mixer_weights, CollectiveKind, ComputeKind,
    ConfigReading, DType, Logits, Op, Phase, Schedule, ScheduleFacts, ScheduleOptions, TokenRow,
};
use super::shape::*;

pub(super) fn collective(
    kind: CollectiveKind,
    dtype: DType,
    count: u64,
    site: &str,
    layer: Option<u64>,
) -> Op {
    Op::Collective {
        kind,
        dtype,
        count,
        bytes_per_rank: count * dtype.size(),
        site: site.into(),
        layer,
    }
}

/// The target's forward of `tokens` tokens (all requests together): its embedding, every
/// layer, its LM head and logits.
pub(super) fn target_forward(
    shape: &ModelShape,
    opt: &ScheduleOptions,
    phase: Phase,
    tokens: u64,
) -> Schedule {
    let h = shape.hidden;
    let act = tokens * h;
    let p = opt.weights.apply(shape.precision);
    let moe = shape.first_moe();
    let experts = moe
        .map(|m| distinct_experts(&m, tokens, opt.routing))
        .unwrap_or(0.0);
    let mut ops = Vec::new();
    embedding_op(opt, act, &mut ops);
    let layer = LayerCtx {
        precision: p,
        known: shape.weights_known,
        hidden: h,
        act,
        routed: moe
            .map(|m| expert_histogram(&m, tokens, opt.routing))
            .unwrap_or_default(),
    };
    for (l, b) in shape.layer_blocks().iter().enumerate() {
        layer.block_ops(b, opt, l as u64, &mut ops);
    }
    head_ops(
        shape.weights_known,
        p.lm_head,
        shape.vocab,
        h,
        tokens,
        opt,
        &mut ops,
    );
    let formats = formats_of(&ops, &p);
    assemble(shape, opt, phase, tokens, experts, ops, formats)
}

/// A forward's ops and facts as a schedule of `shape`.
pub(super) fn assemble(
    shape: &ModelShape,
    opt: &ScheduleOptions,
    phase: Phase,
    tokens: u64,
    experts: f64,
    ops: Vec<Op>,
    weight_formats: BTreeMap<ComputeKind, WeightFormat>,
) -> Schedule {
    Schedule {
        model: shape.name.clone(),
        phase,
        tp: opt.tp,
        tokens,
        dtype: opt.dtype,
        routing: opt.routing,
        experts_per_layer: experts,
        ops,
        config_reading: (shape.read_as.is_some() || !shape.warnings.is_empty()).then(|| {
            Box::new(ConfigReading {
                read_as: shape.read_as.clone(),
                warnings: shape.warnings.clone(),
            })
        }),
        facts: Box::new(ScheduleFacts {
            concurrency: opt.concurrency.max(1),
            context: opt.context,
            kv: opt.kv_facts(),
            weight_formats,
            weights_override: opt.weights.describe(),
            drafter: None,
        }),
    }
}

/// The storage format of each kind of weights among `ops`, from the precision they were
/// built with: the fc of a drafter (EAGLE-3's fc, an MTP module's eh_proj) and the router
/// are plain bf16 linears in every checkpoint the engines load.
pub(super) fn formats_of(ops: &[Op], p: &Precision) -> BTreeMap<ComputeKind, WeightFormat> {
    let mut m = BTreeMap::new();
    for op in ops {
        let Op::Compute { kind, .. } = op else {
            continue;
        };
        let f = match kind {
            ComputeKind::Attention | ComputeKind::LinearAttention | ComputeKind::Mamba => {
                p.attention
            }
            ComputeKind::DenseMlp => p.dense_mlp,
            ComputeKind::RoutedExperts => p.routed_experts,
            ComputeKind::SharedExperts => p.shared_experts,
            ComputeKind::LmHead => p.lm_head,
            ComputeKind::Router | ComputeKind::DraftFc => WeightFormat::Bf16,
            ComputeKind::KvCache => continue,
        };
        m.insert(*kind, f);
    }
    m
}

/// The vocab-parallel embedding's all-reduce of `act` elements, unless the engine skips it.
pub(super) fn embedding_op(opt: &ScheduleOptions, act: u64, ops: &mut Vec<Op>) {
    if opt.embedding_allreduce {
        ops.push(collective(
            CollectiveKind::AllReduce,
            opt.dtype,
            act,
            "embedding",
            None,
        ));
    }
}

/// The LM head's weights (`vocab / tp` rows in `format`, when the weights are known) and the
/// all-gather of the logits of `tokens` tokens.
pub(super) fn head_ops(
    known: bool,
    format: WeightFormat,
    vocab: u64,
    h: u64,
    tokens: u64,
    opt: &ScheduleOptions,
    ops: &mut Vec<Op>,
) {
    if known {
        ops.push(Op::Compute {
            kind: ComputeKind::LmHead,
            weight_bytes: format.matrix_bytes(vocab / opt.tp, h),
            layer: None,
            token_histogram: None,
        });
    }
    if opt.logits == Logits::Gather {
        let c = tokens * vocab / opt.tp;
        ops.push(collective(
            CollectiveKind::AllGather,
            opt.dtype,
            c,
            "logits",
            None,
        ));
    }
}

/// What every decoder layer of one forward shares: the formats, whether the weights are
/// known, the hidden size, the elements of each all-reduce, the routed experts each MoE layer
/// reads (how many experts receive how many tokens).
pub(super) struct LayerCtx {
    pub(crate) precision: Precision,
    pub(crate) known: bool,
    pub(crate) hidden: u64,
    pub(crate) act: u64,
    pub(crate) routed: Vec<TokenRow>,
}

impl LayerCtx {
    /// Layer `l`'s ops onto `ops`: its mixer's weights (when known), the KV cache that mixer
    /// reads (with a context), the all-reduce after it; its FFN's weights and the all-reduce
    /// after it.
    pub(super) fn block_ops(&self, b: &Block, opt: &ScheduleOptions, l: u64, ops: &mut Vec<Op>) {
        let (tp, h, dt) = (opt.tp, self.hidden, opt.dtype);
        if let Some(m) = &b.mixer {
            if self.known {
                let (kind, weight_bytes) = mixer_weights(m, self.precision.attention, h, tp);
                ops.push(Op::Compute {
                    kind,
                    weight_bytes,
                    layer: Some(l),
                    token_histogram: None,
                });
                kv_op(m, opt, l, ops);
            }
            // a replicated linear in place of attention needs no reduction
            if *m != Mixer::Linear {
                ops.push(collective(
                    CollectiveKind::AllReduce,
                    dt,
                    self.act,
                    "attention",
                    Some(l),
                ));
            }
        }
        if let Some(f) = &b.ffn {
            if self.known {
                ops.extend(ffn_ops(f, &self.precision, h, tp, &self.routed, l));
            }
            if *f != Ffn::Linear {
                ops.push(collective(
                    CollectiveKind::AllReduce,
                    dt,
                    self.act,
                    "mlp",
                    Some(l),
                ));
            }
        }
    }
}

/// The KV cache (or linear state) mixer `m` of layer `l` reads, with a context.
pub(super) fn kv_op(m: &Mixer, opt: &ScheduleOptions, l: u64, ops: &mut Vec<Op>) {
    if opt.context == 0 {
        return;
    }
    let b = super::kv::mixer_kv_bytes(m, opt.tp, opt.concurrency.max(1), opt.context, opt.kv);
    if b > 0 {
        ops.push(Op::Compute {
            kind: ComputeKind::KvCache,
            weight_bytes: b,
            layer: Some(l),
            token_histogram: None,
        });
    }
}
