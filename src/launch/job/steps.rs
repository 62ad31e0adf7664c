//! A schedule turned into the steps of its replay.

use std::collections::BTreeMap;

use crate::model::{Op, Schedule, TokenHistogram};

/// One step of a replay, in schedule order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// The next collective of the schedule.
    Coll,
    /// Stream `nvec` 16-byte vectors of the pool from vector `start` against `tokens` tokens.
    Stream {
        start: u64,
        nvec: u64,
        tokens: usize,
    },
    /// One tiny kernel (launch-overhead emulation).
    Tiny,
}

/// The replay steps of a schedule: collectives and compute in order, `launches_per_layer`
/// tiny kernels at the start of every layer, and consecutive streaming ranges so that one
/// operation starts where the previous ended (offsets wrap inside the pool). Compute operations
/// with nothing between them (router, routed and shared experts of one layer) are streamed by
/// one launch per token count: the weights a rank reads between two collectives, each against
/// the tokens it meets, are what the replay models; the launch load of a real layer's many
/// kernels is `launches_per_layer`. An op meets all the forward's tokens, except one with a
/// token histogram (the routed experts), whose rows each meet their own count: the experts
/// that receive the same number of tokens are streamed by one launch. An engine's fused MoE
/// kernel is one launch over every expert, each expert's weights against its own tokens; a
/// streaming launch takes one token count, so the replay groups the experts by count, the same
/// bytes and flops in a few launches (4 groups at 32 tokens of Kimi-K2.5, about 9 at 128), whose
/// fixed cost the prediction counts.
pub(crate) fn plan_steps(s: &Schedule, launches_per_layer: u32) -> Vec<Step> {
    plan_steps_of_ops(s, launches_per_layer).0
}

/// The streaming launches among `steps`: how many, and their vectors in all.
pub(crate) fn stream_launches(steps: &[Step]) -> (u64, u64) {
    steps.iter().fold((0, 0), |(n, sum), st| match st {
        Step::Stream { nvec, .. } => (n + 1, sum + nvec),
        _ => (n, sum),
    })
}

/// The streaming launches among `steps` per token count: count -> (launches, vectors in all).
pub(crate) fn stream_launches_by_tokens(steps: &[Step]) -> BTreeMap<usize, (u64, u64)> {
    let mut m = BTreeMap::new();
    for st in steps {
        if let Step::Stream { nvec, tokens, .. } = st {
            let e = m.entry(*tokens).or_insert((0, 0));
            e.0 += 1;
            e.1 += nvec;
        }
    }
    m
}

/// The (tokens, 16-byte vectors) an op streams: one piece per row of its token histogram, else
/// its whole weights against `full` tokens.
fn pieces(op_bytes: u64, hist: Option<&TokenHistogram>, full: usize) -> Vec<(usize, u64)> {
    match hist {
        Some(h) if !h.rows.is_empty() => h
            .rows
            .iter()
            .map(|r| (r.tokens as usize, r.units * h.unit_bytes / 16))
            .collect(),
        _ => vec![(full, op_bytes / 16)],
    }
}

