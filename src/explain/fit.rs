//! Without traces, the waiting inside the collectives is inferred: what host-gap jitter makes
//! the cost model's in-collective time ([`crate::costmodel::waiting::simulate`], the
//! asynchronous timeline `verify --backend model --host-gap-us` prices) match what the profiler
//! showed? Bisection over the jitter, the mean gap held fixed.
//!
//! Why the jitter and not the mean: equal gaps on every rank keep the ranks in step, so nothing
//! waits whatever their size; only their spread between ranks makes one rank arrive late. The
//! mean is pinned by the evidence instead: an eager engine whose collectives wait on its hosts
//! spends the verify launching, so the host time between two collectives is the verify time
//! over the collectives (or, without a verify time, the observed time of one collective).

use serde::Serialize;

use crate::costmodel::waiting::{simulate, GpuWork};
use crate::measure::gaps::{schedule_launches, GapPer, GapSource, HostGap, HostGaps, MAX_GAP_US};
use crate::model::Schedule;

/// Monte-Carlo verifies per step of the bisection.
pub(crate) const SEARCH_ITERATIONS: u64 = 24;
/// Monte-Carlo verifies of the final figure.
pub(crate) const FINAL_ITERATIONS: u64 = 100;
/// The bisection stops within this share of the target.
pub(crate) const TOLERANCE: f64 = 0.01;

/// The host gaps that reproduce an observed in-collective time (all modeled).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct JitterFit {
    /// Mean host time before each collective, us (held fixed).
    pub(crate) mean_us: f64,
    /// Where the mean came from.
    pub(crate) mean_from: String,
    /// The fitted standard deviation of one gap, us.
    pub(crate) jitter_us: f64,
    /// The in-collective time to reproduce, per verify of the schedule, us.
    pub(crate) target_us: f64,
    /// The model's in-collective time at the fitted jitter, us, and its standard error.
    pub(crate) modeled_us: f64,
    pub(crate) modeled_se_us: f64,
    /// Whether the target was reached (false: the largest jitter tried falls short).
    pub(crate) reached: bool,
    /// How it was computed.
    pub(crate) method: String,
}

fn gaps(mean_us: f64, jitter_us: f64) -> HostGaps {
    HostGaps {
        source: GapSource::Drawn(HostGap { mean_us, jitter_us }),
        per: GapPer::Op,
        ..HostGaps::none()
    }
}

/// The modeled in-collective time of one verify of `s` (collectives only, as `verify --mode
/// comm` replays it) with gaps of `mean_us` +- `jitter_us` before each collective.
pub(crate) fn in_collective_us(
    s: &Schedule,
    nranks: usize,
    transfer_us: &[f64],
    mean_us: f64,
    jitter_us: f64,
    iterations: u64,
) -> (f64, f64) {
    let launches = schedule_launches(s, false);
    let work: Vec<GpuWork> = transfer_us.iter().map(|&us| GpuWork { us }).collect();
    let w = simulate(
        &gaps(mean_us, jitter_us),
        &launches,
        &work,
        nranks,
        iterations,
    );
    (w.in_collective_us, w.waiting_se_us)
}

/// Bisects the jitter in [0, min(4 x mean, the gap limit)] until the modeled in-collective
/// time of `s` is within [`TOLERANCE`] of `target_us`. `transfer_us`: the model's device time of
/// each collective, in order.
pub(crate) fn fit(
    s: &Schedule,
    nranks: usize,
    transfer_us: &[f64],
    mean_us: f64,
    mean_from: &str,
    target_us: f64,
) -> JitterFit {
    let eval = |j: f64, it: u64| in_collective_us(s, nranks, transfer_us, mean_us, j, it);
    let mut lo = 0.0;
    let mut hi = (4.0 * mean_us).min(MAX_GAP_US);
    let reached = eval(hi, SEARCH_ITERATIONS).0 >= target_us;
    if reached {
        for _ in 0..40 {
            let mid = 0.5 * (lo + hi);
            let (v, _) = eval(mid, SEARCH_ITERATIONS);
            if (v - target_us).abs() <= TOLERANCE * target_us {
                lo = mid;
                hi = mid;
                break;
            }
            if v < target_us {
                lo = mid;
            } else {
                hi = mid;
            }
        }
    } else {
        lo = hi;
    }
    let jitter = 0.5 * (lo + hi);
    let (modeled, se) = eval(jitter, FINAL_ITERATIONS);
    JitterFit {
        mean_us,
        mean_from: mean_from.into(),
        jitter_us: jitter,
        target_us,
        modeled_us: modeled,
        modeled_se_us: se,
        reached,
        method: format!(
            "bisection over the jitter of gamma host gaps (mean held at {mean_us:.1} us) before each collective on every rank, asynchronous launches with the hosts meeting once per verify (costmodel::waiting::simulate, {SEARCH_ITERATIONS} Monte-Carlo verifies per step, {FINAL_ITERATIONS} for the final figure)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Workload;

    #[test]
    fn the_fit_reproduces_its_target_and_zero_jitter_waits_for_nothing() {
        // A small schedule keeps the Monte-Carlo cheap: 2 layers of a preset at TP=4.
        let s = Workload {
            tp: Some(4),
            ..Default::default()
        }
        .schedule(4)
        .unwrap();
        let n = s.n_collectives() as usize;
        let per = vec![20.0; n];
        let transfer = 20.0 * n as f64;
        // Equal gaps on every rank: nobody waits, the in-collective time is the transfer.
        let (v, _) = in_collective_us(&s, 4, &per, 100.0, 0.0, 4);
        assert!((v - transfer).abs() < 1e-6, "{v} vs {transfer}");
        // A target of 3x the transfer is reached with some positive jitter.
        let f = fit(&s, 4, &per, 100.0, "test", 3.0 * transfer);
        assert!(f.reached);
        assert!(f.jitter_us > 0.0 && f.jitter_us < 400.0, "{}", f.jitter_us);
        let rel = (f.modeled_us - f.target_us).abs() / f.target_us;
        assert!(
            rel < 0.05,
            "modeled {} vs target {}",
            f.modeled_us,
            f.target_us
        );
        // An unreachable target says so.
        let g = fit(&s, 4, &per, 1.0, "test", 1000.0 * transfer);
        assert!(!g.reached);
    }
}
