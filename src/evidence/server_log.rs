//! The server's log, read once: SGLang's lines ([`super::sglang`]) or vLLM's
//! ([`super::vllm`]), each format parsed in its own file. `breakeven --accept-from-log` takes
//! its accept length ([`read_accept_log`]); `explain --server-log` all it says
//! ([`read_server_log`]).

use std::path::Path;

use super::{sglang, short_name, vllm, Labelled, Launch, Origin, Source};
use crate::error::usage;
use crate::model::Engine;
use crate::util::read::{read, SERVER_LOG};

/// What the server log says.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerLog {
    pub file: String,
    pub engine: Option<Engine>,
    /// The mean accept length, labelled measured from the log; `None` when it holds none.
    pub accept_length: Option<Labelled>,
    /// The model the server loaded, as its start-up lines name it (SGLang's `model_path`,
    /// vLLM's `model`).
    pub model: Option<String>,
    /// How the verify was launched, as the log says it (SGLang's `cuda graph:` decode lines;
    /// vLLM's CUDA-graph mode and `--enforce-eager`).
    pub launch: Option<Launch>,
    /// The engines' `Custom allreduce is disabled ...` warning, as found.
    pub custom_ar_off: Option<String>,
    /// Generation throughput of one running request as the engine printed it: (mean tok/s,
    /// lines): SGLang's `gen throughput (token/s)` of `Decode batch.` lines with
    /// `#running-req: 1`, vLLM's `Avg generation throughput` of lines with `Running: 1 reqs`.
    pub batch1_tokens_per_s: Option<(f64, usize)>,
}

/// A log that is not UTF-8, refused where its accept length is wanted.
fn not_utf8(path: &Path) -> anyhow::Error {
    usage(format!(
        "--accept-from-log '{}' is not text (not UTF-8: a binary or compressed file?): give the log a vLLM or SGLang server wrote (its `SpecDecoding metrics:` or decode lines)",
        path.display()
    ))
}

/// The mean accept length of `--accept-from-log FILE` (SGLang's decode log lines, or vLLM's
/// `SpecDecoding metrics:` lines), labelled measured from the log with the engine named, and a
/// note when some SGLang lines ran without a CUDA graph.
pub fn read_accept_log(path: &Path) -> anyhow::Result<(Labelled, Vec<String>)> {
    let text = String::from_utf8(read(path, "--accept-from-log", SERVER_LOG)?)
        .map_err(|_| not_utf8(path))?;
    accept_length(path, "--accept-from-log", vllm::acceptance(&text), || {
        sglang::acceptance(&text)
    })
}

/// The accept length of a log's vLLM lines as [`vllm::acceptance`] read them, else of its SGLang
/// lines (`sglang`, called only then); errors name the file as given to `flag`.
fn accept_length(
    path: &Path,
    flag: &str,
    vllm: Result<Option<vllm::Acceptance>, String>,
    sglang: impl FnOnce() -> Result<Option<sglang::AcceptLog>, String>,
) -> anyhow::Result<(Labelled, Vec<String>)> {
    let file = short_name(path);
    let refuse = |e: String| usage(format!("{flag} '{}' {e}", path.display()));
    if let Some(v) = vllm.map_err(refuse)? {
        let detail = format!(
            "vLLM: 1 + accepted tokens / drafts over {} `SpecDecoding metrics` lines measured from the log (per line {:.2}..{:.2}{})",
            v.lines,
            v.min,
            v.max,
            v.positions
                .map(|k| format!(", {k} draft positions"))
                .unwrap_or_default()
        );
        let (value, origin) = (
            v.mean_accept_len,
            Origin::read(Source::Measured, file, detail),
        );
        return Ok((Labelled { value, origin }, vec![]));
    }
    let log = sglang().map_err(refuse)?.ok_or_else(|| {
        usage(format!(
            "{flag} '{}': no SGLang decode line with an accept length above 0 (`Decode batch. ... accept len: 2.31`); is speculative decoding on?",
            path.display()
        ))
    })?;
    let mut notes = vec![];
    if log.cuda_graph_false > 0 {
        notes.push(format!(
            "{file}: {} of {} decode lines say `cuda graph: False` (those iterations ran eagerly)",
            log.cuda_graph_false,
            log.cuda_graph_false + log.cuda_graph_true
        ));
    }
    let detail = format!(
        "SGLang: mean `accept len` of {} decode lines measured from the log ({:.2}..{:.2})",
        log.lines, log.spread.min, log.spread.max
    );
    let (value, origin) = (
        log.mean_accept_len,
        Origin::read(Source::Measured, file, detail),
    );
    Ok((Labelled { value, origin }, notes))
}

