//! vLLM's log lines, the only file that parses them: `SpecDecoding metrics:`
//! (vllm/v1/spec_decode/metrics.py), the periodic stats (vllm/v1/metrics/loggers.py), the
//! engine config's line (`Initializing a V1 LLM engine (v..) with config: model='..', ...,
//! enforce_eager=True`, vllm/v1/engine/core.py) and the CUDA-graph mode as vLLM settles it
//! ([`launch`]).

use regex::Regex;

use super::{
    number, number_after, quote_line, quoted, Batch1Rate, Launch, LaunchMode, ACCEPT_LENGTH, COUNT,
    FRACTION, PERCENT, THROUGHPUT,
};

/// What marks an acceptance line (and a vLLM log).
const METRICS_LINE: &str = "SpecDecoding metrics:";
/// What marks vLLM's start-up lines (and a vLLM log): the engine's config line, the CUDA-graph
/// mode it settles on.
pub(crate) const START_LINES: &[&str] = &[
    "LLM engine (v",
    "non-default args: {",
    "setting cudagraph_mode=",
    "Overriding cudagraph_mode",
    "Cudagraph is disabled under eager mode",
    "Enforce eager set, disabling",
];

/// The acceptance of a vLLM log: its `SpecDecoding metrics:` lines
/// (vllm/v1/spec_decode/metrics.py, `SpecDecodingLogging.log`: "Mean acceptance length: %.2f,
/// ... Accepted: %d tokens, Drafted: %d tokens, Per-position acceptance rate: %s, ...").
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Acceptance {
    /// Lines read.
    pub(crate) lines: usize,
    /// 1 + accepted tokens / drafts over all lines (each line weighted by its drafts).
    pub(crate) mean_accept_len: f64,
    /// Smallest and largest `Mean acceptance length` of one line.
    pub(crate) min: f64,
    pub(crate) max: f64,
    /// Draft positions (the length of the per-position list), when printed.
    pub(crate) positions: Option<usize>,
    /// Accepted tokens over all lines (`Accepted: N tokens`).
    pub(crate) accepted: f64,
    /// Drafts over all lines (each line's accepted tokens over the sum of its per-position
    /// rates, as [`acceptance`] counts them).
    pub(crate) drafts: f64,
    /// Drafted tokens over all lines (`Drafted: N tokens`), when every line printed them.
    pub(crate) drafted: Option<f64>,
    /// The per-position rates over all lines (each line's weighted by its drafts), when every
    /// line printed the same number of them.
    pub(crate) position_rates: Option<Vec<f64>>,
    /// Each line's `Avg Draft acceptance rate` (accepted / drafted tokens) as a fraction.
    pub(crate) draft_rates: Vec<f64>,
}

/// The per-position rates of a metrics line (`Per-position acceptance rate: 0.645, 0.393,
/// 0.240, Avg Draft ...`): the items up to the first that begins with a letter other than
/// those of `inf` and `nan`, each read and checked as a rate by the logs' number reader;
/// `None` without the key.
fn rates(line: &str) -> Result<Option<Vec<f64>>, String> {
    const KEY: &str = "Per-position acceptance rate:";
    let Some(p) = line.find(KEY) else {
        return Ok(None);
    };
    let mut out = vec![];
    for x in line[p + KEY.len()..].split(',').map(str::trim) {
        let numeric = x.parse::<f64>().is_ok()
            || x.starts_with(|c: char| c.is_ascii_digit() || "+-.".contains(c));
        if !numeric {
            break;
        }
        out.push(number(x, KEY, FRACTION, line)?);
    }
    Ok(Some(out))
}

/// Reads vLLM's `SpecDecoding metrics:` lines from `text`; `None` when there are none.
/// Drafts per line are accepted / (sum of the per-position rates) (each rate is accepted at
/// that position / drafts, so the sum is accepted / drafts), else drafted / positions; lines
/// with no draft are skipped. Every number goes through the logs' number reader
/// ([`super::number_after`]); a line whose numbers do not fit (a rate above 1, more tokens
/// accepted than drafted) is an error naming the line.
pub(crate) fn acceptance(text: &str) -> Result<Option<Acceptance>, String> {
    let (mut accepted, mut drafts, mut lines) = (0.0, 0.0, 0usize);
    let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut positions = None;
    let mut drafted_sum = Some(0.0);
    let mut by_position: Option<Vec<f64>> = None;
    let mut same_positions = true;
    let mut draft_rates = vec![];
    for (i, line) in text.lines().enumerate() {
        if !line.contains(METRICS_LINE) {
            continue;
        }
        let at = |e: String| format!("line {}: {e}", i + 1);
        let mean = number_after(line, "Mean acceptance length:", ACCEPT_LENGTH).map_err(at)?;
        let acc = number_after(line, "Accepted:", COUNT).map_err(at)?;
        let drafted = number_after(line, "Drafted:", COUNT).map_err(at)?;
        let rates = rates(line).map_err(at)?;
        if let (Some(a), Some(d)) = (acc, drafted) {
            if a > d {
                return Err(at(format!(
                    "{a} tokens accepted of {d} drafted: a draft token is accepted at most once: `{}`",
                    quote_line(line)
                )));
            }
        }
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
        drafted_sum = drafted_sum.zip(drafted).map(|(a, b)| a + b);
        let rate = number_after(line, "Avg Draft acceptance rate:", PERCENT).map_err(at)?;
        draft_rates.extend(rate.map(|p| p / 100.0));
        let rates = rates.unwrap_or_default();
        match &mut by_position {
            Some(v) if v.len() == rates.len() => {
                v.iter_mut().zip(&rates).for_each(|(s, r)| *s += r * d);
            }
            None if !rates.is_empty() => by_position = Some(rates.iter().map(|r| r * d).collect()),
            _ => same_positions = false,
        }
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
        accepted,
        drafts,
        drafted: drafted_sum,
        position_rates: by_position
            .filter(|_| same_positions)
            .map(|v| v.iter().map(|s| s / drafts).collect()),
        draft_rates,
    }))
}

