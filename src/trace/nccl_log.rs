//! NCCL's own log of every call (`NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL`, NCCL 2.20-2.28):
//!
//! `host:pid:tid [dev] NCCL INFO AllReduce: opCount 0 sendbuff 0x.. recvbuff 0x.. count 21504
//! datatype 9 op 0 root 0 comm 0x18c0be30 [nranks=8] stream 0x..`
//!
//! It gives the sizes a trace lacks (NCCL called directly, without `record_param_comms`), and it
//! tells eager from graph: NCCL logs a call when it is enqueued, so under CUDA graphs the lines
//! appear only while the graph is captured, not at each replay. `opCount` stays 0 on
//! single-node communicators since 2.27, so it is read but never relied on. Other lines
//! (the program's own output, other NCCL subsystems) are skipped.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Serialize;

use super::names::{dtype_from_nccl, dtype_size};
use crate::evidence::{regex_once, tally, tally_words};

/// One logged NCCL call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogCall {
    pub host: String,
    pub pid: u32,
    pub device: Option<u32>,
    /// Normalised op (`all_reduce`).
    pub op: String,
    pub op_count: u64,
    /// Elements (the send count; NCCL's `count`).
    pub count: u64,
    /// Normalised dtype (`bf16`); `None` for an unknown `datatype` number.
    pub dtype: Option<String>,
    pub datatype: u32,
    pub comm: String,
    pub nranks: u32,
    pub stream: String,
}

impl LogCall {
    pub(crate) fn bytes(&self) -> Option<u64> {
        self.dtype
            .as_deref()
            .and_then(dtype_size)
            .map(|s| s * self.count)
    }
}

fn op_name(f: &str) -> String {
    match f {
        "AllReduce" => "all_reduce",
        "AllGather" => "all_gather",
        "ReduceScatter" => "reduce_scatter",
        "Broadcast" => "broadcast",
        "Reduce" => "reduce",
        "Send" => "send",
        "Recv" => "recv",
        "AllToAll" => "all_to_all",
        other => return other.to_ascii_lowercase(),
    }
    .into()
}

/// A COLL line anywhere in a physical line: whatever precedes `host:pid:tid` is a prefix of
/// the launcher or the logger (Ray's `(RayTrainWorker pid=615, ip=...)`, torchrun's
/// `[rank0]:` / `[default0]:`, srun's `0: `, timestamps), which the host field cannot begin
/// with (no `:`, blank, bracket or parenthesis in it).
fn regex() -> &'static regex::Regex {
    regex_once!(
        r"([^:\s\[\]()]+):(\d+):\d+\s+(?:\[(\d+)\]\s+)?NCCL INFO (\w+): opCount ([0-9a-fA-Fx]+) sendbuff \S+ recvbuff \S+ count (\d+) datatype (\d+) op \d+ root -?\d+ comm (\S+) \[nranks=(\d+)\] stream (\S+)"
    )
}

/// The call of a line and where its match lies in it.
fn call_at(l: &str) -> Option<(LogCall, std::ops::Range<usize>)> {
    let c = regex().captures(l)?;
    let datatype: u32 = c[7].parse().ok()?;
    let oc = &c[5];
    let op_count = u64::from_str_radix(oc.trim_start_matches("0x"), 16).unwrap_or(0);
    let call = LogCall {
        host: c[1].to_string(),
        pid: c[2].parse().ok()?,
        device: c.get(3).and_then(|d| d.as_str().parse().ok()),
        op: op_name(&c[4]),
        op_count,
        count: c[6].parse().ok()?,
        dtype: dtype_from_nccl(datatype).map(str::to_string),
        datatype,
        comm: c[8].to_string(),
        nranks: c[9].parse().ok()?,
        stream: c[10].to_string(),
    };
    Some((call, c.get(0).expect("the whole match").range()))
}

/// A COLL line that could not be read: where it is and how it begins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct BadLine {
    /// The file (set by the caller that knows it; empty in [`parse_text`]).
    pub(crate) file: String,
    /// 1-based line number.
    pub(crate) line: usize,
    /// The line's first characters.
    pub(crate) text: String,
}

fn bad_line(i: usize, l: &str) -> BadLine {
    let text: String = l.trim().chars().take(100).collect();
    BadLine {
        file: String::new(),
        line: i + 1,
        text,
    }
}

/// What the lines of one log text gave.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub(crate) calls: Vec<LogCall>,
    /// COLL lines that a line break had cut, read whole again by joining the next line.
    pub(crate) joined: usize,
    /// COLL lines (`NCCL INFO <Op>: opCount`) that could not be read, even joined, or that
    /// carried other text glued before their host field; each named.
    pub(crate) unreadable: Vec<BadLine>,
    /// `NCCL INFO` lines of any kind (to tell a log without COLL lines from no NCCL log).
    pub(crate) info_lines: usize,
}

