//! The speculative cycle as engines run it, built once: the k draft forwards, the verify of
//! k+1 tokens per request (a tree's tokens where the engine verifies a tree), and beside them
//! the plain decode step of the same batch, each a [`Schedule`] of its own at the same TP.
//!
//! The draft forwards of one cycle, per drafter:
//! - EAGLE-3 head and MTP module: k forwards. The first runs over the k+1 tokens each request
//!   just verified, with the target's hidden states (EAGLE-3's fc applies only there): SGLang's
//!   `forward_draft_extend_after_decode` (speculative/eagle_worker.py, graphed by
//!   `EAGLEDraftExtendCudaGraphRunner` at k+1 tokens per request), vLLM's first forward of
//!   `propose` (v1/spec_decode/eagle.py, over the tokens the target just ran). The other k-1
//!   run over one token per request: SGLang's `draft_forward` loop (one graph for all of them,
//!   `EAGLEDraftCudaGraphRunner`), vLLM's loop over `num_speculative_tokens - 1`.
//! - Block drafter: one forward of k+1 positions per request (the last accepted token and the
//!   k it proposes), SGLang speculative/dflash_worker.py, vLLM v1/spec_decode/dflash.py.

use serde::Serialize;

use super::config::DraftKeys;
use super::draft::{DenseHead, DrafterKind, BLOCK_LAYERS_ASSUMED};
use super::forward::{assemble, embedding_op, formats_of, head_ops, target_forward, LayerCtx};
use super::schedule::{
    distinct_experts, expert_histogram, validate, ComputeKind, Op, Phase, Schedule, ScheduleOptions,
};
use super::shape::*;
use crate::error::usage;

/// What shapes a cycle: `--drafter`, `--draft-steps`, `--tree-tokens`, `--draft-config`
/// (read), `--draft-layers`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CycleSpec {
    pub drafter: DrafterKind,
    /// k: the tokens the drafter proposes per request per cycle.
    pub draft_steps: u64,
    /// The verify's tokens per request where the engine verifies a tree (SGLang
    /// `--speculative-num-draft-tokens`); `None`: a chain of k+1.
    pub tree_tokens: Option<u64>,
    /// The drafter's own config, read (an EAGLE-3 head's, a block drafter's).
    pub draft_config: Option<(ModelShape, DraftKeys)>,
    /// A block drafter's layers where no config says.
    pub draft_layers: Option<u64>,
}

/// One cycle of a batch, every part a schedule at the same TP and context.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cycle {
    pub(crate) drafter: DrafterKind,
    /// k.
    pub(crate) draft_steps: u64,
    /// Tokens per request the verify carries (k+1, or the tree's).
    pub(crate) verify_tokens: u64,
    /// Requests in the batch.
    pub(crate) concurrency: u64,
    /// The plain decode step of the same batch (one token per request), beside the cycle.
    pub(crate) decode: Schedule,
    /// The draft forwards of one cycle, in order.
    pub(crate) draft: Vec<Schedule>,
    /// The target's verify of `concurrency x verify_tokens` tokens.
    pub(crate) verify: Schedule,
    /// Where the drafter's shape comes from, what is assumed, and how the engines run it.
    pub(crate) drafter_notes: Vec<String>,
}

/// The distinct draft forwards of a cycle (or its job) in order and how many times each runs
/// in a row: the EAGLE-3 and MTP cycles' first forward once and the next one k-1 times (they
/// are alike), a block drafter's one forward once.
pub(crate) fn draft_groups(draft: &[Schedule]) -> Vec<(&Schedule, u64)> {
    let mut v: Vec<(&Schedule, u64)> = vec![];
    for d in draft {
        match v.last_mut() {
            Some((s, n)) if *s == d => *n += 1,
            _ => v.push((d, 1)),
        }
    }
    v
}

/// One forward of a cycle as a record's workload names it.
fn forward_workload(s: &Schedule) -> crate::record::ForwardWorkload {
    crate::record::ForwardWorkload {
        tokens: s.tokens,
        schedule_hash: s.hash(),
        n_collectives: s.n_collectives(),
        weight_bytes_per_rank: s.weight_bytes(),
        kv_bytes_per_rank: (s.facts.context > 0).then(|| s.kv_bytes()),
    }
}

impl crate::record::RecordedWorkload {
    /// The workload of a cycle record: the verify's, the phase `cycle`, and the cycle's other
    /// forwards.
    pub(crate) fn of_cycle(c: &Cycle) -> crate::record::RecordedWorkload {
        let mut w = crate::record::RecordedWorkload {
            phase: Phase::Cycle,
            ..crate::record::RecordedWorkload::of(&c.verify)
        };
        w.facts.cycle = Some(crate::record::CycleWorkload {
            drafter: c.drafter,
            draft_steps: c.draft_steps,
            verify_tokens: c.verify_tokens,
            draft: c.draft.iter().map(forward_workload).collect(),
            decode: forward_workload(&c.decode),
        });
        w
    }
}

