//! vLLM's log lines, the only file that parses them: `SpecDecoding metrics:`
//! (vllm/v1/spec_decode/metrics.py), the periodic stats (vllm/v1/metrics/loggers.py), the
//! engine config's line (`Initializing a V1 LLM engine (v..) with config: model='..', ...,
//! enforce_eager=True`, vllm/v1/engine/core.py) and the CUDA-graph mode as vLLM settles it
//! ([`launch`]).

use std::sync::OnceLock;

use regex::Regex;

use super::{
    number, number_after, quote_line, quoted, Launch, LaunchMode, ACCEPT_LENGTH, COUNT, FRACTION,
    THROUGHPUT,
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
pub fn acceptance(text: &str) -> Result<Option<Acceptance>, String> {
    let (mut accepted, mut drafts, mut lines) = (0.0, 0.0, 0usize);
    let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut positions = None;
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
/// tokens/s, Running: N reqs`); `None` for a line without both; an error for a value that is
/// not a count or a throughput.
pub(crate) fn throughput(line: &str) -> Result<Option<(f64, f64)>, String> {
    const N: &str = "Running:";
    const T: &str = "Avg generation throughput:";
    if !(line.contains(N) && line.contains(T)) {
        return Ok(None);
    }
    Ok(number_after(line, N, COUNT)?.zip(number_after(line, T, THROUGHPUT)?))
}

/// The model of the engine config's line (`with config: model='..'`, the config's string in
/// vllm/config/vllm.py), or of the API server's `non-default args: {..., 'model': '..'`
/// (vllm/entrypoints/utils.py).
pub(crate) fn model(text: &str) -> Option<String> {
    static MODEL: OnceLock<Regex> = OnceLock::new();
    let re = MODEL.get_or_init(|| {
        Regex::new(r#"(?:with config: model=|non-default args: \{.*?'model': )['"]([^'"]+)['"]"#)
            .expect("valid regex")
    });
    text.lines()
        .find_map(|l| re.captures(l).map(|c| c[1].to_string()))
}

/// The message of a vLLM log line: what follows the logger's `[file.py:123] ` prefix (the
/// whole line when it has none).
fn message(line: &str) -> &str {
    static PREFIX: OnceLock<Regex> = OnceLock::new();
    let re = PREFIX.get_or_init(|| Regex::new(r"\[[\w./-]+:\d+\] ").expect("valid regex"));
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
    static SETTING: OnceLock<Regex> = OnceLock::new();
    static CONFIG: OnceLock<Regex> = OnceLock::new();
    let setting = SETTING.get_or_init(|| {
        Regex::new(
            r"(?:setting cudagraph_mode=|Overriding cudagraph_mode (?:from \w+ )?to )([A-Z_]+)",
        )
        .expect("valid regex")
    });
    let config = CONFIG.get_or_init(|| {
        Regex::new(r#"['"]?cudagraph_mode['"]?\s*[:=]\s*(<CUDAGraphMode\.[A-Z_]+|\[\s*\d\s*,\s*\d\s*\]|\(\s*\d\s*,\s*\d\s*\)|\d\b|['"][A-Z_]+['"])"#)
            .expect("valid regex")
    });
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
            said = Some(Launch {
                mode,
                meaning: format!("cudagraph_mode={}: {meaning}", name.unwrap_or_default()),
                line: quote,
            });
        }
    }
    said
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
}
