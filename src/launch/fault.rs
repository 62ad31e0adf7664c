//! Fault injection for tests, in one place: the hidden `verify --inject-fault KIND[:RANK]`
//! (KIND exit, hang, abort, or p2p-silent: the rank makes none of its P2P all-reduce calls),
//! the environment hooks through which `sweep` hands it to its children, and the ranks of the
//! threads launcher's abort drill on virtual P2P ranks of one GPU ([`drill_rank`], run by
//! `run::threads_drill` for a selftest check).
//!
//! With the NCCL backend the fault goes into one rank (the launchers carry it to the worker);
//! the model backend has no worker to break, so the whole process fails the way a crashed or
//! stuck worker would.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::job::Fault;
use crate::comm::nccl::{wait_stream, AbortGuard, Stopped, Watch};
use crate::comm::p2p::{InProcessExchange, P2pConfig, Workspace};
use crate::comm::Gpu;
use crate::error::usage;
use crate::model::DType;

/// Extra arguments `sweep` appends to every child's command line (e.g. `--inject-fault exit`).
pub(crate) const SWEEP_EXTRA_ARGS_ENV: &str = "VERIFYBENCH_SWEEP_EXTRA_ARGS";
/// Restricts [`SWEEP_EXTRA_ARGS_ENV`] to the points with this override (`NAME=VALUE`).
pub(crate) const SWEEP_EXTRA_WHEN_ENV: &str = "VERIFYBENCH_SWEEP_EXTRA_ARGS_WHEN";

/// The rank fault of `--inject-fault` for the launchers (bad input is a usage error).
pub(crate) fn rank_fault(spec: Option<&str>) -> anyhow::Result<Option<Fault>> {
    spec.map(str::parse::<Fault>).transpose().map_err(usage)
}

/// Fails this process as `--inject-fault` asks (the model backend): `exit` exits with code 3,
/// `hang` sleeps forever, `abort` aborts. Anything else (or nothing) returns.
pub(crate) fn process_fault(spec: Option<&str>) {
    match spec.map(|f| f.split(':').next().unwrap_or(f)) {
        Some("exit") => {
            eprintln!("verifybench: injected fault: exit");
            std::process::exit(3);
        }
        Some("hang") => loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        },
        Some("abort") => std::process::abort(),
        Some("p2p-silent") => {
            let rank = spec
                .and_then(|f| f.split_once(':'))
                .map(|x| x.1)
                .unwrap_or("1");
            eprintln!(
                "Error: injected fault p2p-silent: rank {rank} never signalled its peers (model backend: no kernel ran, the process fails as the run would)"
            );
            std::process::exit(1);
        }
        _ => {}
    }
}

/// `--inject-fault p2p-silent` needs a P2P implementation to silence: a usage error otherwise
/// (the same on every backend).
pub(crate) fn check_p2p_fault(spec: Option<&str>, p2p_impls: usize) -> anyhow::Result<()> {
    if spec.is_some_and(|f| f.starts_with("p2p-silent")) && p2p_impls == 0 {
        crate::usage_bail!(
            "--inject-fault p2p-silent needs a P2P implementation that runs here in --impl (oneshot or twoshot)"
        );
    }
    Ok(())
}

/// The sweep's extra child arguments and their condition, from the environment.
pub(crate) fn sweep_extra_args() -> (Vec<String>, Option<(String, String)>) {
    let args = std::env::var(SWEEP_EXTRA_ARGS_ENV)
        .map(|s| s.split_whitespace().map(String::from).collect())
        .unwrap_or_default();
    let when = std::env::var(SWEEP_EXTRA_WHEN_ENV).ok().and_then(|s| {
        s.split_once('=')
            .map(|(k, v)| (k.to_string(), v.to_string()))
    });
    (args, when)
}

