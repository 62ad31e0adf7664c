//! Summary statistics over microsecond samples.

pub use crate::record::vocab::Summary;

/// Quantile `q` in [0, 1] of sorted data, interpolating linearly (the "R-7" rule).
pub(crate) fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    assert!(!sorted.is_empty(), "quantile of an empty sample set");
    let q = q.clamp(0.0, 1.0);
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Median of `v`, in any order.
pub(crate) fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    quantile_sorted(&s, 0.5)
}

/// Median absolute deviation of sorted data.
pub(crate) fn mad_sorted(sorted: &[f64]) -> f64 {
    let med = quantile_sorted(sorted, 0.5);
    let dev: Vec<f64> = sorted.iter().map(|x| (x - med).abs()).collect();
    median(&dev)
}

/// Outliers by modified z-score (Iglewicz and Hoaglin): |0.6745 (x - median) / MAD| > 3.5.
pub(crate) fn mad_outliers(sorted: &[f64]) -> usize {
    let med = quantile_sorted(sorted, 0.5);
    let mad = mad_sorted(sorted);
    if mad == 0.0 {
        // At least half the samples equal the median: every other one is an outlier.
        return sorted.iter().filter(|&&x| x != med).count();
    }
    sorted
        .iter()
        .filter(|&&x| (0.6745 * (x - med) / mad).abs() > 3.5)
        .count()
}

impl Summary {
    /// Summarises `samples`; `None` for an empty set or any non-finite value.
    pub fn from_samples(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() || samples.iter().any(|x| !x.is_finite()) {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let mean = s.iter().sum::<f64>() / n as f64;
        let var = if n > 1 {
            s.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64
        } else {
            0.0
        };
        Some(Summary {
            n,
            median_us: quantile_sorted(&s, 0.5),
            mean_us: mean,
            stddev_us: var.sqrt(),
            min_us: s[0],
            max_us: s[n - 1],
            p99_us: quantile_sorted(&s, 0.99),
            outliers: mad_outliers(&s),
        })
    }

    /// Standard error of the median, sqrt(pi/2) * stddev / sqrt(n) (the normal approximation;
    /// outliers widen the stddev, so it errs large); 0 for fewer than two samples.
    pub(crate) fn median_se(&self) -> f64 {
        if self.n < 2 {
            return 0.0;
        }
        1.2533 * self.stddev_us / (self.n as f64).sqrt()
    }
}

/// `num / den` of two (median, standard error) pairs, with the ratio's standard error from the
/// relative errors in quadrature: R sqrt((e_n/m_n)^2 + (e_d/m_d)^2). None when either median is
/// not positive. Both `compare` and the sweep's ranking use it (each says which is which).
pub(crate) fn ratio_with_error(num: (f64, f64), den: (f64, f64)) -> Option<(f64, f64)> {
    if num.0 <= 0.0 || den.0 <= 0.0 {
        return None;
    }
    let r = num.0 / den.0;
    let rn = num.1 / num.0;
    let rd = den.1 / den.0;
    Some((r, r * (rn * rn + rd * rd).sqrt()))
}

/// Median of absolute values.
pub(crate) fn median_abs(v: &[f64]) -> f64 {
    median(&v.iter().map(|x| x.abs()).collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_summary() {
        let s = Summary::from_samples(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!(s.n, 5);
        assert_eq!(s.median_us, 3.0);
        assert_eq!(s.mean_us, 3.0);
        assert!((s.stddev_us - 2.5f64.sqrt()).abs() < 1e-12);
        assert_eq!((s.min_us, s.max_us), (1.0, 5.0));
        assert!((s.p99_us - 4.96).abs() < 1e-12);
        assert_eq!(s.outliers, 0);
    }

    #[test]
    fn even_count_median_interpolates() {
        let s = Summary::from_samples(&[1.0, 2.0, 3.0, 10.0]).unwrap();
        assert_eq!(s.median_us, 2.5);
    }

    #[test]
    fn mad_flags_a_far_sample() {
        let mut v: Vec<f64> = (0..100).map(|i| 10.0 + (i % 5) as f64 * 0.1).collect();
        v.push(50.0);
        let s = Summary::from_samples(&v).unwrap();
        assert_eq!(s.outliers, 1);
        assert!(s.p99_us < 50.0 && s.max_us == 50.0);
    }

    #[test]
    fn zero_spread_with_one_odd_value() {
        let mut v = vec![7.0; 50];
        v.push(9.0);
        assert_eq!(Summary::from_samples(&v).unwrap().outliers, 1);
        assert_eq!(Summary::from_samples(&[7.0; 10]).unwrap().outliers, 0);
    }

    #[test]
    fn empty_and_nan_give_none() {
        assert!(Summary::from_samples(&[]).is_none());
        assert!(Summary::from_samples(&[1.0, f64::NAN]).is_none());
    }
}
