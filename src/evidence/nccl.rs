//! NCCL's INIT, GRAPH and ENV log lines (`NCCL_DEBUG=INFO`), the only file that parses them:
//! the variables NCCL read (`set by environment to`, src/misc/param.cc and
//! src/graph/tuning.cc), its topology search (`Pattern .., nChannels .., bw .., type ..`,
//! src/graph/search.cc), and the machine the log came from: its communicators' sizes
//! (`ncclCommInitRank comm .. rank R nranks N cudaDev D .. busId B`, src/init.cc), the
//! transport of its channels (`Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM`, src/transport.cc)
//! and the path between its GPUs (the search's `type NVL/PIX`). The COLL lines of a call log
//! are `trace`'s (src/trace/nccl_log.rs).

use std::path::PathBuf;

use serde::Serialize;

use super::short_name;

/// One NCCL log as text (INIT, GRAPH, ENV or COLL lines).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct NcclLogText {
    pub(crate) name: String,
    #[serde(skip)]
    pub(crate) text: String,
}

/// Reads `--nccl-log` files; one without any `NCCL` line is a usage error.
pub(crate) fn read_nccl_logs(paths: &[PathBuf]) -> anyhow::Result<Vec<NcclLogText>> {
    paths
        .iter()
        .map(|p| {
            let bytes = crate::util::read::read(p, "--nccl-log", crate::util::read::NCCL_LOG)?;
            if crate::util::looks_like_json(&bytes[..bytes.len().min(4096)]) {
                crate::usage_bail!(
                    "--nccl-log '{}' is a JSON document (a profiler trace?), not an NCCL log: give traces to --trace and the log NCCL writes with NCCL_DEBUG=INFO to --nccl-log",
                    p.display()
                );
            }
            let text = String::from_utf8_lossy(&bytes).into_owned();
            if !text.contains("NCCL") {
                crate::usage_bail!(
                    "--nccl-log '{}': no NCCL line in it; give a log written with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV)",
                    p.display()
                );
            }
            Ok(NcclLogText {
                name: short_name(p),
                text,
            })
        })
        .collect()
}

/// `NCCL_X set by environment to V` lines: the variables NCCL read, each once.
pub(crate) fn env_lines(logs: &[NcclLogText]) -> Vec<(String, String)> {
    let re = regex_once!(r"(NCCL_[A-Z0-9_]+) set by environment to (\S+)");
    let mut out: Vec<(String, String)> = vec![];
    for l in logs {
        for c in re.captures_iter(&l.text) {
            let kv = (c[1].to_string(), c[2].trim_end_matches('.').to_string());
            // every rank prints its own line: each setting once
            if !out.contains(&kv) {
                out.push(kv);
            }
        }
    }
    out
}

/// A graph-search line: (channels, bw intra, bw inter, path intra, path inter).
fn pattern(line: &str) -> Option<(u32, f64, f64, String, String)> {
    let c = regex_once!(
        r"Pattern \d+, crossNic \d+, nChannels (\d+), bw ([0-9.]+)/([0-9.]+), type (\w+)/(\w+)"
    )
    .captures(line)?;
    Some((
        c[1].parse().ok()?,
        c[2].parse().unwrap_or(f64::INFINITY),
        c[3].parse().unwrap_or(f64::INFINITY),
        c[4].to_string(),
        c[5].to_string(),
    ))
}

/// The first graph-search line whose bandwidth is at NCCL's floor and whose path crosses the
/// system (SYS) interconnect, with its file.
pub(crate) fn sys_graph_line(logs: &[NcclLogText]) -> Option<(String, String)> {
    logs.iter().find_map(|l| {
        l.text.lines().find_map(|line| {
            let (_, bw1, bw2, p1, p2) = pattern(line)?;
            (bw1 <= 0.1 + 1e-9 && bw2 <= 0.1 + 1e-9 && (p1 == "SYS" || p2 == "SYS"))
                .then(|| (l.name.clone(), line.trim().to_string()))
        })
    })
}

/// The graph-search lines of the logs.
pub(crate) fn graph_lines(logs: &[NcclLogText]) -> usize {
    logs.iter()
        .map(|l| l.text.matches("nChannels").count())
        .sum()
}

/// The machine an NCCL log came from, as its INIT lines say it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct NcclMachine {
    /// The sizes of its communicators (`nranks N`), each once, smallest first.
    pub(crate) nranks: Vec<u32>,
    /// The GPUs it initialised (`busId`), each once.
    pub(crate) devices: Vec<String>,
    /// The transports of its channels (`via P2P/CUMEM`, `via SHM/direct/direct`, `via
    /// NET/Socket`), each once.
    pub(crate) transports: Vec<String>,
    /// The path between its GPUs that the topology search used (`NVL`, `PIX`, `PXB`, `PHB`,
    /// `SYS`), from the first graph-search line.
    pub(crate) gpu_path: Option<String>,
}

