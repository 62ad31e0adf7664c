//! The per-collective timing pass of a verify replay: what each rank reports (every
//! collective's and compute launch's start and duration, every host gap, in one verify), and
//! how the parent turns the ranks' reports into transfer vs waiting
//! ([`crate::measure::attribution`]) and into a Chrome trace ([`crate::trace::chrome`]).
//!
//! The pass runs after the headline timing, so that its events do not disturb the per-verify
//! time. Clocks: CUDA gives elapsed time only between events of one context, so each rank
//! times everything from its own reference event, recorded on its stream right after the
//! per-iteration barrier all-reduce; every rank's barrier kernel ends within a few
//! microseconds of the others', so starts are aligned across ranks to that accuracy
//! ([`ALIGNMENT`]). Durations need no alignment. Host gaps are on the host clock, from the
//! moment the rank's host saw the barrier complete.
//!
//! Pure: no GPU here (the rank side that fills [`PassIteration`] is in [`super::job`]).

use serde::{Deserialize, Serialize};

use crate::measure::attribution::{aggregate, attribute, RankTiming};
use crate::model::{Op, Schedule};
use crate::record::InCollective;
use crate::trace::chrome::{RankTrack, Slice, SliceCollective, SliceKind};

/// How the ranks' start times are aligned (printed with every measured pass).
pub(crate) const ALIGNMENT: &str = "starts are aligned across ranks at the end of the per-iteration barrier all-reduce (each rank times from an event recorded right after it; the barrier kernels of all ranks end within a few us of each other), so start skew is approximate; durations are exact";

/// Verifies the per-collective pass times after `iters` headline iterations: as many, at most 20
/// (enough for a median; the pass reads back hundreds of events per verify).
pub(crate) fn pass_iterations(iters: u64) -> u64 {
    iters.clamp(1, 20)
}

/// One rank's timings of one verify of the pass, in us from the rank's reference event.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct PassIteration {
    /// Each collective of the schedule, in order.
    pub(crate) collectives: Vec<RankTiming>,
    /// Each compute launch (a streaming launch, which may cover several adjacent ops).
    pub(crate) compute: Vec<RankTiming>,
    /// Each non-zero host gap, on the host clock from when the host saw the barrier end.
    pub(crate) host_gaps: Vec<RankTiming>,
    /// Host time of each collective's launch (start, duration), same clock as `host_gaps`.
    pub(crate) launches: Vec<RankTiming>,
}

/// Transfer vs waiting of a pass: `per_rank[r][i]` is rank r's iteration i. `None` when no
/// iteration timed a collective on every rank.
pub(crate) fn attribute_pass(per_rank: &[Vec<PassIteration>], how: String) -> Option<InCollective> {
    let n = per_rank.len();
    let iters = per_rank.iter().map(|p| p.len()).min()?;
    let mut items = vec![];
    for i in 0..iters {
        let ncoll = per_rank.iter().map(|p| p[i].collectives.len()).min()?;
        for k in 0..ncoll {
            let t: Vec<RankTiming> = per_rank.iter().map(|p| p[i].collectives[k]).collect();
            items.push(attribute(&t, true));
        }
    }
    if items.is_empty() || n == 0 {
        return None;
    }
    let agg = aggregate(&items, n);
    let it = iters as f64;
    let waiting_per_rank: Vec<f64> = agg.waiting_us.iter().map(|w| w / it).collect();
    let transfer = agg.transfer_us / it;
    let waiting = waiting_per_rank.iter().sum::<f64>() / n as f64;
    Some(InCollective {
        in_collective_us: transfer + waiting,
        transfer_us: transfer,
        waiting_us: waiting,
        waiting_per_rank_us: waiting_per_rank,
        median_skew_us: agg.median_skew_us,
        straggler: agg.straggler,
        lower_bound_us: None,
        iterations: iters as u64,
        how,
    })
}

/// The pass as Chrome-trace tracks, one per rank: its iterations one after another (each
/// shifted to start after the latest end of the previous one on any rank), collectives named
/// and sized from `schedule`, compute launches, host gaps. `graph`: the collectives were
/// replayed from a CUDA graph (one `cudaGraphLaunch` per verify).
pub(crate) fn chrome_tracks(
    per_rank: &[Vec<PassIteration>],
    schedule: &Schedule,
    graph: bool,
) -> Vec<RankTrack> {
    let colls: Vec<SliceCollective> = schedule
        .ops
        .iter()
        .filter_map(|o| match o {
            Op::Collective {
                kind, dtype, count, ..
            } => Some((kind.name(), dtype.name(), *count)),
            _ => None,
        })
        .enumerate()
        .map(|(seq, (op, dtype, count))| SliceCollective {
            op: op.into(),
            dtype: dtype.into(),
            elements: count,
            group_size: per_rank.len() as u64,
            comm: "0".into(),
            seq: seq as u64,
        })
        .collect();
    let iters = per_rank.iter().map(|p| p.len()).min().unwrap_or(0);
    let mut offsets = vec![0.0; iters];
    let mut t = 0.0;
    for (i, o) in offsets.iter_mut().enumerate() {
        *o = t;
        let end = per_rank
            .iter()
            .flat_map(|p| {
                let it = &p[i];
                it.collectives
                    .iter()
                    .chain(&it.compute)
                    .chain(&it.host_gaps)
                    .chain(&it.launches)
            })
            .map(|s| s.start_us + s.dur_us)
            .fold(0.0, f64::max);
        t += end + 10.0;
    }
    per_rank
        .iter()
        .enumerate()
        .map(|(rank, p)| {
            let mut slices = vec![];
            let mut seq = 0u64;
            for (i, it) in p.iter().take(iters).enumerate() {
                let o = offsets[i] + 1.0;
                let plain = [
                    ("host gap", SliceKind::HostGap, &it.host_gaps),
                    ("weight streaming", SliceKind::Compute, &it.compute),
                ];
                for (name, kind, timings) in plain {
                    slices.extend(timings.iter().map(|t| Slice {
                        name: name.into(),
                        kind,
                        start_us: o + t.start_us,
                        dur_us: t.dur_us,
                        launch: None,
                        graph,
                        collective: None,
                    }));
                }
                for (k, c) in it.collectives.iter().enumerate() {
                    let Some(col) = colls.get(k) else { break };
                    let mut col = col.clone();
                    col.seq = seq;
                    seq += 1;
                    slices.push(Slice {
                        name: col.op.clone(),
                        kind: SliceKind::Collective,
                        start_us: o + c.start_us,
                        dur_us: c.dur_us,
                        launch: it
                            .launches
                            .get(k)
                            .map(|l| (o + l.start_us, l.dur_us.max(0.0))),
                        graph,
                        collective: Some(col),
                    });
                }
            }
            slices.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
            RankTrack { rank, slices }
        })
        .collect()
}

