//! The drafters of the speculative cycle and the ops of one draft forward of each, on the TP
//! group the target runs on (SGLang's and vLLM's drafters shard over the same TP group as the
//! target: their linears are the same vocab-, column- and row-parallel layers, so a draft
//! forward all-reduces after its embedding, after each attention and each MLP, and all-gathers
//! its logits, as [`super::engine`] names for each engine).
//!
//! - EAGLE-3 head (SGLang models/llama_eagle3.py, vLLM model_executor/models/llama_eagle3.py):
//!   its own vocab-parallel embedding, `fc` (a plain, replicated `3H -> H` linear over three of
//!   the target's hidden states, applied only where the forward is given the target's hidden
//!   states: the first draft forward of a cycle), one Llama decoder layer whose qkv projection
//!   reads `2H` (the embedding and the hidden state concatenated), its own LM head of
//!   `draft_vocab_size` rows.
//! - MTP module of the target (`num_nextn_predict_layers`; SGLang models/deepseek_nextn.py,
//!   vLLM model_executor/models/deepseek_mtp.py): the target's embedding, `eh_proj` (a plain
//!   `2H -> H` linear, every forward), one full decoder layer of the target's shape (MoE
//!   included), the target's LM head. Built in [`super::cycle`] from the target's own layer.
//! - Block drafter (DFlash: SGLang models/dflash.py and speculative/dflash_worker.py, vLLM
//!   model_executor/models/qwen3_dflash.py and v1/spec_decode/dflash.py): a few dense decoder
//!   layers at the target's hidden size, `fc` over the target layers' hidden states
//!   (replicated), the target's embedding and LM head; one forward proposes the whole block.

use super::forward::{collective, embedding_op, head_ops, kv_op};
use super::schedule::{
    check_divides, gqa_bytes, mlp_bytes, CollectiveKind, ComputeKind, Op, ScheduleOptions,
};
use super::shape::*;

pub(crate) use crate::record::vocab::DrafterKind;

impl DrafterKind {
    /// How plans and tables name it.
    pub(crate) fn label(self) -> &'static str {
        match self {
            DrafterKind::Eagle3 => "EAGLE-3 head",
            DrafterKind::Mtp => "MTP module",
            DrafterKind::Block => "block drafter",
        }
    }

    /// How a plan names one forward of it.
    pub(crate) fn forward_word(self) -> &'static str {
        match self {
            DrafterKind::Eagle3 => "EAGLE-3 draft forward",
            DrafterKind::Mtp => "MTP draft forward",
            DrafterKind::Block => "block draft forward",
        }
    }
}

/// Layers a block drafter has when neither `--draft-config` nor `--draft-layers` says: the
/// published DFlash drafters have five or six (z-lab's Qwen3-8B-DFlash-b16: 5).
pub(crate) const BLOCK_LAYERS_ASSUMED: u64 = 5;

/// The shape of a dense drafter: an EAGLE-3 head or a block drafter's layers, each a
/// Llama-style decoder layer (GQA attention, gated MLP) at the target's hidden size.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DenseHead {
    pub(crate) kind: DrafterKind,
    pub(crate) layers: u64,
    pub(crate) heads: u64,
    pub(crate) kv_heads: u64,
    pub(crate) head_dim: u64,
    pub(crate) intermediate: u64,
    pub(crate) hidden: u64,
    /// Input width of the first layer's qkv projection: `2H` for EAGLE-3's midlayer, `H`
    /// for a block drafter.
    pub(crate) qkv_in: u64,
    /// Input width of the replicated fc over the target's hidden states.
    pub(crate) fc_in: u64,
    /// Rows of the LM head (a draft vocabulary, or the target's).
    pub(crate) vocab: u64,
    /// The formats of its attention, MLP and LM head.
    pub(crate) precision: Precision,
    /// Whether its weights are known (an assumed head of a target whose weights are unknown:
    /// collectives only).
    pub(crate) known: bool,
    /// Where its sizes come from: the draft config, or what was assumed.
    pub(crate) source: String,
}

