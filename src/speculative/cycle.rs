//! The speculative step as engines run it: k draft forwards (one for a block drafter), the
//! verify of k + 1 tokens per request, and the engine's own work around them, priced from what
//! the cost model says of each forward and three engine terms calibrated on published runs.
//!
//! The user's plain decode step D (measured, from a CUDA graph, at concurrency C) is split in
//! two. A share `phi` of it is the forward the cost model prices (weights, KV cache,
//! collectives): it scales with the model's price of each forward, so the verify costs
//! `phi D x M_verify / M_decode`, and the draft forwards `phi D x M_drafts / M_decode`. The rest,
//! `(1 - phi) D`, is the engine's own work per step (scheduling, sampling, the step's host work
//! and launches) and is paid once per step, speculating or not. Speculation adds two costs the
//! forwards do not show: a fixed cost per draft forward, `o D` (its launches, its sampling, its
//! proposer's host work, measured as a share of the plain step because it is the same kind of
//! work), and a cost per request and drafted token, `tau_us x C x k` (the rejection sampler and
//! the drafted tokens' bookkeeping, which grow with the batch). So
//!
//! ```text
//! step = (1 - phi) D + phi D (M_verify + M_drafts) / M_decode + n o D + tau_us C k
//! ```
//!
//! with n the draft forwards per step. It is linear in (phi, o, tau_us), which are fitted by
//! least squares on the relative error of published runs ([`fit`]); each run's prediction with
//! the terms fitted without it ([`held_out`]) is the stated error. The step is never below
//! the plain decode step of the same run (M_verify >= M_decode, every term >= 0), so no row
//! claims a gain above the accept length.

use serde::Serialize;

/// The engine terms (see the module's comment).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Terms {
    /// The share of the plain decode step that scales with the modeled forward (0..=1).
    pub(crate) scaling: f64,
    /// A draft forward's fixed cost, as a share of the plain decode step.
    pub(crate) draft_forward: f64,
    /// The cost per request and drafted token, us.
    pub(crate) per_draft_token_us: f64,
}

/// Terms calibrated on a set of runs, with the error their held-out predictions made.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Calibrated {
    pub(crate) terms: Terms,
    /// The relative error of the step predicted for each run with the terms fitted without it:
    /// the least and the most (predicted / published - 1).
    pub(crate) spread: [f64; 2],
    /// The same error as a share of what the step adds to the plain decode step (predicted
    /// step - published step) / (published step - plain step): the error of the calibrated
    /// part alone, which a row applies to the parts it does not measure.
    pub(crate) increment_spread: [f64; 2],
    /// How many runs the terms were fitted on.
    pub(crate) runs: usize,
    /// Where the runs come from, and how the terms were fitted.
    pub(crate) source: &'static str,
}

/// The terms fitted on the published PCIe runs of tests/data/published-spec-runs.json (8 and 4
/// RTX PRO 6000 Blackwell GPUs, vLLM with EAGLE-3, MTP and a block drafter, one to 128
/// requests, contexts to 30k), priced by the built-in pcie-gen5 profile: what
/// `verifybench model fit-cycle tests/data/published-spec-runs.json --format json` prints (a
/// test fits them again and compares).
pub(crate) const PUBLISHED: Calibrated = Calibrated {
    terms: Terms {
        scaling: 0.4293359146980796,
        draft_forward: 0.13980156521752812,
        per_draft_token_us: 89.12670329052658,
    },
    spread: [-0.12469983519935124, 0.08680171680572735],
    increment_spread: [-0.26961932053777793, 0.17164793198254563],
    runs: 18,
    source: "18 published runs of 8 and 4 RTX PRO 6000 over PCIe (tests/data/published-spec-runs.json), fitted by `model fit-cycle`",
};

