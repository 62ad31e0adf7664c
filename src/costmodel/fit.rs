//! Calibration: least squares on measured records, in log space (relative error), with
//! leave-one-out.
//!
//! Only parameters the data can tell apart are fitted, and the report says which were held
//! and why ([`FitReport::held`]):
//! - with one rank count (one number of algorithm steps), the base latency and the per-hop
//!   latency of a protocol move every point alike: the per-hop term stays at its table value
//!   (NCCL's hwLat) and the base latency absorbs the difference; both are fitted once several
//!   rank counts are present;
//! - the graph launch cost is indistinguishable from the base latency and is never fitted; the
//!   eager launch cost is fitted as the eager-minus-graph difference when graph points exist.
//!
//! A fitted profile records the rank counts it was fitted on; used at another, it extrapolates
//! ([`extrapolation_note`]).
//! The optimizer is a plain Levenberg-Marquardt on the logarithms of the parameters (they stay
//! positive), with a numerical Jacobian: deterministic, no dependencies.

use std::collections::BTreeSet;

use super::predict::{self, Force};
use super::profile::{Algo, Profile, Proto};
use crate::error::usage;
use crate::model::CollectiveKind;
use crate::record::{Body, Mode, Record, Source};
use crate::request::Launcher;

/// One collective kind of a point, `count` times.
#[derive(Debug, Clone, PartialEq)]
pub struct Term {
    pub op: CollectiveKind,
    /// nccl-tests size in bytes (all-gather: the output).
    pub size: u64,
    pub count: u64,
}

/// One measured time the model must reproduce.
#[derive(Debug, Clone)]
pub struct Point {
    /// File the point came from.
    pub source: String,
    /// What was measured, for the table.
    pub label: String,
    pub terms: Vec<Term>,
    pub n: usize,
    pub graph: bool,
    pub launcher: Launcher,
    pub force: Force,
    pub measured_us: f64,
}

/// The model's time for a point.
pub fn predict(p: &Profile, pt: &Point) -> anyhow::Result<f64> {
    let mut t = 0.0;
    for term in &pt.terms {
        let o = predict::op_time(
            p,
            term.op,
            term.size,
            pt.n,
            pt.graph,
            pt.launcher,
            &pt.force,
        )?;
        t += o.total() * term.count as f64;
    }
    Ok(t)
}

fn launcher_of(r: &Record) -> Launcher {
    match r.provenance.launcher.as_deref() {
        Some("threads") => Launcher::Threads,
        _ => Launcher::Processes,
    }
}

/// NCCL_PROTO/NCCL_ALGO the workers saw, as a restriction on the model's choice.
fn force_of(r: &Record, source: &str) -> anyhow::Result<(Force, String)> {
    let env = r.provenance.workers.first().map(|w| &w.nccl_env);
    let get = |k: &str| env.and_then(|e| e.get(k)).map(|s| s.as_str());
    let (proto, algo) = (get("NCCL_PROTO"), get("NCCL_ALGO"));
    let f = Force::parse(proto, algo)
        .map_err(|e| usage(format!("results file '{source}': NCCL settings: {e}")))?;
    let mut tag = String::new();
    if let Some(p) = proto {
        tag.push_str(&format!(" proto={p}"));
    }
    if let Some(a) = algo {
        tag.push_str(&format!(" algo={a}"));
    }
    Ok((f, tag))
}

