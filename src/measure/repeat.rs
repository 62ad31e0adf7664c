//! Fresh repetitions (`--fresh-runs R`): the same measurement in R fresh sets of workers, and
//! what the R medians say about run-to-run noise.
//!
//! One process's standard error only sees the variation inside that process; fresh processes
//! land on other CPU cores, other NCCL channel layouts and other clock states, and on two H200s
//! identical settings have spread 2% (graph) to 45% (eager) between processes. So the headline
//! of a repeated measurement is the median of the repetitions' medians, with their min-max and
//! a 95% interval:
//!
//! - 6 or more repetitions: the distribution-free interval for the median of the repetitions'
//!   distribution, `[x_(k), x_(R+1-k)]` with binomial coverage of at least 95% (it assumes only
//!   independent repetitions; below 6 even the full range covers less than 95%);
//! - 2 to 5: the t interval on the mean of the repetition medians (it assumes they scatter
//!   normally, for which mean and median coincide). Wide on purpose: 3 repetitions give
//!   mean +- 2.48 standard deviations.
//!
//! **Cold start.** A first repetition can pay for a cold page cache, a GPU clock ramping up or
//! a first NCCL topology search. It is flagged, and kept out of the statistics (still recorded),
//! when it lies outside the 99% prediction interval of the others (mean +- t_0.995 s
//! sqrt(1 + 1/m), m the others' count: a false alarm 1 time in 100 when repetitions scatter
//! normally) and differs from their mean by more than 1% (smaller differences do not matter
//! even when the others agree to the last digit). It needs at least 2 others; with 2 the
//! interval is so wide (t = 63.7) that only gross cold starts show; 4 or more repetitions are
//! what makes the test useful.

use super::interval::{mean_sd, median_order_interval, t_interval, t_quantile, Level};
use super::stats::quantile_sorted;
pub(crate) use crate::record::vocab::{ColdStart, RepInterval, Repetitions};

/// Smallest relative difference a cold start must have from the others.
pub(crate) const COLD_START_MIN_REL: f64 = 0.01;

/// Whether the first of `medians` is a cold start, and why (see the module comment).
pub(crate) fn cold_start(medians: &[f64]) -> Option<ColdStart> {
    if medians.len() < 3 {
        return None;
    }
    let (x0, rest) = (medians[0], &medians[1..]);
    let (m, s) = mean_sd(rest);
    let r = rest.len() as f64;
    let limit = t_quantile(Level::P99, rest.len() - 1) * s * (1.0 + 1.0 / r).sqrt();
    let d = x0 - m;
    if d.abs() > limit && d.abs() > COLD_START_MIN_REL * m {
        Some(ColdStart {
            value_us: x0,
            reason: format!(
                "the first repetition ({x0:.1} us) is {:.1}% {} the mean of the other {} ({m:.1} us), outside their 99% prediction interval (+-{limit:.1} us): a cold start, left out of the statistics",
                d.abs() / m * 100.0,
                if d > 0.0 { "above" } else { "below" },
                rest.len()
            ),
        })
    } else {
        None
    }
}

impl Repetitions {
    /// Summarises the medians of R repetitions (in run order). Errors on none or a
    /// non-finite value.
    pub(crate) fn from_medians(medians: &[f64]) -> Result<Repetitions, String> {
        if medians.is_empty() {
            return Err("no repetitions to summarise".into());
        }
        if let Some(x) = medians.iter().find(|x| !x.is_finite() || **x <= 0.0) {
            return Err(format!("a repetition's median is {x} us"));
        }
        let cold = cold_start(medians);
        let used: Vec<f64> = if cold.is_some() {
            medians[1..].to_vec()
        } else {
            medians.to_vec()
        };
        let mut s = used.clone();
        s.sort_by(f64::total_cmp);
        let interval = match median_order_interval(&s) {
            Some((lo, hi, c)) => Some(RepInterval {
                lo_us: lo,
                hi_us: hi,
                method: "order statistics".into(),
                coverage: c,
            }),
            None => t_interval(&s).map(|(lo, hi)| RepInterval {
                lo_us: lo,
                hi_us: hi,
                method: "t".into(),
                coverage: 0.95,
            }),
        };
        Ok(Repetitions {
            repetitions_us: medians.to_vec(),
            used: s.len(),
            median_us: quantile_sorted(&s, 0.5),
            min_us: s[0],
            max_us: s[s.len() - 1],
            interval,
            cold_start: cold,
        })
    }