impl DenseHead {
    /// The EAGLE-3 head `--phase draft` has always planned without a draft config: the
    /// target's attention heads, 8 KV heads of 128, its qkv over H, the target's dense MLP size
    /// (4H without one, rounded down to a multiple of TP), `--draft-vocab` rows, bf16. (A head
    /// read from its config reads 2H in its qkv, as llama_eagle3.py builds the midlayer; the
    /// assumed one stays the schedule committed measurements of `--phase draft` replayed.)
    pub(crate) fn eagle3_assumed(shape: &ModelShape, opt: &ScheduleOptions) -> DenseHead {
        let h = shape.hidden;
        let heads = shape.attention.heads();
        let inter = if shape.intermediate > 0 {
            shape.intermediate
        } else {
            4 * h
        };
        DenseHead {
            kind: DrafterKind::Eagle3,
            layers: 1,
            heads,
            kv_heads: 8.min(heads).max(1),
            head_dim: 128,
            intermediate: inter - inter % opt.tp,
            hidden: h,
            qkv_in: h,
            fc_in: 3 * h,
            vocab: opt.draft_vocab,
            precision: Precision::uniform(WeightFormat::Bf16),
            known: shape.weights_known,
            source: format!(
                "assumed (no --draft-config), the head --phase draft plans: one layer of {heads} heads, 8 KV heads of 128, its qkv over H (llama_eagle3.py's midlayer reads 2H: give the head's config for its own shape), MLP {inter}, {} draft tokens (--draft-vocab), bf16",
                opt.draft_vocab
            ),
        }
    }

    /// A block drafter without a config: `layers` dense layers shaped like the assumed
    /// EAGLE-3 layer, fc over as many target layers, the target's vocabulary and LM head.
    pub(crate) fn block_assumed(
        shape: &ModelShape,
        opt: &ScheduleOptions,
        layers: u64,
    ) -> DenseHead {
        let e = DenseHead::eagle3_assumed(shape, opt);
        let target = opt.weights.apply(shape.precision);
        DenseHead {
            kind: DrafterKind::Block,
            layers,
            qkv_in: shape.hidden,
            fc_in: layers * shape.hidden,
            vocab: shape.vocab,
            precision: Precision {
                lm_head: target.lm_head,
                ..e.precision
            },
            source: format!(
                "assumed (no --draft-config): {layers} layers (--draft-layers) of {} heads, 8 KV heads of 128, MLP {}, bf16; fc over {layers} target layers; the target's embedding and LM head",
                e.heads, e.intermediate
            ),
            ..e
        }
    }

    /// The drafter `kind` read from its config (`draft`, with `keys`), for `target`.
    pub(crate) fn from_config(
        kind: DrafterKind,
        draft: &ModelShape,
        keys: &super::config::DraftKeys,
        target: &ModelShape,
        opt: &ScheduleOptions,
    ) -> anyhow::Result<DenseHead> {
        let (heads, kv_heads, head_dim) = match draft.attention {
            Attention::Gqa {
                heads,
                kv_heads,
                head_dim,
                ..
            } => (heads, kv_heads, head_dim),
            _ => crate::usage_bail!(
                "--draft-config '{}': a dense drafter's layers have grouped-query attention (num_key_value_heads); this config has another kind",
                draft.name
            ),
        };
        check_divides(opt.tp, "draft attention heads", heads)?;
        check_divides(opt.tp, "draft MLP size", draft.intermediate)?;
        let h = draft.hidden;
        let target_h = keys.target_hidden.unwrap_or(target.hidden);
        let target_p = opt.weights.apply(target.precision);
        let (qkv_in, fc_in, vocab, lm_head) = match kind {
            // llama_eagle3.py: fc over 3 target hidden states; its own head of
            // draft_vocab_size rows, else the target's (loaded from it)
            DrafterKind::Eagle3 => match keys.draft_vocab {
                Some(v) => (2 * h, 3 * target_h, v, draft.precision.lm_head),
                None => (2 * h, 3 * target_h, target.vocab, target_p.lm_head),
            },
            _ => {
                let n = keys.target_layers.unwrap_or(draft.layers);
                (h, n * target_h, target.vocab, target_p.lm_head)
            }
        };
        check_divides(opt.tp, "draft vocabulary", vocab)?;
        Ok(DenseHead {
            kind,
            layers: draft.layers,
            heads,
            kv_heads,
            head_dim,
            intermediate: draft.intermediate,
            hidden: h,
            qkv_in,
            fc_in,
            vocab,
            precision: Precision {
                lm_head,
                ..draft.precision
            },
            known: draft.weights_known,
            source: format!("--draft-config {}", draft.name),
        })
    }

