//! The optimizer: Levenberg-Marquardt on the logarithms of the parameters (they stay
//! positive), with a numerical Jacobian, least squares or the Huber loss of the log ratios.

use super::params::{free_params, Param};
use super::points::predict;
use super::points::Point;
use crate::costmodel::profile::Profile;

pub(super) fn residuals(
    base: &Profile,
    params: &[Param],
    theta: &[f64],
    pts: &[Point],
) -> Option<Vec<f64>> {
    let mut p = base.clone();
    for (k, t) in params.iter().zip(theta) {
        k.set(&mut p, t.exp());
    }
    pts.iter()
        .map(|pt| {
            predict(&p, pt)
                .ok()
                .filter(|x| x.is_finite() && *x > 0.0)
                .map(|x| (x / pt.measured_us).ln())
        })
        .collect()
}

pub(super) fn cost(r: &[f64]) -> f64 {
    r.iter().map(|x| x * x).sum()
}

/// The Huber loss of the residuals `r` with threshold `delta` (quadratic within `delta`, linear
/// beyond): `None` is the plain sum of squares.
pub(crate) fn robust_cost(r: &[f64], delta: Option<f64>) -> f64 {
    match delta {
        None => cost(r),
        Some(d) => r
            .iter()
            .map(|x| {
                let a = x.abs();
                if a <= d {
                    a * a
                } else {
                    2.0 * d * a - d * d
                }
            })
            .sum(),
    }
}

/// The weights of iteratively reweighted least squares for the Huber loss: 1 within `delta`,
/// `delta / |r|` beyond (a point far off counts linearly, not quadratically).
pub(super) fn huber_weights(r: &[f64], delta: Option<f64>) -> Vec<f64> {
    r.iter()
        .map(|x| match delta {
            Some(d) if x.abs() > d => d / x.abs(),
            _ => 1.0,
        })
        .collect()
}

/// Solves `a x = b` (small, symmetric positive definite after damping) by Gaussian elimination
/// with partial pivoting; `None` if singular.
pub(super) fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    for c in 0..n {
        let piv = (c..n).max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs()))?;
        if a[piv][c].abs() < 1e-300 {
            return None;
        }
        a.swap(c, piv);
        b.swap(c, piv);
        let pivot_row = a[c].clone();
        for r in c + 1..n {
            let f = a[r][c] / pivot_row[c];
            for (x, p) in a[r].iter_mut().zip(&pivot_row).skip(c) {
                *x -= f * p;
            }
            b[r] -= f * b[c];
        }
    }
    let mut x = vec![0.0; n];
    for c in (0..n).rev() {
        let s: f64 = (c + 1..n).map(|k| a[c][k] * x[k]).sum();
        x[c] = (b[c] - s) / a[c][c];
    }
    Some(x)
}

/// Levenberg-Marquardt on log-parameters, minimising the sum of squared log ratios.
pub fn fit(base: &Profile, params: &[Param], pts: &[Point]) -> anyhow::Result<Profile> {
    let free = vec![(0.0, f64::INFINITY); params.len()];
    fit_bounded(base, params, &free, pts)
}

/// [`fit`] with every parameter kept within `[lo, hi]` (each step projected onto the box).
pub fn fit_bounded(
    base: &Profile,
    params: &[Param],
    bounds: &[(f64, f64)],
    pts: &[Point],
) -> anyhow::Result<Profile> {
    fit_bounded_robust(base, params, bounds, pts, None)
}

