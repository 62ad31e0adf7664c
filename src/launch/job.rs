//! What one rank does: open its GPU, join the communicator, run the job, report.
//!
//! Timing: before every timed iteration the rank synchronises its stream and passes a barrier
//! (a one-element all-reduce), so all ranks start together; events on the stream bracket the
//! iteration (including the host's enqueue time, which is what eager mode pays). The parent
//! takes, per iteration, the slowest rank's time.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::comm::{Buffer, Communicator, Gpu, UniqueId};
use crate::measure::pattern;
use crate::model::{CollectiveKind, DType, Op, Schedule};
use crate::report::record::{GpuInfo, Mode};

/// A deliberate failure, for testing that failures end runs cleanly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FaultKind {
    /// The rank's process exits with status 3 after joining the communicator.
    Exit,
    /// The rank sleeps forever after joining (exercises the timeout).
    Hang,
    /// The rank's process aborts (SIGABRT).
    Abort,
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
            _ => return Err(format!("unknown fault '{k}' (exit, hang, abort)")),
        };
        let rank = r.parse().map_err(|_| format!("bad fault rank '{r}'"))?;
        Ok(Fault { kind, rank })
    }
}

/// The work every rank does.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Job {
    /// One collective at several sizes (`counts` are NCCL counts), eager and/or graph.
    Collective {
        op: CollectiveKind,
        dtype: DType,
        counts: Vec<usize>,
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
    },
    /// Report the environment only (no NCCL).
    Env,
}

impl Job {
    /// Number of configurations (each gives one sample series).
    pub fn configs(&self) -> usize {
        match self {
            Job::Collective { counts, graphs, .. } => counts.len() * graphs.len(),
            Job::Verify { runs, .. } => runs.len(),
            Job::Env => 0,
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
}

/// Where a rank stands.
#[derive(Debug, Clone)]
pub struct RankSetup {
    pub rank: usize,
    pub nranks: usize,
    pub device: usize,
    pub id: UniqueId,
    pub fault: Option<Fault>,
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
        let mut send = gpu.alloc(data.len())?;
        gpu.upload(&mut send, &data)?;
        let recv = gpu.alloc(pattern::recv_elems(kind, count, n) * dtype.size() as usize)?;
        Ok(Coll {
            kind,
            dtype,
            count,
            salt,
            send,
            recv,
        })
    }

    fn enqueue(&self, comm: &mut Communicator, gpu: &Gpu) -> anyhow::Result<()> {
        // SAFETY: send and recv were sized by pattern::{send,recv}_elems for this kind, count and
        // rank count; both live as long as self, which outlives every use of the stream here
        // (runs synchronise before buffers drop).
        unsafe {
            comm.enqueue(
                self.kind,
                self.dtype,
                self.send.ptr(),
                self.recv.ptr(),
                self.count,
                gpu.cu_stream(),
            )?
        };
        Ok(())
    }

    fn wrong(&self, gpu: &Gpu, rank: usize, n: usize) -> anyhow::Result<u64> {
        let bytes = gpu.download(&self.recv, self.recv.len())?;
        Ok(pattern::count_wrong(
            self.kind, self.dtype, self.count, n, rank, self.salt, &bytes,
        ))
    }
}

/// Everything a rank holds while running.
struct Rank {
    setup: RankSetup,
    gpu: Gpu,
    comm: Communicator,
    barrier: Coll,
}

impl Rank {
    fn barrier(&mut self) -> anyhow::Result<()> {
        self.barrier.enqueue(&mut self.comm, &self.gpu)?;
        self.gpu.sync()?;
        Ok(())
    }

