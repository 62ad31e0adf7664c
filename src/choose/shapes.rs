//! The distinct collective shapes of the speculative cycle at the concurrencies asked: the
//! decode step of C requests, the verify of C(k+1) tokens, the EAGLE-3 draft step, and the
//! logits all-gather of each, taken from the schedules [`Workload::schedule`] builds.
//!
//! A decode step of C requests is the target's forward of C tokens: the schedule of the verify
//! phase at C tokens (the decode phase is one token today). The draft step's schedule is built
//! for one token; every collective of it carries one token's activations or logits, so at C
//! requests each is C times as large (the all-reduces of C x hidden elements, the all-gather of
//! C x draft vocabulary / tp). Shapes are keyed by (collective, dtype, bytes per rank): the
//! decode of 8 requests and the draft step of 8 requests share their all-reduce.

use serde::{Deserialize, Serialize};

use crate::model::{CollectiveKind, DType, Phase, Schedule};
use crate::request::Workload;

/// Where a shape occurs in the cycle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Use {
    /// `decode`, `verify` or `draft`.
    pub(crate) forward: String,
    /// Requests in flight (`--concurrency`).
    pub(crate) concurrency: u64,
    /// Tokens of that forward.
    pub(crate) tokens: u64,
    /// Collectives of this shape in one such forward.
    pub(crate) per_forward: u64,
}

/// One distinct collective of the cycle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Shape {
    pub(crate) kind: CollectiveKind,
    pub(crate) dtype: DType,
    /// Elements per rank.
    pub(crate) count: u64,
    /// Bytes per rank, as `plan` shows them.
    pub(crate) bytes: u64,
    /// The size `collective` times: nccl-tests' size (an all-gather's output, an all-reduce's
    /// message).
    pub(crate) size: u64,
    pub(crate) uses: Vec<Use>,
}

impl Shape {
    /// `decode C1, draft C1` (each forward once, in the order met).
    pub(crate) fn used_by(&self) -> String {
        let mut seen: Vec<String> = vec![];
        for u in &self.uses {
            let w = format!("{} C{}", u.forward, u.concurrency);
            if !seen.contains(&w) {
                seen.push(w);
            }
        }
        seen.join(", ")
    }

    /// The tokens of the forwards it occurs in (one value for a shape of one token count).
    pub(crate) fn tokens(&self) -> u64 {
        self.uses.first().map_or(0, |u| u.tokens)
    }
}

/// The target's forward of `tokens` tokens at `tp`.
fn target(w: &Workload, tp: u64, tokens: u64) -> anyhow::Result<Schedule> {
    Workload {
        tp: Some(tp),
        tokens,
        phase: Phase::Verify,
        schedule_file: None,
        ..w.clone()
    }
    .schedule(tp)
}

/// One EAGLE-3 draft step of one token at `tp`.
fn draft(w: &Workload, tp: u64) -> anyhow::Result<Schedule> {
    Workload {
        tp: Some(tp),
        tokens: 1,
        phase: Phase::Draft,
        schedule_file: None,
        ..w.clone()
    }
    .schedule(tp)
}

/// The distinct shapes of the cycle of `w` at `tp` for each concurrency C of `concurrency`
/// with `k` draft steps: all-reduces first, then all-gathers, each by size.
pub(crate) fn cycle_shapes(
    w: &Workload,
    tp: u64,
    concurrency: &[u64],
    k: u64,
) -> anyhow::Result<Vec<Shape>> {
    let mut shapes: Vec<Shape> = vec![];
    for &c in concurrency {
        let verify_tokens = c.saturating_mul(k + 1);
        add(&mut shapes, &target(w, tp, c)?, "decode", c, 1);
        add(&mut shapes, &target(w, tp, verify_tokens)?, "verify", c, 1);
        add(&mut shapes, &draft(w, tp)?, "draft", c, c);
    }
    shapes.sort_by_key(|s| (s.kind != CollectiveKind::AllReduce, s.kind.name(), s.size));
    Ok(shapes)
}

/// Adds the collectives of `s` (each `scale` times as large) as uses by `forward` at `c`.
fn add(shapes: &mut Vec<Shape>, s: &Schedule, forward: &str, c: u64, scale: u64) {
    for g in s.collective_groups() {
        let (count, bytes) = (g.count * scale, g.bytes_per_rank * scale);
        let u = Use {
            forward: forward.into(),
            concurrency: c,
            tokens: s.tokens * scale,
            per_forward: g.n,
        };
        match shapes
            .iter_mut()
            .find(|x| x.kind == g.kind && x.dtype == g.dtype && x.bytes == bytes)
        {
            Some(x) => x.uses.push(u),
            None => shapes.push(Shape {
                kind: g.kind,
                dtype: g.dtype,
                count,
                bytes,
                size: g.kind.ops().bytes_out(bytes, s.tp),
                uses: vec![u],
            }),
        }
    }
}

/// The token counts of the forwards of `shapes`, sorted (part of the decision's key).
pub(crate) fn token_counts(shapes: &[Shape]) -> Vec<u64> {
    let mut t: Vec<u64> = shapes
        .iter()
        .flat_map(|s| s.uses.iter().map(|u| u.tokens))
        .collect();
    t.sort_unstable();
    t.dedup();
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kimi_tp8_at_one_and_eight_requests_by_hand() {
        let w = Workload::default();
        let s = cycle_shapes(&w, 8, &[1, 8], 3).unwrap();
        let ar: Vec<(u64, String)> = s
            .iter()
            .filter(|x| x.kind == CollectiveKind::AllReduce)
            .map(|x| (x.bytes, x.used_by()))
            .collect();
        // hidden 7168 bf16: 14,336 B per token; decode C1 and the draft step of one request 1
        // token, verify C1 4 tokens, decode C8 and draft C8 8 tokens, verify C8 32 tokens.
        assert_eq!(
            ar,
            vec![
                (14_336, "decode C1, draft C1".to_string()),
                (57_344, "verify C1".into()),
                (114_688, "decode C8, draft C8".into()),
                (458_752, "verify C8".into()),
            ]
        );
        // 61 layers x 2 + the embedding: 123 all-reduces per target forward; the draft's
        // layer 2 + its embedding: 3.
        let first = &s[0];
        assert_eq!(first.uses[0].per_forward, 123);
        assert_eq!(first.uses[1].per_forward, 3);
        // The logits: 163,840 / 8 x 2 B = 40,960 B per token and rank (output x 8); the
        // draft's 32,000 / 8 x 2 B = 8,000 B.
        let ag: Vec<(u64, u64)> = s
            .iter()
            .filter(|x| x.kind == CollectiveKind::AllGather)
            .map(|x| (x.bytes, x.size))
            .collect();
        assert_eq!(
            ag,
            vec![
                (8_000, 64_000),
                (40_960, 327_680),
                (64_000, 512_000),
                (163_840, 1_310_720),
                (327_680, 2_621_440),
                (1_310_720, 10_485_760),
            ]
        );
        assert_eq!(token_counts(&s), vec![1, 4, 8, 32]);
    }
}
