//! Link profiles: the parameters of the cost model, built in or read from a fitted file.
//!
//! The latency tables start from NCCL's own tuner (`src/graph/tuning.cc`, NCCL 2.19-2.2x):
//!
//! ```text
//! baseLat  Tree {6.8, 14.0, 8.4}   Ring {6.6, 14.0, 8.4}      (LL, LL128, Simple; us)
//! hwLat    NVLink Tree {.6, 1.25, 4}   Ring {.6, 1.9, 3.4}
//!          PCI    Tree {1.0, 1.9, 4}   Ring {1.0, 2.5, 5.7}
//!          NET    Tree {5.0, 8.5, 14}  Ring {2.7, 4.0, 14.0}
//! llMaxBws Hopper, one node: 141 GB/s
//! ```
//!
//! They are starting points, not truths: NCCL uses them only to rank (algorithm, protocol)
//! pairs, and its base latency includes costs that this model books as launch costs. The one
//! place where a built-in number departs from NCCL's table is the LL base latency, lowered so
//! that `nvlink-h200` reproduces the measured reference: 2x H200 NVLink, NCCL, 43,008 B bf16
//! all-reduce: a CUDA graph of the verify step's 123 all-reduces replays at 7.0-7.4 us per
//! all-reduce; eager launches cost ~8.4 us each from threads and ~11 us from processes; with
//! NCCL_P2P_DISABLE=1 (SHM through host memory) ~14-15 us; PyTorch c10d ~17 us graph / 28 us
//! eager. Everything else is meant to be replaced by `verifybench model fit` on measurements of
//! the machine.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::usage;

mod bounds;

/// Version of the profile file format; files of another version are refused.
pub(crate) const PROFILE_SCHEMA_VERSION: u32 = 1;
/// The `kind` field of a profile file, so a results file is not mistaken for one.
pub(crate) const PROFILE_KIND: &str = crate::record::kinds::PROFILE;

/// NCCL's protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) enum Proto {
    #[serde(rename = "LL")]
    Ll,
    #[serde(rename = "LL128")]
    Ll128,
    Simple,
}

impl Proto {
    pub(crate) const ALL: [Proto; 3] = [Proto::Ll, Proto::Ll128, Proto::Simple];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Proto::Ll => "LL",
            Proto::Ll128 => "LL128",
            Proto::Simple => "Simple",
        }
    }

    /// Share of the link bandwidth the protocol delivers as payload: LL sends 8-byte lines of
    /// 4 data bytes and a 4-byte flag; LL128 128-byte lines with 8 bytes of flags; Simple all.
    pub(crate) fn efficiency(self) -> f64 {
        match self {
            Proto::Ll => 0.5,
            Proto::Ll128 => 120.0 / 128.0,
            Proto::Simple => 1.0,
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Proto> {
        match s.trim().to_ascii_lowercase().as_str() {
            "ll" => Some(Proto::Ll),
            "ll128" => Some(Proto::Ll128),
            "simple" => Some(Proto::Simple),
            _ => None,
        }
    }
}

/// NCCL's algorithms the model knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) enum Algo {
    Ring,
    Tree,
}

impl Algo {
    pub(crate) const ALL: [Algo; 2] = [Algo::Ring, Algo::Tree];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Algo::Ring => "Ring",
            Algo::Tree => "Tree",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Algo> {
        match s.trim().to_ascii_lowercase().as_str() {
            "ring" => Some(Algo::Ring),
            "tree" => Some(Algo::Tree),
            _ => None,
        }
    }
}

/// One number per protocol (microseconds or a flag).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct PerProto {
    #[serde(rename = "LL")]
    pub(crate) ll: f64,
    #[serde(rename = "LL128")]
    pub(crate) ll128: f64,
    #[serde(rename = "Simple")]
    pub(crate) simple: f64,
}

impl PerProto {
    pub(crate) const fn new(ll: f64, ll128: f64, simple: f64) -> PerProto {
        PerProto { ll, ll128, simple }
    }
    pub(crate) fn get(&self, p: Proto) -> f64 {
        match p {
            Proto::Ll => self.ll,
            Proto::Ll128 => self.ll128,
            Proto::Simple => self.simple,
        }
    }
    pub(crate) fn get_mut(&mut self, p: Proto) -> &mut f64 {
        match p {
            Proto::Ll => &mut self.ll,
            Proto::Ll128 => &mut self.ll128,
            Proto::Simple => &mut self.simple,
        }
    }
}

/// One [`PerProto`] per algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct PerAlgo {
    pub(crate) ring: PerProto,
    pub(crate) tree: PerProto,
}

impl PerAlgo {
    pub(crate) fn get(&self, a: Algo, p: Proto) -> f64 {
        match a {
            Algo::Ring => self.ring.get(p),
            Algo::Tree => self.tree.get(p),
        }
    }
    pub(crate) fn get_mut(&mut self, a: Algo, p: Proto) -> &mut f64 {
        match a {
            Algo::Ring => self.ring.get_mut(p),
            Algo::Tree => self.tree.get_mut(p),
        }
    }
}

