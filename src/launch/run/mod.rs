//! Runs a job on every rank (threads or processes) and turns the rank results into a record:
//! here `verify` and `collective` on NCCL (the job built from the request, run, its record
//! completed); [`supervise`] starts and supervises the ranks, [`processes`] is the worker
//! processes' launcher, [`record`] builds the result record.

use std::collections::BTreeMap;
use std::time::Duration;

use super::job::{CollCase, CycleJob, Fault, Job, RankResult};
use crate::comm;
use crate::impls;
use crate::record::{
    algbw_gbps, Body, CollTiming, CollectiveResult, CollectiveRow, ImplRun, ImplTiming, Record,
    Source,
};
use crate::request::{CollectiveRequest, GpuSpec, Impl, Launcher, VerifyJob};

mod processes;
mod record;
mod supervise;

pub(crate) use super::devices::{check_gpu_flags, preflight, select_devices, select_devices_min};
pub(crate) use record::combine;
use record::state_rank_time;
pub(crate) use record::{export_trace, provenance, verify_record};
pub(crate) use supervise::{threads_drill, GRACE};

/// Operations per timed sample of `collective` (as nccl-tests times many back-to-back
/// operations): amortises the first operation's start-up and, in graph mode, the graph launch.
pub(crate) const COLLECTIVE_BATCH: u64 = 50;

/// How to start the ranks.
#[derive(Debug, Clone)]
pub(crate) struct LaunchSpec {
    pub(crate) devices: Vec<usize>,
    pub(crate) launcher: Launcher,
    /// Longest silence (no progress from a rank) before the run is aborted.
    pub(crate) timeout: Duration,
    /// Variables set for the workers on top of this process's environment.
    pub(crate) env_overrides: BTreeMap<String, String>,
    pub(crate) fault: Option<Fault>,
    /// Forward workers' stderr to ours.
    pub(crate) echo_stderr: bool,
    /// `--cpu-affinity` of every rank.
    pub(crate) affinity: super::affinity::CpuAffinity,
}

