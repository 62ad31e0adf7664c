//! The cost model: `--backend model` of `collective`, `verify` and `sweep`, and the automatic
//! fallback when fewer than two GPUs are present. Every number it produces is labelled modeled.
//!
//! Why a model in NCCL's own style: NCCL picks an (algorithm, protocol) per call from a
//! latency-bandwidth model with published tables, so the same model, started from those tables
//! and calibrated on measurements (`verifybench model fit`), predicts what NCCL will do on a
//! machine one does not have: more ranks, PCIe instead of NVLink, several nodes.
//!
//! - [`profile`]: the parameters (built-in link profiles with their sources, fitted files).
//! - [`predict`]: time of one collective, and NCCL's choice of algorithm and protocol.
//! - [`custom`]: time of the custom P2P all-reduces (one-shot, two-shot) beside NCCL's.
//! - [`fit`]: least-squares calibration on measured records, with leave-one-out.
//! - [`scope`]: what a fit pinned down, as the fitted profile records it.
//! - [`waiting`]: the waiting of collectives for the slowest rank under host gaps.

pub(crate) mod custom;
pub mod cycle;
pub(crate) mod fit;
pub(crate) mod ntfit;
pub(crate) mod predict;
pub(crate) mod profile;
pub(crate) mod scope;
pub(crate) mod waiting;

use crate::measure::Summary;
use crate::model::{CollectiveKind, DType, Op, Schedule};
use crate::record::{
    algbw_gbps, CollTiming, CollectiveResult, CollectiveRow, Mode, Part, RecordedWorkload,
    VerifyResult, VerifyRun,
};
use crate::request::Launcher;
pub use crate::request::ModelSettings;

pub(crate) use predict::{group_sizes, nccl_size, Force};
pub(crate) use profile::Profile;

/// The relative error the model states for its prices, and where it comes from.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct StatedError {
    /// Median |predicted / measured - 1|.
    pub(crate) rel: f64,
    pub(crate) how: String,
}

impl ModelSettings {
    /// The profile these flags select: the file if given, else the built-in link profile.
    pub(crate) fn resolve(&self) -> anyhow::Result<(Profile, String)> {
        let (p, label) = self.resolve_file_or_link()?;
        Ok(profile::apply_transport_env(p, label, &self.nccl_env))
    }

    /// The NCCL_* variables of `nccl_env` the model does not express (names with values).
    pub(crate) fn not_modeled(&self) -> Vec<String> {
        self.nccl_env
            .iter()
            .filter(|(k, _)| !profile::MODELED_NCCL_VARS.contains(&k.as_str()))
            // the model has no NVLink multicast: NVLS off is what it prices
            .filter(|(k, v)| !(k.as_str() == "NCCL_NVLS_ENABLE" && v.trim() == "0"))
            .map(|(k, v)| format!("{k}={v}"))
            .collect()
    }

    fn resolve_file_or_link(&self) -> anyhow::Result<(Profile, String)> {
        match &self.profile {
            Some(p) => {
                let prof = profile::load(p)?;
                let label = format!("{} (file {})", prof.name, p.display());
                Ok((prof, label))
            }
            None => {
                let prof = profile::builtin_or_usage(&self.link)?;
                let label = prof.name.clone();
                Ok((prof, label))
            }
        }
    }

