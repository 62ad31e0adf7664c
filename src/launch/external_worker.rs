//! `verifybench worker`: one rank of a verify replay started by an external launcher (torchrun,
//! Slurm, MPI, or by hand), meeting the other ranks through a TCP rendezvous served by rank 0.
//! Only rank 0 prints and writes results; the others send their timings to it. Holds the plan
//! of the request (every refusal it allows, before any library, GPU or connection), the
//! rendezvous (who may join: the run's secret), the rank's `--timeout` deadline and rank 0's
//! gathering; the flags live in `cli/worker.rs`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::external::{detect, env_map, ExplicitRank, RankInfo};
use super::job::{run_rank, RankSetup};
use super::rendezvous::{Client, Endpoint, Hello, Secret, Server, TOKEN_ENV, TOKEN_FLAG};
use super::{Job, RankResult};
use crate::comm;
use crate::comm::nccl::Watch;
use crate::record::Record;
use crate::request::WorkerRequest;

/// FNV-1a of the job's JSON: every rank must replay exactly the same job.
fn job_hash(job: &Job) -> String {
    let text = serde_json::to_string(job).expect("jobs serialize");
    format!("{:016x}", crate::model::schedule::fnv1a(text.as_bytes()))
}

/// What a worker's request resolves to before anything starts.
struct Plan {
    info: RankInfo,
    ep: Endpoint,
    secret: Option<(Secret, String)>,
    job: Job,
    hello: Hello,
    /// How long the rendezvous may take.
    join: Duration,
    /// `--timeout`: the most a rank may go without progress.
    timeout: Duration,
}

/// How long a rank waits for the others at the rendezvous: `--rendezvous-timeout` if given,
/// else `--timeout` (at least a second either way).
fn join_wait(rendezvous_timeout: Option<f64>, timeout: f64) -> Duration {
    Duration::from_secs_f64(rendezvous_timeout.unwrap_or(timeout).max(1.0))
}

/// Every check the request allows, made before any library is loaded, any GPU opened or any
/// connection made: the export files and the flags, the rank, the rendezvous address and its
/// secret, the workload (the `--tp` range, then `--tp` against the world size) and the length
/// of its schedule. Every refusal here is a usage error (exit 2).
fn plan(a: &WorkerRequest, env: &BTreeMap<String, String>) -> anyhow::Result<Plan> {
    a.files().check()?;
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
        env,
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
    let secret = Secret::resolve(a.rendezvous_token_file.as_deref(), env)?;
    // the workload's files are read here, once
    // two or more ranks: every run has a communicator, so the exact check runs (a schedule
    // file too long for it is refused before its parse)
    let workload = a
        .workload
        .resolve_checking_length(&crate::measure::pattern::check_salted)?;
    workload.check_modes(&a.mode)?;
    let schedule = workload.schedule(info.world_size as u64)?;
    if schedule.tp as usize != info.world_size {
        crate::usage_bail!(
            "--tp {} but the launcher started {} ranks: make them equal",
            schedule.tp,
            info.world_size
        );
    }
    // two or more ranks: every run has a communicator, so the exact check runs
    crate::measure::pattern::check_salted(schedule.ops.len())?;
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
        host_gaps: Box::new(host_gaps),
        timing_pass: super::timeline::pass_iterations(iters),
        pdl: a.pdl,
        cycle: None,
    };
    let hello = Hello::here(job_hash(&job), info.rank, info.world_size).in_job(info.job.clone());
    Ok(Plan {
        ep,
        secret,
        job,
        hello,
        join: join_wait(a.rendezvous_timeout, a.timeout),
        timeout: Duration::from_secs_f64(a.timeout.max(1.0)),
        info,
    })
}

/// The line every rank prints about who may join its rendezvous.
fn access_note(p: &Plan) -> String {
    match (&p.secret, &p.info.job) {
        (Some((_, from)), _) => format!(
            "the rendezvous at {} admits only ranks that prove the token of {from}",
            p.ep
        ),
        (None, job) => format!(
            "the rendezvous at {} is open to any host that reaches it: whoever connects first \
             with a matching hello takes a free rank (set {TOKEN_ENV} or {TOKEN_FLAG} on every \
             rank to admit only holders of a secret); {}",
            p.ep,
            match job {
                Some(j) => format!(
                    "the launcher's job id ({j}) keeps other jobs' ranks out by accident, not by design"
                ),
                None => "no launcher job id keeps other jobs' ranks out".to_string(),
            }
        ),
    }
}