/// A deterministic FAKE pass (the mock backend): `nranks` ranks, `iters` verifies of the
/// schedule's collectives, each `transfer_us` long; rank `late` (if any) starts every collective
/// `lag_us` late, so the others wait that long. Not a measurement: only for exercising the
/// attribution, the table and the trace export end to end without a GPU.
pub(crate) fn fake_pass(
    schedule: &Schedule,
    nranks: usize,
    iters: usize,
    transfer_us: f64,
    late: Option<(usize, f64)>,
) -> Vec<Vec<PassIteration>> {
    let ncoll = schedule.n_collectives() as usize;
    (0..nranks)
        .map(|r| {
            (0..iters)
                .map(|_| {
                    let mut it = PassIteration::default();
                    let mut t = 0.0;
                    for _ in 0..ncoll {
                        // the late rank starts `lag` later; the others wait for it
                        let (own, lag) = match late {
                            Some((l, lag)) if l == r => (lag, 0.0),
                            Some((_, lag)) => (0.0, lag),
                            None => (0.0, 0.0),
                        };
                        it.launches.push(RankTiming {
                            start_us: t + own,
                            dur_us: 2.0,
                        });
                        it.collectives.push(RankTiming {
                            start_us: t + own,
                            dur_us: transfer_us + lag,
                        });
                        t += transfer_us + late.map_or(0.0, |(_, l)| l) + 1.0;
                    }
                    it
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{build, presets::preset, Phase, ScheduleOptions};

    fn kimi(tp: u64) -> Schedule {
        let o = ScheduleOptions {
            tp,
            ..Default::default()
        };
        build(&preset("kimi-k2.5").unwrap(), &o, Phase::Verify).unwrap()
    }

    fn t(start_us: f64, dur_us: f64) -> RankTiming {
        RankTiming { start_us, dur_us }
    }

    #[test]
    fn attribution_of_synthetic_rank_timings() {
        // two collectives, three ranks, two iterations; rank 2 starts last in both
        let it = |starts: [f64; 2], durs: [f64; 2]| PassIteration {
            collectives: vec![t(starts[0], durs[0]), t(starts[1], durs[1])],
            ..Default::default()
        };
        let per_rank = vec![
            vec![it([0.0, 50.0], [30.0, 20.0]), it([0.0, 50.0], [30.0, 20.0])],
            vec![it([5.0, 52.0], [25.0, 18.0]), it([5.0, 52.0], [25.0, 18.0])],
            vec![
                it([20.0, 60.0], [10.0, 10.0]),
                it([20.0, 60.0], [10.0, 10.0]),
            ],
        ];
        let a = attribute_pass(&per_rank, "test".into()).unwrap();
        // transfer per verify = the shortest duration of each collective: 10 + 10
        assert!((a.transfer_us - 20.0).abs() < 1e-9);
        // waiting per verify: rank 0 (20 + 10), rank 1 (15 + 8), rank 2 (0)
        assert_eq!(a.waiting_per_rank_us, vec![30.0, 23.0, 0.0]);
        assert!((a.waiting_us - 53.0 / 3.0).abs() < 1e-9);
        assert!((a.in_collective_us - (20.0 + 53.0 / 3.0)).abs() < 1e-9);
        // skews 20 and 10: median of [20, 10, 20, 10]
        assert!((a.median_skew_us.unwrap() - 15.0).abs() < 1e-9);
        let s = a.straggler.unwrap();
        assert_eq!((s.rank, s.times_last), (2, 4));
        assert_eq!(a.iterations, 2);
        assert!(attribute_pass(&[], "x".into()).is_none());
    }

    #[test]
    fn fake_pass_late_rank_is_the_straggler_and_tracks_carry_the_schedule() {
        let s = kimi(2);
        let p = fake_pass(&s, 2, 3, 20.0, Some((1, 100.0)));
        let a = attribute_pass(&p, "FAKE".into()).unwrap();
        let n = s.n_collectives() as f64;
        assert!((a.transfer_us - 20.0 * n).abs() < 1e-6);
        assert_eq!(a.straggler.as_ref().unwrap().rank, 1);
        assert!((a.waiting_per_rank_us[0] - 100.0 * n).abs() < 1e-6);
        let tr = chrome_tracks(&p, &s, false);
        assert_eq!(tr.len(), 2);
        let colls = tr[0]
            .slices
            .iter()
            .filter(|x| x.kind == SliceKind::Collective)
            .count();
        assert_eq!(colls, 3 * s.n_collectives() as usize);
        // iterations do not overlap: starts are sorted and the last iteration starts later
        assert!(tr[1]
            .slices
            .windows(2)
            .all(|w| w[0].start_us <= w[1].start_us));
    }
}