/// The points of `records` (read from `source`): every size and launch mode of a measured
/// collective record, every comm-mode run of a measured verify record. Returns the points and
/// one line per record left out (modeled ones, other kinds).
pub fn points_of(source: &str, records: &[Record]) -> anyhow::Result<(Vec<Point>, Vec<String>)> {
    let mut pts = vec![];
    let mut skipped = vec![];
    for (i, r) in records.iter().enumerate() {
        if r.source != Source::Measured {
            skipped.push(format!(
                "{source} record {}: modeled, not a measurement",
                i + 1
            ));
            continue;
        }
        let launcher = launcher_of(r);
        let (force, tag) = force_of(r, source)?;
        match &r.body {
            Body::Collective(c) => {
                for row in &c.rows {
                    for (graph, t) in [(false, &row.eager), (true, &row.graph)] {
                        let Some(t) = t else { continue };
                        pts.push(Point {
                            source: source.into(),
                            label: format!(
                                "{} {} B n={} {}{tag}",
                                c.op.name(),
                                row.size_bytes,
                                c.nranks,
                                if graph { "graph" } else { "eager" }
                            ),
                            terms: vec![Term {
                                op: c.op,
                                size: row.size_bytes,
                                count: 1,
                            }],
                            n: c.nranks,
                            graph,
                            launcher,
                            force: force.clone(),
                            measured_us: t.time_us,
                        });
                    }
                }
            }
            Body::Verify(v) => {
                let w = &v.workload;
                let n = w.tp as usize;
                let mut terms = vec![];
                if w.n_all_reduce > 0 {
                    terms.push(Term {
                        op: CollectiveKind::AllReduce,
                        size: w.all_reduce_bytes_per_rank,
                        count: w.n_all_reduce,
                    });
                }
                if w.n_all_gather > 0 {
                    terms.push(Term {
                        op: CollectiveKind::AllGather,
                        size: w.all_gather_bytes_per_rank * w.tp,
                        count: w.n_all_gather,
                    });
                }
                for run in v.runs.iter().filter(|r| r.mode == Mode::Comm) {
                    pts.push(Point {
                        source: source.into(),
                        label: format!(
                            "verify {} tp={} tokens={} {}{tag}",
                            w.model,
                            w.tp,
                            w.tokens,
                            if run.graph { "graph" } else { "eager" }
                        ),
                        terms: terms.clone(),
                        n,
                        graph: run.graph,
                        launcher,
                        force: force.clone(),
                        measured_us: run.per_verify.median_us,
                    });
                }
            }
            Body::Other { name, .. } => skipped.push(format!(
                "{source} record {}: kind '{name}' carries no collective timings the fit reads",
                i + 1
            )),
        }
    }
    for p in &pts {
        if !(p.measured_us.is_finite() && p.measured_us > 0.0) {
            crate::usage_bail!(
                "results file '{source}': {} has a non-positive time",
                p.label
            );
        }
        if p.n < 2 {
            crate::usage_bail!(
                "results file '{source}': {}: a collective needs at least 2 ranks",
                p.label
            );
        }
    }
    Ok((pts, skipped))
}

/// A parameter the fit may move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    IntraBw,
    LlMax,
    /// The fitted LL rate ([`super::profile::LlFit`]).
    LlFit,
    NetBw,
    Base(Algo, Proto),
    IntraHop(Algo, Proto),
    NetHop(Algo, Proto),
    LaunchEager(Launcher),
}

impl Param {
    pub fn name(self) -> String {
        let ap = |a: Algo, p: Proto| format!("{}.{}", a.name().to_lowercase(), p.name());
        match self {
            Param::IntraBw => "intra.bw_gbps".into(),
            Param::LlMax => "ll_max_gbps".into(),
            Param::LlFit => "ll_fitted.gbps".into(),
            Param::NetBw => "inter.bw_gbps".into(),
            Param::Base(a, p) => format!("base_lat_us.{}", ap(a, p)),
            Param::IntraHop(a, p) => format!("intra.hop_lat_us.{}", ap(a, p)),
            Param::NetHop(a, p) => format!("inter.hop_lat_us.{}", ap(a, p)),
            Param::LaunchEager(l) => format!("launch_eager_us.{}", l.name()),
        }
    }

    fn slot(self, p: &mut Profile) -> &mut f64 {
        match self {
            Param::IntraBw => &mut p.intra.bw_gbps,
            Param::LlMax => &mut p.ll_max_gbps,
            Param::LlFit => {
                &mut p
                    .ll_fitted
                    .as_mut()
                    .expect("LL fit params need ll_fitted")
                    .gbps
            }
            Param::NetBw => &mut p.inter.as_mut().expect("net params need a network").bw_gbps,
            Param::Base(a, pr) => p.base_lat_us.get_mut(a, pr),
            Param::IntraHop(a, pr) => p.intra.hop_lat_us.get_mut(a, pr),
            Param::NetHop(a, pr) => p
                .inter
                .as_mut()
                .expect("net params need a network")
                .hop_lat_us
                .get_mut(a, pr),
            Param::LaunchEager(l) => p.launch_eager_us.get_mut(l),
        }
    }

