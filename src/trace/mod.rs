//! `verifybench trace`: a server's own profile in, the diagnosis of its verify step out.
//!
//! The pipeline, one file per stage: [`reader`] streams Kineto / Chrome traces (`.json`,
//! `.json.gz`, a folder of them, one rank per file, ranks parsed in parallel) into the few
//! events the analysis needs ([`raw`] is one event as read, [`event`] its direct parser);
//! [`names`] maps NCCL kernel names, Kineto's collective arguments
//! and NCCL's datatype numbers to one vocabulary; [`nccl_log`] reads NCCL's COLL log for the
//! sizes a trace lacks; [`extract`] turns one rank into its collectives, launches and steps
//! ([`steps`] finds the period); [`analysis`] matches collectives across ranks, splits their
//! time into transfer and waiting and words the diagnosis; [`render`] prints it; [`against`]
//! exports one step as a schedule file and diffs it against `plan` (the diff itself, plain data,
//! is [`plan_diff`]); [`breakeven`] gives the
//! step time and SGLang's accept length to the break-even; [`chrome`] writes Chrome traces the
//! reader reads back; [`synth`] makes synthetic traces for tests and benchmarks.
//!
//! Nothing here needs a GPU. Every figure printed is measured from the trace.

pub mod against;
pub mod analysis;
pub mod breakeven;
pub mod chrome;
pub mod event;
pub mod extract;
pub mod kernels;
pub mod names;
pub mod nccl_log;
pub mod plan_diff;
pub mod prefilter;
pub mod raw;
pub mod reader;
pub mod render;
pub mod steps;
pub mod synth;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::error::usage;
use crate::model::Schedule;
use crate::record::{Body, Provenance, Record, Source};
use crate::util::now_utc;

pub use analysis::Analysis;

/// Everything `verifybench trace` needs, free of any command-line parser.
#[derive(Debug, Clone)]
pub struct TraceRequest {
    /// Trace files and folders of traces.
    pub inputs: Vec<PathBuf>,
    /// A `record_function` label (a name, or a pattern with `*`) whose spans are the steps;
    /// without it `ProfilerStep#N` spans, else the period of the collectives.
    pub step_label: Option<String>,
    /// NCCL COLL logs (`NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL`), one per process.
    pub nccl_logs: Vec<PathBuf>,
    /// Ranks ran on more than one host: compare durations only.
    pub multi_host: bool,
    pub format: crate::output::Format,
    pub export_json: Option<PathBuf>,
    pub export_schedule: Option<PathBuf>,
    /// The config-derived schedule to diff the trace against (`--against-plan`).
    pub against_plan: Option<Schedule>,
    /// The tp of the exported schedule (`trace --tp N`): must equal the collectives' group
    /// size when that is above 1; sets it when the trace ran on one rank (group size 1, e.g.
    /// a TP-N schedule's per-rank sizes replayed on one GPU).
    pub export_tp: Option<u64>,
}

impl TraceRequest {
    /// A request for `inputs` with every option at its default.
    pub fn new(inputs: Vec<PathBuf>) -> TraceRequest {
        TraceRequest {
            inputs,
            step_label: None,
            nccl_logs: Vec::new(),
            multi_host: false,
            format: crate::output::Format::Table,
            export_json: None,
            export_schedule: None,
            against_plan: None,
            export_tp: None,
        }
    }
}

/// The trace files named by `inputs` (folders expanded, sorted), each with whether it was named
/// directly (its failure is fatal) or found in a folder (its failure skips it).
pub fn expand_inputs(inputs: &[PathBuf]) -> anyhow::Result<Vec<(PathBuf, bool)>> {
    if inputs.is_empty() {
        crate::usage_bail!("give at least one trace file or folder");
    }
    let mut out = Vec::new();
    for p in inputs {
        if p.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| usage(format!("'{}': cannot list: {e}", p.display())))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.is_file() && reader::is_trace_name(f))
                .collect();
            found.sort();
            if found.is_empty() {
                crate::usage_bail!(
                    "'{}': no traces in this folder (.json or .json.gz files)",
                    p.display()
                );
            }
            out.extend(found.into_iter().map(|f| (f, false)));
        } else if p.is_file() {
            out.push((p.clone(), true));
        } else {
            crate::usage_bail!("'{}': no such file or folder", p.display());
        }
    }
    Ok(out)
}

/// Why a parsed trace cannot be analysed, if it cannot.
fn unusable(t: &reader::TraceData) -> Option<String> {
    if t.gpu.is_empty() {
        return Some(format!(
            "'{}': no GPU events (no kernel, copy or set; {} events read): not a PyTorch profiler trace with CUDA activity",
            t.path.display(),
            t.events_seen
        ));
    }
    if t.comms.is_empty() && !t.gpu.iter().any(|g| g.kind.is_collective()) {
        let graphs = t
            .runtime
            .iter()
            .filter(|r| r.kind == reader::LaunchKind::Graph)
            .count();
        let why = if graphs > 0 {
            format!(" ({graphs} cudaGraphLaunch calls: the collectives ran inside CUDA graphs captured before profiling, and a one-rank graph holds no NCCL kernel)")
        } else {
            String::new()
        };
        let unknown = t
            .gpu
            .iter()
            .filter(|g| g.kind == reader::GpuKind::CommLike)
            .count();
        let why = if unknown > 0 {
            format!("{why} ({unknown} kernels look like collectives but are neither NCCL's nor in the table of custom kernels)")
        } else {
            why
        };
        return Some(format!(
            "'{}': no collectives (no NCCL or known custom collective kernel and no record_param_comms op){why}",
            t.path.display()
        ));
    }
    None
}

