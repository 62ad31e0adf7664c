//! The one seam between a request and its numbers, in the manner of hyperfine's `Executor` /
//! `MockExecutor`: a [`Backend`] turns a [`VerifyRequest`] or [`CollectiveRequest`] into a
//! result record.
//!
//! - [`NcclBackend`]: real NCCL collectives on real GPUs, through the launchers of
//!   [`crate::launch`]; its records are `measured`.
//! - [`ModelBackend`]: the cost model of [`crate::costmodel`]; its records are `modeled`.
//! - [`MockBackend`]: deterministic FAKE numbers for tests, backend `mock` in the provenance,
//!   labelled modeled, never measured.
//!
//! [`resolve`] is the only place that picks one (`auto` means NCCL with 2+ GPUs);
//! [`verify_job`] resolves a verify request once into the job the backends run. Fault
//! injection for tests lives in [`fault`]. What a command does with the record (export, print,
//! exit code) lives in [`crate::commands`], not here.

mod job;
mod mock;

use crate::impls;
use crate::record::{Body, Mode, Provenance, Record, Source};
use crate::request::{BackendKind, CollectiveRequest, VerifyJob};
use crate::util::now_utc;

pub use job::verify_job;
pub use mock::MockBackend;
pub(crate) use mock::FAKE_SPREAD_NOTE;

/// Turns a request into a result record.
pub trait Backend {
    /// Which backend this is (its `name()` is the provenance's `backend`).
    fn kind(&self) -> BackendKind;
    /// `verify`: the replay of a resolved verify job ([`verify_job`]).
    fn run_verify(&self, j: &VerifyJob) -> anyhow::Result<Record>;
    /// `collective`: one collective over a size range.
    fn collective(&self, r: &CollectiveRequest) -> anyhow::Result<Record>;
}

/// Real NCCL on real GPUs (the launchers of [`crate::launch`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NcclBackend;

impl Backend for NcclBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Nccl
    }
    fn run_verify(&self, j: &VerifyJob) -> anyhow::Result<Record> {
        crate::launch::verify(j, now_utc())
    }
    fn collective(&self, r: &CollectiveRequest) -> anyhow::Result<Record> {
        crate::launch::collective(r, now_utc())
    }
}

/// The calibrated cost model: runs anywhere, every number labelled modeled.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ModelBackend;

impl Backend for ModelBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Model
    }
    fn run_verify(&self, j: &VerifyJob) -> anyhow::Result<Record> {
        let started = now_utc();
        let (a, s, n, gaps) = (&j.request, &j.schedule, j.nranks, &j.host_gaps);
        if let Some(c) = &j.cycle {
            let m =
                crate::costmodel::cycle::verify_cycle(c, n, &a.runs(), a.gpu.launcher, &a.model)?;
            let mut p = Provenance::here(self.kind().name(), started);
            p.launcher = Some(a.gpu.launcher.name().into());
            p.model_profile = Some(m.profile);
            p.notes = m.notes;
            return Ok(Record::new(Source::Modeled, p, Body::Verify(m.result)));
        }
        if let Some(f) = &a.export_trace {
            crate::usage_bail!(
                "--export-trace '{}' writes the measured per-collective pass; the model backend times nothing (use --backend nccl)",
                f.display()
            );
        }
        let mut m = crate::costmodel::verify(s, n, &a.runs(), a.gpu.launcher, &a.model)?;
        if n >= 2 {
            for r in m.result.runs.iter_mut().filter(|r| r.mode != Mode::Compute) {
                let (ic, host_added) = crate::costmodel::in_collective(
                    s,
                    n,
                    r.graph,
                    r.mode,
                    gaps,
                    a.gpu.launcher,
                    &a.model,
                )?;
                r.in_collective = Some(ic);
                if let Some(extra) = host_added {
                    crate::costmodel::add_host_timeline(r, extra, s.n_collectives());
                }
            }
        }
        let (mut result, mut notes) = (m.result, m.notes);
        let custom = impls::p2p(&a.impls);
        if !custom.is_empty() {
            let (prof, _) = a.model.resolve()?;
            match crate::costmodel::custom::unavailable_reason(&prof) {
                Some(why) => impls::skip(&a.impls, &why, &mut notes)?,
                None => {
                    for imp in custom {
                        result.p2p.extend(crate::costmodel::custom::verify_runs(
                            &prof,
                            s,
                            s.tp as usize,
                            imp,
                            &result.runs,
                        )?);
                    }
                    notes.push(impls::VERIFY_NOTE.into());
                    notes.push(p2p_model_note(&prof));
                }
            }
            impls::drop_unasked_nccl_runs(&a.impls, &mut result);
        }
        let mut p = Provenance::here(self.kind().name(), started);
        p.launcher = Some(a.gpu.launcher.name().into());
        p.model_profile = Some(m.profile);
        p.notes = notes;
        if a.pdl {
            p.notes.push("--pdl: not modeled: the cost model's compute is the schedule's bytes / streaming bandwidth, with no per-launch start-up or drain for PDL to overlap".into());
        }
        if !gaps.is_none() {
            p.notes.push(gaps.describe());
            p.notes.push("host gaps: the in-collective time (transfer + waiting) and the eager per-verify time are modeled with them (the per-verify time is the simulated host and GPU timeline plus the launch costs; its breakdown names the part the host gaps add), so verify >= in-collective >= transfer".into());
        }
        Ok(Record::new(Source::Modeled, p, Body::Verify(result)))
    }
    fn collective(&self, a: &CollectiveRequest) -> anyhow::Result<Record> {
        let started = now_utc();
        let n = a.ranks()?;
        let sizes = a.sizes(n)?;
        impls::check_collective(&a.impls, a.op, a.dtype, &sizes, n)?;
        let m = crate::costmodel::collective(
            a.op,
            a.dtype,
            &sizes,
            n,
            &a.graph.modes(),
            a.gpu.launcher,
            &a.model,
        )?;
        let (mut result, mut notes) = (m.result, m.notes);
        let custom = impls::p2p(&a.impls);
        if !custom.is_empty() {
            let (prof, _) = a.model.resolve()?;
            match crate::costmodel::custom::unavailable_reason(&prof) {
                Some(why) => impls::skip(&a.impls, &why, &mut notes)?,
                None => {
                    crate::costmodel::custom::collective_rows(
                        &prof,
                        &custom,
                        &mut result,
                        &a.graph.modes(),
                    )?;
                    notes.push(p2p_model_note(&prof));
                }
            }
            impls::drop_unasked_nccl(&a.impls, &mut result);
        }
        let mut p = Provenance::here(self.kind().name(), started);
        p.model_profile = Some(m.profile);
        p.notes = notes;
        Ok(Record::new(Source::Modeled, p, Body::Collective(result)))
    }
}