    /// One forward of `tokens` tokens (every request's): the embedding's all-reduce, the fc
    /// over the target's hidden states (`with_fc`), each layer (weights, KV cache with a
    /// context, the two all-reduces), the LM head and the logits' all-gather.
    pub(crate) fn forward(&self, opt: &ScheduleOptions, tokens: u64, with_fc: bool) -> Vec<Op> {
        let (tp, h, dt) = (opt.tp, self.hidden, opt.dtype);
        let act = tokens * h;
        let mut ops = Vec::new();
        embedding_op(opt, act, &mut ops);
        if self.known && with_fc {
            ops.push(Op::Compute {
                kind: ComputeKind::DraftFc,
                weight_bytes: WeightFormat::Bf16.matrix_bytes(h, self.fc_in),
                layer: Some(0),
                token_histogram: None,
            });
        }
        let ar = |site: &str, l: u64| collective(CollectiveKind::AllReduce, dt, act, site, Some(l));
        let mixer = Mixer::Attention(Attention::gqa(self.heads, self.kv_heads, self.head_dim));
        for l in 0..self.layers {
            if self.known {
                let qkv_in = if l == 0 { self.qkv_in } else { h };
                let f = self.precision.attention;
                ops.push(Op::Compute {
                    kind: ComputeKind::Attention,
                    weight_bytes: gqa_bytes(
                        f,
                        qkv_in,
                        h,
                        self.heads,
                        self.kv_heads,
                        self.head_dim,
                        tp,
                    ),
                    layer: Some(l),
                    token_histogram: None,
                });
                kv_op(&mixer, opt, l, &mut ops);
            }
            ops.push(ar("attention", l));
            if self.known {
                ops.push(Op::Compute {
                    kind: ComputeKind::DenseMlp,
                    weight_bytes: mlp_bytes(self.precision.dense_mlp, h, self.intermediate, tp),
                    layer: Some(l),
                    token_histogram: None,
                });
            }
            ops.push(ar("mlp", l));
        }
        head_ops(
            self.known,
            self.precision.lm_head,
            self.vocab,
            h,
            tokens,
            opt,
            &mut ops,
        );
        ops
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::presets::preset;

    #[test]
    fn the_assumed_eagle3_head_by_hand() {
        // Kimi-K2.5 at TP 8, one token: fc 7168 x 21504 bf16 (replicated); qkv over H (the
        // assumed head): (64/8 x 128 + 1 x 2 x 128) = 1280 rows x 7168, o 7168 x 1024; MLP
        // 3 x 7168 x 2304; LM head 4000 x 7168 (32,000 / 8 rows)
        let k = preset("kimi-k2.5").unwrap();
        let opt = ScheduleOptions::default();
        let head = DenseHead::eagle3_assumed(&k, &opt);
        let ops = head.forward(&opt, 1, true);
        let w = |kind| -> u64 {
            ops.iter()
                .filter_map(|o| match o {
                    Op::Compute {
                        kind: k,
                        weight_bytes,
                        ..
                    } if *k == kind => Some(*weight_bytes),
                    _ => None,
                })
                .sum()
        };
        assert_eq!(w(ComputeKind::DraftFc), 2 * 7168 * 21504);
        assert_eq!(w(ComputeKind::Attention), 2 * (1280 * 7168 + 7168 * 1024));
        assert_eq!(w(ComputeKind::DenseMlp), 2 * 3 * 7168 * 2304);
        assert_eq!(w(ComputeKind::LmHead), 2 * 4000 * 7168);
        // without the fc (a later draft step): the same collectives, no fc weights
        let later = head.forward(&opt, 1, false);
        assert_eq!(later.len(), ops.len() - 1);
        let colls = |o: &[Op]| {
            o.iter()
                .filter(|x| matches!(x, Op::Collective { .. }))
                .count()
        };
        assert_eq!((colls(&ops), colls(&later)), (4, 4));
    }

    #[test]
    fn a_block_drafter_has_its_layers_and_the_targets_head() {
        let k = preset("kimi-k2.5").unwrap();
        let opt = ScheduleOptions::default();
        let b = DenseHead::block_assumed(&k, &opt, 5);
        let ops = b.forward(&opt, 32, true);
        // embedding + 2 per layer all-reduces, the logits of the target's vocabulary
        let ar = ops
            .iter()
            .filter(|o| {
                matches!(
                    o,
                    Op::Collective {
                        kind: CollectiveKind::AllReduce,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(ar, 1 + 2 * 5);
        let Some(Op::Collective { count, .. }) = ops.last() else {
            panic!("the logits last")
        };
        assert_eq!(*count, 32 * 163_840 / 8);
        assert!(b.source.contains("assumed"));
    }
}