/// A link between ranks: per-hop latency and bandwidth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Link {
    /// `nvlink`, `pci`, `shm` or `net` (documentation; the numbers decide).
    pub(crate) kind: String,
    /// Latency of one step (hop) of the algorithm, per algorithm and protocol (NCCL's hwLat).
    pub(crate) hop_lat_us: PerAlgo,
    /// Bus bandwidth one rank achieves on this link with the Simple protocol, GB/s.
    pub(crate) bw_gbps: f64,
    /// The link's physical rate per direction, GB/s (PCIe 5.0 x16: 63, NVLink 4: 450): the
    /// ceiling of every protocol's bandwidth times its payload share ([`Profile::bounds`]).
    /// `None`: not known (profile files written before it), nothing is checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rate_gbps: Option<f64>,
}

/// Per-operation launch costs, by how ranks are started.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct Launch {
    /// Ranks as threads of one process.
    pub(crate) threads: f64,
    /// Ranks as worker processes (as serving engines run).
    pub(crate) processes: f64,
}

impl Launch {
    pub(crate) fn get(&self, l: crate::request::Launcher) -> f64 {
        match l {
            crate::request::Launcher::Threads => self.threads,
            crate::request::Launcher::Processes => self.processes,
        }
    }
    pub(crate) fn get_mut(&mut self, l: crate::request::Launcher) -> &mut f64 {
        match l {
            crate::request::Launcher::Threads => &mut self.threads,
            crate::request::Launcher::Processes => &mut self.processes,
        }
    }
}

/// All parameters of the cost model for one kind of machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Profile {
    pub(crate) name: String,
    /// What machine it describes and where its numbers come from.
    pub(crate) description: String,
    /// Fixed latency of one collective kernel, per algorithm and protocol (NCCL's baseLat).
    pub(crate) base_lat_us: PerAlgo,
    /// The link between GPUs of one node.
    pub(crate) intra: Link,
    /// The network between nodes, when ranks span several nodes.
    #[serde(default)]
    pub(crate) inter: Option<Link>,
    /// GPUs per node; more ranks than this span several nodes over `inter`.
    #[serde(default)]
    pub(crate) gpus_per_node: Option<usize>,
    /// Ceiling of the LL protocol's bandwidth, GB/s (NCCL's llMaxBws).
    pub(crate) ll_max_gbps: f64,
    /// Whether NCCL enables LL128 by default here (only on NVLink; forcing it still works).
    pub(crate) ll128_default: bool,
    /// Per-collective cost in eager mode (host enqueue the GPU waits for), us.
    pub(crate) launch_eager_us: Launch,
    /// Per-collective cost in CUDA-graph replay (the gap between graph kernel nodes), us.
    pub(crate) launch_graph_us: f64,
    /// Per-kernel launch cost of the compute kernels in eager mode, us.
    pub(crate) kernel_launch_eager_us: f64,
    /// Achieved HBM streaming bandwidth of one GPU, GB/s (compute = weight bytes / this).
    pub(crate) hbm_gbps: f64,
    /// Rank counts of the measurements a fitted profile was fitted on (`None`: built in or
    /// hand-written); used at another count, the profile extrapolates
    /// ([`crate::costmodel::fit::extrapolation_note`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fitted_rank_counts: Option<Vec<usize>>,
    /// The custom P2P all-reduces' parameters (absent in files written before them: then
    /// `custom::params` takes the built-in values of the link kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) p2p: Option<P2pLink>,
    /// The LL protocol's bandwidth over the sizes where it was measured (instead of the link's
    /// bandwidth x LL efficiency). `None`: link x efficiency at every size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ll_fitted: Option<LlFit>,
    /// GPUs split over CPU sockets: the steps that cross from one socket to the other pay an
    /// extra latency. `None`: one socket (or a switch that hides it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cross_socket: Option<CrossSocket>,
    /// NCCL's choice as measured (`model fit --nccl-tests`): at these collectives and rank
    /// counts the protocol follows the measured switch, not the model's fastest pair.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) observed: Vec<ObservedChoice>,
    /// What a fit pinned down and on which sizes (`None`: built in, hand-written, or written
    /// before it): the queries are [`Profile::is_fitted`] and the others beside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fit_scope: Option<super::scope::FitScope>,
}

/// Where NCCL switched from Ring/LL to Ring/Simple in measured tables: sizes up to
/// `ll_up_to_bytes` (nccl-tests size) ran LL, larger ones Simple. NCCL's tuner decides by its
/// own estimates, not by the real times, so the switch can cost time (a step up in a table),
/// which a fastest-pair model cannot reproduce.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct ObservedChoice {
    pub(crate) op: crate::model::CollectiveKind,
    pub(crate) nranks: usize,
    pub(crate) ll_up_to_bytes: u64,
}

