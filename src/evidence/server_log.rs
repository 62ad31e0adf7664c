//! The server's log, read once: SGLang's lines ([`super::sglang`]) or vLLM's
//! ([`super::vllm`]), each format parsed in its own file. `breakeven --accept-from-log` takes
//! its accept length ([`read_accept_log`]); `explain --server-log` all it says
//! ([`read_server_log`]).

use std::path::Path;

use super::{sglang, short_name, vllm, Batch1Rate, Labelled, Launch, Origin, Source};
use crate::error::usage;
use crate::model::Engine;
use crate::util::read::{read, SERVER_LOG};

/// What the server log says.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ServerLog {
    pub(crate) file: String,
    pub(crate) engine: Option<Engine>,
    /// The mean accept length, labelled measured from the log; `None` when it holds none.
    pub(crate) accept_length: Option<Labelled>,
    /// The draft tokens k the server ran, with where the log says it ([`vllm_draft_steps`]).
    pub(crate) draft_steps: Option<(u64, Origin)>,
    /// vLLM's acceptance figures, as its `SpecDecoding metrics:` lines print them.
    pub(crate) vllm_acceptance: Option<vllm::Acceptance>,
    /// The model the server loaded, as its start-up lines name it (SGLang's `model_path`,
    /// vLLM's `model`).
    pub(crate) model: Option<String>,
    /// The tensor-parallel size of vLLM's config line or arguments.
    pub(crate) tensor_parallel: Option<u64>,
    /// How the verify was launched, as the log says it (SGLang's `cuda graph:` decode lines;
    /// vLLM's CUDA-graph mode and `--enforce-eager`).
    pub(crate) launch: Option<Launch>,
    /// vLLM's CUDA-graph mode lowered for speculative decoding alone: the speculative arm's
    /// mode against the plain one's.
    pub(crate) spec_graph: Option<vllm::SpecGraph>,
    /// The engine's custom all-reduce, one entry per worker that says it ([`custom_all_reduce`]).
    pub(crate) custom_all_reduce: Vec<CustomAllReduce>,
    /// Generation throughput of one running request as the engine printed it: SGLang's `gen
    /// throughput (token/s)` of `Decode batch.` lines with `#running-req: 1`, vLLM's `Avg
    /// generation throughput` of its steady stats intervals ([`vllm::steady_rate`]).
    pub(crate) batch1: Option<Batch1Rate>,
}

/// The engine's custom all-reduce in one worker, as the last line it printed about it says.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CustomAllReduce {
    /// The worker as the line's prefix names it: vLLM's `(VllmWorker rank=3 pid=1234)`,
    /// `(Worker_TP3 pid=1234)`, `(VllmWorkerProcess pid=487)`, SGLang's `[date TP3]`; `main
    /// process` for a line without one.
    pub(crate) worker: String,
    pub(crate) enabled: bool,
    /// The line's message, quoted.
    pub(crate) line: String,
}

/// Whether a line turns the custom all-reduce on (true) or off (false): vLLM's and SGLang's
/// `Custom allreduce is disabled because ...` (vllm/distributed/device_communicators/
/// custom_all_reduce.py: a missing library, a group across nodes, an unsupported world size,
/// more than two PCIe-only GPUs, no P2P); on: `Registering N cuda graph addresses` (printed by
/// the custom all-reduce's graph capture only while it is on, same file), and the lines of the
/// builds that allow it on PCIe (the RTX PRO 6000 community's vLLM with
/// VLLM_ENABLE_PCIE_ALLREDUCE=1: `PCIe custom allreduce enabled via ...`, `Using b12x PCIe
/// oneshot allreduce backend ...`; vllm-project/vllm pull request 39040: `... Custom allreduce
/// will use P2P cross-device reduce kernels`; vLLM's ROCm plugins: `Custom allreduce is
/// enabled on a PCIe topology ...`, `We are using PCIe's custom allreduce`).
fn custom_ar_state(line: &str) -> Option<bool> {
    let l = line.to_ascii_lowercase();
    if l.contains("custom allreduce is disabled") || l.contains("custom all-reduce is disabled") {
        return Some(false);
    }
    let on = [
        "custom allreduce is enabled",
        "custom allreduce enabled",
        "custom allreduce will use p2p",
        "using b12x pcie oneshot allreduce backend",
        "we are using pcie's custom allreduce",
    ];
    (on.iter().any(|p| l.contains(p))
        || (l.contains("registering ") && l.contains(" cuda graph addresses")))
    .then_some(true)
}

