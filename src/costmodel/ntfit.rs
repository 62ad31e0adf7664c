//! `model fit --nccl-tests`: a profile of one's own machine from the tables nccl-tests prints
//! ([`crate::nccl_tests`]), bounded by physics.
//!
//! Every table (one binary, one rank count, one launch mode) is a set of points, one per size
//! (out-of-place time). The model prices a size with Ring/LL up to a switch size and Ring/Simple
//! above it ([`ObservedChoice`]): NCCL's tuner picks by its own estimates, and the measured
//! switch can cost time (the step of 8x RTX 5090 from 24.5 us at 2 KB to 36.3 us at 4 KB),
//! which a fastest-pair model cannot reproduce. The fit searches the switch of each table
//! (every boundary between two measured sizes, and none) and, for each, fits by a Huber loss
//! on log time:
//! - the LL and Simple per-hop latencies (with one rank count they absorb the base latency,
//!   which stays at NCCL's table value, so the latency grows with the ring's steps at other
//!   rank counts; with several rank counts the base latencies are fitted too);
//! - the LL rate (bus bytes per us of LL), at most the link's rate x 1/2;
//! - the Simple bus bandwidth, at most the link's rate;
//! - the hop latencies at least the measured peer-to-peer latency, where it is given.
//!
//! A parameter that ends on its bound is listed ([`NtFit::at_bound`]): the data asked for more
//! than the link can give, so a term of the model is missing or the rate given is wrong.
//! Leave-one-size-out: every size is left out in turn, the whole procedure (switch search
//! included) runs on the rest, and the left-out size is predicted.

mod checks;

use std::collections::BTreeSet;

pub(crate) use checks::{choose_base, warnings, BaseChoice};
use rayon::prelude::*;

use super::fit::{self, Param, Point, Term};
use super::predict::Force;
use super::profile::{Algo, LlFit, ObservedChoice, Profile, Proto};
use crate::model::CollectiveKind;
use crate::nccl_tests::NcclTestsRun;
use crate::request::Launcher;

/// One table of nccl-tests as fit points.
#[derive(Debug, Clone)]
pub(crate) struct Table {
    /// `FILE run K` (the K-th `# nThread` header of the file).
    pub(crate) label: String,
    pub(crate) op: CollectiveKind,
    pub(crate) nranks: usize,
    /// GPU name of the first rank line, when listed.
    pub(crate) device: Option<String>,
    pub(crate) points: Vec<Point>,
    /// Whether NCCL's log lines in the run name P2P (`Some(true)`), only host-memory or network
    /// transports (`Some(false)`), or none (`None`: nccl-tests' own lines never do).
    pub(crate) p2p: Option<bool>,
    /// Why the table looks cut short, where it does ([`checks::cut_of`]).
    pub(crate) cut: Option<String>,
}

/// The collective an nccl-tests binary runs, where the cost model has it.
fn op_of_binary(b: &str) -> Option<CollectiveKind> {
    match b.trim().trim_end_matches("_perf") {
        "all_reduce" => Some(CollectiveKind::AllReduce),
        "all_gather" => Some(CollectiveKind::AllGather),
        "reduce_scatter" => Some(CollectiveKind::ReduceScatter),
        _ => None,
    }
}

/// The tables of `runs` (read from `source`), and one line per run left out.
pub(crate) fn tables_of(source: &str, runs: &[NcclTestsRun]) -> (Vec<Table>, Vec<String>) {
    let mut out = vec![];
    let mut skipped = vec![];
    for (k, r) in runs.iter().enumerate() {
        let label = format!("{source} run {}", k + 1);
        let Some(bin) = r.binary.as_deref() else {
            skipped.push(format!(
                "{label}: no binary named (no '# Collective test starting:' line nor a '..._perf' command before the header): which collective it ran is unknown"
            ));
            continue;
        };
        let Some(op) = op_of_binary(bin) else {
            skipped.push(format!(
                "{label}: {bin}: the cost model prices all_reduce, all_gather and reduce_scatter"
            ));
            continue;
        };
        let Some(n) = r.nranks().filter(|&n| n >= 2) else {
            skipped.push(format!("{label}: fewer than 2 ranks"));
            continue;
        };
        let points = r
            .rows
            .iter()
            .filter(|row| row.size_bytes > 0 && row.oop_us > 0.0)
            .map(|row| Point {
                source: source.into(),
                label: format!(
                    "{} {} B n={n} {}",
                    op.name(),
                    row.size_bytes,
                    if r.graph() { "graph" } else { "eager" }
                ),
                terms: vec![Term {
                    op,
                    size: row.size_bytes,
                    count: 1,
                }],
                n,
                graph: r.graph(),
                launcher: Launcher::Threads,
                force: Force::default(),
                measured_us: row.oop_us,
            })
            .collect::<Vec<_>>();
        if points.is_empty() {
            skipped.push(format!("{label}: no size above 0 bytes"));
            continue;
        }
        let p2p = if r.transports.iter().any(|t| t.starts_with("P2P")) {
            Some(true)
        } else if r.transports.is_empty() {
            None
        } else {
            Some(false)
        };
        out.push(Table {
            label,
            op,
            nranks: n,
            device: r.devices.first().cloned(),
            points,
            p2p,
            cut: checks::cut_of(r),
        });
    }
    (out, skipped)
}