impl Profile {
    /// The protocol (on a ring) of the measured switch for `op` of nccl-tests size `size` on
    /// `n` ranks, where the profile has one.
    pub(crate) fn observed_proto(
        &self,
        op: crate::model::CollectiveKind,
        size: u64,
        n: usize,
    ) -> Option<Proto> {
        // A plain loop, not `find` with a closure: the model calls this for every point.
        for o in &self.observed {
            if o.op == op && o.nranks == n {
                return Some(if size <= o.ll_up_to_bytes {
                    Proto::Ll
                } else {
                    Proto::Simple
                });
            }
        }
        None
    }
}

/// LL's effective bandwidth fitted on small messages, where NCCL's pipelined ring hides most of
/// the transfer behind the latency: the first `up_to_bus_bytes` bus bytes of a collective move
/// at `gbps`, the rest at the link's LL bandwidth (so large messages still go to Simple).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct LlFit {
    pub(crate) gbps: f64,
    pub(crate) up_to_bus_bytes: f64,
}

/// GPUs behind two or more CPU sockets: the ring and the tree chain cross between them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct CrossSocket {
    /// GPUs under one socket; ranks fill the sockets in order.
    pub(crate) gpus_per_socket: usize,
    /// Extra latency of one step that crosses sockets, us.
    pub(crate) extra_hop_us: f64,
}

/// The one-shot all-reduce of 8 ranks behind PCIe gen5 switches, (signal us, read GB/s):
/// `1.0 + signal + 7 x size / read` fitted on the public measurement of 8x RTX PRO 6000 (S10),
/// least squares on the relative error; a unit test fits the committed table again.
pub(crate) const S10_FIT: (f64, f64) = (6.3213, 26.440);

/// The P2P parameters of a link profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct P2pLink {
    /// Whether the GPUs of one node can address each other's memory (false: the custom
    /// all-reduces cannot run; NCCL goes through host memory instead).
    pub(crate) available: bool,
    /// One signal round with the kernel's fixed device cost, us.
    pub(crate) signal_us: f64,
    /// Bandwidth at which one GPU reads its peers' memory, GB/s.
    pub(crate) read_gbps: f64,
    /// Where the numbers come from.
    pub(crate) source: String,
}

impl P2pLink {
    /// PCIe 5.0 x16 through switches, calibrated on the one public custom all-reduce measurement
    /// on RTX PRO 6000 (tests/data/public-nccl/S10: 8 GPUs behind three PCIe switches, 7.5 us at
    /// 256 B and 1 KB, 9.2 us at 8 KB, 16.5 us at 32 KB, 25.9 us at 64 KB, 73.6 us at 256 KB):
    /// one-shot = 1.0 us graph node gap + signal + 7 x size / read, fitted by least squares on
    /// the relative error ([`S10_FIT`]): the signal round 6.32 us, the read bandwidth 26.4 GB/s
    /// (about half of what one x16 gen5 link delivers to a single reader: seven peers' reads
    /// share the switch's uplinks). Each size predicted with the other five: -6.5% to +10.0%.
    /// `model fit` on measurements of the machine settles it.
    pub(crate) fn pcie_gen5() -> P2pLink {
        P2pLink {
            available: true,
            signal_us: S10_FIT.0,
            read_gbps: S10_FIT.1,
            source: "fitted on the public custom all-reduce measurement of 8x RTX PRO 6000 behind PCIe switches (S10: 7.5 us at 1 KB .. 73.6 us at 256 KB; each size held out -6.5% to +10.0%)".into(),
        }
    }

    /// PCIe 4.0 x16: the signal round of gen5 (switch and flag latency, not link speed, dominate
    /// it), half its read bandwidth.
    pub(crate) fn pcie_gen4() -> P2pLink {
        P2pLink {
            available: true,
            signal_us: S10_FIT.0,
            read_gbps: S10_FIT.1 / 2.0,
            source: "signal round as pcie-gen5 (fitted on the public 8x RTX PRO 6000 custom all-reduce measurement, S10); half its read bandwidth for a PCIe 4.0 x16 link".into(),
        }
    }

    /// NVLink 4 through NVSwitch. An estimate, not a measurement: a flag store crossing NVLink and
    /// a poll seeing it take ~1 us, the kernel's copy-in and launch on the device ~1 us; reads at
    /// ~300 of NVLink 4's 450 GB/s per direction. The 2-GPU H200 measurement replaces it.
    pub(crate) fn nvlink4() -> P2pLink {
        P2pLink {
            available: true,
            signal_us: 2.0,
            read_gbps: 300.0,
            source: "estimate (no measurement yet): ~1 us NVLink flag round trip + ~1 us kernel fixed cost; reads ~300 GB/s of NVLink 4's 450 GB/s".into(),
        }
    }

    /// No peer-to-peer between the GPUs (NCCL_P2P_DISABLE, or GPUs under different root
    /// complexes without P2P): the custom all-reduces cannot run.
    pub(crate) fn unavailable() -> P2pLink {
        P2pLink {
            available: false,
            signal_us: 0.0,
            read_gbps: 1.0,
            source: "no peer-to-peer between the GPUs".into(),
        }
    }

