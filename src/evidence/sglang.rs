//! SGLang's log lines, the only file that parses them: its decode lines
//! (python/sglang/srt/managers/scheduler.py),
//!
//! `[2025-06-01 10:00:00 TP0] Decode batch. #running-req: 1, #token: 812, token usage: 0.00,
//! accept len: 2.31, accept rate: 0.44, cuda graph: True, gen throughput (token/s): 95.12,
//! #queue-req: 0,`
//!
//! Each line reports the mean over one logging interval (a fixed number of decode iterations),
//! so the mean accept length is the mean of the lines; lines of 0.00 (no speculative
//! decoding in that interval) are left out. `cuda graph: False` lines are counted: they mean
//! the engine ran those iterations eagerly ([`launch`]). At start-up SGLang logs its
//! arguments, the model's path among them ([`model_path`]).

use super::{number_after, quoted, Launch, LaunchMode, ACCEPT_LENGTH, COUNT, THROUGHPUT};
use crate::measure::attribution::Spread;

/// What marks a decode line (and an SGLang log): `Decode batch.` in SGLang up to 0.4,
/// `Decode batch,` since.
pub(crate) const DECODE_LINE: &str = "Decode batch";
/// What marks SGLang's start-up line of its arguments (and an SGLang log).
pub(crate) const ARGS_LINE: &str = "server_args=";

/// What SGLang's decode log says about acceptance.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AcceptLog {
    /// Mean over the lines with speculative decoding of `accept len`.
    pub(crate) mean_accept_len: f64,
    pub(crate) spread: Spread,
    /// Lines with an accept length (> 0).
    pub(crate) lines: usize,
    /// Decode lines with `cuda graph: True` / `False`.
    pub(crate) cuda_graph_true: usize,
    pub(crate) cuda_graph_false: usize,
}

/// The acceptance of SGLang's decode lines in `text`; `None` when no line has an accept
/// length above 0. A decode line whose `accept len:` is no accept length is an error naming
/// the line ([`super::number_after`]).
pub(crate) fn acceptance(text: &str) -> Result<Option<AcceptLog>, String> {
    let (mut v, mut t, mut f) = (Vec::new(), 0, 0);
    for (i, l) in text.lines().enumerate() {
        if !l.contains(DECODE_LINE) {
            continue;
        }
        let x = number_after(l, "accept len:", ACCEPT_LENGTH)
            .map_err(|e| format!("line {}: {e}", i + 1))?;
        if let Some(x) = x.filter(|x| *x > 0.0) {
            v.push(x);
        }
        match graph(l) {
            Some(true) => t += 1,
            Some(false) => f += 1,
            None => {}
        }
    }
    let Some(spread) = Spread::of(&v) else {
        return Ok(None);
    };
    Ok(Some(AcceptLog {
        mean_accept_len: v.iter().sum::<f64>() / v.len() as f64,
        spread,
        lines: v.len(),
        cuda_graph_true: t,
        cuda_graph_false: f,
    }))
}

/// A line's `cuda graph: True` (true) or `False` (false).
fn graph(line: &str) -> Option<bool> {
    let re = regex_once!(r"cuda graph: (True|False)");
    let c = re.captures(line)?;
    Some(&c[1] == "True")
}

/// The launch of the verify as the decode lines say it: `cuda graph: False` on every line
/// (eager), on some (partly eager: those iterations), on none (graph); the first line of the
/// mode that decides it, quoted. Prefill lines say `cuda graph:` too (of the prefill) and are
/// not counted. With speculative decoding the flag is the verify forward's
/// (its `can_run_cuda_graph`: a batch above the captured sizes, `--cuda-graph-max-bs`, or
/// `--disable-cuda-graph` runs eagerly). `None` without a decode line that says either.
pub(crate) fn launch(text: &str) -> Option<Launch> {
    let (mut t, mut f) = (0usize, 0usize);
    let (mut first_true, mut first_false) = (None, None);
    for l in text.lines().filter(|l| l.contains(DECODE_LINE)) {
        match graph(l) {
            Some(true) => {
                t += 1;
                first_true = first_true.or(Some(l));
            }
            Some(false) => {
                f += 1;
                first_false = first_false.or(Some(l));
            }
            None => {}
        }
    }
    let (mode, meaning, line) = match (t, f) {
        (0, 0) => return None,
        (_, 0) => (
            LaunchMode::Graph,
            format!("all {t} decode lines say `cuda graph: True`: the verify ran from SGLang's captured graphs"),
            first_true?,
        ),
        (0, _) => (
            LaunchMode::Eager,
            format!("all {f} decode lines say `cuda graph: False`: every verify launched kernel by kernel"),
            first_false?,
        ),
        _ => (
            LaunchMode::PartlyEager,
            format!(
                "{f} of {} decode lines say `cuda graph: False`: the verifies of those intervals launched kernel by kernel (a batch outside the captured sizes, --cuda-graph-max-bs)",
                t + f
            ),
            first_false?,
        ),
    };
    // The message, from `Decode batch` (the logger's `[time TP0] ` left out).
    let message = line.find(DECODE_LINE).map_or(line, |i| &line[i..]);
    Some(Launch {
        mode,
        meaning,
        line: quoted(message),
    })
}

