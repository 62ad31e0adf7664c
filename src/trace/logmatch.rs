//! An NCCL COLL log beside traces: which logged process each rank's trace is, and whether the
//! log can be this run's at all.
//!
//! Both sides name their process. NCCL begins every line with `host:pid:tid`, the host cut at
//! its first `.` and the pid that of the calling process (NVIDIA/nccl src/debug.cc caches
//! `getHostName(hostname, 1024, '.')` and `getpid()`). Kineto writes the same OS pid on every
//! CPU event of the trace (read from its runtime calls, [`super::reader::TraceData::host_pids`]),
//! and `torch.profiler.tensorboard_trace_handler` names the file `<hostname>_<pid>.<time>...`
//! (pytorch/pytorch torch/profiler/profiler.py), which gives the host as well.
//!
//! So when the trace knows its pids, a rank is matched to the logged process of the same pid
//! (and host, where the file name gives it); when no rank matches any logged process the log
//! is of another run, an error that names both sides. Matched ranks are checked against their
//! own process's calls; ranks without a pid (a trace written by verifybench, one track per
//! rank) fall back to the calls per process of the whole log. What was matched, and what was
//! read but not used, goes into the notes.

use std::collections::BTreeMap;

use super::extract::{RankTrace, StepMode};
use super::nccl_log::{LogCall, LogSummary};

/// A logged process: (host, pid).
type Proc = (String, u32);

/// The calls of each logged process, grouped once per analysis.
pub(crate) type Processes<'a> = BTreeMap<Proc, Vec<&'a LogCall>>;

/// The calls of each logged process.
pub(crate) fn processes<'a>(calls: impl IntoIterator<Item = &'a LogCall>) -> Processes<'a> {
    let mut m: Processes = BTreeMap::new();
    for c in calls {
        m.entry((c.host.clone(), c.pid)).or_default().push(c);
    }
    m
}

/// Whether NCCL's host (cut at its first `.`) can be the trace's (from its file name, whole).
fn same_host(log_host: &str, trace_host: Option<&str>) -> bool {
    trace_host.is_none_or(|h| h.split('.').next() == Some(log_host))
}

/// The logged processes that are the trace's: its pid, and its host when known.
fn matching<'a>(
    procs: impl Iterator<Item = &'a Proc>,
    pids: &[u32],
    host: Option<&str>,
) -> Vec<&'a Proc> {
    procs
        .filter(|(h, p)| pids.contains(p) && same_host(h, host))
        .collect()
}

/// The one logged process that is this trace's (`host:pid`) and the summary of its calls (for
/// the sizes a trace lacks, and to check the rank against); `None` when the trace knows no pid
/// or the log holds none (or several) of its processes.
pub(crate) fn own_process(
    procs: &Processes,
    pids: &[u32],
    host: Option<&str>,
) -> Option<(String, LogSummary)> {
    if pids.is_empty() {
        return None;
    }
    match matching(procs.keys(), pids, host).as_slice() {
        [one] => Some((name(one), LogSummary::of(procs[*one].iter().copied()))),
        _ => None,
    }
}

fn name(p: &Proc) -> String {
    format!("{}:{}", p.0, p.1)
}

/// At most `n` items, then how many more.
fn listed(items: &[String], n: usize) -> String {
    if items.len() <= n {
        items.join(", ")
    } else {
        format!("{} and {} more", items[..n].join(", "), items.len() - n)
    }
}

/// A rank as the messages name it: its file, pid(s) and host.
fn traced(r: &RankTrace) -> String {
    let pids: Vec<String> = r.host_pids.iter().map(|p| p.to_string()).collect();
    format!(
        "rank {} '{}' pid {}{}",
        r.rank,
        r.file,
        pids.join("/"),
        r.host
            .as_deref()
            .map(|h| format!(" host {h}"))
            .unwrap_or_default()
    )
}

