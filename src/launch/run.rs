//! Runs a job on every rank (threads or processes) and turns the rank results into a record.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::job::{run_rank, CollCase, Fault, Job, P2pExchange, RankResult, RankSetup};
use super::worker::{hex, Message};
use crate::comm;
use crate::error::usage;
use crate::impls;
use crate::measure::Summary;
use crate::record::{
    algbw_gbps, Body, CollTiming, CollectiveResult, CollectiveRow, ImplRun, ImplTiming, Mode, Part,
    Provenance, RankTime, Record, Source, VerifyResult, VerifyRun, WorkerInfo, Workload,
};
use crate::request::{CollectiveRequest, GpuSpec, Impl, Launcher, VerifyJob};

pub use super::devices::{check_gpu_flags, preflight, select_devices, select_devices_min};

/// Operations per timed sample of `collective` (as nccl-tests times many back-to-back
/// operations): amortises the first operation's start-up and, in graph mode, the graph launch.
pub(crate) const COLLECTIVE_BATCH: u64 = 50;

/// How to start the ranks.
#[derive(Debug, Clone)]
pub struct LaunchSpec {
    pub devices: Vec<usize>,
    pub launcher: Launcher,
    /// Longest silence (no progress from a rank) before the run is aborted.
    pub timeout: Duration,
    /// Variables set for the workers on top of this process's environment.
    pub env_overrides: BTreeMap<String, String>,
    pub fault: Option<Fault>,
    /// Forward workers' stderr to ours.
    pub echo_stderr: bool,
    /// `--cpu-affinity` of every rank.
    pub affinity: super::affinity::CpuAffinity,
}

impl LaunchSpec {
    /// Ranks on `devices`, no overrides, no fault, workers' stderr echoed; `timeout_s` is the
    /// longest silence allowed (at least one second).
    pub fn new(devices: Vec<usize>, launcher: Launcher, timeout_s: f64) -> LaunchSpec {
        LaunchSpec {
            devices,
            launcher,
            timeout: Duration::from_secs_f64(timeout_s.max(1.0)),
            env_overrides: BTreeMap::new(),
            fault: None,
            echo_stderr: true,
            affinity: super::affinity::CpuAffinity::Auto,
        }
    }
}

/// What a rank thread tells its launcher.
pub(crate) enum Event<T> {
    Progress,
    Done(Box<anyhow::Result<T>>),
}

/// How long a launcher keeps listening after the first failure (a rank's error, a rank's
/// death, or its own deadline) before it ends the run: long enough for the other ranks to
/// report NCCL's own error text or their deadline, and for rank threads to leave their kernels
/// once the run's stop is raised; short enough that the run ends within `--timeout` + 2 s.
pub(crate) const GRACE: Duration = Duration::from_millis(1500);

/// Why a rank's run ended badly, in the order the launcher shows them: the rank's own failure
/// (NCCL's or CUDA's error, a P2P peer that never signalled, a death) first, then a rank that
/// passed its `--timeout` deadline, then a rank stopped because the run was aborting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Cause {
    Own,
    NoProgress,
    Stopped,
}

impl Cause {
    /// The cause of a rank thread's error, from the error types in its chain.
    pub(crate) fn of(e: &anyhow::Error) -> Cause {
        if e.chain().any(|c| c.is::<comm::nccl::Stopped>()) {
            Cause::Stopped
        } else if e.chain().any(|c| c.is::<comm::nccl::NoProgress>()) {
            Cause::NoProgress
        } else {
            Cause::Own
        }
    }

    /// The cause of a worker process's error, from its text (the protocol carries text).
    fn of_text(text: &str) -> Cause {
        if text.contains(comm::nccl::STOPPED_TEXT) {
            Cause::Stopped
        } else if text.contains(comm::nccl::NO_PROGRESS_TEXT) {
            Cause::NoProgress
        } else {
            Cause::Own
        }
    }
}

/// Which of the failures, in the order they arrived, to show as the run's error: the first of
/// the most telling cause ([`Cause`]'s order).
pub(crate) fn first_cause(causes: &[Cause]) -> Option<usize> {
    (0..causes.len()).min_by_key(|&i| (causes[i], i))
}

/// The run's error from the ranks' failures (rank, cause, error, in order of arrival) and the
/// ranks without a result (`no_result`, "0, 1"). The shown failure is [`first_cause`]'s: a
/// rank's own failure is named as such; a deadline (or a stop) is shown as the ranks that made
/// no progress, with the error that says so. The other ranks' own failures and deadlines
/// follow on one line each ("also rank R: ..."); stopped ranks are left out. `name` names a
/// rank ("rank 1 (GPU 1)"), `ended` says what happened to the others, `notes` are added to the
/// first line.
fn run_error(
    failures: Vec<(usize, Cause, anyhow::Error)>,
    no_result: &str,
    timeout: Duration,
    name: &dyn Fn(usize) -> String,
    ended: &str,
    notes: &[String],
) -> anyhow::Error {
    let causes: Vec<Cause> = failures.iter().map(|f| f.1).collect();
    let silent = format!(
        "rank(s) {no_result} made no progress for {} s (--timeout); {ended}",
        comm::nccl::seconds(timeout)
    );
    let Some(first) = first_cause(&causes) else {
        return anyhow::anyhow!("{silent}{}", tail_notes(notes));
    };
    let also: Vec<String> = failures
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != first && causes[i] != Cause::Stopped)
        .map(|(_, (r, _, e))| {
            let text = format!("{e:#}");
            format!(
                "\n  also rank {r}: {}",
                text.lines().next().unwrap_or_default()
            )
        })
        .collect();
    let mut failures = failures;
    let (rank, cause, e) = failures.swap_remove(first);
    let header = match cause {
        Cause::Own => format!("{} failed; {ended}", name(rank)),
        Cause::NoProgress | Cause::Stopped => silent,
    };
    e.context(format!("{header}{}{}", tail_notes(notes), also.concat()))
}

fn tail_notes(notes: &[String]) -> String {
    if notes.is_empty() {
        String::new()
    } else {
        format!(" ({})", notes.join("; "))
    }
}

/// The threads launcher's abort path on one GPU: `nranks` rank threads (virtual ranks of
/// `device`, through the same supervisor as `--launcher threads`) connect a P2P all-reduce
/// through one in-process exchange; every rank but the last enqueues a one-shot call and waits
/// for it as the job's ranks do (stream query, stop flag, deadline), spinning in the kernel on
/// the last rank's signal, which never comes ([`super::fault::Drill`] says what the last rank does). The
/// kernels' own signal bound is 120 s, far beyond `timeout`: only the host's abort (the run's
/// stop flag, then the P2P stop word) can end the spins within the run's time.
pub(crate) fn threads_drill(
    device: usize,
    nranks: usize,
    drill: super::fault::Drill,
    timeout: Duration,
) -> super::fault::DrillOutcome {
    let x = comm::p2p::InProcessExchange::new(nranks);
    let xr = x.clone();
    let connected = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let run = Arc::new(
        move |rank: usize, watch: comm::nccl::Watch, _progress: Progress| {
            super::fault::drill_rank(device, rank, nranks, drill, (&xr, &connected), &watch)
        },
    );
    let watch = comm::nccl::Watch::new(Some(timeout));
    let stop = || x.stop_all();
    let name = |rank: usize| format!("virtual rank {rank} (GPU {device})");
    let t0 = Instant::now();
    let r = supervise(nranks, timeout, &watch, &stop, &name, run);
    let took = t0.elapsed();
    super::fault::DrillOutcome {
        took,
        error: r.err().map(|e| format!("{e:#}")),
        kept: x.kept(),
        holders: Arc::strong_count(&x),
    }
}

