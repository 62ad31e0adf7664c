//! The run of one rank: its GPU opened, the communicator joined, the job's configurations
//! timed and checked exactly, the result reported.

use std::time::Duration;

use super::compute::{check_memory, Compute};
use super::slots::{self, SLOTS};
use super::steps::{plan_steps_of_ops, stream_launches, stream_launches_by_tokens, Step};
use super::{FaultKind, Job, P2pExchange, RankResult, RankSetup};

mod cycle;
use crate::comm::p2p::{file_exchange, Impl, P2pAllReduce, P2pConfig, Workspace};
use crate::comm::{Buffer, Communicator, Event, Gpu, Graph};
use crate::launch::timeline::PassIteration;
use crate::measure::attribution::RankTiming;
use crate::measure::gaps::{busy_wait_us, schedule_launches, HostGaps, Launch};
use crate::measure::pattern;
use crate::model::{CollectiveKind, DType, Op, Schedule};
use crate::record::Mode;
use crate::record::StreamRate;

/// One slot of a collective: its own buffers and inputs.
struct Slot {
    salt: usize,
    send: Buffer,
    recv: Buffer,
}

/// One collective instance with its buffer slots (launch `j` on slot `j % slots`, see
/// [`super::slots`]).
struct Coll {
    kind: CollectiveKind,
    dtype: DType,
    count: usize,
    slots: Vec<Slot>,
}

/// What the exact check saw: wrong elements, and elements checked (every slot's output).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Checked {
    wrong: u64,
    elements: u64,
}

impl std::ops::AddAssign for Checked {
    fn add_assign(&mut self, o: Checked) {
        self.wrong += o.wrong;
        self.elements += o.elements;
    }
}

impl Coll {
    /// The collective at `index` (its operation's in the schedule, its case's in a run) with
    /// `slots` buffer slots, slot `s` filled with the inputs of salt `pattern::salt(index, s)`.
    #[allow(clippy::too_many_arguments)]
    fn new(
        gpu: &Gpu,
        kind: CollectiveKind,
        dtype: DType,
        count: usize,
        index: usize,
        slots: usize,
        rank: usize,
        n: usize,
    ) -> anyhow::Result<Coll> {
        let recv_bytes = kind.ops().recv_elems(count, n) * dtype.size() as usize;
        let mut out = Vec::with_capacity(slots);
        for s in 0..slots {
            let salt = pattern::salt(index, s);
            let data = pattern::send_bytes(kind, dtype, count, n, rank, salt);
            let send = gpu.alloc(data.len())?;
            gpu.upload(&send, &data)?;
            let recv = gpu.alloc(recv_bytes)?;
            out.push(Slot { salt, send, recv });
        }
        Ok(Coll {
            kind,
            dtype,
            count,
            slots: out,
        })
    }

    fn enqueue(&self, comm: &Communicator, gpu: &Gpu, slot: usize) -> anyhow::Result<()> {
        let s = &self.slots[slot];
        comm.collective(self.kind, &s.send, &s.recv, self.count, self.dtype, gpu)
    }

    /// Enqueues the collective on `imp`, on buffer slot `slot`: NCCL's, or (all-reduces only)
    /// the custom P2P kernel of `p2p`. A rank with the `p2p-silent` fault skips its P2P calls.
    fn enqueue_on(
        &self,
        comm: &Communicator,
        gpu: &Gpu,
        imp: Impl,
        p2p: &RankP2p,
        slot: usize,
    ) -> anyhow::Result<()> {
        if !imp.is_p2p() || self.kind != CollectiveKind::AllReduce {
            return self.enqueue(comm, gpu, slot);
        }
        let Some(ar) = &p2p.ar else {
            anyhow::bail!("{imp}: this rank has no P2P connection");
        };
        if p2p.silent {
            return Ok(());
        }
        let s = &self.slots[slot];
        ar.enqueue(gpu, imp, &s.send, &s.recv, self.count, self.dtype)
    }

