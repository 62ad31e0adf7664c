//! The cost of the custom P2P all-reduces (kernels/allreduce.cu), beside NCCL's in
//! [`super::predict`], so that `--backend model` can predict where one-shot and two-shot beat
//! NCCL's ring on a machine one does not have.
//!
//! - one-shot: launch + one signal round + (n-1) peer reads of the whole message, all through
//!   the reading GPU's own link (the slowest link on the path of every read):
//!   `launch + signal + (n-1) * size / read_bw`.
//! - two-shot: launch + two signal rounds + 2(n-1)/n of the message read (reduce-scatter, then
//!   all-gather): `launch + 2 * signal + 2(n-1)/n * size / read_bw`.
//!
//! The signal round includes the kernel's own fixed cost on the device (copy-in, the flag write
//! crossing the link, the peer's poll seeing it). The launch is that of one plain kernel: the
//! graph-replay node gap, or `cudaLaunchKernel`'s host cost when eager (no NCCL enqueue).

use super::predict::nccl_size;
pub(crate) use super::profile::P2pLink;
use super::profile::Profile;
use crate::comm::p2p::{Impl, MAX_RANKS};
use crate::error::usage;
use crate::model::{CollectiveKind, Schedule};
use crate::record::{
    algbw_gbps, Body, CollTiming, CollectiveResult, ImplRun, ImplTiming, Mode, Record, Source,
    VerifyRun,
};
use std::collections::BTreeSet;

/// The P2P parameters of `p`: its own, or for a profile file written before they existed, the
/// built-in values of its link kind.
pub(crate) fn params(p: &Profile) -> P2pLink {
    p.p2p
        .clone()
        .unwrap_or_else(|| match p.intra.kind.as_str() {
            "nvlink" => P2pLink::nvlink4(),
            "shm" => P2pLink::unavailable(),
            _ => P2pLink::pcie_gen5(),
        })
}

/// Device time (us) of one custom all-reduce of `size` bytes on `n` ranks: signal rounds plus
/// reads. A usage error when the profile has no P2P, the ranks span nodes, or `imp` is NCCL.
pub(crate) fn device_us(p: &Profile, imp: Impl, size: u64, n: usize) -> anyhow::Result<f64> {
    let l = params(p);
    if !l.available {
        crate::usage_bail!(
            "profile {}: {}: {imp} cannot run (skipped)",
            p.name,
            l.source
        );
    }
    if let (Some(g), Some(_)) = (p.gpus_per_node, &p.inter) {
        if n > g {
            crate::usage_bail!(
                "profile {}: {n} ranks span nodes of {g} GPUs; {imp} needs every rank on one node",
                p.name
            );
        }
    }
    if !(2..=MAX_RANKS).contains(&n) {
        crate::usage_bail!("{imp} runs on 2 to {MAX_RANKS} ranks (got {n})");
    }
    let (s, nf) = (size as f64, n as f64);
    let bw = l.read_gbps * 1e3; // bytes per us
    Ok(match imp {
        Impl::OneShot => l.signal_us + (nf - 1.0) * s / bw,
        Impl::TwoShot => 2.0 * l.signal_us + 2.0 * (nf - 1.0) / nf * s / bw,
        Impl::Nccl => {
            return Err(usage(
                "nccl is priced by costmodel::predict, not by the P2P model",
            ))
        }
    })
}

/// One custom all-reduce as the application sees it: device time plus one kernel launch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CustomTime {
    pub(crate) device_us: f64,
    pub(crate) launch_us: f64,
}

impl CustomTime {
    pub(crate) fn total(&self) -> f64 {
        self.device_us + self.launch_us
    }
}

/// [`device_us`] plus the launch: the graph node gap, or one eager kernel launch (a plain
/// `cudaLaunchKernel`, the same from threads and processes).
pub(crate) fn op_time(
    p: &Profile,
    imp: Impl,
    size: u64,
    n: usize,
    graph: bool,
) -> anyhow::Result<CustomTime> {
    Ok(CustomTime {
        device_us: device_us(p, imp, size, n)?,
        launch_us: if graph {
            p.launch_graph_us
        } else {
            p.kernel_launch_eager_us
        },
    })
}

