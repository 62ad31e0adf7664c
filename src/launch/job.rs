//! What one rank does: open its GPU, join the communicator, run the job, report.
//!
//! Timing: before every timed iteration the rank synchronises its stream and passes a barrier
//! (a one-element all-reduce), so all ranks start together; events on the stream bracket the
//! iteration (including the host's enqueue time, which is what eager mode pays). The parent
//! takes, per iteration, the slowest rank's time.
//!
//! Host gaps ([`crate::measure::gaps`]): in eager replay each rank busy-waits its drawn gap
//! before each launch; the gaps of every iteration are drawn before the timed loop. After a
//! run's headline timing, a separate per-collective pass ([`super::timeline`]) times each
//! collective and compute launch with events (event-record nodes inside a graph). A job of one
//! rank without collectives (one GPU, `--mode compute`) opens no communicator.
//!
//! - this file: the job and what a rank is given and reports ([`Job`], [`RankSetup`],
//!   [`RankResult`], the injected [`Fault`]s);
//! - [`rank`]: the run of one rank ([`run_rank`]): its GPU, communicator, barrier, timing
//!   loop, P2P connection and exact check;
//! - [`slots`]: which buffer slot each launch of a collective uses (buffers that move between
//!   iterations, as nccl-tests moves its offsets), eager and graph;
//! - [`steps`]: a schedule turned into replay steps (collectives, streaming ranges, tiny
//!   kernels);
//! - [`compute`]: the streaming kernels a rank replays between collectives, and their
//!   bandwidth and per-launch cost.

pub(crate) mod compute;
pub(crate) mod rank;
pub(crate) mod slots;
pub(crate) mod steps;

pub(crate) use compute::FIXED_COST_LAUNCHES;
pub(crate) use rank::run_rank;
pub(crate) use steps::{plan_steps, stream_launches};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::comm::p2p::{Impl, InProcessExchange};
use crate::comm::UniqueId;
use crate::measure::gaps::HostGaps;
use crate::model::{CollectiveKind, DType, Schedule};
use crate::record::{GpuInfo, Mode};

/// A deliberate failure, for testing that failures end runs cleanly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum FaultKind {
    /// The rank's process exits with status 3 after joining the communicator.
    Exit,
    /// The rank sleeps forever after joining (exercises the timeout).
    Hang,
    /// The rank's process aborts (SIGABRT).
    Abort,
    /// The rank makes none of its P2P all-reduce calls, so it never signals its peers (they
    /// must time out naming it; NCCL calls go on as usual).
    P2pSilent,
}

// the names `--inject-fault` and the worker's `--fault` take
crate::named_enum!(FaultKind {
    Exit => "exit": "",
    Hang => "hang": "",
    Abort => "abort": "",
    P2pSilent => "p2p-silent": "",
});

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Fault {
    pub(crate) kind: FaultKind,
    pub(crate) rank: usize,
}

impl std::str::FromStr for Fault {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (k, r) = s.split_once(':').unwrap_or((s, "1"));
        let kind = <FaultKind as crate::util::Named>::ALL
            .iter()
            .copied()
            .find(|f| f.name() == k)
            .ok_or_else(|| format!("unknown fault '{k}' (exit, hang, abort, p2p-silent)"))?;
        let rank = r.parse().map_err(|_| format!("bad fault rank '{r}'"))?;
        Ok(Fault { kind, rank })
    }
}

/// The work every rank does.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum Job {
    /// Collectives, one case after another, each eager and/or graph.
    Collective {
        cases: Vec<CollCase>,
        graphs: Vec<bool>,
        iters: u64,
        warmup: u64,
        /// Operations per timed sample (their mean is one sample).
        batch: u64,
    },
    /// Replay of a schedule.
    Verify {
        schedule: Schedule,
        runs: Vec<(bool, Mode)>,
        iters: u64,
        warmup: u64,
        launches_per_layer: u32,
        /// Per run of `runs`: the implementation of its all-reduces (empty: NCCL for all; the
        /// all-gather is NCCL's whatever this says).
        #[serde(default)]
        run_impls: Vec<Impl>,
        /// Host time before each launch in eager replay (none in graph replay).
        #[serde(default)]
        host_gaps: Box<HostGaps>,
        /// Verifies of the per-collective timing pass after each run's headline timing (0:
        /// no pass).
        #[serde(default)]
        timing_pass: u64,
        /// Launch the streaming kernels with programmatic dependent launch (`--pdl`).
        #[serde(default)]
        pdl: bool,
        /// `--phase cycle`: `schedule` is the cycle's verify, and each run is timed as
        /// [`CYCLE_CONFIGS`] (the decode step, the draft forwards, the verify, the cycle).
        #[serde(default)]
        cycle: Option<Box<CycleJob>>,
    },
    /// Report the environment only (no NCCL).
    Env,
}

impl Job {
    /// Whether `nranks` ranks of this job need an NCCL communicator: not one rank replaying
    /// compute only (one GPU measuring one rank's share).
    pub(crate) fn needs_communicator(&self, nranks: usize) -> bool {
        match self {
            Job::Verify { runs, .. } => nranks > 1 || runs.iter().any(|(_, m)| *m != Mode::Compute),
            Job::Collective { .. } => true,
            Job::Env => false,
        }
    }