    /// Times `iters` samples of `body` after `warmup` untimed ones.
    fn time<F>(&mut self, iters: u64, warmup: u64, mut body: F) -> anyhow::Result<Vec<f64>>
    where
        F: FnMut(&mut Communicator, &Gpu) -> anyhow::Result<()>,
    {
        for _ in 0..warmup {
            body(&mut self.comm, &self.gpu)?;
        }
        self.gpu.sync()?;
        let mut out = Vec::with_capacity(iters as usize);
        for _ in 0..iters {
            self.barrier()?;
            let start = self.gpu.record()?;
            body(&mut self.comm, &self.gpu)?;
            let end = self.gpu.record()?;
            self.gpu.sync()?;
            out.push(start.elapsed_us(&end)?);
        }
        self.comm.async_error()?;
        Ok(out)
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

/// Runs `job` as rank `setup.rank`. `progress` is called after each configuration.
pub fn run_rank(
    setup: RankSetup,
    job: &Job,
    mut progress: impl FnMut(usize),
) -> anyhow::Result<RankResult> {
    let t0 = std::time::Instant::now();
    let nccl_env: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("NCCL_"))
        .collect();
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
    };
    if let Job::Env = job {
        result.gpu = crate::comm::device::info(setup.device).ok();
        return Ok(result);
    }
    let gpu = Gpu::open(setup.device)?;
    result.gpu = Some(gpu.info());
    let comm = Communicator::init(&setup.id, setup.rank, setup.nranks)?;
    result.nccl_version = crate::comm::nccl::version();
    result.nccl_library = crate::comm::libs::loaded_path("libnccl");
    let n = setup.nranks;
    let barrier = Coll::new(
        &gpu,
        CollectiveKind::AllReduce,
        DType::F32,
        1,
        0,
        setup.rank,
        n,
    )?;
    let mut rank = Rank {
        setup,
        gpu,
        comm,
        barrier,
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
        }
    }
    let me = rank.setup.rank;
    match job {
        Job::Collective {
            op,
            dtype,
            counts,
            graphs,
            iters,
            warmup,
            batch,
        } => {
            for (ci, &count) in counts.iter().enumerate() {
                let colls = vec![Coll::new(&rank.gpu, *op, *dtype, count, ci, me, n)?];
                for &graph in graphs {
                    let b = (*batch).max(1);
                    let (samples, wrong) = if graph {
                        let g = rank.gpu.capture(|| {
                            for _ in 0..b {
                                colls[0].enqueue(&mut rank.comm, &rank.gpu)?;
                            }
                            Ok(())
                        });
                        let g = g?;
                        let s = rank.time(*iters, *warmup, |_, _| Ok(g.launch()?))?;
                        poison(&colls, &rank.gpu)?;
                        g.launch()?;
                        rank.gpu.sync()?;
                        (s, check_wrong(&colls, &rank.gpu, me, n)?)
                    } else {
                        let c = &colls;
                        let s = rank.time(*iters, *warmup, |comm, gpu| {
                            for _ in 0..b {
                                c[0].enqueue(comm, gpu)?;
                            }
                            Ok(())
                        })?;
                        poison(&colls, &rank.gpu)?;
                        colls[0].enqueue(&mut rank.comm, &rank.gpu)?;
                        rank.gpu.sync()?;
                        (s, check_wrong(&colls, &rank.gpu, me, n)?)
                    };
                    result
                        .samples
                        .push(samples.into_iter().map(|s| s / b as f64).collect());
                    result.wrong.push(wrong);
                    progress(result.samples.len());
                }
            }
        }
        Job::Verify {
            schedule,
            runs,
            iters,
            warmup,
            launches_per_layer: _,
        } => {
            let mut colls = vec![];
            for (i, op) in schedule.ops.iter().enumerate() {
                if let Op::Collective {
                    kind, dtype, count, ..
                } = op
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
            for &(graph, mode) in runs {
                if mode != Mode::Comm {
                    anyhow::bail!(
                        "--mode {} needs the compute kernels, which this build does not have yet; use --mode comm",
                        mode.name()
                    );
                }
                let (samples, wrong) = if graph {
                    let g = rank.gpu.capture(|| {
                        for c in &colls {
                            c.enqueue(&mut rank.comm, &rank.gpu)?;
                        }
                        Ok(())
                    })?;
                    let s = rank.time(*iters, *warmup, |_, _| Ok(g.launch()?))?;
                    poison(&colls, &rank.gpu)?;
                    g.launch()?;
                    rank.gpu.sync()?;
                    (s, check_wrong(&colls, &rank.gpu, me, n)?)
                } else {
                    let c = &colls;
                    let s = rank.time(*iters, *warmup, |comm, gpu| {
                        for x in c {
                            x.enqueue(comm, gpu)?;
                        }
                        Ok(())
                    })?;
                    poison(&colls, &rank.gpu)?;
                    for x in &colls {
                        x.enqueue(&mut rank.comm, &rank.gpu)?;
                    }
                    rank.gpu.sync()?;
                    (s, check_wrong(&colls, &rank.gpu, me, n)?)
                };
                result.samples.push(samples);
                result.wrong.push(wrong);
                progress(result.samples.len());
            }
        }
        Job::Env => unreachable!("handled above"),
    }
    rank.comm.async_error()?;
    Ok(result)
}