/// Reads the server log of `--server-log`.
pub fn read_server_log(path: &Path) -> anyhow::Result<ServerLog> {
    let bytes = read(path, "--server-log", SERVER_LOG)?;
    let text = String::from_utf8_lossy(&bytes);
    let refuse = |e: String| usage(format!("--server-log '{}' {e}", path.display()));
    let sg = sglang::acceptance(&text).map_err(refuse)?;
    let vl = vllm::acceptance(&text).map_err(refuse)?;
    // The engines' own lines first (a log of one may name the other in an import warning).
    let engine = if vl.is_some() {
        Some(Engine::Vllm)
    } else if text.contains(sglang::DECODE_LINE) || text.contains(sglang::ARGS_LINE) {
        Some(Engine::Sglang)
    } else if vllm::START_LINES.iter().any(|m| text.contains(m))
        || text.contains("vllm")
        || text.contains("vLLM")
    {
        Some(Engine::Vllm)
    } else if text.contains("sglang") || text.contains("SGLang") {
        Some(Engine::Sglang)
    } else {
        None
    };
    let accept_length = if sg.is_none() && vl.is_none() {
        None
    } else if let std::borrow::Cow::Owned(_) = text {
        // A log that is not UTF-8: refused as `breakeven --accept-from-log` refuses it.
        return Err(not_utf8(path));
    } else {
        // Its note on `cuda graph: False` lines is the launch's (below), said once.
        let (l, _) = accept_length(path, "--server-log", Ok(vl.clone()), || Ok(sg.clone()))?;
        Some(l)
    };
    if engine.is_none() {
        crate::usage_bail!(
            "--server-log '{}': neither SGLang's log (`Decode batch.` lines) nor vLLM's (`SpecDecoding metrics:` lines, `vllm` in its lines); give the log the server printed",
            path.display()
        );
    }
    let (model, launch) = match engine {
        Some(Engine::Vllm) => (vllm::model(&text), vllm::launch(&text)),
        _ => (sglang::model_path(&text), sglang::launch(&text)),
    };
    let custom_ar_off = text.lines().find_map(|l| {
        let i = l.find("Custom allreduce is disabled")?;
        Some(l[i..].trim().chars().take(160).collect::<String>())
    });
    Ok(ServerLog {
        file: short_name(path),
        engine,
        accept_length,
        model,
        launch,
        custom_ar_off,
        batch1_tokens_per_s: batch1_throughput(&text).map_err(refuse)?,
    })
}

/// The mean generation throughput of the log's lines with exactly one running request (batch
/// 1, the break-even's assumption) and a throughput above 0, SGLang's decode lines and vLLM's
/// periodic stats alike. `None` when no line qualifies; an error naming the line where a count
/// or a throughput is not one (a negative or non-finite value, an exponent past the range).
pub(crate) fn batch1_throughput(text: &str) -> Result<Option<(f64, usize)>, String> {
    let mut v = vec![];
    for (i, l) in text.lines().enumerate() {
        let read = if l.contains(sglang::DECODE_LINE) {
            sglang::throughput(l)
        } else {
            vllm::throughput(l)
        };
        if let Some((n, t)) = read.map_err(|e| format!("line {}: {e}", i + 1))? {
            if n == 1.0 && t > 0.0 {
                v.push(t);
            }
        }
    }
    Ok((!v.is_empty()).then(|| (v.iter().sum::<f64>() / v.len() as f64, v.len())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_without_accept_lengths_is_a_usage_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("server.log");
        std::fs::write(&p, "hello\n").unwrap();
        let e = read_accept_log(&p).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("server.log"));
    }

    #[test]
    fn batch_one_throughput_is_read_from_both_engines_logs() {
        let sg = "[x TP0] Decode batch. #running-req: 1, #token: 64, token usage: 0.00, accept len: 2.40, cuda graph: True, gen throughput (token/s): 100.00, #queue-req: 0,\n\
    [x TP0] Decode batch. #running-req: 2, #token: 64, token usage: 0.00, accept len: 2.40, cuda graph: True, gen throughput (token/s): 180.00, #queue-req: 0,\n\
    [x TP0] Decode batch. #running-req: 1, #token: 99, token usage: 0.00, accept len: 2.40, cuda graph: True, gen throughput (token/s): 80.00, #queue-req: 0,\n\
    [x TP0] Decode batch. #running-req: 0, #token: 0, token usage: 0.00, accept len: 0.00, cuda graph: True, gen throughput (token/s): 0.00, #queue-req: 0,\n";
        // the two lines of one running request: (100 + 80) / 2
        assert_eq!(batch1_throughput(sg), Ok(Some((90.0, 2))));
        let vl = "INFO 05-01 10:00:00 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 95.6 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.1%, Prefix cache hit rate: 0.0%\n\
    INFO 05-01 10:00:10 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%\n";
        assert_eq!(batch1_throughput(vl), Ok(Some((95.6, 1))));
        assert_eq!(batch1_throughput("nothing\n"), Ok(None));
    }
}