    /// Every slot's output against its own expected values.
    fn wrong(&self, gpu: &Gpu, rank: usize, n: usize) -> anyhow::Result<Checked> {
        let mut c = Checked::default();
        for s in &self.slots {
            let bytes = gpu.download(&s.recv, s.recv.len())?;
            c.wrong +=
                pattern::count_wrong(self.kind, self.dtype, self.count, n, rank, s.salt, &bytes);
            c.elements += self.kind.ops().recv_elems(self.count, n) as u64;
        }
        Ok(c)
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
/// between processes). Every rank calls this at the same point of the job. The kernels' bound
/// on a wait for a peer's signal follows the run's `--timeout`: half of it (the default's bound
/// without one). The ranks are aligned before every warm-up ([`Rank::time`]), so within a
/// configuration a peer lags by host work of microseconds to milliseconds; a wait of half the
/// run's deadline is a peer that will not come, and the kernel names it before the run's
/// deadline ends the run without a name.
fn connect_p2p(gpu: &Gpu, setup: &RankSetup, bytes: usize) -> anyhow::Result<P2pAllReduce> {
    let cfg = P2pConfig {
        capacity: bytes.max(1),
        timeout: signal_bound(setup.watch.timeout()),
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
    let ar = ws.connect(gpu, &all)?;
    if let P2pExchange::Threads(x) = &setup.p2p {
        // the exchange frees the workspace only once every rank thread has left
        x.keep(&ar);
    }
    Ok(ar)
}

/// The P2P kernels' bound on one wait for a run whose `--timeout` is `run` (see
/// [`connect_p2p`]).
fn signal_bound(run: Option<Duration>) -> Duration {
    run.map_or(P2pConfig::default().timeout, |t| t / 2)
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
            b.enqueue(c, &self.gpu, 0)?;
        }
        if let Some(e) = then {
            self.gpu.record(e)?;
        }
        self.wait()
    }

    /// Waits for the rank's stream as nccl-tests' `testStreamSynchronize` does: polls the
    /// stream and, between polls, NCCL's asynchronous error, the run's stop flag and the rank's
    /// `--timeout` deadline, so that a dead peer, a broken communicator or a failed run ends the
    /// wait with NCCL's own error (or the deadline's) instead of a hang.
    fn wait(&self) -> anyhow::Result<()> {
        let w = &self.setup.watch;
        crate::comm::nccl::wait_stream(&self.gpu, self.comm.as_ref(), w, self.setup.rank)
    }

    fn barrier(&self) -> anyhow::Result<()> {
        self.barrier_then(None)
    }

    /// Waits for the stream, then fails with the P2P wait that timed out, if one did.
    fn settle(&self) -> anyhow::Result<()> {
        self.wait()?;
        self.p2p.check(&self.gpu)
    }

    /// Runs the exact check's samples after `done` ones ([`slots::check_samples`]) through
    /// `sample`, every slot's output of each list of `colls` poisoned before, and settles the
    /// stream.
    fn run_check<F>(&self, colls: &[&[Coll]], done: u64, mut sample: F) -> anyhow::Result<()>
    where
        F: FnMut(u64) -> anyhow::Result<()>,
    {
        for c in colls {
            poison(c, &self.gpu)?;
        }
        for it in slots::check_samples(done) {
            sample(it)?;
        }
        self.settle()
    }

    /// Times graph replay ([`Rank::time`]: sample `it` launches graph [`slots::graph_of`] of
    /// `gs`), then runs the exact check's samples the same way ([`Rank::run_check`]).
    fn time_graphs(
        &self,
        gs: &[Graph],
        colls: &[Coll],
        iters: u64,
        warmup: u64,
    ) -> anyhow::Result<Vec<f64>> {
        let s = self.time(iters, warmup, |it| Ok(gs[slots::graph_of(it)].launch()?))?;
        self.run_check(&[colls], warmup + iters, |it| {
            Ok(gs[slots::graph_of(it)].launch()?)
        })?;
        Ok(s)
    }

    fn async_error(&self) -> anyhow::Result<()> {
        if let Some(c) = &self.comm {
            c.async_error()?;
        }
        Ok(())
    }

    /// Times `iters` samples of `body` after `warmup` untimed ones; `body` gets the iteration's
    /// index (warm-up iterations first). The ranks are aligned first (the barrier returns on a
    /// rank only once every rank's host has enqueued it): a rank's warm-up must not start, and
    /// spin in a P2P wait, while a peer's host still checks the previous configuration.
    fn time<F>(&self, iters: u64, warmup: u64, mut body: F) -> anyhow::Result<Vec<f64>>
    where
        F: FnMut(u64) -> anyhow::Result<()>,
    {
        self.barrier()?;
        for it in 0..warmup {
            body(it)?;
        }
        self.settle()?;
        let (start, end) = (self.gpu.event()?, self.gpu.event()?);
        let mut out = Vec::with_capacity(iters as usize);
        for it in 0..iters {
            self.barrier()?;
            self.gpu.record(&start)?;
            body(warmup + it)?;
            self.gpu.record(&end)?;
            // a peer that never signalled ends the run here, naming it, not after every sample
            self.settle()?;
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
    /// The host's span from `t0` to now, on the probe's host clock.
    fn span(&self, t0: std::time::Instant) -> RankTiming {
        RankTiming {
            start_us: t0.saturating_duration_since(self.host_ref).as_secs_f64() * 1e6,
            dur_us: t0.elapsed().as_secs_f64() * 1e6,
        }
    }

    /// The pass iteration from the completed events; `steps` say which were collectives.
    fn read(&mut self, steps: &[Step]) -> anyhow::Result<PassIteration> {
        let mut it = PassIteration {
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

fn check_wrong(colls: &[Coll], gpu: &Gpu, rank: usize, n: usize) -> anyhow::Result<Checked> {
    let mut w = Checked::default();
    for c in colls {
        w += c.wrong(gpu, rank, n)?;
    }
    Ok(w)
}

/// Every slot's output set to NaN (0xFF bytes in every dtype), so that a slot the check run
/// does not write counts as wrong.
fn poison(colls: &[Coll], gpu: &Gpu) -> anyhow::Result<()> {
    for c in colls {
        for s in &c.slots {
            gpu.fill(&s.recv, 0xFF)?;
        }
    }
    Ok(())
}

/// Resolves and applies the rank's `--cpu-affinity` on the calling thread (the rank's thread
/// of the threads launcher, the main thread of a worker process). Pinning that fails is
/// reported in the facts, never fatal: it is an improvement of the timing, not a condition.
fn pin(setup: &RankSetup) -> super::super::affinity::AffinityFacts {
    use super::super::affinity::{apply, parse_cpulist, resolve};
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

/// Whether step `st` launches something in `mode`: a collective unless the mode is compute
/// only, a compute kernel (streaming or tiny) unless it is comm only.
fn launches_in(st: &Step, mode: Mode) -> bool {
    match st {
        Step::Coll => mode != Mode::Compute,
        Step::Stream { .. } | Step::Tiny => mode != Mode::Comm,
    }
}

/// One verify's host gaps per step (`n_steps` of them): each launch's drawn gap (`drawn`, one
/// per launch, or none at all) added to the step that launches its op.
fn gaps_by_step(
    n_steps: usize,
    step_of_op: &[usize],
    launches: &[Launch],
    drawn: &[f64],
) -> Vec<f64> {
    let mut g = vec![0.0; n_steps];
    for (l, us) in launches.iter().zip(drawn) {
        g[step_of_op[l.op]] += us;
    }
    g
}

/// Runs `job` as rank `setup.rank`. `progress` is called after each configuration.
pub(crate) fn run_rank(
    setup: RankSetup,
    job: &Job,
    mut progress: impl FnMut(usize),
) -> anyhow::Result<RankResult> {
    let watch = setup.watch.clone();
    // each configuration's progress also moves the rank's deadline
    let mut progress = move |k| {
        watch.progress();
        progress(k)
    };
    let t0 = std::time::Instant::now();
    let mut result = new_result(&setup);
    if let Job::Env = job {
        result.gpu = crate::comm::device::info(setup.device).ok();
        return Ok(result);
    }
    let mut rank = open_rank(setup, job, &mut result)?;
    // Any error (or panic) from here on leaves through this guard, declared after the rank so
    // that it drops first: it aborts the communicator (ncclCommAbort, never a destroy that
    // waits for peers) and stops the P2P kernels' waits before anything is freed.
    let mut abort_guard = match &rank.comm {
        Some(c) => c.abort_guard(),
        None => crate::comm::nccl::AbortGuard::without_communicator(),
    };
    rank.barrier()?;
    result.init_s = t0.elapsed().as_secs_f64();
    inject_fault(&mut rank)?;
    let p2p_bytes = job.p2p_bytes();
    if p2p_bytes > 0 {
        let ar = connect_p2p(&rank.gpu, &rank.setup, p2p_bytes)?;
        abort_guard.cover(&ar);
        rank.p2p.ar = Some(ar);
        // every rank connected before any rank's first P2P call
        rank.barrier()?;
    }
    match job {
        Job::Collective { .. } => run_collectives(&rank, job, &mut result, &mut progress)?,
        Job::Verify { .. } => run_verify(&rank, job, &mut result, &mut progress)?,
        Job::Env => unreachable!("handled above"),
    }
    rank.async_error()?;
    if rank.p2p.ar.is_some() {
        // peers read this rank's workspace until their last call: drop it only after all are done
        rank.settle()?;
        rank.barrier()?;
        rank.p2p.ar = None;
    }
    abort_guard.disarm();
    Ok(result)
}

/// The rank's result before anything ran: who it is and NCCL's environment.
fn new_result(setup: &RankSetup) -> RankResult {
    RankResult {
        rank: setup.rank,
        pid: std::process::id(),
        device: setup.device,
        nccl_env: crate::util::nccl_env(),
        ..Default::default()
    }
}

/// The rank pinned, its GPU opened and, when `job` needs one, the communicator joined with its
/// barrier all-reduce; what each step learns goes into `result`.
fn open_rank(setup: RankSetup, job: &Job, result: &mut RankResult) -> anyhow::Result<Rank> {
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
        // one slot: the barrier's output is never checked
        let barrier = Coll::new(
            &gpu,
            CollectiveKind::AllReduce,
            DType::F32,
            1,
            0,
            1,
            setup.rank,
            n,
        )?;
        (Some(comm), Some(barrier))
    } else {
        (None, None)
    };
    Ok(Rank {
        setup,
        gpu,
        comm,
        barrier,
        p2p: RankP2p::default(),
    })
}

/// The run's `--fault`, when it names this rank: exits, aborts, hangs until the run is
/// stopped (an error), or silences the rank's P2P calls.
fn inject_fault(rank: &mut Rank) -> anyhow::Result<()> {
    if let Some(f) = rank.setup.fault.filter(|f| f.rank == rank.setup.rank) {
        eprintln!("rank {}: injecting fault {:?}", f.rank, f.kind);
        match f.kind {
            FaultKind::Exit => std::process::exit(3),
            FaultKind::Abort => std::process::abort(),
            FaultKind::Hang => {
                return Err(super::super::fault::hang_until_stopped(
                    &rank.setup.watch,
                    f.rank,
                ))
            }
            FaultKind::P2pSilent => rank.p2p.silent = true,
        }
    }
    Ok(())
}

/// One configuration's samples and exact check, and its timing pass, added to `result`.
fn push_config(
    result: &mut RankResult,
    samples: Vec<f64>,
    checked: Checked,
    pass: Vec<PassIteration>,
) {
    result.samples.push(samples);
    result.wrong.push(checked.wrong);
    result.checked.push(checked.elements);
    result.passes.push(pass);
}

/// One graph per buffer slot: graph `g` captures `body(g)`.
fn capture_slots(
    gpu: &Gpu,
    mut body: impl FnMut(usize) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<Graph>> {
    let mut gs = Vec::with_capacity(SLOTS);
    for g in 0..SLOTS {
        gs.push(gpu.capture(|| body(g))?);
    }
    Ok(gs)
}

/// A collective job (`job`): each case, eager and/or graph, timed and checked; each pair one
/// configuration.
fn run_collectives(
    rank: &Rank,
    job: &Job,
    result: &mut RankResult,
    progress: &mut impl FnMut(usize),
) -> anyhow::Result<()> {
    let Job::Collective {
        cases,
        graphs,
        iters,
        warmup,
        batch,
    } = job
    else {
        unreachable!("a collective job");
    };
    let (me, n) = (rank.setup.rank, rank.setup.nranks);
    for (ci, case) in cases.iter().enumerate() {
        let colls = vec![Coll::new(
            &rank.gpu, case.op, case.dtype, case.count, ci, SLOTS, me, n,
        )?];
        let b = (*batch).max(1);
        // Sample `it`: its `b` launches, each on its slot.
        let sample = |it: u64| -> anyhow::Result<()> {
            for s in slots::sample_slots(it, b) {
                colls[0].enqueue_on(rank.comm(), &rank.gpu, case.imp, &rank.p2p, s)?;
            }
            Ok(())
        };
        let done = *warmup + *iters;
        for &graph in graphs {
            let samples = if graph {
                // one graph per slot pattern: graph g holds sample g's launches
                let gs = capture_slots(&rank.gpu, |g| sample(g as u64))?;
                rank.time_graphs(&gs, &colls, *iters, *warmup)?
            } else {
                let s = rank.time(*iters, *warmup, &sample)?;
                rank.run_check(&[&colls], done, &sample)?;
                s
            };
            let checked = check_wrong(&colls, &rank.gpu, me, n)?;
            let samples = samples.into_iter().map(|s| s / b as f64).collect();
            push_config(result, samples, checked, vec![]);
            progress(result.samples.len());
        }
    }
    Ok(())
}

/// A verify job (`job`): what every configuration shares loaded once ([`LoadedVerify`]), then
/// each configuration (a [`VerifyRun`]: graph or eager, its mode, its all-reduces'
/// implementation) timed, checked and passed over.
fn run_verify(
    rank: &Rank,
    job: &Job,
    result: &mut RankResult,
    progress: &mut impl FnMut(usize),
) -> anyhow::Result<()> {
    let Job::Verify {
        schedule,
        runs,
        iters,
        warmup,
        launches_per_layer,
        run_impls,
        host_gaps,
        timing_pass,
        cycle,
        ..
    } = job
    else {
        unreachable!("a verify job");
    };
    if let Some(c) = cycle {
        return cycle::run_cycle(rank, job, c, result, progress);
    }
    // the schedule's length fits the exact check's salts: checked when the job was
    // made from the request, before any rank started (`pattern::check_salted`)
    let with_colls = rank.comm.is_some();
    check_memory(&rank.gpu, &[schedule], rank.setup.nranks, with_colls)?;
    let colls = schedule_colls(rank, schedule)?;
    let (steps, step_of_op) = plan_steps_of_ops(schedule, *launches_per_layer);
    let compute = load_compute(rank, job, schedule.tokens, &steps, result)?;
    let v = LoadedVerify {
        rank,
        schedule,
        zeros: vec![0.0; steps.len()],
        steps,
        step_of_op,
        colls: &colls,
        compute: compute.as_ref(),
        host_gaps,
        iters: *iters,
        warmup: *warmup,
        timing_pass: *timing_pass,
    };
    for (ri, &(graph, mode)) in runs.iter().enumerate() {
        let imp = run_impls.get(ri).copied().unwrap_or_default();
        let (samples, checked, pass) = v.run(graph, mode, imp)?;
        rank.async_error()?;
        push_config(result, samples, checked, pass);
        progress(result.samples.len());
    }
    Ok(())
}

/// The schedule's collectives with their buffer slots, each filled with the inputs of its
/// operation's index; none for a rank without a communicator (it runs no collective).
fn schedule_colls(rank: &Rank, schedule: &Schedule) -> anyhow::Result<Vec<Coll>> {
    let (me, n) = (rank.setup.rank, rank.setup.nranks);
    let mut colls = vec![];
    if rank.comm.is_none() {
        return Ok(colls);
    }
    for (i, op) in schedule.ops.iter().enumerate() {
        if let Op::Collective {
            kind, dtype, count, ..
        } = op
        {
            let count = *count as usize;
            colls.push(Coll::new(&rank.gpu, *kind, *dtype, count, i, SLOTS, me, n)?);
        }
    }
    Ok(colls)
}

/// The compute kernels of `job` for forwards of up to `tokens` tokens, with their streaming
/// bandwidth and (when `steps` stream) the fixed cost of a launch of their mean size measured
/// into `result`; none where no run of the job launches compute or launch loads.
fn load_compute(
    rank: &Rank,
    job: &Job,
    tokens: u64,
    steps: &[Step],
    result: &mut RankResult,
) -> anyhow::Result<Option<Compute>> {
    let Job::Verify {
        runs,
        launches_per_layer,
        pdl,
        ..
    } = job
    else {
        unreachable!("a verify job");
    };
    if runs.iter().all(|(_, m)| *m == Mode::Comm) && *launches_per_layer == 0 {
        return Ok(None);
    }
    let c = Compute::new(&rank.gpu, tokens as usize, *pdl)?;
    let gpu = &rank.gpu;
    result.stream_gbps = Some(c.measure_gbps(gpu, c.tokens)?);
    let (n, sum) = stream_launches(steps);
    if let Some(mean) = sum.checked_div(n) {
        result.stream_fixed_us = Some(c.measure_fixed_us(gpu, mean, c.tokens)?);
    }
    // each token count the launches use (the routed experts' groups beside the forward's)
    for (tokens, (n, sum)) in stream_launches_by_tokens(steps) {
        let gbps = match (tokens == c.tokens, result.stream_gbps) {
            (true, Some(g)) => g,
            _ => c.measure_gbps(gpu, tokens)?,
        };
        result.stream_rates.push(StreamRate {
            tokens: tokens as u64,
            gbps,
            fixed_us: c.measure_fixed_us(gpu, sum / n.max(1), tokens)?,
            launches: n,
            bytes: sum * 16,
        });
    }
    Ok(Some(c))
}

/// One configuration's samples, exact check and timing pass.
type Timed = (Vec<f64>, Checked, Vec<PassIteration>);

/// What every configuration of a verify job shares, loaded once per rank (the compute and the
/// collectives owned by the caller, which frees the compute first, the reverse of the order
/// they were made in).
struct LoadedVerify<'a> {
    rank: &'a Rank,
    schedule: &'a Schedule,
    steps: Vec<Step>,
    /// The step that launches each op of the schedule.
    step_of_op: Vec<usize>,
    compute: Option<&'a Compute>,
    colls: &'a [Coll],
    host_gaps: &'a HostGaps,
    iters: u64,
    warmup: u64,
    timing_pass: u64,
    /// No host gap before any step.
    zeros: Vec<f64>,
}

impl LoadedVerify<'_> {
    /// Times, checks and passes over one configuration: graph or eager replay in `mode`, the
    /// all-reduces on `imp`.
    fn run(&self, graph: bool, mode: Mode, imp: Impl) -> anyhow::Result<Timed> {
        let c = VerifyRun {
            v: self,
            graph,
            mode,
            imp,
            launches: schedule_launches(self.schedule, mode != Mode::Comm),
        };
        // The pass's events: every step that launches something in this mode, but
        // the tiny launch-load kernels.
        let pass_iters = if mode == Mode::Compute {
            0
        } else {
            self.timing_pass
        };
        let probe = c.probe(pass_iters)?;
        if graph {
            c.run_graph(probe, pass_iters)
        } else {
            c.run_eager(probe, pass_iters)
        }
    }
}

/// One configuration of a verify job (one of its `runs`).
struct VerifyRun<'a> {
    v: &'a LoadedVerify<'a>,
    graph: bool,
    mode: Mode,
    imp: Impl,
    /// The launches whose host gaps are drawn.
    launches: Vec<Launch>,
}

impl VerifyRun<'_> {
    /// Host gaps per step of verify `it`, drawn before the timed loop (the generator stays out
    /// of it).
    fn gaps_of(&self, it: u64) -> Vec<f64> {
        let (v, launches) = (self.v, &self.launches);
        let drawn = if !self.graph && !v.host_gaps.is_none() {
            v.host_gaps
                .iteration_gaps(false, v.rank.setup.rank, it, launches)
        } else {
            vec![]
        };
        gaps_by_step(v.steps.len(), &v.step_of_op, launches, &drawn)
    }

    /// One verify: per step, the host gap (busy-waited), then the launch (every
    /// collective on buffer slot `slot`); with a probe, timestamps around each launch
    /// and the host times.
    fn replay(
        &self,
        gaps: &[f64],
        mut probe: Option<&mut Probe>,
        slot: usize,
    ) -> anyhow::Result<()> {
        let (rank, mode, imp, p2p) = (self.v.rank, self.mode, self.imp, &self.v.rank.p2p);
        let gpu = &rank.gpu;
        let mut ci = 0;
        for (i, st) in self.v.steps.iter().enumerate() {
            if gaps[i] > 0.0 {
                let t0 = std::time::Instant::now();
                busy_wait_us(gaps[i]);
                if let Some(p) = probe.as_deref_mut() {
                    p.host_gaps.push(p.span(t0));
                }
            }
            let ev = probe
                .as_deref()
                .and_then(|p| p.events[i].as_ref())
                .filter(|_| launches_in(st, self.mode));
            if let Some((a, _)) = ev {
                gpu.record_timestamp(a)?;
            }
            let t0 = std::time::Instant::now();
            match *st {
                Step::Coll => {
                    if mode != Mode::Compute {
                        self.v.colls[ci].enqueue_on(rank.comm(), gpu, imp, p2p, slot)?;
                    }
                    ci += 1;
                }
                Step::Stream {
                    start,
                    nvec,
                    tokens,
                } => {
                    if mode != Mode::Comm {
                        let c = self.v.compute.expect("compute loaded");
                        c.kernels
                            .stream(gpu, &c.pool, start, nvec, &c.act, tokens, &c.partial)?;
                    }
                }
                Step::Tiny => {
                    if mode != Mode::Comm {
                        let c = self.v.compute.expect("compute loaded");
                        c.kernels.tiny(gpu, &c.partial)?;
                    }
                }
            }
            if let Some((_, b)) = ev {
                gpu.record_timestamp(b)?;
            }
            if let (Some(p), Step::Coll, true) = (probe.as_deref_mut(), st, mode != Mode::Compute) {
                p.launches.push(p.span(t0));
            }
        }
        Ok(())
    }

    /// The exact check of every collective's slots (nothing to check in compute-only mode).
    fn check(&self) -> anyhow::Result<Checked> {
        let rank = self.v.rank;
        if self.mode == Mode::Compute {
            Ok(Checked::default())
        } else {
            check_wrong(self.v.colls, &rank.gpu, rank.setup.rank, rank.setup.nranks)
        }
    }

    /// The timing pass's events and host times, when there is a pass (`pass_iters` > 0).
    fn probe(&self, pass_iters: u64) -> anyhow::Result<Option<Probe>> {
        let gpu = &self.v.rank.gpu;
        let probe = if pass_iters > 0 {
            let mut events = vec![];
            for st in &self.v.steps {
                events.push(if launches_in(st, self.mode) && *st != Step::Tiny {
                    Some((gpu.event()?, gpu.event()?))
                } else {
                    None
                });
            }
            Some(Probe {
                events,
                reference: gpu.event()?,
                host_ref: std::time::Instant::now(),
                host_gaps: vec![],
                launches: vec![],
            })
        } else {
            None
        };
        Ok(probe)
    }

    /// How many verifies the warm-up and the timing run (the check's come after them).
    fn done(&self) -> u64 {
        self.v.warmup + self.v.iters
    }

    /// The slot of the pass's verify `k`. Verify `it` (one launch of each collective) runs on
    /// slot `it % SLOTS`: the warm-up and timed verifies, then the check's, then the pass's.
    fn pass_slot(&self, k: u64) -> usize {
        slots::slot(self.done() + SLOTS as u64 + k)
    }

    /// Graph replay timed and checked, then its timing pass on graphs of its own.
    fn run_graph(&self, mut probe: Option<Probe>, pass_iters: u64) -> anyhow::Result<Timed> {
        let (rank, v) = (self.v.rank, self.v);
        let mut pass = vec![];
        // The headline graphs have no event nodes; the pass captures its own. One
        // graph per slot, graph g replaying verify g: one graph is one verify.
        let gs = capture_slots(&rank.gpu, |g| self.replay(&v.zeros, None, g))?;
        let s = rank.time_graphs(&gs, v.colls, v.iters, v.warmup)?;
        let checked = self.check()?;
        drop(gs);
        if let Some(p) = probe.as_mut() {
            let gps = capture_slots(&rank.gpu, |g| self.replay(&v.zeros, Some(&mut *p), g))?;
            p.host_gaps.clear();
            p.launches.clear();
            // aligned after the exact check's host work, before the warm-up
            rank.barrier()?;
            for gp in &gps {
                gp.launch()?;
            }
            rank.settle()?;
            for k in 0..pass_iters {
                let gp = &gps[self.pass_slot(k)];
                rank.barrier_then(Some(&p.reference))?;
                p.host_ref = std::time::Instant::now();
                let t0 = std::time::Instant::now();
                gp.launch()?;
                let l = p.span(t0);
                rank.wait()?;
                let mut it = p.read(&v.steps)?;
                it.launches = vec![l; it.collectives.len()];
                pass.push(it);
            }
            drop(gps);
        }
        Ok((s, checked, pass))
    }

    /// Eager replay (each verify with its drawn host gaps) timed and checked, then its timing
    /// pass.
    fn run_eager(&self, mut probe: Option<Probe>, pass_iters: u64) -> anyhow::Result<Timed> {
        let (rank, v) = (self.v.rank, self.v);
        let done = self.done();
        let first_pass_it = done;
        let mut pass = vec![];
        let all: Vec<Vec<f64>> = (0..done).map(|it| self.gaps_of(it)).collect();
        let s = rank.time(v.iters, v.warmup, |it| {
            self.replay(&all[it as usize], None, slots::slot(it))
        })?;
        rank.run_check(&[v.colls], done, |it| {
            self.replay(&v.zeros, None, slots::slot(it))
        })?;
        let checked = self.check()?;
        if let Some(p) = probe.as_mut() {
            for k in 0..pass_iters {
                let g = self.gaps_of(first_pass_it + k);
                rank.barrier_then(Some(&p.reference))?;
                p.host_ref = std::time::Instant::now();
                self.replay(&g, Some(&mut *p), self.pass_slot(k))?;
                rank.wait()?;
                pass.push(p.read(&v.steps)?);
            }
        }
        Ok((s, checked, pass))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_launches_its_own_steps() {
        let steps = [
            Step::Coll,
            Step::Stream {
                start: 0,
                nvec: 4,
                tokens: 3,
            },
            Step::Tiny,
        ];
        let row = |m| steps.iter().map(|s| launches_in(s, m)).collect::<Vec<_>>();
        assert_eq!(row(Mode::Comm), [true, false, false]);
        assert_eq!(row(Mode::Compute), [false, true, true]);
        assert_eq!(row(Mode::Full), [true, true, true]);
    }

    #[test]
    fn host_gaps_land_on_the_steps_of_their_ops() {
        // ops 0 and 1 stream in step 0 (one range), op 2 is step 1, op 3 step 2; launches of
        // ops 0, 1 and 3 (op 2 not launched in this mode)
        let launch = |op| Launch {
            op,
            host_ops: op..op + 1,
            segment: 0,
            segment_starts: 0,
            collective: false,
        };
        let launches = [launch(0), launch(1), launch(3)];
        let g = gaps_by_step(3, &[0, 0, 1, 2], &launches, &[1.0, 2.0, 4.0]);
        // step 0: 1 + 2; step 1: nothing launched; step 2: 4
        assert_eq!(g, [3.0, 0.0, 4.0]);
        // no gaps drawn (graph replay, no --host-gap-us): every step 0
        assert_eq!(gaps_by_step(3, &[0, 0, 1, 2], &launches, &[]), [0.0; 3]);
        let mut c = Checked {
            wrong: 1,
            elements: 10,
        };
        c += Checked {
            wrong: 2,
            elements: 5,
        };
        assert_eq!(
            c,
            Checked {
                wrong: 3,
                elements: 15
            }
        );
    }

    /// Half the run's --timeout: 60 s -> 30 s, 10 s -> 5 s; without a deadline the default
    /// bound (10 s).
    #[test]
    fn the_signal_bound_is_half_the_runs_timeout() {
        assert_eq!(
            signal_bound(Some(Duration::from_secs(60))),
            Duration::from_secs(30)
        );
        assert_eq!(
            signal_bound(Some(Duration::from_secs(10))),
            Duration::from_secs(5)
        );
        assert_eq!(signal_bound(None), Duration::from_secs(10));
    }
}