/// What the cost model prices of one step of the workload, us (forwards from a CUDA graph).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Forwards {
    /// The plain decode forward of C tokens at the context the user's decode step was measured.
    pub(crate) decode_us: f64,
    /// The plain decode forward at the context the step is priced for (the same where the
    /// user measured at that context).
    pub(crate) decode_at_context_us: f64,
    /// The verify forward of C (k + 1) tokens.
    pub(crate) verify_us: f64,
    /// The draft forwards of one step together (an EAGLE-3 or MTP cycle's first forward runs
    /// over the k + 1 tokens just verified, the others over one).
    pub(crate) drafts_us: f64,
    /// Draft forwards per step: k, or 1 for a block drafter.
    pub(crate) draft_forwards: u64,
}

/// One speculative step, its parts, us.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Step {
    /// The engine's own work per step, paid speculating or not: (1 - phi) D.
    pub(crate) engine_us: f64,
    /// The verify forward, scaled from the model's.
    pub(crate) verify_us: f64,
    /// The draft forwards, scaled from the model's.
    pub(crate) drafts_us: f64,
    /// The draft forwards' fixed cost: n o D.
    pub(crate) draft_overhead_us: f64,
    /// The drafted tokens' bookkeeping: tau_us C k.
    pub(crate) bookkeeping_us: f64,
    /// The plain decode step at the priced context: (1 - phi) D + phi D M_decode@context /
    /// M_decode (D itself where the context is the measured one).
    pub(crate) plain_us: f64,
}

impl Step {
    /// The whole step, us.
    pub(crate) fn total_us(&self) -> f64 {
        self.engine_us
            + self.verify_us
            + self.drafts_us
            + self.draft_overhead_us
            + self.bookkeeping_us
    }
}

/// The step of a run whose plain decode step is `decode_us` (given), at concurrency `c` with k
/// drafted tokens per request.
pub(crate) fn step(decode_us: f64, f: &Forwards, t: &Terms, c: u64, k: u64) -> Step {
    let scale = t.scaling * decode_us / f.decode_us;
    let n = f.draft_forwards as f64;
    let engine_us = (1.0 - t.scaling) * decode_us;
    Step {
        engine_us,
        verify_us: scale * f.verify_us,
        drafts_us: scale * f.drafts_us,
        draft_overhead_us: n * t.draft_forward * decode_us,
        bookkeeping_us: t.per_draft_token_us * c as f64 * k as f64,
        plain_us: engine_us + scale * f.decode_at_context_us,
    }
}

/// One run to fit on: what its user had, what the model prices, and the step it published.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FitRun {
    pub(crate) decode_us: f64,
    pub(crate) forwards: Forwards,
    pub(crate) concurrency: u64,
    pub(crate) k: u64,
    pub(crate) published_step_us: f64,
}

impl FitRun {
    /// The step's parts that do not depend on the terms: step = D + phi x a + o x b + tau_us x
    /// c, where a = D ((M_verify + M_drafts) / M_decode - 1), b = n D, c = C k.
    fn features(&self) -> [f64; 3] {
        let f = &self.forwards;
        let d = self.decode_us;
        let n = f.draft_forwards as f64;
        [
            d * ((f.verify_us + f.drafts_us) / f.decode_us - 1.0),
            n * d,
            (self.concurrency * self.k) as f64,
        ]
    }
}

/// The bounds of each term: phi in [0, 1], the others at least 0.
const LOWER: [f64; 3] = [0.0, 0.0, 0.0];
const UPPER: [f64; 3] = [1.0, f64::INFINITY, f64::INFINITY];