    /// The error the model states for prices with these settings: for a fitted profile its
    /// fit's leave-one-out median error, for a built-in PCIe profile its median error against
    /// the public PCIe hosts at 32-64 KB; `None` where neither is known (NVLink, a file
    /// without a leave-one-out error).
    pub(crate) fn stated_error(&self) -> anyhow::Result<Option<StatedError>> {
        if let Some(path) = &self.profile {
            let bytes = crate::util::read::read(path, "profile file", crate::util::read::PROFILE)?;
            let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
            // A profile written by `model fit` is a record: its fit lies under result.data.
            let fit = ["/result/data/fit", "/data/fit", "/fit"]
                .iter()
                .find_map(|at| v.pointer(at));
            return Ok(fit
                .and_then(|f| f.get("median_abs_loo_rel_err"))
                .and_then(|e| e.as_f64())
                .map(|rel| StatedError {
                    rel,
                    how: format!(
                        "the leave-one-out median error of the fit of {}",
                        path.display()
                    ),
                }));
        }
        let (prof, _) = self.resolve()?;
        if !prof.name.starts_with("pcie") {
            return Ok(None);
        }
        let (hosts, tables, med) = ntfit::public_spread(&prof, 32 * 1024, 64 * 1024);
        Ok((tables > 0).then(|| StatedError {
            rel: med,
            how: format!(
                "the median |error| of built-in {} against {hosts} public PCIe hosts ({tables} nccl-tests tables) at 32-64 KB",
                prof.name
            ),
        }))
    }

    pub(crate) fn force(&self) -> anyhow::Result<Force> {
        let name = |from_env: bool, flag: &'static str, var: &'static str| {
            if from_env {
                var
            } else {
                flag
            }
        };
        Force::parse_named(
            self.proto.as_deref(),
            name(
                self.proto_from_env,
                "--proto",
                "NCCL_PROTO (from the environment)",
            ),
            self.algo.as_deref(),
            name(
                self.algo_from_env,
                "--algo",
                "NCCL_ALGO (from the environment)",
            ),
        )
    }
}

/// A modeled result and where its parameters came from.
#[derive(Debug, Clone)]
pub struct Modeled<T> {
    pub(crate) result: T,
    /// Name of the profile (built-in link profile or file) the numbers came from.
    pub(crate) profile: String,
    /// Assumptions worth printing next to the numbers.
    pub(crate) notes: Vec<String>,
}

/// A single modeled value as a summary of one sample (median = mean = min = max = p99).
pub(crate) fn single(us: f64) -> Summary {
    Summary::from_samples(&[us]).expect("modeled times are finite")
}

/// The per-collective share of a modeled time `us` of a forward of `ncoll` collectives in
/// `mode` (none with compute only, or without a collective).
pub(crate) fn per_collective_us(mode: Mode, us: f64, ncoll: u64) -> f64 {
    if mode == Mode::Compute || ncoll == 0 {
        0.0
    } else {
        us / ncoll as f64
    }
}

/// A single modeled time `us` of a forward of `ncoll` collectives as a run (its breakdown
/// beside it).
fn modeled_run(graph: bool, mode: Mode, us: f64, ncoll: u64, breakdown: Vec<Part>) -> VerifyRun {
    VerifyRun {
        graph,
        mode,
        per_verify: single(us),
        per_collective_us: per_collective_us(mode, us, ncoll),
        breakdown,
        wrong: 0,
        iterations: 0,
        warmup: 0,
        in_collective: None,
    }
}

/// The profile `m` selects, its label, the forced algorithms and protocols, and the notes every
/// modeled result starts with, for `nranks` ranks (2 or more: `flags` name what sets them) at
/// the nccl-tests `sizes`.
fn prepare(
    m: &ModelSettings,
    nranks: usize,
    sizes: &[u64],
    flags: &str,
) -> anyhow::Result<(Profile, String, Force, Vec<String>)> {
    let (p, label) = m.resolve()?;
    let force = m.force()?;
    if nranks < 2 {
        crate::usage_bail!(
            "a collective needs at least 2 ranks (got {nranks}); use {flags} 2 or more"
        );
    }
    let mut notes = common_notes(&p, &force, m);
    // A fitted profile used at a rank count or a size it was not fitted on says that it
    // extrapolates.
    notes.extend(fit::extrapolation_note(&p, nranks));
    notes.extend(fit::range_note(&p, sizes));
    Ok((p, label, force, notes))
}