/// The most draft steps a cycle takes (`--draft-steps`), as `breakeven` allows.
pub(crate) const MAX_DRAFT_STEPS: u64 = 64;

/// Builds the cycle of `shape` with the batch, context and formats of `opt` (its `tokens` is
/// not used: the verify carries k+1 tokens per request, or the tree's).
pub fn build(shape: &ModelShape, opt: &ScheduleOptions, spec: &CycleSpec) -> anyhow::Result<Cycle> {
    validate(shape, opt)?;
    let k = spec.draft_steps;
    if !(1..=MAX_DRAFT_STEPS).contains(&k) {
        crate::usage_bail!("--draft-steps {k}: give 1 to {MAX_DRAFT_STEPS} draft tokens per cycle");
    }
    let c = opt.concurrency.max(1);
    let verify_tokens = spec.tree_tokens.unwrap_or(k + 1);
    let (draft, mut notes) = match spec.drafter {
        DrafterKind::Mtp => mtp_forwards(shape, opt, k)?,
        kind => dense_forwards(shape, opt, spec, kind)?,
    };
    if let Some(t) = spec.tree_tokens {
        notes.push(format!(
            "the verify carries a tree of {t} tokens per request (--tree-tokens), the drafts a chain"
        ));
    }
    Ok(Cycle {
        drafter: spec.drafter,
        draft_steps: k,
        verify_tokens,
        concurrency: c,
        decode: target_forward(shape, opt, Phase::Decode, c),
        draft,
        verify: target_forward(shape, opt, Phase::Verify, c * verify_tokens),
        drafter_notes: notes,
    })
}

/// The draft forward of `ops` over `tokens` tokens as a schedule of drafter `kind`.
fn draft_schedule(
    shape: &ModelShape,
    opt: &ScheduleOptions,
    kind: DrafterKind,
    tokens: u64,
    experts: f64,
    ops: Vec<Op>,
    p: &Precision,
) -> Schedule {
    let formats = formats_of(&ops, p);
    let mut s = assemble(shape, opt, Phase::Draft, tokens, experts, ops, formats);
    s.facts.drafter = Some(kind);
    s
}

/// The token counts of the k draft forwards of an EAGLE-3 or MTP cycle: the first over k+1
/// tokens per request, the others over one.
fn chain_tokens(c: u64, k: u64) -> Vec<u64> {
    (0..k)
        .map(|i| if i == 0 { c * (k + 1) } else { c })
        .collect()
}

/// An EAGLE-3 head's k forwards or a block drafter's one, and the notes on its shape.
fn dense_forwards(
    shape: &ModelShape,
    opt: &ScheduleOptions,
    spec: &CycleSpec,
    kind: DrafterKind,
) -> anyhow::Result<(Vec<Schedule>, Vec<String>)> {
    let c = opt.concurrency.max(1);
    let k = spec.draft_steps;
    let head = match (&spec.draft_config, kind) {
        (Some((d, keys)), _) => DenseHead::from_config(kind, d, keys, shape, opt)?,
        (None, DrafterKind::Block) => {
            let layers = spec.draft_layers.unwrap_or(BLOCK_LAYERS_ASSUMED);
            DenseHead::block_assumed(shape, opt, layers)
        }
        (None, _) => {
            super::schedule::check_divides(
                opt.tp,
                "draft vocabulary (--draft-vocab)",
                opt.draft_vocab,
            )?;
            DenseHead::eagle3_assumed(shape, opt)
        }
    };
    let mut notes = vec![format!("{}: {}", kind.label(), head.source)];
    if let Some((d, _)) = &spec.draft_config {
        notes.extend(d.warnings.iter().map(|w| format!("draft config: {w}")));
    }
    let tokens = match kind {
        DrafterKind::Block => {
            notes.push(format!(
                "one forward of k+1 = {} positions per request proposes the block (SGLang speculative/dflash_worker.py, vLLM v1/spec_decode/dflash.py); its fc reads the target's hidden states",
                k + 1
            ));
            vec![c * (k + 1)]
        }
        _ => {
            notes.push(format!(
                "{k} forwards: the first over the k+1 = {} tokens of each request with the target's hidden states (its fc; SGLang eagle_worker.py forward_draft_extend_after_decode, vLLM v1/spec_decode/eagle.py propose), then {} over one token each",
                k + 1,
                k - 1
            ));
            chain_tokens(c, k)
        }
    };
    let draft = tokens
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            let ops = head.forward(opt, t, i == 0);
            draft_schedule(shape, opt, kind, t, 0.0, ops, &head.precision)
        })
        .collect();
    Ok((draft, notes))
}

