//! Runs a job on every rank (threads or processes) and turns the rank results into a record.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::job::{run_rank, CollCase, Fault, Job, RankResult, RankSetup};
use super::worker::{hex, Message};
use crate::comm;
use crate::error::usage;
use crate::measure::Summary;
use crate::model::CollectiveKind;
use crate::record::{
    algbw_gbps, Body, CollTiming, CollectiveResult, CollectiveRow, Mode, Part, Provenance, Record,
    Source, VerifyResult, VerifyRun, WorkerInfo, Workload,
};
use crate::request::{CollectiveRequest, GpuSpec, Launcher, VerifyRequest};

/// Operations per timed sample of `collective` (as nccl-tests times many back-to-back
/// operations): amortises the first operation's start-up and, in graph mode, the graph launch.
pub const COLLECTIVE_BATCH: u64 = 50;

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
        }
    }
}

/// Checks the GPU flags against a machine with `present` GPUs (usually
/// [`comm::device_count`]) and returns the device ordinals to use.
/// `wanted` is the rank count the workload needs (its --tp), if fixed.
pub fn select_devices(
    g: &GpuSpec,
    wanted: Option<usize>,
    present: usize,
) -> anyhow::Result<Vec<usize>> {
    if present == 0 {
        return Err(usage(
            "no GPU found (no CUDA driver or no device): the NCCL backend needs at least 2 GPUs; use --backend model for the cost model",
        ));
    }
    let devices: Vec<usize> = if let Some(d) = &g.devices {
        if let Some(bad) = d.iter().find(|&&x| x >= present) {
            return Err(usage(format!(
                "--devices names GPU {bad}, but this machine has {present} GPU{} (0..{})",
                if present == 1 { "" } else { "s" },
                present - 1
            )));
        }
        let mut seen = d.clone();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != d.len() {
            return Err(usage("--devices lists a GPU twice"));
        }
        d.clone()
    } else {
        let n = g.gpus.or(wanted).unwrap_or(present);
        if n > present {
            let flag = if g.gpus.is_some() { "--gpus" } else { "--tp" };
            return Err(usage(format!(
                "{flag} {n} needs {n} GPUs, but this machine has {present}"
            )));
        }
        (0..n).collect()
    };
    if devices.len() < 2 {
        return Err(usage(format!(
            "the NCCL backend needs at least 2 GPUs (got {}); use --backend model for the cost model",
            devices.len()
        )));
    }
    if let Some(w) = wanted {
        if w != devices.len() {
            return Err(usage(format!(
                "--tp {w} needs {w} ranks, but {} GPUs were selected; make --tp match --gpus/--devices",
                devices.len()
            )));
        }
    }
    Ok(devices)
}

enum Event {
    Progress,
    Done(usize, Box<anyhow::Result<RankResult>>),
}

/// Runs `job` on every rank and returns the ranks' results, in rank order.
pub fn run_job(spec: &LaunchSpec, job: &Job) -> anyhow::Result<Vec<RankResult>> {
    let id = comm::nccl::unique_id().map_err(anyhow::Error::new)?;
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
    let (tx, rx) = mpsc::channel::<(usize, Event)>();
    for (rank, &device) in spec.devices.iter().enumerate() {
        let tx = tx.clone();
        let job = job.clone();
        let setup = RankSetup {
            rank,
            nranks: n,
            device,
            id,
            fault: spec.fault,
        };
        std::thread::Builder::new()
            .name(format!("rank{rank}"))
            .spawn(move || {
                let ptx = tx.clone();
                let r = run_rank(setup, &job, move |_| {
                    let _ = ptx.send((rank, Event::Progress));
                });
                let _ = tx.send((rank, Event::Done(rank, Box::new(r))));
            })?;
    }
    drop(tx);
    let mut results: Vec<Option<RankResult>> = (0..n).map(|_| None).collect();
    let mut deadline = Instant::now() + spec.timeout;
    while results.iter().any(Option::is_none) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((_, Event::Progress)) => deadline = Instant::now() + spec.timeout,
            Ok((_, Event::Done(rank, r))) => match *r {
                Ok(res) => {
                    results[rank] = Some(res);
                    deadline = Instant::now() + spec.timeout;
                }
                Err(e) => {
                    return Err(e.context(format!(
                        "rank {rank} (GPU {}) failed; the run is aborted",
                        spec.devices[rank]
                    )))
                }
            },
            Err(_) => {
                anyhow::bail!(
                    "rank(s) {} made no progress for {:.0} s (--timeout); the run is aborted",
                    missing(&results),
                    spec.timeout.as_secs_f64()
                );
            }
        }
    }
    Ok(results.into_iter().map(Option::unwrap).collect())
}

