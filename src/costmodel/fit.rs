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

mod params;
mod points;
mod solver;

pub(crate) use params::scope_of;
pub(crate) use params::{
    extrapolation_note, free_params, held_params, range_note, HeldParam, Param,
};
pub(crate) use points::{points_of, predict, Point, Term};
pub(crate) use solver::fit_active;
pub(crate) use solver::{fit_bounded_robust, robust_cost};

use std::collections::BTreeSet;

use super::profile::Profile;
#[cfg(test)]
use {
    super::predict::Force,
    super::profile::{Algo, Proto},
    crate::model::CollectiveKind,
    crate::request::Launcher,
};

/// One point of the fit report.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct PointFit {
    pub(crate) source: String,
    pub(crate) label: String,
    pub(crate) measured_us: f64,
    pub(crate) fitted_us: f64,
    /// fitted / measured - 1.
    pub(crate) rel_err: f64,
    /// Prediction of this point by a fit on all other points.
    pub(crate) loo_us: Option<f64>,
    pub(crate) loo_rel_err: Option<f64>,
}

impl PointFit {
    /// `pt` fitted at `fitted_us`, and predicted at `loo_us` by a fit without it.
    pub(crate) fn new(pt: &Point, fitted_us: f64, loo_us: Option<f64>) -> PointFit {
        PointFit {
            source: pt.source.clone(),
            label: pt.label.clone(),
            measured_us: pt.measured_us,
            fitted_us,
            rel_err: fitted_us / pt.measured_us - 1.0,
            loo_us,
            loo_rel_err: loo_us.map(|l| l / pt.measured_us - 1.0),
        }
    }
}

/// One fitted parameter.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct ParamFit {
    pub(crate) name: String,
    pub(crate) base: f64,
    pub(crate) fitted: f64,
}

/// The outcome of a fit.
#[derive(Debug, Clone)]
pub(crate) struct FitReport {
    pub(crate) profile: Profile,
    pub(crate) params: Vec<ParamFit>,
    pub(crate) points: Vec<PointFit>,
    pub(crate) median_abs_err: f64,
    /// `None` when there are too few points to leave one out.
    pub(crate) median_abs_loo_err: Option<f64>,
    /// Parameters the data touches but cannot pin down, held at the starting values.
    pub(crate) held: Vec<HeldParam>,
    /// Rank counts of the points (also recorded in the fitted profile).
    pub(crate) rank_counts: Vec<usize>,
}

