//! The waiting model: how long the collectives of an eager replay with host gaps
//! ([`crate::measure::gaps`]) wait for the slowest rank. Every number here is modeled.
//!
//! A collective cannot finish before the last rank has arrived, so what a profiler shows inside
//! a collective is transfer (the cost model's device time) plus waiting. Two models, because
//! where ranks meet again decides how waiting adds up:
//!
//! - [`HostSync::Collective`]: every rank's host leaves each collective together (a host that
//!   blocks on the collective's completion, or whose own launch waits for the GPU). Then the
//!   arrival offsets at a collective are the sums of each rank's gaps since the previous one, and
//!   waiting does not carry over from one collective to the next: per collective, rank i waits
//!   E[max of n] - E[X_i]. With gamma gaps of one scale the sums are gamma again, so this is
//!   computed from order statistics: E[max] = integral of 1 - F(x)^(n-1) F(x - lag), with F the
//!   gamma CDF of the sum and `lag` the late rank's delay (F(x - lag): the late rank's arrival),
//!   integrated numerically ([`expected_max`]).
//! - [`HostSync::Iteration`]: launches are asynchronous, as in CUDA and in verifybench's eager
//!   replay: NCCL makes the GPU stream wait, never the host. Hosts meet only at the start of
//!   each iteration (verifybench's barrier; a server's sampling step), so a rank whose host runs
//!   ahead has its kernels queued and its GPU waits in each collective for the slowest host;
//!   the hosts' offsets are random walks and the waiting grows with them. No closed form:
//!   [`simulate`] replays the GPU timeline (seeded Monte-Carlo over the same gap generator the
//!   launcher uses, parallel with rayon) and reports its standard error.
//!
//! The second is what verifybench's eager replay does; the first is the optimistic bound (and
//! the model the issue first described), kept because it is exact, cheap and explains the
//! n-dependence.

use rayon::prelude::*;

use crate::measure::gaps::{gamma_params, GapPer, GapSource, HostGaps, Launch};

/// Natural log of the gamma function (Lanczos, g = 7, 9 terms; relative error ~1e-15).
pub(crate) fn ln_gamma(x: f64) -> f64 {
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    let t = x + 7.5;
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// Regularised lower incomplete gamma P(a, x) = CDF at x of a gamma of shape a, scale 1:
/// the power series below a + 1, the continued fraction (modified Lentz) above.
pub(crate) fn gamma_p(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    let front = (-x + a * x.ln() - ln_gamma(a)).exp();
    if x < a + 1.0 {
        let (mut ap, mut del) = (a, 1.0 / a);
        let mut sum = del;
        for _ in 0..1_000_000 {
            ap += 1.0;
            del *= x / ap;
            sum += del;
            if del.abs() < sum.abs() * 1e-16 {
                break;
            }
        }
        (sum * front).min(1.0)
    } else {
        const TINY: f64 = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / TINY;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..1_000_000 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < TINY {
                d = TINY;
            }
            c = b + an / c;
            if c.abs() < TINY {
                c = TINY;
            }
            d = 1.0 / d;
            let del = d * c;
            h *= del;
            if (del - 1.0).abs() < 1e-16 {
                break;
            }
        }
        (1.0 - front * h).max(0.0)
    }
}