/// Parses COLL lines out of a log text, joining a COLL line that a paste or a terminal
/// wrapped with the line after it (with or without a blank where it was cut).
///
/// A join must give one call that begins in the cut line and ends in the next, and the next
/// line must not be an NCCL line of its own: a half-line followed by a whole COLL line is
/// one unreadable line and one call, never a call whose host field holds the half-line's
/// tail (`0x7f9vm:485`). Likewise a call whose host is another host of the same pid with
/// something glued before it (`99vm` beside `vm`, pid 485) is junk written into the line
/// without a break: it is counted unreadable, not made into a process of its own.
pub(crate) fn parse_text(text: &str) -> Parsed {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Parsed::default();
    // calls with the index of the line they came from
    let mut calls: Vec<(usize, LogCall)> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        i += 1;
        if l.contains("NCCL INFO") {
            out.info_lines += 1;
        }
        if !l.contains("opCount") {
            continue;
        }
        if let Some((c, _)) = call_at(l) {
            calls.push((i - 1, c));
            continue;
        }
        let next = lines.get(i).copied().unwrap_or("");
        let joined = if next.trim().is_empty() || next.contains("NCCL INFO") {
            None
        } else {
            let rest = next.trim_start();
            [format!("{l}{next}"), format!("{l} {rest}")]
                .into_iter()
                .find_map(|j| call_at(&j).filter(|(_, r)| r.start < l.len() && r.end > l.len()))
        };
        match joined {
            Some((c, _)) => {
                calls.push((i - 1, c));
                out.joined += 1;
                i += 1;
            }
            None => out.unreadable.push(bad_line(i - 1, l)),
        }
    }
    // calls per (pid, host), to find junk glued before a host field: a host that ends with a
    // host of the same pid seen more often
    let mut hosts: HashMap<(u32, &str), usize> = HashMap::new();
    for (_, c) in &calls {
        *hosts.entry((c.pid, c.host.as_str())).or_default() += 1;
    }
    let glued = |c: &LogCall| {
        let n = hosts[&(c.pid, c.host.as_str())];
        hosts.iter().any(|(&(pid, h), &m)| {
            pid == c.pid && h.len() < c.host.len() && c.host.ends_with(h) && m > n
        })
    };
    let glued_at: Vec<bool> = calls.iter().map(|(_, c)| glued(c)).collect();
    for ((li, c), g) in calls.into_iter().zip(glued_at) {
        if g {
            out.unreadable.push(bad_line(li, lines[li]));
        } else {
            out.calls.push(c);
        }
    }
    out.unreadable.sort_by_key(|b| b.line);
    out
}

/// Parses COLL lines out of a log text.
#[cfg(test)]
pub(crate) fn parse(text: &str) -> Vec<LogCall> {
    parse_text(text).calls
}

/// The COLL lines of one log file (the tests' reading of [`read_parsed`]).
#[cfg(test)]
pub(crate) fn read(path: &Path) -> anyhow::Result<Vec<LogCall>> {
    read_parsed(path).map(|p| p.calls)
}

/// Reads one log file, with the counts of joined and unreadable lines; a file with no COLL
/// line is a usage error naming it and saying why (no NCCL line at all, NCCL lines of other
/// subsystems only, or COLL lines none of which could be read).
pub(crate) fn read_parsed(path: &Path) -> anyhow::Result<Parsed> {
    let bytes = crate::util::read::read(path, "NCCL log", crate::util::read::NCCL_LOG)?;
    let mut p = parse_text(&String::from_utf8_lossy(&bytes));
    for b in &mut p.unreadable {
        b.file = path.display().to_string();
    }
    if p.calls.is_empty() {
        let why = if !p.unreadable.is_empty() {
            format!(
                "{} COLL lines (`NCCL INFO <Op>: opCount ...`), none readable: cut or of an unknown format (line {}: {})",
                p.unreadable.len(),
                p.unreadable[0].line,
                p.unreadable[0].text
            )
        } else if p.info_lines > 0 {
            format!(
                "{} NCCL INFO lines but no COLL line: NCCL_DEBUG_SUBSYS did not include COLL (run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL)",
                p.info_lines
            )
        } else {
            "no NCCL line at all (run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL)".into()
        };
        crate::usage_bail!("NCCL log '{}': {why}", path.display());
    }
    Ok(p)
}

/// One (op, dtype, count) seen in the log, and how often.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct LogSize {
    pub(crate) op: String,
    pub(crate) dtype: Option<String>,
    pub(crate) count: u64,
    pub(crate) nranks: u32,
    pub(crate) calls: u64,
}

/// What all logs together say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub(crate) struct LogSummary {
    pub(crate) calls: u64,
    pub(crate) processes: usize,
    /// Distinct sizes per op, most frequent first.
    pub(crate) sizes: Vec<LogSize>,
}

