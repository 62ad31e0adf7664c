//! `verifybench __rank` (hidden): one worker process of `--launcher processes`. It runs its
//! rank ([`crate::launch::job::run_rank`]) and reports on stdout in the protocol of
//! [`crate::launch::worker`].

use std::io::Write;
use std::path::PathBuf;

use crate::launch::job::{run_rank, Fault, Job, P2pExchange, RankSetup};
use crate::launch::worker::{unhex, watch_of, Message, RANK_TIMEOUT_ENV};

/// What one worker process runs (`verifybench __rank --job FILE --rank R ...`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RankRequest {
    /// JSON file holding the job.
    pub(crate) job: PathBuf,
    pub(crate) rank: usize,
    pub(crate) nranks: usize,
    pub(crate) device: usize,
    /// NCCL unique id, hex.
    pub(crate) id: String,
    pub(crate) fault: Option<Fault>,
    pub(crate) cpu_affinity: crate::launch::affinity::CpuAffinity,
}

fn send(m: &Message) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{}",
        serde_json::to_string(m).expect("messages serialize")
    );
    let _ = out.flush();
}

/// Runs one rank and reports on stdout. The exit code is 0 even on error (the error travels in
/// the protocol); a crash or a deliberate fault exits otherwise.
pub(crate) fn run(a: &RankRequest) -> anyhow::Result<i32> {
    let job: Job = serde_json::from_slice(&crate::util::read::read(
        &a.job,
        "--job",
        crate::util::read::JOB,
    )?)?;
    let setup = RankSetup {
        rank: a.rank,
        nranks: a.nranks,
        device: a.device,
        id: unhex(&a.id)?,
        fault: a.fault,
        p2p: P2pExchange::beside(&a.job),
        affinity: a.cpu_affinity.clone(),
        watch: watch_of(std::env::var(RANK_TIMEOUT_ENV).ok().as_deref()),
    };
    match run_rank(setup, &job, |k| send(&Message::Progress(k))) {
        Ok(r) => {
            send(&Message::Result(Box::new(r)));
            Ok(0)
        }
        Err(e) => {
            send(&Message::Error(format!("{e:#}")));
            Ok(1)
        }
    }
}