/// The model the server loaded: `server_args=ServerArgs(model_path='...'`, which SGLang logs at
/// start-up (python/sglang/srt/entrypoints/engine.py, `server_args=`), or the same arguments
/// as a dict (`server_args={'model_path': '...'`).
pub(crate) fn model_path(text: &str) -> Option<String> {
    let re = regex_once!(
        r#"server_args=(?:ServerArgs\(|\{).*?\bmodel_path['"]?\s*[=:]\s*['"]([^'"]+)['"]"#
    );
    text.lines()
        .find_map(|l| re.captures(l).map(|c| c[1].to_string()))
}

/// A decode line's running requests and generation throughput (`#running-req: N, ... gen
/// throughput (token/s): X`); `None` for a line without both; an error for a value that is
/// not a count or a throughput.
pub(crate) fn throughput(line: &str) -> Result<Option<(f64, f64)>, String> {
    const N: &str = "#running-req:";
    const T: &str = "gen throughput (token/s):";
    if !(line.contains(N) && line.contains(T)) {
        return Ok(None);
    }
    Ok(number_after(line, N, COUNT)?.zip(number_after(line, T, THROUGHPUT)?))
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
        let a = acceptance(text).unwrap().unwrap();
        assert!((a.mean_accept_len - 2.5).abs() < 1e-9);
        assert_eq!((a.lines, a.cuda_graph_true, a.cuda_graph_false), (2, 2, 1));
        assert!(
            acceptance("[x TP0] Decode batch. #running-req: 1, cuda graph: True")
                .unwrap()
                .is_none()
        );
    }

    /// `cuda graph:` of the decode lines (python/sglang/srt/managers/scheduler.py): all False
    /// is an eager verify, some False a partly eager one, all True a graphed one; the line that
    /// decides it is quoted.
    #[test]
    fn the_decode_lines_say_how_the_verify_ran() {
        let line = |g: &str| {
            format!("[2025-06-01 10:00:01 TP0] Decode batch. #running-req: 1, #token: 812, token usage: 0.00, accept len: 2.31, cuda graph: {g}, gen throughput (token/s): 95.12, #queue-req: 0,\n")
        };
        let eager = line("False").repeat(2);
        let l = launch(&eager).unwrap();
        assert_eq!(l.mode, LaunchMode::Eager);
        assert!(
            l.meaning
                .starts_with("all 2 decode lines say `cuda graph: False`"),
            "{l:?}"
        );
        assert_eq!(l.line, line("False")[26..].trim());
        assert!(l.line.starts_with("Decode batch."), "{l:?}");
        let partly = format!("{}{}{}", line("True"), line("False"), line("True"));
        let l = launch(&partly).unwrap();
        assert_eq!(l.mode, LaunchMode::PartlyEager);
        assert!(l.meaning.starts_with("1 of 3 decode lines"), "{l:?}");
        assert!(l.line.contains("cuda graph: False"), "{l:?}");
        assert_eq!(launch(&line("True")).unwrap().mode, LaunchMode::Graph);
        assert_eq!(launch("[x] Prefill batch. #new-seq: 1\n"), None);
        // SGLang since 0.5 writes `Decode batch,` and says `cuda graph:` of prefills too: the
        // prefill's False is no eager verify, the decode line's True decides
        let newer = "[2026-08-15 13:17:04] Prefill batch, #new-seq: 1, #new-token: 512, #cached-token: 0, #running-req: 0, #pending-token: 128, cuda graph: False, input throughput (token/s): 6342.89\n[2026-08-15 13:17:05 TP0 EP0] Decode batch, #running-req: 1, #full token: 620, full token usage: 0.00, accept len: 2.69, accept rate: 0.56, cuda graph: True, gen throughput (token/s): 88.10, #queue-req: 0\n";
        let l = launch(newer).unwrap();
        assert_eq!(l.mode, LaunchMode::Graph);
        assert!(l.line.starts_with("Decode batch, #running-req: 1"), "{l:?}");
        assert_eq!(
            launch(&newer.replace("True", "False")).unwrap().mode,
            LaunchMode::Eager
        );
    }

    /// SGLang logs its arguments at start-up (python/sglang/srt/entrypoints/engine.py,
    /// `server_args=ServerArgs(model_path=...`).
    #[test]
    fn the_model_path_of_the_start_up_line() {
        let text = "[2026-02-26 05:19:58] server_args=ServerArgs(model_path='zai-org/GLM-5-FP8', tokenizer_path='zai-org/GLM-5-FP8', tokenizer_mode='auto', tp_size=8)\n";
        assert_eq!(model_path(text).as_deref(), Some("zai-org/GLM-5-FP8"));
        let dict =
            "[2026-02-26 05:19:58] server_args={'model_path': '/models/Kimi-K2.5', 'tp_size': 8}\n";
        assert_eq!(model_path(dict).as_deref(), Some("/models/Kimi-K2.5"));
        assert_eq!(model_path("[x TP0] Decode batch. cuda graph: True\n"), None);
    }
}
