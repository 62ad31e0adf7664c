//! Parser of NCCL's own INFO log: the proof of what NCCL really did at a sweep point.
//!
//! A probe run writes the log with `NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,GRAPH,TUNING`.
//! We read five kinds of line from it:
//! - `NCCL version 2.28.3+cuda13.0`;
//! - `NCCL_PROTO set by environment to LL128` (the worker saw the variable and NCCL read it);
//! - the per-collective choice, in three formats:
//!   `AllReduce: 43008 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..4}` (NCCL >= 2.24),
//!   `AllReduce: 43008 Bytes -> Algo 1 proto 0 time 12.3` (2.23) and
//!   `43008 Bytes -> Algo 1 proto 0 time 12.3` (2.20-2.22, no function name), where algorithms
//!   and protocols are numbered (Tree=0 Ring=1 CollNetDirect=2 CollNetChain=3 NVLS=4
//!   NVLSTree=5 PAT=6; LL=0 LL128=1 Simple=2);
//! - the transport of each channel: `Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM`,
//!   `... [send] via NET/Socket/0`, `Channel 00 : 0[0] -> 1[1] via SHM/direct/direct`;
//! - `NCCL WARN ...` (why a point failed).
//!
//! Several processes write to the terminal (or to files) at once, so NCCL's lines arrive
//! interleaved with other output, sometimes mid-line. Every pattern is therefore searched
//! anywhere in a line, never anchored at its start.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// NCCL's algorithm names, indexed by the numbers older versions print.
pub(crate) const ALGOS: [&str; 7] = [
    "TREE",
    "RING",
    "COLLNET_DIRECT",
    "COLLNET_CHAIN",
    "NVLS",
    "NVLS_TREE",
    "PAT",
];
/// NCCL's protocol names, indexed by the numbers older versions print.
pub(crate) const PROTOS: [&str; 3] = ["LL", "LL128", "SIMPLE"];

/// What NCCL chose for one (function, size): counted over every call in the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Choice {
    /// `AllReduce`, `AllGather`, ...; `None` for NCCL 2.20-2.22, which does not print it.
    pub(crate) func: Option<String>,
    pub(crate) bytes: u64,
    /// Upper-case NCCL name: RING, TREE, COLLNET_DIRECT, COLLNET_CHAIN, NVLS, NVLS_TREE, PAT.
    pub(crate) algo: String,
    /// LL, LL128 or SIMPLE.
    pub(crate) proto: String,
    /// Channel range `{lo..hi}` (NCCL >= 2.24 only).
    pub(crate) channels: Option<(u32, u32)>,
    /// How many calls of the log made this choice.
    pub(crate) count: u64,
}

/// Everything the sweep reads from one or more NCCL logs of one point.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NcclLog {
    /// `2.28.3+cuda13.0`.
    pub(crate) version: Option<String>,
    /// Variables NCCL reported as "set by environment", with the value it read.
    pub(crate) env_set: BTreeMap<String, String>,
    /// Distinct choices, in order of first appearance.
    pub choices: Vec<Choice>,
    /// Transport of each channel connection -> number of lines naming it.
    pub(crate) transports: BTreeMap<String, u64>,
    /// Distinct `NCCL WARN` messages, in order of first appearance.
    pub(crate) warnings: Vec<String>,
}

struct Patterns {
    version: Regex,
    env: Regex,
    choice: Regex,
    channel: Regex,
    warn: Regex,
}

fn patterns() -> &'static Patterns {
    static P: OnceLock<Patterns> = OnceLock::new();
    P.get_or_init(|| Patterns {
        version: Regex::new(r"NCCL INFO NCCL version (\S+)").unwrap(),
        env: Regex::new(r"NCCL INFO (NCCL_[A-Z0-9_]+) set by environment to (.*)$").unwrap(),
        choice: Regex::new(
            r"(?:([A-Za-z]+): )?(\d+) Bytes -> Algo (\w+) proto (\w+)(?: channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\})?",
        )
        .unwrap(),
        channel: Regex::new(
            r"Channel \d+(?:/\d+)? : \d+\[\d+\] -> \d+\[\d+\](?: \[(?:send|receive)\])? via (P2P/direct pointer|[A-Za-z0-9_]+(?:/[A-Za-z0-9_]+)*)",
        )
        .unwrap(),
        warn: Regex::new(r"NCCL WARN (.*)$").unwrap(),
    })
}