/// The ranks that have not reported, as "0, 1".
fn missing(results: &[Option<RankResult>]) -> String {
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
            .env_clear()
            .envs(&env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(f) = spec.fault {
            let kind = match f.kind {
                super::job::FaultKind::Exit => "exit",
                super::job::FaultKind::Hang => "hang",
                super::job::FaultKind::Abort => "abort",
            };
            cmd.args(["--fault", &format!("{kind}:{}", f.rank)]);
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
    let mut results: Vec<Option<RankResult>> = (0..n).map(|_| None).collect();
    let mut deadline = Instant::now() + spec.timeout;
    while results.iter().any(Option::is_none) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((_, Some(Message::Progress(_)))) => deadline = Instant::now() + spec.timeout,
            Ok((rank, Some(Message::Result(r)))) => {
                results[rank] = Some(*r);
                deadline = Instant::now() + spec.timeout;
            }
            Ok((rank, Some(Message::Error(e)))) => {
                drop(children);
                anyhow::bail!(
                    "rank {rank} (GPU {}) failed: {e}; the other ranks were stopped{}",
                    spec.devices[rank],
                    tail_of(rank)
                );
            }
            Ok((rank, None)) => {
                if results[rank].is_none() {
                    let status = children.0[rank]
                        .wait()
                        .map(|s| s.to_string())
                        .unwrap_or_else(|e| e.to_string());
                    let pid = children.0[rank].id();
                    drop(children);
                    anyhow::bail!(
                        "rank {rank} (GPU {}, pid {pid}) died before reporting ({status}); the other ranks were stopped{}",
                        spec.devices[rank],
                        tail_of(rank)
                    );
                }
            }
            Err(_) => {
                drop(children);
                anyhow::bail!(
                    "rank(s) {} made no progress for {:.0} s (--timeout); all workers were stopped",
                    missing(&results),
                    spec.timeout.as_secs_f64()
                );
            }
        }
    }
    drop(children);
    Ok(results.into_iter().map(Option::unwrap).collect())
}

/// Per configuration: the slowest rank's time per sample, and the wrong elements of all ranks.
pub fn combine(results: &[RankResult], configs: usize) -> anyhow::Result<Vec<(Summary, u64)>> {
    let mut out = vec![];
    for c in 0..configs {
        let len = results
            .iter()
            .map(|r| r.samples.get(c).map_or(0, Vec::len))
            .min()
            .unwrap_or(0);
        let worst: Vec<f64> = (0..len)
            .map(|i| {
                results
                    .iter()
                    .map(|r| r.samples[c][i])
                    .fold(f64::MIN, f64::max)
            })
            .collect();
        let s = Summary::from_samples(&worst)
            .ok_or_else(|| anyhow::anyhow!("configuration {c} produced no timing samples"))?;
        let wrong = results
            .iter()
            .map(|r| r.wrong.get(c).copied().unwrap_or(0))
            .sum();
        out.push((s, wrong));
    }
    Ok(out)
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
    p
}

fn spec_of(g: &GpuSpec, devices: Vec<usize>, fault: Option<Fault>, quiet: bool) -> LaunchSpec {
    LaunchSpec {
        fault,
        echo_stderr: !quiet,
        ..LaunchSpec::new(devices, g.launcher, g.timeout)
    }
}

