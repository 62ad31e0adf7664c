//! A fake point for `sweep --debug-mode` and tests (like hyperfine's debug mode): no child
//! process, no GPU; a synthetic record whose numbers are FAKE (labelled modeled, backend
//! `mock`) and a synthetic NCCL 2.28 log that imitates what NCCL does with NCCL_PROTO,
//! NCCL_ALGO (a global Tree fails the all-gather), NCCL_P2P_DISABLE and NCCL_SHM_DISABLE (its
//! choices: [`super::settings::FakeChoices`]).
//! It exercises the whole pipeline: environments, log parsing, checks, ranking, resume.
//! A point given a library (`VERIFYBENCH_NCCL_LIB`) "loads" it: every fake worker reports that
//! file, resolved, and the version its name (or wheel) tells (2.28.3 when none does), and the
//! fake log names the same version.
//!
//! Rounds (`--rounds`): each (point, round) gets a seeded FAKE between-run factor
//! 1 + noise x u, u uniform in [-1, 1] (noise 0.5% unless [`MOCK_NOISE_ENV`] says otherwise),
//! so the measured noise floor and the paired ratios have something to measure. Tests plant
//! a true gain on one point through [`MOCK_PLANT_ENV`] and interrupt a sweep after a number
//! of pairs through [`MOCK_INTERRUPT_AFTER_ENV`].

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::env::nccl_part;
use super::runner::{PointJob, PointOutcome, PointRunner};
use super::settings::FakeChoices;
use crate::measure::Summary;
use crate::model::{CollectiveKind, Schedule};
use crate::record::{
    Body, Mode, Provenance, Record, RecordedWorkload, Source, VerifyResult, VerifyRun, WorkerInfo,
};

/// Relative amplitude of the mock's between-run noise (a fraction, default 0.005).
pub(crate) const MOCK_NOISE_ENV: &str = "VERIFYBENCH_MOCK_NOISE";
/// A planted true gain: `NAME=VALUE:FACTOR` multiplies the times of the points with that
/// override by FACTOR (e.g. `NCCL_NTHREADS=512:0.97`, 3% faster).
pub(crate) const MOCK_PLANT_ENV: &str = "VERIFYBENCH_MOCK_PLANT";
/// Stop (as Ctrl-C would) when this many pairs have run in this process.
pub(crate) const MOCK_INTERRUPT_AFTER_ENV: &str = "VERIFYBENCH_MOCK_INTERRUPT_AFTER";

/// A planted true gain: (override name, value, time factor).
pub(crate) type Plant = (String, String, f64);

/// Default between-run noise of the mock.
pub(crate) const MOCK_NOISE: f64 = 0.005;

/// What the mock needs besides the job.
pub(crate) struct MockSpec<'a> {
    pub(crate) schedule: &'a Schedule,
    pub(crate) graphs: Vec<bool>,
    pub(crate) mode: Mode,
    pub(crate) iters: u64,
    pub(crate) warmup: u64,
    pub(crate) threads: bool,
    /// Between-run noise amplitude (fraction).
    pub(crate) noise: f64,
    /// Seed of the between-run noise (the sweep's round seed).
    pub(crate) seed: u64,
    /// A planted true gain.
    pub(crate) plant: Option<Plant>,
}

impl MockSpec<'_> {
    /// Reads the test hooks [`MOCK_NOISE_ENV`] and [`MOCK_PLANT_ENV`] (bad values are usage
    /// errors naming the variable).
    pub(crate) fn hooks_from_env() -> anyhow::Result<(f64, Option<Plant>)> {
        let noise = match std::env::var(MOCK_NOISE_ENV) {
            Ok(v) => match v.parse::<f64>() {
                Ok(x) if (0.0..0.5).contains(&x) => x,
                _ => crate::usage_bail!(
                    "{MOCK_NOISE_ENV}='{v}': expected a fraction in [0, 0.5), e.g. 0.01"
                ),
            },
            Err(_) => MOCK_NOISE,
        };
        let plant = match std::env::var(MOCK_PLANT_ENV) {
            Ok(v) => {
                let parsed = v.rsplit_once(':').and_then(|(kv, f)| {
                    let (k, val) = kv.split_once('=')?;
                    let f = f.parse::<f64>().ok().filter(|f| *f > 0.0)?;
                    Some((k.to_string(), val.to_string(), f))
                });
                match parsed {
                    Some(p) => Some(p),
                    None => crate::usage_bail!(
                        "{MOCK_PLANT_ENV}='{v}': expected NAME=VALUE:FACTOR, e.g. NCCL_NTHREADS=512:0.97"
                    ),
                }
            }
            Err(_) => None,
        };
        Ok((noise, plant))
    }
}