/// The terms that minimise the sum of squared relative errors of the step over `runs`, each
/// term within its bounds: the least-squares solution over every choice of terms held at a
/// bound (eight), the best one that keeps every free term inside its bounds. `None` with fewer
/// runs than terms or a singular set.
pub(crate) fn fit(runs: &[FitRun]) -> Option<Terms> {
    if runs.len() < 3 {
        return None;
    }
    // Rows of the weighted system: x . features / S = (S - D) / S.
    let rows: Vec<([f64; 3], f64)> = runs
        .iter()
        .map(|r| {
            let s = r.published_step_us;
            let f = r.features();
            ([f[0] / s, f[1] / s, f[2] / s], (s - r.decode_us) / s)
        })
        .collect();
    let mut best: Option<([f64; 3], f64)> = None;
    for held in 0u8..8 {
        for at_upper in 0u8..8 {
            // Only terms that are held choose a bound; skip duplicate patterns.
            if at_upper & !held != 0 {
                continue;
            }
            let Some(x) = solve_with_held(&rows, held, at_upper) else {
                continue;
            };
            let inside = (0..3).all(|i| x[i] >= LOWER[i] - 1e-12 && x[i] <= UPPER[i] + 1e-12);
            if !inside {
                continue;
            }
            let cost: f64 = rows
                .iter()
                .map(|(a, y)| {
                    let e = a[0] * x[0] + a[1] * x[1] + a[2] * x[2] - y;
                    e * e
                })
                .sum();
            if best.is_none_or(|(_, c)| cost < c - 1e-15) {
                best = Some((x, cost));
            }
        }
    }
    best.map(|(x, _)| Terms {
        scaling: x[0],
        draft_forward: x[1],
        per_draft_token_us: x[2],
    })
}

/// The least-squares solution with the terms whose bit is set in `held` fixed at their lower
/// bound (or upper, where `at_upper` has the bit too), the others free.
fn solve_with_held(rows: &[([f64; 3], f64)], held: u8, at_upper: u8) -> Option<[f64; 3]> {
    let mut x = [0.0; 3];
    for i in 0..3 {
        if held & (1 << i) != 0 {
            x[i] = if at_upper & (1 << i) != 0 {
                UPPER[i]
            } else {
                LOWER[i]
            };
            if !x[i].is_finite() {
                return None;
            }
        }
    }
    let free: Vec<usize> = (0..3).filter(|i| held & (1 << i) == 0).collect();
    if free.is_empty() {
        return Some(x);
    }
    // Normal equations over the free terms, the held ones moved to the right-hand side.
    let m = free.len();
    let mut a = vec![vec![0.0; m + 1]; m];
    for (row, y) in rows {
        let rhs = y
            - (0..3)
                .filter(|i| held & (1 << i) != 0)
                .map(|i| row[i] * x[i])
                .sum::<f64>();
        for (p, &i) in free.iter().enumerate() {
            for (q, &j) in free.iter().enumerate() {
                a[p][q] += row[i] * row[j];
            }
            a[p][m] += row[i] * rhs;
        }
    }
    let sol = gauss(a)?;
    for (p, &i) in free.iter().enumerate() {
        x[i] = sol[p];
    }
    Some(x)
}

/// Solves the augmented system `a` (m rows of m + 1) by elimination with partial pivoting;
/// `None` when it is singular.
fn gauss(mut a: Vec<Vec<f64>>) -> Option<Vec<f64>> {
    let m = a.len();
    for c in 0..m {
        let p = (c..m).max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs()))?;
        let scale = a.iter().map(|r| r[c].abs()).fold(0.0, f64::max);
        if a[p][c].abs() <= 1e-12 * scale.max(f64::MIN_POSITIVE) {
            return None;
        }
        a.swap(c, p);
        let pivot = a[c].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r != c {
                let f = row[c] / pivot[c];
                for (x, y) in row.iter_mut().zip(&pivot).skip(c) {
                    *x -= f * y;
                }
            }
        }
    }
    Some((0..m).map(|i| a[i][m] / a[i][i]).collect())
}

/// A run predicted with the terms fitted on the others.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct HeldOut {
    pub(crate) step: Step,
    /// predicted / published - 1.
    pub(crate) error: f64,
    /// (predicted - published) / (published - plain): the error on what the step adds.
    pub(crate) increment_error: f64,
}

