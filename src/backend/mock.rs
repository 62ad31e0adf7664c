//! [`MockBackend`]: deterministic FAKE numbers for tests (hyperfine's `MockExecutor`). No GPU,
//! no NCCL, no cost model: each timing is a fixed function of the request, so two runs of the
//! same request give the same record. Records say backend `mock` and carry a FAKE note; their
//! source is `modeled`, never `measured`.

use super::Backend;
use crate::measure::Summary;
use crate::record::{
    algbw_gbps, Body, CollTiming, CollectiveResult, CollectiveRow, Impl, ImplRun, ImplTiming, Mode,
    Provenance, Record, RecordedWorkload, Source, VerifyResult, VerifyRun,
};
use crate::request::{BackendKind, CollectiveRequest, VerifyJob};
use crate::util::now_utc;

/// The fake P2P all-reduce's per-collective time as a fraction of the fake NCCL one.
fn fake_factor(imp: Impl) -> f64 {
    match imp {
        Impl::Nccl => 1.0,
        Impl::OneShot => 0.5,
        Impl::TwoShot => 0.7,
    }
}

/// The note every mock record carries.
pub(crate) const FAKE_NOTE: &str = "mock backend: FAKE numbers, nothing ran";

#[derive(Debug, Clone, Copy, Default)]
pub struct MockBackend;

/// `iters` fake samples around `center_us` (within +-2%), from a seeded generator.
fn samples(seed: u64, center_us: f64, iters: u64) -> Summary {
    let mut state = seed;
    let v: Vec<f64> = (0..iters.max(1))
        .map(|_| center_us * (0.98 + 0.04 * crate::util::next_unit(&mut state)))
        .collect();
    Summary::from_samples(&v).expect("finite samples")
}

/// The FAKE between-run factor of repetition `run` of `fresh_runs` (`--fresh-runs`):
/// 1 + 2% x u, u uniform in [-1, 1], seeded by the run; exactly 1 for a single run, so one
/// run's numbers do not depend on it. Deterministic, so tests can check the statistics.
pub(crate) fn between_run_factor(fresh_runs: usize, run: usize) -> f64 {
    if fresh_runs <= 1 {
        return 1.0;
    }
    let mut st = crate::model::schedule::fnv1a(format!("fresh-run-{run}").as_bytes());
    let u = crate::util::next_unit(&mut st) * 2.0 - 1.0;
    1.0 + 0.02 * u
}

/// The note of mock records of repeated runs.
pub(crate) const FAKE_SPREAD_NOTE: &str =
    "mock backend: the spread between fresh runs is FAKE too (seeded, +-2%)";

fn provenance(launcher: &str, fresh_runs: usize) -> Provenance {
    let mut p = Provenance::here(BackendKind::Mock.name(), now_utc());
    p.launcher = Some(launcher.into());
    p.notes.push(FAKE_NOTE.into());
    if fresh_runs > 1 {
        p.notes.push(FAKE_SPREAD_NOTE.into());
    }
    p
}