/// The mock's interrupt hook: the number of pairs after which to stop, if set.
fn interrupt_after_from_env() -> Option<usize> {
    std::env::var(MOCK_INTERRUPT_AFTER_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
}

/// `--debug-mode`'s runner: the fake [`outcome`] of every job, and the interrupt hook
/// ([`MOCK_INTERRUPT_AFTER_ENV`]): past that many pairs every job ends as Ctrl-C would end it.
pub(crate) struct DebugRunner<'a> {
    spec: MockSpec<'a>,
    stop_after: Option<usize>,
    ran: Cell<usize>,
}

impl<'a> DebugRunner<'a> {
    pub(crate) fn new(spec: MockSpec<'a>) -> DebugRunner<'a> {
        DebugRunner {
            spec,
            stop_after: interrupt_after_from_env(),
            ran: Cell::new(0),
        }
    }
}

impl PointRunner for DebugRunner<'_> {
    fn run(&self, job: &PointJob) -> anyhow::Result<PointOutcome> {
        if self.stop_after.is_some_and(|n| self.ran.get() >= n) {
            return Ok(PointOutcome {
                interrupted: true,
                ..Default::default()
            });
        }
        self.ran.set(self.ran.get() + 1);
        outcome(job, &self.spec)
    }
}

fn seed(s: &str) -> u64 {
    crate::model::schedule::fnv1a(s.as_bytes())
}

/// The fake outcome of a point.
pub(crate) fn outcome(job: &PointJob, spec: &MockSpec) -> anyhow::Result<PointOutcome> {
    let env = nccl_part(&job.env);
    let c = FakeChoices::of(&env, spec.threads);
    // The library the point asked for, as its workers would report it.
    let lib = job
        .env
        .get(std::ffi::OsStr::new(super::library::ENV))
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.into()));
    let version = lib
        .as_deref()
        .and_then(|l| crate::inspect::ncclmaps::version_of_file(l).0)
        .unwrap_or_else(|| "2.28.3".into());
    let mut out = PointOutcome::default();
    if let Some(probe) = &job.probe {
        std::fs::create_dir_all(&probe.log_dir)?;
        let path = probe
            .log_dir
            .join(format!("{}.mockhost.1000.log", job.point.id));
        std::fs::write(&path, probe_log(spec, &env, &c, &version)?)?;
        out.probe_logs = vec![path];
        if c.global_tree {
            out.failure = Some("the probe run (NCCL_DEBUG=INFO) exited with code 1: Error: Comm::all_gather: ncclInvalidUsage (invalid usage)".into());
            out.stderr_tail = "[rank 0] FAILED: Comm::all_gather: ncclInvalidUsage".into();
            return Ok(out);
        }
    }
    let planted = spec
        .plant
        .as_ref()
        .filter(|(k, v, _)| job.point.get(k) == Some(v.as_str()))
        .map_or(1.0, |p| p.2);
    let runs = runs(job, spec, c.factor(), planted);
    let mut prov = Provenance::here("mock", crate::util::now_utc());
    prov.notes
        .push("debug mode: FAKE numbers, no verify ran".into());
    prov.workers = (0..spec.schedule.tp as usize)
        .map(|rank| WorkerInfo {
            rank,
            pid: 1000 + rank as u32,
            device: rank,
            nccl_env: env.clone(),
        })
        .collect();
    if let Some(lib) = &lib {
        prov.worker_nccl = prov
            .workers
            .iter()
            .map(|w| crate::record::WorkerNccl {
                rank: w.rank,
                pid: w.pid,
                version: Some(version.clone()),
                library: Some(lib.display().to_string()),
            })
            .collect();
    }
    out.record = Some(Record::new(
        Source::Modeled,
        prov,
        Body::Verify(VerifyResult::of(RecordedWorkload::of(spec.schedule), runs)),
    ));
    Ok(out)
}