/// A rank thread's progress callback (its argument: configurations done).
pub(crate) type Progress = Box<dyn FnMut(usize) + Send>;

/// What one rank thread runs: its rank, its watch and its progress callback in, its result out.
pub(crate) type RankBody<T> =
    Arc<dyn Fn(usize, comm::nccl::Watch, Progress) -> anyhow::Result<T> + Send + Sync>;

/// Runs `n` rank threads of `run` (each given its rank, its [`comm::nccl::Watch`] over the
/// run's stop flag, and a progress callback) and collects their results in rank order.
///
/// Nothing hangs and nothing is freed under a running kernel: on the first failure (a rank's
/// error, or no progress from any rank for `timeout`) the launcher raises the run's stop flag
/// (every rank's wait returns, its guard aborts its communicator and stops its P2P waits) and
/// calls `on_stop` (which stops every P2P connection the run keeps), then listens for [`GRACE`]
/// while the other ranks report, joins every rank thread that left, and returns the run's
/// error ([`run_error`]). A thread that did not leave is named in the error and left to end
/// with the process; whatever it shares with the others (the P2P exchange that keeps every
/// workspace) stays alive as long as it.
pub(crate) fn supervise<T: Send + 'static>(
    n: usize,
    timeout: Duration,
    watch: &comm::nccl::Watch,
    on_stop: &dyn Fn(),
    name: &dyn Fn(usize) -> String,
    run: RankBody<T>,
) -> anyhow::Result<Vec<T>> {
    let (tx, rx) = mpsc::channel::<(usize, Event<T>)>();
    let mut handles = vec![];
    for rank in 0..n {
        let (tx, run, w) = (tx.clone(), run.clone(), watch.for_rank());
        let spawned = std::thread::Builder::new()
            .name(format!("rank{rank}"))
            .spawn(move || {
                let ptx = tx.clone();
                let progress = Box::new(move |_| {
                    let _ = ptx.send((rank, Event::Progress));
                });
                // a panic is this rank's failure like any error (its guards have dropped)
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run(rank, w.clone(), progress)
                }))
                .unwrap_or_else(|p| {
                    let what = p
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| p.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    Err(anyhow::anyhow!(
                        "rank {rank}: the rank thread panicked: {what}"
                    ))
                });
                if r.is_err() {
                    // the other ranks stop at their next poll, before the launcher hears of it
                    w.stop();
                }
                let _ = tx.send((rank, Event::Done(Box::new(r))));
            });
        match spawned {
            Ok(h) => handles.push(Some(h)),
            Err(e) => {
                watch.stop();
                on_stop();
                return Err(
                    anyhow::Error::new(e).context(format!("starting the thread of rank {rank}"))
                );
            }
        }
    }
    drop(tx);
    let mut l = Listen::new(n, timeout);
    let stop = || {
        watch.stop();
        on_stop();
    };
    while l.waiting() {
        match rx.recv_timeout(l.wait_for()) {
            Ok((_, Event::Progress)) => l.progress(),
            Ok((rank, Event::Done(r))) => match *r {
                Ok(res) => l.result(rank, res),
                Err(e) => l.failed(rank, Cause::of(&e), e, stop),
            },
            Err(mpsc::RecvTimeoutError::Timeout) if !l.ending() => l.silent(stop),
            Err(_) => break,
        }
    }
    let mut stuck = vec![];
    for (rank, h) in handles.iter_mut().enumerate() {
        match h.take() {
            Some(h) if l.left[rank] || h.is_finished() => {
                let _ = h.join();
            }
            Some(_) => stuck.push(rank.to_string()),
            None => {}
        }
    }
    let mut notes = vec![];
    if !stuck.is_empty() {
        notes.push(format!(
            "the thread(s) of rank(s) {} did not leave within {:.1} s of the abort; they end with the process, and the P2P workspaces they may use stay allocated until then",
            stuck.join(", "),
            GRACE.as_secs_f64()
        ));
    }
    l.end(name, "the run is aborted", &notes)
}

/// What a launcher has heard from its ranks, and until when it listens: one set of rules for
/// both launchers. A result moves the deadline to now plus the timeout, and so does progress
/// until the run starts ending. The run's first failure (a rank's error or death), or no
/// message by the deadline, starts the [`GRACE`] during which the other ranks may still report.
struct Listen<T> {
    timeout: Duration,
    results: Vec<Option<T>>,
    /// The ranks that have reported their end (a result, an error, a death).
    left: Vec<bool>,
    /// (rank, cause, error) in order of arrival.
    failures: Vec<(usize, Cause, anyhow::Error)>,
    /// The deadline passed with no message.
    timed_out: bool,
    deadline: Instant,
    /// The end of the grace, once the run is ending.
    give_up: Option<Instant>,
}

impl<T> Listen<T> {
    fn new(n: usize, timeout: Duration) -> Listen<T> {
        Listen {
            timeout,
            results: (0..n).map(|_| None).collect(),
            left: vec![false; n],
            failures: vec![],
            timed_out: false,
            deadline: Instant::now() + timeout,
            give_up: None,
        }
    }

    /// Whether a rank has yet to report its end.
    fn waiting(&self) -> bool {
        self.left.iter().any(|l| !l)
    }

    /// How long to wait for the next message: to the deadline, or to the end of the grace.
    fn wait_for(&self) -> Duration {
        let until = self.give_up.unwrap_or(self.deadline);
        until.saturating_duration_since(Instant::now())
    }

    /// Whether the run is ending (the grace has started).
    fn ending(&self) -> bool {
        self.give_up.is_some()
    }

    fn progress(&mut self) {
        if self.give_up.is_none() {
            self.deadline = Instant::now() + self.timeout;
        }
    }

    fn result(&mut self, rank: usize, r: T) {
        self.results[rank] = Some(r);
        self.left[rank] = true;
        self.deadline = Instant::now() + self.timeout;
    }

    /// Rank `rank` failed and left; the first failure calls `first` and starts the grace.
    fn failed(&mut self, rank: usize, cause: Cause, e: anyhow::Error, first: impl FnOnce()) {
        self.left[rank] = true;
        self.failures.push((rank, cause, e));
        self.start_grace(first);
    }

    /// No message by the deadline: calls `first` and starts the grace.
    fn silent(&mut self, first: impl FnOnce()) {
        self.timed_out = true;
        self.start_grace(first);
    }

    fn start_grace(&mut self, first: impl FnOnce()) {
        if self.give_up.is_none() {
            first();
            self.give_up = Some(Instant::now() + GRACE);
        }
    }