/// The worker a line's prefix names (see [`CustomAllReduce::worker`]).
fn worker(line: &str) -> String {
    let vllm = regex_once!(r"\(([A-Za-z][\w-]*(?: rank=\d+)? pid=\d+)\)");
    let sglang = regex_once!(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d((?: [A-Z]+\d+)+)\]");
    if let Some(m) = vllm.captures_iter(line).last() {
        return m[1].to_string();
    }
    sglang
        .captures(line.trim_start())
        .map(|c| c[1].trim().to_string())
        .unwrap_or_else(|| "main process".into())
}

/// The custom all-reduce of every worker that says it ([`custom_ar_state`]), in the order
/// they first do, each as its last line says it, quoting the first line of that state (the
/// line that turned it on, not the graph capture's after it).
pub(crate) fn custom_all_reduce(text: &str) -> Vec<CustomAllReduce> {
    let mut out: Vec<CustomAllReduce> = vec![];
    for line in text.lines() {
        let Some(enabled) = custom_ar_state(line) else {
            continue;
        };
        // the message: what follows the logger's prefix (`[file.py:123] `, `file.py:123] `,
        // SGLang's `[date TP0] `)
        let msg = line.find("] ").map_or(line, |i| &line[i + 2..]);
        let w = CustomAllReduce {
            worker: worker(line),
            enabled,
            line: super::quoted(msg),
        };
        match out.iter_mut().find(|x| x.worker == w.worker) {
            Some(x) if x.enabled != w.enabled => *x = w,
            Some(_) => {}
            None => out.push(w),
        }
    }
    out
}

impl ServerLog {
    /// The workers whose custom all-reduce is on, and those whose is off.
    pub(crate) fn custom_ar_split(&self) -> (Vec<&CustomAllReduce>, Vec<&CustomAllReduce>) {
        self.custom_all_reduce.iter().partition(|w| w.enabled)
    }

