//! Rank supervision: the ranks of a run started (as threads of this process, or as worker
//! processes through [`super::processes`]), listened to under one set of rules ([`Listen`]:
//! progress, results, failures, the deadline and the grace after the first failure), and the
//! run's error chosen from the ranks' failures ([`Cause`], [`run_error`]).

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::LaunchSpec;
use crate::comm;
use crate::error::usage;
use crate::launch::job::{run_rank, Job, P2pExchange, RankResult, RankSetup};

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
    pub(super) fn of_text(text: &str) -> Cause {
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
/// the last rank's signal, which never comes ([`crate::launch::fault::Drill`] says what the last rank does). The
/// kernels' own signal bound is 120 s, far beyond `timeout`: only the host's abort (the run's
/// stop flag, then the P2P stop word) can end the spins within the run's time.
pub(crate) fn threads_drill(
    device: usize,
    nranks: usize,
    drill: crate::launch::fault::Drill,
    timeout: Duration,
) -> crate::launch::fault::DrillOutcome {
    let x = comm::p2p::InProcessExchange::new(nranks);
    let xr = x.clone();
    let connected = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let run = Arc::new(
        move |rank: usize, watch: comm::nccl::Watch, _progress: Progress| {
            crate::launch::fault::drill_rank(device, rank, nranks, drill, (&xr, &connected), &watch)
        },
    );
    let watch = comm::nccl::Watch::new(Some(timeout));
    let stop = || x.stop_all();
    let name = |rank: usize| format!("virtual rank {rank} (GPU {device})");
    let t0 = Instant::now();
    let r = supervise(nranks, timeout, GRACE, &watch, &stop, &name, run);
    let took = t0.elapsed();
    crate::launch::fault::DrillOutcome {
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
/// calls `on_stop` (which stops every P2P connection the run keeps), then listens for `grace`
/// ([`GRACE`] in a run) while the other ranks report, joins every rank thread that left, and returns the run's
/// error ([`run_error`]). A thread that did not leave is named in the error and left to end
/// with the process; whatever it shares with the others (the P2P exchange that keeps every
/// workspace) stays alive as long as it.
pub(crate) fn supervise<T: Send + 'static>(
    n: usize,
    timeout: Duration,
    grace: Duration,
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
    let mut l = Listen::new(n, timeout, grace);
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
            grace.as_secs_f64()
        ));
    }
    l.end(name, "the run is aborted", &notes)
}

/// What a launcher has heard from its ranks, and until when it listens: one set of rules for
/// both launchers. A result moves the deadline to now plus the timeout, and so does progress
/// until the run starts ending. The run's first failure (a rank's error or death), or no
/// message by the deadline, starts the grace ([`GRACE`] in a run) during which the other ranks
/// may still report.
pub(super) struct Listen<T> {
    timeout: Duration,
    grace: Duration,
    results: Vec<Option<T>>,
    /// The ranks that have reported their end (a result, an error, a death).
    pub(super) left: Vec<bool>,
    /// (rank, cause, error) in order of arrival.
    failures: Vec<(usize, Cause, anyhow::Error)>,
    /// The deadline passed with no message.
    timed_out: bool,
    deadline: Instant,
    /// The end of the grace, once the run is ending.
    give_up: Option<Instant>,
}

impl<T> Listen<T> {
    pub(super) fn new(n: usize, timeout: Duration, grace: Duration) -> Listen<T> {
        Listen {
            timeout,
            grace,
            results: (0..n).map(|_| None).collect(),
            left: vec![false; n],
            failures: vec![],
            timed_out: false,
            deadline: Instant::now() + timeout,
            give_up: None,
        }
    }

    /// Whether a rank has yet to report its end.
    pub(super) fn waiting(&self) -> bool {
        self.left.iter().any(|l| !l)
    }

    /// How long to wait for the next message: to the deadline, or to the end of the grace.
    pub(super) fn wait_for(&self) -> Duration {
        let until = self.give_up.unwrap_or(self.deadline);
        until.saturating_duration_since(Instant::now())
    }