    /// Every parameter finite and in range.
    pub(crate) fn check(&self) -> Result<(), String> {
        if !self.signal_us.is_finite() || self.signal_us < 0.0 {
            return Err("p2p.signal_us is negative or not a number".into());
        }
        if !self.read_gbps.is_finite() || self.read_gbps <= 0.0 {
            return Err("p2p.read_gbps is not positive".into());
        }
        Ok(())
    }
}

/// NCCL's Ring/Tree base latencies (LL, LL128, Simple), with LL calibrated (see module docs).
const BASE_LAT: PerAlgo = PerAlgo {
    // NCCL: Tree {6.8, 14.0, 8.4}; LL lowered by the same 1.9 us as Ring's.
    tree: PerProto::new(4.9, 14.0, 8.4),
    // NCCL: Ring {6.6, 14.0, 8.4}; LL lowered from 6.6 to 4.7 so that nvlink-h200 gives the
    // measured 7.2 us per 43,008 B all-reduce in graph replay (launch_graph_us 1.0 included).
    ring: PerProto::new(4.7, 14.0, 8.4),
};

/// NCCL's hwLat for NVLink.
const HW_NVLINK: PerAlgo = PerAlgo {
    tree: PerProto::new(0.6, 1.25, 4.0),
    ring: PerProto::new(0.6, 1.9, 3.4),
};

/// NCCL's hwLat for PCI.
const HW_PCI: PerAlgo = PerAlgo {
    tree: PerProto::new(1.0, 1.9, 4.0),
    ring: PerProto::new(1.0, 2.5, 5.7),
};

/// NCCL's hwLat for the network.
const HW_NET: PerAlgo = PerAlgo {
    tree: PerProto::new(5.0, 8.5, 14.0),
    ring: PerProto::new(2.7, 4.0, 14.0),
};

/// Launch costs set from the H200 reference: graph replay 7.2 us = 6.2 us device + 1.0 us;
/// eager 8.4 us (threads) = 6.2 + 2.2; 11 us (processes) = 6.2 + 4.8. They describe the host
/// and driver, not the link, so every built-in profile shares them until fitted.
const LAUNCH_EAGER: Launch = Launch {
    threads: 2.2,
    processes: 4.8,
};
const LAUNCH_GRAPH_US: f64 = 1.0;
/// cudaLaunchKernel host cost, typical of current drivers (2-3 us).
const KERNEL_LAUNCH_EAGER_US: f64 = 2.5;

fn nvlink(name: &str, description: &str, hbm_gbps: f64) -> Profile {
    Profile {
        name: name.into(),
        description: description.into(),
        base_lat_us: BASE_LAT,
        intra: Link {
            kind: "nvlink".into(),
            hop_lat_us: HW_NVLINK,
            bw_gbps: 360.0,
            rate_gbps: Some(NVLINK4_RATE_GBPS),
        },
        inter: None,
        gpus_per_node: None,
        ll_max_gbps: 141.0,
        ll128_default: true,
        launch_eager_us: LAUNCH_EAGER,
        launch_graph_us: LAUNCH_GRAPH_US,
        kernel_launch_eager_us: KERNEL_LAUNCH_EAGER_US,
        hbm_gbps,
        fitted_rank_counts: None,
        p2p: Some(P2pLink::nvlink4()),
        ll_fitted: None,
        cross_socket: None,
        observed: vec![],
        fit_scope: None,
    }
}

fn pcie(name: &str, description: &str, bw_gbps: f64, hbm_gbps: f64) -> Profile {
    Profile {
        intra: Link {
            kind: "pci".into(),
            hop_lat_us: HW_PCI,
            bw_gbps,
            rate_gbps: Some(PCIE5_X16_RATE_GBPS),
        },
        ll128_default: false,
        p2p: Some(P2pLink::pcie_gen5()),
        ..nvlink(name, description, hbm_gbps)
    }
}

/// Physical rates per direction, GB/s: PCIe 5.0 x16 32 GT/s x 16 lanes, 128b/130b (63.0);
/// PCIe 4.0 x16 half of it, PCIe 3.0 x16 a quarter; NVLink 4 on H100/H200 18 links x 25 GB/s; NDR InfiniBand 400 Gb/s.
pub(crate) const PCIE5_X16_RATE_GBPS: f64 = 63.0;
/// See [`PCIE5_X16_RATE_GBPS`].
pub(crate) const PCIE4_X16_RATE_GBPS: f64 = 31.5;
/// See [`PCIE5_X16_RATE_GBPS`].
pub(crate) const PCIE3_X16_RATE_GBPS: f64 = 15.75;
/// See [`PCIE5_X16_RATE_GBPS`].
pub(crate) const NVLINK4_RATE_GBPS: f64 = 450.0;
/// See [`PCIE5_X16_RATE_GBPS`].
pub(crate) const NDR_RATE_GBPS: f64 = 50.0;

