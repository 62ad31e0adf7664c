//! [`MockBackend`]: deterministic FAKE numbers for tests (hyperfine's `MockExecutor`). No GPU,
//! no NCCL, no cost model: each timing is a fixed function of the request, so two runs of the
//! same request give the same record. Records say backend `mock` and carry a FAKE note; their
//! source is `modeled`, never `measured`.

use super::Backend;
use crate::measure::Summary;
use crate::record::{
    algbw_gbps, Body, CollTiming, CollectiveResult, CollectiveRow, Provenance, Record, Source,
    VerifyResult, VerifyRun, Workload,
};
use crate::request::{BackendKind, CollectiveRequest, VerifyRequest};
use crate::util::now_utc;

/// The note every mock record carries.
pub const FAKE_NOTE: &str = "mock backend: FAKE numbers, nothing ran";

#[derive(Debug, Clone, Copy, Default)]
pub struct MockBackend;

/// `iters` fake samples around `center_us` (within +-2%), from a seeded generator.
fn samples(seed: u64, center_us: f64, iters: u64) -> Summary {
    let mut state = seed;
    let v: Vec<f64> = (0..iters.max(1))
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (state >> 11) as f64 / (1u64 << 53) as f64;
            center_us * (0.98 + 0.04 * u)
        })
        .collect();
    Summary::from_samples(&v).expect("finite samples")
}

/// The FAKE between-run factor of repetition `run` of `fresh_runs` (`--fresh-runs`):
/// 1 + 2% x u, u uniform in [-1, 1], seeded by the run; exactly 1 for a single run, so one
/// run's numbers do not depend on it. Deterministic, so tests can check the statistics.
pub fn between_run_factor(fresh_runs: usize, run: usize) -> f64 {
    if fresh_runs <= 1 {
        return 1.0;
    }
    let mut st = crate::model::schedule::fnv1a(format!("fresh-run-{run}").as_bytes());
    st = st
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let u = (st >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
    1.0 + 0.02 * u
}

/// The note of mock records of repeated runs.
pub const FAKE_SPREAD_NOTE: &str =
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

    fn verify(&self, a: &VerifyRequest) -> anyhow::Result<Record> {
        let s = a
            .workload
            .schedule(a.gpu.gpus.map(|g| g as u64).unwrap_or(8))?;
        let ncoll = s.n_collectives().max(1);
        let runs = a
            .runs()
            .into_iter()
            .map(|(graph, mode)| {
                let per = if graph { 7.0 } else { 9.0 };
                let seed = crate::model::schedule::fnv1a(
                    format!("{}-{}-{graph}", s.hash(), mode.name()).as_bytes(),
                );
                let f = between_run_factor(a.fresh_runs, a.fresh_run);
                let sum = samples(seed, per * ncoll as f64 * f, a.repeat.iters);
                VerifyRun {
                    graph,
                    mode,
                    per_collective_us: sum.median_us / ncoll as f64,
                    per_verify: sum,
                    breakdown: vec![],
                    wrong: 0,
                    iterations: a.repeat.iters.max(1),
                    warmup: a.repeat.warmup,
                }
            })
            .collect();
        Ok(Record::new(
            Source::Modeled,
            provenance(a.gpu.launcher.name(), a.fresh_runs),
            Body::Verify(VerifyResult {
                workload: Workload::of(&s),
                runs,
                stream_gbps: None,
                predicted_compute_us: None,
            }),
        ))
    }

    fn collective(&self, a: &CollectiveRequest) -> anyhow::Result<Record> {
        let n = a.gpu.gpus.unwrap_or(8);
        let esz = a.dtype.size();
        let rows = a
            .sizes(n)?
            .into_iter()
            .map(|size| {
                let timing = |graph: bool| {
                    let center = (if graph { 5.0 } else { 8.0 } + size as f64 / 100e3)
                        * between_run_factor(a.fresh_runs, a.fresh_run);
                    let s = samples(size ^ u64::from(graph), center, a.repeat.iters);
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
                CollectiveRow {
                    size_bytes: size,
                    count: size / esz,
                    eager: modes.contains(&false).then(|| timing(false)),
                    graph: modes.contains(&true).then(|| timing(true)),
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