    /// One line for the output: median, min-max, interval, cold start.
    pub(crate) fn line(&self) -> String {
        let mut o = format!(
            "median of {} fresh runs {:.1} us (min-max {:.1}-{:.1} us",
            self.used, self.median_us, self.min_us, self.max_us
        );
        match &self.interval {
            Some(i) if i.method == "t" => o.push_str(&format!(
                ", 95% t interval of the mean {:.1}-{:.1} us",
                i.lo_us, i.hi_us
            )),
            Some(i) => o.push_str(&format!(
                ", {:.1}% order-statistic interval of the median {:.1}-{:.1} us",
                i.coverage * 100.0,
                i.lo_us,
                i.hi_us
            )),
            None => o.push_str(", one run: no interval"),
        }
        o.push(')');
        if let Some(c) = &self.cold_start {
            o.push_str("; ");
            o.push_str(&c.reason);
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use rand_distr::{Distribution, Normal};

    #[test]
    fn summary_of_few_repetitions_by_hand() {
        let r = Repetitions::from_medians(&[910.0, 901.0, 920.0]).unwrap();
        assert_eq!(
            (r.used, r.median_us, r.min_us, r.max_us),
            (3, 910.0, 901.0, 920.0)
        );
        let i = r.interval.as_ref().unwrap();
        // mean 910.333, s = 9.504, t(2) = 4.3027.
        let (m, s) = mean_sd(&[910.0, 901.0, 920.0]);
        let h = 4.3027 * s / 3f64.sqrt();
        assert!((i.lo_us - (m - h)).abs() < 1e-9 && (i.hi_us - (m + h)).abs() < 1e-9);
        assert_eq!(i.method, "t");
        assert!(r.cold_start.is_none());
        let one = Repetitions::from_medians(&[5.0]).unwrap();
        assert!(one.interval.is_none() && one.line().contains("no interval"));
        assert!(Repetitions::from_medians(&[]).is_err());
        assert!(Repetitions::from_medians(&[1.0, f64::NAN]).is_err());
        // Seven repetitions: order statistics, k = 1 (coverage 1 - 2/128).
        let r = Repetitions::from_medians(&[7.0, 3.0, 5.0, 1.0, 2.0, 6.0, 4.0]).unwrap();
        let i = r.interval.unwrap();
        assert_eq!(
            (i.lo_us, i.hi_us, i.method.as_str()),
            (1.0, 7.0, "order statistics")
        );
        assert!((i.coverage - (1.0 - 2.0 / 128.0)).abs() < 1e-12);
    }

    #[test]
    fn cold_start_is_flagged_kept_and_left_out() {
        let r = Repetitions::from_medians(&[1404.0, 960.0, 954.0, 965.0, 958.0]).unwrap();
        let c = r.cold_start.as_ref().expect("a cold start");
        assert_eq!(c.value_us, 1404.0);
        assert!(
            c.reason.contains("above") && c.reason.contains("other 4"),
            "{}",
            c.reason
        );
        assert_eq!(r.repetitions_us.len(), 5);
        assert_eq!((r.used, r.max_us), (4, 965.0));
        assert!(r.line().contains("cold start"));
        // Within the others' scatter, or below 1%: not a cold start.
        assert!(cold_start(&[962.0, 960.0, 954.0, 965.0, 958.0]).is_none());
        assert!(cold_start(&[1005.0, 1000.0, 1000.0, 1000.0]).is_none());
        assert!(cold_start(&[1020.0, 1000.0, 1000.0, 1000.0]).is_some());
        assert!(cold_start(&[2000.0, 1000.0]).is_none());
        // Serialises with every field, and an old record without them reads as empty.
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["repetitions_us"].as_array().unwrap().len(), 5);
        let empty: Repetitions = serde_json::from_str("{}").unwrap();
        assert_eq!(empty, Repetitions::default());
    }

    /// Share of `trials` simulated sets of `r` repetitions for which `hit` holds.
    fn rate(r: usize, trials: usize, seed: u64, mut hit: impl FnMut(&[f64]) -> bool) -> f64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let noise = Normal::new(0.0, 0.01).unwrap();
        let mut n = 0;
        for _ in 0..trials {
            let v: Vec<f64> = (0..r)
                .map(|_| 1000.0 * (1.0 + noise.sample(&mut rng)))
                .collect();
            n += hit(&v) as usize;
        }
        n as f64 / trials as f64
    }

    #[test]
    fn intervals_cover_the_truth_95_percent_of_the_time() {
        // Normal scatter around 1000 (mean = median): t intervals for 2-5 repetitions,
        // order statistics from 6. Cold starts are off (1% minimum difference at 1% noise would
        // remove some first repetitions; here the interval methods alone are under test).
        for r in 2..=12 {
            let cover = rate(r, 4000, r as u64, |v| {
                let mut s = v.to_vec();
                s.sort_by(f64::total_cmp);
                let (lo, hi) = median_order_interval(&s)
                    .map(|(a, b, _)| (a, b))
                    .unwrap_or_else(|| t_interval(&s).unwrap());
                lo <= 1000.0 && 1000.0 <= hi
            });
            // 4000 trials: a standard error of 0.35%; order statistics cover at least 95%.
            assert!((0.935..=0.995).contains(&cover), "r {r}: {cover}");
        }
        // Skewed scatter (lognormal): the order-statistic interval still covers the median.
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let noise = Normal::new(0.0, 0.3).unwrap();
        let mut hits = 0;
        for _ in 0..4000 {
            let mut s: Vec<f64> = (0..9)
                .map(|_| 1000.0 * f64::exp(noise.sample(&mut rng)))
                .collect();
            s.sort_by(f64::total_cmp);
            let (lo, hi, _) = median_order_interval(&s).unwrap();
            hits += (lo <= 1000.0 && 1000.0 <= hi) as usize;
        }
        assert!(hits as f64 / 4000.0 > 0.945, "{hits}");
    }

    #[test]
    fn cold_start_false_alarms_and_power_by_simulation() {
        for r in [4, 6, 10] {
            let fa = rate(r, 4000, 100 + r as u64, |v| cold_start(v).is_some());
            assert!(fa < 0.02, "r {r}: false alarms {fa}");
        }
        // A first repetition 10% slow under 1% noise.
        let power = |r: usize| {
            rate(r, 2000, 200 + r as u64, |v| {
                let mut v = v.to_vec();
                v[0] *= 1.10;
                cold_start(&v).is_some()
            })
        };
        let (p5, p8) = (power(5), power(8));
        assert!(p5 > 0.7 && p8 > 0.97, "{p5} {p8}");
    }
}
