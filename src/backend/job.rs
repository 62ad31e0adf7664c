//! The one resolution of a `verify` request: [`verify_job`] turns the plain request that `cli/`
//! builds into a [`VerifyJob`] (every flag checked, the schedule file or config read once, the
//! backend picked, the GPUs selected, the schedule built, the host gaps drawn). Everything
//! below (the backends, the launchers, the workers) takes the job.

use super::Backend;
use crate::impls;
use crate::measure::pattern;
use crate::model::cycle::Cycle;
use crate::model::Schedule;
use crate::request::{BackendKind, ResolvedWorkload, VerifyJob, VerifyRequest};

/// Resolves `r` once, in the order users have always seen the errors: the export files, the
/// ranges of the workload flags (`--tp`, `--tokens`) and the GPU flags, the run flags, the
/// workload's files (`--tp` against a schedule file, the modes against what it holds), then
/// the backend `pick` returns, then what that backend needs ([`place`]). Every check the
/// request allows comes before any GPU is looked at, and every refusal is a usage error.
pub fn verify_job(
    r: &VerifyRequest,
    pick: impl FnOnce() -> Box<dyn Backend>,
) -> anyhow::Result<(Box<dyn Backend>, VerifyJob)> {
    r.files().check()?;
    r.workload.check_bounds()?;
    // One GPU runs one rank's share of a larger --tp (`--gpus 1 --tp 8`): its compute, and
    // with --mode comm/full (NCCL only: the cost model has no one-rank collectives) its
    // collectives on a communicator of one rank; everywhere else one rank runs per GPU, so
    // --tp and the GPU count must agree.
    let one_rank_share =
        r.gpu.ranks() == Some(1) && (r.compute_only() || r.backend == BackendKind::Nccl);
    let ranks = crate::launch::devices::check_gpu_flags(
        &r.gpu,
        if one_rank_share { None } else { r.workload.tp },
    )?;
    if r.launches_per_layer > 10_000 {
        crate::usage_bail!(
            "--launches-per-layer {} is absurd: a real layer launches tens of kernels; use at most 10000",
            r.launches_per_layer
        );
    }
    if r.pdl && r.mode.iter().all(|m| *m == crate::record::Mode::Comm) {
        crate::usage_bail!(
            "--pdl changes how the compute kernels are launched: add --mode compute or full (--mode comm launches none)"
        );
    }
    // NCCL asked for by name with collectives: the exact check runs whatever the rank count
    // (check_exact_length), so a schedule file too long for it is refused before its parse
    let w = if r.backend == BackendKind::Nccl && !r.compute_only() {
        r.workload.resolve_checking_length(&pattern::check_salted)?
    } else {
        r.workload.resolve()?
    };
    w.check_modes(&r.mode)?;
    check_stream_tokens(r, &w)?;
    if r.workload.phase == crate::model::Phase::Cycle {
        check_cycle(r)?;
    }
    let b = pick();
    crate::request::check_fresh_runs(r.fresh_runs)?;
    let job = place(b.kind(), r, w, ranks)?;
    Ok((b, job))
}

/// A GPU replay of compute streams each launch with one kernel that takes at most
/// [`crate::comm::MAX_STREAM_TOKENS`] tokens: `--backend nccl` (and `auto`, which would run it on
/// the GPUs it finds) refuses a forward of more with compute to replay, before any GPU is looked
/// at, also on a machine without one. The cost model prices any token count; `--mode comm`
/// streams nothing.
fn check_stream_tokens(r: &VerifyRequest, w: &ResolvedWorkload) -> anyhow::Result<()> {
    let gpu = matches!(r.backend, BackendKind::Nccl | BackendKind::Auto);
    let streams =
        r.mode.iter().any(|m| *m != crate::record::Mode::Comm) || r.launches_per_layer > 0;
    let (tokens, max) = (w.forward_tokens(), crate::comm::MAX_STREAM_TOKENS);
    if gpu && streams && tokens > max as u64 {
        crate::usage_bail!(
            "--tokens {tokens}: the GPU's weight-streaming kernels take at most {max} tokens per forward (MAX_STREAM_TOKENS); give at most {max}, --mode comm (collectives only), or --backend model (the cost model prices any count)"
        );
    }
    Ok(())
}