    /// The results in rank order, or the run's error ([`run_error`], with `name`, `ended` and
    /// `notes`).
    fn end(
        self,
        name: &dyn Fn(usize) -> String,
        ended: &str,
        notes: &[String],
    ) -> anyhow::Result<Vec<T>> {
        if self.failures.is_empty() && !self.timed_out {
            return Ok(self
                .results
                .into_iter()
                .map(|r| r.expect("every rank reported"))
                .collect());
        }
        Err(run_error(
            self.failures,
            &missing(&self.results),
            self.timeout,
            name,
            ended,
            notes,
        ))
    }
}

/// Runs `job` on every rank and returns the ranks' results, in rank order.
pub(crate) fn run_job(spec: &LaunchSpec, job: &Job) -> anyhow::Result<Vec<RankResult>> {
    // One rank without collectives needs no communicator, hence no NCCL id.
    let id = if job.needs_communicator(spec.devices.len()) {
        comm::nccl::unique_id().map_err(anyhow::Error::new)?
    } else {
        [0; 128]
    };
    match spec.launcher {
        Launcher::Threads => run_threads(spec, job, id),
        Launcher::Processes => run_processes(spec, job, id),
    }
}

fn run_threads(
    spec: &LaunchSpec,
    job: &Job,
    id: comm::UniqueId,
) -> anyhow::Result<Vec<RankResult>> {
    // Threads share this process's environment, and setting a variable while other threads
    // may read it (NCCL calls getenv on its own threads, and a rank thread of an earlier,
    // aborted job may still be running) is a data race. So the threads launcher never changes
    // the environment: overrides that differ from it need worker processes.
    if let Some((k, v)) = spec
        .env_overrides
        .iter()
        .find(|(k, v)| std::env::var(k).ok().as_deref() != Some(v.as_str()))
    {
        return Err(usage(format!(
            "{k}={v} would have to be set in this process for --launcher threads; export it before starting verifybench, or use --launcher processes"
        )));
    }
    let n = spec.devices.len();
    // The exchange keeps every rank's P2P connection: the launcher drops it only after the
    // rank threads have left (see `supervise`).
    let exchange = (job.p2p_bytes() > 0).then(|| comm::p2p::InProcessExchange::new(n));
    let p2p = match &exchange {
        Some(x) => P2pExchange::Threads(x.clone()),
        None => P2pExchange::None,
    };
    let watch = comm::nccl::Watch::new(Some(spec.timeout));
    let (devices, fault, affinity, job) = (
        spec.devices.clone(),
        spec.fault,
        spec.affinity.clone(),
        job.clone(),
    );
    let run = Arc::new(move |rank: usize, watch, progress: Progress| {
        let setup = RankSetup {
            rank,
            nranks: n,
            device: devices[rank],
            id,
            fault,
            p2p: p2p.clone(),
            affinity: affinity.clone(),
            watch,
        };
        run_rank(setup, &job, progress)
    });
    let stop_p2p = || {
        if let Some(x) = &exchange {
            x.stop_all();
        }
    };
    let name = |rank: usize| format!("rank {rank} (GPU {})", spec.devices[rank]);
    supervise(n, spec.timeout, &watch, &stop_p2p, &name, run)
}

/// The ranks that have not reported, as "0, 1".
fn missing<T>(results: &[Option<T>]) -> String {
    results
        .iter()
        .enumerate()
        .filter(|(_, r)| r.is_none())
        .map(|(i, _)| i.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Children that are killed and reaped when this guard drops (no orphans on any exit path).
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}

fn worker_env(spec: &LaunchSpec) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = std::env::vars().collect();
    env.extend(spec.env_overrides.clone());
    env.insert(
        super::worker::RANK_TIMEOUT_ENV.into(),
        spec.timeout.as_secs_f64().to_string(),
    );
    env
}

fn run_processes(
    spec: &LaunchSpec,
    job: &Job,
    id: comm::UniqueId,
) -> anyhow::Result<Vec<RankResult>> {
    let n = spec.devices.len();
    let dir = tempfile::Builder::new()
        .prefix("verifybench-job-")
        .tempdir()
        .context("creating a temporary folder for the job")?;
    let job_path: PathBuf = dir.path().join("job.json");
    std::fs::write(&job_path, serde_json::to_vec(job)?)?;
    let exe = std::env::current_exe()?;
    let env = worker_env(spec);
    let id_hex = hex(&id);
    let (tx, rx) = mpsc::channel::<(usize, Option<Message>)>();
    let tails: Vec<Arc<Mutex<VecDeque<String>>>> = (0..n)
        .map(|_| Arc::new(Mutex::new(VecDeque::new())))
        .collect();
    let mut children = Children(vec![]);
    for (rank, &device) in spec.devices.iter().enumerate() {
        let mut cmd = Command::new(&exe);
        cmd.arg("__rank")
            .arg("--job")
            .arg(&job_path)
            .args(["--rank", &rank.to_string()])
            .args(["--nranks", &n.to_string()])
            .args(["--device", &device.to_string()])
            .args(["--id", &id_hex])
            .args(["--cpu-affinity", &spec.affinity.arg()])
            .env_clear()
            .envs(&env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(f) = spec.fault {
            cmd.args(["--fault", &format!("{}:{}", f.kind.name(), f.rank)]);
        }
        // SAFETY: the closure runs in the child between fork and exec and only calls prctl,
        // which is async-signal-safe. It makes the worker die with its parent, so a killed
        // parent leaves no worker waiting forever inside NCCL.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting the worker of rank {rank}"))?;
        let out = child.stdout.take().expect("piped");
        let err = child.stderr.take().expect("piped");
        children.0.push(child);
        let txo = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                match serde_json::from_str::<Message>(&line) {
                    Ok(m) => {
                        let _ = txo.send((rank, Some(m)));
                    }
                    Err(_) => eprintln!("[rank {rank}] {line}"),
                }
            }
            let _ = txo.send((rank, None));
        });
        let tail = tails[rank].clone();
        let echo = spec.echo_stderr;
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if echo {
                    eprintln!("[rank {rank}] {line}");
                }
                let mut t = tail.lock().expect("tail lock");
                if t.len() == 20 {
                    t.pop_front();
                }
                t.push_back(line);
            }
        });
    }
    drop(tx);
    let tail_of = |rank: usize| -> String {
        // give the stderr reader a moment to drain what the dead worker wrote
        std::thread::sleep(Duration::from_millis(100));
        let t = tails[rank].lock().expect("tail lock");
        if t.is_empty() {
            String::new()
        } else {
            format!(
                "\n  last lines of rank {rank}'s stderr:\n    {}",
                t.iter().cloned().collect::<Vec<_>>().join("\n    ")
            )
        }
    };
    // As the threads launcher: on the first failure (a worker's error, a worker's death, or no
    // progress for --timeout) listen for GRACE more, so that the other workers can report
    // NCCL's own error or their deadline, then stop every worker and show the most telling
    // failure.
    let mut l = Listen::new(n, spec.timeout);
    while l.waiting() {
        match rx.recv_timeout(l.wait_for()) {
            Ok((_, Some(Message::Progress(_)))) => l.progress(),
            Ok((rank, Some(Message::Result(r)))) => l.result(rank, *r),
            Ok((rank, Some(Message::Error(e)))) => {
                let cause = Cause::of_text(&e);
                l.failed(rank, cause, anyhow::anyhow!("{e}{}", tail_of(rank)), || ());
            }
            Ok((rank, None)) => {
                if !l.left[rank] {
                    let status = children.0[rank]
                        .wait()
                        .map(|s| s.to_string())
                        .unwrap_or_else(|e| e.to_string());
                    let pid = children.0[rank].id();
                    let e = anyhow::anyhow!(
                        "pid {pid} died before reporting ({status}){}",
                        tail_of(rank)
                    );
                    l.failed(rank, Cause::Own, e, || ());
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) if !l.ending() => l.silent(|| ()),
            Err(_) => break,
        }
    }
    drop(children);
    let name = |rank: usize| format!("rank {rank} (GPU {})", spec.devices[rank]);
    l.end(&name, "all workers were stopped", &[])
}