    /// Number of configurations (each gives one sample series).
    pub(crate) fn configs(&self) -> usize {
        match self {
            Job::Collective { cases, graphs, .. } => cases.len() * graphs.len(),
            Job::Verify {
                runs, cycle: None, ..
            } => runs.len(),
            Job::Verify { runs, .. } => runs.len() * CYCLE_CONFIGS.len(),
            Job::Env => 0,
        }
    }
}

/// A speculative cycle's forwards besides its verify (`verify --phase cycle`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CycleJob {
    /// The plain decode step of the same batch.
    pub(crate) decode: Schedule,
    /// The draft forwards of one cycle, in order.
    pub(crate) draft: Vec<Schedule>,
}

/// What a cycle job times per (graph, mode) run, in this order: one configuration each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CycleConfig {
    /// The plain decode step.
    Decode,
    /// The k draft forwards (graphed as the engines capture them).
    Draft,
    Verify,
    /// The draft forwards, then the verify.
    Cycle,
}

pub(crate) const CYCLE_CONFIGS: [CycleConfig; 4] = [
    CycleConfig::Decode,
    CycleConfig::Draft,
    CycleConfig::Verify,
    CycleConfig::Cycle,
];

/// One collective case: the operation, its element type and NCCL count (the all-reduce's
/// count, the all-gather's send count, the reduce-scatter's receive count).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CollCase {
    pub(crate) op: CollectiveKind,
    pub(crate) dtype: DType,
    pub(crate) count: usize,
    /// NCCL's collective, or a custom P2P all-reduce.
    #[serde(default)]
    pub(crate) imp: Impl,
}

impl Job {
    /// The largest message (bytes) a custom P2P all-reduce of this job carries; 0 when the job
    /// runs none (then no rank sets up peer memory).
    pub(crate) fn p2p_bytes(&self) -> usize {
        match self {
            Job::Collective { cases, .. } => cases
                .iter()
                .filter(|c| c.imp.is_p2p())
                .map(|c| c.count * c.dtype.size() as usize)
                .max()
                .unwrap_or(0),
            Job::Verify {
                schedule,
                run_impls,
                ..
            } if run_impls.iter().any(|i| i.is_p2p()) => {
                crate::impls::largest_all_reduce(schedule) as usize
            }
            _ => 0,
        }
    }
}

/// How the ranks of one job swap their P2P workspace handles.
#[derive(Clone, Default)]
pub(crate) enum P2pExchange {
    /// No way to (a launcher whose ranks may be on several hosts): a job with P2P cases fails.
    #[default]
    None,
    /// Ranks are threads of this process: peer access between their contexts.
    Threads(Arc<InProcessExchange>),
    /// Ranks are processes of this host: CUDA IPC handles through files in the job's folder.
    Files { dir: PathBuf, token: String },
}

impl std::fmt::Debug for P2pExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            P2pExchange::None => f.write_str("None"),
            P2pExchange::Threads(_) => f.write_str("Threads"),
            P2pExchange::Files { dir, token } => write!(f, "Files({}, {token})", dir.display()),
        }
    }
}

impl P2pExchange {
    /// The file exchange beside a worker's job file: its folder, named after the job's
    /// temporary folder (letters, digits and '-' only).
    pub(crate) fn beside(job_file: &Path) -> P2pExchange {
        let dir = job_file.parent().unwrap_or(Path::new(".")).to_path_buf();
        let token: String = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        P2pExchange::Files {
            dir,
            token: if token.is_empty() {
                "job".into()
            } else {
                token
            },
        }
    }
}

/// What one rank reports back.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct RankResult {
    pub(crate) rank: usize,
    pub(crate) pid: u32,
    pub(crate) device: usize,
    pub(crate) gpu: Option<GpuInfo>,
    pub(crate) nccl_env: BTreeMap<String, String>,
    pub(crate) nccl_version: Option<String>,
    pub(crate) nccl_library: Option<String>,
    /// Per configuration, per timed sample: microseconds.
    pub(crate) samples: Vec<Vec<f64>>,
    /// Per configuration: wrong elements in the checked output.
    pub(crate) wrong: Vec<u64>,
    /// Per configuration: elements the exact check compared, over every buffer slot of every
    /// collective ([`slots::SLOTS`] x the outputs' elements; 0 for compute only). Empty from a
    /// worker that predates the slots.
    #[serde(default)]
    pub(crate) checked: Vec<u64>,
    /// Seconds from start to communicator ready.
    pub(crate) init_s: f64,
    /// Read bandwidth of the streaming kernel on this rank (GB/s), when compute ran.
    #[serde(default)]
    pub(crate) stream_gbps: Option<f64>,
    /// The cost of one streaming launch beyond its bytes on this rank (us), from back-to-back
    /// launches of the schedule's mean size, when compute ran.
    #[serde(default)]
    pub(crate) stream_fixed_us: Option<f64>,
    /// The streaming kernel at each token count of the replay's launches on this rank, when
    /// compute ran.
    #[serde(default)]
    pub(crate) stream_rates: Vec<crate::record::StreamRate>,
    /// Per configuration: the per-collective timing pass, one entry per verify (empty when
    /// the configuration had none).
    #[serde(default)]
    pub(crate) passes: Vec<Vec<super::timeline::PassIteration>>,
    /// What the rank's CPU affinity came to.
    #[serde(default)]
    pub(crate) affinity: Option<super::affinity::AffinityFacts>,
    /// Peak SM and memory clocks of the rank's GPU, kHz (driver attributes); `None` when the
    /// driver did not say.
    #[serde(default)]
    pub(crate) clocks_khz: Option<(i32, i32)>,
}

