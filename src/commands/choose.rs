//! `verifybench choose`: the request checked and resolved once (the ranks, the shapes, what is
//! compared), the key of this machine or of the modeled one, the decision file reused while
//! its key holds or the choice measured again (each changed part named), the P2P path on
//! virtual ranks when asked, the record written and printed. The work itself is
//! [`crate::choose`]'s.

use crate::backend;
use crate::choose::children::ChildMeasure;
use crate::choose::engines::Links;
use crate::choose::file::{self, Outcome, Why};
use crate::choose::key::Fingerprint;
use crate::choose::measure::{Measure, ModelMeasure};
use crate::choose::{self, on_one_gpu, ChooseRequest, Decision, Frame, Job};
use crate::comm;
use crate::record::{kinds, Provenance, Record, Source};
use crate::request::{ranks, BackendKind, GpuSpec, RankInputs, DEFAULT_RANKS, GPU_FLAGS};

/// Runs `verifybench choose`; the value is the exit code (1 when a virtual-rank check failed).
pub(crate) fn run(r: &ChooseRequest) -> anyhow::Result<i32> {
    r.check()?;
    if r.virtual_ranks && std::env::var_os("CUDA_DEVICE_MAX_CONNECTIONS").is_none() {
        // Up to 8 virtual ranks' kernels wait for each other on 8 streams of one GPU: 32
        // hardware queues (CUDA's maximum) keep them apart, as `selftest` does. Set before any
        // CUDA call, while this process has one thread.
        std::env::set_var("CUDA_DEVICE_MAX_CONNECTIONS", "32");
    }
    crate::launch::run::check_gpu_flags(&r.gpu, r.workload.tp)?;
    let mut files = crate::util::Files::new();
    r.workload.add_to(&mut files);
    r.model.add_to(&mut files);
    r.gpu.add_to(&mut files);
    files.output("--decision", r.decision.as_deref()).check()?;
    if r.virtual_ranks {
        // Refused before anything is measured where there is no GPU to run them on.
        comm::libs::prepare(r.gpu.nccl_lib.as_deref())?;
        one_gpu(r)?;
    }
    if r.children_on_model {
        return on_model(r, true);
    }
    let b = backend::resolve(r.backend, crate::output::quiet());
    match b.kind() {
        BackendKind::Nccl => measured(r),
        _ => on_model(r, false),
    }
}

/// The choice on the cost model: the key is the profile's, every figure modeled; with
/// `--debug-children-on-model`, the measured pipeline, each run a fresh `collective --backend
/// model` child, under the model's key.
fn on_model(r: &ChooseRequest, children: bool) -> anyhow::Result<i32> {
    let tp = ranks(
        &RankInputs::of(&r.gpu, r.workload.tp),
        DEFAULT_RANKS,
        &GPU_FLAGS,
    )?;
    let job = choose::job(r, tp)?;
    let (prof, label) = r.model.resolve()?;
    let hash = crate::model::schedule::fnv1a(&serde_json::to_vec(&prof)?);
    let key = Fingerprint::modeled(&label, hash, &job.key_of_work());
    let links = choose::links_of_profile(&prof.intra.kind);
    let mut base = Provenance::here(BackendKind::Model.name(), crate::util::now_utc());
    base.model_profile = Some(label);
    if !children {
        let m = ModelMeasure {
            nranks: tp,
            model: r.model.clone(),
            launcher: r.gpu.launcher,
        };
        return finish(r, &job, key, links, &m, base);
    }
    let work = tempfile::tempdir()?;
    let m = child_measure(r, BackendKind::Model, tp, r.gpu.clone(), work.path())?;
    finish(r, &job, key, links, &m, base)
}

/// The measure of fresh `collective --backend B` children on `nranks` ranks of `gpu`, their
/// files under `work`.
fn child_measure(
    r: &ChooseRequest,
    backend: BackendKind,
    nranks: usize,
    gpu: GpuSpec,
    work: &std::path::Path,
) -> anyhow::Result<ChildMeasure> {
    Ok(ChildMeasure {
        exe: std::env::current_exe()?,
        backend,
        nranks,
        gpu,
        repeat: r.repeat,
        parent_env: crate::sweep::env::parent_env(),
        work_dir: work.to_path_buf(),
        timeout: std::time::Duration::from_secs_f64(2.0 * r.gpu.timeout + 60.0),
    })
}

/// The choice measured on this machine's GPUs, in fresh worker processes.
fn measured(r: &ChooseRequest) -> anyhow::Result<i32> {
    comm::libs::prepare(r.gpu.nccl_lib.as_deref())?;
    let present = comm::device_count();
    let tp = ranks(&RankInputs::of(&r.gpu, r.workload.tp), present, &GPU_FLAGS)?;
    let devices = crate::launch::run::select_devices(&r.gpu, Some(tp), present)?;
    let job = choose::job(r, tp)?;
    let id = crate::machine::identity(&devices)?;
    let key = Fingerprint::measured(&id, &job.key_of_work());
    let work = tempfile::tempdir()?;
    crate::sweep::signal::install()?;
    let gpu = GpuSpec {
        devices: Some(devices),
        gpus: None,
        ..r.gpu.clone()
    };
    let m = child_measure(r, BackendKind::Nccl, tp, gpu, work.path())?;
    let mut base = Provenance::here(BackendKind::Nccl.name(), crate::util::now_utc());
    base.launcher = Some(r.gpu.launcher.name().into());
    base.driver_version = id.driver.clone();
    base.nccl_version = id.nccl_version.clone();
    base.nccl_library = id.nccl_library.clone();
    finish(r, &job, key, Links::Unknown, &m, base)
}