/// [`plan_steps`] and, for each op of the schedule, the index of the step that launches it
/// (adjacent compute ops share the streaming step of each token count; an op spread over
/// several, the first of them).
pub(crate) fn plan_steps_of_ops(s: &Schedule, launches_per_layer: u32) -> (Vec<Step>, Vec<usize>) {
    let full = (s.tokens as usize).max(1);
    let mut steps = vec![];
    let mut step_of_op = Vec::with_capacity(s.ops.len());
    let mut last_layer = None;
    // where the streaming steps of the current run of compute ops begin
    let mut run: Option<usize> = None;
    for op in &s.ops {
        let layer = match op {
            Op::Collective { layer, .. } | Op::Compute { layer, .. } => *layer,
        };
        if layer.is_some() && layer != last_layer {
            steps.extend(std::iter::repeat_n(Step::Tiny, launches_per_layer as usize));
            last_layer = layer;
            if launches_per_layer > 0 {
                run = None;
            }
        }
        match op {
            Op::Collective { .. } => {
                steps.push(Step::Coll);
                run = None;
                step_of_op.push(steps.len() - 1);
            }
            Op::Compute {
                weight_bytes,
                token_histogram,
                ..
            } => {
                let from = *run.get_or_insert(steps.len());
                let mut first = None;
                for (t, n) in pieces(*weight_bytes, token_histogram.as_ref(), full) {
                    let at = steps[from..]
                        .iter()
                        .position(|st| matches!(st, Step::Stream { tokens, .. } if *tokens == t));
                    let i = at.map(|p| from + p).unwrap_or_else(|| {
                        steps.push(Step::Stream {
                            start: 0,
                            nvec: 0,
                            tokens: t,
                        });
                        steps.len() - 1
                    });
                    if let Step::Stream { nvec, .. } = &mut steps[i] {
                        *nvec += n;
                    }
                    first.get_or_insert(i);
                }
                step_of_op.push(first.unwrap_or(steps.len() - 1));
            }
        }
    }
    let mut cursor = 0u64;
    for st in &mut steps {
        if let Step::Stream { start, nvec, .. } = st {
            *start = cursor;
            cursor = cursor.wrapping_add(*nvec);
        }
    }
    (steps, step_of_op)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{build, presets::preset, Phase, ScheduleOptions};

    #[test]
    fn steps_keep_schedule_order_and_merge_adjacent_compute() {
        let s = build(
            &preset("kimi-k2.5").unwrap(),
            &ScheduleOptions {
                tp: 8,
                ..Default::default()
            },
            Phase::Verify,
        )
        .unwrap();
        let steps = plan_steps(&s, 2);
        let colls = steps.iter().filter(|x| **x == Step::Coll).count() as u64;
        assert_eq!(colls, s.n_collectives());
        // every byte of every compute op is streamed once (a routed-expert op row by row)
        let streamed: u64 = steps
            .iter()
            .map(|x| match x {
                Step::Stream { nvec, .. } => nvec * 16,
                _ => 0,
            })
            .sum();
        let want: u64 = s
            .ops
            .iter()
            .map(|o| match o {
                Op::Compute {
                    weight_bytes,
                    token_histogram: None,
                    ..
                } => weight_bytes / 16 * 16,
                Op::Compute {
                    token_histogram: Some(h),
                    ..
                } => h
                    .rows
                    .iter()
                    .map(|r| r.units * h.unit_bytes / 16 * 16)
                    .sum(),
                _ => 0,
            })
            .sum();
        assert_eq!(streamed, want);
        // one streaming launch after each attention; between the MoE layers' all-reduces one per
        // token count: 3 (router and shared expert) and each row of the routed experts' counts
        // (3 tokens: 24 experts by 1 token), plus layer 0's dense MLP and the LM head
        let rows = s.routed_histogram().unwrap().rows.len();
        assert_eq!(rows, 1);
        let launches = steps
            .iter()
            .filter(|x| matches!(x, Step::Stream { .. }))
            .count();
        assert_eq!(launches, 61 + 1 + 60 * (1 + rows) + 1);
        // two tiny kernels per layer, placed before the layer's first step
        assert_eq!(steps.iter().filter(|x| **x == Step::Tiny).count(), 2 * 61);
        assert_eq!(&steps[..4], &[Step::Coll, Step::Tiny, Step::Tiny, steps[3]]);
        // consecutive ranges: each launch starts where the last ended
        let mut cursor = 0;
        for x in &steps {
            if let Step::Stream { start, nvec, .. } = x {
                assert_eq!(*start, cursor);
                cursor += nvec;
            }
        }
    }

    #[test]
    fn routed_experts_stream_once_each_with_their_own_tokens() {
        // Kimi-K2.5 TP8 at 32 tokens: 188 experts touched, 133 by 1 token, 44 by 2, 9 by 3, 2 by
        // 4 (schedule.rs); each MoE layer streams router + shared expert at 32 tokens and one
        // launch per count, in the order the ops come
        let s = build(
            &preset("kimi-k2.5").unwrap(),
            &ScheduleOptions {
                tp: 8,
                tokens: 32,
                ..Default::default()
            },
            Phase::Verify,
        )
        .unwrap();
        let steps = plan_steps(&s, 0);
        let by = stream_launches_by_tokens(&steps);
        // one expert's TP shard, INT4 with bf16 scales (9/16 B per weight), 16-byte vectors
        let unit = 3 * 7168 * 256 * 9 / 16 / 16;
        assert_eq!(by[&1], (60, 60 * 133 * unit));
        assert_eq!(by[&2], (60, 60 * 44 * unit));
        assert_eq!(by[&3], (60, 60 * 9 * unit));
        assert_eq!(by[&4], (60, 60 * 2 * unit));
        // 32 tokens: 61 attention + layer 0's dense MLP + 60 router-and-shared + LM head
        assert_eq!(by[&32].0, 61 + 1 + 60 + 1);
        assert_eq!(by.len(), 5);
        // layer 1: attention, its all-reduce, then 32 (router), 1, 2, 3, 4 (routed experts;
        // the shared expert joins the 32-token launch), then the MLP all-reduce
        let first_moe = steps
            .iter()
            .position(|x| matches!(x, Step::Stream { tokens: 1, .. }))
            .unwrap();
        let t = |i: usize| match steps[i] {
            Step::Stream { tokens, .. } => tokens,
            _ => 0,
        };
        assert_eq!(
            (first_moe - 1..first_moe + 4).map(t).collect::<Vec<_>>(),
            [32, 1, 2, 3, 4]
        );
        assert_eq!(steps[first_moe + 4], Step::Coll);
    }
}
