//! The exact-result checks through a launcher: every collective and P2P all-reduce at three
//! sizes, the verify replay with its per-collective pass, and the ops a trace exports, eager
//! and from a CUDA graph, with every buffer slot written and checked.

use super::{eager_or_graph, spec, Check};
use crate::comm;
use crate::comm::p2p::Impl;
use crate::launch::job::slots::SLOTS;
use crate::launch::job::{CollCase, RankResult};
use crate::launch::run::{combine, run_job};
use crate::launch::Job;
use crate::measure::Summary;
use crate::model::{self, CollectiveKind, DType, Phase, ScheduleOptions};
use crate::record::{Mode, RankTime};
use crate::request::Launcher;

/// Every collective x dtype at three sizes (one element per rank, the verify's 43,008 B, 1 MiB),
/// eager and graph, in one run of the launcher.
pub(super) fn collectives(devices: &[usize], launcher: Launcher, checks: &mut Vec<Check>) {
    let n = devices.len();
    let mut cases = vec![];
    for op in CollectiveKind::ALL {
        for dtype in [DType::Bf16, DType::F16, DType::F32] {
            for bytes in [dtype.size() * n as u64, 43008, 1 << 20] {
                let count = op.ops().count_for_size(bytes, dtype.size(), n).max(1);
                cases.push(CollCase {
                    op,
                    dtype,
                    count,
                    imp: Default::default(),
                });
            }
        }
    }
    run_cases(
        devices,
        launcher,
        &cases,
        "collectives",
        |case, graph, _sum, wrong| {
            (
                format!(
                    "{} {} count {} {}",
                    case.op.name(),
                    case.dtype.name(),
                    case.count,
                    eager_or_graph(graph)
                ),
                format!("{wrong} wrong elements"),
            )
        },
        checks,
    );
}

/// The P2P all-reduces (one-shot, two-shot) through the same harness as NCCL's: every dtype at
/// one element per rank, the verify's 43,008 B and 1 MiB, eager and graph, exact results. Where
/// two GPUs cannot reach each other the line says which and the checks are skipped.
pub(super) fn p2p_collectives(devices: &[usize], launcher: Launcher, checks: &mut Vec<Check>) {
    if let Err(u) = comm::p2p::check_topology(devices) {
        checks.push(Check::new(
            "p2p all-reduces",
            launcher.name(),
            true,
            format!("SKIPPED: {}", u.skipped(&[Impl::OneShot, Impl::TwoShot])),
        ));
        return;
    }
    let n = devices.len();
    let mut cases = vec![];
    for imp in [Impl::OneShot, Impl::TwoShot] {
        for dtype in [DType::Bf16, DType::F16, DType::F32] {
            for bytes in [dtype.size() * n as u64, 43008, 1 << 20] {
                let count = (bytes / dtype.size()) as usize;
                cases.push(CollCase {
                    op: CollectiveKind::AllReduce,
                    dtype,
                    count,
                    imp,
                });
            }
        }
    }
    run_cases(
        devices,
        launcher,
        &cases,
        "p2p all-reduces",
        |case, graph, sum, wrong| {
            (
                format!(
                    "{} {} count {} {}",
                    case.imp,
                    case.dtype.name(),
                    case.count,
                    eager_or_graph(graph)
                ),
                format!("{wrong} wrong elements, {:.1} us", sum.median_us),
            )
        },
        checks,
    );
}

/// One run of the launcher over `cases`, eager and graph (3 iterations after 1 warm-up, in
/// batches of 2), and a check per case and mode: it passes when no element is wrong; `line`
/// gives its name and detail. A run that fails is one failed check named `failed_name`.
fn run_cases(
    devices: &[usize],
    launcher: Launcher,
    cases: &[CollCase],
    failed_name: &str,
    line: impl Fn(&CollCase, bool, &Summary, u64) -> (String, String),
    checks: &mut Vec<Check>,
) {
    let job = Job::Collective {
        cases: cases.to_vec(),
        graphs: vec![false, true],
        iters: 3,
        warmup: 1,
        batch: 2,
    };
    let raw = run_job(&spec(devices, launcher, 60.0), &job);
    if let Ok(r) = &raw {
        let n = devices.len();
        // per case, eager then graph: every slot's output
        let want: Vec<u64> = cases
            .iter()
            .flat_map(|c| [(SLOTS * c.op.ops().recv_elems(c.count, n)) as u64; 2])
            .collect();
        checks.push(slot_coverage(r, &want, failed_name, launcher));
    }
    let res = raw.and_then(|r| combine(&r, job.configs(), RankTime::Max));
    match res {
        Ok(c) => {
            for (i, case) in cases.iter().enumerate() {
                for (g, graph) in [false, true].into_iter().enumerate() {
                    let (sum, wrong) = (&c[i * 2 + g].0, c[i * 2 + g].1);
                    let (name, detail) = line(case, graph, sum, wrong);
                    checks.push(Check::new(name, launcher.name(), wrong == 0, detail));
                }
            }
        }
        Err(e) => checks.push(Check::of(failed_name, launcher.name(), Err(e))),
    }
}