fn common_notes(p: &Profile, force: &Force, m: &ModelSettings) -> Vec<String> {
    let mut v = vec![format!("profile {}: {}", p.name, p.description)];
    // (--profile replaces the link profile whole: the command line refuses a --link beside it)
    if m.profile.is_none() {
        v.push(ntfit::builtin_spread_note(p));
    }
    let not = m.not_modeled();
    if !not.is_empty() {
        v.push(format!(
            "not modeled: {} (the cost model prices these numbers as if unset)",
            not.join(", ")
        ));
    }
    if force.is_empty() {
        v.push("algorithm and protocol: the fastest per collective, as NCCL's tuner picks".into());
    } else {
        v.push(format!(
            "algorithm/protocol restricted: --algo {} --proto {}",
            m.algo.as_deref().unwrap_or("(any)"),
            m.proto.as_deref().unwrap_or("(any)")
        ));
    }
    v.push(format!(
        "launch cost per collective: graph replay {:.1} us, eager {:.1} us (threads) / {:.1} us (processes), added to the device time (no overlap of host enqueue with the GPU)",
        p.launch_graph_us, p.launch_eager_us.threads, p.launch_eager_us.processes
    ));
    v
}

/// Modeled time inside the collectives of one verify with host gaps `gaps` ([`waiting`]):
/// transfer = the device time of each collective, waiting from the asynchronous timeline
/// ([`waiting::HostSync::Iteration`], what the eager replay does), and as the lower bound the
/// hosts re-synchronised at every collective. Graph replay: no host gaps, no waiting.
///
/// The second value is what the host timeline adds to the verify over the device's own work
/// (the simulated span from the iteration's start to the last rank's last kernel, less the sum
/// of the device times of the launches), us: `None` without host gaps or in graph replay. Added
/// to the modeled per-verify time, it makes verify >= in-collective >= transfer.
pub(crate) fn in_collective(
    schedule: &Schedule,
    nranks: usize,
    graph: bool,
    mode: Mode,
    gaps: &crate::measure::gaps::HostGaps,
    launcher: Launcher,
    m: &ModelSettings,
) -> anyhow::Result<(crate::record::InCollective, Option<f64>)> {
    use waiting::{predict, GpuWork, HostSync, DEFAULT_ITERATIONS};
    let (p, _) = m.resolve()?;
    let force = m.force()?;
    let launches = crate::measure::gaps::schedule_launches(schedule, mode != Mode::Comm);
    let mut work = Vec::with_capacity(launches.len());
    for l in &launches {
        let us = match &schedule.ops[l.op] {
            Op::Collective {
                kind,
                bytes_per_rank,
                ..
            } => {
                let size = nccl_size(*kind, *bytes_per_rank, nranks);
                predict::op_time(&p, *kind, size, nranks, graph, launcher, &force)?.device_us
            }
            Op::Compute { weight_bytes, .. } => *weight_bytes as f64 / (p.hbm_gbps * 1e3),
        };
        work.push(GpuWork { us });
    }
    let asy = predict(
        gaps,
        &launches,
        &work,
        nranks,
        graph,
        HostSync::Iteration,
        DEFAULT_ITERATIONS,
    );
    let low = predict(
        gaps,
        &launches,
        &work,
        nranks,
        graph,
        HostSync::Collective,
        0,
    );
    let eager_gaps = !(graph || gaps.is_none());
    let device_work: f64 = work.iter().map(|w| w.us).sum();
    let host_added = asy
        .span_us
        .filter(|_| eager_gaps)
        .map(|span| (span - device_work).max(0.0));
    // The re-synchronised model is no bound of the asynchronous one in general (a sum of
    // expected maxima per collective can exceed the expected maximum of the sums): it is shown
    // as the lower bound only where it is one.
    let (lower_bound_us, bound_note) = if low.in_collective_us <= asy.in_collective_us + 1e-9 {
        (
            Some(low.in_collective_us),
            "lower bound: hosts re-synchronised at every collective (order statistics of the gaps)"
                .to_string(),
        )
    } else {
        (
            Some(asy.transfer_us),
            format!(
                "lower bound: the transfer alone (the hosts-re-synchronised model gives {:.1} us here, above the asynchronous timeline, so it bounds nothing)",
                low.in_collective_us
            ),
        )
    };
    let straggler = match (gaps.late, asy.last_rank) {
        (Some(_), Some((rank, times, total, lag))) if eager_gaps => {
            Some(crate::record::Straggler {
                rank,
                times_last: times,
                share: times as f64 / total.max(1) as f64,
                median_lag_us: lag,
            })
        }
        _ => None,
    };
    let named = straggler.is_some();
    let ic = crate::record::InCollective {
        in_collective_us: asy.in_collective_us,
        transfer_us: asy.transfer_us,
        waiting_us: asy.waiting_us,
        waiting_per_rank_us: asy.waiting_per_rank_us,
        median_skew_us: None,
        straggler,
        lower_bound_us,
        iterations: 0,
        how: if !eager_gaps {
            "modeled: no host gaps (graph replay, or none given), so no waiting: transfer = the device time of the collectives".into()
        } else {
            format!(
                "modeled: asynchronous launches, the ranks' hosts meeting only at the per-iteration barrier, GPU timeline simulated over {DEFAULT_ITERATIONS} verifies (standard error {:.1} us); the per-verify time includes this host timeline; {bound_note}{}",
                asy.waiting_se_us,
                if named { "; straggler: the rank last to start the most simulated collectives" } else { "" }
            )
        },
    };
    Ok((ic, host_added))
}

