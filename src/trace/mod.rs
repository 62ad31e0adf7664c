//! `verifybench trace`: a server's own profile in, the diagnosis of its verify step out.
//!
//! The pipeline, one file per stage: [`reader`] streams Kineto / Chrome traces (`.json`,
//! `.json.gz`, a folder of them, one rank per file, ranks parsed in parallel) into the few
//! events the analysis needs ([`raw`] is one event as read, [`event`] its direct parser);
//! [`names`] maps NCCL kernel names, Kineto's collective arguments
//! and NCCL's datatype numbers to one vocabulary; [`nccl_log`] reads NCCL's COLL log for the
//! sizes a trace lacks (and, given alone, says per process how the calls ran), and
//! [`logmatch`] matches its processes to the traced ranks by pid; [`extract`] turns one rank into its collectives, launches and steps
//! ([`steps`] finds the period); [`analysis`] matches collectives across ranks, splits their
//! time into transfer and waiting and words the diagnosis; [`render`] prints it; [`against`]
//! exports one step as a schedule file and diffs it against `plan` (the diff itself, plain data,
//! is [`plan_diff`]); [`breakeven`] gives the
//! step time to the break-even; [`chrome`] writes Chrome traces the
//! reader reads back. Synthetic traces for tests and benchmarks are made outside the library,
//! by the support code in `tests/support/synth.rs`.
//!
//! Nothing here needs a GPU. Every figure printed is measured from the trace.

pub(crate) mod against;
pub(crate) mod analysis;
pub(crate) mod breakeven;
pub(crate) mod chrome;
pub(crate) mod event;
pub(crate) mod extract;
pub(crate) mod kernels;
pub(crate) mod limits;
pub(crate) mod logmatch;
pub(crate) mod names;
pub mod nccl_log;
pub(crate) mod plan_diff;
pub mod prefilter;
pub(crate) mod raw;
pub mod reader;
pub(crate) mod render;
pub(crate) mod steps;
/// Synthetic traces for the unit tests: the support code the integration tests and benchmarks
/// share.
#[cfg(test)]
#[path = "../../tests/support/synth.rs"]
#[allow(unreachable_pub)]
mod synth;
#[cfg(test)]
mod tests;
pub(crate) mod traps;

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::error::usage;
use crate::model::Schedule;

pub(crate) use analysis::Analysis;

/// Everything `verifybench trace` needs, free of any command-line parser.
#[derive(Debug, Clone, Default)]
pub struct TraceRequest {
    /// Trace files and folders of traces.
    pub(crate) inputs: Vec<PathBuf>,
    /// A `record_function` label (a name, or a pattern with `*`) whose spans are the steps;
    /// without it `ProfilerStep#N` spans, else the period of the collectives.
    pub step_label: Option<String>,
    /// NCCL COLL logs (`NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL`), one per process.
    pub(crate) nccl_logs: Vec<PathBuf>,
    /// Ranks ran on more than one host: compare durations only.
    pub(crate) multi_host: bool,
    pub(crate) format: crate::output::Format,
    pub(crate) export_json: Option<PathBuf>,
    pub(crate) export_schedule: Option<PathBuf>,
    /// The config-derived schedule to diff the trace against (`--against-plan`).
    pub(crate) against_plan: Option<Schedule>,
    /// The tp of the exported schedule (`trace --tp N`): must equal the collectives' group
    /// size when that is above 1; sets it when the trace ran on one rank (group size 1, e.g.
    /// a TP-N schedule's per-rank sizes replayed on one GPU).
    pub(crate) export_tp: Option<u64>,
    /// `--assume-size BYTES`: the input bytes of every collective of the exported step whose
    /// size neither the trace nor a log gives (named by position in the export and on screen).
    pub(crate) assume_size: Option<u64>,
}

impl TraceRequest {
    /// A request for `inputs` with every option at its default.
    pub fn new(inputs: Vec<PathBuf>) -> TraceRequest {
        TraceRequest {
            inputs,
            ..Default::default()
        }
    }
}

