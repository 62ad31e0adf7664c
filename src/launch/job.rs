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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::comm::kernels::{Kernels, Pool};
use crate::comm::p2p::{
    file_exchange, Impl, InProcessExchange, P2pAllReduce, P2pConfig, Workspace,
};
use crate::comm::{Buffer, Communicator, Event, Gpu, UniqueId};
use crate::measure::attribution::RankTiming;
use crate::measure::gaps::{busy_wait_us, schedule_launches, HostGaps};
use crate::measure::pattern;
use crate::model::{CollectiveKind, DType, Op, Schedule};
use crate::record::{GpuInfo, Mode};

/// A deliberate failure, for testing that failures end runs cleanly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FaultKind {
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

impl FaultKind {
    /// The name `--inject-fault` and the worker's `--fault` take.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Exit => "exit",
            FaultKind::Hang => "hang",
            FaultKind::Abort => "abort",
            FaultKind::P2pSilent => "p2p-silent",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    pub kind: FaultKind,
    pub rank: usize,
}

impl std::str::FromStr for Fault {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (k, r) = s.split_once(':').unwrap_or((s, "1"));
        let kind = match k {
            "exit" => FaultKind::Exit,
            "hang" => FaultKind::Hang,
            "abort" => FaultKind::Abort,
            "p2p-silent" => FaultKind::P2pSilent,
            _ => {
                return Err(format!(
                    "unknown fault '{k}' (exit, hang, abort, p2p-silent)"
                ))
            }
        };
        let rank = r.parse().map_err(|_| format!("bad fault rank '{r}'"))?;
        Ok(Fault { kind, rank })
    }
}

/// The work every rank does.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Job {
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
        host_gaps: HostGaps,
        /// Verifies of the per-collective timing pass after each run's headline timing (0:
        /// no pass).
        #[serde(default)]
        timing_pass: u64,
        /// Launch the streaming kernels with programmatic dependent launch (`--pdl`).
        #[serde(default)]
        pdl: bool,
    },
    /// Report the environment only (no NCCL).
    Env,
}

impl Job {
    /// Whether `nranks` ranks of this job need an NCCL communicator: not one rank replaying
    /// compute only (one GPU measuring one rank's share).
    pub fn needs_communicator(&self, nranks: usize) -> bool {
        match self {
            Job::Verify { runs, .. } => nranks > 1 || runs.iter().any(|(_, m)| *m != Mode::Compute),
            Job::Collective { .. } => true,
            Job::Env => false,
        }
    }

    /// Number of configurations (each gives one sample series).
    pub fn configs(&self) -> usize {
        match self {
            Job::Collective { cases, graphs, .. } => cases.len() * graphs.len(),
            Job::Verify { runs, .. } => runs.len(),
            Job::Env => 0,
        }
    }
}

/// One collective case: the operation, its element type and NCCL count (the all-reduce's
/// count, the all-gather's send count, the reduce-scatter's receive count).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollCase {
    pub op: CollectiveKind,
    pub dtype: DType,
    pub count: usize,
    /// NCCL's collective, or a custom P2P all-reduce.
    #[serde(default)]
    pub imp: Impl,
}