/// The moving buffers: every rank's exact check compared, per configuration, `want` elements
/// ([`SLOTS`] x the outputs' elements, 0 for compute only). With every slot's output poisoned
/// before the check, a slot that no launch wrote counts as wrong, so this and `#wrong = 0`
/// together say that every slot was written and checked.
pub(super) fn slot_coverage(
    results: &[RankResult],
    want: &[u64],
    what: &str,
    launcher: Launcher,
) -> Check {
    let mut bad = vec![];
    for r in results {
        if r.checked != want {
            let at = (0..want.len().max(r.checked.len()))
                .find(|&c| r.checked.get(c) != want.get(c))
                .unwrap_or(0);
            bad.push(format!(
                "rank {} configuration {at}: {:?} elements checked, {:?} wanted",
                r.rank,
                r.checked.get(at),
                want.get(at)
            ));
        }
    }
    let total: u64 = want.iter().sum();
    Check {
        name: format!("{what}: every buffer slot checked"),
        launcher: launcher.name().into(),
        pass: bad.is_empty() && !results.is_empty(),
        detail: if bad.is_empty() {
            format!(
                "{SLOTS} buffer slots per collective, {total} elements checked on each of {} ranks",
                results.len()
            )
        } else {
            bad.join("; ")
        },
    }
}

/// The Kimi-K2.5 verify schedule (comm and full), eager and graph: exact results in both.
pub(super) fn verify(devices: &[usize], launcher: Launcher, checks: &mut Vec<Check>) {
    let shape = model::presets::preset("kimi-k2.5").expect("preset");
    // one rank replays the TP=8 schedule's per-rank collectives (TP=1 has none)
    let opt = ScheduleOptions {
        tp: if devices.len() == 1 {
            8
        } else {
            devices.len() as u64
        },
        ..Default::default()
    };
    let s = match model::build(&shape, &opt, Phase::Verify) {
        Ok(s) => s,
        Err(e) => {
            checks.push(Check::of("verify schedule", launcher.name(), Err(e)));
            return;
        }
    };
    let runs = vec![
        (false, Mode::Comm),
        (true, Mode::Comm),
        (false, Mode::Full),
        (true, Mode::Full),
    ];
    let job = Job::Verify {
        schedule: s.clone(),
        runs: runs.clone(),
        iters: 3,
        warmup: 1,
        launches_per_layer: 2,
        run_impls: vec![],
        // Small jittered host gaps exercise the eager busy-wait; the exact-result checks hold
        // with them as without.
        host_gaps: Box::new(
            crate::measure::gaps::HostGaps::from_request(
                &crate::measure::gaps::HostGapRequest {
                    gap: Some(crate::measure::gaps::HostGap {
                        mean_us: 20.0,
                        jitter_us: 5.0,
                    }),
                    ..Default::default()
                },
                devices.len(),
                s.ops.len(),
            )
            .expect("valid host gaps"),
        ),
        timing_pass: 2,
        pdl: false,
        cycle: None,
    };
    let results = run_job(&spec(devices, launcher, 120.0), &job);
    if let Ok(r) = &results {
        let n = devices.len();
        let outputs: usize = s
            .ops
            .iter()
            .map(|op| match op {
                model::Op::Collective { kind, count, .. } => {
                    kind.ops().recv_elems(*count as usize, n)
                }
                _ => 0,
            })
            .sum();
        let want: Vec<u64> = runs
            .iter()
            .map(|(_, m)| match m {
                Mode::Compute => 0,
                _ => (SLOTS * outputs) as u64,
            })
            .collect();
        checks.push(slot_coverage(r, &want, "verify kimi-k2.5", launcher));
        // The per-collective pass: every rank, every run, each verify's collectives timed.
        for (c, (graph, mode)) in runs.iter().enumerate() {
            let per_rank: Vec<_> = r
                .iter()
                .map(|x| x.passes.get(c).cloned().unwrap_or_default())
                .collect();
            let ok_rank = |p: &Vec<crate::launch::timeline::PassIteration>| {
                p.len() == 2
                    && p.iter().all(|it| {
                        it.collectives.len() as u64 == s.n_collectives()
                            && it
                                .collectives
                                .iter()
                                .all(|t| t.dur_us > 0.0 && t.start_us >= 0.0)
                    })
            };
            let a = crate::launch::timeline::attribute_pass(&per_rank, String::new());
            checks.push(Check {
                name: format!(
                    "per-collective pass {} {}",
                    mode.name(),
                    if *graph { "graph" } else { "eager" }
                ),
                launcher: launcher.name().into(),
                pass: per_rank.iter().all(ok_rank)
                    && a.as_ref().is_some_and(|a| a.transfer_us > 0.0),
                detail: a.map_or("no attribution".into(), |a| {
                    format!(
                        "in collectives {:.0} us = transfer {:.0} + waiting {:.0} us per verify",
                        a.in_collective_us, a.transfer_us, a.waiting_us
                    )
                }),
            });
        }
    }
    match results.and_then(|r| combine(&r, runs.len(), RankTime::Max)) {
        Ok(c) => {
            for ((graph, mode), (sum, wrong)) in runs.iter().zip(c) {
                checks.push(Check {
                    name: format!(
                        "verify kimi-k2.5 {} {}",
                        mode.name(),
                        if *graph { "graph" } else { "eager" }
                    ),
                    launcher: launcher.name().into(),
                    pass: wrong == 0,
                    detail: format!(
                        "{} collectives, {wrong} wrong elements, {:.0} us per verify",
                        s.n_collectives(),
                        sum.median_us
                    ),
                });
            }
        }
        Err(e) => checks.push(Check::of("verify kimi-k2.5", launcher.name(), Err(e))),
    }
}