/// Reads, extracts and analyses the traces of `req` (no printing, no writing).
pub fn analyse(req: &TraceRequest) -> anyhow::Result<Analysis> {
    let files = expand_inputs(&req.inputs)?;
    let opts = reader::ReadOptions {
        step_label: req.step_label.clone(),
        custom_ops: false,
    };
    let log = if req.nccl_logs.is_empty() {
        None
    } else {
        let mut calls = Vec::new();
        for p in &req.nccl_logs {
            calls.extend(nccl_log::read(p)?);
        }
        Some(nccl_log::LogSummary::of(&calls))
    };
    let eopt = extract::ExtractOptions {
        step_label: req.step_label.clone(),
    };
    // Each file is read and reduced to its rank's collectives and steps in one go, so that only
    // as many raw event sets are alive as there are threads.
    type Got = Vec<Result<(extract::RankTrace, Option<usize>, bool), String>>;
    let parsed: Vec<(PathBuf, bool, Result<Got, String>)> = files
        .into_par_iter()
        .map(|(p, direct)| {
            let r = reader::read_trace(&p, &opts)
                .map_err(|e| e.to_string())
                .map(|ts| {
                    ts.into_iter()
                        .map(|t| match unusable(&t) {
                            Some(w) => Err(w),
                            None => Ok((
                                extract::extract(&t, t.rank.unwrap_or(0), log.as_ref(), &eopt),
                                t.rank,
                                t.rank_from_info,
                            )),
                        })
                        .collect()
                });
            (p, direct, r)
        })
        .collect();
    let mut skipped = Vec::new();
    let mut traces = Vec::new();
    for (p, direct, r) in parsed {
        let reason = match r {
            Err(e) => Some(e),
            Ok(ts) => {
                let mut why = None;
                for t in ts {
                    match t {
                        Err(w) => why = Some(w),
                        Ok(t) => traces.push(t),
                    }
                }
                why
            }
        };
        if let Some(reason) = reason {
            if direct {
                return Err(usage(reason));
            }
            skipped.push(analysis::Skipped {
                file: p.display().to_string(),
                reason,
            });
        }
    }
    if traces.is_empty() {
        let first = skipped
            .first()
            .map(|s| s.reason.clone())
            .unwrap_or_else(|| "no traces".into());
        crate::usage_bail!("no trace could be analysed: {first}");
    }
    // Ranks: distributedInfo, else the file name, else the order.
    let mut sources = Vec::new();
    let mut seen: std::collections::HashMap<usize, String> = Default::default();
    let mut ranks = Vec::new();
    for (i, (mut r, rank, from_info)) in traces.into_iter().enumerate() {
        let src = if from_info {
            reader::RankSource::DistributedInfo
        } else if rank.is_some() {
            reader::RankSource::FileName
        } else {
            reader::RankSource::Order
        };
        r.rank = rank.unwrap_or(i);
        sources.push(src);
        if let Some(other) = seen.insert(r.rank, r.file.clone()) {
            crate::usage_bail!(
                "'{}' and '{}' both hold rank {}: traces of different runs? give one trace per rank",
                other,
                r.file,
                r.rank
            );
        }
        ranks.push(r);
    }
    if let Some(label) = &req.step_label {
        if ranks.iter().all(|r| r.steps.is_empty()) {
            crate::usage_bail!(
                "--step-label '{label}': no span of that name with collectives in {}",
                ranks[0].file
            );
        }
    }
    let mut a = analysis::analyse(ranks, &sources, skipped, req.multi_host, log)?;
    if let Some(plan) = &req.against_plan {
        a.against_plan = Some(against::against_plan(&a, plan)?);
    }
    Ok(a)
}

/// The analysis in the record envelope (`kind: trace`, measured from the trace).
pub fn record(a: &Analysis, started: String) -> Record {
    let mut p = Provenance::here("none", started);
    p.notes.push(format!(
        "measured from profiler traces: {}",
        a.files.join(", ")
    ));
    Record::new(
        Source::Measured,
        p,
        Body::Other {
            name: "trace".into(),
            data: serde_json::to_value(a).expect("analysis serializes"),
        },
    )
}

/// Runs `verifybench trace`: analyse, print, export. The value is the exit code.
pub fn run(req: &TraceRequest) -> anyhow::Result<i32> {
    let started = now_utc();
    let a = analyse(req)?;
    for s in &a.skipped {
        crate::note!("verifybench: skipped {}", s.reason);
    }
    // Build every export before writing any, so that a failure writes nothing.
    let schedule = match &req.export_schedule {
        Some(_) => Some(against::schedule_file_at_tp(
            &a,
            req.against_plan.as_ref().map(|p| p.tokens).unwrap_or(0),
            req.export_tp,
        )?),
        None => None,
    };
    let rec = record(&a, started);
    if req.format.is_json() {
        println!("{}", rec.to_json_pretty());
    } else {
        print!("{}", render::render(&a));
    }
    if let (Some(p), Some(s)) = (&req.export_schedule, &schedule) {
        s.save(p)?;
        crate::note!(
            "verifybench: schedule of one step written to {}",
            p.display()
        );
    }
    if let Some(p) = &req.export_json {
        crate::util::write_file(p, (rec.to_json_pretty() + "\n").as_bytes())?;
    }
    Ok(0)
}

/// Reads one trace file into per-rank data (for callers that need the raw events).
pub fn read_file(path: &Path) -> anyhow::Result<Vec<reader::TraceData>> {
    reader::read_trace(path, &reader::ReadOptions::default()).map_err(|e| usage(e.to_string()))
}