impl LogSummary {
    pub(crate) fn of<'a>(calls: impl IntoIterator<Item = &'a LogCall>) -> LogSummary {
        let mut m: BTreeMap<(String, Option<String>, u64, u32), u64> = BTreeMap::new();
        let mut procs = std::collections::BTreeSet::new();
        let mut n = 0u64;
        for c in calls {
            n += 1;
            *m.entry((c.op.clone(), c.dtype.clone(), c.count, c.nranks))
                .or_default() += 1;
            procs.insert((c.host.clone(), c.pid));
        }
        let mut sizes: Vec<LogSize> = m
            .into_iter()
            .map(|((op, dtype, count, nranks), calls)| LogSize {
                op,
                dtype,
                count,
                nranks,
                calls,
            })
            .collect();
        sizes.sort_by(|a, b| a.op.cmp(&b.op).then(b.calls.cmp(&a.calls)));
        LogSummary {
            calls: n,
            processes: procs.len(),
            sizes,
        }
    }

    /// The one size the log shows for `op` (with `nranks` if given); `None` when it shows none
    /// or several (then the log cannot say which kernel had which).
    #[cfg(test)]
    pub(crate) fn only_size(&self, op: &str, nranks: Option<u32>) -> Option<&LogSize> {
        let mut it = self
            .sizes
            .iter()
            .filter(|s| s.op == op && nranks.is_none_or(|n| s.nranks == n));
        let first = it.next()?;
        it.next().is_none().then_some(first)
    }

    /// The size a kernel of `op` (of `dtype` when the kernel name says it) most likely had:
    /// the only size, or one size with at least 90% of the calls (set-up calls of one element
    /// around it are common). Without a dtype (all-gather kernels name none) only floating-point
    /// calls count: torch's own set-up gathers move integers and bytes. Returns the size and its
    /// share of the calls.
    pub(crate) fn likely_size(
        &self,
        op: &str,
        dtype: Option<&str>,
        nranks: Option<u32>,
    ) -> Option<(&LogSize, f64)> {
        let c: Vec<&LogSize> = self
            .sizes
            .iter()
            .filter(|s| s.op == op && nranks.is_none_or(|n| s.nranks == n))
            .filter(|s| match dtype {
                Some(d) => s.dtype.as_deref() == Some(d),
                None => matches!(
                    s.dtype.as_deref(),
                    Some("bf16" | "f16" | "f32" | "f8e4m3" | "f8e5m2")
                ),
            })
            .collect();
        let total: u64 = c.iter().map(|s| s.calls).sum();
        let best = c.iter().max_by_key(|s| s.calls)?;
        let share = best.calls as f64 / total as f64;
        (share >= 0.9).then_some((*best, share))
    }

    /// Calls of `op` in all.
    pub(crate) fn calls_of(&self, op: &str) -> u64 {
        self.sizes
            .iter()
            .filter(|s| s.op == op)
            .map(|s| s.calls)
            .sum()
    }

    /// Calls of `op` per process (what each rank logged).
    pub(crate) fn calls_per_process(&self, op: &str) -> f64 {
        self.calls_of(op) as f64 / self.processes.max(1) as f64
    }
}

/// The calls of one communicator as one process logged them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct CommSequence {
    pub(crate) host: String,
    pub(crate) pid: u32,
    pub(crate) device: Option<u32>,
    pub(crate) comm: String,
    pub(crate) nranks: u32,
    pub(crate) calls: usize,
    /// The calls counted by op, in order of first appearance.
    pub(crate) ops: Vec<OpCalls>,
    /// Calls per step: the period of the (op, count, dtype) sequence, when it repeats.
    pub(crate) period: Option<usize>,
    /// Whole steps of that period in the log.
    pub(crate) steps: usize,
    /// One step, counted by op and size (empty when the calls do not repeat).
    pub(crate) step: Vec<StepEntry>,
    /// How the calls ran as far as the log can tell (inferred, [`judge`]).
    pub(crate) mode: LogMode,
    /// What the judgement rests on.
    pub(crate) mode_why: String,
}

/// How a communicator's calls ran, as far as its log can tell: inferred from the pattern of
/// the lines, never measured (see [`judge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogMode {
    Eager,
    Captured,
    CannotTell,
}

impl LogMode {
    pub(crate) fn words(self) -> &'static str {
        match self {
            LogMode::Eager => "eager (logged at every call)",
            LogMode::Captured => "captured into CUDA graphs (logged at capture only)",
            LogMode::CannotTell => "cannot tell",
        }
    }
}

/// The most times a serving engine logs one graph's calls while capturing it: SGLang runs each
/// batch size twice before capturing it (sgl-project/sglang
/// python/sglang/srt/model_executor/cuda_graph_runner.py, `capture_one_batch_size`: two
/// `run_once()` then `torch.cuda.graph`), so three logged steps; vLLM runs
/// `cudagraph_num_of_warmups` (vllm/config/compilation.py, 0 by default) before each capture.
pub(crate) const CAPTURE_REPEATS: usize = 3;