/// Why the custom all-reduces cannot run on profile `p` at all (no peer-to-peer), if so: the
/// model's counterpart of a GPU pair without peer access.
pub(crate) fn unavailable_reason(p: &Profile) -> Option<String> {
    let l = params(p);
    (!l.available).then(|| format!("profile {}: {}", p.name, l.source))
}

/// Adds the modeled rows of the custom implementations `imps` to every size of `res` (graph
/// and/or eager as `graphs` says).
pub(crate) fn collective_rows(
    p: &Profile,
    imps: &[Impl],
    res: &mut CollectiveResult,
    graphs: &[bool],
) -> anyhow::Result<()> {
    let n = res.nranks;
    for row in &mut res.rows {
        for &imp in imps {
            let timing = |graph: bool| -> anyhow::Result<CollTiming> {
                let us = op_time(p, imp, row.size_bytes, n, graph)?.total();
                let alg = algbw_gbps(row.size_bytes, us);
                Ok(CollTiming {
                    time_us: us,
                    summary: super::single(us),
                    algbw_gbps: alg,
                    busbw_gbps: alg * res.op.bus_factor(n),
                    wrong: 0,
                })
            };
            row.p2p.push(ImplTiming {
                imp,
                eager: if graphs.contains(&false) {
                    Some(timing(false)?)
                } else {
                    None
                },
                graph: if graphs.contains(&true) {
                    Some(timing(true)?)
                } else {
                    None
                },
            });
        }
    }
    Ok(())
}

/// The modeled verify runs with the all-reduces on `imp`: each NCCL run of `runs` with its
/// all-reduce part replaced by `imp`'s time for the same messages (the all-gather and the
/// compute stay as modeled for NCCL).
pub(crate) fn verify_runs(
    p: &Profile,
    s: &Schedule,
    nranks: usize,
    imp: Impl,
    runs: &[VerifyRun],
) -> anyhow::Result<Vec<ImplRun>> {
    let ar = CollectiveKind::AllReduce;
    let mut out = vec![];
    for r in runs {
        let mut run = r.clone();
        if r.mode != Mode::Compute {
            let mut us = 0.0;
            for g in s.collective_groups().iter().filter(|g| g.kind == ar) {
                let size = nccl_size(ar, g.bytes_per_rank, nranks);
                us += op_time(p, imp, size, nranks, r.graph)?.total() * g.n as f64;
            }
            if let Some(part) = run.breakdown.iter_mut().find(|pt| pt.name == ar.name()) {
                part.us = us;
            }
            let total: f64 = run.breakdown.iter().map(|pt| pt.us).sum();
            run.per_verify = super::single(total);
            run.per_collective_us = super::per_collective_us(r.mode, total, s.n_collectives());
        }
        out.push(ImplRun { imp, run });
    }
    Ok(out)
}

/// One measured time of a custom all-reduce (a `collective --impl` record's P2P row).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct P2pPoint {
    pub(crate) label: String,
    pub(crate) imp: Impl,
    pub(crate) size: u64,
    pub(crate) n: usize,
    pub(crate) graph: bool,
    pub(crate) measured_us: f64,
}

/// The P2P rows of the measured collective records of `records` (modeled ones are left out;
/// NCCL's own rows are the NCCL fit's, not these).
pub(crate) fn p2p_points(records: &[Record]) -> Vec<P2pPoint> {
    let mut out = vec![];
    for r in records.iter().filter(|r| r.source == Source::Measured) {
        let Body::Collective(c) = &r.body else {
            continue;
        };
        for row in &c.rows {
            for t in &row.p2p {
                for (graph, x) in [(false, &t.eager), (true, &t.graph)] {
                    if let Some(x) = x {
                        out.push(P2pPoint {
                            label: format!(
                                "{} {} B n={} {}",
                                t.imp,
                                row.size_bytes,
                                c.nranks,
                                if graph { "graph" } else { "eager" }
                            ),
                            imp: t.imp,
                            size: row.size_bytes,
                            n: c.nranks,
                            graph,
                            measured_us: x.time_us,
                        });
                    }
                }
            }
        }
    }
    out
}

/// The outcome of fitting the P2P terms.
#[derive(Debug, Clone)]
pub(crate) struct P2pFit {
    pub(crate) link: P2pLink,
    /// One line per parameter: fitted (base -> fitted) or held (and why).
    pub(crate) lines: Vec<String>,
    /// The names of the parameters moved (`p2p.signal_us`, and `p2p.read_gbps` from two sizes).
    pub(crate) fitted: Vec<&'static str>,
    /// Per point: label, measured, fitted (us).
    pub(crate) points: Vec<(String, f64, f64)>,
    pub(crate) median_abs_err: f64,
}