/// PCIe gen5 fitted on public all-reduce times of 8x RTX PRO 6000 Blackwell behind PCIe
/// switches (8 ranks, NCCL, one time per size: 24.6, 24.1, 24.2, 24.5, 24.1, 28.0 us at 256 B,
/// 1 KB, 8 KB, 32 KB, 64 KB, 256 KB; tests/data/public-nccl/S10), with LL's bandwidth at its
/// physical bound: half of PCIe 5.0 x16's 63 GB/s per direction (LL sends 4 flag bytes per 4
/// data bytes), 31.5 GB/s. Time = 1.0 launch + 4.7 base + 14 hops x h + bus bytes / 31.5 GB/s;
/// least squares on log time gives h = 1.19 us (python, a grid over h in 0.001 us steps:
/// errors -9.0, -6.9, -5.7, -1.2, +7.9, +31.9%). An earlier fit let LL move 113 GB/s, more than
/// the link carries, which matched these points to 1.3% and jumped from 28.0 us at 256 KB to
/// 49.8 us at 512 KB where the fitted range ended; at the bound the model rises smoothly and
/// misses 256 KB by +32%: the additive latency + bytes / bandwidth form cannot overlap LL's
/// transfer with its latency as NCCL's pipelined ring does.
pub(crate) const PCIE_GEN5_HOP_LL_US: f64 = 1.19;

/// Extra latency of a step across CPU sockets in `pcie-gen5-dual-socket`: with it the model's
/// 8-rank all-reduce of 32 KB (graph) is the public 48.2 us (NCCL's tuner then prefers the tree,
/// whose chain crosses sockets twice, over the ring, whose steps cross 3.5 times).
pub(crate) const DUAL_SOCKET_EXTRA_HOP_US: f64 = 11.7;

fn pcie_gen5(name: &str, description: &str) -> Profile {
    let mut p = pcie(name, description, 42.0, 1600.0);
    p.intra.hop_lat_us.ring.ll = PCIE_GEN5_HOP_LL_US;
    p.intra.hop_lat_us.tree.ll = PCIE_GEN5_HOP_LL_US;
    p.ll_max_gbps = PCIE5_X16_RATE_GBPS * Proto::Ll.efficiency();
    // LL at the link's bound: min(42 x 0.5, 31.5) would be 21 GB/s, so LL's rate is set apart.
    p.ll_fitted = Some(LlFit {
        gbps: PCIE5_X16_RATE_GBPS * Proto::Ll.efficiency(),
        up_to_bus_bytes: 458_752.0,
    });
    // Fitted at 8 ranks only (the public 8x RTX PRO 6000 points): at other counts it says so.
    p.fitted_rank_counts = Some(vec![8]);
    p
}

/// The NCCL_* variables the cost model expresses (or that change nothing it prices: logging).
pub(crate) const MODELED_NCCL_VARS: &[&str] = &[
    "NCCL_PROTO",
    "NCCL_ALGO",
    "NCCL_P2P_DISABLE",
    "NCCL_SHM_DISABLE",
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_DEBUG_FILE",
];

/// NCCL's network transport within one node (P2P and SHM both off): ring hop latencies set to
/// the measured 2x H200 verify over NET/Socket (15.9 ms Simple / 11.1 ms LL per 124
/// collectives, i.e. ~128 / ~90 us per 43,008 B all-reduce), 10 GB/s.
const HW_NET_LOCAL: PerAlgo = PerAlgo {
    tree: PerProto::new(37.6, 57.0, 57.0),
    ring: PerProto::new(37.6, 57.0, 57.0),
};

/// The path `env` makes NCCL take, priced: NCCL_P2P_DISABLE=1 moves the ranks of one node to
/// the host-memory (SHM) path, with `pcie-gen5-no-p2p`'s link; with NCCL_SHM_DISABLE=1 too, to
/// the network transport. The label says what changed; other profiles' inter-node links stay.
pub(crate) fn apply_transport_env(
    mut p: Profile,
    label: String,
    env: &std::collections::BTreeMap<String, String>,
) -> (Profile, String) {
    let on = |k: &str| env.get(k).is_some_and(|v| v.trim() == "1");
    if !on("NCCL_P2P_DISABLE") {
        return (p, label);
    }
    let (link, what) = if on("NCCL_SHM_DISABLE") {
        (
            Link {
                kind: "net".into(),
                hop_lat_us: HW_NET_LOCAL,
                bw_gbps: 10.0,
                rate_gbps: None,
            },
            "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1: the network transport (hop latency set to the measured 2x H200 NET/Socket run)",
        )
    } else {
        (
            builtin("pcie-gen5-no-p2p").expect("built in").intra,
            "NCCL_P2P_DISABLE=1: the host-memory (SHM) path, pcie-gen5-no-p2p's link",
        )
    };
    p.intra = link;
    p.ll_fitted = None;
    p.ll128_default = false;
    (p, format!("{label} + {what}"))
}

/// Names of the built-in profiles.
pub(crate) const BUILTIN: [&str; 7] = [
    "nvlink-h100",
    "nvlink-h200",
    "pcie-gen4",
    "pcie-gen5",
    "pcie-gen5-no-p2p",
    "ib-ndr",
    "pcie-gen5-dual-socket",
];