/// Adds the host timeline of an eager replay with host gaps (`extra_us` from [`in_collective`])
/// to a modeled verify run: its per-verify time and per-collective time grow by it, and its
/// breakdown gets a part saying what it is.
pub(crate) fn add_host_timeline(r: &mut VerifyRun, extra_us: f64, ncoll: u64) {
    let total = r.per_verify.median_us + extra_us;
    r.per_verify = single(total);
    r.per_collective_us = per_collective_us(r.mode, total, ncoll);
    r.breakdown.push(Part {
        name: "host gaps and waiting (modeled timeline)".into(),
        us: extra_us,
        count: 0,
    });
}

/// Predicts a verify replay of `schedule` on `nranks` ranks, one run per (graph, mode).
pub(crate) fn verify(
    schedule: &Schedule,
    nranks: usize,
    runs: &[(bool, Mode)],
    launcher: Launcher,
    m: &ModelSettings,
) -> anyhow::Result<Modeled<VerifyResult>> {
    let groups = schedule.collective_groups();
    let sizes = group_sizes(&groups, nranks);
    let (p, label, force, mut notes) = prepare(m, nranks, &sizes, "--tp/--gpus")?;
    for (g, &size) in groups.iter().zip(&sizes) {
        let t = predict::op_time(&p, g.kind, size, nranks, true, launcher, &force)?;
        notes.push(format!(
            "{} x {} of {} B (nccl size) on {} ranks: {}/{}, {:.2} us on the device",
            g.n,
            g.kind.name(),
            size,
            nranks,
            t.algo.name(),
            t.proto.name(),
            t.device_us
        ));
    }
    let compute_ops = schedule
        .ops
        .iter()
        .filter(|o| matches!(o, Op::Compute { .. }))
        .count();
    if runs.iter().any(|(_, md)| *md != Mode::Comm) {
        notes.push(format!(
            "compute: each of the {compute_ops} compute ops streams its weight shard at {:.0} GB/s (HBM) plus one kernel launch ({:.1} us eager, {:.1} us graph); full = comm + compute, no overlap",
            p.hbm_gbps, p.kernel_launch_eager_us, p.launch_graph_us
        ));
    }
    let mut out = vec![];
    for &(graph, mode) in runs {
        let mut parts: Vec<Part> = vec![];
        let mut add = |name: &str, us: f64, count: u64| {
            if let Some(pt) = parts.iter_mut().find(|pt| pt.name == name) {
                pt.us += us;
                pt.count += count;
            } else {
                parts.push(Part {
                    name: name.into(),
                    us,
                    count,
                });
            }
        };
        if mode != Mode::Compute {
            for (g, &size) in groups.iter().zip(&sizes) {
                let t = predict::op_time(&p, g.kind, size, nranks, graph, launcher, &force)?;
                add(g.kind.name(), t.total() * g.n as f64, g.n);
            }
        }
        if mode != Mode::Comm {
            let launch = if graph {
                p.launch_graph_us
            } else {
                p.kernel_launch_eager_us
            };
            for op in &schedule.ops {
                if let Op::Compute {
                    kind, weight_bytes, ..
                } = op
                {
                    add(
                        kind.name(),
                        *weight_bytes as f64 / (p.hbm_gbps * 1e3) + launch,
                        1,
                    );
                }
            }
        }
        let total: f64 = parts.iter().map(|pt| pt.us).sum();
        out.push(modeled_run(
            graph,
            mode,
            total,
            schedule.n_collectives(),
            parts,
        ));
    }
    Ok(Modeled {
        // Modeled runs have no measured streaming bandwidth to predict from.
        result: VerifyResult::of(RecordedWorkload::of(schedule), out),
        profile: label,
        notes,
    })
}

