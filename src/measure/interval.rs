//! Confidence intervals from few numbers: Student's t quantiles and the distribution-free
//! order-statistic interval for a median.
//!
//! Repetitions in fresh processes and sweep rounds give 2-10 numbers, not thousands, so the
//! intervals here are the small-sample ones: a t interval when the numbers are few (it assumes
//! they scatter normally), the binomial order-statistic interval for the median once there are
//! enough of them for it to reach 95% (it assumes nothing but independence).

/// Two-sided 95%: the 0.975 quantile of Student's t for 1..=30 degrees of freedom.
const T975: [f64; 30] = [
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281, 2.2010,
    2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860, 2.0796, 2.0739, 2.0687,
    2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
];

/// Two-sided 99%: the 0.995 quantile of Student's t for 1..=30 degrees of freedom.
const T995: [f64; 30] = [
    63.6567, 9.9248, 5.8409, 4.6041, 4.0321, 3.7074, 3.4995, 3.3554, 3.2498, 3.1693, 3.1058,
    3.0545, 3.0123, 2.9768, 2.9467, 2.9208, 2.8982, 2.8784, 2.8609, 2.8453, 2.8314, 2.8188, 2.8073,
    2.7969, 2.7874, 2.7787, 2.7707, 2.7633, 2.7564, 2.7500,
];

/// Two-sided confidence levels the t quantiles are tabulated for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    /// 95%: intervals.
    P95,
    /// 99%: outlier (cold-start) tests, where a false alarm discards a good repetition.
    P99,
}

impl Level {
    fn z(self) -> f64 {
        match self {
            Level::P95 => 1.959_963_985,
            Level::P99 => 2.575_829_304,
        }
    }
}

/// The two-sided `level` quantile of Student's t with `df` degrees of freedom (`df` >= 1):
/// tabulated to 30, beyond that the Cornish-Fisher expansion around the normal quantile
/// (error below 1e-4 at 31 degrees of freedom, smaller beyond).
pub(crate) fn t_quantile(level: Level, df: usize) -> f64 {
    assert!(df >= 1, "a t quantile needs at least one degree of freedom");
    let table = match level {
        Level::P95 => &T975,
        Level::P99 => &T995,
    };
    if df <= table.len() {
        return table[df - 1];
    }
    let z = level.z();
    let v = df as f64;
    z + (z.powi(3) + z) / (4.0 * v)
        + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * v * v)
        + (3.0 * z.powi(7) + 19.0 * z.powi(5) + 17.0 * z.powi(3) - 15.0 * z) / (384.0 * v.powi(3))
}

/// Mean and sample standard deviation (n - 1); the deviation is 0 for one value.
pub(crate) fn mean_sd(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let m = x.iter().sum::<f64>() / n;
    if x.len() < 2 {
        return (m, 0.0);
    }
    let var = x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1.0);
    (m, var.sqrt())
}

/// The 95% t interval for the mean of `x` (at least two values): mean +- t s / sqrt(n).
pub(crate) fn t_interval(x: &[f64]) -> Option<(f64, f64)> {
    if x.len() < 2 {
        return None;
    }
    let (m, s) = mean_sd(x);
    let h = t_quantile(Level::P95, x.len() - 1) * s / (x.len() as f64).sqrt();
    Some((m - h, m + h))
}

/// P(Binomial(n, 1/2) <= k).
fn binom_half_cdf(n: usize, k: usize) -> f64 {
    // Sum of C(n, i) / 2^n, accumulated in logs so that n in the thousands does not overflow.
    let mut ln_c = 0.0f64; // ln C(n, 0)
    let mut p = 0.0;
    for i in 0..=k.min(n) {
        if i > 0 {
            ln_c += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        p += (ln_c - n as f64 * std::f64::consts::LN_2).exp();
    }
    p.min(1.0)
}

/// The distribution-free interval for the median of the population `sorted` was drawn from:
/// `[x_(k), x_(n+1-k)]` (1-based order statistics) with the largest k whose coverage
/// 1 - 2 P(Binomial(n, 1/2) <= k - 1) is still at least 95%. Returns the interval and its
/// exact coverage, or `None` below 6 values (where even the full range covers less than 95%).
pub(crate) fn median_order_interval(sorted: &[f64]) -> Option<(f64, f64, f64)> {
    let n = sorted.len();
    let mut best = None;
    for k in 1..=n / 2 {
        let cover = 1.0 - 2.0 * binom_half_cdf(n, k - 1);
        if cover >= 0.95 {
            best = Some((sorted[k - 1], sorted[n - k], cover));
        } else {
            break;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_expansion_joins_the_table_and_tends_to_the_normal() {
        // At 30 degrees of freedom the expansion must agree with the table to 1e-3.
        let z30 = {
            let z = Level::P95.z();
            let v = 30.0;
            z + (z.powi(3) + z) / (4.0 * v)
                + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * v * v)
                + (3.0 * z.powi(7) + 19.0 * z.powi(5) + 17.0 * z.powi(3) - 15.0 * z)
                    / (384.0 * v.powi(3))
        };
        assert!((z30 - 2.0423).abs() < 1e-3, "{z30}");
        assert!(t_quantile(Level::P95, 31) < 2.0423);
        assert!((t_quantile(Level::P95, 100_000) - 1.96).abs() < 1e-3);
        assert!((t_quantile(Level::P99, 120) - 2.6174).abs() < 1e-3);
        for df in 1..60 {
            assert!(t_quantile(Level::P95, df + 1) < t_quantile(Level::P95, df));
            assert!(t_quantile(Level::P99, df) > t_quantile(Level::P95, df));
        }
    }

    #[test]
    fn t_interval_by_hand() {
        // mean 11, s = 1, n = 3: 11 +- 4.3027 / sqrt(3).
        let (lo, hi) = t_interval(&[10.0, 11.0, 12.0]).unwrap();
        let h = 4.3027 / 3f64.sqrt();
        assert!((lo - (11.0 - h)).abs() < 1e-12 && (hi - (11.0 + h)).abs() < 1e-12);
        assert!(t_interval(&[1.0]).is_none());
    }

    #[test]
    fn order_interval_coverage_is_exact_binomial() {
        let v: Vec<f64> = (1..=5).map(f64::from).collect();
        assert!(median_order_interval(&v).is_none());
        let v: Vec<f64> = (1..=6).map(f64::from).collect();
        let (lo, hi, c) = median_order_interval(&v).unwrap();
        // 1 - 2/64.
        assert_eq!((lo, hi), (1.0, 6.0));
        assert!((c - (1.0 - 2.0 / 64.0)).abs() < 1e-12);
        // n = 9: k = 2 covers 1 - 2 (1 + 9) / 512 = 0.9609; k = 3 would cover 0.8203.
        let v: Vec<f64> = (1..=9).map(f64::from).collect();
        let (lo, hi, c) = median_order_interval(&v).unwrap();
        assert_eq!((lo, hi), (2.0, 8.0));
        assert!((c - (1.0 - 20.0 / 512.0)).abs() < 1e-12);
        assert!((binom_half_cdf(2000, 2000) - 1.0).abs() < 1e-9);
    }
}