/// How this rank met the others.
enum Met {
    /// Rank 0: its server (kept for the results) and the id it handed out.
    Rank0 {
        server: Box<Server>,
        id: comm::UniqueId,
    },
    /// Another rank: its connection to rank 0, holding the id.
    Peer(Client),
}

/// The rendezvous of `p`'s rank, bounded by `p.join`: rank 0 listens, makes the id with
/// `make_id` and hands it to the ranks that prove the secret; the others fetch it.
fn meet(p: &Plan, make_id: impl FnOnce() -> anyhow::Result<comm::UniqueId>) -> anyhow::Result<Met> {
    let secret = p.secret.as_ref().map(|(s, _)| s.clone());
    if p.info.rank == 0 {
        let mut server = Server::bind(
            p.ep.listen_addr(),
            p.info.world_size,
            p.hello.clone(),
            secret,
        )?;
        let id = make_id()?;
        let wait = Instant::now();
        let peers = server.serve_id(&id, p.join)?;
        crate::note!(
            "verifybench worker: {} ranks joined in {:.1} s",
            peers.len() + 1,
            wait.elapsed().as_secs_f64()
        );
        Ok(Met::Rank0 {
            server: Box::new(server),
            id,
        })
    } else {
        Ok(Met::Peer(Client::fetch_id(
            &p.ep,
            &p.hello,
            secret.as_ref(),
            p.join,
        )?))
    }
}

/// The last resort behind the rank's own deadline: a rank that neither made progress nor left
/// through NCCL's abort within [`super::run::GRACE`] of its `--timeout` deadline (a wait that
/// cannot poll, such as `ncclCommInitRank` with a dead peer) exits. Returns the flag that
/// ends the watch once the rank has left its run.
fn backstop(watch: &Watch, rank: usize) -> Arc<AtomicBool> {
    let done = Arc::new(AtomicBool::new(false));
    let (w, d) = (watch.clone(), done.clone());
    let limit = watch.timeout().unwrap_or_default().as_secs_f64();
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(200));
        if d.load(Ordering::SeqCst) {
            return;
        }
        if w.deadline()
            .is_some_and(|t| Instant::now() > t + super::run::GRACE)
        {
            eprintln!(
                "Error: rank {rank} made no progress for {limit:.0} s (--timeout) and did not \
                 leave through NCCL's abort; exiting"
            );
            std::process::exit(1);
        }
    });
    done
}