/// The MTP module's k forwards: each the target's embedding, eh_proj, one decoder layer of
/// the target's last layer's shape (experts touched by that forward's tokens), the target's
/// LM head.
fn mtp_forwards(
    shape: &ModelShape,
    opt: &ScheduleOptions,
    k: u64,
) -> anyhow::Result<(Vec<Schedule>, Vec<String>)> {
    let Some(mtp) = shape.mtp else {
        return Err(usage(format!(
            "--drafter mtp: {} has no MTP module (num_nextn_predict_layers is 0 or absent in its config): give --drafter eagle3 or block",
            shape.name
        )));
    };
    let Some(block) = shape.layer_blocks().last().copied() else {
        return Err(usage("--drafter mtp: the model has no layers"));
    };
    let c = opt.concurrency.max(1);
    let h = shape.hidden;
    let l = shape.layers;
    let p = Precision {
        lm_head: opt.weights.apply(shape.precision).lm_head,
        ..opt.weights.apply(mtp.precision)
    };
    let moe = match block.ffn {
        Some(Ffn::Moe { moe, .. }) => Some(moe),
        _ => None,
    };
    let draft = chain_tokens(c, k)
        .into_iter()
        .map(|t| {
            let experts = moe.map_or(0.0, |m| distinct_experts(&m, t, opt.routing));
            let mut ops = Vec::new();
            embedding_op(opt, t * h, &mut ops);
            if shape.weights_known {
                ops.push(Op::Compute {
                    kind: ComputeKind::DraftFc,
                    weight_bytes: mtp.eh_proj.matrix_bytes(h, 2 * h),
                    layer: Some(l),
                    token_histogram: None,
                });
            }
            let ctx = LayerCtx {
                precision: p,
                known: shape.weights_known,
                hidden: h,
                act: t * h,
                routed: moe
                    .map(|m| expert_histogram(&m, t, opt.routing))
                    .unwrap_or_default(),
            };
            ctx.block_ops(&block, opt, l, &mut ops);
            head_ops(
                shape.weights_known,
                p.lm_head,
                shape.vocab,
                h,
                t,
                opt,
                &mut ops,
            );
            draft_schedule(shape, opt, DrafterKind::Mtp, t, experts, ops, &p)
        })
        .collect();
    let notes = vec![
        format!(
            "MTP module: num_nextn_predict_layers {}; each forward one decoder layer of the target's last layer's shape (layer {l}: attention {}, routed experts {}), eh_proj 2H -> H bf16 (replicated), the target's embedding and LM head (SGLang models/deepseek_nextn.py, vLLM model_executor/models/deepseek_mtp.py)",
            mtp.layers,
            p.attention.label(),
            p.routed_experts.label()
        ),
        format!(
            "{k} forwards: the first over the k+1 = {} tokens of each request with the target's hidden states, then {} over one token each (SGLang eagle_worker.py with the NextN model, vLLM v1/spec_decode/eagle.py for deepseek_mtp)",
            k + 1,
            k - 1
        ),
    ];
    Ok((draft, notes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::presets::preset;
    use crate::model::CollectiveKind;

    fn opt(c: u64, context: u64) -> ScheduleOptions {
        ScheduleOptions {
            concurrency: c,
            context,
            ..Default::default()
        }
    }

    fn spec(drafter: DrafterKind, k: u64) -> CycleSpec {
        CycleSpec {
            drafter,
            draft_steps: k,
            ..Default::default()
        }
    }

    /// Kimi-K2.5 (384 experts, top-8) at C = 8: the decode carries 8 tokens, the verify of
    /// k + 1 = 4 tokens per request 32. Under uniform routing a token misses a given expert
    /// with probability 376/384, so T tokens touch 384 (1 - (376/384)^T) distinct experts:
    ///   T = 8:  (376/384)^8  = 0.844992...  -> 384 x 0.155007... = 59.5228...
    ///   T = 32: (376/384)^32 = 0.509814...  -> 384 x 0.490185... = 188.2314...
    /// (python3: 384*(1-(376/384)**8) = 59.52279..., 384*(1-(376/384)**32) = 188.23137...)
    #[test]
    fn experts_touched_at_concurrency_8_by_hand() {
        let k = preset("kimi-k2.5").unwrap();
        let c = build(&k, &opt(8, 0), &spec(DrafterKind::Eagle3, 3)).unwrap();
        assert_eq!((c.decode.tokens, c.verify.tokens), (8, 32));
        assert!(
            (c.decode.experts_per_layer - 59.52280).abs() < 1e-4,
            "{}",
            c.decode.experts_per_layer
        );
        assert!(
            (c.verify.experts_per_layer - 188.23138).abs() < 1e-4,
            "{}",
            c.verify.experts_per_layer
        );
        // the collectives carry every request's tokens: 32 x 7168 bf16 per all-reduce
        let g = c.verify.collective_groups();
        assert_eq!(g[0].bytes_per_rank, 32 * 7168 * 2);
    }

    #[test]
    fn eagle3_runs_k_forwards_the_first_over_the_verified_tokens() {
        let k = preset("kimi-k2.5").unwrap();
        let c = build(&k, &opt(8, 0), &spec(DrafterKind::Eagle3, 3)).unwrap();
        let tokens: Vec<u64> = c.draft.iter().map(|d| d.tokens).collect();
        assert_eq!(tokens, [32, 8, 8]);
        // the fc only in the first
        let fc = |s: &Schedule| s.weight_bytes_by_kind().contains_key(&ComputeKind::DraftFc);
        assert_eq!(
            c.draft.iter().map(fc).collect::<Vec<_>>(),
            [true, false, false]
        );
        assert_eq!(
            draft_groups(&c.draft)
                .iter()
                .map(|g| g.1)
                .collect::<Vec<_>>(),
            [1, 2]
        );
        for d in &c.draft {
            assert_eq!(d.count_collectives(CollectiveKind::AllReduce), 3);
            assert_eq!(d.facts.drafter, Some(DrafterKind::Eagle3));
        }
    }

    #[test]
    fn mtp_is_one_more_target_layer_and_kimi_has_none() {
        let d = preset("deepseek-v3").unwrap();
        let c = build(&d, &opt(1, 0), &spec(DrafterKind::Mtp, 3)).unwrap();
        let first = &c.draft[0];
        // embedding, attention, MoE all-reduces; the logits of the full vocabulary / 8
        assert_eq!(first.count_collectives(CollectiveKind::AllReduce), 3);
        let g = first.collective_groups();
        assert_eq!(g.last().unwrap().bytes_per_rank, 4 * 129_280 / 8 * 2);
        // one MoE layer reading the experts 4 tokens touch, in the checkpoint's fp8
        let w = first.weight_bytes_by_kind();
        let v = c.verify.weight_bytes_by_kind();
        let per_layer_attention = v[&ComputeKind::Attention] / 61;
        assert_eq!(w[&ComputeKind::Attention], per_layer_attention);
        assert_eq!(w[&ComputeKind::DraftFc], 2 * 7168 * 14336);
        assert_eq!(
            first.facts.weight_formats[&ComputeKind::RoutedExperts],
            WeightFormat::Fp8Block { block: 128 }
        );
        let e = build(
            &preset("kimi-k2.5").unwrap(),
            &opt(1, 0),
            &spec(DrafterKind::Mtp, 3),
        )
        .unwrap_err();
        assert!(e.to_string().contains("no MTP module"), "{e}");
        assert_eq!(crate::error::exit_code(&e), 2);
    }

    #[test]
    fn a_block_drafter_proposes_k_tokens_in_one_forward() {
        let k = preset("kimi-k2.5").unwrap();
        let c = build(&k, &opt(8, 0), &spec(DrafterKind::Block, 7)).unwrap();
        assert_eq!(c.draft.len(), 1);
        assert_eq!((c.draft[0].tokens, c.verify.tokens), (64, 64));
        assert!(c.drafter_notes.iter().any(|n| n.contains("assumed")));
    }

    #[test]
    fn the_context_adds_kv_reads_to_every_forward() {
        // Kimi-K2.5 at C = 8 and 2048 tokens of context: per MLA layer and rank
        // 8 x 2048 x (512 + 64) x 2 B = 18,874,368 B; 61 layers in the decode and the verify
        let k = preset("kimi-k2.5").unwrap();
        let c = build(&k, &opt(8, 2048), &spec(DrafterKind::Eagle3, 3)).unwrap();
        assert_eq!(c.decode.kv_bytes(), 61 * 18_874_368);
        assert_eq!(c.verify.kv_bytes(), 61 * 18_874_368);
        // the assumed head: 8 KV heads of 128 on 8 ranks: 1 head, K and V, bf16 = 512 B per
        // token: 8 x 2048 x 512
        assert_eq!(c.draft[1].kv_bytes(), 8 * 2048 * 512);
        let none = build(&k, &opt(8, 0), &spec(DrafterKind::Eagle3, 3)).unwrap();
        assert_eq!(none.verify.kv_bytes(), 0);
        assert_eq!(
            c.verify.weight_bytes(),
            none.verify.weight_bytes(),
            "the KV cache is not weights"
        );
    }
}