/// Every run predicted with the terms fitted on the others (`None` where they cannot be).
pub(crate) fn held_out(runs: &[FitRun]) -> Vec<Option<HeldOut>> {
    (0..runs.len())
        .map(|i| {
            let others = without(runs, i);
            let t = fit(&others)?;
            let r = &runs[i];
            let st = step(r.decode_us, &r.forwards, &t, r.concurrency, r.k);
            let s = st.total_us();
            Some(HeldOut {
                step: st,
                error: s / r.published_step_us - 1.0,
                increment_error: (s - r.published_step_us)
                    / (r.published_step_us - r.decode_us).max(f64::MIN_POSITIVE),
            })
        })
        .collect()
}

/// `runs` without the one at `i`.
fn without(runs: &[FitRun], i: usize) -> Vec<FitRun> {
    runs.iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .map(|(_, r)| r.clone())
        .collect()
}

/// The least and the most of `v` (`None` when empty).
pub(crate) fn extent(v: impl IntoIterator<Item = f64>) -> Option<[f64; 2]> {
    v.into_iter().fold(None, |acc, x| match acc {
        None => Some([x, x]),
        Some([lo, hi]) => Some([lo.min(x), hi.max(x)]),
    })
}

/// For run `i`, the spreads (step, increment) of the held-out errors of the OTHER runs, each
/// computed without run `i` as well: the range a run's own held-out prediction gets, in which
/// nothing of the run itself took part.
pub(crate) fn nested_spread(runs: &[FitRun], i: usize) -> Option<([f64; 2], [f64; 2])> {
    let others = without(runs, i);
    let h: Vec<HeldOut> = held_out(&others).into_iter().flatten().collect();
    Some((
        extent(h.iter().map(|h| h.error))?,
        extent(h.iter().map(|h| h.increment_error))?,
    ))
}