/// The exact check of a run with a communicator (two or more ranks, or any collectives) gives
/// every slot of every operation inputs of their own, which bounds the schedule's length
/// ([`pattern::check_salted`]); one rank's compute alone has no such check.
fn check_exact_length(r: &VerifyRequest, s: &Schedule, nranks: usize) -> anyhow::Result<()> {
    if nranks > 1 || !r.compute_only() {
        pattern::check_salted(s.ops.len())?;
    }
    Ok(())
}

/// What a backend of `kind` needs before the schedule (the NCCL backend: the GPUs, selected
/// against the tp asked for, and the libraries; the model: its injected faults), then the
/// schedule, built once at the rank count that runs (`ranks` where no GPU is counted), the
/// implementations checked against it and the host gaps drawn for it.
fn place(
    kind: BackendKind,
    r: &VerifyRequest,
    w: ResolvedWorkload,
    ranks: usize,
) -> anyhow::Result<VerifyJob> {
    let ((schedule, cycle), devices) = match kind {
        BackendKind::Nccl => on_gpus(r, &w)?,
        BackendKind::Model => {
            // The model backend has no worker to break: an injected fault fails the process.
            crate::launch::fault::check_p2p_fault(
                r.inject_fault.as_deref(),
                impls::p2p(&r.impls).len(),
            )?;
            crate::launch::fault::process_fault(r.inject_fault.as_deref());
            (build(&w, ranks as u64)?, vec![])
        }
        BackendKind::Mock => (build(&w, ranks as u64)?, vec![]),
        BackendKind::Auto => anyhow::bail!("the backend 'auto' is resolved before a job is placed"),
    };
    impls::check_verify(&r.impls, &schedule)?;
    let nranks = if devices.is_empty() {
        schedule.tp as usize
    } else {
        devices.len()
    };
    // (again where on_gpus checked it early: the GPUs selected are the ranks it counted)
    if kind == BackendKind::Nccl {
        check_exact_length(r, &schedule, nranks)?;
    }
    let host_gaps = r.host_gaps.resolve(&schedule, nranks)?;
    if cycle.is_some() && kind == BackendKind::Mock {
        crate::usage_bail!(
            "--phase cycle: the mock backend has no cycle; use --backend model or nccl"
        );
    }
    Ok(VerifyJob {
        request: r.clone(),
        file_note: w.file_note(),
        schedule,
        devices,
        nranks,
        host_gaps,
        cycle,
    })
}

/// A verify job's schedule, and with `--phase cycle` the cycle it is the verify of.
type Built = (Schedule, Option<Cycle>);

/// The schedule a verify job runs at `tp`: the workload's forward, or with `--phase cycle`
/// the cycle's verify, beside the cycle it belongs to.
fn build(w: &ResolvedWorkload, tp: u64) -> anyhow::Result<Built> {
    match w.flags.phase {
        crate::model::Phase::Cycle => {
            let c = w.cycle(tp)?;
            Ok((c.verify.clone(), Some(c)))
        }
        _ => Ok((w.build(tp)?, None)),
    }
}

/// What a replay of the cycle does not take: host gaps, custom all-reduces and the
/// per-collective pass belong to one forward's replay.
fn check_cycle(r: &VerifyRequest) -> anyhow::Result<()> {
    let g = &r.host_gaps;
    if g.gaps.gap.is_some() || g.gaps.late.is_some() || g.from.is_some() {
        crate::usage_bail!(
            "--phase cycle replays the cycle's forwards without host gaps: drop --host-gap-us, --late-rank and --host-gap-from (they shape one forward's replay)"
        );
    }
    if !crate::impls::p2p(&r.impls).is_empty() {
        crate::usage_bail!(
            "--phase cycle replays NCCL's collectives: drop --impl (the custom all-reduces are compared on one forward)"
        );
    }
    if let Some(p) = &r.export_trace {
        crate::usage_bail!(
            "--export-trace '{}': the per-collective pass is of one forward; drop --phase cycle or --export-trace",
            p.display()
        );
    }
    Ok(())
}

