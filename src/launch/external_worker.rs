//! `verifybench worker`: one rank of a verify replay started by an external launcher (torchrun,
//! Slurm, MPI, or by hand), meeting the other ranks through a TCP rendezvous served by rank 0.
//! Only rank 0 prints and writes results; the others send their timings to it. Holds the
//! progress watchdog and rank 0's gathering; the flags live in `cli/worker.rs`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::external::{detect, env_map, ExplicitRank};
use super::job::{run_rank, RankSetup};
use super::rendezvous::{Client, Hello, Server};
use super::{Job, RankResult};
use crate::comm;
use crate::record::Record;
use crate::request::WorkerRequest;

/// FNV-1a of the job's JSON: every rank must replay exactly the same job.
fn job_hash(job: &Job) -> String {
    let text = serde_json::to_string(job).expect("jobs serialize");
    format!("{:016x}", crate::model::schedule::fnv1a(text.as_bytes()))
}

/// Runs this rank of an externally launched verify replay. Rank 0 returns the gathered record
/// for the caller to export and print; the other ranks return `None` once rank 0 has their
/// timings.
pub fn run(a: &WorkerRequest) -> anyhow::Result<Option<Record>> {
    let started = crate::util::now_utc();
    a.export.check(&[])?;
    if a.launches_per_layer > 10_000 {
        crate::usage_bail!(
            "--launches-per-layer {} is absurd: a real layer launches tens of kernels; use at most 10000",
            a.launches_per_layer
        );
    }
    if let Some(p) = &a.nccl_lib {
        comm::libs::find_nccl(Some(p))?;
    }
    let info = detect(
        &env_map(),
        &ExplicitRank {
            rank: a.rank,
            world_size: a.world_size,
            local_rank: a.local_rank,
            rendezvous: a.rendezvous.clone(),
        },
    )?;
    crate::note!("verifybench worker: {}", info.describe());
    if info.world_size < 2 {
        crate::usage_bail!(
            "a worker run needs at least 2 ranks (world size {})",
            info.world_size
        );
    }
    let ep = info.require_rendezvous()?.clone();
    crate::note!("verifybench worker: {}", info.describe_rendezvous());
    comm::libs::prepare(a.nccl_lib.as_deref())?;
    // the workload's files are read here, once
    let workload = a.workload.resolve()?;
    workload.check_modes(&a.mode)?;
    let schedule = workload.schedule(info.world_size as u64)?;
    if schedule.tp as usize != info.world_size {
        crate::usage_bail!(
            "--tp {} but the launcher started {} ranks: make them equal",
            schedule.tp,
            info.world_size
        );
    }
    let runs = crate::request::runs(&a.mode, a.graph);
    let host_gaps = a.host_gaps.resolve(&schedule, info.world_size)?;
    let iters = a.repeat.iters.max(1);
    let job = Job::Verify {
        schedule,
        runs,
        iters,
        warmup: a.repeat.warmup,
        launches_per_layer: a.launches_per_layer,
        run_impls: vec![],
        host_gaps,
        timing_pass: super::timeline::pass_iterations(iters),
        pdl: a.pdl,
    };
    let hello = Hello::here(job_hash(&job), info.rank, info.world_size);
    let rdv_timeout = Duration::from_secs_f64(a.rendezvous_timeout.max(1.0));

    // Watchdog: a rank stuck in NCCL (a peer died) exits after --timeout without progress.
    let last = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    {
        let last = last.clone();
        let limit = a.timeout.max(1.0);
        let rank = info.rank;
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(500));
            let since = t0.elapsed().as_secs_f64() - f64::from_bits(last.load(Ordering::Relaxed));
            if since > limit {
                eprintln!(
                    "Error: rank {rank} made no progress for {limit:.0} s (--timeout); exiting"
                );
                std::process::exit(1);
            }
        });
    }
    let tick =
        |last: &AtomicU64| last.store(t0.elapsed().as_secs_f64().to_bits(), Ordering::Relaxed);

    if info.rank == 0 {
        let mut server = Server::bind(ep.listen_addr(), info.world_size, hello)?;
        let id = comm::nccl::unique_id().map_err(anyhow::Error::new)?;
        // waiting for peers is bounded by the rendezvous timeout, not the progress watchdog
        let wait = Instant::now();
        last.store(
            (t0.elapsed().as_secs_f64() + a.rendezvous_timeout).to_bits(),
            Ordering::Relaxed,
        );
        let peers = server.serve_id(&id, rdv_timeout)?;
        tick(&last);
        crate::note!(
            "verifybench worker: {} ranks joined in {:.1} s",
            peers.len() + 1,
            wait.elapsed().as_secs_f64()
        );
        let setup = RankSetup {
            rank: 0,
            nranks: info.world_size,
            device: info.gpu,
            id,
            fault: None,
            p2p: Default::default(),
            affinity: a.cpu_affinity.clone(),
            watch: Default::default(),
        };
        let mine = match run_rank(setup, &job, |_| tick(&last)) {
            Ok(r) => r,
            Err(e) => {
                server.abort(&format!("rank 0 failed: {e:#}"));
                return Err(e.context("rank 0 failed"));
            }
        };
        let mut results: Vec<RankResult> = vec![mine];
        for (rank, bytes) in server.gather(Duration::from_secs_f64(a.timeout.max(1.0)))? {
            let r: RankResult = serde_json::from_slice(&bytes)
                .map_err(|e| anyhow::anyhow!("rank {rank} sent a result that is not JSON: {e}"))?;
            results.push(r);
        }
        results.sort_by_key(|r| r.rank);
        let launcher = format!("external ({})", info.source.name());
        Ok(Some(super::run::verify_record(
            &job,
            &results,
            &launcher,
            started,
            a.repeat.rank_time,
        )?))
    } else {
        last.store(
            (t0.elapsed().as_secs_f64() + a.rendezvous_timeout).to_bits(),
            Ordering::Relaxed,
        );
        let mut client = Client::fetch_id(&ep, &hello, rdv_timeout)?;
        tick(&last);
        let setup = RankSetup {
            rank: info.rank,
            nranks: info.world_size,
            device: info.gpu,
            id: *client.id(),
            fault: None,
            p2p: Default::default(),
            affinity: a.cpu_affinity.clone(),
            watch: Default::default(),
        };
        match run_rank(setup, &job, |_| tick(&last)) {
            Ok(r) => {
                client.send_result(&serde_json::to_vec(&r)?, rdv_timeout)?;
                crate::note!(
                    "verifybench worker: rank {} sent its timings to rank 0",
                    info.rank
                );
                Ok(None)
            }
            Err(e) => {
                let _ = client.send_failure(&format!("{e:#}"), rdv_timeout);
                Err(e.context(format!("rank {} failed", info.rank)))
            }
        }
    }
}