/// How one communicator's calls (in log order) ran, inferred from NCCL's behaviour: NCCL
/// writes a COLL line when a call is enqueued (NVIDIA/nccl src/enqueue.cc, `ncclEnqueueCheck`),
/// and a CUDA graph replays the captured kernels without calling NCCL, so a captured sequence
/// is logged only while it is captured. `opCount` cannot say it: it stays 0 on single-node
/// communicators since 2.27.
///
/// Steps: the calls are cut after each call of the communicator's rarest op that occurs twice
/// or more (the logits all-gather of a forward; by op only, so that steps of other sizes cut
/// alike), and two steps are the same when their calls have the same ops, counts and dtypes.
/// - the same step (of two ops or more) logged more than [`CAPTURE_REPEATS`] times in a row,
///   or more than twice that in all (between other steps: batch sizes that come and go):
///   eager;
/// - at least three different steps, each logged at most [`CAPTURE_REPEATS`] times in a row
///   and never again, in steadily decreasing (or increasing) size, with no whole step after
///   them (after the first step, which may hold set-up calls): the batch sizes an engine
///   captures at start-up, then replays unlogged: captured;
/// - anything else: cannot tell (one kind of op only, too few steps, steps of varying sizes).
pub fn judge(calls: &[&LogCall]) -> (LogMode, String) {
    // calls per op, in op order
    let mut ops: BTreeMap<&str, usize> = BTreeMap::new();
    for c in calls {
        *ops.entry(c.op.as_str()).or_default() += 1;
    }
    if ops.len() < 2 {
        return (
            LogMode::CannotTell,
            "one kind of call only: the log shows no step boundary".into(),
        );
    }
    let Some(delim) = ops
        .iter()
        .filter(|(_, &n)| n >= 2)
        .min_by_key(|(_, &n)| n)
        .map(|(&o, _)| o)
    else {
        return (
            LogMode::CannotTell,
            "no op is called twice: one step at most".into(),
        );
    };
    // Steps: each ends at a call of `delim`; the calls after the last one are a partial step.
    let mut steps: Vec<&[&LogCall]> = Vec::new();
    let mut from = 0;
    for (i, c) in calls.iter().enumerate() {
        if c.op == delim {
            steps.push(&calls[from..=i]);
            from = i + 1;
        }
    }
    let tail = calls.len() - from;
    let same = |a: &[&LogCall], b: &[&LogCall]| {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| x.op == y.op && x.count == y.count && x.datatype == y.datatype)
    };
    // Runs of the same step back to back: (first step, length).
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for i in 0..steps.len() {
        match runs.last_mut() {
            Some((f, n)) if same(steps[*f], steps[i]) => *n += 1,
            _ => runs.push((i, 1)),
        }
    }
    let (best_first, best_len) = *runs.iter().max_by_key(|r| r.1).expect("a step");
    // A step of one op only (a call of the delimiter alone) is no evidence of a step: calls of
    // one op back to back may be one forward's own (one per layer).
    let kinds = |s: &[&LogCall]| {
        let mut o: Vec<&str> = s.iter().map(|c| c.op.as_str()).collect();
        o.sort_unstable();
        o.dedup();
        o.len()
    };
    if best_len > CAPTURE_REPEATS && kinds(steps[best_first]) < 2 {
        return (
            LogMode::CannotTell,
            format!(
                "the same call ({delim}) logged {best_len} times in a row, with no other op between: calls of one op back to back may be one step's own, so no step boundary shows"
            ),
        );
    }
    if best_len > CAPTURE_REPEATS {
        return (
            LogMode::Eager,
            format!(
                "the same step of {} calls logged {best_len} times in a row (steps end at {delim}; from step {}): NCCL logs every call it enqueues, and an engine logs a captured step at most {CAPTURE_REPEATS} times",
                steps[best_first].len(),
                best_first + 1
            ),
        );
    }
    // The same step logged again after others (an eager server's batch sizes come and go):
    // more than an engine logs one graph in all while capturing it, in two passes at most.
    // a step's calls as (op, count, datatype) -> (its first step, how many times)
    type Shape<'a> = Vec<(&'a str, u64, u32)>;
    let mut seen: HashMap<Shape, (usize, usize)> = HashMap::new();
    for (i, st) in steps.iter().enumerate() {
        if kinds(st) < 2 {
            continue;
        }
        let key = st
            .iter()
            .map(|c| (c.op.as_str(), c.count, c.datatype))
            .collect();
        seen.entry(key).or_insert((i, 0)).1 += 1;
    }
    if let Some(&(first, n)) = seen.values().max_by_key(|v| (v.1, std::cmp::Reverse(v.0))) {
        if n > 2 * CAPTURE_REPEATS {
            return (
                LogMode::Eager,
                format!(
                    "the same step of {} calls logged {n} times in all, between others (steps end at {delim}; first at step {}): NCCL logs every call it enqueues, and an engine logs a captured step at most {CAPTURE_REPEATS} times per capture pass (vLLM makes two when it keeps full and piecewise graphs)",
                    steps[first].len(),
                    first + 1
                ),
            );
        }
    }
    let bytes = |s: &[&LogCall]| -> u64 { s.iter().map(|c| c.bytes().unwrap_or(c.count)).sum() };
    // Strictly monotone sizes make the steps all different (each size logged in one run only),
    // checked in one pass: a long eager log of varying sizes costs no pairwise comparison.
    let sweep = |runs: &[(usize, usize)]| -> bool {
        let b: Vec<u64> = runs.iter().map(|r| bytes(steps[r.0])).collect();
        let down = b.windows(2).all(|w| w[0] > w[1]);
        let up = b.windows(2).all(|w| w[0] < w[1]);
        runs.len() >= 3 && (down || up) && runs.iter().all(|r| kinds(steps[r.0]) >= 2)
    };
    let last_len = steps.last().map_or(0, |s| s.len());
    let all_runs = sweep(&runs);
    let swept = all_runs || (runs.len() > 1 && runs[0].1 == 1 && sweep(&runs[1..]));
    if swept && tail < last_len {
        let n = if all_runs { runs.len() } else { runs.len() - 1 };
        return (
            LogMode::Captured,
            format!(
                "{n} different steps (steps end at {delim}), each logged at most {CAPTURE_REPEATS} times in a row and never again, in steadily changing size, then no whole step: the batch sizes an engine captures at start-up; their replays are not logged"
            ),
        );
    }
    let why = if steps.len() <= CAPTURE_REPEATS {
        format!(
            "{} step(s) (steps end at {delim}): an eager run this short looks like the warm-up runs and capture of one graph",
            steps.len()
        )
    } else {
        format!(
            "{} steps (steps end at {delim}), at most {best_len} alike in a row, not one sweep of sizes: neither eager repetition nor a capture",
            steps.len()
        )
    };
    (LogMode::CannotTell, why)
}

