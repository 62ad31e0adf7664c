//! A schedule turned into the steps of its replay.

use crate::model::{Op, Schedule};

/// One step of a replay, in schedule order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// The next collective of the schedule.
    Coll,
    /// Stream `nvec` 16-byte vectors of the pool from vector `start`.
    Stream { start: u64, nvec: u64 },
    /// One tiny kernel (launch-overhead emulation).
    Tiny,
}

/// The replay steps of a schedule: collectives and compute in order, `launches_per_layer`
/// tiny kernels at the start of every layer, and consecutive streaming ranges so that one
/// operation starts where the previous ended (offsets wrap inside the pool). Compute operations
/// with nothing between them (router, routed and shared experts of one layer) are streamed by
/// one launch: the weights a rank reads between two collectives are what the replay models; the
/// launch load of a real layer's many kernels is `launches_per_layer`.
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

/// [`plan_steps`] and, for each op of the schedule, the index of the step that launches it
/// (adjacent compute ops share one streaming step).
pub(crate) fn plan_steps_of_ops(s: &Schedule, launches_per_layer: u32) -> (Vec<Step>, Vec<usize>) {
    let mut steps = vec![];
    let mut step_of_op = Vec::with_capacity(s.ops.len());
    let mut cursor = 0u64;
    let mut last_layer = None;
    for op in &s.ops {
        let layer = match op {
            Op::Collective { layer, .. } | Op::Compute { layer, .. } => *layer,
        };
        if layer.is_some() && layer != last_layer {
            steps.extend(std::iter::repeat_n(Step::Tiny, launches_per_layer as usize));
            last_layer = layer;
        }
        match op {
            Op::Collective { .. } => steps.push(Step::Coll),
            Op::Compute { weight_bytes, .. } => {
                let nvec = weight_bytes / 16;
                match steps.last_mut() {
                    Some(Step::Stream { nvec: n, .. }) => *n += nvec,
                    _ => steps.push(Step::Stream {
                        start: cursor,
                        nvec,
                    }),
                }
                cursor = cursor.wrapping_add(nvec);
            }
        }
        step_of_op.push(steps.len() - 1);
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
        // every byte of every compute op is streamed once
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
                Op::Compute { weight_bytes, .. } => weight_bytes / 16 * 16,
                _ => 0,
            })
            .sum();
        assert_eq!(streamed, want);
        // one streaming launch between two collectives (attention; MLP or MoE), plus LM head
        let launches = steps
            .iter()
            .filter(|x| matches!(x, Step::Stream { .. }))
            .count();
        assert_eq!(launches, 2 * 61 + 1);
        // two tiny kernels per layer, placed before the layer's first step
        assert_eq!(steps.iter().filter(|x| **x == Step::Tiny).count(), 2 * 61);
        assert_eq!(&steps[..4], &[Step::Coll, Step::Tiny, Step::Tiny, steps[3]]);
        // consecutive ranges: each launch starts where the last ended
        let mut cursor = 0;
        for x in &steps {
            if let Step::Stream { start, nvec } = x {
                assert_eq!(*start, cursor);
                cursor += nvec;
            }
        }
    }
}