/// What bounds the fit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Physics {
    /// The link's rate per direction, GB/s.
    pub(crate) rate_gbps: f64,
    /// Measured peer-to-peer latency, us (a floor of every hop), where known.
    pub(crate) p2p_lat_us: Option<f64>,
}

/// The outcome of a fit on nccl-tests tables.
#[derive(Debug, Clone)]
pub(crate) struct NtFit {
    pub(crate) report: fit::FitReport,
    /// One line per parameter that ended on its physical bound.
    pub(crate) at_bound: Vec<String>,
    /// The switch found per table.
    pub(crate) switches: Vec<ObservedChoice>,
}

/// The starting profile: `base` with an LL rate of its own and the link's rate.
fn start(base: &Profile, phys: &Physics, pts: &[Point]) -> Profile {
    let mut p = base.clone();
    p.intra.rate_gbps = Some(phys.rate_gbps);
    p.cross_socket = None;
    p.ll128_default = false;
    let max_bus = pts
        .iter()
        .flat_map(|pt| {
            pt.terms
                .iter()
                .map(move |t| t.op.ops().ring_bytes(t.size as f64, pt.n))
        })
        .fold(0.0, f64::max);
    p.ll_fitted = Some(LlFit {
        gbps: (phys.rate_gbps * Proto::Ll.efficiency() / 2.0).min(p.intra.bw_gbps),
        up_to_bus_bytes: max_bus.max(1.0),
    });
    p.intra.bw_gbps = p.intra.bw_gbps.min(phys.rate_gbps);
    if let Some(lat) = phys.p2p_lat_us {
        for a in Algo::ALL {
            for pr in Proto::ALL {
                let h = p.intra.hop_lat_us.get_mut(a, pr);
                *h = h.max(lat);
            }
        }
    }
    p
}

/// The parameters and their bounds for points at `counts` rank counts.
fn params(phys: &Physics, counts: usize) -> Vec<(Param, (f64, f64))> {
    let hop_lo = phys.p2p_lat_us.unwrap_or(0.0);
    let mut v = vec![
        (
            Param::IntraHop(Algo::Ring, Proto::Ll),
            (hop_lo, f64::INFINITY),
        ),
        (
            Param::IntraHop(Algo::Ring, Proto::Simple),
            (hop_lo, f64::INFINITY),
        ),
        (
            Param::LlFit,
            (1e-3, phys.rate_gbps * Proto::Ll.efficiency()),
        ),
        (Param::IntraBw, (1e-3, phys.rate_gbps)),
    ];
    if counts >= 2 {
        v.push((Param::Base(Algo::Ring, Proto::Ll), (0.0, f64::INFINITY)));
        v.push((Param::Base(Algo::Ring, Proto::Simple), (0.0, f64::INFINITY)));
    }
    v
}

fn sizes_of(t: &[Point]) -> Vec<u64> {
    let s: BTreeSet<u64> = t.iter().map(|p| p.terms[0].size).collect();
    s.into_iter().collect()
}

/// The Huber threshold of the fit, on log time: errors within ~5% count quadratically, larger
/// ones linearly, so one published hiccup (a size timed at 10x its neighbours) does not bend
/// the whole fit.
pub(crate) const HUBER_DELTA: f64 = 0.05;

fn log_cost(p: &Profile, pts: &[Point]) -> f64 {
    let r: Option<Vec<f64>> = pts
        .iter()
        .map(|pt| match fit::predict(p, pt) {
            Ok(x) if x > 0.0 && x.is_finite() => Some((x / pt.measured_us).ln()),
            _ => None,
        })
        .collect();
    r.map_or(f64::INFINITY, |r| fit::robust_cost(&r, Some(HUBER_DELTA)))
}