/// The injected `hang` of a rank thread (a job's rank, or the drill's last rank): it never
/// calls again and leaves only once the run is aborted, with the error of a stopped wait (a
/// worker process that hangs so is killed by its parent).
pub(crate) fn hang_until_stopped(watch: &Watch, rank: usize) -> anyhow::Error {
    loop {
        std::thread::sleep(Duration::from_millis(20));
        if watch.stopped() {
            return anyhow::Error::new(Stopped { rank }).context("injected hang");
        }
    }
}

/// What the last rank of the drill does while the others wait in a P2P kernel for its
/// signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Drill {
    /// It returns an error right after connecting: the run must end at once with that error.
    Fail,
    /// It never calls and does not return until the run is aborted: the others must pass
    /// their `--timeout` deadline, and the run end then.
    Hang,
}

/// What the drill saw.
#[derive(Debug)]
pub(crate) struct DrillOutcome {
    /// From the start of the run to its error.
    pub(crate) took: Duration,
    /// The run's error (`{:#}`), or `None` when it succeeded (it must not).
    pub(crate) error: Option<String>,
    /// Connections the exchange kept (one per rank that connected).
    pub(crate) kept: usize,
    /// Holders of the exchange after the run: 1 (the drill's own) when every rank thread left.
    pub(crate) holders: usize,
}

/// The first words of the error of [`Drill::Fail`].
pub(crate) const DRILL_FAILURE: &str = "injected fault: failed after connecting";

/// Elements of the drill's one-shot all-reduce (bf16): the verify step's 43,008 B.
pub(crate) const DRILL_COUNT: usize = 21504;

/// One rank thread of the drill ([`super::run::threads_drill`]): connects through `x`, waits
/// until `connected` counts every rank, then fails or hangs as the last rank, or enqueues a
/// one-shot call and waits for it as the others.
pub(crate) fn drill_rank(
    device: usize,
    rank: usize,
    nranks: usize,
    drill: Drill,
    (x, connected): (&InProcessExchange, &AtomicUsize),
    watch: &Watch,
) -> anyhow::Result<()> {
    let gpu = Gpu::open(device)?;
    let bytes = DRILL_COUNT * DType::Bf16.size() as usize;
    let cfg = P2pConfig {
        capacity: bytes,
        timeout: Duration::from_secs(120),
        ..Default::default()
    };
    let ws = Workspace::new(&gpu, rank, nranks, cfg)?;
    let all = x.exchange(rank, ws.export(), Duration::from_secs(60))?;
    let ar = ws.connect(&gpu, &all)?;
    x.keep(&ar);
    // As a job's rank: declared last, so that any error out of here stops the P2P waits first.
    let mut guard = AbortGuard::without_communicator();
    guard.cover(&ar);
    // every rank connected (its kernels loaded) before any kernel spins, as a job's ranks pass
    // a barrier there; a run stopped meanwhile ends the wait
    connected.fetch_add(1, Ordering::SeqCst);
    while connected.load(Ordering::SeqCst) < nranks {
        if watch.stopped() {
            return Err(Stopped { rank }.into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    if rank == nranks - 1 {
        match drill {
            Drill::Fail => {
                anyhow::bail!("rank {rank}: {DRILL_FAILURE}, while its peers wait for its signal")
            }
            Drill::Hang => return Err(hang_until_stopped(watch, rank)),
        }
    }
    let input = gpu.alloc(bytes)?;
    let output = gpu.alloc(bytes)?;
    ar.enqueue(
        &gpu,
        crate::comm::p2p::Impl::OneShot,
        &input,
        &output,
        DRILL_COUNT,
        DType::Bf16,
    )?;
    wait_stream(&gpu, None, watch, rank)?;
    ar.check(&gpu)?;
    guard.disarm();
    anyhow::bail!(
        "rank {rank}: its one-shot call finished although rank {} never signalled",
        nranks - 1
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_faults_parse_and_bad_ones_are_usage_errors() {
        assert_eq!(rank_fault(None).unwrap(), None);
        let f = rank_fault(Some("hang:0")).unwrap().unwrap();
        assert_eq!(f.rank, 0);
        let e = rank_fault(Some("melt")).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
    }
}