/// Predicts one collective over `sizes` (nccl-tests "size" in bytes) for each graph flag.
pub(crate) fn collective(
    op: CollectiveKind,
    dtype: DType,
    sizes: &[u64],
    nranks: usize,
    graphs: &[bool],
    launcher: Launcher,
    m: &ModelSettings,
) -> anyhow::Result<Modeled<CollectiveResult>> {
    let (p, label, force, mut notes) = prepare(m, nranks, sizes, "--gpus")?;
    notes.push(format!(
        "eager times assume ranks as {}",
        match launcher {
            Launcher::Threads => "threads of one process",
            Launcher::Processes => "worker processes",
        }
    ));
    let mut rows = vec![];
    let mut choices: Vec<String> = vec![];
    for &size in sizes {
        let mut row = CollectiveRow {
            size_bytes: size,
            count: size / dtype.size(),
            eager: None,
            graph: None,
            p2p: vec![],
        };
        for &g in graphs {
            let t = predict::op_time(&p, op, size, nranks, g, launcher, &force)?;
            let us = t.total();
            let alg = algbw_gbps(size, us);
            let timing = CollTiming {
                time_us: us,
                summary: single(us),
                algbw_gbps: alg,
                busbw_gbps: alg * op.bus_factor(nranks),
                wrong: 0,
            };
            let c = format!("{}/{}", t.algo.name(), t.proto.name());
            match choices.last() {
                Some(last) if last.ends_with(&format!(" {c}")) => {}
                _ => choices.push(format!("from {size} B: {c}")),
            }
            if g {
                row.graph = Some(timing);
            } else {
                row.eager = Some(timing);
            }
        }
        rows.push(row);
    }
    notes.push(format!("chosen algorithm/protocol {}", choices.join(", ")));
    Ok(Modeled {
        result: CollectiveResult {
            op,
            dtype,
            nranks,
            rows,
        },
        profile: label,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{presets, Phase, ScheduleOptions};

    fn kimi(tp: u64) -> Schedule {
        crate::model::build(
            &presets::preset("kimi-k2.5").unwrap(),
            &ScheduleOptions {
                tp,
                ..Default::default()
            },
            Phase::Verify,
        )
        .unwrap()
    }

    fn args(link: &str) -> ModelSettings {
        ModelSettings {
            link: link.into(),
            ..Default::default()
        }
    }

    #[test]
    fn verify_runs_are_single_modeled_values() {
        let s = kimi(8);
        let runs = [
            (false, Mode::Comm),
            (true, Mode::Comm),
            (true, Mode::Compute),
            (true, Mode::Full),
        ];
        let m = verify(&s, 8, &runs, Launcher::Processes, &args("pcie-gen5")).unwrap();
        assert_eq!(m.profile, "pcie-gen5");
        let v = &m.result;
        assert_eq!(v.runs.len(), 4);
        for r in &v.runs {
            let s = &r.per_verify;
            assert_eq!((s.n, s.outliers, r.wrong, r.iterations), (1, 0, 0, 0));
            assert_eq!(s.stddev_us, 0.0);
            assert!(s.median_us == s.p99_us && s.min_us == s.max_us && s.median_us > 0.0);
            let sum: f64 = r.breakdown.iter().map(|p| p.us).sum();
            assert!((sum - s.median_us).abs() < 1e-6);
        }
        let eager = v.run(false, Mode::Comm).unwrap();
        let graph = v.run(true, Mode::Comm).unwrap();
        assert!(graph.per_verify.median_us < eager.per_verify.median_us);
        assert!((graph.per_collective_us * 124.0 - graph.per_verify.median_us).abs() < 1e-6);
        let names: Vec<&str> = graph.breakdown.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["all_reduce", "all_gather"]);
        assert_eq!(graph.breakdown[0].count, 123);
        let full = v.run(true, Mode::Full).unwrap().per_verify.median_us;
        let comp = v.run(true, Mode::Compute).unwrap().per_verify.median_us;
        assert!((full - comp - graph.per_verify.median_us).abs() < 1e-6);
        assert!(m.notes.iter().any(|n| n.contains("Ring/LL")));
    }

    #[test]
    fn pcie_is_slower_than_nvlink_and_more_ranks_cost_more() {
        let s8 = kimi(8);
        let run = [(true, Mode::Comm)];
        let t = |s: &Schedule, n, l: &str| {
            verify(s, n, &run, Launcher::Processes, &args(l))
                .unwrap()
                .result
                .runs[0]
                .per_verify
                .median_us
        };
        assert!(t(&s8, 8, "pcie-gen5") > t(&s8, 8, "nvlink-h200"));
        assert!(t(&s8, 8, "pcie-gen5-no-p2p") > t(&s8, 8, "pcie-gen5"));
        assert!(t(&s8, 8, "pcie-gen4") > t(&s8, 8, "pcie-gen5"));
        assert!(t(&kimi(2), 2, "pcie-gen5") < t(&s8, 8, "pcie-gen5"));
    }

    #[test]
    fn collective_rows_use_bus_factor() {
        let m = collective(
            CollectiveKind::AllGather,
            DType::Bf16,
            &[8192, 1 << 20],
            8,
            &[false, true],
            Launcher::Processes,
            &args("nvlink-h100"),
        )
        .unwrap();
        let r = &m.result.rows[1];
        let g = r.graph.as_ref().unwrap();
        assert!((g.algbw_gbps - (1u64 << 20) as f64 / (g.time_us * 1e3)).abs() < 1e-9);
        assert!((g.busbw_gbps - g.algbw_gbps * 7.0 / 8.0).abs() < 1e-9);
        assert!(r.eager.as_ref().unwrap().time_us > g.time_us);
        assert_eq!(r.count, (1 << 20) / 2);
    }

    #[test]
    fn bad_input_is_a_usage_error() {
        let c = |n, a: &ModelSettings| {
            collective(
                CollectiveKind::AllReduce,
                DType::Bf16,
                &[8192],
                n,
                &[true],
                Launcher::Processes,
                a,
            )
        };
        let e = c(1, &args("pcie-gen5")).unwrap_err();
        assert!(e.to_string().contains("at least 2 ranks"));
        assert_eq!(crate::error::exit_code(&e), 2);
        let e = c(8, &args("pcie-gen6")).unwrap_err();
        assert!(e.to_string().contains("known: nvlink-h100"));
        assert_eq!(crate::error::exit_code(&e), 2);
        let mut a = args("pcie-gen5");
        a.proto = Some("LL64".into());
        assert_eq!(crate::error::exit_code(&c(8, &a).unwrap_err()), 2);
        let s = kimi(8);
        let e = verify(
            &s,
            1,
            &[(true, Mode::Comm)],
            Launcher::Threads,
            &args("pcie-gen5"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("at least 2 ranks"));
    }
}