/// Per configuration: each sample's time over the ranks as `rank_time` says (the slowest
/// rank, or their mean), and the wrong elements of all ranks.
pub(crate) fn combine(
    results: &[RankResult],
    configs: usize,
    rank_time: RankTime,
) -> anyhow::Result<Vec<(Summary, u64)>> {
    let mut out = vec![];
    for c in 0..configs {
        let len = results
            .iter()
            .map(|r| r.samples.get(c).map_or(0, Vec::len))
            .min()
            .unwrap_or(0);
        let per_sample: Vec<f64> = (0..len)
            .filter_map(|i| {
                let ranks: Vec<f64> = results.iter().map(|r| r.samples[c][i]).collect();
                rank_time.reduce(&ranks)
            })
            .collect();
        let s = Summary::from_samples(&per_sample)
            .ok_or_else(|| anyhow::anyhow!("configuration {c} produced no timing samples"))?;
        let wrong = results
            .iter()
            .map(|r| r.wrong.get(c).copied().unwrap_or(0))
            .sum();
        out.push((s, wrong));
    }
    Ok(out)
}

/// States `rank_time` in the record: its field, and a note the header prints.
fn state_rank_time(p: &mut Provenance, rank_time: RankTime) {
    p.rank_time = Some(rank_time);
    p.notes.push(format!("rank time: {}", rank_time.describe()));
}

/// Provenance of a run on GPUs, from the parent and what every worker reported.
pub fn provenance(launcher: &str, started: String, results: &[RankResult]) -> Provenance {
    let mut p = worker_provenance(launcher, started, results);
    p.driver_version = comm::device::driver_version()
        .or_else(comm::device::driver_cuda_version)
        .map(|v| match comm::device::driver_cuda_version() {
            Some(c) if !v.contains(&c) => format!("{v} (CUDA {c})"),
            _ => v,
        });
    p.nccl_version = p.nccl_version.or_else(comm::nccl::version);
    p.nccl_library = p
        .nccl_library
        .or_else(|| comm::libs::loaded_path("libnccl"));
    p
}

/// The part of [`provenance`] that comes from the workers' reports alone (no driver query).
fn worker_provenance(launcher: &str, started: String, results: &[RankResult]) -> Provenance {
    let mut p = Provenance::here("nccl", started);
    p.launcher = Some(launcher.into());
    p.gpus = results.iter().filter_map(|r| r.gpu.clone()).collect();
    p.nccl_version = results.first().and_then(|r| r.nccl_version.clone());
    p.nccl_library = results.first().and_then(|r| r.nccl_library.clone());
    p.workers = results
        .iter()
        .map(|r| WorkerInfo {
            rank: r.rank,
            pid: r.pid,
            device: r.device,
            nccl_env: r.nccl_env.clone(),
        })
        .collect();
    let init: Vec<String> = results.iter().map(|r| format!("{:.2}", r.init_s)).collect();
    p.notes
        .push(format!("NCCL init per rank (s): {}", init.join(", ")));
    p.notes.extend(host_notes(
        results,
        super::affinity::governors(std::path::Path::new("/")),
    ));
    p
}

/// The provenance notes on what makes timings noisy at the source: each rank's CPU affinity,
/// the CPU frequency governor and the GPUs' rated clocks (or that they are not available).
pub(crate) fn host_notes(results: &[RankResult], governor: Option<String>) -> Vec<String> {
    let aff: Vec<String> = results
        .iter()
        .map(|r| match &r.affinity {
            Some(f) => format!(
                "rank {}: {} ({})",
                r.rank,
                f.cpus.as_deref().unwrap_or("inherited"),
                f.note
            ),
            None => format!("rank {}: not reported", r.rank),
        })
        .collect();
    let clocks: Vec<String> = results
        .iter()
        .map(|r| match r.clocks_khz {
            Some((sm, mem)) => format!("rank {}: {} / {}", r.rank, sm / 1000, mem / 1000),
            None => format!("rank {}: not available", r.rank),
        })
        .collect();
    vec![
        format!("CPU affinity per rank: {}", aff.join("; ")),
        format!(
            "CPU frequency governor: {}",
            governor.unwrap_or_else(|| "not available (no cpufreq in sysfs)".into())
        ),
        format!(
            "GPU rated clocks per rank, SM / memory MHz (driver attributes CLOCK_RATE / MEMORY_CLOCK_RATE): {}",
            clocks.join("; ")
        ),
    ]
}

fn spec_of(g: &GpuSpec, devices: Vec<usize>, fault: Option<Fault>, quiet: bool) -> LaunchSpec {
    LaunchSpec {
        fault,
        echo_stderr: !quiet,
        affinity: g.cpu_affinity.clone(),
        ..LaunchSpec::new(devices, g.launcher, g.timeout)
    }
}

pub use crate::record::vocab::ONE_RANK;

/// The provenance note of a replay with `--pdl`.
const PDL_NOTE: &str = "compute launches: programmatic dependent launch (--pdl): each streaming kernel lets the next be scheduled as its blocks retire and issues its first weight loads before it waits for the kernel before it; after a collective (which never triggers early) it starts as a plain launch";