/// The schedule a trace exports when its step holds a broadcast and an all-to-all
/// (`trace --export-schedule`): an all-reduce, a broadcast from rank 0 and an all-to-all of
/// grouped sends and receives, replayed by `verify --schedule`'s job, eager and from a CUDA
/// graph, every element checked exactly.
pub(super) fn exported_ops(devices: &[usize], launcher: Launcher, checks: &mut Vec<Check>) {
    let n = devices.len();
    let coll = |kind: CollectiveKind, count: u64| model::Op::Collective {
        kind,
        dtype: DType::Bf16,
        count,
        bytes_per_rank: count * DType::Bf16.size(),
        site: "trace".into(),
        layer: None,
    };
    let schedule = model::Schedule {
        model: "selftest:exported".into(),
        phase: Phase::Verify,
        tp: n as u64,
        tokens: 0,
        dtype: DType::Bf16,
        routing: model::Routing::Uniform,
        experts_per_layer: 0.0,
        ops: vec![
            coll(CollectiveKind::AllReduce, 21504),
            coll(CollectiveKind::Broadcast, 21504),
            coll(CollectiveKind::AllToAll, 2688),
        ],
        config_reading: None,
        facts: Default::default(),
    };
    let runs = vec![(false, Mode::Comm), (true, Mode::Comm)];
    let job = Job::Verify {
        schedule,
        runs: runs.clone(),
        iters: 3,
        warmup: 1,
        launches_per_layer: 2,
        run_impls: vec![],
        host_gaps: Default::default(),
        timing_pass: 0,
        pdl: false,
        cycle: None,
    };
    let res = run_job(&spec(devices, launcher, 120.0), &job)
        .and_then(|r| combine(&r, runs.len(), RankTime::Max));
    match res {
        Ok(c) => {
            for ((graph, _), (_, wrong)) in runs.iter().zip(c) {
                checks.push(Check::new(
                    format!("exported broadcast + all-to-all {}", eager_or_graph(*graph)),
                    launcher.name(),
                    wrong == 0,
                    format!("3 collectives, {wrong} wrong elements"),
                ));
            }
        }
        Err(e) => checks.push(Check::of(
            "exported broadcast + all-to-all",
            launcher.name(),
            Err(e),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(r: usize, checked: &[u64]) -> RankResult {
        serde_json::from_value(serde_json::json!({
            "rank": r, "pid": 1, "device": r, "gpu": null, "nccl_env": {},
            "nccl_version": null, "nccl_library": null, "samples": [[1.0], [1.0]],
            "wrong": [0, 0], "checked": checked, "init_s": 0.1
        }))
        .unwrap()
    }

    /// An output of 16 elements per configuration: 3 slots x 16 = 48 checked on every rank
    /// passes; a rank that checked one slot fewer, or a worker that reports no count, fails
    /// and is named.
    #[test]
    fn slot_coverage_wants_every_slot_on_every_rank() {
        let want = [3 * 16, 3 * 16];
        let ok = slot_coverage(
            &[rank(0, &[48, 48]), rank(1, &[48, 48])],
            &want,
            "collectives",
            Launcher::Threads,
        );
        assert!(ok.pass, "{}", ok.detail);
        assert_eq!(ok.name, "collectives: every buffer slot checked");
        assert!(ok.detail.contains("96 elements"), "{}", ok.detail);
        let short = slot_coverage(
            &[rank(0, &[48, 48]), rank(1, &[48, 32])],
            &want,
            "collectives",
            Launcher::Threads,
        );
        assert!(!short.pass);
        assert!(
            short.detail.contains("rank 1 configuration 1: Some(32)"),
            "{}",
            short.detail
        );
        let old = slot_coverage(&[rank(0, &[])], &want, "x", Launcher::Processes);
        assert!(!old.pass);
        assert!(
            old.detail.contains("rank 0 configuration 0: None"),
            "{}",
            old.detail
        );
        assert!(!slot_coverage(&[], &want, "x", Launcher::Threads).pass);
    }
}