/// Fits `pts` (grouped by collective and rank count): the switch of every group searched, the
/// parameters fitted for each candidate, the best kept.
fn fit_points(base: &Profile, phys: &Physics, pts: &[Point]) -> anyhow::Result<Profile> {
    let counts: BTreeSet<usize> = pts.iter().map(|p| p.n).collect();
    let (ps, bounds): (Vec<Param>, Vec<(f64, f64)>) =
        params(phys, counts.len()).into_iter().unzip();
    let mut prof = start(base, phys, pts);
    let groups: BTreeSet<(CollectiveKind, usize)> =
        pts.iter().map(|p| (p.terms[0].op, p.n)).collect();
    prof.observed = groups
        .iter()
        .map(|&(op, n)| ObservedChoice {
            op,
            nranks: n,
            ll_up_to_bytes: 0,
        })
        .collect();
    let mut best: Option<(f64, Profile)> = None;
    // The switches already fitted: fitting them again would give the same profile and cost,
    // which never beats the best (it is at most that cost + 1e-12 since), so they are skipped.
    let mut fitted: BTreeSet<Vec<u64>> = BTreeSet::new();
    // Coordinate search: each group's switch in turn, the others held; two passes.
    for _pass in 0..2 {
        for gi in 0..groups.len() {
            let (op, n) = (prof.observed[gi].op, prof.observed[gi].nranks);
            let group: Vec<Point> = pts
                .iter()
                .filter(|p| p.terms[0].op == op && p.n == n)
                .cloned()
                .collect();
            let mut cands = vec![0u64];
            cands.extend(sizes_of(&group));
            for c in cands {
                let mut q = best.as_ref().map(|b| b.1.clone()).unwrap_or(prof.clone());
                q.observed[gi].ll_up_to_bytes = c;
                if !fitted.insert(q.observed.iter().map(|o| o.ll_up_to_bytes).collect()) {
                    continue;
                }
                // Start every candidate from the same place: the result does not depend on
                // the order of the search.
                let mut s = start(base, phys, pts);
                s.observed = q.observed.clone();
                let f = fit::fit_bounded_robust(&s, &ps, &bounds, pts, Some(HUBER_DELTA))?;
                let cost = log_cost(&f, pts);
                if best.as_ref().is_none_or(|b| cost < b.0 - 1e-12) {
                    best = Some((cost, f));
                }
            }
            if let Some(b) = &best {
                prof = b.1.clone();
            }
        }
        if groups.len() == 1 {
            break;
        }
    }
    Ok(best.map(|b| b.1).unwrap_or(prof))
}