/// A built-in profile by name.
pub(crate) fn builtin(name: &str) -> Option<Profile> {
    Some(match name.to_ascii_lowercase().as_str() {
        // NVLink 4: 18 links x 25 GB/s = 450 GB/s per direction; NCCL all-reduce busbw on
        // H100 SXM reaches ~360 GB/s at large sizes. HBM3 3.35 TB/s spec, ~3.0 achieved.
        "nvlink-h100" => nvlink(
            "nvlink-h100",
            "H100 SXM, NVLink 4 (NVSwitch): NCCL 2.2x latency tables, busbw 360 GB/s, HBM ~3.0 TB/s achieved",
            3000.0,
        ),
        // Same NVLink 4 fabric as H100; HBM3e 4.8 TB/s spec, ~4.0 achieved streaming.
        "nvlink-h200" => nvlink(
            "nvlink-h200",
            "H200 SXM, NVLink 4 (NVSwitch): NCCL 2.2x latency tables with LL base and launch costs set to the measured 2x H200 reference (7.2 us graph, 8.4/11 us eager per 43,008 B all-reduce), busbw 360 GB/s, HBM ~4.0 TB/s achieved",
            4000.0,
        ),
        // PCIe 4.0 x16: 31.5 GB/s per direction, ~22 GB/s NCCL ring busbw through a switch
        // (A100/L40 PCIe class). HBM2e A100 PCIe 1.9 TB/s spec, ~1.5 achieved.
        "pcie-gen4" => {
            let mut p = pcie(
                "pcie-gen4",
                "PCIe 4.0 x16 with peer-to-peer (A100 PCIe class): NCCL PCI latency tables, busbw 22 GB/s, LL128 off as NCCL does on PCIe, HBM ~1.5 TB/s achieved",
                22.0,
                1500.0,
            );
            p.p2p = Some(P2pLink::pcie_gen4());
            p.intra.rate_gbps = Some(PCIE4_X16_RATE_GBPS);
            p
        }
        // PCIe 5.0 x16: 63 GB/s per direction, ~42 GB/s NCCL ring busbw through a switch
        // (H100 PCIe / RTX PRO 6000 class). Memory ~1.6 TB/s achieved.
        "pcie-gen5" => pcie_gen5(
            "pcie-gen5",
            "PCIe 5.0 x16 with peer-to-peer behind PCIe switches (H100 PCIe / RTX PRO 6000 class): Ring/LL hop 1.19 us fitted to public all-reduce times of 8x RTX PRO 6000 Blackwell (8 ranks) with LL at its physical bound of 31.5 GB/s (half of 63 GB/s per direction), Simple busbw 42 GB/s, LL128 off as NCCL does on PCIe, memory ~1.6 TB/s achieved",
        ),
        // The same GPUs in a dual-socket host (4 per socket), NCCL without a topology file:
        // the ring steps that cross sockets pay an extra latency, set to the public 48.2 us at
        // 32 KB (8 ranks). With a topology file (NCCL_GRAPH_FILE) the public figure is 26.2 us,
        // which `pcie-gen5` models as 24.2 us (-7.7%).
        "pcie-gen5-dual-socket" => {
            let mut p = pcie_gen5(
                "pcie-gen5-dual-socket",
                "PCIe 5.0 GPUs under two CPU sockets (4 per socket), NCCL without a topology file: pcie-gen5 plus an extra latency per step across sockets, set to the public 8x RTX PRO 6000 Blackwell all-reduce of 48.2 us at 32 KB (modeled 48.2 us; the only public point, error elsewhere unknown). With NCCL_GRAPH_FILE the same host measured 26.2 us: use pcie-gen5 (24.2 us, -7.7%)",
            );
            p.cross_socket = Some(CrossSocket {
                gpus_per_socket: 4,
                extra_hop_us: DUAL_SOCKET_EXTRA_HOP_US,
            });
            p
        }
        // No peer-to-peer (NCCL_P2P_DISABLE=1, or GPUs under different root complexes): NCCL's
        // SHM transport copies through pinned host memory, two PCIe crossings per hop. Hop
        // latency 2.25 us and busbw 20 GB/s reproduce the ~14.5 us per 43,008 B all-reduce
        // measured on 2x H200 with NCCL_P2P_DISABLE=1.
        "pcie-gen5-no-p2p" => {
            let mut p = pcie(
                "pcie-gen5-no-p2p",
                "PCIe 5.0 without peer-to-peer (SHM through host memory): hop latency and busbw set to the measured 2x H200 NCCL_P2P_DISABLE=1 reference (~14.5 us per 43,008 B all-reduce), memory ~1.6 TB/s achieved",
                20.0,
                1600.0,
            );
            p.intra.kind = "shm".into();
            p.p2p = Some(P2pLink::unavailable());
            p.intra.hop_lat_us = PerAlgo {
                tree: PerProto::new(2.25, 3.2, 6.8),
                ring: PerProto::new(2.25, 4.2, 9.7),
            };
            p
        }
        // 8x H100 per node over NVLink, nodes over one 400 Gb/s NDR InfiniBand NIC per GPU:
        // 50 GB/s line rate, ~45 GB/s NCCL busbw. NCCL's NET latency table.
        "ib-ndr" => {
            let mut p = nvlink(
                "ib-ndr",
                "nodes of 8x H100 NVLink, joined by NDR InfiniBand (400 Gb/s per GPU): NCCL NET latency tables, network busbw 45 GB/s",
                3000.0,
            );
            p.inter = Some(Link {
                kind: "net".into(),
                hop_lat_us: HW_NET,
                bw_gbps: 45.0,
                rate_gbps: Some(NDR_RATE_GBPS),
            });
            p.gpus_per_node = Some(8);
            p
        }
        _ => return None,
    })
}