impl Backend for MockBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Mock
    }

    fn run_verify(&self, j: &VerifyJob) -> anyhow::Result<Record> {
        let (a, s, n, gaps) = (&j.request, &j.schedule, j.nranks, &j.host_gaps);
        let ncoll = s.n_collectives().max(1);
        let pass_iters = crate::launch::timeline::pass_iterations(a.repeat.iters) as usize;
        // The per-collective pass, faked: every collective 7 us (graph) or 9 us (eager) long,
        // the late rank (eager only) starting each one its lag late.
        let pass = |graph: bool| {
            let late = gaps.late.filter(|_| !graph).map(|l| (l.rank, l.us));
            let per = if graph { 7.0 } else { 9.0 };
            crate::launch::timeline::fake_pass(s, n, pass_iters, per, late)
        };
        if let Some(p) = &a.export_trace {
            let graph = !a.runs().iter().any(|(g, m)| !*g && *m != Mode::Compute);
            let tracks = crate::launch::timeline::chrome_tracks(&pass(graph), s, graph);
            crate::trace::chrome::write_file(&tracks, n, p)?;
        }
        let run = |imp: Impl, graph: bool, mode: Mode| {
            let per = if graph { 7.0 } else { 9.0 }
                * fake_factor(imp)
                * between_run_factor(a.fresh_runs, a.fresh_run);
            let key = match imp {
                Impl::Nccl => format!("{}-{}-{graph}", s.hash(), mode.name()),
                _ => format!("{}-{}-{graph}-{imp}", s.hash(), mode.name()),
            };
            let sum = samples(
                crate::model::schedule::fnv1a(key.as_bytes()),
                per * ncoll as f64,
                a.repeat.iters,
            );
            VerifyRun {
                graph,
                mode,
                per_collective_us: sum.median_us / ncoll as f64,
                per_verify: sum,
                breakdown: vec![],
                wrong: 0,
                iterations: a.repeat.iters.max(1),
                warmup: a.repeat.warmup,
                in_collective: (imp == Impl::Nccl && mode != Mode::Compute)
                    .then(|| {
                        crate::launch::timeline::attribute_pass(&pass(graph), FAKE_NOTE.into())
                    })
                    .flatten(),
            }
        };
        let runs = if crate::impls::has_nccl(&a.impls) {
            a.runs()
                .into_iter()
                .map(|(g, m)| run(Impl::Nccl, g, m))
                .collect()
        } else {
            vec![]
        };
        let mut p2p = vec![];
        for imp in crate::impls::p2p(&a.impls) {
            for (g, m) in a.runs() {
                p2p.push(ImplRun {
                    imp,
                    run: run(imp, g, m),
                });
            }
        }
        let mut prov = provenance(a.gpu.launcher.name(), a.fresh_runs);
        if !gaps.is_none() {
            prov.notes.push(gaps.describe());
        }
        if !p2p.is_empty() {
            prov.notes.push(crate::impls::VERIFY_NOTE.into());
        }
        Ok(Record::new(
            Source::Modeled,
            prov,
            Body::Verify(VerifyResult {
                p2p,
                ..VerifyResult::of(RecordedWorkload::of(s), runs)
            }),
        ))
    }

    fn collective(&self, a: &CollectiveRequest) -> anyhow::Result<Record> {
        let n = a.ranks()?;
        let esz = a.dtype.size();
        let sizes = a.sizes(n)?;
        crate::impls::check_collective(&a.impls, a.op, a.dtype, &sizes, n)?;
        let rows = sizes
            .into_iter()
            .map(|size| {
                let timing = |imp: Impl, graph: bool| {
                    // fake crossover: the P2P kernels start lower and grow faster with size
                    let (base, slope) = match imp {
                        Impl::Nccl => (1.0, 100e3),
                        Impl::OneShot => (0.5, 20e3),
                        Impl::TwoShot => (0.7, 40e3),
                    };
                    let center = (if graph { 5.0 } else { 8.0 } * base + size as f64 / slope)
                        * between_run_factor(a.fresh_runs, a.fresh_run);
                    let seed = match imp {
                        Impl::Nccl => size ^ u64::from(graph),
                        _ => crate::model::schedule::fnv1a(
                            format!("{size}-{graph}-{imp}").as_bytes(),
                        ),
                    };
                    let s = samples(seed, center, a.repeat.iters);
                    let alg = algbw_gbps(size, s.median_us);
                    CollTiming {
                        time_us: s.median_us,
                        algbw_gbps: alg,
                        busbw_gbps: alg * a.op.bus_factor(n),
                        wrong: 0,
                        summary: s,
                    }
                };
                let modes = a.graph.modes();
                let nccl = crate::impls::has_nccl(&a.impls);
                CollectiveRow {
                    size_bytes: size,
                    count: size / esz,
                    eager: (nccl && modes.contains(&false)).then(|| timing(Impl::Nccl, false)),
                    graph: (nccl && modes.contains(&true)).then(|| timing(Impl::Nccl, true)),
                    p2p: crate::impls::p2p(&a.impls)
                        .into_iter()
                        .map(|imp| ImplTiming {
                            imp,
                            eager: modes.contains(&false).then(|| timing(imp, false)),
                            graph: modes.contains(&true).then(|| timing(imp, true)),
                        })
                        .collect(),
                }
            })
            .collect();
        Ok(Record::new(
            Source::Modeled,
            provenance(a.gpu.launcher.name(), a.fresh_runs),
            Body::Collective(CollectiveResult {
                op: a.op,
                dtype: a.dtype,
                nranks: n,
                rows,
            }),
        ))
    }
}
