//! Transfer versus waiting inside one collective, from every rank's kernel timing (pure).
//!
//! An NCCL kernel cannot finish before every rank has launched its own, so the rank that
//! arrives last waits for no one: its kernel duration is the transfer itself. Every other rank's
//! kernel ran for the transfer plus the time it spent waiting for the last one. This file turns
//! per-rank (start, duration) pairs into that split; `trace` applies it to profiler traces and
//! the replay's per-collective timing pass applies it to its own events.
//!
//! Start skew and the last rank need one clock for all ranks (ranks of one host share it in
//! Kineto and in CUDA events of one machine); across hosts only durations are comparable, so
//! the skew and the last rank are unknown (`None`).

use serde::{Deserialize, Serialize};

use super::stats::quantile_sorted;
pub(crate) use crate::record::vocab::Straggler;

/// One rank's view of one collective: when its kernel started and how long it ran (us).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct RankTiming {
    pub(crate) start_us: f64,
    pub(crate) dur_us: f64,
}

/// The split of one collective across ranks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Attribution {
    /// The shortest rank's kernel duration: the collective itself, waiting for no one.
    pub(crate) transfer_us: f64,
    /// Each rank's duration minus the transfer (index = position in the input).
    pub(crate) waiting_us: Vec<f64>,
    /// Latest start minus earliest start; `None` without a shared clock.
    pub(crate) skew_us: Option<f64>,
    /// The rank that started last (index into the input); `None` without a shared clock.
    pub(crate) last_rank: Option<usize>,
}

/// Splits one collective. `per_rank` must not be empty; `same_clock` says whether the start
/// times of different ranks can be compared.
pub(crate) fn attribute(per_rank: &[RankTiming], same_clock: bool) -> Attribution {
    assert!(
        !per_rank.is_empty(),
        "attribution of a collective seen by no rank"
    );
    let transfer = per_rank
        .iter()
        .map(|t| t.dur_us)
        .fold(f64::INFINITY, f64::min);
    let waiting = per_rank
        .iter()
        .map(|t| (t.dur_us - transfer).max(0.0))
        .collect();
    let (skew, last) = if same_clock {
        let first = per_rank
            .iter()
            .map(|t| t.start_us)
            .fold(f64::INFINITY, f64::min);
        let (last_i, last_t) = per_rank
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.start_us.total_cmp(&b.1.start_us))
            .expect("non-empty");
        (Some(last_t.start_us - first), Some(last_i))
    } else {
        (None, None)
    };
    Attribution {
        transfer_us: transfer,
        waiting_us: waiting,
        skew_us: skew,
        last_rank: last,
    }
}

/// Median and spread of a set of values (us).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
    pub(crate) n: usize,
}

impl Spread {
    /// `None` for an empty set.
    pub(crate) fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        Some(Spread {
            median: quantile_sorted(&v, 0.5),
            min: v[0],
            max: v[v.len() - 1],
            n: v.len(),
        })
    }
}

/// Many collectives summed up, e.g. every collective of one step, or of a whole trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Aggregate {
    pub(crate) collectives: usize,
    /// Sum of the transfer times.
    pub(crate) transfer_us: f64,
    /// Sum of each rank's waiting (index = rank position).
    pub(crate) waiting_us: Vec<f64>,
    /// Sum of each rank's in-kernel time (transfer + its waiting).
    pub(crate) in_kernel_us: Vec<f64>,
    /// Median start skew over the collectives; `None` without a shared clock.
    pub median_skew_us: Option<f64>,
    /// How often each rank arrived last (index = rank position).
    pub(crate) last_counts: Vec<usize>,
    /// The rank most often last, if any collective had a known last rank.
    pub(crate) straggler: Option<Straggler>,
}