/// Fits `base` to the tables, then leaves each size out in turn and predicts it.
pub(crate) fn calibrate(base: &Profile, phys: &Physics, tables: &[Table]) -> anyhow::Result<NtFit> {
    let pts: Vec<Point> = tables.iter().flat_map(|t| t.points.clone()).collect();
    if pts.len() < 5 {
        crate::usage_bail!(
            "fitting a profile to nccl-tests needs at least 5 sizes above 0 bytes; the tables hold {}",
            pts.len()
        );
    }
    if !(phys.rate_gbps.is_finite() && phys.rate_gbps > 0.0) {
        crate::usage_bail!("the link rate must be positive (--link-gbps)");
    }
    checks::check_rows(base, phys.rate_gbps, tables)?;
    let fitted = fit_points(base, phys, &pts)?;
    let s0 = start(base, phys, &pts);
    let counts: BTreeSet<usize> = pts.iter().map(|p| p.n).collect();
    let pb = params(phys, counts.len());
    // The leave-one-out fits are independent of one another: run in parallel, collected in
    // the points' order (the same result, and the same first error, as one after another).
    let points = pts
        .par_iter()
        .enumerate()
        .map(|(i, pt)| {
            let f = fit::predict(&fitted, pt)?;
            let rest = fit::all_but(&pts, i);
            let loo = fit::predict(&fit_points(base, phys, &rest)?, pt)?;
            Ok(fit::PointFit::new(pt, f, Some(loo)))
        })
        .collect::<Vec<anyhow::Result<fit::PointFit>>>()
        .into_iter()
        .collect::<anyhow::Result<Vec<_>>>()?;
    let med = |v: Vec<f64>| crate::measure::stats::median_abs(&v);
    let mut at_bound = vec![];
    for (p, (lo, hi)) in &pb {
        let v = p.get(&fitted);
        if hi.is_finite() && (v - hi).abs() <= 1e-6 * hi.abs().max(1.0) {
            at_bound.push(format!(
                "{} = {v:.4} at its upper bound {hi:.4} (link rate {} GB/s x payload share)",
                p.name(),
                phys.rate_gbps
            ));
        } else if (v - lo.max(1e-9)).abs() <= 1e-6 * lo.max(1.0) {
            at_bound.push(format!(
                "{} = {v:.4} at its lower bound {lo:.4} ({})",
                p.name(),
                if *lo > 0.0 {
                    "the measured peer-to-peer latency"
                } else {
                    "zero: the fixed costs held (base latency, launch) alone reach the measured time"
                }
            ));
        }
    }
    let mut held = vec![];
    if counts.len() < 2 {
        for pr in [Proto::Ll, Proto::Simple] {
            let pa = Param::Base(Algo::Ring, pr);
            held.push(fit::HeldParam {
                name: pa.name(),
                value: pa.get(&s0),
                reason: format!(
                    "held at NCCL's table value: one rank count (n = {}), where the per-hop latency absorbs the base latency (the latency grows with the steps of the ring at other rank counts); give tables at several rank counts to fit both",
                    counts.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", ")
                ),
            });
        }
    }
    held.push(fit::HeldParam {
        name: "tree, LL128".into(),
        value: 0.0,
        reason: "not fitted: the measured switch prices every size with Ring/LL or Ring/Simple at the fitted collectives and rank counts".into(),
    });
    let rank_counts: Vec<usize> = counts.into_iter().collect();
    let mut profile = fitted.clone();
    profile.fitted_rank_counts = Some(rank_counts.clone());
    let moved: Vec<Param> = pb.iter().map(|(p, _)| *p).collect();
    profile.fit_scope = Some(fit::scope_of(&base.name, &moved, &held, &pts));
    let report = fit::FitReport {
        params: pb
            .iter()
            .map(|(p, _)| fit::ParamFit {
                name: p.name(),
                base: p.get(&s0),
                fitted: p.get(&fitted),
            })
            .collect(),
        median_abs_err: med(points.iter().map(|p| p.rel_err).collect()),
        median_abs_loo_err: Some(med(points.iter().filter_map(|p| p.loo_rel_err).collect())),
        profile,
        points,
        held,
        rank_counts,
    };
    Ok(NtFit {
        switches: fitted.observed.clone(),
        report,
        at_bound,
    })
}

/// The leave-one-size-out errors of one table fitted on its own.
#[derive(Debug, Clone)]
pub(crate) struct TableLoso {
    pub(crate) label: String,
    pub(crate) op: CollectiveKind,
    pub(crate) nranks: usize,
    /// `(size, leave-one-size-out relative error)`, in the table's order.
    pub(crate) errs: Vec<(u64, f64)>,
    pub(crate) median_abs: f64,
    pub(crate) max_abs: f64,
}

/// Fits `table` on its own and leaves each size out in turn.
pub(crate) fn loso_of_table(
    base: &Profile,
    phys: &Physics,
    table: &Table,
) -> anyhow::Result<TableLoso> {
    let f = calibrate(base, phys, std::slice::from_ref(table))?;
    let errs: Vec<(u64, f64)> = table
        .points
        .iter()
        .zip(&f.report.points)
        .map(|(pt, pf)| (pt.terms[0].size, pf.loo_rel_err.unwrap_or(f64::NAN)))
        .collect();
    let v: Vec<f64> = errs.iter().map(|e| e.1).collect();
    Ok(TableLoso {
        label: table.label.clone(),
        op: table.op,
        nranks: table.nranks,
        median_abs: crate::measure::stats::median_abs(&v),
        max_abs: v.iter().map(|x| x.abs()).fold(0.0, f64::max),
        errs,
    })
}

/// The relative error (predicted / measured - 1) of `prof` at each size of `table` within
/// `[lo, hi]` bytes.
pub(crate) fn profile_errors(
    prof: &Profile,
    table: &Table,
    lo: u64,
    hi: u64,
) -> anyhow::Result<Vec<(u64, f64, f64)>> {
    table
        .points
        .iter()
        .filter(|p| (lo..=hi).contains(&p.terms[0].size))
        .map(|p| {
            let x = fit::predict(prof, p)?;
            Ok((p.terms[0].size, x, x / p.measured_us - 1.0))
        })
        .collect()
}