/// `verify --backend nccl`: the resolved job on its selected GPUs.
pub fn verify(j: &VerifyJob, started: String) -> anyhow::Result<Record> {
    let a = &j.request;
    let compute_only = a.compute_only();
    let devices = j.devices.clone();
    let one = devices.len() == 1;
    let schedule = &j.schedule;
    let fault = crate::launch::fault::rank_fault(a.inject_fault.as_deref())?;
    let mut notes = vec![];
    // one GPU has no peers: NCCL only (the P2P kernels need two ranks)
    let run_on = if one {
        if !impls::p2p(&a.impls).is_empty() {
            impls::skip(
                &a.impls,
                "1 rank: the P2P all-reduces need two ranks",
                &mut notes,
            )?;
        }
        vec![Impl::Nccl]
    } else {
        runnable(&a.impls, &devices, &mut notes)?
    };
    crate::launch::fault::check_p2p_fault(
        a.inject_fault.as_deref(),
        run_on.iter().filter(|i| i.is_p2p()).count(),
    )?;
    // every requested implementation replays every (graph, mode) run, NCCL's first
    let mut runs = vec![];
    let mut run_impls = vec![];
    for &imp in &run_on {
        for r in a.runs() {
            runs.push(r);
            run_impls.push(imp);
        }
    }
    let iters = a.repeat.iters.max(1);
    let job = Job::Verify {
        schedule: schedule.clone(),
        runs,
        iters,
        warmup: a.repeat.warmup,
        launches_per_layer: a.launches_per_layer,
        run_impls: run_impls.clone(),
        host_gaps: j.host_gaps.clone(),
        timing_pass: if compute_only {
            0
        } else {
            super::timeline::pass_iterations(iters)
        },
        pdl: a.pdl,
    };
    let spec = spec_of(&a.gpu, devices, fault, a.quiet);
    let results = run_job(&spec, &job)?;
    let mut rec = verify_record(
        &job,
        &results,
        spec.launcher.name(),
        started,
        a.repeat.rank_time,
    )?;
    if one && compute_only {
        rec.provenance.notes.push(format!(
            "one GPU: rank 0's share of the TP={} workload (its weight bytes streamed), no communicator, no collectives",
            schedule.tp
        ));
    } else if one {
        rec.provenance.notes.push(format!(
            "{ONE_RANK}: the TP={} schedule's per-rank collectives on a communicator of size 1 (NCCL copies in place or not at all; nothing crosses a link), with rank 0's compute share; what it measures is NCCL's launch and call cost, not a transfer",
            schedule.tp
        ));
    }
    if let Some(p) = &a.export_trace {
        export_trace(&job, &results, p)?;
    }
    if run_impls.iter().any(|i| i.is_p2p()) {
        notes.push(impls::VERIFY_NOTE.into());
    }
    rec.provenance.notes.extend(notes);
    if let Body::Verify(v) = &mut rec.body {
        // the runs of the custom implementations move to their own list
        let all = std::mem::take(&mut v.runs);
        for (run, imp) in all.into_iter().zip(&run_impls) {
            if imp.is_p2p() {
                v.p2p.push(ImplRun { imp: *imp, run });
            } else {
                v.runs.push(run);
            }
        }
    }
    Ok(rec)
}

/// The implementations of `asked` that run on `devices`, in order: NCCL when asked, and the
/// P2P ones unless two of the GPUs cannot reach each other; then they are skipped with a line
/// naming the pair (on stderr and in `notes`), never replaced in silence. Where the driver says
/// they can but the real access check fails (`comm::p2p::check_access`), the run is refused
/// (exit 2) naming the pair and the likely cause.
fn runnable(
    asked: &[Impl],
    devices: &[usize],
    notes: &mut Vec<String>,
) -> anyhow::Result<Vec<Impl>> {
    let mut out = vec![];
    if impls::has_nccl(asked) {
        out.push(Impl::Nccl);
    }
    let custom = impls::p2p(asked);
    if !custom.is_empty() {
        match comm::p2p::check_topology(devices) {
            Ok(()) => {
                for n in comm::p2p::check_access(devices)?.1 {
                    crate::note!("verifybench: {n}");
                }
                out.extend(custom)
            }
            Err(u) => impls::skip(asked, &u.to_string(), notes)?,
        }
    }
    Ok(out)
}

/// Writes the per-collective pass of the first run that has one (eager before graph) as a
/// Chrome trace.
pub fn export_trace(
    job: &Job,
    results: &[RankResult],
    path: &std::path::Path,
) -> anyhow::Result<()> {
    let Job::Verify { schedule, runs, .. } = job else {
        anyhow::bail!("not a verify job");
    };
    let Some(c) = (0..runs.len()).find(|&c| {
        results
            .iter()
            .all(|r| r.passes.get(c).is_some_and(|p| !p.is_empty()))
    }) else {
        crate::usage_bail!(
            "--export-trace '{}': no run timed collectives per rank (mode compute, or one GPU); add --mode comm or full",
            path.display()
        );
    };
    let per_rank: Vec<_> = results.iter().map(|r| r.passes[c].clone()).collect();
    let tracks = super::timeline::chrome_tracks(&per_rank, schedule, runs[c].0);
    crate::trace::chrome::write_file(&tracks, results.len(), path)
}

/// The verify record of a finished verify job.
pub fn verify_record(
    job: &Job,
    results: &[RankResult],
    launcher: &str,
    started: String,
    rank_time: RankTime,
) -> anyhow::Result<Record> {
    verify_record_with(job, results, rank_time, || {
        provenance(launcher, started, results)
    })
}

/// [`verify_record`] with the provenance from `provenance` (called once, after the checks).
fn verify_record_with(
    job: &Job,
    results: &[RankResult],
    rank_time: RankTime,
    provenance: impl FnOnce() -> Provenance,
) -> anyhow::Result<Record> {
    let Job::Verify {
        schedule,
        runs,
        iters,
        warmup,
        host_gaps,
        pdl,
        ..
    } = job
    else {
        anyhow::bail!("not a verify job");
    };
    let combined = combine(results, runs.len(), rank_time)?;
    let ncoll = schedule.n_collectives().max(1) as f64;
    let weights = schedule.weight_bytes_by_kind();
    let total_w = schedule.total_weight_bytes().max(1) as f64;
    let vruns = runs
        .iter()
        .zip(combined)
        .enumerate()
        .map(|(c, (&(graph, mode), (s, wrong)))| {
            // Compute time per op kind, apportioned by the bytes each kind streams (the
            // kernels are memory-bound); the collectives are timed as a whole.
            let breakdown = if mode == Mode::Compute {
                weights
                    .iter()
                    .map(|(k, b)| Part {
                        name: format!("{} (by bytes)", k.name()),
                        us: s.median_us * *b as f64 / total_w,
                        count: schedule
                            .ops
                            .iter()
                            .filter(|o| matches!(o, crate::model::Op::Compute { kind, .. } if kind == k))
                            .count() as u64,
                    })
                    .collect()
            } else {
                vec![]
            };
            VerifyRun {
                graph,
                mode,
                per_collective_us: s.median_us / ncoll,
                per_verify: s,
                breakdown,
                wrong,
                iterations: *iters,
                warmup: *warmup,
                in_collective: {
                    let per_rank: Vec<_> = results
                        .iter()
                        .map(|r| r.passes.get(c).cloned().unwrap_or_default())
                        .collect();
                    super::timeline::attribute_pass(
                        &per_rank,
                        format!(
                            "measured in a separate pass after the headline timing (events around each collective{}); {}",
                            if graph { ", event-record nodes inside the graph" } else { "" },
                            super::timeline::ALIGNMENT
                        ),
                    )
                },
            }
        })
        .collect();
    let stream_gbps = results
        .iter()
        .filter_map(|r| r.stream_gbps)
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))));
    let mut p = provenance();
    state_rank_time(&mut p, rank_time);
    if !host_gaps.is_none() {
        p.notes.push(host_gaps.describe());
        if runs.iter().any(|r| r.0) {
            p.notes.push(
                "graph replay: no host gaps (a CUDA graph launches every kernel from the device)"
                    .into(),
            );
        }
    }
    let fixed = results
        .iter()
        .filter_map(|r| r.stream_fixed_us)
        .fold(None, |m: Option<f64>, x| {
            Some(m.map_or(x, |m: f64| m.max(x)))
        });
    if let (Some(bw), Some(fx)) = (stream_gbps, fixed) {
        use crate::launch::job::{plan_steps, stream_launches, FIXED_COST_LAUNCHES};
        let nops = stream_launches(&plan_steps(schedule, 0)).0;
        p.notes.push(format!(
            "compute prediction with a fixed cost per launch: {} B / {bw:.0} GB/s + {nops} streaming launches x {fx:.2} us ({FIXED_COST_LAUNCHES} back-to-back launches of the mean size against one launch of their bytes, same run) = {:.1} us",
            schedule.total_weight_bytes(),
            schedule.total_weight_bytes() as f64 / (bw * 1e3) + nops as f64 * fx
        ));
    }
    if *pdl {
        p.notes.push(PDL_NOTE.into());
    }
    Ok(Record::new(
        Source::Measured,
        p,
        Body::Verify(VerifyResult {
            workload: Workload::of(schedule),
            runs: vruns,
            stream_gbps,
            predicted_compute_us: stream_gbps
                .map(|g| schedule.total_weight_bytes() as f64 / (g * 1e3)),
            p2p: vec![],
        }),
    ))
}

