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

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::names::{dtype_from_nccl, dtype_size};

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
    pub fn bytes(&self) -> Option<u64> {
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

fn regex() -> regex::Regex {
    regex::Regex::new(
        r"^\s*([^:\s]+):(\d+):\d+\s+(?:\[(\d+)\]\s+)?NCCL INFO (\w+): opCount ([0-9a-fA-Fx]+) sendbuff \S+ recvbuff \S+ count (\d+) datatype (\d+) op \d+ root -?\d+ comm (\S+) \[nranks=(\d+)\] stream (\S+)",
    )
    .expect("valid regex")
}

/// Parses COLL lines out of a log text.
pub fn parse(text: &str) -> Vec<LogCall> {
    let re = regex();
    text.lines()
        .filter(|l| l.contains("opCount"))
        .filter_map(|l| {
            let c = re.captures(l)?;
            let datatype: u32 = c[7].parse().ok()?;
            let oc = &c[5];
            let op_count = u64::from_str_radix(oc.trim_start_matches("0x"), 16).unwrap_or(0);
            Some(LogCall {
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
            })
        })
        .collect()
}

/// Reads one log file; a file with no COLL line is a usage error naming it.
pub fn read(path: &Path) -> anyhow::Result<Vec<LogCall>> {
    let bytes = std::fs::read(path).map_err(|e| {
        crate::error::usage(format!("--nccl-log '{}': cannot read: {e}", path.display()))
    })?;
    let calls = parse(&String::from_utf8_lossy(&bytes));
    if calls.is_empty() {
        crate::usage_bail!(
            "--nccl-log '{}': no NCCL COLL lines (run the server with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL)",
            path.display()
        );
    }
    Ok(calls)
}

/// One (op, dtype, count) seen in the log, and how often.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogSize {
    pub op: String,
    pub dtype: Option<String>,
    pub count: u64,
    pub nranks: u32,
    pub calls: u64,
}

/// What all logs together say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct LogSummary {
    pub calls: u64,
    pub processes: usize,
    /// Distinct sizes per op, most frequent first.
    pub sizes: Vec<LogSize>,
}

impl LogSummary {
    pub fn of(calls: &[LogCall]) -> LogSummary {
        let mut m: BTreeMap<(String, Option<String>, u64, u32), u64> = BTreeMap::new();
        let mut procs = std::collections::BTreeSet::new();
        for c in calls {
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
            calls: calls.len() as u64,
            processes: procs.len(),
            sizes,
        }
    }

    /// The one size the log shows for `op` (with `nranks` if given); `None` when it shows none
    /// or several (then the log cannot say which kernel had which).
    pub fn only_size(&self, op: &str, nranks: Option<u32>) -> Option<&LogSize> {
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
    pub fn likely_size(
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

    /// Calls of `op` per process (what each rank logged).
    pub fn calls_per_process(&self, op: &str) -> f64 {
        let n: u64 = self
            .sizes
            .iter()
            .filter(|s| s.op == op)
            .map(|s| s.calls)
            .sum();
        n as f64 / self.processes.max(1) as f64
    }
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
    fn a_log_without_coll_lines_is_a_usage_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("n.log");
        std::fs::write(&p, "NCCL INFO Bootstrap\n").unwrap();
        let e = read(&p).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("n.log"));
    }
}