/// The range of a predicted step `step_us` over the plain step `plain_us`, from the held-out
/// spread of what the step adds: the published steps were (1 + e) times lower in what they add
/// where the prediction was e too high, so the truth lies in [plain + add / (1 + hi), plain +
/// add / (1 + lo)]; never below the plain step.
pub(crate) fn range_us(plain_us: f64, step_us: f64, increment_spread: [f64; 2]) -> [f64; 2] {
    let add = (step_us - plain_us).max(0.0);
    let [lo, hi] = increment_spread;
    // An error of -100% or below (a prediction of nothing) leaves the high end open.
    let up = if 1.0 + lo > 1e-6 {
        add / (1.0 + lo)
    } else {
        f64::INFINITY
    };
    [plain_us + add / (1.0 + hi).max(1e-6), plain_us + up]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(d: f64, mv: f64, mr: f64, n: u64, c: u64, k: u64, t: &Terms) -> FitRun {
        let forwards = Forwards {
            decode_us: 1000.0,
            decode_at_context_us: 1000.0,
            verify_us: mv,
            drafts_us: n as f64 * mr,
            draft_forwards: n,
        };
        let s = step(d, &forwards, t, c, k).total_us();
        FitRun {
            decode_us: d,
            forwards,
            concurrency: c,
            k,
            published_step_us: s,
        }
    }

    /// The step's arithmetic by hand: D = 10 ms, phi = 0.5, o = 0.1, tau = 100 us, C = 2, k = 3,
    /// M_decode 1 ms, M_verify 1.5 ms, M_draft 0.2 ms, three draft forwards:
    /// engine 5 ms; verify 0.5 x 10 ms x 1.5 = 7.5 ms; drafts 0.5 x 10 ms x 3 x 0.2 = 3 ms;
    /// their fixed cost 3 x 0.1 x 10 ms = 3 ms; bookkeeping 100 us x 2 x 3 = 0.6 ms: 19.1 ms.
    #[test]
    fn the_step_adds_up_by_hand() {
        let t = Terms {
            scaling: 0.5,
            draft_forward: 0.1,
            per_draft_token_us: 100.0,
        };
        let f = Forwards {
            decode_us: 1000.0,
            decode_at_context_us: 1200.0,
            verify_us: 1500.0,
            drafts_us: 600.0,
            draft_forwards: 3,
        };
        let s = step(10_000.0, &f, &t, 2, 3);
        assert!((s.engine_us - 5000.0).abs() < 1e-9);
        assert!((s.verify_us - 7500.0).abs() < 1e-9);
        assert!((s.drafts_us - 3000.0).abs() < 1e-9);
        assert!((s.draft_overhead_us - 3000.0).abs() < 1e-9);
        assert!((s.bookkeeping_us - 600.0).abs() < 1e-9);
        assert!((s.total_us() - 19_100.0).abs() < 1e-9);
        // The plain step at the priced context: 5 ms + 0.5 x 10 ms x 1.2 = 11 ms.
        assert!((s.plain_us - 11_000.0).abs() < 1e-9);
    }

    /// Runs made with known terms give them back, and every held-out prediction is exact.
    #[test]
    fn the_fit_recovers_the_terms_that_made_the_runs() {
        let t = Terms {
            scaling: 0.45,
            draft_forward: 0.14,
            per_draft_token_us: 90.0,
        };
        let runs = vec![
            run(11_500.0, 1470.0, 60.0, 3, 1, 3, &t),
            run(24_300.0, 1880.0, 27.0, 3, 4, 3, &t),
            run(5_900.0, 1490.0, 38.0, 3, 1, 3, &t),
            run(10_800.0, 2150.0, 26.0, 3, 8, 3, &t),
            run(5_900.0, 2080.0, 160.0, 1, 1, 7, &t),
            run(60_000.0, 1540.0, 12.0, 3, 128, 3, &t),
        ];
        let got = fit(&runs).unwrap();
        assert!((got.scaling - 0.45).abs() < 1e-9, "{got:?}");
        assert!((got.draft_forward - 0.14).abs() < 1e-9, "{got:?}");
        assert!((got.per_draft_token_us - 90.0).abs() < 1e-6, "{got:?}");
        for e in held_out(&runs) {
            assert!(e.unwrap().error.abs() < 1e-9);
        }
    }

    /// A term the runs push past its bound is held at it: steps that cost less than the plain
    /// decode plus the modeled verify's share at phi = 1 would ask phi > 1.
    #[test]
    fn a_term_past_its_bound_is_held_at_it() {
        let t = Terms {
            scaling: 1.0,
            draft_forward: 0.0,
            per_draft_token_us: 0.0,
        };
        let mut runs = vec![
            run(10_000.0, 2000.0, 100.0, 3, 1, 3, &t),
            run(20_000.0, 3000.0, 100.0, 3, 8, 3, &t),
            run(8_000.0, 1500.0, 300.0, 1, 1, 7, &t),
            run(9_000.0, 1800.0, 50.0, 3, 2, 3, &t),
        ];
        // Each published step 10% longer than phi = 1 alone gives: the free fit would take
        // phi above 1; held at 1, the draft and bookkeeping terms take up the rest.
        for r in &mut runs {
            r.published_step_us *= 1.1;
        }
        let got = fit(&runs).unwrap();
        assert!(got.scaling <= 1.0 && got.scaling >= 0.0);
        assert!(got.draft_forward >= 0.0 && got.per_draft_token_us >= 0.0);
        for r in &runs {
            let s = step(r.decode_us, &r.forwards, &got, r.concurrency, r.k).total_us();
            assert!(s >= r.decode_us, "the step is never below the decode");
        }
    }

    #[test]
    fn too_few_runs_fit_nothing() {
        let t = Terms {
            scaling: 0.5,
            draft_forward: 0.1,
            per_draft_token_us: 10.0,
        };
        let runs = vec![run(10_000.0, 2000.0, 100.0, 3, 1, 3, &t)];
        assert_eq!(fit(&runs), None);
        assert_eq!(held_out(&runs), vec![None]);
    }
}