/// The NCCL backend's GPUs and schedule. A schedule whose tp the request fixes (`--tp`, the
/// schedule file's, `--gpus`/`--devices`) is built, and its length checked, before the GPUs
/// are looked at; else it is built for the GPUs selected.
fn on_gpus(r: &VerifyRequest, w: &ResolvedWorkload) -> anyhow::Result<(Built, Vec<usize>)> {
    let early = match w.requested_tp().or(r.gpu.ranks().map(|n| n as u64)) {
        Some(tp) => {
            let s = build(w, tp)?;
            check_exact_length(r, &s.0, r.gpu.ranks().unwrap_or(s.0.tp as usize))?;
            Some(s)
        }
        None => None,
    };
    // One GPU: rank 0's share of the --tp workload; with --mode comm/full its collectives run
    // on a communicator of one rank (NCCL's own path, no transfer).
    let devices = crate::launch::devices::select_devices_min(
        &r.gpu,
        w.requested_tp().map(|t| t as usize),
        crate::comm::device_count(),
        1,
    )?;
    if let (Some(p), true) = (&r.export_trace, r.compute_only()) {
        crate::usage_bail!(
            "--export-trace '{}': only runs with collectives have a per-collective pass; add --mode comm or full",
            p.display()
        );
    }
    // Also for one GPU: it makes NVRTC loadable for the streaming kernel (no communicator is
    // created then).
    crate::comm::libs::prepare(r.gpu.nccl_lib.as_deref())?;
    // The tp the request fixes is the GPUs selected (select_devices_min checks it), so the
    // schedule built early is the one they run.
    let s = match early {
        Some(s) => s,
        None => build(w, devices.len() as u64)?,
    };
    Ok((s, devices))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MockBackend;
    use crate::model::schedule_file::ScheduleFile;
    use crate::record::Mode;
    use crate::request::*;

    /// Writes a collectives-only TP2 schedule of 3 all-reduces with host gaps (what a trace
    /// exports) and returns it.
    fn schedule_file(path: &std::path::Path) -> crate::model::Schedule {
        let mut s = Workload {
            tp: Some(2),
            ..Default::default()
        }
        .schedule(8)
        .unwrap();
        s.ops
            .retain(|o| matches!(o, crate::model::Op::Collective { .. }));
        s.ops.truncate(3);
        ScheduleFile {
            schedule: s.clone(),
            host_gaps_us: Some(vec![4.0, 5.0, 6.0]),
            host_gaps_per_rank_us: None,
            origin: Some("three all-reduces".into()),
        }
        .save(path)
        .unwrap();
        s
    }

    /// A change to the plain request.
    type Edit<'a> = Box<dyn Fn(&mut VerifyRequest) + 'a>;

    fn mock() -> Box<dyn Backend> {
        Box::new(MockBackend)
    }

    #[test]
    fn a_job_carries_its_schedule_and_never_goes_back_to_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        let want = schedule_file(&path);
        let mut a = VerifyRequest::mock();
        a.workload.schedule_file = Some(path.clone());
        a.host_gaps.from = Some(path.clone());
        a.fresh_runs = 3;
        a.export.export_json = Some(dir.path().join("v.json"));
        let (b, job) = verify_job(&a, mock).unwrap();
        assert_eq!(b.kind(), BackendKind::Mock);
        assert_eq!(job.schedule, want);
        assert_eq!((job.nranks, job.devices.len()), (2, 0));
        assert!(!job.host_gaps.is_none());
        assert_eq!(
            job.file_note.as_deref(),
            Some(
                format!(
                    "schedule from the file {}: three all-reduces",
                    path.display()
                )
                .as_str()
            )
        );
        // the file is gone: running the job (three fresh runs, export, table) reads nothing
        std::fs::remove_file(&path).unwrap();
        assert_eq!(crate::commands::verify::run_job(&*b, &job).unwrap(), 0);
        let recs = crate::record::read_records(&dir.path().join("v.json")).unwrap();
        let crate::record::Body::Verify(v) = &recs[0].body else {
            panic!("a verify record")
        };
        assert_eq!((v.workload.tp, v.workload.n_all_reduce), (2, 3));
        assert_eq!(v.workload.schedule_hash, want.hash());
        // the plain request, by contrast, needs its file
        assert!(crate::backend::mock_verify(&a).is_err());
    }

    #[test]
    fn the_schedule_length_is_bounded_wherever_a_communicator_runs() {
        let mut s = Workload {
            tp: Some(2),
            ..Default::default()
        }
        .schedule(8)
        .unwrap();
        // 117,649 = 7^6 operations: the base-7 digits 0..6 of an index are its inputs' offsets
        s.ops = s.ops.iter().cycle().take(117_650).cloned().collect();
        let mut a = VerifyRequest::mock();
        let e = check_exact_length(&a, &s, 2).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("at most 117649 operations"), "{e}");
        // compute alone: one rank has no communicator, two have one (for their barrier)
        a.mode = vec![Mode::Compute];
        assert!(check_exact_length(&a, &s, 1).is_ok());
        assert!(check_exact_length(&a, &s, 2).is_err());
        a.mode = vec![Mode::Comm];
        assert!(check_exact_length(&a, &s, 1).is_err());
        s.ops.truncate(117_649);
        assert!(check_exact_length(&a, &s, 2).is_ok());
    }

    #[test]
    fn the_resolver_makes_each_check_with_the_message_users_see() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        schedule_file(&path);
        let shown = path.display();
        let never = || -> Box<dyn Backend> { panic!("a flag error comes before the backend") };
        let cases: Vec<(Edit, String, bool)> = vec![
            (
                Box::new(|a| a.launches_per_layer = 10_001),
                "--launches-per-layer 10001 is absurd: a real layer launches tens of kernels; use at most 10000".into(),
                false,
            ),
            (
                Box::new(|a| a.pdl = true),
                "--pdl changes how the compute kernels are launched: add --mode compute or full (--mode comm launches none)".into(),
                false,
            ),
            (
                Box::new(|a| {
                    a.workload.tp = Some(4);
                    a.workload.schedule_file = Some(path.clone());
                }),
                format!("--tp 4 but --schedule '{shown}' is a TP2 schedule: drop --tp (it is taken from the file) or give --tp 2"),
                false,
            ),
            (
                Box::new(|a| {
                    a.mode = vec![Mode::Full];
                    a.workload.schedule_file = Some(path.clone());
                }),
                format!("--mode full but --schedule '{shown}' has no compute ops to replay (a trace export holds the collectives only): use --mode comm"),
                false,
            ),
            (
                Box::new(|a| a.fresh_runs = 0),
                "--fresh-runs must be 1 to 100 (default 1)".into(),
                true,
            ),
            (
                Box::new(|a| a.workload.tp = Some(0)),
                "--tp 0: give 1 to 1024 ranks".into(),
                false,
            ),
            (
                // the range of --tp before its agreement with --gpus
                Box::new(|a| {
                    a.workload.tp = Some(0);
                    a.gpu.gpus = Some(2);
                }),
                "--tp 0: give 1 to 1024 ranks".into(),
                false,
            ),
        ];
        for (edit, want, after_pick) in cases {
            let mut a = VerifyRequest::mock();
            edit(&mut a);
            let e = if after_pick {
                verify_job(&a, mock)
            } else {
                verify_job(&a, never)
            }
            .err()
            .unwrap_or_else(|| panic!("'{want}' was not refused"));
            assert_eq!(e.to_string(), want);
            assert_eq!(crate::error::exit_code(&e), 2, "{want}");
        }
    }
}
