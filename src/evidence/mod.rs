//! The evidence every view reads, each file read once and every figure labelled with where it
//! came from: the one provenance vocabulary ([`Source`], with the flag, file or inputs beside
//! it in [`Origin`]). The server's log, SGLang's ([`sglang`]) or vLLM's ([`vllm`]), each format
//! parsed in one file and read once ([`server_log`]); NCCL logs as text, for the known traps.
//! `trace` builds on this layer (the traps table beside its analysis), and `speculative`,
//! `explain`, `report` and the commands take their inputs from here.

pub(crate) mod checks;
pub(crate) mod nccl;
pub(crate) mod provenance;
pub(crate) mod records;
pub(crate) mod server_log;
pub(crate) mod sglang;
pub(crate) mod vllm;

use std::path::Path;
use std::sync::OnceLock;

use regex::Regex;
use serde::Serialize;

use crate::error::usage;

pub(crate) use nccl::{read_nccl_logs, NcclLogText};
pub(crate) use provenance::{Labelled, Origin, Source};
pub(crate) use records::{read_verify_files, times_of, RecordTime};
pub(crate) use server_log::{read_accept_log, read_server_log, CustomAllReduce, ServerLog};

/// The file name a label shows (the last path component).
pub(crate) fn short_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// A file's bytes; one that cannot be read is a usage error naming the flag.
fn read(path: &Path, flag: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| usage(format!("{flag} '{}': cannot read: {e}", path.display())))
}

/// The number that `pattern`'s first group captures in `line` (the pattern compiled once, in
/// `cell`).
fn captured(cell: &'static OnceLock<Regex>, pattern: &str, line: &str) -> Option<f64> {
    let re = cell.get_or_init(|| Regex::new(pattern).expect("valid regex"));
    re.captures(line).and_then(|c| c[1].parse::<f64>().ok())
}

/// How the verify was launched, as the server's log says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum LaunchMode {
    /// No CUDA graph: every kernel launched from the host.
    Eager,
    /// Some of the verify (some iterations, or some of each forward) outside a graph.
    PartlyEager,
    /// The verify from a CUDA graph.
    Graph,
}

impl LaunchMode {
    pub(crate) fn words(self) -> &'static str {
        match self {
            LaunchMode::Eager => "eagerly",
            LaunchMode::PartlyEager => "partly eagerly",
            LaunchMode::Graph => "from a CUDA graph",
        }
    }
}

/// The launch of the verify as one engine's log line says it: the mode, what the line means
/// for a verify, and the line as printed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Launch {
    pub(crate) mode: LaunchMode,
    /// What it means for a verify of k + 1 tokens.
    pub(crate) meaning: String,
    /// The line that says it (its message, without the logger's prefix where one is known).
    pub(crate) line: String,
}

impl Launch {
    /// The launch as the answer says it: `the verify ran partly eagerly (server.log:
    /// `...setting cudagraph_mode=PIECEWISE`): cudagraph_mode=PIECEWISE: ...`.
    pub(crate) fn sentence(&self, file: &str) -> String {
        format!(
            "The server log says the verify ran {} ({file}: `{}`): {}.",
            self.mode.words(),
            self.line,
            self.meaning
        )
    }
}

/// Generation throughput of one running request, as the server log's lines give it (the
/// break-even's batch of one).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Batch1Rate {
    /// Mean tok/s of the lines kept.
    pub tokens_per_s: f64,
    /// The lines kept (1-based line numbers of the log).
    pub kept: Vec<usize>,
    /// Which lines were kept and which left out, in words.
    pub which: String,
}

/// A log line as quoted: at most 240 characters.
fn quoted(line: &str) -> String {
    let l = line.trim();
    match l.char_indices().nth(240) {
        Some((i, _)) => format!("{} ...", &l[..i]),
        None => l.to_string(),
    }
}