/// The built-in profile `name`, or a usage error that lists the known ones.
pub(crate) fn builtin_or_usage(name: &str) -> anyhow::Result<Profile> {
    builtin(name).ok_or_else(|| {
        usage(format!(
            "unknown link profile '{name}' (known: {}; or a fitted file with --profile FILE)",
            BUILTIN.join(", ")
        ))
    })
}

/// The payload of a profile record (`"kind": "other"`, name [`PROFILE_KIND`]): what
/// `verifybench model fit` writes, inside the record envelope with its provenance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ProfileBody {
    pub(crate) profile: Profile,
    /// How the parameters were fitted.
    #[serde(default)]
    pub(crate) fit: Option<serde_json::Value>,
}

impl ProfileBody {
    /// The profile as a record (source `modeled`: its numbers are the model's parameters).
    pub(crate) fn to_record(&self, provenance: crate::record::Provenance) -> crate::record::Record {
        crate::record::Record::other(
            crate::record::Source::Modeled,
            provenance,
            PROFILE_KIND,
            self,
        )
        .expect("profiles serialize")
    }
}

/// Reads a profile file; a file of another kind or schema version is a usage error. Both forms
/// are read: the record [`ProfileBody::to_record`] writes, and the form `verifybench model fit`
/// wrote before profiles carried the record envelope (committed profiles, hand-written ones:
/// `schema_version`, `kind` and the body's fields side by side).
pub(crate) fn load(path: &Path) -> anyhow::Result<Profile> {
    let text = crate::util::read_text(
        path,
        "profile file",
        "a cost-model profile (`verifybench model fit -o FILE`)",
        crate::util::read::PROFILE,
    )?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        usage(format!(
            "profile file '{}' is not JSON: {e}",
            path.display()
        ))
    })?;
    let body = if crate::record::io::other_name(&v) == Some(PROFILE_KIND) {
        crate::record::io::other_of(v, path, PROFILE_KIND, "profile file")?.1
    } else {
        check_old_form(&v, path)?;
        // The body's fields; `schema_version` and `kind` beside them are ignored.
        v
    };
    let b: ProfileBody = serde_json::from_value(body).map_err(|e| {
        usage(format!(
            "profile file '{}' is not a valid profile: {e}",
            path.display()
        ))
    })?;
    b.profile
        .check()
        .and_then(|()| b.profile.check_bounds())
        .map_err(|e| usage(format!("profile file '{}': {e}", path.display())))?;
    Ok(b.profile)
}