/// [`fit_bounded`] minimising the Huber loss of the log ratios with threshold `delta` (`None`:
/// least squares): each Levenberg-Marquardt step solves the normal equations weighted by the
/// Huber weights of the current residuals, and is taken only if the Huber loss falls. A
/// published time far off its neighbours (a hiccup of the run) then pulls the fit linearly,
/// not quadratically.
pub(crate) fn fit_bounded_robust(
    base: &Profile,
    params: &[Param],
    bounds: &[(f64, f64)],
    pts: &[Point],
    delta: Option<f64>,
) -> anyhow::Result<Profile> {
    let cost = |r: &[f64]| robust_cost(r, delta);
    let k = params.len();
    let lnb: Vec<(f64, f64)> = bounds
        .iter()
        .map(|&(lo, hi)| (lo.max(1e-9).ln(), hi.ln()))
        .collect();
    let clamp = |t: Vec<f64>| -> Vec<f64> {
        t.iter()
            .zip(&lnb)
            .map(|(x, &(lo, hi))| x.clamp(lo, hi))
            .collect()
    };
    let mut theta: Vec<f64> = clamp(params.iter().map(|p| p.get(base).max(1e-3).ln()).collect());
    let mut r = residuals(base, params, &theta, pts)
        .ok_or_else(|| anyhow::anyhow!("the base profile cannot price every point"))?;
    let mut c = cost(&r);
    let mut lambda = 1e-3;
    const H: f64 = 1e-6;
    for _ in 0..200 {
        // Jacobian by central differences (the model has kinks where NCCL's choice changes).
        let mut jac = vec![vec![0.0; k]; r.len()];
        for j in 0..k {
            let mut up = theta.clone();
            let mut dn = theta.clone();
            up[j] += H;
            dn[j] -= H;
            let (Some(ru), Some(rd)) = (
                residuals(base, params, &up, pts),
                residuals(base, params, &dn, pts),
            ) else {
                break;
            };
            for i in 0..r.len() {
                jac[i][j] = (ru[i] - rd[i]) / (2.0 * H);
            }
        }
        let w = huber_weights(&r, delta);
        let mut jtj = vec![vec![0.0; k]; k];
        let mut jtr = vec![0.0; k];
        for (i, row) in jac.iter().enumerate() {
            for a in 0..k {
                jtr[a] += w[i] * row[a] * r[i];
                for b in 0..k {
                    jtj[a][b] += w[i] * row[a] * row[b];
                }
            }
        }
        let mut improved = false;
        while lambda < 1e12 {
            let mut m = jtj.clone();
            for (a, row) in m.iter_mut().enumerate() {
                row[a] += lambda * jtj[a][a] + 1e-12;
            }
            let Some(step) = solve(m, jtr.iter().map(|x| -x).collect()) else {
                lambda *= 10.0;
                continue;
            };
            // No step beyond a factor e^2 per iteration: the model is only piecewise smooth.
            let cand: Vec<f64> = clamp(
                theta
                    .iter()
                    .zip(&step)
                    .map(|(t, s)| t + s.clamp(-2.0, 2.0))
                    .collect(),
            );
            match residuals(base, params, &cand, pts) {
                Some(rc) if cost(&rc) < c => {
                    let dc = c - cost(&rc);
                    theta = cand;
                    c = cost(&rc);
                    r = rc;
                    lambda = (lambda / 3.0).max(1e-12);
                    improved = dc > 1e-16 * (1.0 + c);
                    break;
                }
                _ => lambda *= 4.0,
            }
        }
        if !improved {
            break;
        }
    }
    let mut p = base.clone();
    for (k, t) in params.iter().zip(&theta) {
        k.set(&mut p, t.exp());
    }
    Ok(p)
}

/// Fits `params`, then adds the parameters of any (algorithm, protocol) the fitted profile now
/// picks that the start did not (NCCL's choice moves with the parameters), and refits from
/// there; a few rounds at most, never more parameters than points.
pub fn fit_active(
    base: &Profile,
    mut params: Vec<Param>,
    pts: &[Point],
) -> anyhow::Result<(Profile, Vec<Param>)> {
    let mut prof = fit(base, &params, pts)?;
    for _ in 0..4 {
        let mut more = params.clone();
        for p in free_params(&prof, pts)? {
            if !more.contains(&p) {
                more.push(p);
            }
        }
        more.sort_by_key(|p| p.name());
        if more.len() == params.len() || more.len() > pts.len() {
            break;
        }
        params = more;
        prof = fit(&prof, &params, pts)?;
    }
    Ok((prof, params))
}