/// E[max(X_1, ..., X_{n-1}, X_n + lag)] for iid gamma X of shape `shape` and scale `scale`
/// (n >= 1; `lag` >= 0 is the late rank's delay, 0 without one): the integral over x >= 0 of
/// P(max > x) = 1 - F(x)^(n-1) F(x - lag). The integrand is 1 wherever a factor is 0: below
/// `lag`, and (to 1e-30) below 12 standard deviations under the mean; the rest, up to where
/// 1 - F < 1e-15, by Simpson's rule on 4,000 panels (so that a narrow distribution far from 0
/// is resolved as finely as a wide one).
pub(crate) fn expected_max(n: usize, shape: f64, scale: f64, lag: f64) -> f64 {
    assert!(n >= 1 && shape > 0.0 && scale > 0.0 && lag >= 0.0);
    let f = |x: f64| gamma_p(shape, x / scale);
    let (mean, sd) = (shape * scale, shape.sqrt() * scale);
    let mut top = mean + 10.0 * sd;
    while 1.0 - f(top) > 1e-15 {
        top += 10.0 * sd;
    }
    let lo = lag.max(mean - 12.0 * sd);
    let hi = lag + top;
    let g = |x: f64| 1.0 - f(x).powi(n as i32 - 1) * f(x - lag);
    const N: usize = 4000;
    let h = (hi - lo) / N as f64;
    let mut s = g(lo) + g(hi);
    for i in 1..N {
        s += g(lo + i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
    }
    lo + s * h / 3.0
}

/// Where the ranks' hosts meet again (see the module comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostSync {
    /// Hosts leave every collective together: waiting per collective only.
    Collective,
    /// Hosts meet only at the start of each iteration: asynchronous launches (verifybench's
    /// eager replay).
    Iteration,
}

/// What one rank's host spends between two collectives, as the model needs it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Stretch {
    /// Launch index (into the replay's launches) of the collective that ends the stretch.
    pub(crate) launch: usize,
    /// Drawn gap units (gamma gaps of one scale) in the stretch: launches (per op) or layer
    /// starts (per layer).
    pub(crate) units: u32,
    /// Measured gaps in the stretch, the same on every rank, us.
    pub(crate) fixed_us: f64,
    /// Layer starts in the stretch: the late rank's lag counts once per layer.
    pub(crate) layer_starts: u32,
}

/// The stretches of host time before each collective of `launches`.
pub(crate) fn stretches(gaps: &HostGaps, launches: &[Launch]) -> Vec<Stretch> {
    let mut out = vec![];
    let mut cur = Stretch::default();
    for (i, l) in launches.iter().enumerate() {
        cur.layer_starts += l.segment_starts;
        cur.units += match gaps.per {
            GapPer::Op => 1,
            GapPer::Layer => l.segment_starts,
        };
        if let GapSource::Measured(v) = &gaps.source {
            cur.fixed_us += l.host_ops.clone().map(|k| v[k]).sum::<f64>();
        }
        if l.collective {
            cur.launch = i;
            out.push(std::mem::take(&mut cur));
        }
    }
    out
}

/// Each rank's own measured gaps summed per stretch ([`GapSource::MeasuredPerRank`]): one
/// entry per collective of `launches`, each with one sum per rank; empty for other sources.
fn per_rank_fixed(gaps: &HostGaps, launches: &[Launch]) -> Vec<Vec<f64>> {
    let GapSource::MeasuredPerRank(v) = &gaps.source else {
        return vec![];
    };
    let mut out = vec![];
    let mut cur = vec![0.0; v.len()];
    for l in launches {
        for (r, g) in v.iter().enumerate() {
            cur[r] += l.host_ops.clone().map(|k| g[k]).sum::<f64>();
        }
        if l.collective {
            out.push(std::mem::replace(&mut cur, vec![0.0; v.len()]));
        }
    }
    out
}

/// The modeled waiting at one collective.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct CollectiveWait {
    /// Launch index of the collective.
    pub(crate) launch: usize,
    /// Expected arrival of the last rank after the previous collective, us.
    pub(crate) expected_last_us: f64,
    /// Expected waiting averaged over the ranks, us.
    pub(crate) mean_wait_us: f64,
    /// Expected waiting of a rank that is not late (the most any rank waits), us.
    pub(crate) on_time_rank_wait_us: f64,
}