    pub fn get(self, p: &Profile) -> f64 {
        let mut q = p.clone();
        *self.slot(&mut q)
    }

    pub fn set(self, p: &mut Profile, v: f64) {
        *self.slot(p) = v;
    }
}

/// The parameters `points` can tell apart, judged at the `base` profile's choices.
pub fn free_params(base: &Profile, points: &[Point]) -> anyhow::Result<Vec<Param>> {
    let mut set: Vec<Param> = vec![];
    let add = |set: &mut Vec<Param>, p: Param| {
        if !set.contains(&p) {
            set.push(p);
        }
    };
    let u = usage_of(base, points)?;
    let any_graph = points.iter().any(|p| p.graph);
    for pt in points {
        if !pt.graph && any_graph {
            add(&mut set, Param::LaunchEager(pt.launcher));
        }
    }
    if u.ll_capped {
        add(&mut set, Param::LlMax);
    }
    if u.intra_bw {
        add(&mut set, Param::IntraBw);
    }
    if !u.net.is_empty() {
        add(&mut set, Param::NetBw);
    }
    for (&(a, pr), s) in &u.steps {
        add(&mut set, Param::Base(a, pr));
        if s.len() >= 2 {
            add(&mut set, Param::IntraHop(a, pr));
        }
    }
    for (&(a, pr), ns) in &u.net {
        if ns.len() >= 2 {
            add(&mut set, Param::NetHop(a, pr));
        }
    }
    // A stable order, whatever the order of the points.
    set.sort_by_key(|p| p.name());
    Ok(set)
}

/// What the points use at the `base` profile's choices.
struct Usage {
    /// Step counts per (algorithm, protocol) used (one per rank count and collective).
    steps: std::collections::BTreeMap<(Algo, Proto), BTreeSet<usize>>,
    /// Rank counts per (algorithm, protocol) used across nodes.
    net: std::collections::BTreeMap<(Algo, Proto), BTreeSet<usize>>,
    ll_capped: bool,
    intra_bw: bool,
}

fn usage_of(base: &Profile, points: &[Point]) -> anyhow::Result<Usage> {
    let mut u = Usage {
        steps: Default::default(),
        net: Default::default(),
        ll_capped: false,
        intra_bw: false,
    };
    for pt in points {
        let multi = base.inter.is_some() && base.gpus_per_node.is_some_and(|g| pt.n > g);
        for t in &pt.terms {
            let (a, pr, _) = predict::choose(base, t.op, t.size, pt.n, &pt.force)?;
            let capped = pr == Proto::Ll
                && base.ll_max_gbps < base.intra.bw_gbps * pr.efficiency()
                && !multi;
            if capped {
                u.ll_capped = true;
            } else {
                u.intra_bw = true;
            }
            if multi {
                u.net.entry((a, pr)).or_default().insert(pt.n);
            }
            u.steps.entry((a, pr)).or_default().insert(match a {
                Algo::Ring => predict::ring_steps(t.op, pt.n, 1).0,
                Algo::Tree => pt.n,
            });
        }
    }
    Ok(u)
}

/// A parameter the fit left at the starting profile's value, and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HeldParam {
    pub name: String,
    pub value: f64,
    pub reason: String,
}