/// Runs this rank of an externally launched verify replay. Rank 0 returns the gathered record
/// for the caller to export and print; the other ranks return `None` once rank 0 has their
/// timings.
pub(crate) fn run(a: &WorkerRequest) -> anyhow::Result<Option<Record>> {
    let started = crate::util::now_utc();
    let p = plan(a, &env_map())?;
    crate::note!("verifybench worker: {}", p.info.describe_rendezvous());
    crate::note!("verifybench worker: {}", access_note(&p));
    comm::libs::prepare(a.nccl_lib.as_deref())?;
    let met = meet(&p, || comm::nccl::unique_id().map_err(anyhow::Error::new))?;
    let (rank, n) = (p.info.rank, p.info.world_size);
    // the rank's own deadline: every wait of the run polls it and, past it, aborts NCCL
    let watch = Watch::new(Some(p.timeout));
    let done = backstop(&watch, rank);
    let setup = |id| RankSetup {
        rank,
        nranks: n,
        device: p.info.gpu,
        id,
        fault: None,
        p2p: Default::default(),
        affinity: a.cpu_affinity.clone(),
        watch: watch.clone(),
    };
    match met {
        Met::Rank0 { mut server, id } => {
            let mine = run_rank(setup(id), &p.job, |_| {});
            done.store(true, Ordering::SeqCst);
            let mine = match mine {
                Ok(r) => r,
                Err(e) => {
                    server.abort(&format!("rank 0 failed: {e:#}"));
                    return Err(e.context("rank 0 failed"));
                }
            };
            let mut results: Vec<RankResult> = vec![mine];
            for (rank, bytes) in server.gather(p.timeout)? {
                let r: RankResult = serde_json::from_slice(&bytes).map_err(|e| {
                    anyhow::anyhow!("rank {rank} sent a result that is not JSON: {e}")
                })?;
                results.push(r);
            }
            results.sort_by_key(|r| r.rank);
            let launcher = format!("external ({})", p.info.source.name());
            let prov = || super::run::provenance(&launcher, started, &results);
            let rec = super::run::verify_record(&p.job, &results, a.repeat.rank_time, prov)?;
            Ok(Some(rec))
        }
        Met::Peer(mut client) => {
            let mine = run_rank(setup(*client.id()), &p.job, |_| {});
            done.store(true, Ordering::SeqCst);
            match mine {
                Ok(r) => {
                    client.send_result(&serde_json::to_vec(&r)?, p.join)?;
                    crate::note!("verifybench worker: rank {rank} sent its timings to rank 0");
                    Ok(None)
                }
                Err(e) => {
                    let _ = client.send_failure(&format!("{e:#}"), p.join);
                    Err(e.context(format!("rank {rank} failed")))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rendezvous_waits_as_long_as_timeout_unless_told_otherwise() {
        assert_eq!(join_wait(None, 3.0), Duration::from_secs(3));
        assert_eq!(join_wait(Some(120.0), 3.0), Duration::from_secs(120));
        assert_eq!(join_wait(None, 0.2), Duration::from_secs(1));
    }

    /// The plan of rank `rank` of 2 meeting at `ep` with `--timeout timeout`.
    fn plan_of(rank: usize, ep: Endpoint, timeout: f64) -> Plan {
        let x = ExplicitRank {
            rank: Some(rank),
            world_size: Some(2),
            local_rank: None,
            rendezvous: Some(ep),
        };
        let info = detect(&BTreeMap::new(), &x).unwrap();
        Plan {
            ep: info.require_rendezvous().unwrap().clone(),
            secret: None,
            job: Job::Env,
            hello: Hello::here("2b1b", rank, 2),
            join: join_wait(None, timeout),
            timeout: Duration::from_secs_f64(timeout),
            info,
        }
    }

    fn free_port() -> u16 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }

    #[test]
    fn rank_0_whose_peer_never_comes_ends_within_its_timeout() {
        // --timeout 1 s (the rendezvous' shortest wait)
        let p = plan_of(0, Endpoint::new("127.0.0.1", free_port()), 1.0);
        let t = Instant::now();
        let e = match meet(&p, || Ok([5; 128])) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("nobody came, yet rank 0 met them"),
        };
        let took = t.elapsed();
        // not before the timeout; the deadline it used is in its message, and the ceiling
        // (20 times the timeout, for a loaded machine) catches a hang only
        assert!(took >= Duration::from_millis(1000), "{took:?}");
        assert!(took < Duration::from_secs(20), "{took:?}");
        assert!(
            e.contains("timed out after 1 s: rank 1 of 2 never connected (no rank connected)"),
            "{e}"
        );
    }

    #[test]
    fn a_rank_whose_rank_0_never_comes_ends_within_its_timeout() {
        let p = plan_of(1, Endpoint::new("127.0.0.1", free_port()), 1.0);
        let t = Instant::now();
        let e = match meet(&p, || panic!("only rank 0 makes the id")) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("rank 0 never listened, yet the rank met it"),
        };
        // the deadline it used is in its message; the ceiling catches a hang only
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
        assert!(e.contains("could not reach rank 0 at 127.0.0.1:"), "{e}");
        assert!(e.contains(" within 1 s ("), "{e}");
    }

    #[test]
    fn every_rank_says_whether_its_rendezvous_is_open() {
        let mut p = plan_of(0, Endpoint::new("node1", 29500), 60.0);
        let open = access_note(&p);
        assert!(
            open.starts_with("the rendezvous at node1:29500 is open to any host that reaches it"),
            "{open}"
        );
        assert!(
            open.ends_with("no launcher job id keeps other jobs' ranks out"),
            "{open}"
        );
        p.info.job = Some("slurm:4711.0".into());
        let job = access_note(&p);
        assert!(job.contains("the launcher's job id (slurm:4711.0) keeps other jobs' ranks out by accident, not by design"), "{job}");
        let clause = job.rsplit("; ").next().unwrap();
        assert!(
            clause.starts_with("the launcher's job id") && !clause.contains("secret"),
            "the job id is not called a secret: {job}"
        );
        p.secret = Some((
            Secret::new(b"0123456789abcdef", "t").unwrap(),
            TOKEN_ENV.into(),
        ));
        assert_eq!(
            access_note(&p),
            "the rendezvous at node1:29500 admits only ranks that prove the token of VERIFYBENCH_RENDEZVOUS_TOKEN"
        );
    }
}