impl RankResult {
    /// The NCCL this rank reported: the version it asked `ncclGetVersion` and the file mapped.
    pub(crate) fn nccl(&self) -> crate::record::WorkerNccl {
        crate::record::WorkerNccl {
            rank: self.rank,
            pid: self.pid,
            version: self.nccl_version.clone(),
            library: self.nccl_library.clone(),
        }
    }

    /// Who this rank was: its process, GPU and NCCL environment.
    pub(crate) fn worker(&self) -> crate::record::WorkerInfo {
        crate::record::WorkerInfo {
            rank: self.rank,
            pid: self.pid,
            device: self.device,
            nccl_env: self.nccl_env.clone(),
        }
    }
}

/// Where a rank stands.
#[derive(Debug, Clone)]
pub(crate) struct RankSetup {
    pub(crate) rank: usize,
    pub(crate) nranks: usize,
    pub(crate) device: usize,
    pub(crate) id: UniqueId,
    pub(crate) fault: Option<Fault>,
    /// How to swap P2P handles with the other ranks (used only by jobs with P2P cases).
    pub(crate) p2p: P2pExchange,
    /// `--cpu-affinity`: applied to the rank's thread before its GPU is opened.
    pub(crate) affinity: super::affinity::CpuAffinity,
    /// The run's stop flag and this rank's `--timeout` deadline, polled by every wait.
    pub(crate) watch: crate::comm::nccl::Watch,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{build, presets::preset, Phase, ScheduleOptions};

    #[test]
    fn p2p_jobs_size_their_workspace_and_old_jobs_still_parse() {
        let case = |count, imp| CollCase {
            op: CollectiveKind::AllReduce,
            dtype: DType::Bf16,
            count,
            imp,
        };
        let job = |cases| Job::Collective {
            cases,
            graphs: vec![true],
            iters: 1,
            warmup: 0,
            batch: 1,
        };
        // only the P2P cases size the workspace; none: no peer memory at all
        let j = job(vec![case(1 << 20, Impl::Nccl), case(21504, Impl::OneShot)]);
        assert_eq!(j.p2p_bytes(), 43008);
        assert_eq!(job(vec![case(1 << 20, Impl::Nccl)]).p2p_bytes(), 0);
        // a job written before --impl: every case is NCCL's, every run's too
        let old = r#"{"Collective":{"cases":[{"op":"all_reduce","dtype":"bf16","count":8}],"graphs":[false],"iters":1,"warmup":0,"batch":1}}"#;
        let Job::Collective { cases, .. } = serde_json::from_str::<Job>(old).unwrap() else {
            panic!("a collective job")
        };
        assert_eq!(cases[0].imp, Impl::Nccl);
        let s = build(
            &preset("kimi-k2.5").unwrap(),
            &ScheduleOptions {
                tp: 8,
                ..Default::default()
            },
            Phase::Verify,
        )
        .unwrap();
        let v = |run_impls| Job::Verify {
            schedule: s.clone(),
            runs: vec![(true, Mode::Comm)],
            iters: 1,
            warmup: 0,
            launches_per_layer: 0,
            run_impls,
            host_gaps: Default::default(),
            timing_pass: 0,
            pdl: false,
            cycle: None,
        };
        assert_eq!(v(vec![Impl::Nccl]).p2p_bytes(), 0);
        assert_eq!(
            v(vec![Impl::TwoShot]).p2p_bytes() as u64,
            crate::impls::largest_all_reduce(&s)
        );
        assert!(v(vec![Impl::TwoShot]).p2p_bytes() > 0);
    }

    #[test]
    fn the_p2p_fault_parses_and_travels_by_name() {
        let f: Fault = "p2p-silent:1".parse().unwrap();
        assert_eq!((f.kind, f.rank), (FaultKind::P2pSilent, 1));
        for k in [
            FaultKind::Exit,
            FaultKind::Hang,
            FaultKind::Abort,
            FaultKind::P2pSilent,
        ] {
            let back: Fault = format!("{}:0", k.name()).parse().unwrap();
            assert_eq!(back.kind, k);
        }
        assert!("p2p-loud".parse::<Fault>().is_err());
        let dir = std::path::Path::new("/tmp/verifybench-job-Ab3x");
        match P2pExchange::beside(&dir.join("job.json")) {
            P2pExchange::Files { dir: d, token } => {
                assert_eq!(d, dir);
                assert_eq!(token, "verifybench-job-Ab3x");
            }
            other => panic!("{other:?}"),
        }
    }
}