impl Job {
    /// The largest message (bytes) a custom P2P all-reduce of this job carries; 0 when the job
    /// runs none (then no rank sets up peer memory).
    pub fn p2p_bytes(&self) -> usize {
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
pub enum P2pExchange {
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
    pub fn beside(job_file: &Path) -> P2pExchange {
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
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RankResult {
    pub rank: usize,
    pub pid: u32,
    pub device: usize,
    pub gpu: Option<GpuInfo>,
    pub nccl_env: BTreeMap<String, String>,
    pub nccl_version: Option<String>,
    pub nccl_library: Option<String>,
    /// Per configuration, per timed sample: microseconds.
    pub samples: Vec<Vec<f64>>,
    /// Per configuration: wrong elements in the checked output.
    pub wrong: Vec<u64>,
    /// Seconds from start to communicator ready.
    pub init_s: f64,
    /// Read bandwidth of the streaming kernel on this rank (GB/s), when compute ran.
    #[serde(default)]
    pub stream_gbps: Option<f64>,
    /// The cost of one streaming launch beyond its bytes on this rank (us), from back-to-back
    /// launches of the schedule's mean size, when compute ran.
    #[serde(default)]
    pub stream_fixed_us: Option<f64>,
    /// Per configuration: the per-collective timing pass, one entry per verify (empty when
    /// the configuration had none).
    #[serde(default)]
    pub passes: Vec<Vec<super::timeline::PassIteration>>,
    /// What the rank's CPU affinity came to.
    #[serde(default)]
    pub affinity: Option<super::affinity::AffinityFacts>,
    /// Peak SM and memory clocks of the rank's GPU, kHz (driver attributes); `None` when the
    /// driver did not say.
    #[serde(default)]
    pub clocks_khz: Option<(i32, i32)>,
}

/// Where a rank stands.
#[derive(Debug, Clone)]
pub struct RankSetup {
    pub rank: usize,
    pub nranks: usize,
    pub device: usize,
    pub id: UniqueId,
    pub fault: Option<Fault>,
    /// How to swap P2P handles with the other ranks (used only by jobs with P2P cases).
    pub p2p: P2pExchange,
    /// `--cpu-affinity`: applied to the rank's thread before its GPU is opened.
    pub affinity: super::affinity::CpuAffinity,
}

/// One collective instance with its own buffers.
struct Coll {
    kind: CollectiveKind,
    dtype: DType,
    count: usize,
    salt: usize,
    send: Buffer,
    recv: Buffer,
}

impl Coll {
    fn new(
        gpu: &Gpu,
        kind: CollectiveKind,
        dtype: DType,
        count: usize,
        salt: usize,
        rank: usize,
        n: usize,
    ) -> anyhow::Result<Coll> {
        let data = pattern::send_bytes(kind, dtype, count, n, rank, salt);
        let send = gpu.alloc(data.len())?;
        gpu.upload(&send, &data)?;
        let recv = gpu.alloc(kind.ops().recv_elems(count, n) * dtype.size() as usize)?;
        Ok(Coll {
            kind,
            dtype,
            count,
            salt,
            send,
            recv,
        })
    }

    fn enqueue(&self, comm: &Communicator, gpu: &Gpu) -> anyhow::Result<()> {
        comm.collective(
            self.kind, &self.send, &self.recv, self.count, self.dtype, gpu,
        )
    }

    /// Enqueues the collective on `imp`: NCCL's, or (all-reduces only) the custom P2P kernel
    /// of `p2p`. A rank with the `p2p-silent` fault skips its P2P calls.
    fn enqueue_on(
        &self,
        comm: &Communicator,
        gpu: &Gpu,
        imp: Impl,
        p2p: &RankP2p,
    ) -> anyhow::Result<()> {
        if !imp.is_p2p() || self.kind != CollectiveKind::AllReduce {
            return self.enqueue(comm, gpu);
        }
        let Some(ar) = &p2p.ar else {
            anyhow::bail!("{imp}: this rank has no P2P connection");
        };
        if p2p.silent {
            return Ok(());
        }
        ar.enqueue(gpu, imp, &self.send, &self.recv, self.count, self.dtype)
    }

    fn wrong(&self, gpu: &Gpu, rank: usize, n: usize) -> anyhow::Result<u64> {
        let bytes = gpu.download(&self.recv, self.recv.len())?;
        Ok(pattern::count_wrong(
            self.kind, self.dtype, self.count, n, rank, self.salt, &bytes,
        ))
    }
}

/// A rank's custom P2P all-reduce, when its job runs one.
#[derive(Default)]
struct RankP2p {
    ar: Option<P2pAllReduce>,
    /// The `p2p-silent` fault: this rank never makes its P2P calls.
    silent: bool,
}

impl RankP2p {
    /// Fails with the wait that timed out (which rank never signalled), if one did. Only
    /// after a synchronisation: the error words are read from the device.
    fn check(&self, gpu: &Gpu) -> anyhow::Result<()> {
        match &self.ar {
            Some(ar) => ar.check(gpu),
            None => Ok(()),
        }
    }
}

/// Per the P2P recipe: a workspace for messages up to `bytes`, its handle swapped with every
/// other rank's through `setup.p2p`, then the connection (peer access between threads, CUDA IPC
/// between processes). Every rank calls this at the same point of the job.
fn connect_p2p(gpu: &Gpu, setup: &RankSetup, bytes: usize) -> anyhow::Result<P2pAllReduce> {
    let cfg = P2pConfig {
        capacity: bytes.max(1),
        ..Default::default()
    };
    let ws = Workspace::new(gpu, setup.rank, setup.nranks, cfg)?;
    let mine = ws.export();
    let timeout = Duration::from_secs(60);
    let all = match &setup.p2p {
        P2pExchange::Threads(x) => x.exchange(setup.rank, mine, timeout)?,
        P2pExchange::Files { dir, token } => {
            file_exchange(dir, token, setup.rank, setup.nranks, &mine, timeout)?
        }
        P2pExchange::None => anyhow::bail!(
            "the P2P all-reduces need every rank on this host (--launcher threads or processes)"
        ),
    };
    ws.connect(gpu, &all)
}

/// Everything a rank holds while running. A job of one rank without collectives (one GPU,
/// compute only) has no communicator: its barrier is a stream synchronisation.
struct Rank {
    setup: RankSetup,
    gpu: Gpu,
    comm: Option<Communicator>,
    barrier: Option<Coll>,
    p2p: RankP2p,
}

impl Rank {
    fn comm(&self) -> &Communicator {
        self.comm
            .as_ref()
            .expect("a job with collectives has a communicator")
    }

    /// Every rank's barrier all-reduce enqueued (none without a communicator); `then` is
    /// recorded right after it, before the host waits for the stream.
    fn barrier_then(&self, then: Option<&Event>) -> anyhow::Result<()> {
        if let (Some(b), Some(c)) = (&self.barrier, &self.comm) {
            b.enqueue(c, &self.gpu)?;
        }
        if let Some(e) = then {
            self.gpu.record(e)?;
        }
        self.wait()
    }

    /// Waits for the rank's stream as nccl-tests' `testStreamSynchronize` does: polls the
    /// stream and, between polls, NCCL's asynchronous error, so that a dead peer or a broken
    /// communicator ends the wait with NCCL's own error instead of a hang.
    fn wait(&self) -> anyhow::Result<()> {
        let Some(c) = &self.comm else {
            self.gpu.sync()?;
            return Ok(());
        };
        let mut polls = 0u64;
        loop {
            if self.gpu.done()? {
                return Ok(());
            }
            polls += 1;
            // NCCL's error state costs a call; the stream query alone is cheap
            if polls % 64 == 0 {
                c.async_error()?;
            }
            if polls > 4096 {
                std::thread::sleep(Duration::from_micros(50));
            } else {
                std::thread::yield_now();
            }
        }
    }

    fn barrier(&self) -> anyhow::Result<()> {
        self.barrier_then(None)
    }

    fn async_error(&self) -> anyhow::Result<()> {
        if let Some(c) = &self.comm {
            c.async_error()?;
        }
        Ok(())
    }

    /// Times `iters` samples of `body` after `warmup` untimed ones; `body` gets the iteration's
    /// index (warm-up iterations first).
    fn time<F>(&self, iters: u64, warmup: u64, mut body: F) -> anyhow::Result<Vec<f64>>
    where
        F: FnMut(u64) -> anyhow::Result<()>,
    {
        for it in 0..warmup {
            body(it)?;
        }
        self.gpu.sync()?;
        self.p2p.check(&self.gpu)?;
        let (start, end) = (self.gpu.event()?, self.gpu.event()?);
        let mut out = Vec::with_capacity(iters as usize);
        for it in 0..iters {
            self.barrier()?;
            self.gpu.record(&start)?;
            body(warmup + it)?;
            self.gpu.record(&end)?;
            self.wait()?;
            // a peer that never signalled ends the run here, naming it, not after every sample
            self.p2p.check(&self.gpu)?;
            out.push(start.elapsed_us(&end)?);
        }
        self.async_error()?;
        Ok(out)
    }
}

/// The events and host times of one verify of the per-collective timing pass.
struct Probe {
    /// Start and end event of each step that launches something in this mode.
    events: Vec<Option<(Event, Event)>>,
    /// Recorded right after the barrier all-reduce: the rank's time origin.
    reference: Event,
    /// When the host saw the barrier end (the origin of host times).
    host_ref: std::time::Instant,
    host_gaps: Vec<RankTiming>,
    launches: Vec<RankTiming>,
}

impl Probe {
    fn host_us(&self, t: std::time::Instant) -> f64 {
        t.saturating_duration_since(self.host_ref).as_secs_f64() * 1e6
    }

    /// The pass iteration from the completed events; `steps` say which were collectives.
    fn read(&mut self, steps: &[Step]) -> anyhow::Result<super::timeline::PassIteration> {
        let mut it = super::timeline::PassIteration {
            host_gaps: std::mem::take(&mut self.host_gaps),
            launches: std::mem::take(&mut self.launches),
            ..Default::default()
        };
        for (st, ev) in steps.iter().zip(&self.events) {
            if let Some((a, b)) = ev {
                let t = RankTiming {
                    start_us: self.reference.elapsed_us(a)?,
                    dur_us: a.elapsed_us(b)?,
                };
                match st {
                    Step::Coll => it.collectives.push(t),
                    _ => it.compute.push(t),
                }
            }
        }
        Ok(it)
    }
}

fn check_wrong(colls: &[Coll], gpu: &Gpu, rank: usize, n: usize) -> anyhow::Result<u64> {
    let mut w = 0;
    for c in colls {
        w += c.wrong(gpu, rank, n)?;
    }
    Ok(w)
}

fn poison(colls: &[Coll], gpu: &Gpu) -> anyhow::Result<()> {
    for c in colls {
        gpu.fill(&c.recv, 0xFF)?;
    }
    Ok(())
}

/// Resolves and applies the rank's `--cpu-affinity` on the calling thread (the rank's thread
/// of the threads launcher, the main thread of a worker process). Pinning that fails is
/// reported in the facts, never fatal: it is an improvement of the timing, not a condition.
fn pin(setup: &RankSetup) -> super::affinity::AffinityFacts {
    use super::affinity::{apply, parse_cpulist, resolve};
    let bus = crate::comm::device::info(setup.device)
        .ok()
        .map(|g| g.pci_bus_id)
        .filter(|b| !b.is_empty());
    let mut f = resolve(&setup.affinity, std::path::Path::new("/"), bus.as_deref());
    if let Some(cpus) = f.cpus.as_deref().and_then(|c| parse_cpulist(c).ok()) {
        if let Err(e) = apply(&cpus) {
            f.note = format!("{}; pinning failed ({e}), left as inherited", f.note);
            f.cpus = None;
        }
    }
    f
}

/// Runs `job` as rank `setup.rank`. `progress` is called after each configuration.
pub fn run_rank(
    setup: RankSetup,
    job: &Job,
    mut progress: impl FnMut(usize),
) -> anyhow::Result<RankResult> {
    let t0 = std::time::Instant::now();
    let nccl_env = crate::util::nccl_env();
    let mut result = RankResult {
        rank: setup.rank,
        pid: std::process::id(),
        device: setup.device,
        gpu: None,
        nccl_env,
        nccl_version: None,
        nccl_library: None,
        samples: vec![],
        wrong: vec![],
        init_s: 0.0,
        stream_gbps: None,
        stream_fixed_us: None,
        passes: vec![],
        affinity: None,
        clocks_khz: None,
    };
    if let Job::Env = job {
        result.gpu = crate::comm::device::info(setup.device).ok();
        return Ok(result);
    }
    // Pin first: the threads CUDA and NCCL start from here on inherit the mask.
    result.affinity = Some(pin(&setup));
    result.clocks_khz = crate::comm::device::clocks_khz(setup.device).ok();
    let gpu = Gpu::open(setup.device)?;
    result.gpu = Some(gpu.info());
    let n = setup.nranks;
    let (comm, barrier) = if job.needs_communicator(n) {
        let comm = Communicator::init(&gpu, &setup.id, setup.rank, setup.nranks)?;
        result.nccl_version = crate::comm::nccl::version();
        result.nccl_library = crate::comm::libs::loaded_path("libnccl");
        let barrier = Coll::new(
            &gpu,
            CollectiveKind::AllReduce,
            DType::F32,
            1,
            0,
            setup.rank,
            n,
        )?;
        (Some(comm), Some(barrier))
    } else {
        (None, None)
    };
    // Any error (or panic) from here on leaves through this guard, which marks the
    // communicator failed: its drop then aborts it (ncclCommAbort) instead of destroying it.
    let abort_guard = comm.as_ref().map(|c| c.abort_guard());
    let mut rank = Rank {
        setup,
        gpu,
        comm,
        barrier,
        p2p: RankP2p::default(),
    };
    rank.barrier()?;
    result.init_s = t0.elapsed().as_secs_f64();
    if let Some(f) = rank.setup.fault.filter(|f| f.rank == rank.setup.rank) {
        eprintln!("rank {}: injecting fault {:?}", f.rank, f.kind);
        match f.kind {
            FaultKind::Exit => std::process::exit(3),
            FaultKind::Abort => std::process::abort(),
            FaultKind::Hang => loop {
                std::thread::sleep(Duration::from_secs(3600));
            },
            FaultKind::P2pSilent => rank.p2p.silent = true,
        }
    }
    let p2p_bytes = job.p2p_bytes();
    if p2p_bytes > 0 {
        rank.p2p.ar = Some(connect_p2p(&rank.gpu, &rank.setup, p2p_bytes)?);
        // every rank connected before any rank's first P2P call
        rank.barrier()?;
    }
    let me = rank.setup.rank;
    match job {
        Job::Collective {
            cases,
            graphs,
            iters,
            warmup,
            batch,
        } => {
            for (ci, case) in cases.iter().enumerate() {
                let colls = vec![Coll::new(
                    &rank.gpu, case.op, case.dtype, case.count, ci, me, n,
                )?];
                for &graph in graphs {
                    let b = (*batch).max(1);
                    let (samples, wrong) = if graph {
                        let g = rank.gpu.capture(|| {
                            for _ in 0..b {
                                colls[0].enqueue_on(rank.comm(), &rank.gpu, case.imp, &rank.p2p)?;
                            }
                            Ok(())
                        });
                        let g = g?;
                        let s = rank.time(*iters, *warmup, |_| Ok(g.launch()?))?;
                        poison(&colls, &rank.gpu)?;
                        g.launch()?;
                        rank.gpu.sync()?;
                        rank.p2p.check(&rank.gpu)?;
                        (s, check_wrong(&colls, &rank.gpu, me, n)?)
                    } else {
                        let (c, p2p) = (&colls, &rank.p2p);
                        let s = rank.time(*iters, *warmup, |_| {
                            for _ in 0..b {
                                c[0].enqueue_on(rank.comm(), &rank.gpu, case.imp, p2p)?;
                            }
                            Ok(())
                        })?;
                        poison(&colls, &rank.gpu)?;
                        colls[0].enqueue_on(rank.comm(), &rank.gpu, case.imp, &rank.p2p)?;
                        rank.gpu.sync()?;
                        rank.p2p.check(&rank.gpu)?;
                        (s, check_wrong(&colls, &rank.gpu, me, n)?)
                    };
                    result
                        .samples
                        .push(samples.into_iter().map(|s| s / b as f64).collect());
                    result.wrong.push(wrong);
                    result.passes.push(vec![]);
                    progress(result.samples.len());
                }
            }
        }
        Job::Verify {
            schedule,
            runs,
            iters,
            warmup,
            launches_per_layer,
            run_impls,
            host_gaps,
            timing_pass,
            pdl,
        } => {
            let with_colls = rank.comm.is_some();
            check_memory(&rank.gpu, schedule, n, with_colls)?;
            let mut colls = vec![];
            for (i, op) in schedule.ops.iter().enumerate() {
                if let (
                    Op::Collective {
                        kind, dtype, count, ..
                    },
                    true,
                ) = (op, with_colls)
                {
                    colls.push(Coll::new(
                        &rank.gpu,
                        *kind,
                        *dtype,
                        *count as usize,
                        i,
                        me,
                        n,
                    )?);
                }
            }
            let needs_compute =
                runs.iter().any(|(_, m)| *m != Mode::Comm) || *launches_per_layer > 0;
            let (steps, step_of_op) = plan_steps_of_ops(schedule, *launches_per_layer);
            let compute = if needs_compute {
                let c = Compute::new(&rank.gpu, schedule.tokens as usize, *pdl)?;
                result.stream_gbps = Some(c.measure_gbps(&rank.gpu)?);
                let (n, sum) = stream_launches(&steps);
                if let Some(mean) = sum.checked_div(n) {
                    result.stream_fixed_us = Some(c.measure_fixed_us(&rank.gpu, mean)?);
                }
                Some(c)
            } else {
                None
            };
            let zeros = vec![0.0; steps.len()];
            for (ri, &(graph, mode)) in runs.iter().enumerate() {
                let imp = run_impls.get(ri).copied().unwrap_or_default();
                let p2p = &rank.p2p;
                // Host gaps per step, drawn before the timed loop (the generator stays out of it).
                let launches = schedule_launches(schedule, mode != Mode::Comm);
                let gaps_of = |it: u64| -> Vec<f64> {
                    let mut g = vec![0.0; steps.len()];
                    if !graph && !host_gaps.is_none() {
                        let drawn = host_gaps.iteration_gaps(false, me, it, &launches);
                        for (l, us) in launches.iter().zip(drawn) {
                            g[step_of_op[l.op]] += us;
                        }
                    }
                    g
                };
                let launched = |st: &Step| match st {
                    Step::Coll => mode != Mode::Compute,
                    Step::Stream { .. } | Step::Tiny => mode != Mode::Comm,
                };
                // One verify: per step, the host gap (busy-waited), then the launch; with a
                // probe, timestamps around each launch and the host times.
                let replay = |gaps: &[f64], mut probe: Option<&mut Probe>| -> anyhow::Result<()> {
                    let gpu = &rank.gpu;
                    let mut ci = 0;
                    for (i, st) in steps.iter().enumerate() {
                        if gaps[i] > 0.0 {
                            let t0 = std::time::Instant::now();
                            busy_wait_us(gaps[i]);
                            if let Some(p) = probe.as_deref_mut() {
                                let s = p.host_us(t0);
                                p.host_gaps.push(RankTiming {
                                    start_us: s,
                                    dur_us: t0.elapsed().as_secs_f64() * 1e6,
                                });
                            }
                        }
                        let ev = probe
                            .as_deref()
                            .and_then(|p| p.events[i].as_ref())
                            .filter(|_| launched(st));
                        if let Some((a, _)) = ev {
                            gpu.record_timestamp(a)?;
                        }
                        let t0 = std::time::Instant::now();
                        match *st {
                            Step::Coll => {
                                if mode != Mode::Compute {
                                    colls[ci].enqueue_on(rank.comm(), gpu, imp, p2p)?;
                                }
                                ci += 1;
                            }
                            Step::Stream { start, nvec } => {
                                if mode != Mode::Comm {
                                    let c = compute.as_ref().expect("compute loaded");
                                    c.kernels.stream(
                                        gpu, &c.pool, start, nvec, &c.act, c.tokens, &c.partial,
                                    )?;
                                }
                            }
                            Step::Tiny => {
                                if mode != Mode::Comm {
                                    let c = compute.as_ref().expect("compute loaded");
                                    c.kernels.tiny(gpu, &c.partial)?;
                                }
                            }
                        }
                        if let Some((_, b)) = ev {
                            gpu.record_timestamp(b)?;
                        }
                        if let (Some(p), Step::Coll, true) =
                            (probe.as_deref_mut(), st, mode != Mode::Compute)
                        {
                            let s = p.host_us(t0);
                            p.launches.push(RankTiming {
                                start_us: s,
                                dur_us: t0.elapsed().as_secs_f64() * 1e6,
                            });
                        }
                    }
                    Ok(())
                };
                let check = |rank: &Rank| -> anyhow::Result<u64> {
                    if mode == Mode::Compute {
                        Ok(0)
                    } else {
                        check_wrong(&colls, &rank.gpu, me, n)
                    }
                };
                // The pass's events: every step that launches something in this mode, but
                // the tiny launch-load kernels.
                let pass_iters = if mode == Mode::Compute {
                    0
                } else {
                    *timing_pass
                };
                let mut probe = if pass_iters > 0 {
                    let mut events = vec![];
                    for st in &steps {
                        events.push(if launched(st) && *st != Step::Tiny {
                            Some((rank.gpu.event()?, rank.gpu.event()?))
                        } else {
                            None
                        });
                    }
                    Some(Probe {
                        events,
                        reference: rank.gpu.event()?,
                        host_ref: std::time::Instant::now(),
                        host_gaps: vec![],
                        launches: vec![],
                    })
                } else {
                    None
                };
                let first_pass_it = *warmup + *iters;
                let mut pass = vec![];
                let (samples, wrong) = if graph {
                    // The headline graph has no event nodes; the pass captures its own.
                    let g = rank.gpu.capture(|| replay(&zeros, None))?;
                    let s = rank.time(*iters, *warmup, |_| Ok(g.launch()?))?;
                    poison(&colls, &rank.gpu)?;
                    g.launch()?;
                    rank.gpu.sync()?;
                    rank.p2p.check(&rank.gpu)?;
                    let wrong = check(&rank)?;
                    if let Some(p) = probe.as_mut() {
                        let gp = rank.gpu.capture(|| replay(&zeros, Some(&mut *p)))?;
                        p.host_gaps.clear();
                        p.launches.clear();
                        gp.launch()?;
                        rank.gpu.sync()?;
                        rank.p2p.check(&rank.gpu)?;
                        for _ in 0..pass_iters {
                            rank.barrier_then(Some(&p.reference))?;
                            p.host_ref = std::time::Instant::now();
                            let t0 = std::time::Instant::now();
                            gp.launch()?;
                            let l = RankTiming {
                                start_us: p.host_us(t0),
                                dur_us: t0.elapsed().as_secs_f64() * 1e6,
                            };
                            rank.gpu.sync()?;
                            let mut it = p.read(&steps)?;
                            it.launches = vec![l; it.collectives.len()];
                            pass.push(it);
                        }
                        drop(gp);
                    }
                    (s, wrong)
                } else {
                    let all: Vec<Vec<f64>> = (0..*warmup + *iters).map(gaps_of).collect();
                    let s = rank.time(*iters, *warmup, |it| replay(&all[it as usize], None))?;
                    poison(&colls, &rank.gpu)?;
                    replay(&zeros, None)?;
                    rank.gpu.sync()?;
                    rank.p2p.check(&rank.gpu)?;
                    let wrong = check(&rank)?;
                    if let Some(p) = probe.as_mut() {
                        for k in 0..pass_iters {
                            let g = gaps_of(first_pass_it + k);
                            rank.barrier_then(Some(&p.reference))?;
                            p.host_ref = std::time::Instant::now();
                            replay(&g, Some(&mut *p))?;
                            rank.gpu.sync()?;
                            pass.push(p.read(&steps)?);
                        }
                    }
                    (s, wrong)
                };
                rank.async_error()?;
                result.samples.push(samples);
                result.wrong.push(wrong);
                result.passes.push(pass);
                progress(result.samples.len());
            }
        }
        Job::Env => unreachable!("handled above"),
    }
    rank.async_error()?;
    if rank.p2p.ar.is_some() {
        // peers read this rank's workspace until their last call: drop it only after all are done
        rank.gpu.sync()?;
        rank.p2p.check(&rank.gpu)?;
        rank.barrier()?;
        rank.p2p.ar = None;
    }
    if let Some(g) = abort_guard {
        g.disarm();
    }
    Ok(result)
}

/// One step of a replay, in schedule order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The next collective of the schedule.
    Coll,
    /// Stream `nvec` 16-byte vectors of the pool from vector `start`.
    Stream { start: u64, nvec: u64 },
    /// One tiny kernel (launch-overhead emulation).
    Tiny,
}

/// The replay steps of a schedule: collectives and compute in order, `launches_per_layer`
/// tiny kernels at the start of every layer, and consecutive streaming ranges so that one
/// operation starts where the previous ended (offsets wrap inside the pool). Compute operations
/// with nothing between them (router, routed and shared experts of one layer) are streamed by
/// one launch: the weights a rank reads between two collectives are what the replay models; the
/// launch load of a real layer's many kernels is `launches_per_layer`.
pub fn plan_steps(s: &Schedule, launches_per_layer: u32) -> Vec<Step> {
    plan_steps_of_ops(s, launches_per_layer).0
}

/// The streaming launches among `steps`: how many, and their vectors in all.
pub fn stream_launches(steps: &[Step]) -> (u64, u64) {
    steps.iter().fold((0, 0), |(n, sum), st| match st {
        Step::Stream { nvec, .. } => (n + 1, sum + nvec),
        _ => (n, sum),
    })
}

/// Back-to-back launches the per-launch cost is measured from ([`Compute::measure_fixed_us`]).
pub const FIXED_COST_LAUNCHES: u64 = 32;

/// [`plan_steps`] and, for each op of the schedule, the index of the step that launches it
/// (adjacent compute ops share one streaming step).
pub fn plan_steps_of_ops(s: &Schedule, launches_per_layer: u32) -> (Vec<Step>, Vec<usize>) {
    let mut steps = vec![];
    let mut step_of_op = Vec::with_capacity(s.ops.len());
    let mut cursor = 0u64;
    let mut last_layer = None;
    for op in &s.ops {
        let layer = match op {
            Op::Collective { layer, .. } | Op::Compute { layer, .. } => *layer,
        };
        if layer.is_some() && layer != last_layer {
            steps.extend(std::iter::repeat_n(Step::Tiny, launches_per_layer as usize));
            last_layer = layer;
        }
        match op {
            Op::Collective { .. } => steps.push(Step::Coll),
            Op::Compute { weight_bytes, .. } => {
                let nvec = weight_bytes / 16;
                match steps.last_mut() {
                    Some(Step::Stream { nvec: n, .. }) => *n += nvec,
                    _ => steps.push(Step::Stream {
                        start: cursor,
                        nvec,
                    }),
                }
                cursor = cursor.wrapping_add(nvec);
            }
        }
        step_of_op.push(steps.len() - 1);
    }
    (steps, step_of_op)
}

/// Refuses a schedule whose collective buffers (`with_colls`) plus the compute pool do not fit.
fn check_memory(gpu: &Gpu, s: &Schedule, n: usize, with_colls: bool) -> anyhow::Result<()> {
    let mut need: u64 = 0;
    for op in s.ops.iter().filter(|_| with_colls) {
        if let Op::Collective {
            kind, dtype, count, ..
        } = op
        {
            let c = *count as usize;
            need += ((kind.ops().send_elems(c, n) + kind.ops().recv_elems(c, n))
                * dtype.size() as usize) as u64;
        }
    }
    need += POOL_BYTES;
    let (free, total) = gpu.mem_info()?;
    if need > free as u64 {
        return Err(crate::error::usage(format!(
            "the replay needs {} of GPU memory on GPU {} (collective buffers + {} weight pool), but only {} of {} is free",
            crate::units::human_bytes(need),
            gpu.ordinal(),
            crate::units::human_bytes(POOL_BYTES),
            crate::units::human_bytes(free as u64),
            crate::units::human_bytes(total as u64)
        )));
    }
    Ok(())
}

/// Size of the weight pool the streaming kernel reads (many times any GPU's L2).
pub const POOL_BYTES: u64 = 1 << 31;

/// What compute needs on a rank.
struct Compute {
    kernels: Kernels,
    pool: Pool,
    act: Buffer,
    partial: Buffer,
    tokens: usize,
}

impl Compute {
    fn new(gpu: &Gpu, tokens: usize, pdl: bool) -> anyhow::Result<Compute> {
        if tokens > crate::comm::kernels::MAXT {
            crate::usage_bail!(
                "--tokens {tokens}: the streaming kernel handles at most {} tokens",
                crate::comm::kernels::MAXT
            );
        }
        let kernels = Kernels::load_with(gpu, pdl)?;
        let pool = Pool::new(gpu, POOL_BYTES)?;
        let actv: Vec<u8> = (0..tokens * 8)
            .flat_map(|i| (0.25f32 * ((i % 5) as f32 + 1.0)).to_le_bytes())
            .collect();
        let act = gpu.alloc(actv.len())?;
        gpu.upload(&act, &actv)?;
        let partial = gpu.alloc(kernels.partial_bytes())?;
        Ok(Compute {
            kernels,
            pool,
            act,
            partial,
            tokens,
        })
    }

    /// The cost of one streaming launch beyond its bytes, us: `K` back-to-back launches of
    /// `nvec` vectors each (the schedule's mean launch) against one launch of `K x nvec`, each
    /// timed with events around the whole train, best of five:
    /// `(t_train - t_one) / (K - 1)`, at least 0. It holds the start-up, the drain and the gap
    /// between two launches that follow each other on the stream, as the replay's do (with
    /// `--pdl`, the PDL launches).
    fn measure_fixed_us(&self, gpu: &Gpu, nvec: u64) -> anyhow::Result<f64> {
        const K: u64 = FIXED_COST_LAUNCHES;
        let nvec = nvec.clamp(1, self.pool.vecs() / K);
        let (a, b) = (gpu.event()?, gpu.event()?);
        let time = |launches: u64, each: u64| -> anyhow::Result<f64> {
            let mut best = f64::MAX;
            for _ in 0..5 {
                gpu.record(&a)?;
                for i in 0..launches {
                    self.kernels.stream(
                        gpu,
                        &self.pool,
                        i * each,
                        each,
                        &self.act,
                        self.tokens,
                        &self.partial,
                    )?;
                }
                gpu.record(&b)?;
                gpu.sync()?;
                best = best.min(a.elapsed_us(&b)?);
            }
            Ok(best)
        };
        let train = time(K, nvec)?;
        let one = time(1, K * nvec)?;
        Ok(((train - one) / (K - 1) as f64).max(0.0))
    }

    /// Read bandwidth of one pass over the whole pool (best of three), GB/s.
    fn measure_gbps(&self, gpu: &Gpu) -> anyhow::Result<f64> {
        let (a, b) = (gpu.event()?, gpu.event()?);
        let mut best = f64::MAX;
        for _ in 0..4 {
            gpu.record(&a)?;
            self.kernels.stream(
                gpu,
                &self.pool,
                0,
                self.pool.vecs(),
                &self.act,
                self.tokens,
                &self.partial,
            )?;
            gpu.record(&b)?;
            gpu.sync()?;
            best = best.min(a.elapsed_us(&b)?);
        }
        Ok((self.pool.vecs() * 16) as f64 / (best * 1e3))
    }
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

    #[test]
    fn steps_keep_schedule_order_and_merge_adjacent_compute() {
        let s = build(
            &preset("kimi-k2.5").unwrap(),
            &ScheduleOptions {
                tp: 8,
                ..Default::default()
            },
            Phase::Verify,
        )
        .unwrap();
        let steps = plan_steps(&s, 2);
        let colls = steps.iter().filter(|x| **x == Step::Coll).count() as u64;
        assert_eq!(colls, s.n_collectives());
        // every byte of every compute op is streamed once
        let streamed: u64 = steps
            .iter()
            .map(|x| match x {
                Step::Stream { nvec, .. } => nvec * 16,
                _ => 0,
            })
            .sum();
        let want: u64 = s
            .ops
            .iter()
            .map(|o| match o {
                Op::Compute { weight_bytes, .. } => weight_bytes / 16 * 16,
                _ => 0,
            })
            .sum();
        assert_eq!(streamed, want);
        // one streaming launch between two collectives (attention; MLP or MoE), plus LM head
        let launches = steps
            .iter()
            .filter(|x| matches!(x, Step::Stream { .. }))
            .count();
        assert_eq!(launches, 2 * 61 + 1);
        // two tiny kernels per layer, placed before the layer's first step
        assert_eq!(steps.iter().filter(|x| **x == Step::Tiny).count(), 2 * 61);
        assert_eq!(&steps[..4], &[Step::Coll, Step::Tiny, Step::Tiny, steps[3]]);
        // consecutive ranges: each launch starts where the last ended
        let mut cursor = 0;
        for x in &steps {
            if let Step::Stream { start, nvec } = x {
                assert_eq!(*start, cursor);
                cursor += nvec;
            }
        }
    }
}