/// The waiting model's prediction for one verify (modeled).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct WaitingPrediction {
    pub(crate) nranks: usize,
    /// Per collective, in launch order (empty for [`HostSync::Iteration`], which is simulated).
    pub(crate) per_collective: Vec<CollectiveWait>,
    /// Transfer per verify (the cost model's device time of the collectives), us.
    pub(crate) transfer_us: f64,
    /// Waiting per verify averaged over ranks, us.
    pub(crate) waiting_us: f64,
    /// Waiting per verify of every rank, us.
    pub(crate) waiting_per_rank_us: Vec<f64>,
    /// Standard error of `waiting_us` (Monte-Carlo; 0 for the exact model).
    pub(crate) waiting_se_us: f64,
    /// Transfer + waiting: the in-collective time per verify a profiler shows, averaged over
    /// ranks, us.
    pub(crate) in_collective_us: f64,
    /// How it was computed, for the notes of a modeled result.
    pub(crate) method: String,
    /// The simulated verify from the iteration's start to the end of the last rank's last
    /// kernel (host gaps, the GPU waiting for its host, and waiting in collectives all in it),
    /// mean over iterations, us; `None` for [`HostSync::Collective`], which has no timeline.
    pub(crate) span_us: Option<f64>,
    /// The rank last to start the most collectives in the simulation, with how often and its
    /// median lag behind the earliest start (only collectives with one strictly last rank);
    /// `None` when no collective had one, or for [`HostSync::Collective`].
    pub(crate) last_rank: Option<(usize, usize, usize, f64)>,
}

/// [`HostSync::Collective`]: expected waiting per collective by order statistics; `transfer_us`
/// is the cost model's device time of each collective, in launch order. Graph replay has no
/// host gaps and so no waiting. `gaps` must have been validated for `nranks`.
pub(crate) fn predict_resync(
    gaps: &HostGaps,
    launches: &[Launch],
    transfer_us: &[f64],
    nranks: usize,
    graph: bool,
) -> WaitingPrediction {
    let st = stretches(gaps, launches);
    assert_eq!(
        st.len(),
        transfer_us.len(),
        "one transfer time per collective"
    );
    let n = nranks.max(1);
    let late = gaps.late.filter(|_| !graph);
    let mut per = vec![];
    let mut per_rank = vec![0.0; n];
    let mut memo: Vec<((u32, u32), (f64, f64))> = vec![];
    let own = if graph {
        vec![]
    } else {
        per_rank_fixed(gaps, launches)
    };
    for (ci, s) in st.iter().enumerate() {
        let lag = late.map_or(0.0, |l| l.us * s.layer_starts as f64);
        // Each rank's own measured gaps: the arrivals are known, nothing to draw; every rank
        // waits for the last one.
        if let Some(fixed) = own.get(ci) {
            let arrive: Vec<f64> = (0..n)
                .map(|r| {
                    fixed.get(r).copied().unwrap_or(0.0)
                        + if late.is_some_and(|l| l.rank == r) {
                            lag
                        } else {
                            0.0
                        }
                })
                .collect();
            let last = arrive.iter().cloned().fold(f64::MIN, f64::max);
            let waits: Vec<f64> = arrive.iter().map(|a| last - a).collect();
            for (w, x) in per_rank.iter_mut().zip(&waits) {
                *w += x;
            }
            per.push(CollectiveWait {
                launch: s.launch,
                expected_last_us: last,
                mean_wait_us: waits.iter().sum::<f64>() / n as f64,
                on_time_rank_wait_us: waits.iter().cloned().fold(0.0, f64::max),
            });
            continue;
        }
        let drawn = match (&gaps.source, graph) {
            (GapSource::Drawn(g), false) => Some(*g),
            _ => None,
        };
        // (expected last arrival, expected arrival of an on-time rank), measured gaps aside:
        // they are the same on every rank and shift every arrival alike.
        let (last, on_time) = match drawn {
            Some(g) if s.units > 0 && g.jitter_us > 0.0 => {
                let key = (s.units, s.layer_starts);
                match memo.iter().find(|(k, _)| *k == key) {
                    Some((_, v)) => *v,
                    None => {
                        let (k, th) = gamma_params(g.mean_us, g.jitter_us);
                        let shape = k * s.units as f64;
                        let v = (expected_max(n, shape, th, lag), shape * th);
                        memo.push((key, v));
                        v
                    }
                }
            }
            Some(g) => {
                let d = g.mean_us * s.units as f64;
                (d + lag, d)
            }
            None if graph => (0.0, 0.0),
            None => (lag, 0.0),
        };
        let on_time_wait = last - on_time;
        let late_wait = (last - on_time - lag).max(0.0);
        let mean = match late {
            Some(_) => (on_time_wait * (n - 1) as f64 + late_wait) / n as f64,
            None => on_time_wait,
        };
        for (r, w) in per_rank.iter_mut().enumerate() {
            *w += if late.is_some_and(|l| l.rank == r) {
                late_wait
            } else {
                on_time_wait
            };
        }
        per.push(CollectiveWait {
            launch: s.launch,
            expected_last_us: last + if graph { 0.0 } else { s.fixed_us },
            mean_wait_us: mean,
            on_time_rank_wait_us: on_time_wait,
        });
    }
    let transfer: f64 = transfer_us.iter().sum();
    let waiting: f64 = per.iter().map(|c| c.mean_wait_us).sum();
    WaitingPrediction {
        nranks: n,
        per_collective: per,
        transfer_us: transfer,
        waiting_us: waiting,
        waiting_per_rank_us: per_rank,
        waiting_se_us: 0.0,
        in_collective_us: transfer + waiting,
        span_us: None,
        last_rank: None,
        method: format!(
            "modeled: hosts re-synchronised at every collective; per collective E[last arrival] - E[arrival] from order statistics of the gamma sums of the gaps ({}), {}",
            if graph { "graph replay: no host gaps" } else { "eager replay" },
            gaps.describe()
        ),
    }
}