/// Where the modeled one-shot and two-shot times come from.
fn p2p_model_note(p: &crate::costmodel::profile::Profile) -> String {
    let l = crate::costmodel::custom::params(p);
    format!(
        "oneshot/twoshot MODELED (costmodel::custom): signal round {:.2} us, peer reads {:.0} GB/s ({})",
        l.signal_us, l.read_gbps, l.source
    )
}

/// Resolves `auto` (NCCL when at least two GPUs are present, else the cost model, saying so
/// on stderr unless `quiet`) and returns the backend of that kind.
pub(crate) fn resolve(requested: BackendKind, quiet: bool) -> Box<dyn Backend> {
    resolve_with(requested, quiet, crate::comm::device_count)
}

/// [`resolve`] for a job that needs at least `min_gpus` GPUs for `auto` to pick NCCL: 1 for
/// compute only (one GPU streams one rank's share), else 2.
pub(crate) fn resolve_min(
    requested: BackendKind,
    quiet: bool,
    min_gpus: usize,
) -> Box<dyn Backend> {
    if requested == BackendKind::Auto && min_gpus == 1 && crate::comm::device_count() == 1 {
        return Box::new(NcclBackend);
    }
    resolve(requested, quiet)
}

/// A plain `verify` request's record on the mock backend, through [`verify_job`]'s checks.
#[cfg(test)]
pub(crate) fn mock_verify(r: &crate::request::VerifyRequest) -> anyhow::Result<Record> {
    let (b, job) = verify_job(r, || Box::new(MockBackend))?;
    b.run_verify(&job)
}

/// [`resolve`] with the GPU count from `count` (tests inject it).
pub(crate) fn resolve_with(
    requested: BackendKind,
    quiet: bool,
    count: impl FnOnce() -> usize,
) -> Box<dyn Backend> {
    match requested {
        BackendKind::Nccl => Box::new(NcclBackend),
        BackendKind::Model => Box::new(ModelBackend),
        BackendKind::Mock => Box::new(MockBackend),
        BackendKind::Auto => {
            let n = count();
            if n >= 2 {
                Box::new(NcclBackend)
            } else {
                if !quiet {
                    eprintln!(
                        "verifybench: {} GPU{} found, so the numbers below are MODELED by the cost model, not measured (use --backend nccl on a machine with 2+ GPUs)",
                        n,
                        if n == 1 { "" } else { "s" }
                    );
                }
                Box::new(ModelBackend)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_picks_nccl_only_with_two_gpus() {
        for (n, want) in [
            (0, BackendKind::Model),
            (1, BackendKind::Model),
            (2, BackendKind::Nccl),
            (8, BackendKind::Nccl),
        ] {
            assert_eq!(resolve_with(BackendKind::Auto, true, || n).kind(), want);
        }
        for k in [BackendKind::Nccl, BackendKind::Model, BackendKind::Mock] {
            let b = resolve_with(k, true, || panic!("an explicit kind needs no GPU count"));
            assert_eq!(b.kind(), k);
        }
    }
}