/// Upper-case algorithm name from a name or an old-style number.
pub(crate) fn algo_name(s: &str) -> String {
    match s.parse::<usize>() {
        Ok(i) => ALGOS
            .get(i)
            .map_or_else(|| format!("ALGO{i}"), |a| a.to_string()),
        Err(_) => match s.to_ascii_uppercase().as_str() {
            "COLLNETDIRECT" => "COLLNET_DIRECT".into(),
            "COLLNETCHAIN" => "COLLNET_CHAIN".into(),
            "NVLSTREE" => "NVLS_TREE".into(),
            u => u.to_string(),
        },
    }
}

/// Upper-case protocol name from a name or an old-style number.
pub(crate) fn proto_name(s: &str) -> String {
    match s.parse::<usize>() {
        Ok(i) => PROTOS
            .get(i)
            .map_or_else(|| format!("PROTO{i}"), |p| p.to_string()),
        Err(_) => s.to_ascii_uppercase(),
    }
}

impl NcclLog {
    /// Parses the text of one log (or several concatenated).
    pub fn parse(text: &str) -> NcclLog {
        let mut log = NcclLog::default();
        log.add(text);
        log
    }

    /// Parses log files and merges them (one file per worker process), each at most
    /// [`crate::util::read::NCCL_LOG`].
    pub(crate) fn parse_files(paths: &[impl AsRef<Path>]) -> anyhow::Result<NcclLog> {
        let mut log = NcclLog::default();
        for p in paths {
            let bytes =
                crate::util::read::read(p.as_ref(), "NCCL log", crate::util::read::NCCL_LOG)?;
            log.add(&String::from_utf8_lossy(&bytes));
        }
        Ok(log)
    }

    /// Adds the lines of `text` to what is known.
    pub(crate) fn add(&mut self, text: &str) {
        let p = patterns();
        for line in text.lines() {
            // Cheap filters first: most lines of a big log are none of ours.
            if line.contains("Bytes -> Algo") {
                for c in p.choice.captures_iter(line) {
                    let channels = match (c.get(5), c.get(6)) {
                        (Some(lo), Some(hi)) => Some((
                            lo.as_str().parse().unwrap_or(0),
                            hi.as_str().parse().unwrap_or(0),
                        )),
                        _ => None,
                    };
                    let choice = Choice {
                        func: c.get(1).map(|m| m.as_str().to_string()),
                        bytes: c[2].parse().unwrap_or(0),
                        algo: algo_name(&c[3]),
                        proto: proto_name(&c[4]),
                        channels,
                        count: 1,
                    };
                    self.add_choice(choice);
                }
                continue;
            }
            if line.contains(" via ") {
                for c in p.channel.captures_iter(line) {
                    *self.transports.entry(c[1].to_string()).or_insert(0) += 1;
                }
                continue;
            }
            if line.contains("NCCL WARN") {
                if let Some(c) = p.warn.captures(line) {
                    let w = c[1].trim().to_string();
                    if !self.warnings.contains(&w) {
                        self.warnings.push(w);
                    }
                }
                continue;
            }
            if line.contains("set by environment to") {
                if let Some(c) = p.env.captures(line) {
                    let v = c[2].trim();
                    // NCCL ends some of these lines with a full stop ("... to 0.").
                    let v = v.strip_suffix('.').unwrap_or(v);
                    self.env_set.insert(c[1].to_string(), v.to_string());
                }
                continue;
            }
            if self.version.is_none() && line.contains("NCCL version") {
                if let Some(c) = p.version.captures(line) {
                    self.version = Some(c[1].to_string());
                }
            }
        }
    }

    fn add_choice(&mut self, c: Choice) {
        if let Some(e) = self.choices.iter_mut().find(|e| {
            e.func == c.func
                && e.bytes == c.bytes
                && e.algo == c.algo
                && e.proto == c.proto
                && e.channels == c.channels
        }) {
            e.count += 1;
        } else {
            self.choices.push(c);
        }
    }

    /// The most frequent choice of `func` (e.g. "AllReduce"), the verify step's main message.
    /// NCCL 2.20-2.22 does not name the function: with `func` None, any choice counts.
    pub(crate) fn main_choice(&self, func: Option<&str>) -> Option<&Choice> {
        self.choices
            .iter()
            .filter(|c| match func {
                Some(f) => c.func.as_deref() == Some(f),
                None => true,
            })
            // Ignore NCCL's own tiny internal all-reduces (a few bytes) when there is more.
            .max_by_key(|c| (c.bytes >= 64, c.count, c.bytes))
    }