/// `verify --backend nccl`.
pub fn verify(a: &VerifyRequest, started: String) -> anyhow::Result<Record> {
    comm::libs::prepare(a.gpu.nccl_lib.as_deref())?;
    // `--tp`, else a schedule file's tp, picks how many GPUs to use.
    let devices = select_devices(
        &a.gpu,
        a.workload.requested_tp()?.map(|t| t as usize),
        comm::device_count(),
    )?;
    let schedule = a.workload.schedule(devices.len() as u64)?;
    let fault = crate::backend::fault::rank_fault(a.inject_fault.as_deref())?;
    let runs = a.runs();
    let job = Job::Verify {
        schedule: schedule.clone(),
        runs: runs.clone(),
        iters: a.repeat.iters.max(1),
        warmup: a.repeat.warmup,
        launches_per_layer: a.launches_per_layer,
    };
    let spec = spec_of(&a.gpu, devices, fault, a.quiet);
    let results = run_job(&spec, &job)?;
    verify_record(&job, &results, spec.launcher.name(), started)
}

/// The verify record of a finished verify job.
pub fn verify_record(
    job: &Job,
    results: &[RankResult],
    launcher: &str,
    started: String,
) -> anyhow::Result<Record> {
    verify_record_with(job, results, || provenance(launcher, started, results))
}

/// [`verify_record`] with the provenance from `provenance` (called once, after the checks).
fn verify_record_with(
    job: &Job,
    results: &[RankResult],
    provenance: impl FnOnce() -> Provenance,
) -> anyhow::Result<Record> {
    let Job::Verify {
        schedule,
        runs,
        iters,
        warmup,
        ..
    } = job
    else {
        anyhow::bail!("not a verify job");
    };
    let combined = combine(results, runs.len())?;
    let ncoll = schedule.n_collectives().max(1) as f64;
    let weights = schedule.weight_bytes_by_kind();
    let total_w = schedule.total_weight_bytes().max(1) as f64;
    let vruns = runs
        .iter()
        .zip(combined)
        .map(|(&(graph, mode), (s, wrong))| {
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
            }
        })
        .collect();
    let stream_gbps = results
        .iter()
        .filter_map(|r| r.stream_gbps)
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))));
    let mut p = provenance();
    let fixed = results
        .iter()
        .filter_map(|r| r.stream_fixed_us)
        .fold(None, |m: Option<f64>, x| {
            Some(m.map_or(x, |m: f64| m.max(x)))
        });
    if let (Some(bw), Some(fx)) = (stream_gbps, fixed) {
        let nops = crate::launch::job::plan_steps(schedule, 0)
            .iter()
            .filter(|s| matches!(s, crate::launch::job::Step::Stream { .. }))
            .count();
        p.notes.push(format!(
            "compute prediction with a fixed cost per launch: {} B / {bw:.0} GB/s + {nops} streaming launches x {fx:.2} us (a minimal streaming launch, same run) = {:.1} us",
            schedule.total_weight_bytes(),
            schedule.total_weight_bytes() as f64 / (bw * 1e3) + nops as f64 * fx
        ));
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
        }),
    ))
}

