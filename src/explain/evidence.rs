//! Reading the user's evidence: traces (through [`crate::trace`]), the server log (through
//! [`crate::speculative::inputs`]'s readers), NCCL logs (as text, for the traps) and a sweep's
//! results file (its best point, through [`crate::sweep::rank`]). Every failure is a usage
//! error naming the flag and the file.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::usage;
use crate::evidence::Labelled;
use crate::model::Engine;
use crate::record::{Body, Mode};
use crate::speculative::inputs::{self, short_name};
use crate::trace::{Analysis, TraceRequest};

/// What the server log says.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerLog {
    pub file: String,
    pub engine: Option<Engine>,
    /// The mean accept length, labelled measured from the log; `None` when it holds none.
    pub accept_length: Option<Labelled>,
    /// SGLang decode lines with `cuda graph: True` / `False`.
    pub cuda_graph_true: usize,
    pub cuda_graph_false: usize,
    /// vLLM's `enforce_eager=True` (its config line), as found.
    pub enforce_eager: Option<String>,
    /// The engines' `Custom allreduce is disabled ...` warning, as found.
    pub custom_ar_off: Option<String>,
    /// Generation throughput of one running request as the engine printed it: (mean tok/s,
    /// lines): SGLang's `gen throughput (token/s)` of `Decode batch.` lines with
    /// `#running-req: 1`, vLLM's `Avg generation throughput` of lines with `Running: 1 reqs`.
    pub batch1_tokens_per_s: Option<(f64, usize)>,
    pub notes: Vec<String>,
}

/// Reads the server log of `--server-log`.
pub(crate) fn read_server_log(path: &Path) -> anyhow::Result<ServerLog> {
    let bytes = std::fs::read(path).map_err(|e| {
        usage(format!(
            "--server-log '{}': cannot read: {e}",
            path.display()
        ))
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let file = short_name(path);
    let sg = crate::trace::breakeven::parse_accept_log(&text);
    let vl_read = inputs::vllm_acceptance(&text);
    let vl = vl_read.clone().ok().flatten();
    // The engines' own lines first (a log of one may name the other in an import warning).
    let engine = if vl.is_some() {
        Some(Engine::Vllm)
    } else if text.contains("Decode batch.") {
        Some(Engine::Sglang)
    } else if text.contains("vllm") || text.contains("vLLM") {
        Some(Engine::Vllm)
    } else if text.contains("sglang") || text.contains("SGLang") {
        Some(Engine::Sglang)
    } else {
        None
    };
    let mut notes = vec![];
    let accept_length = if sg.is_some() || vl.is_some() {
        let (l, n) = match &text {
            // The text read and parsed above, once.
            std::borrow::Cow::Borrowed(_) => inputs::accept_of_log(path, vl_read, || {
                Ok(sg.clone().expect("SGLang's lines when vLLM's are absent"))
            })?,
            // A log that is not UTF-8: refused as `breakeven --accept-from-log` refuses it.
            std::borrow::Cow::Owned(_) => inputs::read_accept_log(path)?,
        };
        notes.extend(n);
        Some(l)
    } else {
        None
    };
    let (t, f) = sg
        .as_ref()
        .map(|a| (a.cuda_graph_true, a.cuda_graph_false))
        .unwrap_or_else(|| {
            (
                text.matches("cuda graph: True").count(),
                text.matches("cuda graph: False").count(),
            )
        });
    let find = |needle: &str| {
        text.lines().find(|l| l.contains(needle)).map(|l| {
            let i = l.find(needle).unwrap_or(0);
            l[i..].trim().chars().take(160).collect::<String>()
        })
    };
    let enforce_eager = find("enforce_eager=True").map(|_| "enforce_eager=True".to_string());
    let custom_ar_off = find("Custom allreduce is disabled");
    let batch1_tokens_per_s = batch1_throughput(&text);
    if engine.is_none() {
        crate::usage_bail!(
            "--server-log '{}': neither SGLang's log (`Decode batch.` lines) nor vLLM's (`SpecDecoding metrics:` lines, `vllm` in its lines); give the log the server printed",
            path.display()
        );
    }
    Ok(ServerLog {
        file,
        engine,
        accept_length,
        cuda_graph_true: t,
        cuda_graph_false: f,
        enforce_eager,
        custom_ar_off,
        batch1_tokens_per_s,
        notes,
    })
}

/// The mean generation throughput of the log's lines with exactly one running request (batch
/// 1, the break-even's assumption) and a throughput above 0: SGLang's `Decode batch.` lines
/// (python/sglang/srt/managers/scheduler.py: `#running-req: N, ... gen throughput (token/s):
/// X`) and vLLM's periodic stats (vllm/v1/metrics/loggers.py: `Avg generation throughput: X
/// tokens/s, Running: N reqs`). `None` when no line qualifies.
pub(crate) fn batch1_throughput(text: &str) -> Option<(f64, usize)> {
    let sg_n = regex::Regex::new(r"#running-req: (\d+)").expect("regex");
    let sg_t = regex::Regex::new(r"gen throughput \(token/s\): ([0-9.]+)").expect("regex");
    let vl_t = regex::Regex::new(r"Avg generation throughput: ([0-9.]+) tokens/s").expect("regex");
    let vl_n = regex::Regex::new(r"Running: (\d+) reqs").expect("regex");
    let num = |re: &regex::Regex, l: &str| -> Option<f64> {
        re.captures(l).and_then(|c| c[1].parse::<f64>().ok())
    };
    let v: Vec<f64> = text
        .lines()
        .filter_map(|l| {
            let (n, t) = if l.contains("Decode batch.") {
                (num(&sg_n, l)?, num(&sg_t, l)?)
            } else {
                (num(&vl_n, l)?, num(&vl_t, l)?)
            };
            (n == 1.0 && t > 0.0).then_some(t)
        })
        .collect();
    (!v.is_empty()).then(|| (v.iter().sum::<f64>() / v.len() as f64, v.len()))
}

/// One NCCL log as text (INIT, GRAPH, ENV or COLL lines).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NcclLogText {
    pub name: String,
    #[serde(skip)]
    pub text: String,
}

/// Reads `--nccl-log` files; one without any `NCCL` line is a usage error.
pub(crate) fn read_nccl_logs(paths: &[PathBuf]) -> anyhow::Result<Vec<NcclLogText>> {
    paths
        .iter()
        .map(|p| {
            let bytes = std::fs::read(p).map_err(|e| {
                usage(format!("--nccl-log '{}': cannot read: {e}", p.display()))
            })?;
            let text = String::from_utf8_lossy(&bytes).into_owned();
            if !text.contains("NCCL") {
                crate::usage_bail!(
                    "--nccl-log '{}': no NCCL line in it; give a log written with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV)",
                    p.display()
                );
            }
            Ok(NcclLogText {
                name: short_name(p),
                text,
            })
        })
        .collect()
}

/// The best point of a sweep's results file against its baseline (NCCL's defaults).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepBest {
    pub file: String,
    /// `NCCL_PROTO=LL` or `(defaults)`.
    pub setting: String,
    pub overrides: Vec<(String, String)>,
    /// Best / baseline, of the column ranked (graph when present).
    pub ratio: f64,
    pub graph: bool,
    pub mode: String,
    /// `measured` or `modeled` (or `mixed`).
    pub source: String,
    pub points: usize,
    /// The tensor-parallel size the sweep ran at.
    pub tp: u64,
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