/// The GPU work of one launch of a replay, for [`simulate`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GpuWork {
    /// Device time of the launch (a compute kernel's time, or a collective's transfer), us.
    pub(crate) us: f64,
}

/// [`HostSync::Iteration`]: replays the GPU timeline of `iterations` iterations with the gaps
/// `gaps` draws (the launcher's own generator, so the same seed gives the same gaps), in
/// parallel, and averages. Per rank and launch: the host launches at the sum of its gaps
/// since the iteration began; a kernel starts when launched and its GPU is free; a collective
/// starts on each rank at that point and ends `work.us` after the last rank's start. Waiting =
/// end - transfer - own start. `work` has one entry per launch.
pub(crate) fn simulate(
    gaps: &HostGaps,
    launches: &[Launch],
    work: &[GpuWork],
    nranks: usize,
    iterations: u64,
) -> WaitingPrediction {
    assert_eq!(launches.len(), work.len(), "one GPU work entry per launch");
    let n = nranks.max(1);
    type Iter = (Vec<f64>, f64, Vec<(usize, f64)>);
    let sims: Vec<Iter> = (0..iterations)
        .into_par_iter()
        .map(|it| {
            let g: Vec<Vec<f64>> = (0..n)
                .map(|r| gaps.iteration_gaps(false, r, it, launches))
                .collect();
            let mut host = vec![0.0; n];
            let mut gpu_free = vec![0.0; n];
            let mut wait = vec![0.0; n];
            let mut start = vec![0.0; n];
            let mut lasts = vec![];
            for (j, (l, w)) in launches.iter().zip(work).enumerate() {
                for r in 0..n {
                    host[r] += g[r][j];
                    start[r] = f64::max(host[r], gpu_free[r]);
                }
                if l.collective {
                    let last = start.iter().cloned().fold(f64::MIN, f64::max);
                    let first = start.iter().cloned().fold(f64::MAX, f64::min);
                    let at_last: Vec<usize> = (0..n).filter(|&r| start[r] == last).collect();
                    if let [r] = at_last.as_slice() {
                        lasts.push((*r, last - first));
                    }
                    for r in 0..n {
                        wait[r] += last - start[r];
                        gpu_free[r] = last + w.us;
                    }
                } else {
                    for r in 0..n {
                        gpu_free[r] = start[r] + w.us;
                    }
                }
            }
            let span = (0..n)
                .map(|r| f64::max(gpu_free[r], host[r]))
                .fold(0.0, f64::max);
            (wait, span, lasts)
        })
        .collect();
    let span_us = sims.iter().map(|s| s.1).sum::<f64>() / sims.len().max(1) as f64;
    let mut counts = vec![0usize; n];
    let mut total_last = 0;
    for (_, _, lasts) in &sims {
        for (r, _) in lasts {
            counts[*r] += 1;
            total_last += 1;
        }
    }
    let last_rank = (0..n)
        .max_by_key(|&r| counts[r])
        .filter(|&r| counts[r] > 0)
        .map(|r| {
            let mut lags: Vec<f64> = sims
                .iter()
                .flat_map(|s| s.2.iter().filter(|(x, _)| *x == r).map(|(_, l)| *l))
                .collect();
            lags.sort_by(f64::total_cmp);
            (r, counts[r], total_last, lags[lags.len() / 2])
        });
    let per_iter: Vec<Vec<f64>> = sims.into_iter().map(|s| s.0).collect();
    let its = per_iter.len().max(1) as f64;
    let per_rank: Vec<f64> = (0..n)
        .map(|r| per_iter.iter().map(|w| w[r]).sum::<f64>() / its)
        .collect();
    let means: Vec<f64> = per_iter
        .iter()
        .map(|w| w.iter().sum::<f64>() / n as f64)
        .collect();
    let (m, sd) = crate::measure::interval::mean_sd(&means);
    let transfer: f64 = launches
        .iter()
        .zip(work)
        .filter(|(l, _)| l.collective)
        .map(|(_, w)| w.us)
        .sum();
    WaitingPrediction {
        nranks: n,
        per_collective: vec![],
        transfer_us: transfer,
        waiting_us: m,
        waiting_per_rank_us: per_rank,
        waiting_se_us: sd / its.sqrt(),
        in_collective_us: transfer + m,
        span_us: Some(span_us),
        last_rank,
        method: format!(
            "modeled: asynchronous launches, hosts meeting only at the start of each iteration; GPU timeline simulated over {iterations} iterations (Monte-Carlo, standard error {:.2} us), {}",
            sd / its.sqrt(),
            gaps.describe()
        ),
    }
}

