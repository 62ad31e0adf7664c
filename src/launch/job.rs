//! What one rank does: open its GPU, join the communicator, run the job, report.
//!
//! Timing: before every timed iteration the rank synchronises its stream and passes a barrier
//! (a one-element all-reduce), so all ranks start together; events on the stream bracket the
//! iteration (including the host's enqueue time, which is what eager mode pays). The parent
//! takes, per iteration, the slowest rank's time.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::comm::kernels::{Kernels, Pool};
use crate::comm::{Buffer, Communicator, Gpu, UniqueId};
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
    },
    /// Report the environment only (no NCCL).
    Env,
}

impl Job {
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
    /// Time of a minimal streaming launch (16 bytes) on this rank (us): the fixed cost of one
    /// compute operation, when compute ran.
    #[serde(default)]
    pub stream_fixed_us: Option<f64>,
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
        self.barrier.enqueue(&self.comm, &self.gpu)?;
        self.gpu.sync()?;
        Ok(())
    }

    /// Times `iters` samples of `body` after `warmup` untimed ones.
    fn time<F>(&mut self, iters: u64, warmup: u64, mut body: F) -> anyhow::Result<Vec<f64>>
    where
        F: FnMut(&Communicator, &Gpu) -> anyhow::Result<()>,
    {
        for _ in 0..warmup {
            body(&self.comm, &self.gpu)?;
        }
        self.gpu.sync()?;
        let (start, end) = (self.gpu.event()?, self.gpu.event()?);
        let mut out = Vec::with_capacity(iters as usize);
        for _ in 0..iters {
            self.barrier()?;
            self.gpu.record(&start)?;
            body(&self.comm, &self.gpu)?;
            self.gpu.record(&end)?;
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
    let comm = Communicator::init(&gpu, &setup.id, setup.rank, setup.nranks)?;
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
                                colls[0].enqueue(&rank.comm, &rank.gpu)?;
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
                        colls[0].enqueue(&rank.comm, &rank.gpu)?;
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
            launches_per_layer,
        } => {
            check_memory(&rank.gpu, schedule, n)?;
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
            let needs_compute =
                runs.iter().any(|(_, m)| *m != Mode::Comm) || *launches_per_layer > 0;
            let compute = if needs_compute {
                let c = Compute::new(&rank.gpu, schedule.tokens as usize)?;
                result.stream_gbps = Some(c.measure_gbps(&rank.gpu)?);
                result.stream_fixed_us = Some(c.measure_fixed_us(&rank.gpu)?);
                Some(c)
            } else {
                None
            };
            let steps = plan_steps(schedule, *launches_per_layer);
            for &(graph, mode) in runs {
                let run = |comm: &Communicator, gpu: &Gpu| -> anyhow::Result<()> {
                    let mut ci = 0;
                    for st in &steps {
                        match *st {
                            Step::Coll => {
                                if mode != Mode::Compute {
                                    colls[ci].enqueue(comm, gpu)?;
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
                    }
                    Ok(())
                };
                let (samples, wrong) = if graph {
                    let g = {
                        let comm = &rank.comm;
                        let gpu = &rank.gpu;
                        gpu.capture(|| run(comm, gpu))?
                    };
                    let s = rank.time(*iters, *warmup, |_, _| Ok(g.launch()?))?;
                    poison(&colls, &rank.gpu)?;
                    g.launch()?;
                    rank.gpu.sync()?;
                    (
                        s,
                        if mode == Mode::Compute {
                            0
                        } else {
                            check_wrong(&colls, &rank.gpu, me, n)?
                        },
                    )
                } else {
                    let s = rank.time(*iters, *warmup, |comm, gpu| run(comm, gpu))?;
                    poison(&colls, &rank.gpu)?;
                    run(&rank.comm, &rank.gpu)?;
                    rank.gpu.sync()?;
                    (
                        s,
                        if mode == Mode::Compute {
                            0
                        } else {
                            check_wrong(&colls, &rank.gpu, me, n)?
                        },
                    )
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
    let mut steps = vec![];
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
    }
    steps
}

/// Refuses a schedule whose collective buffers (plus the compute pool) do not fit.
fn check_memory(gpu: &Gpu, s: &Schedule, n: usize) -> anyhow::Result<()> {
    let mut need: u64 = 0;
    for op in &s.ops {
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
    fn new(gpu: &Gpu, tokens: usize) -> anyhow::Result<Compute> {
        if tokens > crate::comm::kernels::MAXT {
            crate::usage_bail!(
                "--tokens {tokens}: the streaming kernel handles at most {} tokens",
                crate::comm::kernels::MAXT
            );
        }
        let kernels = Kernels::load(gpu)?;
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

    /// Time of a minimal streaming launch (one 16-byte vector), median of 50, us.
    fn measure_fixed_us(&self, gpu: &Gpu) -> anyhow::Result<f64> {
        let (a, b) = (gpu.event()?, gpu.event()?);
        let mut t = vec![];
        for i in 0..50u64 {
            gpu.record(&a)?;
            self.kernels.stream(
                gpu,
                &self.pool,
                i * 4096,
                1,
                &self.act,
                self.tokens,
                &self.partial,
            )?;
            gpu.record(&b)?;
            gpu.sync()?;
            t.push(a.elapsed_us(&b)?);
        }
        Ok(crate::measure::Summary::from_samples(&t).map_or(0.0, |s| s.median_us))
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