impl LaunchSpec {
    /// Ranks on `devices`, no overrides, no fault, workers' stderr echoed; `timeout_s` is the
    /// longest silence allowed (at least one second).
    pub(crate) fn new(devices: Vec<usize>, launcher: Launcher, timeout_s: f64) -> LaunchSpec {
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

/// Runs `job` on every rank and returns the ranks' results, in rank order.
pub(crate) fn run_job(spec: &LaunchSpec, job: &Job) -> anyhow::Result<Vec<RankResult>> {
    // One rank without collectives needs no communicator, hence no NCCL id.
    let id = if job.needs_communicator(spec.devices.len()) {
        comm::nccl::unique_id().map_err(anyhow::Error::new)?
    } else {
        [0; 128]
    };
    match spec.launcher {
        Launcher::Threads => supervise::run_threads(spec, job, id),
        Launcher::Processes => processes::run_processes(spec, job, id),
    }
}

fn spec_of(g: &GpuSpec, devices: Vec<usize>, fault: Option<Fault>, quiet: bool) -> LaunchSpec {
    LaunchSpec {
        fault,
        echo_stderr: !quiet,
        affinity: g.cpu_affinity.clone(),
        ..LaunchSpec::new(devices, g.launcher, g.timeout)
    }
}

pub(crate) use crate::record::vocab::ONE_RANK;

/// `verify --backend nccl`: the resolved job on its selected GPUs.
pub(crate) fn verify(j: &VerifyJob, started: String) -> anyhow::Result<Record> {
    let a = &j.request;
    let compute_only = a.compute_only();
    let devices = j.devices.clone();
    let one = devices.len() == 1;
    let schedule = &j.schedule;
    let fault = crate::launch::fault::rank_fault(a.inject_fault.as_deref())?;
    let mut notes = vec![];
    let run_on = runnable(&a.impls, &devices, &mut notes)?;
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
        host_gaps: Box::new(j.host_gaps.clone()),
        timing_pass: if compute_only || j.cycle.is_some() {
            0
        } else {
            super::timeline::pass_iterations(iters)
        },
        pdl: a.pdl,
        cycle: j.cycle.as_ref().map(|c| {
            Box::new(CycleJob {
                decode: c.decode.clone(),
                draft: c.draft.clone(),
            })
        }),
    };
    let spec = spec_of(&a.gpu, devices, fault, a.quiet);
    let results = run_job(&spec, &job)?;
    let prov = || provenance(spec.launcher.name(), started, &results);
    let mut rec = match &j.cycle {
        Some(c) => record::cycle_record(&job, c, &results, a.repeat.rank_time, prov)?,
        None => verify_record(&job, &results, a.repeat.rank_time, prov)?,
    };
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
/// (exit 2) naming the pair and the likely cause. One GPU has no peers:
/// NCCL only (the P2P kernels need two ranks), the P2P ones skipped with a line that says so.
fn runnable(
    asked: &[Impl],
    devices: &[usize],
    notes: &mut Vec<String>,
) -> anyhow::Result<Vec<Impl>> {
    if devices.len() == 1 {
        if !impls::p2p(asked).is_empty() {
            impls::skip(asked, "1 rank: the P2P all-reduces need two ranks", notes)?;
        }
        return Ok(vec![Impl::Nccl]);
    }
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

/// `collective --backend nccl`.
pub(crate) fn collective(a: &CollectiveRequest, started: String) -> anyhow::Result<Record> {
    comm::libs::prepare(a.gpu.nccl_lib.as_deref())?;
    let devices = select_devices_min(&a.gpu, None, comm::device_count(), 1)?;
    let n = devices.len();
    let sizes = a.sizes(n)?;
    let mut notes = vec![];
    if n > 1 {
        impls::check_collective(&a.impls, a.op, a.dtype, &sizes, n)?;
    }
    let run_on = runnable(&a.impls, &devices, &mut notes)?;
    if n == 1 {
        notes.push(format!(
            "{ONE_RANK}: a communicator of size 1 (NCCL copies in place or not at all; bus bandwidth is 0 by definition): the time is NCCL's launch and call cost"
        ));
    }
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

    #[test]
    fn a_launch_allows_at_least_a_second_and_takes_the_gpu_flags() {
        assert_eq!(
            LaunchSpec::new(vec![0], Launcher::Threads, 0.2).timeout,
            Duration::from_secs(1)
        );
        let g = GpuSpec {
            launcher: Launcher::Processes,
            timeout: 12.5,
            cpu_affinity: crate::launch::affinity::CpuAffinity::None,
            ..Default::default()
        };
        let fault = Fault {
            kind: crate::launch::job::FaultKind::Hang,
            rank: 1,
        };
        let s = spec_of(&g, vec![2, 3], Some(fault), true);
        assert_eq!((s.devices, s.launcher), (vec![2, 3], Launcher::Processes));
        assert_eq!(s.timeout, Duration::from_millis(12500));
        assert_eq!((s.fault, s.echo_stderr), (Some(fault), false));
        assert_eq!(s.affinity, crate::launch::affinity::CpuAffinity::None);
        assert!(spec_of(&g, vec![0], None, false).echo_stderr);
    }

    /// One GPU runs NCCL alone: a P2P implementation asked beside it is skipped with a note,
    /// asked alone it is a usage error.
    #[test]
    fn one_gpu_runs_nccl_and_skips_the_p2p_all_reduces_with_a_note() {
        let mut notes = vec![];
        assert_eq!(
            runnable(&[Impl::Nccl], &[0], &mut notes).unwrap(),
            [Impl::Nccl]
        );
        assert!(notes.is_empty());
        let asked = [Impl::Nccl, Impl::OneShot];
        assert_eq!(runnable(&asked, &[0], &mut notes).unwrap(), [Impl::Nccl]);
        assert_eq!(
            notes,
            ["1 rank: the P2P all-reduces need two ranks: oneshot skipped"]
        );
        let e = runnable(&[Impl::TwoShot], &[0], &mut notes).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
    }
}