    /// Distinct transports, most used first, each reduced to its kind: `P2P/CUMEM/read` stays,
    /// `NET/Socket/0` becomes `NET/Socket` (the device index says nothing about the path).
    pub(crate) fn transport_summary(&self) -> Vec<String> {
        let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
        for (t, n) in &self.transports {
            let k = match t.strip_prefix("NET/") {
                Some(rest) => {
                    let name = rest.split('/').next().unwrap_or(rest);
                    format!("NET/{name}")
                }
                None => t.clone(),
            };
            *kinds.entry(k).or_insert(0) += n;
        }
        let mut v: Vec<(String, u64)> = kinds.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v.into_iter().map(|(k, _)| k).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(name: &str) -> NcclLog {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(name);
        NcclLog::parse_files(&[p]).unwrap()
    }

    #[test]
    fn format_2_24_and_later() {
        let l = NcclLog::parse(
            "vm:573:573 [0] NCCL INFO AllReduce: 43008 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..4}",
        );
        assert_eq!(
            l.choices,
            vec![Choice {
                func: Some("AllReduce".into()),
                bytes: 43008,
                algo: "RING".into(),
                proto: "LL".into(),
                channels: Some((0, 4)),
                count: 1
            }]
        );
    }

    #[test]
    fn launcher_prefixes_before_every_line_are_read() {
        // the same lines as a worker started by torchrun, mpirun, srun or Ray writes them
        for prefix in [
            "[rank0]:",
            "[default0]:",
            "[1,0]<stdout>:",
            "0: ",
            "rank0: ",
            "(RayWorkerWrapper pid=4121) ",
            "2024-05-01 12:00:00.123 ",
        ] {
            let l = NcclLog::parse(&format!(
                "{prefix}vm:573:573 [0] NCCL INFO NCCL version 2.28.3+cuda13.0\n\
                 {prefix}vm:573:573 [0] NCCL INFO NCCL_PROTO set by environment to LL128\n\
                 {prefix}vm:573:573 [0] NCCL INFO AllReduce: 43008 Bytes -> Algo RING proto LL128 channel{{Lo..Hi}}={{0..4}}\n\
                 {prefix}vm:573:580 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n"
            ));
            assert_eq!(l.version.as_deref(), Some("2.28.3+cuda13.0"), "{prefix:?}");
            assert_eq!(l.env_set["NCCL_PROTO"], "LL128", "{prefix:?}");
            let c = l.main_choice(Some("AllReduce")).expect(prefix);
            assert_eq!((c.bytes, c.proto.as_str()), (43008, "LL128"), "{prefix:?}");
            assert_eq!(l.transport_summary(), ["P2P/CUMEM"], "{prefix:?}");
        }
    }

    #[test]
    fn format_2_23_numbers() {
        let l = NcclLog::parse(
            "host:1:1 [0] NCCL INFO AllReduce: 43008 Bytes -> Algo 0 proto 1 time 12.345600",
        );
        let c = &l.choices[0];
        assert_eq!(c.func.as_deref(), Some("AllReduce"));
        assert_eq!((c.algo.as_str(), c.proto.as_str()), ("TREE", "LL128"));
        assert_eq!(c.channels, None);
    }

    #[test]
    fn format_2_20_to_2_22_without_function() {
        let l = NcclLog::parse("host:1:1 [0] NCCL INFO 43008 Bytes -> Algo 1 proto 2 time 20.1");
        let c = &l.choices[0];
        assert_eq!(c.func, None);
        assert_eq!(
            (c.bytes, c.algo.as_str(), c.proto.as_str()),
            (43008, "RING", "SIMPLE")
        );
        let l = NcclLog::parse("x NCCL INFO 8 Bytes -> Algo 6 proto 0 time 1.0\n");
        assert_eq!(l.choices[0].algo, "PAT");
    }

    #[test]
    fn numbered_names_cover_every_algorithm() {
        let names: Vec<String> = (0..7).map(|i| algo_name(&i.to_string())).collect();
        assert_eq!(
            names,
            [
                "TREE",
                "RING",
                "COLLNET_DIRECT",
                "COLLNET_CHAIN",
                "NVLS",
                "NVLS_TREE",
                "PAT"
            ]
        );
        assert_eq!(algo_name("NVLSTree"), "NVLS_TREE");
        assert_eq!(proto_name("Simple"), "SIMPLE");
    }

    #[test]
    fn line_interleaved_mid_way_is_still_found() {
        let l = NcclLog::parse(
            "       43008         21504  bfloat16     sum      -1vm:1749:1749 [0] NCCL INFO AllReduce: 43008 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..4}",
        );
        assert_eq!(l.choices[0].func.as_deref(), Some("AllReduce"));
        assert_eq!(l.choices[0].bytes, 43008);
    }

    #[test]
    fn single_process_sample_2_28_9() {
        let l = sample("nccl-info-2.28.9.log");
        let c = l.main_choice(Some("AllReduce")).unwrap();
        assert_eq!(
            (c.algo.as_str(), c.proto.as_str(), c.bytes),
            ("RING", "LL", 43008)
        );
        assert!(c.count >= 15, "{}", c.count);
        assert_eq!(l.transport_summary(), vec!["P2P/direct pointer"]);
        assert!(l.warnings.is_empty());
    }

    #[test]
    fn threads_sample_uses_direct_pointer() {
        let l = sample("nccl-2.28.3-h200x2-threads-default.log");
        assert_eq!(l.version.as_deref(), Some("2.28.3+cuda13.0"));
        assert_eq!(l.transport_summary(), vec!["P2P/direct pointer"]);
        assert_eq!(
            l.env_set.get("NCCL_NVLS_ENABLE").map(String::as_str),
            Some("0")
        );
        let c = l.main_choice(Some("AllReduce")).unwrap();
        assert_eq!((c.algo.as_str(), c.proto.as_str()), ("RING", "LL"));
    }

    #[test]
    fn processes_sample_uses_cumem() {
        let l = sample("nccl-2.28.3-h200x2-procs-default.log");
        assert_eq!(l.transport_summary(), vec!["P2P/CUMEM"]);
        let ag = l.main_choice(Some("AllGather")).unwrap();
        assert_eq!((ag.algo.as_str(), ag.proto.as_str()), ("RING", "LL"));
        assert_eq!(ag.channels, Some((0, 6)));
    }

    #[test]
    fn p2p_disabled_sample_uses_shm_and_nccl_saw_the_variable() {
        let l = sample("nccl-2.28.3-h200x2-procs-p2poff.log");
        assert_eq!(l.transport_summary(), vec!["SHM/direct/direct"]);
        assert_eq!(
            l.env_set.get("NCCL_P2P_DISABLE").map(String::as_str),
            Some("1")
        );
        let c = l.main_choice(Some("AllReduce")).unwrap();
        assert_eq!(
            (c.algo.as_str(), c.proto.as_str(), c.bytes),
            ("RING", "LL", 43008)
        );
    }

    #[test]
    fn network_sample_uses_socket_and_simple() {
        let l = sample("nccl-2.28.3-h200x2-procs-net.log");
        assert_eq!(l.transport_summary(), vec!["NET/Socket"]);
        assert!(l.transports.contains_key("NET/Socket/0"));
        assert_eq!(
            l.env_set.get("NCCL_SHM_DISABLE").map(String::as_str),
            Some("1")
        );
        let c = l.main_choice(Some("AllReduce")).unwrap();
        assert_eq!((c.algo.as_str(), c.proto.as_str()), ("RING", "SIMPLE"));
        // NCCL's own 2-byte all-reduces are there but are not the main choice.
        assert!(l.choices.iter().any(|c| c.bytes == 2 && c.proto == "LL"));
    }

    #[test]
    fn simple_sample_shows_the_forced_protocol() {
        let l = sample("nccl-2.28.3-h200x2-procs-simple.log");
        assert_eq!(
            l.env_set.get("NCCL_PROTO").map(String::as_str),
            Some("Simple")
        );
        let c = l.main_choice(Some("AllReduce")).unwrap();
        assert_eq!(c.proto, "SIMPLE");
    }

    #[test]
    fn tree_sample_runs_the_all_reduce_and_warns_on_the_all_gather() {
        let l = sample("nccl-2.28.3-h200x2-procs-ll128-tree.log");
        assert_eq!(l.env_set.get("NCCL_ALGO").map(String::as_str), Some("Tree"));
        assert_eq!(
            l.env_set.get("NCCL_PROTO").map(String::as_str),
            Some("LL128")
        );
        let c = l.main_choice(Some("AllReduce")).unwrap();
        assert_eq!((c.algo.as_str(), c.proto.as_str()), ("TREE", "LL128"));
        assert!(l.main_choice(Some("AllGather")).is_none());
        assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
        assert!(l.warnings[0].contains("no algorithm/protocol available for function AllGather"));
    }

    #[test]
    fn transport_variants() {
        let l = NcclLog::parse(
            "a NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n\
             a NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/IPC\n\
             a NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/IPC/read\n\
             a NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct\n\
             a NCCL INFO Channel 00/0 : 1[1] -> 0[0] [send] via NET/IB/0/GDRDMA\n",
        );
        for t in [
            "P2P/CUMEM/read",
            "P2P/IPC",
            "P2P/IPC/read",
            "SHM/direct/direct",
        ] {
            assert!(l.transports.contains_key(t), "{t} in {:?}", l.transports);
        }
        assert!(l.transport_summary().contains(&"NET/IB".to_string()));
    }
}