/// The NCCL 2.28 INFO log of the probe run: the version, the variables read, each rank's
/// channel and the choice of the all-reduce and the all-gather (or the WARN of a global Tree).
fn probe_log(
    spec: &MockSpec,
    env: &BTreeMap<String, String>,
    c: &FakeChoices,
    version: &str,
) -> anyhow::Result<String> {
    let ar_bytes = spec
        .schedule
        .collective_groups()
        .into_iter()
        .find(|g| g.kind == CollectiveKind::AllReduce)
        .map_or(0, |g| g.bytes_per_rank);
    let (proto, transport) = (&c.proto, c.transport);
    let mut log = String::new();
    for rank in 0..spec.schedule.tp.min(8) {
        let pre = format!(
            "mockhost:{}:{} [{rank}] NCCL INFO",
            1000 + rank,
            1000 + rank
        );
        writeln!(log, "{pre} NCCL version {version}+cuda13.0")?;
        for (k, v) in env {
            if super::known::is_known(k) {
                writeln!(log, "{pre} {k} set by environment to {v}")?;
            }
        }
        let peer = (rank + 1) % spec.schedule.tp.max(1);
        writeln!(
            log,
            "{pre} Channel 00/0 : {rank}[{rank}] -> {peer}[{peer}] via {transport}"
        )?;
    }
    let pre = "mockhost:1000:1000 [0] NCCL INFO";
    writeln!(
        log,
        "{pre} AllReduce: {ar_bytes} Bytes -> Algo {} proto {proto} channel{{Lo..Hi}}={{0..3}}",
        c.ar_algo
    )?;
    if c.global_tree {
        writeln!(log, "[0] enqueue.cc:1842 NCCL WARN Error : no algorithm/protocol available for function AllGather with datatype ncclInt8. NCCL_ALGO was set to {}.", env.get("NCCL_ALGO").map_or("", String::as_str))?;
    } else {
        writeln!(log, "{pre} AllGather: {ar_bytes} Bytes -> Algo RING proto {proto} channel{{Lo..Hi}}={{0..3}}")?;
    }
    Ok(log)
}

/// The timed runs, one per replay mode: each sample the FAKE time per collective x `factor`
/// (the choices') x `planted` (a planted gain) x the collectives of the schedule, with a seeded between-run factor per (point, round,
/// mode) and a seeded spread within the run.
fn runs(job: &PointJob, spec: &MockSpec, factor: f64, planted: f64) -> Vec<VerifyRun> {
    let ncoll = spec.schedule.count_collectives(CollectiveKind::AllReduce)
        + spec.schedule.count_collectives(CollectiveKind::AllGather);
    let mut state = seed(&job.point.id);
    let mut runs = vec![];
    for &graph in &spec.graphs {
        // Between-run factor of this (point, round, mode): seeded, FAKE.
        let mut between = seed(&format!(
            "{}/{}/{}/{}",
            spec.seed, job.point.id, job.round, graph
        ));
        let u = crate::util::next_unit(&mut between) * 2.0 - 1.0;
        let per = if graph { 7.2 } else { 9.0 } * factor * planted * (1.0 + spec.noise * u);
        let samples: Vec<f64> = (0..spec.iters.max(1))
            .map(|_| per * ncoll as f64 * (0.98 + 0.04 * crate::util::next_unit(&mut state)))
            .collect();
        let s = Summary::from_samples(&samples).expect("finite samples");
        runs.push(VerifyRun {
            graph,
            mode: spec.mode,
            per_collective_us: s.median_us / ncoll.max(1) as f64,
            per_verify: s,
            breakdown: vec![],
            wrong: 0,
            iterations: spec.iters,
            warmup: spec.warmup,
            in_collective: None,
        });
    }
    runs
}
