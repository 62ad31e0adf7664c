//! Reading the user's evidence: traces (through [`crate::trace`]), the server log and NCCL
//! logs (through [`crate::evidence`]) and a sweep's results file (its best point, through
//! [`crate::sweep::rank`]). Every failure is a usage error naming the flag and the file.

use std::path::{Path, PathBuf};

use super::request::ExplainRequest;
use crate::error::usage;
use crate::evidence::{read_server_log, short_name, NcclLogText, ServerLog};
use crate::record::{Body, Mode};
use crate::trace::{Analysis, TraceRequest};

/// The evidence once read (`Default`: none, as `breakeven` and `report` price a step).
#[derive(Default)]
pub(crate) struct Gathered {
    pub(crate) trace: Option<Analysis>,
    pub(crate) server_log: Option<ServerLog>,
    pub(crate) nccl_logs: Vec<NcclLogText>,
    pub(crate) sweep: Option<SweepBest>,
    /// `--allreduce-choice`: a decision file of `verifybench choose`.
    pub(crate) allreduce_choice: Option<crate::choose::for_explain::LoadedChoice>,
}

/// Reads every file of `req` (no printing).
pub(crate) fn gather(req: &ExplainRequest) -> anyhow::Result<Gathered> {
    // In this order: the first file that cannot be read is the one named.
    Ok(Gathered {
        trace: (!req.traces.is_empty())
            .then(|| read_traces(&req.traces))
            .transpose()?,
        server_log: req.server_log.as_deref().map(read_server_log).transpose()?,
        nccl_logs: crate::evidence::read_nccl_logs(&req.nccl_logs)?,
        sweep: req.sweep.as_deref().map(read_sweep).transpose()?,
        allreduce_choice: req
            .allreduce_choice
            .as_deref()
            .map(crate::choose::for_explain::load)
            .transpose()?,
    })
}

/// The best point of a sweep's results file against its baseline (NCCL's defaults).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SweepBest {
    pub(crate) file: String,
    /// `NCCL_PROTO=LL` or `(defaults)`.
    pub(crate) setting: String,
    pub(crate) overrides: Vec<(String, String)>,
    /// Best / baseline, of the column ranked (graph when present).
    pub(crate) ratio: f64,
    pub(crate) graph: bool,
    pub(crate) mode: String,
    /// `measured` or `modeled` (or `mixed`).
    pub(crate) source: String,
    pub(crate) points: usize,
    /// The tensor-parallel size the sweep ran at.
    pub(crate) tp: u64,
}

/// Reads a sweep's results file and takes its fastest point (collectives-only runs when the
/// sweep has them, else full runs); a file without a baseline or without a finished point is
/// a usage error.
pub(crate) fn read_sweep(path: &Path) -> anyhow::Result<SweepBest> {
    let (points, _warnings) = crate::sweep::results::load(path)
        .map_err(|e| usage(format!("--sweep '{}': {e}", path.display())))?;
    let has = |m: Mode| {
        points.iter().any(|p| {
            p.verify.as_ref().is_some_and(
                |r| matches!(&r.body, Body::Verify(v) if v.runs.iter().any(|x| x.mode == m)),
            )
        })
    };
    let mode = if has(Mode::Comm) {
        Mode::Comm
    } else if has(Mode::Full) {
        Mode::Full
    } else {
        crate::usage_bail!(
            "--sweep '{}': no point with collectives ran (a compute-only sweep: NCCL settings cannot change it); give a sweep of --mode comm or full",
            path.display()
        );
    };
    let r = crate::sweep::rank::rank(&points, mode);
    let best = r.rows.iter().find(|row| row.wrong == 0).ok_or_else(|| {
        usage(format!(
            "--sweep '{}': no point finished with correct results",
            path.display()
        ))
    })?;
    let cell = if r.primary_graph {
        &best.graph
    } else {
        &best.eager
    };
    let ratio = cell.as_ref().and_then(|c| c.ratio).map(|x| x.0).ok_or_else(|| {
        usage(format!(
            "--sweep '{}': no baseline point (NCCL's defaults) to compare the best setting with; sweep with the defaults included",
            path.display()
        ))
    })?;
    Ok(SweepBest {
        file: short_name(path),
        setting: crate::sweep::rank::label(best.point),
        overrides: best.point.overrides.clone(),
        ratio,
        graph: r.primary_graph,
        mode: mode.name().into(),
        source: r.source.clone(),
        points: points.len(),
        tp: best.point.workload.tp,
    })
}

/// Analyses the traces of `--trace` (files or folders, one trace per rank).
pub(crate) fn read_traces(paths: &[PathBuf]) -> anyhow::Result<Analysis> {
    let a = crate::trace::analyse(&TraceRequest::new(paths.to_vec()))
        .map_err(|e| usage(format!("--trace: {e}")))?;
    if a.step.is_none() {
        crate::usage_bail!(
            "--trace {}: no complete step found (the collective sequence never repeats); give a trace of several verify steps",
            a.files.join(", ")
        );
    }
    Ok(a)
}