impl NcclMachine {
    /// The link kind of the cost model's profiles (src/costmodel/profile.rs) that the log
    /// names: `shm` when every channel goes through host memory (P2P off), else `nvlink` (a
    /// search over NVL) or `pci` (over PIX, PXB, PXN, PHB, NODE or SYS); `None` when the log
    /// says neither.
    pub(crate) fn link_kind(&self) -> Option<&'static str> {
        let host = |t: &String| t.starts_with("SHM") || t.ends_with("shared memory");
        if !self.transports.is_empty() && self.transports.iter().all(host) {
            return Some("shm");
        }
        match self.gpu_path.as_deref()? {
            "NVL" => Some("nvlink"),
            "PIX" | "PXB" | "PXN" | "PHB" | "SYS" | "NODE" => Some("pci"),
            _ => None,
        }
    }

    /// `2 ranks, P2P/CUMEM over NVL, 2 GPUs (busId 60, 70)`.
    pub(crate) fn words(&self) -> String {
        let mut parts = vec![];
        if !self.nranks.is_empty() {
            let n: Vec<String> = self.nranks.iter().map(|n| n.to_string()).collect();
            parts.push(format!("{} ranks", n.join(" and ")));
        }
        match (self.transports.is_empty(), &self.gpu_path) {
            (false, Some(p)) => parts.push(format!("{} over {p}", self.transports.join(", "))),
            (false, None) => parts.push(self.transports.join(", ")),
            (true, Some(p)) => parts.push(format!("GPUs joined by {p}")),
            (true, None) => {}
        }
        if !self.devices.is_empty() {
            parts.push(format!(
                "{} GPU{} (busId {})",
                self.devices.len(),
                if self.devices.len() == 1 { "" } else { "s" },
                self.devices.join(", ")
            ));
        }
        parts.join(", ")
    }
}