/// Reuses the decision file where its key holds, else measures on `m` and writes it; prints.
fn finish(
    r: &ChooseRequest,
    job: &Job,
    key: Fingerprint,
    links: Links,
    m: &dyn Measure,
    prov: Provenance,
) -> anyhow::Result<i32> {
    let shown = r
        .decision
        .as_deref()
        .map_or(String::new(), |p| p.display().to_string());
    let mut exit = 0;
    let out = file::reuse_or_measure(r.decision.as_deref(), r.remeasure, &key.clone(), |why| {
        if let Why::Changed(parts) = why {
            crate::note!(
                "verifybench: --decision {shown}: the key changed ({}): measuring again",
                parts.join("; ")
            );
        }
        let frame = Frame {
            request: r,
            job,
            key,
            links,
            modeled: m.source() == Source::Modeled,
        };
        let (rec, d, code) = measure(r, job, frame, m, prov)?;
        exit = code;
        Ok((rec, d))
    })?;
    let (rec, d, line) = match out {
        Outcome::Reused(b) => {
            let (rec, mut d) = *b;
            crate::note!("verifybench: --decision {shown}: its key holds: the decision is reused, nothing is measured (--remeasure measures again)");
            exit = virtual_ranks(r, job, &mut d)?;
            let line = format!("decision file: {shown} reused: its key holds, nothing was measured (--remeasure measures again)");
            (rec, d, line)
        }
        Outcome::Measured(b, why) => {
            let (rec, d) = *b;
            let line = match why {
                Why::NoFile => "decision file: none written (--decision FILE keeps it, and reuses it while its key holds)".to_string(),
                Why::New => format!("decision file: {shown} written"),
                Why::Remeasure => format!("decision file: {shown} measured again (--remeasure) and written"),
                Why::Changed(parts) => format!(
                    "decision file: {shown}: the key changed ({}): measured again and written",
                    parts.join("; ")
                ),
            };
            (rec, d, line)
        }
    };
    print(r, &rec, &d, &line)?;
    Ok(exit)
}

/// The rounds on `m`, the decision, the virtual-rank section when asked: the record (and the
/// exit code of the virtual-rank checks).
fn measure(
    r: &ChooseRequest,
    job: &Job,
    frame: Frame<'_>,
    m: &dyn Measure,
    mut prov: Provenance,
) -> anyhow::Result<(Record, Decision, i32)> {
    let total = job.points.len() * r.rounds;
    let mut done = 0;
    let measured = m.source() == Source::Measured;
    let mut progress =
        |p: &choose::measure::Point, round: usize, run: &choose::measure::PointRun| {
            done += 1;
            if measured {
                crate::note!(
                    "verifybench: [{done}/{total}] round {} {}: {}",
                    round + 1,
                    p.id,
                    run.failure.as_deref().unwrap_or("ok")
                );
            }
        };
    let interrupted =
        || crate::sweep::signal::INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst);
    let (mut d, rounds) = choose::measure_and_decide(frame, m, &interrupted, &mut progress)?;
    let code = virtual_ranks(r, job, &mut d)?;
    if let Some(run) = &rounds.provenance {
        if measured {
            prov.gpus = run.gpus.clone();
            prov.workers = run.workers.clone();
            prov.worker_nccl = run.worker_nccl.clone();
        }
    }
    prov.notes = rounds.notes.clone();
    prov.finished_utc = crate::util::now_utc();
    let rec = Record::other(m.source(), prov, kinds::ALLREDUCE_CHOICE, &d)?;
    Ok((rec, d, code))
}

/// The virtual-rank section when asked (`--virtual-ranks`), onto `d`; 1 when a check failed.
fn virtual_ranks(r: &ChooseRequest, job: &Job, d: &mut Decision) -> anyhow::Result<i32> {
    if !r.virtual_ranks {
        return Ok(0);
    }
    let gpu = one_gpu(r)?;
    crate::note!(
        "verifybench: {} ranks on GPU {gpu}: {}",
        job.tp,
        on_one_gpu::NOT_P2P
    );
    let v = on_one_gpu::run(gpu, job.tp, &job.shapes)?;
    let failed = !v.all_exact();
    d.virtual_ranks = Some(v);
    Ok(failed as i32)
}

/// The GPU the virtual ranks run on: the first of `--devices`, else GPU 0.
fn one_gpu(r: &ChooseRequest) -> anyhow::Result<usize> {
    let spec = GpuSpec {
        gpus: None,
        ..r.gpu.clone()
    };
    let d = crate::launch::run::select_devices_min(&spec, None, comm::device_count(), 1)?;
    Ok(d[0])
}

/// The text or the record on stdout.
fn print(r: &ChooseRequest, rec: &Record, d: &Decision, line: &str) -> anyhow::Result<()> {
    let mut rec = rec.clone();
    if let crate::record::Body::Other { data, .. } = &mut rec.body {
        *data = serde_json::to_value(d)?;
    }
    match r.format {
        crate::output::Format::Json => {
            crate::output::print_document((rec.to_json_pretty() + "\n").as_bytes())?
        }
        _ => print!("{}", choose::render::text(&rec, d, line)),
    }
    Ok(())
}