    /// What the log says of the engine's custom all-reduce, as the answer says it: `vllm.log
    /// says the custom all-reduce is on in all 8 workers that print it (`...`)`; off (so a
    /// row that needs it needs an engine change), or on in some and off in others. `None`
    /// without such a line.
    pub(crate) fn custom_ar_words(&self) -> Option<String> {
        let (on, off) = self.custom_ar_split();
        let workers = |n: usize| match n {
            1 => "the 1 worker that prints it".to_string(),
            n => format!("all {n} workers that print it"),
        };
        let file = &self.file;
        Some(match (on.first(), off.first()) {
            (None, None) => return None,
            (Some(w), None) => format!(
                "{file} says the engine's custom all-reduce is on in {} (`{}`)",
                workers(on.len()),
                w.line
            ),
            (None, Some(w)) => format!(
                "{file} says the engine's custom all-reduce is off in {} (`{}`), so this row needs an engine change",
                workers(off.len()),
                w.line
            ),
            (Some(a), Some(b)) => format!(
                "{file} says the engine's custom all-reduce is on in {} worker{} (`{}`) and off in {} (`{}`: {})",
                on.len(),
                if on.len() == 1 { "" } else { "s" },
                a.line,
                off.len(),
                b.line,
                off.iter()
                    .map(|w| w.worker.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
    }
}

/// A log that is not UTF-8, refused where its accept length is wanted.
fn not_utf8(path: &Path) -> anyhow::Error {
    usage(format!(
        "--accept-from-log '{}' is not text (not UTF-8: a binary or compressed file?): give the log a vLLM or SGLang server wrote (its `SpecDecoding metrics:` or decode lines)",
        path.display()
    ))
}

/// What `--accept-from-log FILE` gives a break-even.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AcceptFromLog {
    /// The mean accept length, labelled measured from the log with the engine named.
    pub(crate) accept_length: Labelled,
    /// The draft tokens k the log says the server ran ([`vllm_draft_steps`]).
    pub(crate) draft_steps: Option<(u64, Origin)>,
    /// Notes: SGLang lines that ran without a CUDA graph; vLLM's figures mapped to the accept
    /// length ([`vllm::Acceptance::conversion`]).
    pub(crate) notes: Vec<String>,
}

/// The mean accept length of `--accept-from-log FILE` (SGLang's decode log lines, or vLLM's
/// `SpecDecoding metrics:` lines), labelled measured from the log with the engine named, the
/// draft count it gives, and its notes.
pub(crate) fn read_accept_log(path: &Path) -> anyhow::Result<AcceptFromLog> {
    let text = String::from_utf8(read(path, "--accept-from-log", SERVER_LOG)?)
        .map_err(|_| not_utf8(path))?;
    let vl = vllm::acceptance(&text);
    let figures = vl.clone().ok().flatten();
    let (accept_length, mut notes) =
        accept_length(path, "--accept-from-log", vl, || sglang::acceptance(&text))?;
    let file = short_name(path);
    let draft_steps = vllm_draft_steps(&file, &text, figures.as_ref());
    if let Some(a) = &figures {
        notes.push(a.conversion(&file, draft_steps.as_ref().map(|d| d.0)));
    }
    Ok(AcceptFromLog {
        accept_length,
        draft_steps,
        notes,
    })
}

/// The draft tokens k a vLLM log says the server ran: its speculative config
/// ([`vllm::spec_config`]), else the number of per-position rates of its `SpecDecoding
/// metrics:` lines (vllm/v1/spec_decode/metrics.py counts one per speculative token); labelled
/// derived from the log, with the line.
pub(crate) fn vllm_draft_steps(
    file: &str,
    text: &str,
    acceptance: Option<&vllm::Acceptance>,
) -> Option<(u64, Origin)> {
    if let Some(c) = vllm::spec_config(text) {
        return Some((c.k, Origin::derived(format!("{file}: `{}`", c.quote))));
    }
    let n = acceptance?.positions?;
    Some((
        n as u64,
        Origin::derived(format!(
            "{file}: the {n} per-position rates of its `SpecDecoding metrics` lines"
        )),
    ))
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
    let measured = |value: f64, detail: String| {
        let origin = Origin::read(Source::Measured, file.clone(), detail);
        Labelled { value, origin }
    };
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
        return Ok((measured(v.mean_accept_len, detail), vec![]));
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
    Ok((measured(log.mean_accept_len, detail), notes))
}

/// Reads the server log of `--server-log`.
pub(crate) fn read_server_log(path: &Path) -> anyhow::Result<ServerLog> {
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
    let file = short_name(path);
    let vllm_log = engine == Some(Engine::Vllm);
    let (model, launch) = if vllm_log {
        (vllm::model(&text), vllm::launch(&text))
    } else {
        (sglang::model_path(&text), sglang::launch(&text))
    };
    Ok(ServerLog {
        draft_steps: vllm_log
            .then(|| vllm_draft_steps(&file, &text, vl.as_ref()))
            .flatten(),
        tensor_parallel: vllm_log.then(|| vllm::tensor_parallel(&text)).flatten(),
        spec_graph: vllm_log.then(|| vllm::spec_graph(&text)).flatten(),
        batch1: if vllm_log {
            vllm::steady_rate(&text)
        } else {
            sglang_batch1(&text)
        }
        .map_err(refuse)?,
        file,
        engine,
        accept_length,
        vllm_acceptance: vl,
        model,
        launch,
        custom_all_reduce: custom_all_reduce(&text),
    })
}

/// The mean generation throughput of SGLang's decode lines with exactly one running request
/// (batch 1, the break-even's assumption) and a throughput above 0 (each line the mean of a
/// fixed number of decode iterations, so every one is steady). `None` when no line qualifies;
/// an error naming the line where a count or a throughput is not one.
pub(crate) fn sglang_batch1(text: &str) -> Result<Option<Batch1Rate>, String> {
    let (mut kept, mut v) = (vec![], vec![]);
    for (i, l) in text.lines().enumerate() {
        if !l.contains(sglang::DECODE_LINE) {
            continue;
        }
        let read = sglang::throughput(l).map_err(|e| format!("line {}: {e}", i + 1))?;
        if let Some((_, t)) = read.filter(|&(n, t)| n == 1.0 && t > 0.0) {
            kept.push(i + 1);
            v.push(t);
        }
    }
    Ok((!v.is_empty()).then(|| Batch1Rate {
        tokens_per_s: v.iter().sum::<f64>() / v.len() as f64,
        which: format!(
            "mean `gen throughput` of {} `Decode batch` lines with one running request",
            v.len()
        ),
        kept,
    }))
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
    fn sglang_batch_one_throughput_is_the_mean_of_its_one_request_lines() {
        let sg = "[x TP0] Decode batch. #running-req: 1, #token: 64, token usage: 0.00, accept len: 2.40, cuda graph: True, gen throughput (token/s): 100.00, #queue-req: 0,\n\
    [x TP0] Decode batch. #running-req: 2, #token: 64, token usage: 0.00, accept len: 2.40, cuda graph: True, gen throughput (token/s): 180.00, #queue-req: 0,\n\
    [x TP0] Decode batch. #running-req: 1, #token: 99, token usage: 0.00, accept len: 2.40, cuda graph: True, gen throughput (token/s): 80.00, #queue-req: 0,\n\
    [x TP0] Decode batch. #running-req: 0, #token: 0, token usage: 0.00, accept len: 0.00, cuda graph: True, gen throughput (token/s): 0.00, #queue-req: 0,\n";
        // the two lines of one running request: (100 + 80) / 2
        let b = sglang_batch1(sg).unwrap().unwrap();
        assert_eq!((b.tokens_per_s, b.kept), (90.0, vec![1, 3]));
        assert_eq!(sglang_batch1("nothing\n"), Ok(None));
    }

    fn data(name: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(name)
    }

    /// The vLLM MTP log built from vLLM's formats (tests/data/README.md): everything it says.
    #[test]
    fn a_vllm_mtp_log_is_read_whole() {
        let l = read_server_log(&data("vllm-glm51-mtp3-tp8.log")).unwrap();
        assert_eq!(l.engine, Some(Engine::Vllm));
        assert_eq!(l.model.as_deref(), Some("zai-org/GLM-5.1-FP8"));
        // k from the engine's config line, not the default
        let (k, origin) = l.draft_steps.clone().unwrap();
        assert_eq!(k, 3);
        assert_eq!(
            origin.to_string(),
            "derived (vllm-glm51-mtp3-tp8.log: `SpeculativeConfig(method='mtp', model='zai-org/GLM-5.1-FP8', num_spec_tokens=3)`)"
        );
        assert_eq!(l.tensor_parallel, Some(8));
        // 1 + 5006 accepted / 4100 drafts (the sums of the file's 12 lines)
        let tau = l.accept_length.as_ref().unwrap().value;
        assert!((tau - (1.0 + 5006.0 / 4100.0)).abs() < 1e-9, "{tau}");
        // steady intervals: lines 47, 49, 51, 57, 59, 65;
        // (89.0 + 88.2 + 89.8 + 89.2 + 88.4 + 90.4) / 6 = 535.0 / 6 = 89.1667, where every line
        // with one running request averages 743.2 / 9 = 82.58
        let b = l.batch1.as_ref().unwrap();
        assert_eq!(b.kept, vec![47, 49, 51, 57, 59, 65]);
        assert!((b.tokens_per_s - 535.0 / 6.0).abs() < 1e-9, "{b:?}");
        assert!(
            b.which.contains("lines 47, 49, 51, 57, 59, 65"),
            "{}",
            b.which
        );
        assert!(
            b.which.contains("left out of the 9 with one running request: 2 with a prefill (prompt throughput above 0), 1 whose running count changed"),
            "{}",
            b.which
        );
        // every worker turned the custom all-reduce on; the line that did is quoted
        assert_eq!(l.custom_all_reduce.len(), 8);
        for (r, w) in l.custom_all_reduce.iter().enumerate() {
            assert_eq!(w.worker, format!("Worker_TP{r} pid={}", 412 + r));
            assert!(w.enabled);
            assert_eq!(w.line, "PCIe custom allreduce enabled via VLLM_ENABLE_PCIE_ALLREDUCE=1 (backend=cpp, using vLLM C++ custom allreduce).");
        }
        let words = l.custom_ar_words().unwrap();
        assert!(
            words.starts_with("vllm-glm51-mtp3-tp8.log says the engine's custom all-reduce is on in all 8 workers that print it (`PCIe custom allreduce enabled"),
            "{words}"
        );
        // the speculative arm's graph mode against the plain one's
        let g = l.spec_graph.as_ref().unwrap();
        assert_eq!(
            (g.asked.as_deref(), g.ran.as_str()),
            (Some("FULL_AND_PIECEWISE"), "PIECEWISE")
        );
        let launch = l.launch.as_ref().unwrap();
        assert!(
            launch
                .meaning
                .contains("the speculative arm ran PIECEWISE where the same server without speculation keeps FULL_AND_PIECEWISE"),
            "{launch:?}"
        );
    }

    /// `--accept-from-log` takes k from the log as well, and prints the conversion.
    #[test]
    fn the_accept_log_gives_k_and_the_conversion() {
        let a = read_accept_log(&data("vllm-glm51-mtp3-tp8.log")).unwrap();
        assert_eq!(a.draft_steps.as_ref().map(|d| d.0), Some(3));
        assert!((a.accept_length.value - 2.2209756).abs() < 1e-6);
        assert_eq!(a.notes.len(), 1);
        // 5006 accepted / 12300 drafted = 0.40699; 1 + 3 x 0.40699 = 2.2210; as one per-token
        // rate it would be 1 + 0.407 + 0.407^2 + 0.407^3 = 1.64
        assert!(
            a.notes[0].contains("accept rate 40.7% (`Avg Draft acceptance rate`: accepted / drafted tokens, 5006 / 12300): 1 + k x rate = 1 + 3 x 0.407 = 2.22, not a per-token rate for --accept-rate (which would make it 1.64)"),
            "{}",
            a.notes[0]
        );
        assert!(
            a.notes[0].contains("1 + accepted tokens / drafts = 1 + 5006 / 4100 = 2.22"),
            "{}",
            a.notes[0]
        );
    }

    /// Each worker's custom all-reduce as its lines say it: upstream vLLM's warning in every
    /// worker (`(VllmWorkerProcess pid=N)` of vLLM 0.5-0.8, the driver worker without a
    /// prefix), SGLang's `[date TP0]` workers, and a worker of the PCIe build whose P2P check
    /// failed after it was turned on (vllm/distributed/device_communicators/
    /// custom_all_reduce.py checks P2P after the topology).
    #[test]
    fn the_custom_all_reduce_of_every_worker() {
        let off = "WARNING 07-22 03:07:03 custom_all_reduce.py:134] Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. To silence this warning, specify disable_custom_all_reduce=True explicitly.\n\
(VllmWorkerProcess pid=487) WARNING 07-22 03:07:03 custom_all_reduce.py:134] Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. To silence this warning, specify disable_custom_all_reduce=True explicitly.\n\
(VllmWorkerProcess pid=486) WARNING 07-22 03:07:03 custom_all_reduce.py:134] Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. To silence this warning, specify disable_custom_all_reduce=True explicitly.\n";
        let w = custom_all_reduce(off);
        let names: Vec<&str> = w.iter().map(|x| x.worker.as_str()).collect();
        assert_eq!(
            names,
            [
                "main process",
                "VllmWorkerProcess pid=487",
                "VllmWorkerProcess pid=486"
            ]
        );
        assert!(w.iter().all(|x| !x.enabled));
        assert!(w[0]
            .line
            .starts_with("Custom allreduce is disabled because it's not supported"));
        let sg = "[2026-03-03 11:06:07 TP0] Custom allreduce is disabled because this process group spans across nodes.\n\
[2026-03-03 11:06:07 TP1] Custom allreduce is disabled because this process group spans across nodes.\n";
        let w = custom_all_reduce(sg);
        assert_eq!(w.len(), 2);
        assert_eq!((w[1].worker.as_str(), w[1].enabled), ("TP1", false));
        let mixed = "(Worker_TP0 pid=10) INFO 05-14 08:20:34 [custom_all_reduce.py:382] PCIe custom allreduce enabled via VLLM_ENABLE_PCIE_ALLREDUCE=1 (backend=cpp, using vLLM C++ custom allreduce).\n\
(Worker_TP1 pid=11) INFO 05-14 08:20:34 [custom_all_reduce.py:382] PCIe custom allreduce enabled via VLLM_ENABLE_PCIE_ALLREDUCE=1 (backend=cpp, using vLLM C++ custom allreduce).\n\
(Worker_TP1 pid=11) WARNING 05-14 08:20:35 [custom_all_reduce.py:420] Custom allreduce is disabled because your platform lacks GPU P2P capability or P2P test failed. To silence this warning, specify disable_custom_all_reduce=True explicitly.\n";
        let w = custom_all_reduce(mixed);
        assert_eq!(
            w.iter().map(|x| x.enabled).collect::<Vec<_>>(),
            [true, false]
        );
        assert!(w[1].line.contains("lacks GPU P2P capability"), "{w:?}");
        let l = ServerLog {
            file: "v.log".into(),
            engine: Some(Engine::Vllm),
            accept_length: None,
            draft_steps: None,
            vllm_acceptance: None,
            model: None,
            tensor_parallel: None,
            launch: None,
            spec_graph: None,
            custom_all_reduce: w,
            batch1: None,
        };
        let words = l.custom_ar_words().unwrap();
        assert!(
            words.contains("on in 1 worker (`PCIe custom allreduce enabled")
                && words.contains("and off in 1 (`Custom allreduce is disabled because your platform lacks GPU P2P capability"),
            "{words}"
        );
    }
}