/// What one log's lines say of its machine: the communicator sizes of its INIT lines
/// (`ncclCommInitRank comm .. rank R nranks N cudaDev D [nvmlDev D] [busId B]` of every version
/// since 2.4, `comm .. rank R nRanks N nNodes ..` since 2.19) and of its COLL lines (`comm ..
/// [nranks=N]`), the transports of its channels (`Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM`,
/// `Ring 00 : 0[0] -> 1[1] via direct shared memory` before 2.5) and the path of its first
/// graph search.
pub(crate) fn machine(log: &NcclLogText) -> NcclMachine {
    let init = regex_once!(
        r"rank \d+ nranks (\d+) cudaDev \d+(?: nvmlDev \d+)?(?: busId ([0-9a-fA-Fx]+))?"
    );
    let size = regex_once!(r"(?:\bnRanks (\d+) nNodes|\[nranks=(\d+)\])");
    let via = regex_once!(
        r"(?:Channel|Ring) \d+(?:/\d+)? : \d+\[\w+\] -> \d+\[\w+\].* via (\S+(?: shared memory)?)"
    );
    let mut m = NcclMachine::default();
    let add = |v: &mut Vec<String>, x: &str| {
        if !v.iter().any(|y| y == x) {
            v.push(x.to_string());
        }
    };
    let mut ranks = |n: Option<u32>| {
        if let Some(n) = n.filter(|n| !m.nranks.contains(n)) {
            m.nranks.push(n);
        }
    };
    let mut devices = vec![];
    let mut transports = vec![];
    let mut gpu_path = None;
    for line in log.text.lines() {
        if let Some(c) = init.captures(line) {
            ranks(c[1].parse().ok());
            if let Some(d) = c.get(2) {
                add(&mut devices, d.as_str());
            }
        } else if let Some(c) = size.captures(line) {
            ranks(c.get(1).or(c.get(2)).and_then(|x| x.as_str().parse().ok()));
        } else if let Some(c) = via.captures(line) {
            add(&mut transports, &c[1]);
        } else if gpu_path.is_none() {
            gpu_path = pattern(line).map(|p| p.3);
        }
    }
    m.devices = devices;
    m.transports = transports;
    m.gpu_path = gpu_path;
    m.nranks.sort_unstable();
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(text: &str) -> Vec<NcclLogText> {
        vec![NcclLogText {
            name: "n.log".into(),
            text: text.into(),
        }]
    }

    #[test]
    fn the_sys_floor_line_is_found_and_a_healthy_search_is_not() {
        let bad = log("host:1:1 [0] NCCL INFO Pattern 4, crossNic 0, nChannels 2, bw 0.100000/0.100000, type SYS/SYS, sameChannels 1\n");
        assert!(sys_graph_line(&bad).is_some());
        let good = log("vm:574:574 [1] NCCL INFO Pattern 4, crossNic 0, nChannels 12, bw 30.000000/30.000000, type NVL/PIX, sameChannels 1\n");
        assert!(sys_graph_line(&good).is_none());
        assert_eq!(graph_lines(&good), 1);
        // A slow but not floor search across SYS is not the trap.
        let slow = log("x [0] NCCL INFO Pattern 4, crossNic 0, nChannels 2, bw 6.000000/6.000000, type SYS/SYS, sameChannels 1\n");
        assert!(sys_graph_line(&slow).is_none());
    }

    #[test]
    fn env_lines_name_what_nccl_read() {
        // integer parameters end with a period (src/misc/param.cc), NCCL_PROTO does not
        let l = log("x [0] NCCL INFO NCCL_PROTO set by environment to LL\nx [1] NCCL INFO NCCL_PROTO set by environment to LL\nx [1] NCCL INFO NCCL_P2P_LEVEL set by environment to 2.\n");
        assert_eq!(
            env_lines(&l),
            vec![
                ("NCCL_PROTO".to_string(), "LL".to_string()),
                ("NCCL_P2P_LEVEL".to_string(), "2".to_string())
            ]
        );
    }

    /// The INIT lines of the real 2-H200 logs under tests/data (NCCL 2.28.3): two ranks, two
    /// GPUs (busId 60 and 70), NVLink; P2P over CUMEM by default, host memory with P2P off.
    #[test]
    fn the_machine_of_a_real_two_gpu_log() {
        let read = |f: &str| {
            let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data")
                .join(f);
            read_nccl_logs(&[p]).unwrap().remove(0)
        };
        let m = machine(&read("nccl-2.28.3-h200x2-procs-default.log"));
        assert_eq!(m.nranks, vec![2]);
        assert_eq!(m.devices, vec!["70".to_string(), "60".to_string()]);
        assert_eq!(m.transports, vec!["P2P/CUMEM".to_string()]);
        assert_eq!(m.gpu_path.as_deref(), Some("NVL"));
        assert_eq!(m.link_kind(), Some("nvlink"));
        assert_eq!(
            m.words(),
            "2 ranks, P2P/CUMEM over NVL, 2 GPUs (busId 70, 60)"
        );
        let off = machine(&read("nccl-2.28.3-h200x2-procs-p2poff.log"));
        assert_eq!(off.nranks, vec![2]);
        assert!(
            off.transports.iter().all(|t| t.starts_with("SHM")),
            "{off:?}"
        );
        assert_eq!(off.link_kind(), Some("shm"));
    }

    #[test]
    fn an_older_init_line_and_a_pcie_search() {
        // NCCL 2.1x: `comm .. rank R nranks N cudaDev D busId B - Init COMPLETE`
        let m = machine(&log("h:1:1 [3] NCCL INFO comm 0x1 rank 3 nranks 8 cudaDev 3 busId 3d000 - Init COMPLETE\nh:1:1 [3] NCCL INFO Pattern 4, crossNic 0, nChannels 2, bw 12.000000/12.000000, type PIX/PIX, sameChannels 1\nh:1:1 [3] NCCL INFO Channel 00/0 : 3[3] -> 4[4] via P2P/IPC\n").remove(0));
        assert_eq!(m.nranks, vec![8]);
        assert_eq!(m.link_kind(), Some("pci"));
        assert_eq!(m.transports, vec!["P2P/IPC".to_string()]);
    }

    /// NCCL before 2.5 printed rings, not channels, and named host memory in words; 2.19 and
    /// later print `nRanks N nNodes M` on the communicator's line.
    #[test]
    fn ring_lines_and_the_nranks_of_newer_versions() {
        let m = machine(&log("h:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 4 cudaDev 0 nvmlDev 0 - Init COMPLETE\nh:1:1 [0] NCCL INFO Ring 00 : 0[0] -> 1[1] via direct shared memory\n").remove(0));
        assert_eq!(m.nranks, vec![4]);
        assert!(m.devices.is_empty(), "{m:?}");
        assert_eq!(m.transports, vec!["direct shared memory".to_string()]);
        assert_eq!(m.link_kind(), Some("shm"));
        let m = machine(&log("h:1:1 [0] NCCL INFO comm 0x5 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0\n").remove(0));
        assert_eq!(m.nranks, vec![8]);
    }

    /// A COLL log says its communicators' sizes on every call (`[nranks=16]`): the public
    /// log of NVIDIA/nccl#531 (tests/data/nccl-coll-public) holds 4 calls of 16 ranks and no
    /// INIT line (counted with `grep -o 'nranks=[0-9]*' | sort | uniq -c`).
    #[test]
    fn the_communicator_size_of_a_public_coll_log() {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/nccl-coll-public/NVIDIA-nccl-issue531_allgather16.log");
        let m = machine(&read_nccl_logs(&[p]).unwrap().remove(0));
        assert_eq!(m.nranks, vec![16]);
        assert_eq!(m.link_kind(), None);
        assert_eq!(m.words(), "16 ranks");
    }
}