/// The kind and schema version of a profile file of the form before the record envelope.
fn check_old_form(v: &serde_json::Value, path: &Path) -> anyhow::Result<()> {
    if v.get("kind").and_then(|k| k.as_str()) != Some(PROFILE_KIND) {
        return Err(usage(format!(
            "'{}' is not a cost-model profile (no \"kind\": \"{PROFILE_KIND}\"); write one with `verifybench model fit`",
            path.display()
        )));
    }
    match v.get("schema_version").and_then(|x| x.as_u64()) {
        Some(x) if x == PROFILE_SCHEMA_VERSION as u64 => {}
        other => {
            return Err(usage(format!(
                "profile file '{}' has schema_version {}; this verifybench reads version {PROFILE_SCHEMA_VERSION}",
                path.display(),
                other.map(|x| x.to_string()).unwrap_or_else(|| "(none)".into())
            )))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The custom all-reduce column of the public S10 table (size bytes, us), read from the
    /// committed file: `| 32 KB | 16.5 | 24.5 | Custom 1.5x |`.
    fn s10_custom() -> Vec<(f64, f64)> {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/public-nccl/S10_rtx6kpro_luke_3switch_8xRTXPRO6000MaxQ.txt"
        ))
        .unwrap();
        text.lines()
            .filter_map(|l| {
                let c: Vec<&str> = l.split('|').map(str::trim).collect();
                let (n, unit) = c.get(1)?.split_once(' ')?;
                let scale = match unit {
                    "B" => 1.0,
                    "KB" => 1024.0,
                    _ => return None,
                };
                Some((n.parse::<f64>().ok()? * scale, c.get(2)?.parse().ok()?))
            })
            .collect()
    }

    /// Least squares on the relative error of `t = c + k s` over `pts`: (c, k).
    fn fit_line(pts: &[(f64, f64)]) -> (f64, f64) {
        let (mut a, mut b, mut d, mut e, mut f) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for &(s, t) in pts {
            let w = 1.0 / (t * t);
            a += w;
            b += w * s;
            d += w * s * s;
            e += w * t;
            f += w * s * t;
        }
        let det = a * d - b * b;
        ((e * d - b * f) / det, (a * f - b * e) / det)
    }

    /// The P2P constants of pcie-gen5 are the fit of the S10 table (one-shot of 8 ranks, 1.0
    /// us graph node gap + signal + 7 x size / read), and each size predicted with the other
    /// five lies within -6.5% to +10.0% of its measurement.
    #[test]
    fn pcie_gen5_p2p_is_the_fit_of_the_public_custom_allreduce_table() {
        let pts = s10_custom();
        assert_eq!(pts.len(), 6, "{pts:?}");
        assert_eq!(pts[3], (32768.0, 16.5));
        let (c, k) = fit_line(&pts);
        let (signal, read) = (c - 1.0, 7.0 / k / 1000.0);
        assert!((signal - S10_FIT.0).abs() < 1e-4, "{signal}");
        assert!((read - S10_FIT.1).abs() < 1e-3, "{read}");
        let l = P2pLink::pcie_gen5();
        for (i, &(s, t)) in pts.iter().enumerate() {
            let others: Vec<(f64, f64)> = pts
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, p)| *p)
                .collect();
            let (ci, ki) = fit_line(&others);
            let err = (ci + ki * s) / t - 1.0;
            assert!((-0.066..=0.101).contains(&err), "{s} B held out: {err}");
            // the built-in one-shot at this size, within 5% of the table
            let p = 1.0 + l.signal_us + 7.0 * s / (l.read_gbps * 1e3);
            assert!((p / t - 1.0).abs() < 0.05, "{s} B: {p} us against {t}");
        }
    }

    #[test]
    fn every_builtin_is_within_its_physical_bounds() {
        for n in BUILTIN {
            let p = builtin(n).unwrap();
            let b = p.bounds(None);
            // Every built-in knows its link's rate (the SHM path is bounded by PCIe 5.0).
            assert!(b.len() >= 3, "{n}: {b:?}");
            for x in &b {
                assert!(
                    x.holds(),
                    "{n}: {} = {} past its bound {} ({})",
                    x.name,
                    x.value,
                    x.bound,
                    x.why
                );
            }
        }
        // The check can fail: LL at 113 GB/s on PCIe 5.0 x16 (the old pcie-gen5 fit) is past
        // 63 / 2 = 31.5 GB/s.
        let mut p = builtin("pcie-gen5").unwrap();
        p.ll_fitted.as_mut().unwrap().gbps = 113.0;
        let bad: Vec<_> = p.bounds(None).into_iter().filter(|b| !b.holds()).collect();
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert_eq!(
            (bad[0].name.as_str(), bad[0].bound),
            ("LL rate (intra)", 31.5)
        );
        // A hop faster than the measured P2P latency is past its bound too.
        let q = builtin("pcie-gen4").unwrap();
        let low: Vec<_> = q
            .bounds(Some(1.5))
            .into_iter()
            .filter(|b| !b.holds())
            .collect();
        // PCI table: LL hops 1.0 (ring and tree) are below 1.5; LL128 1.9/2.5, Simple 4.0/5.7 not.
        assert_eq!(low.len(), 2, "{low:?}");
    }

    #[test]
    fn every_builtin_is_valid_and_named_as_listed() {
        for n in BUILTIN {
            let p = builtin(n).unwrap();
            assert_eq!(p.name, n);
            p.check().unwrap();
        }
        let e = builtin_or_usage("nvlink-h300").unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("pcie-gen5-no-p2p"));
    }

    /// A profile file of the form before the record envelope.
    #[derive(Serialize)]
    struct ProfileFile {
        schema_version: u32,
        kind: String,
        profile: Profile,
        fit: Option<serde_json::Value>,
    }

    #[test]
    fn file_round_trip_and_wrong_schema() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.json");
        let f = ProfileFile {
            schema_version: PROFILE_SCHEMA_VERSION,
            kind: PROFILE_KIND.into(),
            profile: builtin("pcie-gen5").unwrap(),
            fit: None,
        };
        std::fs::write(&p, serde_json::to_string(&f).unwrap()).unwrap();
        assert_eq!(load(&p).unwrap(), f.profile);
        let mut v = serde_json::to_value(&f).unwrap();
        v["schema_version"] = 7.into();
        std::fs::write(&p, v.to_string()).unwrap();
        let e = load(&p).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("schema_version 7"), "{e}");
        std::fs::write(&p, "{\"schema_version\": 1, \"kind\": \"collective\"}").unwrap();
        assert!(load(&p)
            .unwrap_err()
            .to_string()
            .contains("not a cost-model profile"));
        v["schema_version"] = 1.into();
        v["profile"]["intra"]["bw_gbps"] = (-1.0).into();
        std::fs::write(&p, v.to_string()).unwrap();
        assert!(load(&p).unwrap_err().to_string().contains("bandwidth"));
    }
}