/// `collective --backend nccl`.
pub fn collective(a: &CollectiveRequest, started: String) -> anyhow::Result<Record> {
    comm::libs::prepare(a.gpu.nccl_lib.as_deref())?;
    let devices = select_devices(&a.gpu, None, comm::device_count())?;
    let n = devices.len();
    let sizes = a.sizes(n)?;
    let esz = a.dtype.size();
    let cases: Vec<CollCase> = sizes
        .iter()
        .map(|&s| CollCase {
            op: a.op,
            dtype: a.dtype,
            count: match a.op {
                CollectiveKind::AllReduce => (s / esz) as usize,
                CollectiveKind::AllGather | CollectiveKind::ReduceScatter => (s / esz) as usize / n,
            },
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
    let spec = spec_of(&a.gpu, devices, None, false);
    let results = run_job(&spec, &job)?;
    let combined = combine(&results, job.configs())?;
    let mut rows = vec![];
    let mut it = combined.into_iter();
    for &size in &sizes {
        let mut row = CollectiveRow {
            size_bytes: size,
            count: size / esz,
            eager: None,
            graph: None,
        };
        for &g in &graphs {
            let (s, wrong) = it.next().expect("one result per configuration");
            let alg = algbw_gbps(size, s.median_us);
            let t = CollTiming {
                time_us: s.median_us,
                algbw_gbps: alg,
                busbw_gbps: alg * a.op.bus_factor(n),
                wrong,
                summary: s,
            };
            if g {
                row.graph = Some(t);
            } else {
                row.eager = Some(t);
            }
        }
        rows.push(row);
    }
    let p = provenance(spec.launcher.name(), started, &results);
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
            init_s: 0.5 + rank as f64,
            stream_gbps: None,
            stream_fixed_us: None,
        }
    }

    #[test]
    fn combine_takes_the_slowest_rank_per_sample_and_sums_wrong_elements() {
        let r = [
            rank(0, vec![vec![10.0, 30.0, 20.0], vec![5.0]], vec![0, 2]),
            rank(1, vec![vec![12.0, 25.0, 21.0, 99.0], vec![6.0]], vec![1, 0]),
        ];
        let c = combine(&r, 2).unwrap();
        assert_eq!(c.len(), 2);
        // per sample the maximum over ranks: 12, 30, 21 (rank 1's extra sample has no pair)
        assert_eq!(c[0].0.n, 3);
        assert_eq!(c[0].0.median_us, 21.0);
        assert_eq!(c[0].0.max_us, 30.0);
        assert_eq!(c[0].1, 1);
        assert_eq!(c[1].0.median_us, 6.0);
        assert_eq!(c[1].1, 2);
        // a configuration without samples is an error, not a zero
        assert!(combine(&r, 3).is_err());
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
        let rec = verify_record_with(&job, &r, || {
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
        assert!(
            verify_record_with(&Job::Env, &r, || panic!("no provenance for a wrong job")).is_err()
        );
    }

    fn gpus(gpus: Option<usize>, devices: Option<Vec<usize>>) -> GpuSpec {
        GpuSpec {
            gpus,
            devices,
            ..Default::default()
        }
    }

    #[test]
    fn select_devices_checks_the_flags_against_the_machine() {
        let usage = |r: anyhow::Result<Vec<usize>>| {
            let e = r.unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{e}");
            e.to_string()
        };
        assert_eq!(
            select_devices(&gpus(None, None), None, 4).unwrap(),
            vec![0, 1, 2, 3]
        );
        assert_eq!(
            select_devices(&gpus(Some(2), None), None, 4).unwrap(),
            vec![0, 1]
        );
        assert_eq!(
            select_devices(&gpus(None, None), Some(2), 8).unwrap(),
            vec![0, 1]
        );
        assert_eq!(
            select_devices(&gpus(None, Some(vec![3, 1])), Some(2), 4).unwrap(),
            vec![3, 1]
        );
        assert!(usage(select_devices(&gpus(None, None), None, 0)).contains("no GPU found"));
        assert!(
            usage(select_devices(&gpus(None, Some(vec![0, 4])), None, 4))
                .contains("--devices names GPU 4, but this machine has 4 GPUs (0..3)")
        );
        assert!(usage(select_devices(&gpus(None, Some(vec![1, 1])), None, 4)).contains("twice"));
        assert!(usage(select_devices(&gpus(Some(8), None), None, 4)).starts_with("--gpus 8"));
        assert!(usage(select_devices(&gpus(None, None), Some(8), 4)).starts_with("--tp 8"));
        assert!(usage(select_devices(&gpus(None, None), None, 1)).contains("at least 2 GPUs"));
        assert!(usage(select_devices(&gpus(Some(2), None), Some(4), 8))
            .contains("--tp 4 needs 4 ranks, but 2 GPUs were selected"));
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