impl FitReport {
    /// One line per parameter, fitted or held, for the fit table.
    pub(crate) fn param_lines(&self) -> Vec<String> {
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
pub(crate) fn calibrate(base: &Profile, pts: &[Point]) -> anyhow::Result<FitReport> {
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
        points.push(PointFit::new(pt, f, loo));
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
    fitted.fit_scope = Some(scope_of(&base.name, &params, &held, pts));
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
        // What `calibrate` fits and holds, from the functions it reports them from, without
        // its 144 leave-one-out refits, which this test does not check (the other tests run
        // `calibrate` whole, leave-one-out included): the parameters and their fitted values
        // are `fit_active`'s, the held ones `held_params` of those.
        let (fitted, params) = fit_active(&base, free_params(&base, &pts).unwrap(), &pts).unwrap();
        assert!(params.iter().any(|p| p.name() == "base_lat_us.ring.Simple"));
        for p in &params {
            let (got, want) = (p.get(&fitted), p.get(&t));
            assert!(close(got, want, 0.01), "{}: {got} vs {want}", p.name());
        }
        // Several rank counts: the hops are fitted, only the graph launch cost is held (the
        // one-rank-count case is `held_parameters_are_named_with_the_reason`).
        let held: Vec<String> = held_params(&base, &pts, &params)
            .unwrap()
            .into_iter()
            .map(|h| h.name)
            .collect();
        assert_eq!(held, ["launch_graph_us"]);
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
        // Several rank counts (hops fitted, only the graph launch cost held): checked in
        // `recovers_base_and_hop_from_several_rank_counts`.
        // Eager points only: the eager launch cost is held too, with its reason.
        let eager: Vec<Point> = sweep(&t, &[2, 4], 0.0)
            .into_iter()
            .filter(|p| !p.graph)
            .collect();
        let r = calibrate(&base, &eager).unwrap();
        assert_eq!(r.rank_counts, [2, 4]);
        let l = r
            .held
            .iter()
            .find(|h| h.name == "launch_eager_us.processes")
            .unwrap();
        assert!(l.reason.contains("without graph points"), "{}", l.reason);
        assert!(!r.params.iter().any(|p| p.name.starts_with("launch_eager")));
    }

    /// Where a parameter is said not to move a point (`Param::moves`, which the Jacobian
    /// skips), the model's time of the point is the same bit for bit at that parameter x0.5
    /// and x3: here the link bandwidth under a measured LL switch, for all-reduces on one node
    /// whose bus bytes lie within the fitted LL range (4 KB to 256 KB, 2 ranks: bus factor 1,
    /// all below the 1 MB range) — and sizes past the range, or Simple, do move.
    #[test]
    fn the_link_bandwidth_does_not_move_ll_points_within_the_fitted_range() {
        use crate::costmodel::profile::{LlFit, ObservedChoice};
        let mut p = builtin("pcie-gen5").unwrap();
        p.ll_fitted = Some(LlFit {
            gbps: 9.0,
            up_to_bus_bytes: 1048576.0,
        });
        p.observed = vec![ObservedChoice {
            op: CollectiveKind::AllReduce,
            nranks: 2,
            ll_up_to_bytes: 4 << 20,
        }];
        let point = |size: u64| Point {
            source: "synthetic".into(),
            label: format!("{size}"),
            terms: vec![Term {
                op: CollectiveKind::AllReduce,
                size,
                count: 1,
            }],
            n: 2,
            graph: true,
            launcher: Launcher::Processes,
            force: Force::default(),
            measured_us: 0.0,
        };
        let at = |pt: &Point, f: f64| {
            let mut q = p.clone();
            Param::IntraBw.set(&mut q, p.intra.bw_gbps * f);
            predict(&q, pt).unwrap().to_bits()
        };
        for size in [4096, 65536, 262144, 1048576] {
            let pt = point(size);
            assert!(!Param::IntraBw.moves(&p, &pt), "{size}");
            assert_eq!(at(&pt, 0.5), at(&pt, 1.0), "{size}");
            assert_eq!(at(&pt, 3.0), at(&pt, 1.0), "{size}");
        }
        // past the fitted range (still LL by the switch), and Simple past the switch
        for size in [2 << 20, 8 << 20] {
            let pt = point(size);
            assert!(Param::IntraBw.moves(&p, &pt), "{size}");
            assert_ne!(at(&pt, 0.5), at(&pt, 1.0), "{size}");
        }
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

    #[test]
    fn a_fitted_profile_says_what_was_fitted_held_and_on_which_sizes() {
        let base = builtin("nvlink-h200").unwrap();
        // A built-in profile was fitted on nothing: no scope, nothing to name.
        assert!(!base.is_fitted("intra.bw_gbps"));
        assert!(base.unfitted_for_nccl(Algo::Tree, Proto::Ll).is_empty());
        assert!(base.unfitted_for_p2p().is_empty());
        assert_eq!(range_note(&base, &[1]), None);
        // Ring points at one rank count (8 KB .. 1 MB, forced LL/LL128/Simple).
        let r = calibrate(&base, &sweep(&truth(), &[2], 0.0)).unwrap();
        let p = r.profile;
        let s = p.fit_scope.as_ref().unwrap();
        let names: Vec<String> = r.params.iter().map(|x| x.name.clone()).collect();
        assert_eq!(s.fitted, names);
        assert_eq!(s.held, r.held);
        assert_eq!((s.base.as_str(), s.bytes), ("nvlink-h200", [8192, 1 << 20]));
        assert!(p.is_fitted("base_lat_us.ring.LL") && !p.is_fitted("base_lat_us.tree.LL"));
        assert_eq!(p.held_params().len(), r.held.len());
        // Ring/Simple: base latency and bandwidth fitted (the hop held: one rank count).
        assert!(p.unfitted_for_nccl(Algo::Ring, Proto::Simple).is_empty());
        // Tree was never priced: its latencies are the base's, the link bandwidth is fitted.
        let tree = p.unfitted_for_nccl(Algo::Tree, Proto::Simple);
        assert_eq!(
            tree,
            ["base_lat_us.tree.Simple", "intra.hop_lat_us.tree.Simple"]
        );
        assert_eq!(p.unfitted_for_p2p(), ["p2p.signal_us", "p2p.read_gbps"]);
        let n = p.held_note("allreduce:Tree", &tree).unwrap();
        assert_eq!(
            n,
            format!(
                "allreduce:Tree: modeled from parameters profile '{}' held at nvlink-h200's values, not fitted: base_lat_us.tree.Simple, intra.hop_lat_us.tree.Simple",
                p.name
            )
        );
        assert_eq!(p.held_note("allreduce:Ring", &[]), None);
        // Sizes: 43008 B lies within 8 KB .. 1 MB, 4 KB and 2 MB do not.
        assert_eq!(range_note(&p, &[43008]), None);
        let n = range_note(&p, &[4096, 43008, 2 << 20]).unwrap();
        assert!(
            n.starts_with("outside the fitted range: profile")
                && n.ends_with("sizes 8192-1048576 B; at 4096, 2097152 B it extrapolates"),
            "{n}"
        );
        // The scope survives the profile file.
        let back: Profile = serde_json::from_value(serde_json::to_value(&p).unwrap()).unwrap();
        assert_eq!(back.fit_scope, p.fit_scope);
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