impl Aggregate {
    /// Mean over ranks of the in-kernel time.
    pub(crate) fn mean_in_kernel_us(&self) -> f64 {
        mean(&self.in_kernel_us)
    }
    /// Mean over ranks of the waiting time.
    pub(crate) fn mean_waiting_us(&self) -> f64 {
        mean(&self.waiting_us)
    }
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Sums attributions of collectives seen by the same `n_ranks` ranks (in the same order).
pub(crate) fn aggregate(items: &[Attribution], n_ranks: usize) -> Aggregate {
    let mut waiting = vec![0.0; n_ranks];
    let mut in_kernel = vec![0.0; n_ranks];
    let mut last_counts = vec![0usize; n_ranks];
    let mut lags: Vec<Vec<f64>> = vec![Vec::new(); n_ranks];
    let mut skews = Vec::new();
    let mut transfer = 0.0;
    for a in items {
        transfer += a.transfer_us;
        for (r, w) in a.waiting_us.iter().enumerate().take(n_ranks) {
            waiting[r] += w;
            in_kernel[r] += a.transfer_us + w;
        }
        if let Some(s) = a.skew_us {
            skews.push(s);
        }
        if let (Some(r), Some(s)) = (a.last_rank, a.skew_us) {
            if r < n_ranks {
                last_counts[r] += 1;
                lags[r].push(s);
            }
        }
    }
    let known: usize = last_counts.iter().sum();
    let straggler = (0..n_ranks)
        .filter(|&r| last_counts[r] > 0)
        .max_by_key(|&r| (last_counts[r], std::cmp::Reverse(r)))
        .map(|r| Straggler {
            rank: r,
            times_last: last_counts[r],
            share: last_counts[r] as f64 / known as f64,
            median_lag_us: Spread::of(&lags[r]).map(|s| s.median).unwrap_or(0.0),
        });
    Aggregate {
        collectives: items.len(),
        transfer_us: transfer,
        waiting_us: waiting,
        in_kernel_us: in_kernel,
        median_skew_us: Spread::of(&skews).map(|s| s.median),
        last_counts,
        straggler,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(start_us: f64, dur_us: f64) -> RankTiming {
        RankTiming { start_us, dur_us }
    }

    #[test]
    fn last_rank_waits_for_no_one() {
        // rank 1 starts 200 us late; rank 0 waits 200 us, so its kernel runs 224 us.
        let a = attribute(&[t(1000.0, 224.0), t(1200.0, 24.0), t(1100.0, 124.0)], true);
        assert_eq!(a.transfer_us, 24.0);
        assert_eq!(a.waiting_us, vec![200.0, 0.0, 100.0]);
        assert_eq!(a.skew_us, Some(200.0));
        assert_eq!(a.last_rank, Some(1));
    }

    #[test]
    fn without_a_shared_clock_skew_and_last_rank_are_unknown() {
        let a = attribute(&[t(5.0e9, 50.0), t(10.0, 30.0)], false);
        assert_eq!(a.transfer_us, 30.0);
        assert_eq!(a.waiting_us, vec![20.0, 0.0]);
        assert_eq!((a.skew_us, a.last_rank), (None, None));
    }

    #[test]
    fn aggregate_names_the_straggler() {
        let items: Vec<Attribution> = (0..10)
            .map(|i| {
                let late = if i < 7 { 1 } else { 0 };
                let mut v = vec![t(0.0, 80.0), t(0.0, 80.0)];
                v[late] = t(60.0, 20.0);
                attribute(&v, true)
            })
            .collect();
        let g = aggregate(&items, 2);
        assert_eq!(g.collectives, 10);
        assert!((g.transfer_us - 200.0).abs() < 1e-9);
        assert!((g.waiting_us[0] - 7.0 * 60.0).abs() < 1e-9);
        assert!((g.waiting_us[1] - 3.0 * 60.0).abs() < 1e-9);
        assert!((g.in_kernel_us[0] - (200.0 + 420.0)).abs() < 1e-9);
        let s = g.straggler.unwrap();
        assert_eq!((s.rank, s.times_last), (1, 7));
        assert!((s.share - 0.7).abs() < 1e-9 && (s.median_lag_us - 60.0).abs() < 1e-9);
        assert_eq!(g.median_skew_us, Some(60.0));
    }

    #[test]
    fn spread_of_values() {
        let s = Spread::of(&[3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.5, 1.0, 10.0, 4));
        assert!(Spread::of(&[]).is_none());
    }
}