    /// Whether the run is ending (the grace has started).
    pub(super) fn ending(&self) -> bool {
        self.give_up.is_some()
    }

    pub(super) fn progress(&mut self) {
        if self.give_up.is_none() {
            self.deadline = Instant::now() + self.timeout;
        }
    }

    pub(super) fn result(&mut self, rank: usize, r: T) {
        self.results[rank] = Some(r);
        self.left[rank] = true;
        self.deadline = Instant::now() + self.timeout;
    }

    /// Rank `rank` failed and left; the first failure calls `first` and starts the grace.
    pub(super) fn failed(
        &mut self,
        rank: usize,
        cause: Cause,
        e: anyhow::Error,
        first: impl FnOnce(),
    ) {
        self.left[rank] = true;
        self.failures.push((rank, cause, e));
        self.start_grace(first);
    }

    /// No message by the deadline: calls `first` and starts the grace.
    pub(super) fn silent(&mut self, first: impl FnOnce()) {
        self.timed_out = true;
        self.start_grace(first);
    }

    fn start_grace(&mut self, first: impl FnOnce()) {
        if self.give_up.is_none() {
            first();
            self.give_up = Some(Instant::now() + self.grace);
        }
    }

    /// The results in rank order, or the run's error ([`run_error`], with `name`, `ended` and
    /// `notes`).
    pub(super) fn end(
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
            &comm::nccl::missing(&self.results),
            self.timeout,
            name,
            ended,
            notes,
        ))
    }
}

