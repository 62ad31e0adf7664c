//! vLLM's log lines, the only file that parses them: `SpecDecoding metrics:`
//! (vllm/v1/spec_decode/metrics.py), the periodic stats (vllm/v1/metrics/loggers.py) and the
//! engine config's `enforce_eager=True`.

use std::sync::OnceLock;

use regex::Regex;

use super::captured;

/// What marks an acceptance line (and a vLLM log).
const METRICS_LINE: &str = "SpecDecoding metrics:";

/// The acceptance of a vLLM log: its `SpecDecoding metrics:` lines
/// (vllm/v1/spec_decode/metrics.py, `SpecDecodingLogging.log`: "Mean acceptance length: %.2f,
/// ... Accepted: %d tokens, Drafted: %d tokens, Per-position acceptance rate: %s, ...").
#[derive(Debug, Clone, PartialEq)]
pub struct Acceptance {
    /// Lines read.
    pub lines: usize,
    /// 1 + accepted tokens / drafts over all lines (each line weighted by its drafts).
    pub mean_accept_len: f64,
    /// Smallest and largest `Mean acceptance length` of one line.
    pub min: f64,
    pub max: f64,
    /// Draft positions (the length of the per-position list), when printed.
    pub positions: Option<usize>,
}

/// The number after `key` in `line` (up to the next space or comma).
fn number_after(line: &str, key: &str) -> Option<f64> {
    let rest = line[line.find(key)? + key.len()..].trim_start();
    let end = rest.find([',', ' ', '%']).unwrap_or(rest.len());
    rest[..end].trim().parse().ok()
}

/// Reads vLLM's `SpecDecoding metrics:` lines from `text`; `None` when there are none.
/// Drafts per line are accepted / (sum of the per-position rates) (each rate is accepted at
/// that position / drafts, so the sum is accepted / drafts), else drafted / positions; lines
/// with no draft are skipped.
pub fn acceptance(text: &str) -> Result<Option<Acceptance>, String> {
    let (mut accepted, mut drafts, mut lines) = (0.0, 0.0, 0usize);
    let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut positions = None;
    for (i, line) in text.lines().enumerate() {
        if !line.contains(METRICS_LINE) {
            continue;
        }
        let mean = number_after(line, "Mean acceptance length:");
        let acc = number_after(line, "Accepted:");
        let drafted = number_after(line, "Drafted:");
        let rates: Option<Vec<f64>> = line
            .find("Per-position acceptance rate:")
            .map(|p| &line[p + "Per-position acceptance rate:".len()..])
            .map(|rest| {
                rest.split(',')
                    .map(|x| x.trim())
                    .take_while(|x| x.parse::<f64>().is_ok())
                    .map(|x| x.parse().unwrap())
                    .collect()
            });
        let (Some(mean), Some(acc)) = (mean, acc) else {
            return Err(format!(
                "line {}: a `SpecDecoding metrics:` line without `Mean acceptance length:` and `Accepted: N tokens`",
                i + 1
            ));
        };
        let k = rates.as_ref().map(|r| r.len()).filter(|&k| k > 0);
        let sum: f64 = rates.iter().flatten().sum();
        let d = if sum > 0.0 {
            acc / sum
        } else {
            match (drafted, k) {
                (Some(dt), Some(k)) => dt / k as f64,
                // no per-position list (older vLLM): accepted / (mean - 1)
                _ if mean > 1.0 => acc / (mean - 1.0),
                _ => 0.0,
            }
        };
        if d.is_nan() || d <= 0.0 {
            continue;
        }
        positions = positions.or(k);
        accepted += acc;
        drafts += d;
        lines += 1;
        min = min.min(mean);
        max = max.max(mean);
    }
    if lines == 0 {
        return Ok(None);
    }
    Ok(Some(Acceptance {
        lines,
        mean_accept_len: 1.0 + accepted / drafts,
        min,
        max,
        positions,
    }))
}

/// A stats line's running requests and generation throughput (`Avg generation throughput: X
/// tokens/s, Running: N reqs`).
pub(crate) fn throughput(line: &str) -> Option<(f64, f64)> {
    static N: OnceLock<Regex> = OnceLock::new();
    static T: OnceLock<Regex> = OnceLock::new();
    Some((
        captured(&N, r"Running: (\d+) reqs", line)?,
        captured(&T, r"Avg generation throughput: ([0-9.]+) tokens/s", line)?,
    ))
}

/// The engine config's `enforce_eager=True`, when in `text`.
pub(crate) fn enforce_eager(text: &str) -> Option<String> {
    text.contains("enforce_eager=True")
        .then(|| "enforce_eager=True".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines in the layout of vllm/v1/spec_decode/metrics.py's `SpecDecodingLogging.log`,
    /// numbers written for this test.
    const VLLM_LOG: &str = "\
INFO 05-01 10:00:00 [metrics.py:86] SpecDecoding metrics: Mean acceptance length: 2.83, Accepted throughput: 10.00 tokens/s, Drafted throughput: 20.00 tokens/s, Accepted: 1830 tokens, Drafted: 3000 tokens, Per-position acceptance rate: 0.826, 0.652, 0.352, Avg Draft acceptance rate: 61.0%
INFO 05-01 10:00:10 [loggers.py:120] Engine 000: Avg prompt throughput: 0.0 tokens/s
INFO 05-01 10:00:10 [metrics.py:86] SpecDecoding metrics: Mean acceptance length: 2.00, Accepted throughput: 5.00 tokens/s, Drafted throughput: 15.00 tokens/s, Accepted: 500 tokens, Drafted: 1500 tokens, Per-position acceptance rate: 0.600, 0.300, 0.100, Avg Draft acceptance rate: 33.3%
";

    #[test]
    fn vllm_lines_give_one_plus_accepted_over_drafts() {
        let v = acceptance(VLLM_LOG).unwrap().unwrap();
        // line 1: sum of rates 1.830 -> drafts 1830 / 1.830 = 1000 (= 3000 drafted / 3)
        // line 2: sum 1.000 -> drafts 500 (= 1500 / 3)
        // 1 + (1830 + 500) / (1000 + 500) = 1 + 2330 / 1500 = 2.55333...
        assert!(
            (v.mean_accept_len - (1.0 + 2330.0 / 1500.0)).abs() < 1e-9,
            "{v:?}"
        );
        assert_eq!((v.lines, v.positions), (2, Some(3)));
        assert_eq!((v.min, v.max), (2.0, 2.83));
        assert_eq!(acceptance("Decode batch. accept len: 2.1").unwrap(), None);
        assert!(acceptance("SpecDecoding metrics: nothing").is_err());
    }
}