/// `collective --backend nccl`.
pub fn collective(a: &CollectiveRequest, started: String) -> anyhow::Result<Record> {
    comm::libs::prepare(a.gpu.nccl_lib.as_deref())?;
    let devices = select_devices_min(&a.gpu, None, comm::device_count(), 1)?;
    let n = devices.len();
    let sizes = a.sizes(n)?;
    let mut notes = vec![];
    let run_on = if n == 1 {
        if !impls::p2p(&a.impls).is_empty() {
            impls::skip(
                &a.impls,
                "1 rank: the P2P all-reduces need two ranks",
                &mut notes,
            )?;
        }
        notes.push(format!(
            "{ONE_RANK}: a communicator of size 1 (NCCL copies in place or not at all; bus bandwidth is 0 by definition): the time is NCCL's launch and call cost"
        ));
        vec![Impl::Nccl]
    } else {
        impls::check_collective(&a.impls, a.op, a.dtype, &sizes, n)?;
        runnable(&a.impls, &devices, &mut notes)?
    };
    let esz = a.dtype.size();
    // per size, every implementation (NCCL first), in one run of one rank set
    let cases: Vec<CollCase> = sizes
        .iter()
        .flat_map(|&s| {
            run_on.iter().map(move |&imp| CollCase {
                op: a.op,
                dtype: a.dtype,
                count: a.op.ops().count_for_size(s, esz, n),
                imp,
            })
        })
        .collect();
    let graphs = a.graph.modes();
    let job = Job::Collective {
        cases,
        graphs: graphs.clone(),
        iters: a.repeat.iters.max(1),
        warmup: a.repeat.warmup,
        batch: COLLECTIVE_BATCH,
    };
    let spec = spec_of(&a.gpu, devices, None, crate::output::quiet());
    let results = run_job(&spec, &job)?;
    let combined = combine(&results, job.configs(), a.repeat.rank_time)?;
    let mut rows = vec![];
    let mut it = combined.into_iter();
    for &size in &sizes {
        let mut row = CollectiveRow {
            size_bytes: size,
            count: size / esz,
            eager: None,
            graph: None,
            p2p: vec![],
        };
        for &imp in &run_on {
            let (mut eager, mut graph) = (None, None);
            for &g in &graphs {
                let (s, wrong) = it.next().expect("one result per configuration");
                let alg = algbw_gbps(size, s.median_us);
                let t = CollTiming {
                    time_us: s.median_us,
                    algbw_gbps: alg,
                    busbw_gbps: alg * comm::p2p::bus_factor(imp, a.op, n),
                    wrong,
                    summary: s,
                };
                if g {
                    graph = Some(t);
                } else {
                    eager = Some(t);
                }
            }
            if imp.is_p2p() {
                row.p2p.push(ImplTiming { imp, eager, graph });
            } else {
                (row.eager, row.graph) = (eager, graph);
            }
        }
        rows.push(row);
    }
    let mut p = provenance(spec.launcher.name(), started, &results);
    state_rank_time(&mut p, a.repeat.rank_time);
    p.notes.extend(notes);
    Ok(Record::new(
        Source::Measured,
        p,
        Body::Collective(CollectiveResult {
            op: a.op,
            dtype: a.dtype,
            nranks: n,
            rows,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{presets, Phase, ScheduleOptions};

    fn rank(rank: usize, samples: Vec<Vec<f64>>, wrong: Vec<u64>) -> RankResult {
        RankResult {
            rank,
            pid: 100 + rank as u32,
            device: rank,
            gpu: None,
            nccl_env: BTreeMap::from([("NCCL_PROTO".to_string(), "LL".to_string())]),
            nccl_version: Some("2.28.3".into()),
            nccl_library: Some("/lib/libnccl.so.2".into()),
            samples,
            wrong,
            checked: vec![],
            init_s: 0.5 + rank as f64,
            stream_gbps: None,
            stream_fixed_us: None,
            passes: vec![],
            affinity: None,
            clocks_khz: None,
        }
    }

    #[test]
    fn host_notes_name_affinity_governor_and_clocks_per_rank() {
        let mut a = rank(0, vec![], vec![]);
        a.affinity = Some(super::super::affinity::AffinityFacts {
            requested: "auto".into(),
            cpus: Some("0-31".into()),
            numa_node: Some(0),
            note: "the CPUs of NUMA node 0, the node of GPU 0000:19:00.0".into(),
        });
        a.clocks_khz = Some((1_980_000, 3_201_000));
        let b = rank(1, vec![], vec![]);
        let n = host_notes(&[a, b], Some("performance x 64".into()));
        assert_eq!(
            n[0],
            "CPU affinity per rank: rank 0: 0-31 (the CPUs of NUMA node 0, the node of GPU 0000:19:00.0); rank 1: not reported"
        );
        assert_eq!(n[1], "CPU frequency governor: performance x 64");
        assert!(
            n[2].ends_with("rank 0: 1980 / 3201; rank 1: not available"),
            "{}",
            n[2]
        );
        assert!(host_notes(&[], None)[1].contains("not available"));
    }

    #[test]
    fn combine_takes_the_slowest_rank_per_sample_and_sums_wrong_elements() {
        let r = [
            rank(0, vec![vec![10.0, 30.0, 20.0], vec![5.0]], vec![0, 2]),
            rank(1, vec![vec![12.0, 25.0, 21.0, 99.0], vec![6.0]], vec![1, 0]),
        ];
        let c = combine(&r, 2, RankTime::Max).unwrap();
        assert_eq!(c.len(), 2);
        // per sample the maximum over ranks: 12, 30, 21 (rank 1's extra sample has no pair)
        assert_eq!(c[0].0.n, 3);
        assert_eq!(c[0].0.median_us, 21.0);
        assert_eq!(c[0].0.max_us, 30.0);
        assert_eq!(c[0].1, 1);
        assert_eq!(c[1].0.median_us, 6.0);
        assert_eq!(c[1].1, 2);
        // a configuration without samples is an error, not a zero
        assert!(combine(&r, 3, RankTime::Max).is_err());
        // --rank-time mean: per sample (10+12)/2 = 11, (30+25)/2 = 27.5, (20+21)/2 = 20.5;
        // median 20.5, max 27.5; the second configuration (5+6)/2 = 5.5; wrong still summed
        let m = combine(&r, 2, RankTime::Mean).unwrap();
        assert_eq!(m[0].0.n, 3);
        assert_eq!(m[0].0.median_us, 20.5);
        assert_eq!(m[0].0.max_us, 27.5);
        assert_eq!(m[0].0.min_us, 11.0);
        assert_eq!(m[1].0.median_us, 5.5);
        assert_eq!((m[0].1, m[1].1), (1, 2));
    }

    #[test]
    fn the_rank_time_is_stated_in_the_record_and_its_header_note() {
        let mut p = Provenance::here("nccl", crate::util::now_utc());
        state_rank_time(&mut p, RankTime::Mean);
        assert_eq!(p.rank_time, Some(RankTime::Mean));
        assert_eq!(
            p.notes,
            ["rank time: per sample the mean over ranks, as nccl-tests -a 1 (--rank-time mean)"]
        );
        let back: Provenance = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(back.rank_time, Some(RankTime::Mean));
        assert!("median"
            .parse::<RankTime>()
            .unwrap_err()
            .contains("give max"));
    }

    #[test]
    fn verify_record_labels_measured_numbers_per_run() {
        let schedule = crate::model::build(
            &presets::preset("kimi-k2.5").unwrap(),
            &ScheduleOptions {
                tp: 2,
                ..Default::default()
            },
            Phase::Verify,
        )
        .unwrap();
        let job = Job::Verify {
            schedule: schedule.clone(),
            runs: vec![(false, Mode::Comm), (true, Mode::Comm)],
            iters: 3,
            warmup: 1,
            launches_per_layer: 0,
            run_impls: vec![],
            host_gaps: Default::default(),
            timing_pass: 0,
            pdl: false,
        };
        let r = [
            rank(
                0,
                vec![vec![1240.0; 3], vec![620.0, 640.0, 630.0]],
                vec![0, 0],
            ),
            rank(
                1,
                vec![vec![1000.0; 3], vec![700.0, 600.0, 610.0]],
                vec![0, 3],
            ),
        ];
        let rec = verify_record_with(&job, &r, RankTime::Max, || {
            worker_provenance("processes", crate::util::now_utc(), &r)
        })
        .unwrap();
        assert_eq!(rec.source, Source::Measured);
        assert_eq!(rec.provenance.backend, "nccl");
        assert_eq!(rec.provenance.launcher.as_deref(), Some("processes"));
        assert_eq!(rec.provenance.workers.len(), 2);
        assert_eq!(rec.provenance.workers[1].pid, 101);
        assert!(rec
            .provenance
            .notes
            .iter()
            .any(|n| n == "NCCL init per rank (s): 0.50, 1.50"));
        let Body::Verify(v) = &rec.body else {
            panic!("a verify record")
        };
        assert_eq!(v.workload, Workload::of(&schedule));
        assert_eq!(v.runs.len(), 2);
        assert!(!v.runs[0].graph && v.runs[1].graph);
        assert_eq!(v.runs[0].per_verify.median_us, 1240.0);
        assert_eq!(v.runs[0].per_collective_us, 1240.0 / 124.0);
        // graph: per sample max(620, 700), max(640, 600), max(630, 610) -> median 640
        assert_eq!(v.runs[1].per_verify.median_us, 640.0);
        assert_eq!(v.runs[1].wrong, 3);
        assert_eq!((v.runs[1].iterations, v.runs[1].warmup), (3, 1));
        assert_eq!(rec.provenance.nccl_version.as_deref(), Some("2.28.3"));
        assert!(verify_record_with(&Job::Env, &r, RankTime::Max, || panic!(
            "no provenance for a wrong job"
        ))
        .is_err());
    }

    #[test]
    fn a_ranks_own_failure_wins_then_a_deadline_then_a_stop_then_the_earliest() {
        use Cause::*;
        assert_eq!(first_cause(&[Stopped, NoProgress, Own, Own]), Some(2));
        assert_eq!(first_cause(&[Stopped, NoProgress, NoProgress]), Some(1));
        assert_eq!(first_cause(&[Stopped, Stopped]), Some(0));
        assert_eq!(first_cause(&[]), None);
        let stopped = anyhow::Error::new(comm::nccl::Stopped { rank: 1 }).context("injected hang");
        assert_eq!(Cause::of(&stopped), Stopped);
        let late = anyhow::Error::new(comm::nccl::NoProgress {
            rank: 0,
            timeout: Duration::from_secs(8),
        });
        assert_eq!(Cause::of(&late.context("a barrier")), NoProgress);
        assert_eq!(Cause::of(&anyhow::anyhow!("GPU 0: cuMemAlloc failed")), Own);
        // a worker's error is text: the same causes from the same words
        let text = format!("{:#}", anyhow::Error::new(comm::nccl::Stopped { rank: 2 }));
        assert_eq!(Cause::of_text(&text), Stopped);
        assert_eq!(
            Cause::of_text("rank 0: no progress by the --timeout deadline (8 s)"),
            NoProgress
        );
        assert_eq!(
            Cause::of_text("rank 1: ncclAllReduce failed: unhandled system error"),
            Own
        );
    }

    fn gpu_name(rank: usize) -> String {
        format!("rank {rank} (GPU {})", rank + 4)
    }

    #[test]
    fn the_run_error_shows_the_first_own_failure_and_lists_the_others() {
        let t = Duration::from_secs(10);
        let f = vec![
            (
                0,
                Cause::Stopped,
                anyhow::Error::new(comm::nccl::Stopped { rank: 0 }),
            ),
            (
                2,
                Cause::NoProgress,
                anyhow::anyhow!("rank 2: no progress by the --timeout deadline (10 s)"),
            ),
            (
                1,
                Cause::Own,
                anyhow::anyhow!("rank 1: ncclAllReduce failed: remote error"),
            ),
            (
                3,
                Cause::Own,
                anyhow::anyhow!("rank 3: cuStreamQuery failed\nsecond line"),
            ),
        ];
        let e = run_error(
            f,
            "0, 1, 2, 3",
            t,
            &gpu_name,
            "the run is aborted",
            &["a note".into()],
        );
        assert_eq!(
            format!("{e:#}"),
            "rank 1 (GPU 5) failed; the run is aborted (a note)\n  also rank 2: rank 2: no progress by the --timeout deadline (10 s)\n  also rank 3: rank 3: cuStreamQuery failed: rank 1: ncclAllReduce failed: remote error"
        );
        // no failure at all: the launcher's own deadline names the silent ranks
        let e = run_error(
            vec![],
            "0, 1",
            t,
            &gpu_name,
            "all workers were stopped",
            &[],
        );
        assert_eq!(
            e.to_string(),
            "rank(s) 0, 1 made no progress for 10 s (--timeout); all workers were stopped"
        );
        // a deadline chosen: the silent ranks, then the rank's own words
        let f = vec![(
            0,
            Cause::NoProgress,
            anyhow::anyhow!("rank 0: no progress by the --timeout deadline (10 s)"),
        )];
        let e = run_error(f, "0, 1", t, &gpu_name, "all workers were stopped", &[]);
        assert_eq!(
            format!("{e:#}"),
            "rank(s) 0, 1 made no progress for 10 s (--timeout); all workers were stopped: rank 0: no progress by the --timeout deadline (10 s)"
        );
        // the shown failure keeps its chain: a usage error still exits 2
        let f = vec![(1, Cause::Own, usage("--impl oneshot needs 2 ranks"))];
        let e = run_error(f, "1", t, &gpu_name, "the run is aborted", &[]);
        assert_eq!(crate::error::exit_code(&e), 2);
    }

    /// A fake rank body: `f(rank, watch)` with a progress callback the test may call.
    fn body<T: Send + 'static>(
        f: impl Fn(usize, &comm::nccl::Watch, &mut Progress) -> anyhow::Result<T>
            + Send
            + Sync
            + 'static,
    ) -> RankBody<T> {
        Arc::new(move |rank, w, mut p| f(rank, &w, &mut p))
    }

    /// Spins until the run is stopped, then leaves as a stopped wait does.
    fn spin_until_stopped(rank: usize, w: &comm::nccl::Watch) -> anyhow::Result<()> {
        while !w.stopped() {
            std::thread::sleep(Duration::from_millis(1));
        }
        Err(comm::nccl::Stopped { rank }.into())
    }

    #[test]
    fn a_failed_rank_thread_stops_the_spinning_ones_and_all_are_joined() {
        let stops = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let s2 = stops.clone();
        let on_stop = move || {
            s2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        };
        let watch = comm::nccl::Watch::new(Some(Duration::from_secs(30)));
        let run = body(|rank, w, _| {
            if rank == 1 {
                anyhow::bail!("rank 1: ncclAllReduce failed: remote error")
            }
            spin_until_stopped(rank, w)
        });
        let t0 = Instant::now();
        let e =
            supervise(3, Duration::from_secs(30), &watch, &on_stop, &gpu_name, run).unwrap_err();
        // the spinning ranks leave at the stop: the run ends long before the grace is over
        assert!(t0.elapsed() < GRACE, "{:?}", t0.elapsed());
        assert_eq!(
            format!("{e:#}"),
            "rank 1 (GPU 5) failed; the run is aborted: rank 1: ncclAllReduce failed: remote error"
        );
        assert_eq!(stops.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(watch.stopped());
    }

    #[test]
    fn a_panicking_rank_thread_fails_the_run_at_once() {
        let watch = comm::nccl::Watch::new(Some(Duration::from_secs(30)));
        let run = body(|rank, w, _| {
            if rank == 0 {
                panic!("no CUDA driver");
            }
            spin_until_stopped(rank, w)
        });
        let t0 = Instant::now();
        let e = supervise(2, Duration::from_secs(30), &watch, &|| (), &gpu_name, run).unwrap_err();
        assert!(t0.elapsed() < GRACE, "{:?}", t0.elapsed());
        assert_eq!(
            format!("{e:#}"),
            "rank 0 (GPU 4) failed; the run is aborted: rank 0: the rank thread panicked: no CUDA driver"
        );
    }

    #[test]
    fn a_thread_that_ignores_the_stop_is_named_after_the_grace() {
        let watch = comm::nccl::Watch::new(Some(Duration::from_secs(30)));
        let run = body(|rank, w, _| match rank {
            0 => anyhow::bail!("rank 0: injected"),
            1 => spin_until_stopped(rank, w),
            _ => {
                // as a thread stuck inside a driver call: it leaves long after the grace
                std::thread::sleep(Duration::from_secs(6));
                Ok(())
            }
        });
        let t0 = Instant::now();
        let e = supervise(3, Duration::from_secs(30), &watch, &|| (), &gpu_name, run).unwrap_err();
        let took = t0.elapsed();
        assert!(
            took >= GRACE && took < GRACE + Duration::from_secs(2),
            "{took:?}"
        );
        let msg = format!("{e:#}");
        assert!(
            msg.starts_with("rank 0 (GPU 4) failed; the run is aborted (the thread(s) of rank(s) 2 did not leave within 1.5 s"),
            "{msg}"
        );
    }

    #[test]
    fn no_progress_for_the_timeout_ends_the_run_within_the_grace() {
        let watch = comm::nccl::Watch::new(Some(Duration::from_millis(300)));
        let run = body(|rank, w, _| spin_until_stopped(rank, w));
        let t0 = Instant::now();
        let e = supervise(
            2,
            Duration::from_millis(300),
            &watch,
            &|| (),
            &gpu_name,
            run,
        )
        .unwrap_err();
        let took = t0.elapsed();
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_millis(300) + GRACE, "{took:?}");
        assert!(
            format!("{e:#}").starts_with(
                "rank(s) 0, 1 made no progress for 0.3 s (--timeout); the run is aborted: rank "
            ),
            "{e:#}"
        );
    }

    #[test]
    fn progress_moves_the_deadline_and_results_come_in_rank_order() {
        // each rank works 600 ms, reporting every 100 ms: longer than the 300 ms timeout in all,
        // never silent for it
        let watch = comm::nccl::Watch::new(Some(Duration::from_millis(300)));
        let run = body(|rank, _, p| {
            for k in 0..6 {
                std::thread::sleep(Duration::from_millis(100));
                p(k);
            }
            Ok(rank * 10)
        });
        let r = supervise(
            3,
            Duration::from_millis(300),
            &watch,
            &|| panic!("no stop"),
            &gpu_name,
            run,
        );
        assert_eq!(r.unwrap(), [0, 10, 20]);
        assert!(!watch.stopped());
    }

    #[test]
    fn workers_get_the_run_timeout() {
        let spec = LaunchSpec::new(vec![0, 1], Launcher::Processes, 12.5);
        let env = worker_env(&spec);
        assert_eq!(env[super::super::worker::RANK_TIMEOUT_ENV], "12.5");
        let back =
            super::super::worker::watch_of(Some(&env[super::super::worker::RANK_TIMEOUT_ENV]));
        assert_eq!(back.timeout(), Some(Duration::from_millis(12500)));
    }

    #[test]
    fn the_threads_launcher_refuses_to_change_the_environment() {
        let mut spec = LaunchSpec::new(vec![0, 1], Launcher::Threads, 1.0);
        spec.env_overrides
            .insert("NCCL_VERIFYBENCH_UNSET_FOR_TEST".into(), "1".into());
        let e = run_threads(&spec, &Job::Env, [0u8; 128]).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("--launcher processes"), "{e}");
        assert!(std::env::var("NCCL_VERIFYBENCH_UNSET_FOR_TEST").is_err());
    }
}