/// Checks the log against the ranks (each already matched to its logged process by
/// [`own_process`], [`RankTrace::log_process`]) and returns the notes. A log that cannot be
/// this run's is an error naming both sides: communicators of other sizes than the trace's;
/// no traced process among the logged ones (both sides knowing their pids); or fewer calls of
/// an op than the rank ran eagerly (NCCL logs every eager call).
pub(crate) fn check(
    log: &LogSummary,
    procs: &Processes,
    log_files: &[String],
    ranks: &[RankTrace],
) -> anyhow::Result<Vec<String>> {
    let Some(first) = ranks.first() else {
        return Ok(Vec::new());
    };
    let logs = log_files.join(", ");
    let sizes: std::collections::BTreeSet<u64> = first
        .collectives
        .iter()
        .filter_map(|c| c.group_size)
        .chain(first.world_size.map(|w| w as u64))
        .filter(|&n| n > 1)
        .collect();
    let nranks: std::collections::BTreeSet<u64> =
        log.sizes.iter().map(|s| s.nranks as u64).collect();
    if !sizes.is_empty() && sizes.is_disjoint(&nranks) {
        crate::usage_bail!(
            "the NCCL log ({logs}) has communicators of nranks {nranks:?}, but the trace '{}' has world/group size {sizes:?}: a log of another run? give the log of the traced run",
            first.file
        );
    }
    let proc_names: Vec<String> = procs.keys().map(name).collect();
    let pids_known = ranks.iter().any(|r| !r.host_pids.is_empty());
    let mut notes = Vec::new();
    if pids_known {
        let used: Vec<&String> = ranks
            .iter()
            .filter_map(|r| r.log_process.as_ref())
            .collect();
        for r in ranks.iter().filter(|r| r.log_process.is_none()) {
            let m = matching(procs.keys(), &r.host_pids, r.host.as_deref());
            if m.len() > 1 {
                notes.push(format!(
                    "rank {} (pid {:?}) is logged on several hosts ({}): not matched; a trace file named <host>_<pid> (torch.profiler's default) gives its host",
                    r.rank,
                    r.host_pids,
                    m.iter().map(|p| name(p)).collect::<Vec<_>>().join(", ")
                ));
            }
        }
        if used.is_empty() {
            let t: Vec<String> = ranks
                .iter()
                .filter(|r| !r.host_pids.is_empty())
                .map(traced)
                .collect();
            crate::usage_bail!(
                "the NCCL log ({logs}) holds processes {}, but none of them is a traced process ({}): a log of another run? give the log of the traced run (NCCL begins each line with host:pid; the trace's pid is on its CPU events)",
                listed(&proc_names, 8),
                listed(&t, 8)
            );
        }
        let matched: Vec<String> = ranks
            .iter()
            .filter_map(|r| {
                r.log_process
                    .as_ref()
                    .map(|p| format!("rank {} = {p}", r.rank))
            })
            .collect();
        notes.push(format!(
            "the NCCL log's processes matched to the traces by pid: {}",
            listed(&matched, 8)
        ));
        let unmatched: Vec<String> = ranks
            .iter()
            .filter(|r| r.log_process.is_none() && !r.host_pids.is_empty())
            .map(traced)
            .collect();
        if !unmatched.is_empty() {
            notes.push(format!(
                "no process of the NCCL log is {}: not checked against the log, and its sizes (where the trace lacked them) came from all logged processes",
                listed(&unmatched, 8)
            ));
        }
        let unused: Vec<String> = proc_names
            .iter()
            .filter(|p| !used.contains(p))
            .cloned()
            .collect();
        if !unused.is_empty() {
            notes.push(format!(
                "the NCCL log's processes {} are no traced rank: read, not checked against any trace",
                listed(&unused, 8)
            ));
        }
    }
    for (i, r) in ranks.iter().enumerate() {
        let eager = r.steps.iter().all(|s| s.mode != StepMode::Graph);
        if !eager {
            continue;
        }
        let own = r.log_process.is_some();
        // Without pids on either side only the first rank is checked, against the calls per
        // process of the whole log; a rank whose pid no logged process has is not checked.
        if !own && (pids_known || i > 0) {
            continue;
        }
        // each op with its collectives, in the order of the ops' names
        let mut ops = crate::evidence::tally(r.collectives.iter().map(|c| (c.op.as_str(), 1)));
        ops.sort_unstable();
        for (op, in_trace) in ops {
            match r.log_process.as_ref().zip(r.log_own.as_ref()) {
                Some((p, own)) => {
                    let in_log = own.calls_of(op);
                    if in_log < in_trace as u64 {
                        crate::usage_bail!(
                            "the NCCL log ({logs}) has {in_log} {op} calls of process {p}, but rank {} of the trace '{}' (the same pid) ran {in_trace} {op} collectives eagerly (NCCL logs every eager call): a log cut short, or of another run? give the whole log of the traced run",
                            r.rank,
                            r.file
                        );
                    }
                }
                None => {
                    let in_log = log.calls_per_process(op);
                    if (in_log + 1e-9) < in_trace as f64 {
                        crate::usage_bail!(
                            "the NCCL log ({logs}) has {in_log:.0} {op} calls per process, but rank {} of the trace '{}' ran {in_trace} {op} collectives eagerly (NCCL logs every eager call): a log of another run? give the log of the traced run",
                            r.rank,
                            r.file
                        );
                    }
                }
            }
        }
    }
    Ok(notes)
}