/// The files named by `inputs` (folders searched recursively for traces and logs, sorted),
/// each with whether it was named directly (its failure is fatal) or found in a folder (its
/// failure skips it, and is named).
pub(crate) fn expand_inputs(inputs: &[PathBuf]) -> anyhow::Result<Vec<(PathBuf, bool)>> {
    if inputs.is_empty() {
        crate::usage_bail!("give at least one trace file or folder");
    }
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
        let rd = std::fs::read_dir(dir)
            .map_err(|e| usage(format!("'{}': cannot list: {e}", dir.display())))?;
        for e in rd.filter_map(|e| e.ok()) {
            let f = e.path();
            if f.is_dir() {
                walk(&f, out)?;
            } else if f.is_file() && (reader::is_trace_name(&f) || reader::is_log_name(&f)) {
                out.push(f);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    for p in inputs {
        if p.is_dir() {
            let mut found = Vec::new();
            walk(p, &mut found)?;
            found.sort();
            if found.is_empty() {
                crate::usage_bail!(
                    "'{}': no traces in this folder or below, and no logs (.json, .json.gz, .log, .txt files)",
                    p.display()
                );
            }
            out.extend(found.into_iter().map(|f| (f, false)));
        } else if p.is_file() {
            out.push((p.clone(), true));
        } else if let Some(e) = crate::util::read::refuse_special(p, "trace") {
            return Err(e);
        } else {
            crate::usage_bail!("'{}': no such file or folder", p.display());
        }
    }
    Ok(out)
}

/// The inputs sorted into traces and NCCL logs by their content (JSON or not), with the
/// files of folders that are neither (named, with why).
#[derive(Default)]
pub(crate) struct Inputs {
    pub(crate) traces: Vec<(PathBuf, bool)>,
    /// Logs with what their lines gave.
    pub(crate) logs: Vec<(PathBuf, nccl_log::Parsed)>,
    pub(crate) skipped: Vec<analysis::Skipped>,
}

/// Sorts `req`'s inputs and `--nccl-log` files; a file named directly that is neither a
/// trace nor a COLL log is an error naming it.
pub(crate) fn classify(req: &TraceRequest) -> anyhow::Result<Inputs> {
    let mut ins = Inputs::default();
    for p in &req.nccl_logs {
        let parsed = nccl_log::read_parsed(p).map_err(|e| usage(format!("--nccl-log: {e}")))?;
        ins.logs.push((p.clone(), parsed));
    }
    for (p, direct) in expand_inputs(&req.inputs)? {
        let reason = match reader::looks_like_json(&p) {
            Ok(true) => {
                ins.traces.push((p, direct));
                continue;
            }
            Ok(false) => match nccl_log::read_parsed(&p) {
                Ok(parsed) => {
                    ins.logs.push((p, parsed));
                    continue;
                }
                Err(e) => format!(
                    "'{}': neither a trace (not JSON) nor an NCCL COLL log: {e}",
                    p.display()
                ),
            },
            Err(e) => e.to_string(),
        };
        if direct {
            return Err(usage(reason));
        }
        ins.skipped.push(analysis::Skipped {
            file: p.display().to_string(),
            reason,
        });
    }
    Ok(ins)
}

impl Inputs {
    /// The NCCL logs' file names.
    fn log_files(&self) -> Vec<String> {
        self.logs
            .iter()
            .map(|(p, _)| p.display().to_string())
            .collect()
    }
}

/// The report of NCCL logs given without any trace.
pub(crate) fn log_report(ins: &Inputs) -> nccl_log::LogReport {
    let parsed: Vec<nccl_log::Parsed> = ins.logs.iter().map(|(_, p)| p.clone()).collect();
    nccl_log::report(ins.log_files(), &parsed)
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
    let ins = classify(req)?;
    analyse_inputs(req, ins)
}

/// [`analyse`] of inputs already sorted.
pub(crate) fn analyse_inputs(req: &TraceRequest, ins: Inputs) -> anyhow::Result<Analysis> {
    refuse_without_traces(&ins)?;
    let log_files = ins.log_files();
    let files = ins.traces;
    let opts = reader::ReadOptions {
        step_label: req.step_label.clone(),
        custom_ops: false,
    };
    let log_calls = || ins.logs.iter().flat_map(|(_, p)| &p.calls);
    let log = (!ins.logs.is_empty()).then(|| nccl_log::LogSummary::of(log_calls()));
    let log_procs = logmatch::processes(log_calls());
    let parsed = read_each(files, &opts, &log_procs, log.as_ref());
    let (traces, skipped) = keep_readable(parsed, ins.skipped)?;
    let (ranks, sources) = number_ranks(traces)?;
    if let Some(label) = &req.step_label {
        if ranks.iter().all(|r| r.steps.is_empty()) {
            crate::usage_bail!(
                "--step-label '{label}': no span of that name with collectives in {}",
                ranks[0].file
            );
        }
    }
    let log_notes = match &log {
        Some(l) => logmatch::check(l, &log_procs, &log_files, &ranks)?,
        None => Vec::new(),
    };
    let mut a = analysis::analyse(ranks, &sources, skipped, req.multi_host, log)?;
    a.notes.extend(log_notes);
    if let Some(l) = &a.nccl_log {
        let filled = a
            .rank_traces
            .iter()
            .flat_map(|r| &r.collectives)
            .any(|c| c.size_from == extract::SizeFrom::NcclLog);
        if !filled {
            a.notes.push(format!(
                "the NCCL log ({}; {} calls) was read and checked against the trace, but gave no size: every known size came from the trace",
                log_files.join(", "),
                l.calls
            ));
        }
    }
    if let Some(plan) = &req.against_plan {
        a.against_plan = Some(against::against_plan(&a, plan)?);
    }
    Ok(a)
}

/// Without any trace: a usage error saying what was given (logs only, or files that each
/// failed).
fn refuse_without_traces(ins: &Inputs) -> anyhow::Result<()> {
    if ins.traces.is_empty() {
        if !ins.logs.is_empty() {
            crate::usage_bail!(
                "only NCCL logs given ({}): `verifybench trace LOG...` reports them on their own; give the traces too for the collectives' timing",
                ins.log_files().join(", ")
            );
        }
        let all: Vec<String> = ins
            .skipped
            .iter()
            .map(|s| format!("{}: {}", s.file, s.reason))
            .collect();
        crate::usage_bail!("no trace could be analysed: {}", all.join("; "));
    }
    Ok(())
}

/// One rank extracted, with its rank when the trace gives it and whether `distributedInfo` did.
type Extracted = (extract::RankTrace, Option<usize>, bool);

/// The ranks of one file, each extracted or why it cannot be analysed; or why the file could
/// not be read.
type FileRanks = Result<Vec<Result<Extracted, String>>, String>;

/// Each file read and reduced to its ranks' collectives and steps in one go, so that only as
/// many raw event sets are alive as there are threads. The sizes a trace lacks come from its
/// own process's calls when the log holds it (matched by pid), else from every call (`log`).
fn read_each(
    files: Vec<(PathBuf, bool)>,
    opts: &reader::ReadOptions,
    log_procs: &logmatch::Processes,
    log: Option<&nccl_log::LogSummary>,
) -> Vec<(PathBuf, bool, FileRanks)> {
    files
        .into_par_iter()
        .map(|(p, direct)| {
            let r = reader::read_trace(&p, opts)
                .map_err(|e| e.to_string())
                .map(|ts| {
                    ts.into_iter()
                        .map(|t| match unusable(&t) {
                            Some(w) => Err(w),
                            None => {
                                let own = logmatch::own_process(
                                    log_procs,
                                    &t.host_pids,
                                    t.host.as_deref(),
                                );
                                let sizes = own.as_ref().map(|(_, s)| s).or(log);
                                let mut r = extract::extract(
                                    &t,
                                    t.rank.unwrap_or(0),
                                    sizes,
                                    opts.step_label.as_deref(),
                                );
                                (r.log_process, r.log_own) = own.unzip();
                                Ok((r, t.rank, t.rank_from_info))
                            }
                        })
                        .collect()
                });
            (p, direct, r)
        })
        .collect()
}

/// The ranks that could be analysed, and `skipped` with the files found in folders that could
/// not (a file named directly that fails is an error; none left is an error naming every
/// failure).
fn keep_readable(
    parsed: Vec<(PathBuf, bool, FileRanks)>,
    mut skipped: Vec<analysis::Skipped>,
) -> anyhow::Result<(Vec<Extracted>, Vec<analysis::Skipped>)> {
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
        // Every file that failed, each named (not only the first).
        let all: Vec<String> = skipped.iter().map(|s| s.reason.clone()).collect();
        crate::usage_bail!("no trace could be analysed: {}", all.join("; "));
    }
    Ok((traces, skipped))
}

/// Each rank's number, and where it came from: distributedInfo, else the file name, else the
/// order; two traces of one rank are an error.
fn number_ranks(
    traces: Vec<Extracted>,
) -> anyhow::Result<(Vec<extract::RankTrace>, Vec<reader::RankSource>)> {
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
    Ok((ranks, sources))
}
