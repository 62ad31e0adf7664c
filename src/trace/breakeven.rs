//! Break-even inputs from the same evidence: the step time a trace measured (a verify trace
//! gives the verify time, a decode trace the decode time), and the mean accept length from
//! SGLang's decode log lines:
//!
//! `[2025-06-01 10:00:00 TP0] Decode batch. #running-req: 1, #token: 812, token usage: 0.00,
//! accept len: 2.31, accept rate: 0.44, cuda graph: True, gen throughput (token/s): 95.12,
//! #queue-req: 0,`
//!
//! Each line reports the mean over one logging interval (a fixed number of decode iterations),
//! so the mean accept length is the mean of the lines; lines of 0.00 (no speculative
//! decoding in that interval) are left out. `cuda graph: False` lines are counted: they mean
//! the engine ran those iterations eagerly.

use std::path::Path;

use serde::Serialize;

use super::analysis::Analysis;
use crate::measure::attribution::Spread;

/// A step time measured from a trace (ms).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct TraceStepTime {
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub steps: usize,
    /// `eager (no CUDA graph)`, `CUDA graph`, ...
    pub mode: String,
    pub files: Vec<String>,
}

/// The step time of an analysed trace (for `breakeven --from-trace`); a usage error when the
/// trace holds no complete step.
pub(crate) fn step_time(a: &Analysis) -> anyhow::Result<TraceStepTime> {
    let s = a.step.as_ref().ok_or_else(|| {
        crate::error::usage(format!(
            "{}: no complete step found, so no step time",
            a.files.join(", ")
        ))
    })?;
    Ok(TraceStepTime {
        median_ms: s.step_us.median / 1000.0,
        min_ms: s.step_us.min / 1000.0,
        max_ms: s.step_us.max / 1000.0,
        steps: s.steps,
        mode: s.mode_words(),
        files: a.files.clone(),
    })
}

/// What SGLang's decode log says about acceptance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct AcceptLog {
    /// Mean over the lines with speculative decoding of `accept len`.
    pub mean_accept_len: f64,
    pub spread: Spread,
    /// Lines with an accept length (> 0).
    pub lines: usize,
    /// Decode lines with `cuda graph: True` / `False`.
    pub cuda_graph_true: usize,
    pub cuda_graph_false: usize,
}

/// Parses SGLang decode log text; `None` when no line has an accept length above 0.
pub(crate) fn parse_accept_log(text: &str) -> Option<AcceptLog> {
    let acc = regex::Regex::new(r"accept len: ([0-9]+(?:\.[0-9]+)?)").expect("valid regex");
    let graph = regex::Regex::new(r"cuda graph: (True|False)").expect("valid regex");
    let (mut v, mut t, mut f) = (Vec::new(), 0, 0);
    for l in text.lines().filter(|l| l.contains("Decode batch")) {
        if let Some(x) = acc.captures(l).and_then(|c| c[1].parse::<f64>().ok()) {
            if x > 0.0 {
                v.push(x);
            }
        }
        match graph.captures(l).map(|c| c[1].to_string()).as_deref() {
            Some("True") => t += 1,
            Some("False") => f += 1,
            _ => {}
        }
    }
    let spread = Spread::of(&v)?;
    Some(AcceptLog {
        mean_accept_len: v.iter().sum::<f64>() / v.len() as f64,
        spread,
        lines: v.len(),
        cuda_graph_true: t,
        cuda_graph_false: f,
    })
}

/// Reads the mean accept length from a server log (for `breakeven --accept-from-log`).
pub(crate) fn accept_from_log(path: &Path) -> anyhow::Result<AcceptLog> {
    let bytes = std::fs::read(path).map_err(|e| {
        crate::error::usage(format!(
            "--accept-from-log '{}': cannot read: {e}",
            path.display()
        ))
    })?;
    parse_accept_log(&String::from_utf8_lossy(&bytes)).ok_or_else(|| {
        crate::error::usage(format!(
            "--accept-from-log '{}': no SGLang decode line with an accept length above 0 (`Decode batch. ... accept len: 2.31`); is speculative decoding on?",
            path.display()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sglang_decode_lines() {
        let text = "\
[2025-06-01 10:00:00 TP0] Prefill batch. #new-seq: 1, #new-token: 12, #cached-token: 0
[2025-06-01 10:00:01 TP0] Decode batch. #running-req: 1, #token: 812, token usage: 0.00, accept len: 2.31, accept rate: 0.44, cuda graph: True, gen throughput (token/s): 95.12, #queue-req: 0,
[2025-06-01 10:00:02 TP0] Decode batch. #running-req: 1, #token: 852, token usage: 0.00, accept len: 2.69, cuda graph: False, gen throughput (token/s): 90.00, #queue-req: 0
[2025-06-01 10:00:03 TP0] Decode batch. #running-req: 0, #token: 0, token usage: 0.00, accept len: 0.00, cuda graph: True, gen throughput (token/s): 0.00, #queue-req: 0
";
        let a = parse_accept_log(text).unwrap();
        assert!((a.mean_accept_len - 2.5).abs() < 1e-9);
        assert_eq!((a.lines, a.cuda_graph_true, a.cuda_graph_false), (2, 2, 1));
        assert!(
            parse_accept_log("[x TP0] Decode batch. #running-req: 1, cuda graph: True").is_none()
        );
    }

    #[test]
    fn a_log_without_accept_lengths_is_a_usage_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("server.log");
        std::fs::write(&p, "hello\n").unwrap();
        let e = accept_from_log(&p).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("server.log"));
    }
}