/// How many unreadable lines a report names (the count covers them all).
pub(crate) const NAMED_BAD_LINES: usize = 5;

/// An NCCL COLL log (or several) read on its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct LogReport {
    pub(crate) files: Vec<String>,
    pub(crate) calls: usize,
    pub(crate) joined_lines: usize,
    pub(crate) unreadable_lines: usize,
    /// The first unreadable lines, named (at most [`NAMED_BAD_LINES`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) unreadable: Vec<BadLine>,
    pub(crate) sequences: Vec<CommSequence>,
}

/// The calls of one op, in a communicator's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct OpCalls {
    /// Normalised op (`all_reduce`).
    pub(crate) op: String,
    pub(crate) calls: usize,
}

/// One (op, size) of a step: how many calls of it the step holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct StepEntry {
    pub(crate) op: String,
    pub(crate) calls: usize,
    /// Elements per call (NCCL's `count`).
    pub(crate) elements: u64,
    /// Normalised dtype; `None` for a `datatype` number NCCL's table lacks.
    pub(crate) dtype: Option<String>,
    /// Bytes per call (`None` when the dtype is unknown).
    pub(crate) bytes: Option<u64>,
}

/// `246 all_reduce + 2 all_gather`.
fn ops_words(ops: &[OpCalls]) -> String {
    tally_words(&ops.iter().map(|o| (&o.op, o.calls)).collect::<Vec<_>>())
}

/// `123 all_reduce 21504 bf16 + 1 all_gather 245760 bf16`.
fn step_words(step: &[StepEntry]) -> String {
    let size = |e: &StepEntry| {
        format!(
            "{} {} {}",
            e.op,
            e.elements,
            e.dtype.as_deref().unwrap_or("?")
        )
    };
    tally_words(&step.iter().map(|e| (size(e), e.calls)).collect::<Vec<_>>())
}

/// Calls of each op, in order of first appearance.
fn op_calls(calls: &[&LogCall]) -> Vec<OpCalls> {
    let ops = tally(calls.iter().map(|c| (&c.op, 1)));
    let op_calls = |(op, calls): (&String, usize)| OpCalls {
        op: op.clone(),
        calls,
    };
    ops.into_iter().map(op_calls).collect()
}

/// The calls of one step counted by (op, elements, dtype), in order of first appearance.
fn step_entries(calls: &[&LogCall]) -> Vec<StepEntry> {
    let mut out: Vec<StepEntry> = Vec::new();
    for c in calls {
        match out
            .iter_mut()
            .find(|e| e.op == c.op && e.elements == c.count && e.dtype == c.dtype)
        {
            Some(e) => e.calls += 1,
            None => out.push(StepEntry {
                op: c.op.clone(),
                calls: 1,
                elements: c.count,
                dtype: c.dtype.clone(),
                bytes: c.bytes(),
            }),
        }
    }
    out
}

/// Per process (host, pid, device) and communicator, the sequence of calls and its period.
pub(crate) fn report(files: Vec<String>, parsed: &[Parsed]) -> LogReport {
    let mut by: BTreeMap<(String, u32, Option<u32>, String), Vec<&LogCall>> = BTreeMap::new();
    for c in parsed.iter().flat_map(|p| &p.calls) {
        by.entry((c.host.clone(), c.pid, c.device, c.comm.clone()))
            .or_default()
            .push(c);
    }
    let sequences = by
        .into_iter()
        .map(|((host, pid, device, comm), calls)| {
            let (sigs, bytes) = super::steps::signatures(calls.iter().map(|c| {
                let key = (c.op.as_str(), c.count, c.dtype.as_deref());
                (key, c.bytes().unwrap_or(c.count))
            }));
            let p = super::steps::find_period(&sigs, |s| bytes[s as usize]);
            let step = p.as_ref().map_or(Vec::new(), |p| {
                let e = *p.boundaries.last().expect("a period has a boundary");
                step_entries(&calls[e + 1 - p.len..=e])
            });
            let (mode, mode_why) = judge(&calls);
            CommSequence {
                mode,
                mode_why,
                nranks: calls.iter().map(|c| c.nranks).max().unwrap_or(0),
                calls: calls.len(),
                ops: op_calls(&calls),
                period: p.as_ref().map(|p| p.len),
                steps: p.as_ref().map_or(0, |p| p.boundaries.len()),
                step,
                host,
                pid,
                device,
                comm,
            }
        })
        .collect();
    LogReport {
        files,
        calls: parsed.iter().map(|p| p.calls.len()).sum(),
        joined_lines: parsed.iter().map(|p| p.joined).sum(),
        unreadable_lines: parsed.iter().map(|p| p.unreadable.len()).sum(),
        unreadable: parsed
            .iter()
            .flat_map(|p| p.unreadable.iter().cloned())
            .take(NAMED_BAD_LINES)
            .collect(),
        sequences,
    }
}