/// `x` to three decimals, without trailing zeros (`0.407`, `3`).
fn short(x: f64) -> String {
    let s = format!("{x:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The accept length of one constant per-token rate `a` over `k` drafts, as `--accept-rate`
/// takes it: 1 + a + a^2 + ... + a^k.
fn const_rate_tau(a: f64, k: u64) -> f64 {
    (0..=k).map(|i| a.powi(i as i32)).sum()
}

impl Acceptance {
    /// Accepted / drafted tokens over all lines (vLLM's `Avg Draft acceptance rate`, the
    /// published runs' "accept rate"), when every line printed its drafted tokens.
    pub(crate) fn draft_rate(&self) -> Option<f64> {
        self.drafted.filter(|&d| d > 0.0).map(|d| self.accepted / d)
    }

    /// Every acceptance figure of vLLM's lines (vllm/v1/spec_decode/metrics.py,
    /// `SpecDecodingLogging.log`) mapped to the accept length tau, with the conversion: the
    /// counts (1 + accepted / drafts), the per-position rates (fractions of all drafts: 1 +
    /// their sum), the mean acceptance length (tau itself) and the accept rate (accepted /
    /// drafted tokens: 1 + k x rate, since every draft drafts k tokens); `k` the draft count
    /// the log gives, if any.
    pub(crate) fn conversion(&self, file: &str, k: Option<u64>) -> String {
        let mut parts = vec![format!(
            "1 + accepted tokens / drafts = 1 + {:.0} / {:.0} = {:.2}",
            self.accepted, self.drafts, self.mean_accept_len
        )];
        if let Some(r) = &self.position_rates {
            let list: Vec<String> = r.iter().map(|x| format!("{x:.3}")).collect();
            parts.push(format!(
                "per-position rates {} (fractions of all drafts, weighted by each line's drafts): 1 + their sum = {:.2}",
                list.join(", "),
                1.0 + r.iter().sum::<f64>()
            ));
        }
        parts.push(if self.min == self.max {
            format!("`Mean acceptance length` {:.2} (tau itself)", self.min)
        } else {
            format!(
                "`Mean acceptance length` {:.2}..{:.2} per line (tau itself)",
                self.min, self.max
            )
        });
        if let Some(rate) = self.draft_rate() {
            let drafted = self.drafted.unwrap_or_default();
            parts.push(match k {
                Some(k) => format!(
                    "accept rate {:.1}% (`Avg Draft acceptance rate`: accepted / drafted tokens, {:.0} / {drafted:.0}): 1 + k x rate = 1 + {k} x {:.3} = {:.2}, not a per-token rate for --accept-rate (which would make it {:.2})",
                    100.0 * rate,
                    self.accepted,
                    rate,
                    1.0 + k as f64 * rate,
                    const_rate_tau(rate, k)
                ),
                None => format!(
                    "accept rate {:.1}% (`Avg Draft acceptance rate`: accepted / drafted tokens, {:.0} / {drafted:.0}): 1 + k x rate for k draft tokens, not a per-token rate for --accept-rate",
                    100.0 * rate,
                    self.accepted,
                ),
            });
        }
        format!(
            "{file}: vLLM's acceptance as the accept length tau (tokens per verify, the bonus token included), over {} `SpecDecoding metrics` lines: {}",
            self.lines,
            parts.join("; ")
        )
    }
}

/// The warning for `--accept-rate RATE` (one conditional rate per token: tau = 1 + a + ... +
/// a^k) where it looks like vLLM's accept rate (accepted / drafted tokens: tau = 1 + k x
/// rate): when it matches, within 0.005, the accept rate of `log` (a vLLM log of the same
/// command: its lines' `Avg Draft acceptance rate`, or its accepted / drafted tokens), or when
/// the other evidence says vLLM (`vllm_said`: what says it). `None` otherwise.
pub(crate) fn accept_rate_warning(
    rate: f64,
    k: u64,
    log: Option<(&str, &Acceptance)>,
    vllm_said: Option<&str>,
) -> Option<String> {
    let off = |r: f64| (r - rate).abs();
    // the closest of the lines' rates and the whole log's, within 0.005
    let matched = log.and_then(|(file, a)| {
        let lines = a.draft_rates.iter().map(|&r| {
            let said = format!(
                "matches {file}'s `Avg Draft acceptance rate: {:.1}%` (accepted / drafted tokens)",
                100.0 * r
            );
            (r, said)
        });
        let whole = a.draft_rate().map(|r| {
            let said = format!(
                "matches {file}'s accepted / drafted tokens ({:.0} / {:.0} = {r:.3})",
                a.accepted,
                a.drafted.unwrap_or_default()
            );
            (r, said)
        });
        lines
            .chain(whole)
            .filter(|(r, _)| off(*r) <= 0.005 + 1e-9)
            .min_by(|x, y| off(x.0).total_cmp(&off(y.0)))
            .map(|(_, said)| said)
    });
    let why = matched.or_else(|| vllm_said.map(|w| format!("is given where {w} says vLLM")))?;
    Some(format!(
        "warning: --accept-rate {} {why}: --accept-rate takes one conditional rate per draft token (tau = 1 + a + ... + a^k = {:.2} at k = {k}), but vLLM's accept rate is accepted / drafted tokens, for which tau = 1 + k x rate = 1 + {k} x {} = {:.2}; if the rate is vLLM's, give --accept-length {:.2} instead (or vLLM's per-position rates to --accept-rates-of-drafts)",
        short(rate),
        const_rate_tau(rate, k),
        short(rate),
        1.0 + k as f64 * rate,
        1.0 + k as f64 * rate
    ))
}

/// The speculative config as the log prints it: the draft tokens k and the method.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SpecConfig {
    /// Draft tokens per step k (the verify covers k + 1 tokens).
    pub(crate) k: u64,
    /// The method (`mtp`, `eagle3`, `ngram`, ...), when printed.
    pub(crate) method: Option<String>,
    /// What the log says, quoted: `SpeculativeConfig(method='mtp', model='..',
    /// num_spec_tokens=3)` or the arguments' `'speculative_config': {..}`.
    pub(crate) quote: String,
}

/// The speculative config of the log: the engine's config line (`Initializing a V1 LLM engine
/// (v..) with config: ..., speculative_config=SpeculativeConfig(method='mtp', model='..',
/// num_spec_tokens=3), ...`, vllm/v1/engine/core.py; the text of `SpeculativeConfig.__repr__`,
/// vllm/config/speculative.py: the count as resolved, also when the draft model's config
/// gave it), else the API server's arguments (`non-default args: {..., 'speculative_config':
/// {'method': 'mtp', 'num_speculative_tokens': 3}}`, vllm/entrypoints/utils.py: the
/// `--speculative-config` JSON as vllm/engine/arg_utils.py parsed it, which may leave the
/// count to the draft model). `None` when neither prints a count above 0.
pub(crate) fn spec_config(text: &str) -> Option<SpecConfig> {
    let repr = regex_once!(r"SpeculativeConfig\([^)]*?\bnum_spec_tokens=(\d+)[^)]*\)");
    let args = regex_once!(
        r#"['"]speculative_config['"]\s*:\s*\{[^{}]*?['"]num_speculative_tokens['"]\s*:\s*(\d+)[^{}]*\}"#
    );
    let method = regex_once!(r#"['"]?method['"]?\s*[=:]\s*['"]([\w-]+)['"]"#);
    let found = |re: &Regex| {
        text.lines().find_map(|l| {
            let c = re.captures(l)?;
            let k = c[1].parse::<u64>().ok().filter(|&k| k > 0)?;
            let quote = c[0].to_string();
            let method = method.captures(&quote).map(|m| m[1].to_string());
            Some(SpecConfig { k, method, quote })
        })
    };
    found(repr).or_else(|| found(args))
}

/// The tensor-parallel size of the engine's config line (`tensor_parallel_size=8`) or of the
/// API server's arguments (`'tensor_parallel_size': 8`).
pub(crate) fn tensor_parallel(text: &str) -> Option<u64> {
    let re = regex_once!(r#"\btensor_parallel_size['"]?\s*[=:]\s*(\d+)"#);
    text.lines()
        .find_map(|l| re.captures(l).and_then(|c| c[1].parse().ok()))
}

/// One periodic stats line of vllm/v1/metrics/loggers.py (`LoggingStatLogger.log`): `Engine
/// 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s,
/// Running: %d reqs, Waiting: %d reqs, ...`, each the mean over the interval since the last
/// line (10 s by default), the running requests those at its end.
struct Stats {
    engine: String,
    prompt: f64,
    generation: f64,
    running: u64,
}

/// A periodic stats line's engine, prompt and generation throughputs and running requests,
/// each read as the line wrote it (`None` for a line without all three; an error for a value
/// that is not a throughput or a count).
fn stats(line: &str) -> Result<Option<Stats>, String> {
    const P: &str = "Avg prompt throughput:";
    const G: &str = "Avg generation throughput:";
    const N: &str = "Running:";
    if !(line.contains(P) && line.contains(G) && line.contains(N)) {
        return Ok(None);
    }
    let engine = regex_once!(r"Engine (\d+):");
    let (Some(prompt), Some(generation), Some(running)) = (
        number_after(line, P, THROUGHPUT)?,
        number_after(line, G, THROUGHPUT)?,
        number_after(line, N, COUNT)?,
    ) else {
        return Ok(None);
    };
    Ok(Some(Stats {
        engine: engine
            .captures(line)
            .map(|c| c[1].to_string())
            .unwrap_or_default(),
        prompt,
        generation,
        running: running as u64,
    }))
}

/// `12, 14, 16` (the first 12, then how many in all).
fn line_list(v: &[usize]) -> String {
    let shown: Vec<String> = v.iter().take(12).map(|n| n.to_string()).collect();
    if v.len() > 12 {
        format!("{}, ... ({} in all)", shown.join(", "), v.len())
    } else {
        shown.join(", ")
    }
}

/// The generation throughput of one running request from vLLM's periodic stats lines
/// ([`stats`]), steady intervals only: one request running at the end of the interval and at
/// the end of the one before on the same engine (so not the first interval of a request,
/// which starts part-way, and not the one it ends in, which ends with none running), no prompt
/// throughput (no prefill in it), and a generation throughput above 0. `None` when no
/// interval is steady; an error naming the line where a figure is not one.
pub(crate) fn steady_rate(text: &str) -> Result<Option<Batch1Rate>, String> {
    let mut before: std::collections::HashMap<String, u64> = Default::default();
    let (mut kept, mut rates) = (vec![], vec![]);
    let (mut one, mut prefill, mut changed, mut idle) = (0, 0, 0, 0);
    for (i, line) in text.lines().enumerate() {
        let Some(s) = stats(line).map_err(|e| format!("line {}: {e}", i + 1))? else {
            continue;
        };
        let prev = before.insert(s.engine.clone(), s.running);
        if s.running != 1 {
            continue;
        }
        one += 1;
        if s.prompt > 0.0 {
            prefill += 1;
        } else if prev != Some(1) {
            changed += 1;
        } else if s.generation <= 0.0 {
            idle += 1;
        } else {
            kept.push(i + 1);
            rates.push(s.generation);
        }
    }
    if rates.is_empty() {
        return Ok(None);
    }
    let mut out = vec![];
    if prefill > 0 {
        out.push(format!(
            "{prefill} with a prefill (prompt throughput above 0)"
        ));
    }
    if changed > 0 {
        out.push(format!(
            "{changed} whose running count changed during it (a request's first interval)"
        ));
    }
    if idle > 0 {
        out.push(format!("{idle} without generation"));
    }
    let left_out = if out.is_empty() {
        String::new()
    } else {
        format!(
            "; left out of the {one} with one running request: {}",
            out.join(", ")
        )
    };
    Ok(Some(Batch1Rate {
        tokens_per_s: rates.iter().sum::<f64>() / rates.len() as f64,
        which: format!(
            "mean `Avg generation throughput` of {} steady stats intervals with one running request (lines {}: no prompt throughput, one request running at both ends){left_out}",
            rates.len(),
            line_list(&kept)
        ),
        kept,
    }))
}

/// The model of the engine config's line (`with config: model='..'`, the config's string in
/// vllm/config/vllm.py), or of the API server's `non-default args: {..., 'model': '..'`
/// (vllm/entrypoints/utils.py).
pub(crate) fn model(text: &str) -> Option<String> {
    let re =
        regex_once!(r#"(?:with config: model=|non-default args: \{.*?'model': )['"]([^'"]+)['"]"#);
    text.lines()
        .find_map(|l| re.captures(l).map(|c| c[1].to_string()))
}

/// The message of a vLLM log line: what follows the logger's `[file.py:123] ` prefix (the
/// whole line when it has none).
fn message(line: &str) -> &str {
    let re = regex_once!(r"\[[\w./-]+:\d+\] ");
    re.find(line).map_or(line, |m| &line[m.end()..])
}

/// What a CUDA-graph mode means for a verify of k + 1 tokens (vllm/config/compilation.py,
/// `CUDAGraphMode`), `None` for a name vLLM does not have.
fn mode_meaning(mode: &str) -> Option<(LaunchMode, &'static str)> {
    Some(match mode {
        "NONE" => (
            LaunchMode::Eager,
            "no CUDA graph: every kernel of the verify launched from the host",
        ),
        "PIECEWISE" => (
            LaunchMode::PartlyEager,
            "piecewise graphs only: attention runs eagerly between the graph pieces, in every layer of every verify",
        ),
        "FULL_DECODE_ONLY" => (
            LaunchMode::PartlyEager,
            "a full graph for uniform decode batches only (every request its k + 1 tokens); a verify batch that is not uniform (a prefill in it, fewer drafts for a request) runs with no graph at all",
        ),
        "FULL_AND_PIECEWISE" => (
            LaunchMode::Graph,
            "a full graph for uniform decode batches, a verify of k + 1 tokens per request among them; mixed batches piecewise",
        ),
        "FULL" => (
            LaunchMode::Graph,
            "a full graph for every batch of a captured size",
        ),
        _ => return None,
    })
}

/// The mode named by the config's `cudagraph_mode` as vLLM prints it: a name
/// (`<CUDAGraphMode.PIECEWISE: 1>`, `'PIECEWISE'`), a number (`0` NONE, `1` PIECEWISE, `2` FULL)
/// or a pair (decode, mixed): `[2,0]` FULL_DECODE_ONLY, `[2,1]` FULL_AND_PIECEWISE.
fn config_mode(v: &str) -> Option<&'static str> {
    let digits: Vec<char> = v.chars().filter(char::is_ascii_digit).collect();
    let named = [
        "FULL_AND_PIECEWISE",
        "FULL_DECODE_ONLY",
        "PIECEWISE",
        "FULL",
        "NONE",
    ];
    if let Some(n) = named.iter().find(|n| v.contains(*n)) {
        return Some(n);
    }
    Some(match digits.as_slice() {
        ['0'] | ['0', '0'] => "NONE",
        ['1'] | ['1', '1'] => "PIECEWISE",
        ['2'] | ['2', '2'] => "FULL",
        ['2', '0'] => "FULL_DECODE_ONLY",
        ['2', '1'] => "FULL_AND_PIECEWISE",
        _ => return None,
    })
}

/// A line where vLLM lowers the CUDA-graph mode: `...; setting cudagraph_mode=MODE` or
/// `Overriding cudagraph_mode [from X ]to MODE` (the mode in the first group).
fn lowering() -> &'static Regex {
    regex_once!(r"(?:setting cudagraph_mode=|Overriding cudagraph_mode (?:from \w+ )?to )([A-Z_]+)")
}

/// The CUDA-graph mode the engine ran with, as its log says it. `--enforce-eager` decides
/// (`Cudagraph is disabled under eager mode`, vllm/config/vllm.py; `Enforce eager set,
/// disabling torch.compile and CUDAGraphs`; `enforce_eager=True` in the config line), and so
/// does `Skipping CUDA graph capture` (vllm/v1/worker/gpu_model_runner.py, a mode of NONE).
/// Else the last statement of the mode: the config's `cudagraph_mode` (the mode asked for),
/// then the lines where vLLM lowers it: `...; setting cudagraph_mode=MODE` (the attention
/// backend cannot run a full graph, vllm/v1/worker/gpu_model_runner.py or
/// vllm/config/compilation.py: `CUDAGraphMode.FULL_AND_PIECEWISE is not supported with
/// spec-decode for attention backend FlashInferBackend (support:
/// AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); setting cudagraph_mode=PIECEWISE`; ngram
/// speculation) and `Overriding cudagraph_mode [from X ]to MODE` (vllm/config/vllm.py: pooling,
/// encoder-decoder, context parallel, dynamic speculation). `None` when the log says none.
pub(crate) fn launch(text: &str) -> Option<Launch> {
    let setting = lowering();
    let config = regex_once!(
        r#"['"]?cudagraph_mode['"]?\s*[:=]\s*(<CUDAGraphMode\.[A-Z_]+|\[\s*\d\s*,\s*\d\s*\]|\(\s*\d\s*,\s*\d\s*\)|\d\b|['"][A-Z_]+['"])"#
    );
    let eager = |quote: String| {
        let (mode, meaning) = mode_meaning("NONE")?;
        Some(Launch {
            mode,
            meaning: format!("--enforce-eager or a mode of NONE: {meaning}"),
            line: quote,
        })
    };
    let mut said: Option<Launch> = None;
    for line in text.lines() {
        for marker in [
            "Cudagraph is disabled under eager mode",
            "Enforce eager set, disabling",
            "Skipping CUDA graph capture",
        ] {
            if line.contains(marker) {
                return eager(quoted(message(line)));
            }
        }
        if line.contains("enforce_eager=True") {
            return eager("enforce_eager=True".into());
        }
        let (name, quote) = if let Some(c) = setting.captures(line) {
            (
                mode_meaning(&c[1]).map(|_| c[1].to_string()),
                quoted(message(line)),
            )
        } else if let Some(c) = config.captures(line) {
            let name = config_mode(&c[1]).map(str::to_string);
            (name, c[0].trim_start_matches(['\'', '"']).to_string())
        } else {
            continue;
        };
        if let Some((mode, meaning)) = name.as_deref().and_then(mode_meaning) {
            let spec = lowered_for_speculation(line)
                .map(|g| format!("; {}", g.words()))
                .unwrap_or_default();
            said = Some(Launch {
                mode,
                meaning: format!(
                    "cudagraph_mode={}: {meaning}{spec}",
                    name.unwrap_or_default()
                ),
                line: quote,
            });
        }
    }
    said
}

/// The CUDA-graph mode of the speculative arm against the plain one: vLLM lowers the mode for
/// speculative decoding alone, and says so (vllm/config/compilation.py and
/// vllm/v1/worker/gpu_model_runner.py: `CUDAGraphMode.FULL_AND_PIECEWISE is not supported with
/// spec-decode for attention backend FlashInferBackend (support:
/// AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); setting cudagraph_mode=PIECEWISE`, where
/// the backend's graphs cover one-token decodes but not a verify's k + 1;
/// `CUDAGraph is not supported for ngram-based speculative decoding; setting
/// cudagraph_mode=PIECEWISE`; vllm/config/vllm.py: `Dynamic speculative decoding ...
/// Overriding cudagraph_mode from FULL_AND_PIECEWISE to PIECEWISE`). The same server without
/// speculation keeps the mode asked for, so a plain-decoding baseline measured on it ran with
/// fuller graphs than the speculative arm.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SpecGraph {
    /// The mode asked for (and kept without speculation), when the line names it.
    pub(crate) asked: Option<String>,
    /// The mode the speculative arm ran.
    pub(crate) ran: String,
    /// The line's message.
    pub(crate) quote: String,
}

impl SpecGraph {
    /// `lowered for speculative decoding only: ...`.
    pub(crate) fn words(&self) -> String {
        format!(
            "lowered for speculative decoding only: the speculative arm ran {} where the same server without speculation keeps {}, so a plain-decoding baseline measured on it ran with fuller graphs than the speculative arm (compare the two at the same graph mode)",
            self.ran,
            self.asked.as_deref().unwrap_or("the mode it was given")
        )
    }
}

/// The line's lowering of the mode when it is for speculative decoding ([`SpecGraph`]).
fn lowered_for_speculation(line: &str) -> Option<SpecGraph> {
    let asked = regex_once!(
        r"CUDAGraphMode\.([A-Z_]+) is not supported|Overriding cudagraph_mode from ([A-Z_]+)"
    );
    let l = line.to_ascii_lowercase();
    if !(l.contains("spec-decode") || l.contains("speculative decoding")) {
        return None;
    }
    let ran = lowering().captures(line)?[1].to_string();
    let asked = asked
        .captures(line)
        .and_then(|c| c.get(1).or(c.get(2)))
        .map(|m| m.as_str().to_string());
    if asked.as_deref() == Some(ran.as_str()) {
        return None;
    }
    Some(SpecGraph {
        asked,
        ran,
        quote: quoted(message(line)),
    })
}

/// The last lowering of the mode for speculative decoding in `text` ([`SpecGraph`]).
pub(crate) fn spec_graph(text: &str) -> Option<SpecGraph> {
    text.lines().rev().find_map(lowered_for_speculation)
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

    /// vLLM lowers the CUDA-graph mode the attention backend cannot run: the lines of
    /// vllm/v1/worker/gpu_model_runner.py's cudagraph_mode resolution (`msg += "; setting
    /// cudagraph_mode=..."`, then `logger.warning(msg)`), with the logger's prefix.
    #[test]
    fn the_lowered_graph_mode_says_how_the_verify_ran() {
        let piecewise = "(EngineCore_DP0 pid=167) WARNING 05-03 18:41:32 [gpu_model_runner.py:4100] CUDAGraphMode.FULL_AND_PIECEWISE is not supported with FlashInferBackend backend (support: AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); setting cudagraph_mode=PIECEWISE\n";
        let l = launch(piecewise).unwrap();
        assert_eq!(l.mode, LaunchMode::PartlyEager);
        // the message, without the logger's prefix
        assert!(
            l.line
                .starts_with("CUDAGraphMode.FULL_AND_PIECEWISE is not supported"),
            "{l:?}"
        );
        assert!(
            l.line.ends_with("setting cudagraph_mode=PIECEWISE"),
            "{l:?}"
        );
        assert!(l.meaning.contains("attention runs eagerly"), "{l:?}");
        let decode_only = "WARNING 05-03 18:41:32 [gpu_model_runner.py:4100] CUDAGraphMode.FULL is not supported with FlashAttentionBackend backend (support: AttentionCGSupport.UNIFORM_BATCH); setting cudagraph_mode=FULL_DECODE_ONLY\n";
        let l = launch(decode_only).unwrap();
        assert_eq!(l.mode, LaunchMode::PartlyEager);
        assert!(l.meaning.contains("not uniform"), "{l:?}");
        // the same resolution, lowered to NONE: everything eager
        let none = "WARNING 05-03 18:41:32 [gpu_model_runner.py:4130] CUDAGraphMode.FULL_DECODE_ONLY is not supported with spec-decode for attention backend TritonAttentionBackend (support: AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); setting cudagraph_mode=NONE\n";
        assert_eq!(launch(none).unwrap().mode, LaunchMode::Eager);
        // FULL lowered to FULL_AND_PIECEWISE keeps a uniform verify in the full graph
        let fp = "WARNING 05-03 18:41:32 [gpu_model_runner.py:4090] CUDAGraphMode.FULL is not supported with FlashInferBackend backend (support: AttentionCGSupport.UNIFORM_BATCH); setting cudagraph_mode=FULL_AND_PIECEWISE\n";
        assert_eq!(launch(fp).unwrap().mode, LaunchMode::Graph);
        // two lowerings in a row: the last is the mode that ran
        let both = format!("{fp}{piecewise}");
        assert_eq!(launch(&both).unwrap().mode, LaunchMode::PartlyEager);
        assert_eq!(launch(VLLM_LOG), None);
    }

    /// `--enforce-eager`: vllm/config/vllm.py logs `Cudagraph is disabled under eager mode`;
    /// the engine's config line (vllm/v1/engine/core.py, `Initializing a V1 LLM engine (v%s)
    /// with config: %s`) holds `enforce_eager=True` and the model.
    #[test]
    fn enforce_eager_and_the_model_of_the_config_line() {
        let eager = "(APIServer pid=1) INFO 11-25 08:00:42 [vllm.py:500] Cudagraph is disabled under eager mode\n";
        let l = launch(eager).unwrap();
        assert_eq!(l.mode, LaunchMode::Eager);
        assert_eq!(l.line, "Cudagraph is disabled under eager mode");
        assert!(l.meaning.starts_with("--enforce-eager"), "{l:?}");
        let config = "(EngineCore_DP0 pid=270) INFO 11-25 08:00:48 [core.py:93] Initializing a V1 LLM engine (v0.11.1) with config: model='Qwen/Qwen3-30B-A3B', speculative_config=SpeculativeConfig(method='eagle3', model='x/eagle', num_spec_tokens=3), tokenizer='Qwen/Qwen3-30B-A3B', enforce_eager=True, tensor_parallel_size=4\n";
        assert_eq!(launch(config).unwrap().line, "enforce_eager=True");
        assert_eq!(model(config).as_deref(), Some("Qwen/Qwen3-30B-A3B"));
        assert_eq!(model(VLLM_LOG), None);
    }

    /// The other wordings of the mode: vllm/config/vllm.py's `Overriding cudagraph_mode ...`
    /// (with and without `from X`), ngram speculation's `setting cudagraph_mode=PIECEWISE`,
    /// gpu_model_runner.py's `Skipping CUDA graph capture` and the config's `cudagraph_mode` as
    /// a pair (`[2,1]`: FULL decode, PIECEWISE mixed) or a name; the last statement decides.
    #[test]
    fn every_wording_of_the_mode_is_read() {
        let mode = |t: &str| launch(t).map(|l| l.mode);
        let dsd = "WARNING 05-03 18:41:32 [vllm.py:900] Dynamic speculative decoding changes the target verification length at runtime. Overriding cudagraph_mode from FULL_AND_PIECEWISE to PIECEWISE for reliability.\n";
        assert_eq!(mode(dsd), Some(LaunchMode::PartlyEager));
        let dcp = "WARNING 10-17 13:50:11 [vllm.py:385] Decode context parallel (DCP) is enabled, which is incompatible with full CUDA graphs. Overriding cudagraph_mode to PIECEWISE.\n";
        let l = launch(dcp).unwrap();
        assert_eq!(l.mode, LaunchMode::PartlyEager);
        assert!(l.meaning.starts_with("cudagraph_mode=PIECEWISE"), "{l:?}");
        let ngram = "WARNING [compilation.py:900] CUDAGraph is not supported for ngram-based speculative decoding; setting cudagraph_mode=PIECEWISE\n";
        assert_eq!(mode(ngram), Some(LaunchMode::PartlyEager));
        let skip = "INFO [gpu_model_runner.py:4000] Skipping CUDA graph capture. To turn on CUDA graph capture, ensure `cudagraph_mode` was not manually set to `NONE`\n";
        assert_eq!(mode(skip), Some(LaunchMode::Eager));
        let forced = "WARNING [vllm.py:1172] Enforce eager set, disabling torch.compile and CUDAGraphs. This is equivalent to setting -cc.mode=none -cc.cudagraph_mode=none\n";
        assert_eq!(mode(forced), Some(LaunchMode::Eager));
        // the config asks for FULL_AND_PIECEWISE ([2,1]); the backend lowers it later
        let config = r#"INFO [core.py:93] Initializing a V1 LLM engine (v0.11.0) with config: model='m', compilation_config={"level":3,"cudagraph_mode":[2,1],"use_cudagraph":true}"#;
        let l = launch(config).unwrap();
        assert_eq!(l.mode, LaunchMode::Graph);
        assert_eq!(l.line, r#"cudagraph_mode":[2,1]"#.trim_start_matches('"'));
        assert!(
            l.meaning.starts_with("cudagraph_mode=FULL_AND_PIECEWISE"),
            "{l:?}"
        );
        assert_eq!(
            mode(&format!("{config}\n{ngram}")),
            Some(LaunchMode::PartlyEager)
        );
        let decode_only = "with config: model='m', compilation_config={'cudagraph_mode': <CUDAGraphMode.FULL_DECODE_ONLY: (2, 0)>}";
        assert_eq!(
            launch(decode_only).unwrap().meaning.split(':').next(),
            Some("cudagraph_mode=FULL_DECODE_ONLY")
        );
        assert_eq!(mode(r#"{"cudagraph_mode":0}"#), Some(LaunchMode::Eager));
        // the API server's arguments name the model
        let args = "(APIServer pid=1) INFO 05-14 08:20:00 [utils.py:233] non-default args: {'model_tag': 'Qwen/Qwen3-8B', 'model': 'Qwen/Qwen3-8B', 'speculative_config': {'method': 'eagle3', 'model': 'x/eagle'}}\n";
        assert_eq!(model(args).as_deref(), Some("Qwen/Qwen3-8B"));
    }

    fn data() -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/vllm-glm51-mtp3-tp8.log");
        std::fs::read_to_string(p).unwrap()
    }

    /// k as vLLM prints it: the engine's config line (`SpeculativeConfig.__repr__`, the count
    /// as resolved) before the API server's arguments (the JSON as given, `num_speculative_tokens`
    /// there), and the arguments alone; the method beside it.
    #[test]
    fn k_from_the_speculative_config() {
        let c = spec_config(&data()).unwrap();
        assert_eq!((c.k, c.method.as_deref()), (3, Some("mtp")));
        assert_eq!(
            c.quote,
            "SpeculativeConfig(method='mtp', model='zai-org/GLM-5.1-FP8', num_spec_tokens=3)"
        );
        let args = "(APIServer pid=1) INFO 05-14 08:20:00 [utils.py:233] non-default args: {'model': 'm', 'speculative_config': {'method': 'eagle3', 'model': 'x/eagle', 'num_speculative_tokens': 5}, 'tensor_parallel_size': 4}\n";
        let c = spec_config(args).unwrap();
        assert_eq!((c.k, c.method.as_deref()), (5, Some("eagle3")));
        assert_eq!(tensor_parallel(args), Some(4));
        // ngram's repr has no draft model
        let ngram = "with config: model='m', speculative_config=SpeculativeConfig(method='ngram', model=None, num_spec_tokens=4), tensor_parallel_size=2";
        assert_eq!(spec_config(ngram).map(|c| c.k), Some(4));
        assert_eq!(tensor_parallel(ngram), Some(2));
        // the arguments without a count (the draft model's config gives it): none here
        assert_eq!(
            spec_config("non-default args: {'speculative_config': {'method': 'mtp'}}"),
            None
        );
        assert_eq!(spec_config(VLLM_LOG), None);
    }

    /// vLLM's figures over the built log's 12 lines (tests/data/README.md): 5006 accepted,
    /// 4100 drafts, 12300 drafted; per position 2548, 1558 and 900 accepted of 4100 drafts.
    #[test]
    fn the_acceptance_figures_over_all_lines() {
        let a = acceptance(&data()).unwrap().unwrap();
        assert_eq!(a.lines, 12);
        assert!((a.accepted - 5006.0).abs() < 1e-9);
        assert!((a.drafts - 4100.0).abs() < 1e-6, "{}", a.drafts);
        assert_eq!(a.drafted, Some(12300.0));
        let r = a.position_rates.clone().unwrap();
        for (got, want) in r
            .iter()
            .zip([2548.0 / 4100.0, 1558.0 / 4100.0, 900.0 / 4100.0])
        {
            assert!((got - want).abs() < 1e-9, "{r:?}");
        }
        assert!((a.draft_rate().unwrap() - 5006.0 / 12300.0).abs() < 1e-12);
        assert_eq!(a.draft_rates.len(), 12);
        assert!((a.draft_rates[5] - 0.407).abs() < 1e-12);
        // without a count of drafted tokens, no accept rate
        let none = acceptance("SpecDecoding metrics: Mean acceptance length: 2.50, Accepted: 100 tokens, Per-position acceptance rate: 0.600, 0.400\n")
            .unwrap()
            .unwrap();
        assert_eq!((none.drafted, none.draft_rate()), (None, None));
        assert!(none
            .conversion("x.log", Some(2))
            .contains("1 + 100 / 100 = 2.00"));
    }

    /// `--accept-rate` given vLLM's accept rate: 0.407 (line 6's `40.7%`) as one per-token
    /// rate is 1 + 0.407 + 0.407^2 + 0.407^3 = 1.64 at k = 3, where vLLM's means 1 + 3 x 0.407
    /// = 2.221.
    #[test]
    fn a_vllm_accept_rate_given_as_a_per_token_rate_is_warned() {
        let a = acceptance(&data()).unwrap().unwrap();
        let w = accept_rate_warning(0.407, 3, Some(("v.log", &a)), None).unwrap();
        assert!(
            w.starts_with(
                "warning: --accept-rate 0.407 matches v.log's `Avg Draft acceptance rate: 40.7%`"
            ),
            "{w}"
        );
        assert!(w.contains("= 1.64 at k = 3"), "{w}");
        assert!(
            w.contains("tau = 1 + k x rate = 1 + 3 x 0.407 = 2.22"),
            "{w}"
        );
        assert!(w.contains("give --accept-length 2.22 instead"), "{w}");
        // a rate far from every line's: no warning, unless the evidence says vLLM
        assert_eq!(accept_rate_warning(0.7, 3, Some(("v.log", &a)), None), None);
        let w = accept_rate_warning(0.7, 3, None, Some("--engine vllm")).unwrap();
        assert!(
            w.contains("0.7 is given where --engine vllm says vLLM"),
            "{w}"
        );
    }

    /// The graph mode lowered for speculative decoding (vllm/config/compilation.py's
    /// spec-decode guard) is the speculative arm's alone; a lowering for the backend alone
    /// (both arms) is not.
    #[test]
    fn the_speculative_arms_graph_mode_against_the_plain_ones() {
        let g = spec_graph(&data()).unwrap();
        assert_eq!(g.asked.as_deref(), Some("FULL_AND_PIECEWISE"));
        assert_eq!(g.ran, "PIECEWISE");
        assert!(g
            .quote
            .starts_with("CUDAGraphMode.FULL_AND_PIECEWISE is not supported with spec-decode"));
        let both = "WARNING 05-03 18:41:32 [gpu_model_runner.py:4100] CUDAGraphMode.FULL_AND_PIECEWISE is not supported with FlashInferBackend backend (support: AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); setting cudagraph_mode=PIECEWISE\n";
        assert_eq!(spec_graph(both), None);
        assert!(!launch(both).unwrap().meaning.contains("speculative"));
        let dsd = "WARNING 05-03 18:41:32 [vllm.py:900] Dynamic speculative decoding changes the target verification length at runtime. Overriding cudagraph_mode from FULL_AND_PIECEWISE to PIECEWISE for reliability.\n";
        let g = spec_graph(dsd).unwrap();
        assert_eq!(
            (g.asked.as_deref(), g.ran.as_str()),
            (Some("FULL_AND_PIECEWISE"), "PIECEWISE")
        );
        let ngram = "WARNING [compilation.py:900] CUDAGraph is not supported for ngram-based speculative decoding; setting cudagraph_mode=PIECEWISE\n";
        let g = spec_graph(ngram).unwrap();
        assert_eq!((g.asked, g.ran.as_str()), (None, "PIECEWISE"));
    }

    /// Steady intervals only, per engine: with two engines (data parallel) each line's
    /// running count is compared with its own engine's line before.
    #[test]
    fn steady_intervals_are_counted_per_engine() {
        let l = |e: u32, p: f64, g: f64, n: u32| {
            format!("INFO 05-01 10:00:00 [loggers.py:123] Engine {e:03}: Avg prompt throughput: {p:.1} tokens/s, Avg generation throughput: {g:.1} tokens/s, Running: {n} reqs, Waiting: 0 reqs, GPU KV cache usage: 0.1%, Prefix cache hit rate: 0.0%\n")
        };
        let text = [
            l(0, 100.0, 40.0, 1), // a prefill
            l(1, 0.0, 0.0, 0),
            l(0, 0.0, 90.0, 1), // steady: engine 0 ran one before
            l(1, 0.0, 50.0, 1), // engine 1's first interval of a request: partial
            l(1, 0.0, 80.0, 1), // steady
        ]
        .concat();
        let b = steady_rate(&text).unwrap().unwrap();
        // (90 + 80) / 2
        assert_eq!((b.tokens_per_s, b.kept.clone()), (85.0, vec![3, 5]));
        // one interval alone, with no line before it: not steady
        assert_eq!(steady_rate(&l(0, 0.0, 95.6, 1)), Ok(None));
    }
}