impl P2pFit {
    /// Puts the fitted P2P terms into `prof`, and into its fit scope those the fit moved
    /// (`p2p.signal_us` always, `p2p.read_gbps` from two sizes on).
    pub(crate) fn apply_to(&self, prof: &mut Profile) {
        prof.p2p = Some(self.link.clone());
        if let Some(s) = prof.fit_scope.as_mut() {
            s.fitted.extend(self.fitted.iter().map(|n| n.to_string()));
        }
    }
}

/// Fits `p2p.signal_us` (the intercept) and `p2p.read_gbps` (the slope over size) of `base` to
/// the P2P points, by least squares on relative error. The terms are linear in `signal_us` and
/// `1 / read_gbps` once the launch is taken off: `t - launch = k * signal + c * size / read`
/// (one-shot k = 1, c = n-1; two-shot k = 2, c = 2(n-1)/n). With one size the slope cannot be
/// told from the intercept: `read_gbps` is held and only `signal_us` is fitted.
pub(crate) fn fit_p2p(base: &Profile, pts: &[P2pPoint]) -> anyhow::Result<P2pFit> {
    if pts.is_empty() {
        crate::usage_bail!("no measured P2P rows (collective --impl oneshot/twoshot) to fit");
    }
    let start = params(base);
    let rows: Vec<(f64, f64, f64, f64)> = pts
        .iter()
        .map(|p| {
            let launch = if p.graph {
                base.launch_graph_us
            } else {
                base.kernel_launch_eager_us
            };
            let nf = p.n as f64;
            let (k, c) = match p.imp {
                Impl::TwoShot => (2.0, 2.0 * (nf - 1.0) / nf),
                _ => (1.0, nf - 1.0),
            };
            // weight 1/measured: relative error
            let w = 1.0 / p.measured_us;
            (
                k * w,
                c * p.size as f64 * w,
                (p.measured_us - launch) * w,
                w,
            )
        })
        .collect();
    let sizes: BTreeSet<u64> = pts.iter().map(|p| p.size).collect();
    let mut lines = vec![];
    let (signal, read_gbps) = if sizes.len() >= 2 {
        let (mut aa, mut ab, mut bb, mut ay, mut by) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for &(a, b, y, _) in &rows {
            aa += a * a;
            ab += a * b;
            bb += b * b;
            ay += a * y;
            by += b * y;
        }
        let det = aa * bb - ab * ab;
        if det.abs() <= 1e-12 * aa * bb {
            crate::usage_bail!("the P2P points cannot separate the signal round from the reads");
        }
        let signal = (ay * bb - by * ab) / det;
        let inv_bw = (aa * by - ab * ay) / det; // us per byte
        if signal <= 0.0 || inv_bw <= 0.0 {
            crate::usage_bail!(
                "fitting the P2P terms gave a signal round of {signal:.2} us and {} us per MB of reads: the measurements do not follow signal + reads (check them for noise)",
                inv_bw * 1e6
            );
        }
        let read = 1.0 / inv_bw / 1e3;
        lines.push(format!(
            "fitted p2p.signal_us: {:.4} -> {signal:.4}",
            start.signal_us
        ));
        lines.push(format!(
            "fitted p2p.read_gbps: {:.4} -> {read:.4}",
            start.read_gbps
        ));
        (signal, read)
    } else {
        let inv_bw = 1.0 / (start.read_gbps * 1e3);
        let (mut num, mut den) = (0.0, 0.0);
        for &(a, b, y, _) in &rows {
            num += a * (y - b * inv_bw);
            den += a * a;
        }
        let signal = num / den;
        if signal <= 0.0 {
            crate::usage_bail!(
                "fitting p2p.signal_us gave {signal:.2} us: the measurements are faster than the held read bandwidth allows"
            );
        }
        lines.push(format!(
            "fitted p2p.signal_us: {:.4} -> {signal:.4}",
            start.signal_us
        ));
        lines.push(format!(
            "held p2p.read_gbps = {:.4}: one message size only, where the reads cannot be told from the signal round; measure two or more sizes to fit it",
            start.read_gbps
        ));
        (signal, start.read_gbps)
    };
    let link = P2pLink {
        available: true,
        signal_us: signal,
        read_gbps,
        source: format!(
            "fitted by `verifybench model fit` on {} measured P2P points",
            pts.len()
        ),
    };
    let mut fitted = base.clone();
    fitted.p2p = Some(link.clone());
    let mut points = vec![];
    let mut errs = vec![];
    for p in pts {
        let f = op_time(&fitted, p.imp, p.size, p.n, p.graph)?.total();
        errs.push(f / p.measured_us - 1.0);
        points.push((p.label.clone(), p.measured_us, f));
    }
    let fitted = if sizes.len() >= 2 {
        vec!["p2p.signal_us", "p2p.read_gbps"]
    } else {
        vec!["p2p.signal_us"]
    };
    Ok(P2pFit {
        link,
        lines,
        fitted,
        points,
        median_abs_err: crate::measure::stats::median_abs(&errs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::costmodel::predict::{self, Force};
    use crate::costmodel::profile::builtin;
    use crate::model::CollectiveKind;
    use crate::request::Launcher;

    #[test]
    fn oneshot_matches_the_public_pcie_point_and_beats_nccl_small() {
        let p = builtin("pcie-gen5").unwrap();
        // the public measurement of 8x RTX PRO 6000 behind switches (S10): 7.5 us at 1 KB,
        // 16.5 us at 32 KB
        let one_k = op_time(&p, Impl::OneShot, 1024, 8, true).unwrap().total();
        assert!((one_k / 7.5 - 1.0).abs() < 0.02, "{one_k}");
        let k32 = op_time(&p, Impl::OneShot, 32768, 8, true).unwrap().total();
        assert!((k32 / 16.5 - 1.0).abs() < 0.05, "{k32}");
        let one = op_time(&p, Impl::OneShot, 43008, 8, true).unwrap().total();
        let nccl = predict::op_time(
            &p,
            CollectiveKind::AllReduce,
            43008,
            8,
            true,
            Launcher::Threads,
            &Force::default(),
        )
        .unwrap()
        .total();
        assert!((22.0..=25.0).contains(&nccl), "{nccl}");
        assert!(one < nccl, "one-shot {one} vs NCCL {nccl}");
        // large messages: 7 full reads through one link lose to the ring
        let big = op_time(&p, Impl::OneShot, 4 << 20, 8, true)
            .unwrap()
            .total();
        let ring = predict::op_time(
            &p,
            CollectiveKind::AllReduce,
            4 << 20,
            8,
            true,
            Launcher::Threads,
            &Force::default(),
        )
        .unwrap()
        .total();
        assert!(big > ring, "{big} {ring}");
    }

    #[test]
    fn terms_follow_the_formulas() {
        let p = builtin("pcie-gen5").unwrap();
        let l = params(&p);
        let s = 1u64 << 20;
        let one = device_us(&p, Impl::OneShot, s, 4).unwrap();
        let bw = l.read_gbps * 1e3; // bytes per us
        assert!((one - (l.signal_us + 3.0 * s as f64 / bw)).abs() < 1e-9);
        let two = device_us(&p, Impl::TwoShot, s, 4).unwrap();
        assert!((two - (2.0 * l.signal_us + 1.5 * s as f64 / bw)).abs() < 1e-9);
        // two-shot moves less and signals more: it wins large on many ranks, loses small
        assert!(
            device_us(&p, Impl::TwoShot, 1024, 8).unwrap()
                > device_us(&p, Impl::OneShot, 1024, 8).unwrap()
        );
        assert!(
            device_us(&p, Impl::TwoShot, 4 << 20, 8).unwrap()
                < device_us(&p, Impl::OneShot, 4 << 20, 8).unwrap()
        );
        // eager pays a kernel launch, graph the node gap
        let e = op_time(&p, Impl::OneShot, s, 4, false).unwrap();
        assert_eq!(e.launch_us, p.kernel_launch_eager_us);
        assert_eq!(
            op_time(&p, Impl::OneShot, s, 4, true).unwrap().launch_us,
            p.launch_graph_us
        );
    }

    #[test]
    fn refusals_are_usage_errors() {
        let shm = builtin("pcie-gen5-no-p2p").unwrap();
        let e = device_us(&shm, Impl::OneShot, 1024, 8).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("no peer-to-peer"), "{e}");
        let ib = builtin("ib-ndr").unwrap();
        assert!(device_us(&ib, Impl::OneShot, 1024, 8).is_ok());
        let e = device_us(&ib, Impl::OneShot, 1024, 16).unwrap_err();
        assert!(e.to_string().contains("one node"), "{e}");
        let p = builtin("nvlink-h200").unwrap();
        assert!(device_us(&p, Impl::OneShot, 1024, 9).is_err());
        assert!(device_us(&p, Impl::Nccl, 1024, 2).is_err());
    }

    #[test]
    fn every_builtin_says_where_its_p2p_numbers_come_from() {
        for n in crate::costmodel::profile::BUILTIN {
            let p = builtin(n).unwrap();
            let l = p
                .p2p
                .clone()
                .expect("built-in profiles carry P2P parameters");
            assert!(!l.source.is_empty());
            l.check().unwrap();
        }
    }

    #[test]
    fn old_profile_files_without_p2p_still_load() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.json");
        let mut v = serde_json::json!({
            "schema_version": crate::costmodel::profile::PROFILE_SCHEMA_VERSION,
            "kind": crate::costmodel::profile::PROFILE_KIND,
            "profile": builtin("nvlink-h200").unwrap(),
        });
        v["profile"].as_object_mut().unwrap().remove("p2p");
        std::fs::write(&path, v.to_string()).unwrap();
        let p = crate::costmodel::profile::load(&path).unwrap();
        assert_eq!(p.p2p, None);
        assert_eq!(params(&p), P2pLink::nvlink4());
        // and a bad value in a new file is refused
        v["profile"]["p2p"] = serde_json::to_value(P2pLink {
            read_gbps: 0.0,
            ..P2pLink::pcie_gen5()
        })
        .unwrap();
        std::fs::write(&path, v.to_string()).unwrap();
        let e = crate::costmodel::profile::load(&path).unwrap_err();
        assert!(e.to_string().contains("read_gbps"), "{e}");
    }

    fn points(p: &Profile, imp: Impl, sizes: &[u64], n: usize) -> Vec<P2pPoint> {
        sizes
            .iter()
            .map(|&size| P2pPoint {
                label: format!("{imp} {size}"),
                imp,
                size,
                n,
                graph: true,
                measured_us: op_time(p, imp, size, n, true).unwrap().total(),
            })
            .collect()
    }

    #[test]
    fn the_p2p_fit_recovers_the_terms_it_was_made_from() {
        // "measurements" made by a profile with other P2P terms than the base
        let base = builtin("pcie-gen5").unwrap();
        let mut truth = base.clone();
        truth.p2p = Some(P2pLink {
            signal_us: 4.0,
            read_gbps: 20.0,
            ..P2pLink::pcie_gen5()
        });
        let mut pts = points(&truth, Impl::OneShot, &[1024, 43008, 1 << 20], 8);
        pts.extend(points(&truth, Impl::TwoShot, &[43008, 1 << 20], 8));
        let f = fit_p2p(&base, &pts).unwrap();
        assert!((f.link.signal_us - 4.0).abs() < 1e-6, "{:?}", f.link);
        assert!((f.link.read_gbps - 20.0).abs() < 1e-4, "{:?}", f.link);
        assert!(f.median_abs_err < 1e-9);
        assert!(f.lines.iter().all(|l| l.starts_with("fitted")));
        // Applied to a fitted profile, both terms join its fitted parameters.
        let mut prof = base.clone();
        prof.fit_scope = Some(crate::costmodel::fit::scope_of("pcie-gen5", &[], &[], &[]));
        assert_eq!(prof.unfitted_for_p2p(), ["p2p.signal_us", "p2p.read_gbps"]);
        f.apply_to(&mut prof);
        assert!(prof.unfitted_for_p2p().is_empty());
        assert_eq!(prof.p2p.as_ref(), Some(&f.link));
        // one size: the read bandwidth is held at the base value, and said so
        let one = points(&truth, Impl::OneShot, &[43008], 8);
        let f = fit_p2p(&base, &one).unwrap();
        assert_eq!(f.link.read_gbps, params(&base).read_gbps);
        assert!(f.lines.iter().any(|l| l.starts_with("held p2p.read_gbps")));
        assert_eq!(f.fitted, ["p2p.signal_us"]);
        assert!(fit_p2p(&base, &[]).is_err());
    }
}