/// The public nccl-tests tables of PCIe hosts the built-in profiles are held against
/// (`tests/data/public-nccl/`, with their sources there), embedded at build time.
const PUBLIC_TABLES: [(&str, &str); 4] = [
    (
        "S01 8x RTX 5090",
        include_str!("../../tests/data/public-nccl/S01_aikitoria_8x5090_p2p.txt"),
    ),
    (
        "S02 2x RTX 2080 Ti",
        include_str!("../../tests/data/public-nccl/S02_anthonyhoo_2x2080ti_pcie3_switch_nop2p.txt"),
    ),
    (
        "S03 4x V100 PCIe",
        include_str!("../../tests/data/public-nccl/S03_sheffield_bessemer_4xV100PCIe_noNVLink.txt"),
    ),
    (
        "S13 8x RTX 4090",
        include_str!(
            "../../tests/data/public-nccl/S13_chlc_8x4090_dualEPYC7542_SYS_p2p_off_on.txt"
        ),
    ),
];

/// `(hosts, tables, median |error|)` of `prof` against the embedded public tables at
/// `lo..=hi` bytes, computed now.
pub(crate) fn public_spread(prof: &Profile, lo: u64, hi: u64) -> (usize, usize, f64) {
    let (mut hosts, mut tables, mut errs) = (0, 0, vec![]);
    for (name, text) in PUBLIC_TABLES {
        let Ok(runs) = crate::nccl_tests::parse_runs(text) else {
            continue;
        };
        let (ts, _) = tables_of(name, &runs);
        let mut any = false;
        for t in &ts {
            if let Ok(e) = profile_errors(prof, t, lo, hi) {
                if !e.is_empty() {
                    any = true;
                    tables += 1;
                    errs.extend(e.iter().map(|x| x.2));
                }
            }
        }
        hosts += usize::from(any);
    }
    (hosts, tables, crate::measure::stats::median_abs(&errs))
}

/// The note a built-in profile prints: its spread against the public PCIe hosts (PCIe
/// profiles), or that none of its link is in the public set.
pub(crate) fn builtin_spread_note(prof: &Profile) -> String {
    if !prof.name.starts_with("pcie") {
        return format!(
            "built-in {} (modeled, uncalibrated): the public set holds no nccl-tests table of its link, so its error on this machine is not known; calibrate with `model fit` on measured records or `model fit --nccl-tests`",
            prof.name
        );
    }
    let (hosts, tables, med) = public_spread(prof, 32 * 1024, 64 * 1024);
    format!(
        "built-in {} (modeled, uncalibrated) against {hosts} public PCIe hosts ({tables} nccl-tests tables): median |error| {:.0}% at 32-64 KB (`model validate` lists them); calibrate with `model fit --nccl-tests`",
        prof.name,
        med * 100.0
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every switch candidate of a public table is fitted to a minimum: moving any parameter
    /// that is not on a bound by 0.01% either way lowers no cost. (The solver used to stop a
    /// third of these fits at its iteration cap while a hop latency was still creeping down
    /// beside an LL rate held on its bound.)
    #[test]
    fn every_switch_candidate_of_a_public_table_ends_at_a_minimum() {
        let text = include_str!(
            "../../tests/data/public-nccl/S02_anthonyhoo_2x2080ti_pcie3_switch_nop2p.txt"
        );
        let tables = tables_of("S02", &crate::nccl_tests::parse_runs(text).unwrap()).0;
        let pts = &tables[0].points;
        let phys = Physics {
            rate_gbps: 15.75,
            p2p_lat_us: None,
        };
        let base = super::super::profile::builtin("pcie-gen5").unwrap();
        let (ps, bounds): (Vec<Param>, Vec<(f64, f64)>) = params(&phys, 1).into_iter().unzip();
        let mut cands = vec![0];
        cands.extend(sizes_of(pts));
        let mut checked = 0;
        for c in cands {
            let mut s = start(&base, &phys, pts);
            s.observed = vec![ObservedChoice {
                op: tables[0].op,
                nranks: tables[0].nranks,
                ll_up_to_bytes: c,
            }];
            let f = fit::fit_bounded_robust(&s, &ps, &bounds, pts, Some(HUBER_DELTA)).unwrap();
            let cost = log_cost(&f, pts);
            for (p, &(lo, hi)) in ps.iter().zip(&bounds) {
                let v = p.get(&f);
                if v <= lo.max(1e-9) * (1.0 + 1e-9) || v >= hi * (1.0 - 1e-9) {
                    continue;
                }
                for x in [1.0001, 1.0 / 1.0001] {
                    let mut g = f.clone();
                    p.set(&mut g, v * x);
                    let moved = log_cost(&g, pts);
                    assert!(
                        moved >= cost * (1.0 - 1e-9),
                        "switch {c} B: {} = {v} x {x} lowers the cost {cost} to {moved}",
                        p.name()
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 50, "{checked} moves checked");
    }
}