/// Default Monte-Carlo iterations of [`predict`] with [`HostSync::Iteration`].
pub(crate) const DEFAULT_ITERATIONS: u64 = 2000;

/// The waiting of one replay, by the model `sync` names: graph replay waits for nothing (no
/// host gaps); [`HostSync::Collective`] is [`predict_resync`] (transfer = the `work` of the
/// collectives); [`HostSync::Iteration`] is [`simulate`] over `iterations` iterations. `work`
/// has one entry per launch (`gaps::schedule_launches`): a compute kernel's device time, or a
/// collective's transfer.
pub(crate) fn predict(
    gaps: &HostGaps,
    launches: &[Launch],
    work: &[GpuWork],
    nranks: usize,
    graph: bool,
    sync: HostSync,
    iterations: u64,
) -> WaitingPrediction {
    assert_eq!(launches.len(), work.len(), "one GPU work entry per launch");
    let transfer: Vec<f64> = launches
        .iter()
        .zip(work)
        .filter(|(l, _)| l.collective)
        .map(|(_, w)| w.us)
        .collect();
    match sync {
        _ if graph || gaps.is_none() => predict_resync(gaps, launches, &transfer, nranks, graph),
        HostSync::Collective => predict_resync(gaps, launches, &transfer, nranks, false),
        HostSync::Iteration => simulate(gaps, launches, work, nranks, iterations),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::gaps::{launches_of, HostGap, HostGapRequest, LateRank};
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use rand_distr::{Distribution, Gamma};

    #[test]
    fn incomplete_gamma_against_closed_forms() {
        assert!((ln_gamma(5.0) - 24f64.ln()).abs() < 1e-13);
        assert!((ln_gamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-13);
        assert!((ln_gamma(101.0) - (1..=100).map(|i| (i as f64).ln()).sum::<f64>()).abs() < 1e-9);
        for x in [0.01, 0.5, 1.0, 3.0, 20.0] {
            // Shape 1: exponential. Shape 3: 1 - e^-x (1 + x + x^2/2).
            assert!((gamma_p(1.0, x) - (1.0 - (-x).exp())).abs() < 1e-13, "{x}");
            let p3 = 1.0 - (-x).exp() * (1.0 + x + x * x / 2.0);
            assert!((gamma_p(3.0, x) - p3).abs() < 1e-13, "{x}");
        }
        // Large shapes: near the normal, P(a, a) -> 1/2.
        assert!((gamma_p(1e4, 1e4) - 0.5).abs() < 3e-3);
        assert_eq!(gamma_p(2.0, 0.0), 0.0);
    }

    /// E[max] - E[X] by Monte-Carlo: `draws` sets of n gammas (one late by `lag`), in parallel
    /// chunks of their own seeded streams.
    fn mc_wait(n: usize, shape: f64, scale: f64, lag: f64, draws: usize) -> f64 {
        let chunks = 64;
        let per = draws / chunks;
        let sum: f64 = (0..chunks)
            .into_par_iter()
            .map(|c| {
                let mut rng = ChaCha8Rng::seed_from_u64(1000 + c as u64);
                let g = Gamma::new(shape, scale).unwrap();
                let mut s = 0.0;
                for _ in 0..per {
                    let mut mx = g.sample(&mut rng) + lag;
                    for _ in 1..n {
                        mx = f64::max(mx, g.sample(&mut rng));
                    }
                    s += mx;
                }
                s
            })
            .sum();
        sum / (per * chunks) as f64 - shape * scale
    }

    #[test]
    fn order_statistics_agree_with_monte_carlo() {
        // 200:50 gaps: shape 16, scale 12.5; one gap per stretch and a layer of 4 (shape 64).
        let (k, th) = gamma_params(200.0, 50.0);
        // Also: sd above the mean (shape 0.44), and a narrow gap far from 0 (200:2, shape
        // 10,000) with a late rank.
        // (n, shape, scale, lag, draws, tolerance): the cases at 200,000 draws and 1%,
        // the extra ones at 100,000 and 1.5% (3 standard errors of the simulation).
        let (k6, th6) = gamma_params(200.0, 300.0);
        for (n, shape, scale, lag, draws, tol) in [
            (2, k, th, 0.0, 200_000, 0.01),
            (4, k, th, 0.0, 200_000, 0.01),
            (8, k, th, 0.0, 200_000, 0.01),
            (8, 4.0 * k, th, 0.0, 200_000, 0.01),
            (8, k, th, 100.0, 200_000, 0.01),
            (2, k, th, 30.0, 200_000, 0.01),
            (2, k6, th6, 0.0, 100_000, 0.015),
            (4, k6, th6, 50.0, 100_000, 0.015),
            (8, 10_000.0, 0.02, 0.0, 100_000, 0.015),
            (8, 10_000.0, 0.02, 3.0, 100_000, 0.015),
        ] {
            let exact = expected_max(n, shape, scale, lag) - shape * scale;
            let mc = mc_wait(n, shape, scale, lag, draws);
            assert!(
                (exact / mc - 1.0).abs() < tol,
                "n {n} shape {shape} lag {lag}: {exact} vs {mc}"
            );
        }
        // Exponential gaps (sd = mean): E[max of n] = mean H_n exactly.
        let h8: f64 = (1..=8).map(|i| 1.0 / i as f64).sum();
        assert!((expected_max(8, 1.0, 100.0, 0.0) - 100.0 * h8).abs() < 1e-3);
        // Two normals-ish: for n = 2 and large shape, E|X1 - X2| / 2 -> sd / sqrt(pi).
        let w2 = expected_max(2, 400.0, 0.5, 0.0) - 200.0;
        assert!(
            (w2 / (10.0 / std::f64::consts::PI.sqrt()) - 1.0).abs() < 0.01,
            "{w2}"
        );
    }

    fn ops(layers: u64) -> Vec<(Option<u64>, bool)> {
        let mut v = vec![(None, true)];
        for l in 0..layers {
            v.extend([
                (Some(l), false),
                (Some(l), true),
                (Some(l), false),
                (Some(l), true),
            ]);
        }
        v.extend([(None, false), (None, true)]);
        v
    }

    fn hg(gap: &str, late: Option<&str>, per: GapPer, n: usize, nops: usize) -> HostGaps {
        HostGaps::from_request(
            &HostGapRequest {
                gap: Some(gap.parse::<HostGap>().unwrap()),
                per: Some(per),
                late: late.map(|l| l.parse::<LateRank>().unwrap()),
                ..Default::default()
            },
            n,
            nops,
        )
        .unwrap()
    }

    /// The simulator with hosts forced together at every collective must reproduce the
    /// order-statistics model: one replay loop, the same generator.
    fn simulate_resync(g: &HostGaps, launches: &[Launch], n: usize, iters: u64) -> f64 {
        let total: f64 = (0..iters)
            .into_par_iter()
            .map(|it| {
                let gs: Vec<Vec<f64>> = (0..n)
                    .map(|r| g.iteration_gaps(false, r, it, launches))
                    .collect();
                let mut t = vec![0.0; n];
                let mut w = 0.0;
                for (j, l) in launches.iter().enumerate() {
                    for r in 0..n {
                        t[r] += gs[r][j];
                    }
                    if l.collective {
                        let last = t.iter().cloned().fold(f64::MIN, f64::max);
                        w += t.iter().map(|x| last - x).sum::<f64>() / n as f64;
                        t.iter_mut().for_each(|x| *x = 0.0);
                    }
                }
                w
            })
            .sum();
        total / iters as f64
    }

    #[test]
    fn per_verify_waiting_matches_a_replay_of_the_generator() {
        let o = ops(3);
        for (n, per, late, with_compute) in [
            (2, GapPer::Op, None, false),
            (4, GapPer::Op, None, true),
            (8, GapPer::Layer, Some("0:100"), true),
            (8, GapPer::Op, Some("3:50"), false),
        ] {
            let g = hg("200:50", late, per, n, o.len());
            let l = launches_of(&o, with_compute);
            let ncoll = l.iter().filter(|x| x.collective).count();
            let p = predict_resync(&g, &l, &vec![7.0; ncoll], n, false);
            let sim = simulate_resync(&g, &l, n, 5_000);
            assert!(
                (p.waiting_us / sim - 1.0).abs() < 0.02,
                "{n} {per:?} {late:?}: {} vs {sim}",
                p.waiting_us
            );
            assert!((p.in_collective_us - p.waiting_us - 7.0 * ncoll as f64).abs() < 1e-9);
            let mean_rank = p.waiting_per_rank_us.iter().sum::<f64>() / n as f64;
            assert!((mean_rank - p.waiting_us).abs() < 1e-6);
            // Graph replay: no host gaps, no waiting.
            let gp = predict_resync(&g, &l, &vec![7.0; ncoll], n, true);
            assert_eq!(gp.waiting_us, 0.0);
        }
    }

    #[test]
    fn a_late_rank_without_jitter_costs_the_others_its_lag() {
        let o = ops(2);
        let g = hg("100", Some("1:40"), GapPer::Op, 4, o.len());
        let l = launches_of(&o, false);
        let p = predict_resync(&g, &l, &[5.0; 6], 4, false);
        // Layer starts fall before 4 of the 6 collectives (embedding, layer 0, layer 1, head).
        assert_eq!(p.waiting_per_rank_us, [160.0, 0.0, 160.0, 160.0]);
        assert!((p.waiting_us - 120.0).abs() < 1e-12);
        assert!(p.method.starts_with("modeled"));
    }

    #[test]
    fn each_ranks_own_measured_gaps_by_hand() {
        // 2 ranks, ops(1): collectives at ops 0, 2, 4, 6; rank 0 spends 10 us before every op,
        // rank 1 (the slow host) 30 us. Stretch sums: rank 0 10, 20, 20, 20; rank 1 30, 60,
        // 60, 60.
        let o = ops(1);
        let n = o.len();
        let g = HostGaps::from_request(
            &HostGapRequest {
                from_schedule: Some((vec![vec![10.0; n], vec![30.0; n]], "s.json".into())),
                ..Default::default()
            },
            2,
            n,
        )
        .unwrap();
        let l = launches_of(&o, false);
        // Hosts re-synchronised: rank 0 waits 20 + 40 + 40 + 40.
        let p = predict_resync(&g, &l, &[5.0; 4], 2, false);
        assert_eq!(p.waiting_per_rank_us, [140.0, 0.0]);
        assert_eq!(p.waiting_us, 70.0);
        assert_eq!(p.per_collective[1].expected_last_us, 60.0);
        // Asynchronous: hosts at rank 0 10, 30, 50, 70 and rank 1 30, 90, 150, 210; rank 0's
        // GPU is free at 35, 95, 155 after each collective of 5 us, so it waits 20, 55, 55, 55.
        let s = simulate(&g, &l, &[GpuWork { us: 5.0 }; 4], 2, 3);
        assert_eq!(s.waiting_per_rank_us, [185.0, 0.0]);
        assert_eq!(s.waiting_se_us, 0.0);
        assert_eq!(s.last_rank.map(|x| (x.0, x.1)), Some((1, 12)));
        // Graph replay: no host gaps, no waiting.
        let gp = predict_resync(&g, &l, &[5.0; 4], 2, true);
        assert_eq!(gp.waiting_us, 0.0);
    }

    #[test]
    fn asynchronous_timeline_by_hand_and_waiting_that_accumulates() {
        // Deterministic: 2 ranks, 3 collectives of 5 us, gaps 100 us, rank 1 late by 40 us per
        // layer (layers start before collectives 0, 1 and 3 of ops(1)'s comm launches: the
        // embedding, layer 0's first, the head).
        let o = ops(1);
        let g = hg("100", Some("1:40"), GapPer::Op, 2, o.len());
        let l = launches_of(&o, false);
        assert_eq!(l.len(), 4);
        let w = vec![GpuWork { us: 5.0 }; 4];
        let s = simulate(&g, &l, &w, 2, 4);
        // Host times: rank 0 at 100, 200, 300, 400; rank 1 at 140, 280, 380, 520.
        // Rank 0 starts at 100, max(200, 145), max(300, 285), max(400, 385): waits 40+80+80+120.
        assert_eq!(s.waiting_per_rank_us, [320.0, 0.0]);
        assert_eq!(s.waiting_se_us, 0.0);
        // With jitter, asynchronous waiting exceeds the re-synchronised bound.
        let o = ops(8);
        let g = hg("200:50", None, GapPer::Op, 2, o.len());
        let l = launches_of(&o, false);
        let ncoll = l.len();
        let a = simulate(&g, &l, &vec![GpuWork { us: 7.0 }; ncoll], 2, 4000);
        let b = predict_resync(&g, &l, &vec![7.0; ncoll], 2, false);
        assert!(
            a.waiting_us > 1.5 * b.waiting_us,
            "{} vs {}",
            a.waiting_us,
            b.waiting_us
        );
        assert!(a.waiting_se_us > 0.0 && a.waiting_se_us < 0.05 * a.waiting_us);
        // The dispatcher: the same numbers, and none in graph replay.
        let w = vec![GpuWork { us: 7.0 }; ncoll];
        let via = predict(&g, &l, &w, 2, false, HostSync::Iteration, 4000);
        assert_eq!(via.waiting_us, a.waiting_us);
        let via = predict(&g, &l, &w, 2, false, HostSync::Collective, 0);
        assert_eq!(via.waiting_us, b.waiting_us);
        let graph = predict(&g, &l, &w, 2, true, HostSync::Iteration, 4000);
        assert_eq!(
            (graph.waiting_us, graph.transfer_us),
            (0.0, 7.0 * ncoll as f64)
        );
    }
}
