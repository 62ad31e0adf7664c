//! SGLang's decode log lines (python/sglang/srt/managers/scheduler.py), the only file that
//! parses them:
//!
//! `[2025-06-01 10:00:00 TP0] Decode batch. #running-req: 1, #token: 812, token usage: 0.00,
//! accept len: 2.31, accept rate: 0.44, cuda graph: True, gen throughput (token/s): 95.12,
//! #queue-req: 0,`
//!
//! Each line reports the mean over one logging interval (a fixed number of decode iterations),
//! so the mean accept length is the mean of the lines; lines of 0.00 (no speculative
//! decoding in that interval) are left out. `cuda graph: False` lines are counted: they mean
//! the engine ran those iterations eagerly.

use std::sync::OnceLock;

use regex::Regex;
use serde::Serialize;

use super::captured;
use crate::measure::attribution::Spread;

/// What marks a decode line (and an SGLang log).
pub(crate) const DECODE_LINE: &str = "Decode batch.";

/// What SGLang's decode log says about acceptance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AcceptLog {
    /// Mean over the lines with speculative decoding of `accept len`.
    pub mean_accept_len: f64,
    pub spread: Spread,
    /// Lines with an accept length (> 0).
    pub lines: usize,
    /// Decode lines with `cuda graph: True` / `False`.
    pub cuda_graph_true: usize,
    pub cuda_graph_false: usize,
}

/// The acceptance of SGLang's decode lines in `text`; `None` when no line has an accept
/// length above 0.
pub fn acceptance(text: &str) -> Option<AcceptLog> {
    static ACC: OnceLock<Regex> = OnceLock::new();
    let (mut v, mut t, mut f) = (Vec::new(), 0, 0);
    for l in text.lines().filter(|l| l.contains("Decode batch")) {
        if let Some(x) = captured(&ACC, r"accept len: ([0-9]+(?:\.[0-9]+)?)", l) {
            if x > 0.0 {
                v.push(x);
            }
        }
        match graph(l) {
            Some(true) => t += 1,
            Some(false) => f += 1,
            None => {}
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

/// A line's `cuda graph: True` (true) or `False` (false).
fn graph(line: &str) -> Option<bool> {
    static GRAPH: OnceLock<Regex> = OnceLock::new();
    let re = GRAPH.get_or_init(|| Regex::new(r"cuda graph: (True|False)").expect("valid regex"));
    let c = re.captures(line)?;
    Some(&c[1] == "True")
}

/// `cuda graph: True` and `cuda graph: False` anywhere in `text`.
pub(crate) fn graph_counts(text: &str) -> (usize, usize) {
    (
        text.matches("cuda graph: True").count(),
        text.matches("cuda graph: False").count(),
    )
}

/// A decode line's running requests and generation throughput (`#running-req: N, ... gen
/// throughput (token/s): X`).
pub(crate) fn throughput(line: &str) -> Option<(f64, f64)> {
    static N: OnceLock<Regex> = OnceLock::new();
    static T: OnceLock<Regex> = OnceLock::new();
    Some((
        captured(&N, r"#running-req: (\d+)", line)?,
        captured(&T, r"gen throughput \(token/s\): ([0-9.]+)", line)?,
    ))
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
        let a = acceptance(text).unwrap();
        assert!((a.mean_accept_len - 2.5).abs() < 1e-9);
        assert_eq!((a.lines, a.cuda_graph_true, a.cuda_graph_false), (2, 2, 1));
        assert!(acceptance("[x TP0] Decode batch. #running-req: 1, cuda graph: True").is_none());
    }
}
