//! The optimizer: Levenberg-Marquardt on the logarithms of the parameters (they stay
//! positive), with a numerical Jacobian, least squares or the Huber loss of the log ratios.

use super::params::{free_params, Param};
use super::points::predict;
use super::points::Point;
use crate::costmodel::profile::Profile;

/// Sets the log-parameters `theta` in `p` and writes the log ratio (predicted / measured) of
/// the points `at` (indices into `pts`) into `r`; false where a point cannot be priced. `p` is
/// the fit's one working copy of the base profile: every call sets every parameter, so no call
/// sees another's.
fn residuals(
    p: &mut Profile,
    params: &[Param],
    theta: &[f64],
    pts: &[Point],
    at: &[usize],
    r: &mut Vec<f64>,
) -> bool {
    for (k, t) in params.iter().zip(theta) {
        k.set(p, t.exp());
    }
    r.clear();
    for &i in at {
        match predict(p, &pts[i]) {
            Ok(x) if x.is_finite() && x > 0.0 => r.push((x / pts[i].measured_us).ln()),
            _ => return false,
        }
    }
    true
}

/// The Huber loss of the residuals `r` with threshold `delta` (quadratic within `delta`, linear
/// beyond): `None` is the plain sum of squares.
pub(crate) fn robust_cost(r: &[f64], delta: Option<f64>) -> f64 {
    match delta {
        None => r.iter().map(|x| x * x).sum(),
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
        // The largest |a[i][c]|, the last of equals (as `max_by` picks); a plain loop and no
        // copy of the pivot row, for unoptimised builds.
        let mut piv = c;
        for i in c + 1..n {
            if a[i][c].abs().total_cmp(&a[piv][c].abs()) != std::cmp::Ordering::Less {
                piv = i;
            }
        }
        if a[piv][c].abs() < 1e-300 {
            return None;
        }
        a.swap(c, piv);
        b.swap(c, piv);
        let (upper, lower) = a.split_at_mut(c + 1);
        let pivot_row = &upper[c][..];
        for (off, row) in lower.iter_mut().enumerate() {
            let r = c + 1 + off;
            let f = row[c] / pivot_row[c];
            for (x, p) in row[c..].iter_mut().zip(&pivot_row[c..]) {
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
pub(crate) fn fit(base: &Profile, params: &[Param], pts: &[Point]) -> anyhow::Result<Profile> {
    let free = vec![(0.0, f64::INFINITY); params.len()];
    fit_bounded_robust(base, params, &free, pts, None)
}

/// [`fit`] with every parameter kept within `[lo, hi]` (each step projected onto the box; a
/// parameter on its bound that the step would push past it is held out of the step, so the
/// others' steps are not cut short by its clamping),
/// minimising the Huber loss of the log ratios with threshold `delta` (`None`: least squares):
/// each Levenberg-Marquardt step solves the normal equations weighted by the Huber weights of
/// the current residuals, and is taken only if the Huber loss falls. A published time far off
/// its neighbours (a hiccup of the run) then pulls the fit linearly, not quadratically.
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
    let mut work = base.clone();
    let (mut r, mut ru, mut rd, mut rc) = (vec![], vec![], vec![], vec![]);
    let all: Vec<usize> = (0..pts.len()).collect();
    // The points each parameter moves: the others' residuals at a shifted parameter are the
    // current ones exactly (their time never reads it), so their differences are 0.
    let moved: Vec<Vec<usize>> = params
        .iter()
        .map(|q| {
            all.iter()
                .copied()
                .filter(|&i| q.moves(base, &pts[i]))
                .collect()
        })
        .collect();
    if !residuals(&mut work, params, &theta, pts, &all, &mut r) {
        anyhow::bail!("the base profile cannot price every point");
    }
    let n = r.len();
    let mut c = cost(&r);
    let mut lambda = 1e-3;
    const H: f64 = 1e-6;
    // The Jacobian, row-major (point i, parameter j at i * k + j), and the shifted parameters.
    let mut jac = vec![0.0; n * k];
    let mut shifted = theta.clone();
    for _ in 0..200 {
        // Jacobian by central differences (the model has kinks where NCCL's choice changes).
        jac.fill(0.0);
        shifted.copy_from_slice(&theta);
        for j in 0..k {
            shifted[j] = theta[j] + H;
            let up = residuals(&mut work, params, &shifted, pts, &moved[j], &mut ru);
            shifted[j] = theta[j] - H;
            if !(up && residuals(&mut work, params, &shifted, pts, &moved[j], &mut rd)) {
                break;
            }
            shifted[j] = theta[j];
            for (m, &i) in moved[j].iter().enumerate() {
                jac[i * k + j] = (ru[m] - rd[m]) / (2.0 * H);
            }
        }
        let w = huber_weights(&r, delta);
        // J^T W J and J^T W r: plain loops over slices, the same sums in the same order (this
        // is the innermost loop of every fit, and test builds run it unoptimised).
        let (js, ws, rs) = (&jac[..], &w[..], &r[..]);
        let mut jtj = vec![vec![0.0; k]; k];
        let mut jtr = vec![0.0; k];
        // A zero derivative (the point does not read parameter `a`) adds only zeros to row
        // `a`; the sums start at +0.0 and adding a signed zero to them changes no bit, so the
        // row is skipped.
        for i in 0..n {
            let row = &js[i * k..(i + 1) * k];
            for a in 0..k {
                if row[a] == 0.0 {
                    continue;
                }
                // (w a) b is how `w * a * b` associates: the same products, computed once.
                let wa = ws[i] * row[a];
                jtr[a] += wa * rs[i];
                let ja = &mut jtj[a][..];
                for b in 0..k {
                    ja[b] += wa * row[b];
                }
            }
        }
        let mut improved = false;
        // A parameter on its bound that the descent direction pushes past it is held there
        // (its row and column out of the system, its step 0). Left in, its step is clamped
        // back, the step as a whole fails to lower the cost, the damping grows and the other
        // parameters creep: a third of the fits of a public table stopped at the iteration
        // cap that way, still improving.
        let held: Vec<bool> = (0..k)
            .map(|j| {
                (theta[j] >= lnb[j].1 && -jtr[j] > 0.0) || (theta[j] <= lnb[j].0 && -jtr[j] < 0.0)
            })
            .collect();
        while lambda < 1e12 {
            let mut m = jtj.clone();
            for (a, row) in m.iter_mut().enumerate() {
                row[a] += lambda * jtj[a][a] + 1e-12;
            }
            let mut rhs: Vec<f64> = jtr.iter().map(|x| -x).collect();
            for j in (0..k).filter(|&j| held[j]) {
                for row in m.iter_mut() {
                    row[j] = 0.0;
                }
                m[j].fill(0.0);
                m[j][j] = 1.0;
                rhs[j] = 0.0;
            }
            let Some(step) = solve(m, rhs) else {
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
            let cc = if residuals(&mut work, params, &cand, pts, &all, &mut rc) {
                cost(&rc)
            } else {
                f64::INFINITY
            };
            if cc < c {
                let dc = c - cc;
                theta = cand;
                c = cc;
                std::mem::swap(&mut r, &mut rc);
                lambda = (lambda / 3.0).max(1e-12);
                improved = dc > 1e-16 * (1.0 + c);
                break;
            }
            lambda *= 4.0;
        }
        if !improved {
            break;
        }
    }
    for (k, t) in params.iter().zip(&theta) {
        k.set(&mut work, t.exp());
    }
    Ok(work)
}

/// Fits `params`, then adds the parameters of any (algorithm, protocol) the fitted profile now
/// picks that the start did not (NCCL's choice moves with the parameters), and refits from
/// there; a few rounds at most, never more parameters than points.
pub(crate) fn fit_active(
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
