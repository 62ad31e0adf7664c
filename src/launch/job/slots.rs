//! Which buffer slot each launch of a collective uses: the rotation that moves a collective's
//! buffers between iterations, as nccl-tests moves its buffer offsets (`startColl`, NVIDIA/
//! nccl-tests `src/common.cu`). Why there are [`SLOTS`] of them, and their salts, are in
//! [`crate::measure::pattern`].
//!
//! Launches of one collective are counted in the order a rank makes them: the warm-up and timed
//! samples, then the exact check, then the per-collective timing pass. Sample `it` of a run
//! with `batch` launches per sample makes launches `it * batch .. (it + 1) * batch`, and launch
//! `j` runs on slot `j % SLOTS`, eager and graph alike, NCCL and P2P alike (for the P2P
//! kernels the caller's input and output buffers move; their workspace keeps its own epochs).
//!
//! CUDA graphs: a graph's kernel arguments are frozen, so one graph cannot move its buffers.
//! A run captures [`SLOTS`] graphs, graph `g` holding the launches of sample `g`, and sample `it`
//! launches graph `it % SLOTS`: one graph is still one sample (one verify, or one batch), and
//! the launches go through the slots in the same order as eager ones (a test proves it).
//!
//! The exact check runs [`SLOTS`] samples after the timed ones, continuing the rotation, with
//! every slot's output poisoned before: every slot is written and checked, and the launch before
//! each checked one ran on another slot, the first checked one included.

use std::ops::Range;

pub(crate) use crate::measure::pattern::SLOTS;

/// The slot of launch `j`.
pub(crate) fn slot(j: u64) -> usize {
    (j % SLOTS as u64) as usize
}

/// The slots of the `batch` launches of sample `it`, in launch order.
pub(crate) fn sample_slots(it: u64, batch: u64) -> impl Iterator<Item = usize> {
    let b = batch.max(1);
    (it * b..(it + 1) * b).map(slot)
}

/// The graph (of the [`SLOTS`] captured, graph `g` holding the launches of sample `g`) that
/// replays sample `it`.
pub(crate) fn graph_of(it: u64) -> usize {
    slot(it)
}

/// The samples of the exact check that follows `done` samples (warm-up and timed): [`SLOTS`]
/// of them, continuing the rotation.
pub(crate) fn check_samples(done: u64) -> Range<u64> {
    done..done + SLOTS as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replaying graph `graph_of(it)`, captured from sample `graph_of(it)`'s launches, makes
    /// exactly the launches eager sample `it` makes, for every batch size.
    #[test]
    fn graphs_launch_the_slots_eager_samples_launch() {
        for batch in 1..=8u64 {
            for it in 0..100u64 {
                let eager: Vec<usize> = sample_slots(it, batch).collect();
                let g = graph_of(it) as u64;
                let graph: Vec<usize> = sample_slots(g, batch).collect();
                assert_eq!(eager, graph, "batch {batch} sample {it}");
                // and those are launches it*batch.. in order, by hand: (it*batch + k) % 3
                let want: Vec<usize> = (0..batch)
                    .map(|k| ((it * batch + k) % 3) as usize)
                    .collect();
                assert_eq!(eager, want);
            }
        }
    }

    /// Data one or two launches old (a stale pointer; the P2P staging half of the same epoch
    /// parity) always belongs to another slot: launches j, j+1 and j+2 use three different slots,
    /// across sample boundaries too.
    #[test]
    fn launches_one_and_two_apart_use_other_slots() {
        assert_eq!(SLOTS, 3);
        for batch in 1..=5u64 {
            let launches: Vec<usize> = (0..40).flat_map(|it| sample_slots(it, batch)).collect();
            for w in launches.windows(3) {
                assert!(w[0] != w[1] && w[1] != w[2] && w[0] != w[2], "{w:?}");
            }
        }
    }

    /// The check's samples write every slot, whatever came before, and the first checked
    /// launch follows a launch on another slot.
    #[test]
    fn the_check_covers_every_slot_and_continues_the_rotation() {
        for batch in 1..=4u64 {
            for done in 0..10u64 {
                let checked: Vec<usize> = check_samples(done)
                    .flat_map(|it| sample_slots(it, batch))
                    .collect();
                assert_eq!(checked.len() as u64, SLOTS as u64 * batch);
                for s in 0..SLOTS {
                    assert!(checked.contains(&s), "batch {batch} done {done}: slot {s}");
                }
                if done > 0 {
                    let before = sample_slots(done - 1, batch).last().unwrap();
                    assert_ne!(before, checked[0], "batch {batch} done {done}");
                }
            }
        }
    }
}