fn list(v: &BTreeSet<usize>) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The parameters the points touch but cannot pin down, held at their `base` values, with
/// the reason for each (`fitted`: the parameters actually fitted, which are never listed).
pub fn held_params(
    base: &Profile,
    points: &[Point],
    fitted: &[Param],
) -> anyhow::Result<Vec<HeldParam>> {
    let u = usage_of(base, points)?;
    let counts: BTreeSet<usize> = points.iter().map(|p| p.n).collect();
    let mut out = vec![];
    let mut hold = |p: Param, reason: String| {
        if !fitted.contains(&p) && !out.iter().any(|h: &HeldParam| h.name == p.name()) {
            out.push(HeldParam {
                name: p.name(),
                value: p.get(base),
                reason,
            });
        }
    };
    for (&(a, pr), s) in &u.steps {
        if s.len() < 2 {
            hold(
                Param::IntraHop(a, pr),
                format!(
                    "held at its table value: the data has one rank count for {} {} (n = {}), where base latency and per-hop latency move every point alike, so the base latency absorbs both; measure at several rank counts to fit it",
                    a.name(),
                    pr.name(),
                    list(&counts)
                ),
            );
        }
    }
    for (&(a, pr), ns) in &u.net {
        if ns.len() < 2 {
            hold(
                Param::NetHop(a, pr),
                format!(
                    "held at its table value: one multi-node rank count for {} {} (n = {}), indistinguishable from the base latency",
                    a.name(),
                    pr.name(),
                    list(ns)
                ),
            );
        }
    }
    if !points.iter().any(|p| p.graph) {
        for l in points.iter().map(|p| p.launcher) {
            hold(
                Param::LaunchEager(l),
                "held: without graph points the eager launch cost cannot be told from the base latency".into(),
            );
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.push(HeldParam {
        name: "launch_graph_us".into(),
        value: base.launch_graph_us,
        reason: "never fitted: in graph replay it is indistinguishable from the base latency"
            .into(),
    });
    Ok(out)
}

/// A note for modeled results at `nranks` ranks from a profile fitted at other rank counts;
/// `None` for built-in profiles and for rank counts the fit saw.
pub fn extrapolation_note(p: &Profile, nranks: usize) -> Option<String> {
    let counts = p.fitted_rank_counts.as_ref()?;
    if counts.contains(&nranks) {
        return None;
    }
    let set: BTreeSet<usize> = counts.iter().copied().collect();
    Some(format!(
        "profile '{}' was fitted on measurements at {} ranks only: at {nranks} ranks it extrapolates{}",
        p.name,
        list(&set),
        if set.len() < 2 {
            " (with one rank count one of each protocol's base and per-hop latencies was held at NCCL's table value, as the fit's held lines say, so the change with the rank count is NCCL's, not measured)"
        } else {
            ""
        }
    ))
}

fn residuals(base: &Profile, params: &[Param], theta: &[f64], pts: &[Point]) -> Option<Vec<f64>> {
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

fn cost(r: &[f64]) -> f64 {
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
fn huber_weights(r: &[f64], delta: Option<f64>) -> Vec<f64> {
    r.iter()
        .map(|x| match delta {
            Some(d) if x.abs() > d => d / x.abs(),
            _ => 1.0,
        })
        .collect()
}

/// Solves `a x = b` (small, symmetric positive definite after damping) by Gaussian elimination
/// with partial pivoting; `None` if singular.
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
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

/// One point of the fit report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PointFit {
    pub source: String,
    pub label: String,
    pub measured_us: f64,
    pub fitted_us: f64,
    /// fitted / measured - 1.
    pub rel_err: f64,
    /// Prediction of this point by a fit on all other points.
    pub loo_us: Option<f64>,
    pub loo_rel_err: Option<f64>,
}

/// One fitted parameter.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ParamFit {
    pub name: String,
    pub base: f64,
    pub fitted: f64,
}

/// The outcome of a fit.
#[derive(Debug, Clone)]
pub struct FitReport {
    pub profile: Profile,
    pub params: Vec<ParamFit>,
    pub points: Vec<PointFit>,
    pub median_abs_err: f64,
    /// `None` when there are too few points to leave one out.
    pub median_abs_loo_err: Option<f64>,
    /// Parameters the data touches but cannot pin down, held at the starting values.
    pub held: Vec<HeldParam>,
    /// Rank counts of the points (also recorded in the fitted profile).
    pub rank_counts: Vec<usize>,
}

impl FitReport {
    /// One line per parameter, fitted or held, for the fit table.
    pub fn param_lines(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .params
            .iter()
            .map(|p| format!("fitted {}: {:.4} -> {:.4}", p.name, p.base, p.fitted))
            .collect();
        v.extend(
            self.held
                .iter()
                .map(|h| format!("held {} = {:.4}: {}", h.name, h.value, h.reason)),
        );
        v
    }
}

/// Fits `base` to `pts`, then refits without each point in turn and predicts it.
pub fn calibrate(base: &Profile, pts: &[Point]) -> anyhow::Result<FitReport> {
    if pts.is_empty() {
        crate::usage_bail!("no measured collective or verify timings to fit in the results files");
    }
    let params = free_params(base, pts)?;
    if pts.len() < params.len() {
        crate::usage_bail!(
            "fitting {} parameters ({}) needs at least {} measured points; the results files hold {}",
            params.len(),
            params.iter().map(|p| p.name()).collect::<Vec<_>>().join(", "),
            params.len(),
            pts.len()
        );
    }
    let (fitted, params) = fit_active(base, params, pts)?;
    let loo_ok = pts.len() > params.len();
    let mut points = vec![];
    for (i, pt) in pts.iter().enumerate() {
        let f = predict(&fitted, pt)?;
        let loo = if loo_ok {
            let rest = all_but(pts, i);
            // The whole procedure again, from the base profile, without the point.
            let start = free_params(base, &rest)?;
            let (prof, _) = fit_active(base, start, &rest)?;
            Some(predict(&prof, pt)?)
        } else {
            None
        };
        points.push(PointFit {
            source: pt.source.clone(),
            label: pt.label.clone(),
            measured_us: pt.measured_us,
            fitted_us: f,
            rel_err: f / pt.measured_us - 1.0,
            loo_us: loo,
            loo_rel_err: loo.map(|l| l / pt.measured_us - 1.0),
        });
    }
    let median_abs_err =
        crate::measure::stats::median_abs(&points.iter().map(|p| p.rel_err).collect::<Vec<_>>());
    let median_abs_loo_err = if loo_ok {
        Some(crate::measure::stats::median_abs(
            &points
                .iter()
                .filter_map(|p| p.loo_rel_err)
                .collect::<Vec<_>>(),
        ))
    } else {
        None
    };
    let held = held_params(base, pts, &params)?;
    let rank_counts: Vec<usize> = pts
        .iter()
        .map(|p| p.n)
        .collect::<BTreeSet<usize>>()
        .into_iter()
        .collect();
    let mut fitted = fitted;
    fitted.fitted_rank_counts = Some(rank_counts.clone());
    Ok(FitReport {
        params: params
            .iter()
            .map(|p| ParamFit {
                name: p.name(),
                base: p.get(base),
                fitted: p.get(&fitted),
            })
            .collect(),
        profile: fitted,
        held,
        rank_counts,
        points,
        median_abs_err,
        median_abs_loo_err,
    })
}

/// Every point but the `i`-th: the data a leave-one-out prediction of point `i` is fitted on.
pub(crate) fn all_but(pts: &[Point], i: usize) -> Vec<Point> {
    pts.iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .map(|(_, p)| p.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::costmodel::profile::builtin;

    /// nvlink-h200 with every fittable parameter moved by a known factor.
    fn truth() -> Profile {
        let mut p = builtin("nvlink-h200").unwrap();
        p.intra.hop_lat_us.ring.ll *= 1.4;
        p.intra.hop_lat_us.ring.ll128 *= 0.8;
        p.intra.hop_lat_us.ring.simple *= 1.2;
        p.intra.bw_gbps *= 0.85;
        p.ll_max_gbps *= 0.7;
        p.launch_eager_us.processes *= 1.3;
        p.base_lat_us.ring.simple *= 1.25;
        p
    }

    /// Points of an nccl-tests style sweep, 8 KB - 1 MB, three protocols forced, eager and
    /// graph, on each of `ns` rank counts, timed by `truth` times a deterministic wobble.
    fn sweep(truth: &Profile, ns: &[usize], wobble: f64) -> Vec<Point> {
        let mut v = vec![];
        let mut i = 0u32;
        for &n in ns {
            for proto in ["LL", "LL128", "Simple"] {
                let mut size = 8192u64;
                while size <= 1 << 20 {
                    for graph in [false, true] {
                        let mut pt = Point {
                            source: "synthetic".into(),
                            label: format!("{proto} {size} n={n} graph={graph}"),
                            terms: vec![Term {
                                op: CollectiveKind::AllReduce,
                                size,
                                count: 1,
                            }],
                            n,
                            graph,
                            launcher: Launcher::Processes,
                            force: Force::parse(Some(proto), Some("ring")).unwrap(),
                            measured_us: 0.0,
                        };
                        // Deterministic +-wobble pattern, like measurement noise.
                        i += 1;
                        let noise = 1.0 + wobble * (((i * 7919) % 13) as f64 / 6.0 - 1.0);
                        pt.measured_us = predict(truth, &pt).unwrap() * noise;
                        v.push(pt);
                    }
                    size *= 2;
                }
            }
        }
        v
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a / b - 1.0).abs() < tol
    }

    #[test]
    fn recovers_known_parameters_from_two_ranks() {
        let t = truth();
        let base = builtin("nvlink-h200").unwrap();
        let pts = sweep(&t, &[2], 0.0);
        let r = calibrate(&base, &pts).unwrap();
        let names: Vec<&str> = r.params.iter().map(|p| p.name.as_str()).collect();
        // One rank count: base latencies are fitted, hop latencies held at the table.
        assert!(names.contains(&"base_lat_us.ring.LL"), "{names:?}");
        assert!(
            !names.iter().any(|n| n.starts_with("intra.hop_lat")),
            "{names:?}"
        );
        assert_eq!(r.rank_counts, [2]);
        assert_eq!(r.profile.fitted_rank_counts.as_deref(), Some(&[2][..]));
        assert_eq!(
            r.profile.intra.hop_lat_us.ring.ll,
            base.intra.hop_lat_us.ring.ll
        );
        for pf in &r.params {
            // At n = 2 a ring all-reduce takes 2 steps: base + 2 hop is what the data pins
            // down, so the base absorbs twice the hop's departure from the table.
            let hop = |p: Proto| t.intra.hop_lat_us.ring.get(p) - base.intra.hop_lat_us.ring.get(p);
            let want = match pf.name.as_str() {
                "base_lat_us.ring.LL" => t.base_lat_us.ring.ll + 2.0 * hop(Proto::Ll),
                "base_lat_us.ring.LL128" => t.base_lat_us.ring.ll128 + 2.0 * hop(Proto::Ll128),
                "base_lat_us.ring.Simple" => t.base_lat_us.ring.simple + 2.0 * hop(Proto::Simple),
                n => Param::all_named(n).get(&t),
            };
            assert!(
                close(pf.fitted, want, 0.01),
                "{}: {} vs {want}",
                pf.name,
                pf.fitted
            );
        }
        assert!(r.median_abs_err < 1e-4 && r.median_abs_loo_err.unwrap() < 1e-3);
    }

    #[test]
    fn recovers_base_and_hop_from_several_rank_counts() {
        let t = truth();
        let base = builtin("nvlink-h200").unwrap();
        let pts = sweep(&t, &[2, 4, 8], 0.0);
        let r = calibrate(&base, &pts).unwrap();
        assert!(r.params.iter().any(|p| p.name == "base_lat_us.ring.Simple"));
        for pf in &r.params {
            let want = Param::all_named(&pf.name).get(&t);
            assert!(
                close(pf.fitted, want, 0.01),
                "{}: {} vs {want}",
                pf.name,
                pf.fitted
            );
        }
    }

    #[test]
    fn leave_one_out_on_noisy_data() {
        let t = truth();
        let base = builtin("nvlink-h200").unwrap();
        let pts = sweep(&t, &[2], 0.03);
        let r = calibrate(&base, &pts).unwrap();
        let loo = r.median_abs_loo_err.unwrap();
        // +-3% noise: fit and leave-one-out errors stay near the noise, and leaving a point out
        // never helps it.
        assert!(r.median_abs_err < 0.03, "{}", r.median_abs_err);
        assert!(loo < 0.04 && loo >= r.median_abs_err * 0.9, "{loo}");
        for p in &r.points {
            assert!(p.loo_rel_err.unwrap().abs() < 0.1, "{}", p.label);
        }
    }

    #[test]
    fn too_few_points_is_refused_with_the_number_needed() {
        let base = builtin("nvlink-h200").unwrap();
        let pts = sweep(&truth(), &[2], 0.0);
        // Two LL and two Simple points: five parameters (LL ceiling, bus bandwidth, two base
        // latencies, eager launch) from four points.
        let ll = pts.iter().filter(|p| p.label.starts_with("LL ")).take(2);
        let simple = pts.iter().filter(|p| p.label.starts_with("Simple")).take(2);
        let few: Vec<Point> = ll.chain(simple).cloned().collect();
        assert_eq!(few.len(), 4);
        let e = calibrate(&base, &few).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        let need = free_params(&base, &few).unwrap().len();
        assert!(need > 4);
        assert!(
            e.to_string()
                .contains(&format!("needs at least {need} measured points")),
            "{e}"
        );
        assert!(calibrate(&base, &[]).is_err());
    }

    #[test]
    fn held_parameters_are_named_with_the_reason() {
        let t = truth();
        let base = builtin("nvlink-h200").unwrap();
        let r = calibrate(&base, &sweep(&t, &[2], 0.0)).unwrap();
        let held: Vec<&str> = r.held.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(
            held,
            [
                "intra.hop_lat_us.ring.LL",
                "intra.hop_lat_us.ring.LL128",
                "intra.hop_lat_us.ring.Simple",
                "launch_graph_us"
            ]
        );
        let h = &r.held[0];
        assert_eq!(h.value, base.intra.hop_lat_us.ring.ll);
        assert!(
            h.reason.starts_with(
                "held at its table value: the data has one rank count for Ring LL (n = 2)"
            ),
            "{}",
            h.reason
        );
        let lines = r.param_lines();
        assert!(lines
            .iter()
            .any(|l| l.starts_with("fitted base_lat_us.ring.LL:")));
        assert!(
            lines.iter().any(|l| l.starts_with(
                "held intra.hop_lat_us.ring.Simple = 3.4000: held at its table value"
            )),
            "{lines:?}"
        );
        // Several rank counts: the hops are fitted, only the graph launch cost is held.
        let r = calibrate(&base, &sweep(&t, &[2, 4, 8], 0.0)).unwrap();
        let held: Vec<&str> = r.held.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(held, ["launch_graph_us"]);
        assert_eq!(r.rank_counts, [2, 4, 8]);
        // Eager points only: the eager launch cost is held too, with its reason.
        let eager: Vec<Point> = sweep(&t, &[2, 4], 0.0)
            .into_iter()
            .filter(|p| !p.graph)
            .collect();
        let r = calibrate(&base, &eager).unwrap();
        let l = r
            .held
            .iter()
            .find(|h| h.name == "launch_eager_us.processes")
            .unwrap();
        assert!(l.reason.contains("without graph points"), "{}", l.reason);
        assert!(!r.params.iter().any(|p| p.name.starts_with("launch_eager")));
    }

    #[test]
    fn a_profile_used_at_another_rank_count_says_it_extrapolates() {
        let base = builtin("nvlink-h200").unwrap();
        assert_eq!(extrapolation_note(&base, 8), None);
        let r = calibrate(&base, &sweep(&truth(), &[2], 0.0)).unwrap();
        let mut p = r.profile;
        p.name = "h200x2".into();
        assert_eq!(extrapolation_note(&p, 2), None);
        let n = extrapolation_note(&p, 8).unwrap();
        assert!(
            n.starts_with("profile 'h200x2' was fitted on measurements at 2 ranks only: at 8 ranks it extrapolates (with one rank count"),
            "{n}"
        );
        p.fitted_rank_counts = Some(vec![2, 4]);
        let n = extrapolation_note(&p, 8).unwrap();
        assert!(n.ends_with("at 8 ranks it extrapolates"), "{n}");
        // The rank counts survive the profile file.
        let back: Profile = serde_json::from_value(serde_json::to_value(&p).unwrap()).unwrap();
        assert_eq!(back.fitted_rank_counts, Some(vec![2, 4]));
    }

    impl Param {
        /// The parameter of that name (tests only).
        fn all_named(name: &str) -> Param {
            let mut all = vec![Param::IntraBw, Param::LlMax, Param::NetBw];
            for a in Algo::ALL {
                for p in Proto::ALL {
                    all.extend([
                        Param::Base(a, p),
                        Param::IntraHop(a, p),
                        Param::NetHop(a, p),
                    ]);
                }
            }
            all.extend([
                Param::LaunchEager(Launcher::Threads),
                Param::LaunchEager(Launcher::Processes),
            ]);
            all.into_iter().find(|p| p.name() == name).unwrap()
        }
    }
}
