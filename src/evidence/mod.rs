//! The evidence every view reads, each file read once and every figure labelled with where it
//! came from: the one provenance vocabulary ([`Source`], with the flag, file or inputs beside
//! it in [`Origin`]). The server's log, SGLang's ([`sglang`]) or vLLM's ([`vllm`]), each format
//! parsed in one file and read once ([`server_log`]); NCCL logs as text, for the known traps.
//! `trace` builds on this layer (the traps table beside its analysis), and `speculative`,
//! `explain`, `report` and the commands take their inputs from here.

/// A regex compiled on first use and kept for the process (`&'static Regex`): the logs' and
/// the traces' patterns are matched line after line.
macro_rules! regex_once {
    ($pattern:expr) => {{
        static RE: std::sync::OnceLock<::regex::Regex> = std::sync::OnceLock::new();
        RE.get_or_init(|| ::regex::Regex::new($pattern).expect("valid regex"))
    }};
}
pub(crate) use regex_once;

pub(crate) mod checks;
pub(crate) mod nccl;
pub(crate) mod provenance;
pub(crate) mod records;
pub(crate) mod server_log;
pub(crate) mod sglang;
pub(crate) mod vllm;

use std::path::Path;

use serde::Serialize;

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

/// Each key's total, in order of first appearance (`[("all_reduce", 123), ("all_gather", 1)]`).
pub(crate) fn tally<K: PartialEq>(items: impl IntoIterator<Item = (K, usize)>) -> Vec<(K, usize)> {
    let mut out: Vec<(K, usize)> = Vec::new();
    for (k, n) in items {
        match out.iter_mut().find(|(x, _)| *x == k) {
            Some(e) => e.1 += n,
            None => out.push((k, n)),
        }
    }
    out
}

/// Counts as words: `123 all_reduce + 1 all_gather`.
pub(crate) fn tally_words<K: std::fmt::Display>(counts: &[(K, usize)]) -> String {
    counts
        .iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect::<Vec<_>>()
        .join(" + ")
}

/// What a number in a server's log stands for, and the values it may take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Quantity {
    /// What it is, with its article ("an accept length").
    what: &'static str,
    min: f64,
    max: f64,
    /// 0 is allowed besides `min..=max` (an interval with nothing to report).
    zero: bool,
    integer: bool,
    /// The values allowed, in words.
    range: &'static str,
}

impl Quantity {
    fn fits(&self, v: f64) -> bool {
        v.is_finite()
            && ((self.zero && v == 0.0) || (self.min..=self.max).contains(&v))
            && (!self.integer || v.fract() == 0.0)
    }
}

/// A mean accept length (SGLang's `accept len:`, vLLM's `Mean acceptance length:`).
pub(crate) const ACCEPT_LENGTH: Quantity = Quantity {
    what: "an accept length",
    min: 1.0,
    max: 65.0,
    zero: true,
    integer: false,
    range: "1 to 65, the bonus token and at most 64 draft tokens; 0 for an interval without speculation",
};

/// A generation throughput (tokens per second).
pub(crate) const THROUGHPUT: Quantity = Quantity {
    what: "a throughput",
    min: 0.0,
    max: 1e6,
    zero: true,
    integer: false,
    range: "0 to 1,000,000 tokens/s; engines decode at tens to thousands",
};

/// A count of requests or tokens.
pub(crate) const COUNT: Quantity = Quantity {
    what: "a count",
    min: 0.0,
    max: 1e12,
    zero: true,
    integer: true,
    range: "a whole number from 0 to 10^12",
};

/// A fraction (vLLM's per-position acceptance rates).
pub(crate) const FRACTION: Quantity = Quantity {
    what: "a rate",
    min: 0.0,
    max: 1.0,
    zero: true,
    integer: false,
    range: "a fraction from 0 to 1",
};

/// A percentage (vLLM's `Avg Draft acceptance rate: 40.7%`).
pub(crate) const PERCENT: Quantity = Quantity {
    what: "a percentage",
    min: 0.0,
    max: 100.0,
    zero: true,
    integer: false,
    range: "0 to 100 %",
};

/// A log line as a refusal quotes it: trimmed and escaped ([`crate::util::escaped`]).
pub(crate) fn quote_line(line: &str) -> String {
    crate::util::escaped(line.trim(), 512)
}

/// The one reader of the numbers of a server's log: the token after `key` in `line` (up to the
/// next comma, blank, closing bracket, semicolon or `%`), read whole as the line wrote it (a
/// sign, a fraction, an exponent; `inf` and `nan` are read, then refused), and checked as `q`.
/// `Ok(None)` where the line lacks `key`; the error names the value, what it should be and
/// quotes the line (the caller adds the file and the line number).
pub(crate) fn number_after(line: &str, key: &str, q: Quantity) -> Result<Option<f64>, String> {
    let Some(at) = line.find(key) else {
        return Ok(None);
    };
    let rest = line[at + key.len()..].trim_start();
    let end = rest
        .find([',', ' ', '\t', '%', ')', ']', ';'])
        .unwrap_or(rest.len());
    number(&rest[..end], key, q, line).map(Some)
}

/// `token`, the value of `key` in `line`, read and checked as `q` (see [`number_after`]).
pub(crate) fn number(token: &str, key: &str, q: Quantity, line: &str) -> Result<f64, String> {
    match token.parse::<f64>().ok().filter(|v| q.fits(*v)) {
        Some(v) => Ok(v),
        None => Err(format!(
            "`{} {}` is not {} ({}): `{}`",
            key.trim_end(),
            crate::util::escaped(token, 64),
            q.what,
            q.range,
            quote_line(line)
        )),
    }
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
    pub(crate) tokens_per_s: f64,
    /// The lines kept (1-based line numbers of the log).
    pub(crate) kept: Vec<usize>,
    /// Which lines were kept and which left out, in words.
    pub(crate) which: String,
}

/// A log line as quoted: at most 240 characters.
fn quoted(line: &str) -> String {
    let l = line.trim();
    match l.char_indices().nth(240) {
        Some((i, _)) => format!("{} ...", &l[..i]),
        None => l.to_string(),
    }
}