pub(super) fn run_threads(
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
    supervise(n, spec.timeout, GRACE, &watch, &stop_p2p, &name, run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Launcher;

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

    /// A grace no test reaches: a run that ends before it did not wait for it.
    const LONG_GRACE: Duration = Duration::from_secs(60);

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
        let e = supervise(
            3,
            Duration::from_secs(30),
            LONG_GRACE,
            &watch,
            &on_stop,
            &gpu_name,
            run,
        )
        .unwrap_err();
        // the spinning ranks leave at the stop: the run ends long before the grace is over
        assert!(t0.elapsed() < LONG_GRACE / 2, "{:?}", t0.elapsed());
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
        let e = supervise(
            2,
            Duration::from_secs(30),
            LONG_GRACE,
            &watch,
            &|| (),
            &gpu_name,
            run,
        )
        .unwrap_err();
        assert!(t0.elapsed() < LONG_GRACE / 2, "{:?}", t0.elapsed());
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
                // as a thread stuck inside a driver call: it leaves long after the grace (the
                // run's limit below, half of that, only catches a launcher that waits for it)
                std::thread::sleep(Duration::from_secs(60));
                Ok(())
            }
        });
        let t0 = Instant::now();
        let e = supervise(
            3,
            Duration::from_secs(30),
            GRACE,
            &watch,
            &|| (),
            &gpu_name,
            run,
        )
        .unwrap_err();
        let took = t0.elapsed();
        assert!(took >= GRACE && took < Duration::from_secs(30), "{took:?}");
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
            GRACE,
            &watch,
            &|| (),
            &gpu_name,
            run,
        )
        .unwrap_err();
        let took = t0.elapsed();
        assert!(took >= Duration::from_millis(300), "{took:?}");
        // ranks that were never stopped would spin for ever: the limit only catches that
        assert!(took < Duration::from_secs(30), "{took:?}");
        assert!(
            format!("{e:#}").starts_with(
                "rank(s) 0, 1 made no progress for 0.3 s (--timeout); the run is aborted: rank "
            ),
            "{e:#}"
        );
    }

    #[test]
    fn progress_moves_the_deadline_and_results_come_in_rank_order() {
        // each rank works 1.5 s, reporting every 50 ms: longer than the 1 s timeout in all,
        // never silent for a twentieth of it
        let watch = comm::nccl::Watch::new(Some(Duration::from_secs(1)));
        let run = body(|rank, _, p| {
            for k in 0..30 {
                std::thread::sleep(Duration::from_millis(50));
                p(k);
            }
            Ok(rank * 10)
        });
        let r = supervise(
            3,
            Duration::from_secs(1),
            GRACE,
            &watch,
            &|| panic!("no stop"),
            &gpu_name,
            run,
        );
        assert_eq!(r.unwrap(), [0, 10, 20]);
        assert!(!watch.stopped());
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

    /// With no rank's own failure, a deadline is shown before a stop: the silent ranks, then
    /// the late rank's words; the stopped ranks are not listed. A stop alone is shown as the
    /// silent ranks, with the stop's words.
    #[test]
    fn a_deadline_is_shown_before_a_stop_and_stops_are_not_listed() {
        let t = Duration::from_secs(10);
        let f = vec![
            (
                0,
                Cause::Stopped,
                anyhow::Error::new(comm::nccl::Stopped { rank: 0 }),
            ),
            (
                1,
                Cause::NoProgress,
                anyhow::anyhow!("rank 1: no progress by the --timeout deadline (10 s)"),
            ),
            (
                2,
                Cause::Stopped,
                anyhow::Error::new(comm::nccl::Stopped { rank: 2 }),
            ),
        ];
        let e = run_error(f, "0, 1, 2", t, &gpu_name, "the run is aborted", &[]);
        assert_eq!(
            format!("{e:#}"),
            "rank(s) 0, 1, 2 made no progress for 10 s (--timeout); the run is aborted: rank 1: no progress by the --timeout deadline (10 s)"
        );
        let f = vec![(
            1,
            Cause::Stopped,
            anyhow::Error::new(comm::nccl::Stopped { rank: 1 }),
        )];
        let e = run_error(f, "1", t, &gpu_name, "x", &["n1".into(), "n2".into()]);
        assert_eq!(
            format!("{e:#}"),
            "rank(s) 1 made no progress for 10 s (--timeout); x (n1; n2): rank 1: stopped waiting: the run is aborting (another rank failed or the run passed its deadline)"
        );
    }

    /// The listening rules: progress and results move the deadline until the run ends; the
    /// first failure (or silence) calls its stop once and starts the grace; the results come
    /// back in rank order, or the error names the ranks that never reported.
    #[test]
    fn the_listener_moves_the_deadline_until_the_first_failure_and_stops_once() {
        let t = Duration::from_secs(10);
        let mut l: Listen<char> = Listen::new(3, t, GRACE);
        assert!(l.waiting() && !l.ending());
        assert!(l.wait_for() > t - Duration::from_secs(1) && l.wait_for() <= t);
        l.result(2, 'c');
        l.progress();
        assert!(l.waiting() && l.wait_for() > t - Duration::from_secs(1));
        let mut stops = 0;
        l.failed(0, Cause::Own, anyhow::anyhow!("rank 0: injected"), || {
            stops += 1
        });
        assert!(l.ending() && l.wait_for() <= GRACE);
        let deadline = l.deadline;
        l.progress();
        assert_eq!(
            l.deadline, deadline,
            "progress no longer moves the deadline"
        );
        l.silent(|| stops += 1);
        assert_eq!(stops, 1, "the stop is called at the first failure only");
        assert!(l.waiting(), "rank 1 has not reported");
        let e = l.end(&gpu_name, "ended", &[]).unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "rank 0 (GPU 4) failed; ended: rank 0: injected"
        );
        // every rank reported, nothing failed: the results in rank order
        let mut l: Listen<char> = Listen::new(2, t, GRACE);
        l.result(1, 'b');
        l.result(0, 'a');
        assert!(!l.waiting());
        assert_eq!(l.end(&gpu_name, "ended", &[]).unwrap(), ['a', 'b']);
        // silence alone: the ranks without a result are named
        let mut l: Listen<char> = Listen::new(3, t, GRACE);
        l.result(1, 'b');
        l.silent(|| ());
        let e = l.end(&gpu_name, "ended", &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "rank(s) 0, 2 made no progress for 10 s (--timeout); ended"
        );
    }
}