/// The report as text.
pub(crate) fn render(r: &LogReport) -> String {
    let mut o = format!(
        "# verifybench trace: NCCL COLL log, {} calls in {} file(s); every figure read from the log
",
        r.calls,
        r.files.len()
    );
    if r.joined_lines > 0 {
        o += &format!(
            "# {} COLL lines cut by a line break were joined
",
            r.joined_lines
        );
    }
    if r.unreadable_lines > 0 {
        o += &format!(
            "# {} COLL lines could not be read (cut, of an unknown format, or with text glued before the host field); none was counted as a call:
",
            r.unreadable_lines
        );
        for b in &r.unreadable {
            o += &format!("#   {}:{}: {}\n", b.file, b.line, b.text);
        }
        if r.unreadable_lines > r.unreadable.len() {
            o += &format!(
                "#   ... and {} more\n",
                r.unreadable_lines - r.unreadable.len()
            );
        }
    }
    o += "
Per process and communicator
";
    for s in &r.sequences {
        o += &format!(
            "  {}:{}{} comm {} nranks {}: {} calls ({})
",
            s.host,
            s.pid,
            s.device.map(|d| format!(" [{d}]")).unwrap_or_default(),
            s.comm,
            s.nranks,
            s.calls,
            ops_words(&s.ops)
        );
        match (step_words(&s.step), s.period) {
            (st, Some(p)) if !st.is_empty() => {
                o += &format!(
                    "    steps: {} of {p} calls (period of the calls): {st}
",
                    s.steps
                )
            }
            _ => {
                o += "    steps: the calls do not repeat (one step, or set-up calls only)
"
            }
        }
        o += &format!(
            "    ran: {} (inferred): {}
",
            s.mode.words(),
            s.mode_why
        );
    }
    o += "
NCCL logs a call when it is enqueued: under CUDA graphs only at capture. `ran` is inferred from that: the same step logged again and again ran eagerly; a sweep of sizes logged a few times each and then nothing was captured.
";
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINES: &str = "\
vm:462:462 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7fefb7e00000 recvbuff 0x7fefb7e00000 count 21504 datatype 9 op 0 root 0 comm 0x18c0be30 [nranks=1] stream (nil)
step 3 done, loss 0.1
vm:462:462 [0] NCCL INFO AllGather: opCount 1 sendbuff 0x7fefb7e00000 recvbuff 0x7fefb8e00000 count 61440 datatype 9 op 0 root 0 comm 0x18c0be30 [nranks=1] stream 0x5581
vm:462:470 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM
gpu-7:1201:1290 [3] NCCL INFO AllReduce: opCount 2a sendbuff 0x1 recvbuff 0x1 count 4096 datatype 7 op 0 root 0 comm 0xabc [nranks=8] stream 0x1
";

    #[test]
    fn parses_coll_lines_and_skips_the_rest() {
        let c = parse(LINES);
        assert_eq!(c.len(), 3);
        assert_eq!(
            (
                c[0].op.as_str(),
                c[0].count,
                c[0].dtype.as_deref(),
                c[0].nranks
            ),
            ("all_reduce", 21504, Some("bf16"), 1)
        );
        assert_eq!(c[0].bytes(), Some(43008));
        assert_eq!(
            (c[0].host.as_str(), c[0].pid, c[0].device),
            ("vm", 462, Some(0))
        );
        assert_eq!(c[1].op, "all_gather");
        assert_eq!(c[1].stream, "0x5581");
        assert_eq!(
            (c[2].op_count, c[2].dtype.as_deref(), c[2].comm.as_str()),
            (0x2a, Some("f32"), "0xabc")
        );
    }

    /// A real line (pytorch/torchtitan#1369, tests/data/nccl-coll-public/).
    const REAL: &str = "hopper01:191369:191420 [0] NCCL INFO ReduceScatter: opCount e sendbuff 0x7fdf57c00000 recvbuff 0x7fdf61a00000 count 2097152 datatype 7 op 0 root 0 comm 0x55e290bd32d0 [nranks=2] stream 0x55e29067e430";

    #[test]
    fn any_prefix_before_host_pid_tid_is_read() {
        for prefix in [
            "",
            "(RayTrainWorker pid=615, ip=10.0.0.3) ",
            "[rank0]:",
            "[default0]:",
            "0: ",
            "2024-05-01 12:00:00.123 ",
            "[2024-05-01T12:00:00Z] ",
            "12:00:00 ",
            "  ",
        ] {
            let c = parse(&format!("{prefix}{REAL}\n"));
            assert_eq!(c.len(), 1, "prefix {prefix:?}");
            let c = &c[0];
            assert_eq!(
                (
                    c.host.as_str(),
                    c.pid,
                    c.device,
                    c.op.as_str(),
                    c.count,
                    c.nranks
                ),
                ("hopper01", 191369, Some(0), "reduce_scatter", 2097152, 2),
                "prefix {prefix:?}"
            );
            assert_eq!(c.dtype.as_deref(), Some("f32"));
        }
    }

    #[test]
    fn wrapped_lines_are_joined_or_counted_unreadable() {
        // Cut inside a token (no blank at the cut) and at a blank (the blank lost).
        let (a, b) = REAL.split_at(120);
        let i = REAL.find(" comm ").unwrap();
        let (c, d) = (&REAL[..i], &REAL[i + 1..]);
        let text = format!("{a}\n{b}\nsome output\n{c}\n  {d}\n{}\n", &REAL[..90]);
        let p = parse_text(&text);
        assert_eq!(p.calls.len(), 2);
        assert_eq!(p.joined, 2);
        assert_eq!(
            p.unreadable.len(),
            1,
            "the last line is cut and nothing follows it"
        );
        // line 6 of the text: a, b, some output, c, d, then the cut line
        assert_eq!(p.unreadable[0].line, 6);
        assert!(p
            .calls
            .iter()
            .all(|x| x.count == 2097152 && x.comm == "0x55e290bd32d0"));
    }

    #[test]
    fn a_step_is_fields_and_numbers_not_a_sentence() {
        // 4 steps of 2 all-reduces (21504 bf16) and one all-gather (61440 bf16)
        let line = |op: &str, count: u64| {
            format!("vm:7:7 [0] NCCL INFO {op}: opCount 0 sendbuff 0x1 recvbuff 0x1 count {count} datatype 9 op 0 root 0 comm 0xa [nranks=2] stream 0x1\n")
        };
        let step = line("AllReduce", 21504) + &line("AllReduce", 21504) + &line("AllGather", 61440);
        let r = report(vec!["x.log".into()], &[parse_text(&step.repeat(4))]);
        let s = &r.sequences[0];
        assert_eq!((s.period, s.steps), (Some(3), 4));
        let v = serde_json::to_value(s).unwrap();
        assert_eq!(
            v["step"],
            serde_json::json!([
                // bf16: 2 bytes an element
                {"op": "all_reduce", "calls": 2, "elements": 21504, "dtype": "bf16", "bytes": 43008},
                {"op": "all_gather", "calls": 1, "elements": 61440, "dtype": "bf16", "bytes": 122880}
            ])
        );
        assert_eq!(
            v["ops"],
            serde_json::json!([{"op": "all_reduce", "calls": 8}, {"op": "all_gather", "calls": 4}])
        );
        assert!(render(&r).contains("2 all_reduce 21504 bf16 + 1 all_gather 61440 bf16"));
    }

    #[test]
    fn junk_and_half_lines_never_make_a_process() {
        // One process (vm, pid 485) of three whole calls, among: a half-line cut after
        // `sendbuff 0x7f9` followed by a whole call (joining them would read a host
        // `0x7f9vm`), and junk glued before a host field with no line break (`99vm`).
        let whole = |op_count: u32| {
            format!("vm:485:485 [0] NCCL INFO AllReduce: opCount {op_count} sendbuff 0x7f90 recvbuff 0x7f90 count 21504 datatype 9 op 0 root 0 comm 0xc0 [nranks=2] stream 0x1")
        };
        let text = format!(
            "{}\nvm:485:485 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x7f9\n{}\n99{}\n{}\n",
            whole(0),
            whole(2),
            whole(3),
            whole(4)
        );
        let p = parse_text(&text);
        let procs: std::collections::BTreeSet<(String, u32)> =
            p.calls.iter().map(|c| (c.host.clone(), c.pid)).collect();
        assert_eq!(
            procs.into_iter().collect::<Vec<_>>(),
            [("vm".to_string(), 485)]
        );
        // opCount 0, 2 and 4 read; the half-line (line 2) and the glued line (line 4) named
        let counts: Vec<u64> = p.calls.iter().map(|c| c.op_count).collect();
        assert_eq!(counts, [0, 2, 4]);
        assert_eq!(p.joined, 0);
        let lines: Vec<usize> = p.unreadable.iter().map(|b| b.line).collect();
        assert_eq!(lines, [2, 4]);
        assert!(p.unreadable[1].text.starts_with("99vm:485:485"));
        let r = report(vec!["x.log".into()], &[p]);
        assert_eq!((r.sequences.len(), r.unreadable_lines), (1, 2));
        assert!(render(&r).contains(":4: 99vm:485:485"), "{}", render(&r));
    }

    #[test]
    fn public_logs_per_process_and_communicator() {
        // tests/data/nccl-coll-public/, counted by hand from the files: #203 is one process
        // (pid 13135) driving two devices with one communicator each, 3 and 4 all-reduces.
        let p = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/nccl-coll-public/NVIDIA-nccl-issue203_tf_2gpu.log"
        );
        let parsed = read_parsed(Path::new(p)).unwrap();
        assert_eq!((parsed.calls.len(), parsed.unreadable.len()), (7, 0));
        let r = report(vec![p.into()], &[parsed]);
        let seq: Vec<(u32, Option<u32>, usize, u32)> = r
            .sequences
            .iter()
            .map(|s| (s.pid, s.device, s.calls, s.nranks))
            .collect();
        assert_eq!(seq, [(13135, Some(0), 3, 2), (13135, Some(1), 4, 2)]);
        let p = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/nccl-coll-public/NVIDIA-nccl-issue531_allgather16.log"
        );
        let r = report(vec![p.into()], &[read_parsed(Path::new(p)).unwrap()]);
        // four processes of a 16-rank all-gather, one call each
        assert_eq!(r.sequences.len(), 4);
        assert!(r
            .sequences
            .iter()
            .all(|s| s.nranks == 16 && ops_words(&s.ops) == "1 all_gather"));
    }

    #[test]
    fn a_log_of_other_subsystems_says_coll_was_missing() {
        // An INIT/TUNING log of a real run (tests/data/): NCCL lines, none of them COLL.
        let p = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/nccl-info-2.28.9.log"
        );
        let e = read(Path::new(p)).unwrap_err().to_string();
        assert!(
            e.contains("no COLL line") && e.contains("NCCL INFO lines"),
            "{e}"
        );
    }

    #[test]
    fn summary_gives_the_only_size() {
        let s = LogSummary::of(&parse(LINES));
        assert_eq!(s.processes, 2);
        assert!(s.only_size("all_reduce", None).is_none(), "two sizes");
        assert_eq!(s.only_size("all_reduce", Some(1)).unwrap().count, 21504);
        assert_eq!(s.only_size("all_gather", None).unwrap().count, 61440);
        assert!((s.calls_per_process("all_reduce") - 1.0).abs() < 1e-9);
    }

    #[test]
    fn real_coll_log_gives_the_verify_sizes() {
        // NCCL 2.28.9, one H200, torch replaying the Kimi-K2.5 TP1 verify (trimmed; see
        // tests/data/traces/README.md)
        let p = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/traces/kimi-tp1-world1-nccl-coll.log"
        );
        let calls = read(Path::new(p)).unwrap();
        assert!(calls.iter().all(|c| c.nranks == 1 && c.host == "vm"));
        let s = LogSummary::of(&calls);
        assert!(
            s.only_size("all_reduce", None).is_none(),
            "set-up calls of 1 element"
        );
        let (ar, share) = s.likely_size("all_reduce", Some("bf16"), Some(1)).unwrap();
        assert_eq!(
            (ar.count, ar.dtype.as_deref(), share),
            (21504, Some("bf16"), 1.0)
        );
        let (ag, _) = s.likely_size("all_gather", None, Some(1)).unwrap();
        assert_eq!((ag.count, ag.dtype.as_deref()), (491520, Some("bf16")));
    }

    #[test]
    fn varying_eager_steps_are_judged_in_one_pass() {
        // 20,000 steps of 3 all-reduces and an all-gather, the batch size going 1..=7 in turn:
        // no two alike steps in a row, but each size logged about 20,000 / 7 times in all, far
        // above 2 x 3 -> eager (in one pass, not a comparison of every pair of steps: its
        // time is benches/ncclog.rs's `judge_80000_calls`).
        let call = |op: &str, count: u64| LogCall {
            host: "h".into(),
            pid: 7,
            device: Some(0),
            op: op.into(),
            op_count: 0,
            count,
            dtype: Some("bf16".into()),
            datatype: 9,
            comm: "0xa".into(),
            nranks: 2,
            stream: "0x1".into(),
        };
        let mut calls = Vec::new();
        for i in 0..20_000u64 {
            let bs = 1 + i % 7;
            for _ in 0..3 {
                calls.push(call("all_reduce", bs * 7168));
            }
            calls.push(call("all_gather", bs * 8));
        }
        let refs: Vec<&LogCall> = calls.iter().collect();
        let (m, why) = judge(&refs);
        assert_eq!(m, LogMode::Eager, "{why}");
        // 20,000 = 7 x 2,857 + 1: batch size 1 (steps 1, 8, ...) is logged 2,858 times
        assert!(
            why.starts_with("the same step of 4 calls logged 2858 times in all, between others (steps end at all_gather; first at step 1)"),
            "{why}"
        );
    }

    #[test]
    fn a_log_without_coll_lines_is_a_usage_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("n.log");
        std::fs::write(&p, "NCCL INFO Bootstrap\n").unwrap();
        let e = read(&p).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("n.log"));
    }
}
