//! The latency-bandwidth model of one collective, in the style of NCCL's tuner
//! (`ncclTopoTuneModel`): time = base latency + steps x per-hop latency + bytes / bandwidth,
//! for every (algorithm, protocol) NCCL may use; the fastest allowed pair wins, as in NCCL.

use std::collections::BTreeSet;

use super::profile::{Algo, Profile, Proto};
use crate::error::usage;
use crate::model::CollectiveKind;
use crate::request::Launcher;

/// What `NCCL_ALGO`/`NCCL_PROTO` (or `--algo`/`--proto`) allow, per collective.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Force {
    /// Allowed protocols per collective; `None`: NCCL's default set.
    proto: Vec<(Option<CollectiveKind>, BTreeSet<Proto>)>,
    algo: Vec<(Option<CollectiveKind>, BTreeSet<Algo>)>,
}

fn func_of(s: &str) -> Option<CollectiveKind> {
    s.parse::<CollectiveKind>().ok()
}

/// Parses NCCL's list syntax ([`crate::nccl_list`]): `LL,LL128`, `^LL128` (all but), and per
/// collective `simple;allreduce:ll,ll128` (a part without `func:` applies to every collective).
fn parse_list<T: Copy + Ord>(
    flag: &str,
    s: &str,
    all: &[T],
    one: impl Fn(&str) -> Option<T>,
    known: &str,
) -> anyhow::Result<Vec<(Option<CollectiveKind>, BTreeSet<T>)>> {
    let mut out = vec![];
    for entry in crate::nccl_list::entries(s) {
        let func = match entry.func {
            Some(f) => Some(func_of(f.trim()).ok_or_else(|| {
                usage(format!(
                    "{flag} '{s}': unknown collective '{f}' (use allreduce, allgather or reducescatter)"
                ))
            })?),
            None => None,
        };
        let neg = entry.negate;
        let mut named = BTreeSet::new();
        for item in entry.items {
            named.insert(one(item).ok_or_else(|| {
                usage(format!(
                    "{flag} '{s}': unknown value '{item}' (the cost model knows {known})"
                ))
            })?);
        }
        let set: BTreeSet<T> = if neg {
            all.iter().copied().filter(|x| !named.contains(x)).collect()
        } else {
            named
        };
        if set.is_empty() {
            crate::usage_bail!("{flag} '{s}' leaves nothing to choose from");
        }
        out.push((func, set));
    }
    Ok(out)
}

impl Force {
    /// From `--proto`/`--algo` values in NCCL's syntax; `None` or empty: no restriction.
    pub(crate) fn parse(proto: Option<&str>, algo: Option<&str>) -> anyhow::Result<Force> {
        Force::parse_named(proto, "--proto", algo, "--algo")
    }

    /// [`Force::parse`] with the names messages give each value's origin (a flag, or the
    /// environment variable it came from).
    pub(crate) fn parse_named(
        proto: Option<&str>,
        proto_origin: &str,
        algo: Option<&str>,
        algo_origin: &str,
    ) -> anyhow::Result<Force> {
        Ok(Force {
            proto: match proto {
                Some(s) => parse_list(
                    proto_origin,
                    s,
                    &Proto::ALL,
                    Proto::parse,
                    "LL, LL128, Simple",
                )?,
                None => vec![],
            },
            algo: match algo {
                Some(s) => parse_list(algo_origin, s, &Algo::ALL, Algo::parse, "Ring and Tree")?,
                None => vec![],
            },
        })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.proto.is_empty() && self.algo.is_empty()
    }

    /// The set for `op`: a per-collective entry wins over a general one; later entries win.
    fn pick<T: Clone>(
        v: &[(Option<CollectiveKind>, BTreeSet<T>)],
        op: CollectiveKind,
    ) -> Option<BTreeSet<T>> {
        v.iter()
            .rev()
            .find(|(f, _)| *f == Some(op))
            .or_else(|| v.iter().rev().find(|(f, _)| f.is_none()))
            .map(|(_, s)| s.clone())
    }

    fn protos(&self, op: CollectiveKind) -> Option<BTreeSet<Proto>> {
        Self::pick(&self.proto, op)
    }

    fn algos(&self, op: CollectiveKind) -> Option<BTreeSet<Algo>> {
        Self::pick(&self.algo, op)
    }
}

/// nccl-tests size of a collective op: the larger buffer (all-gather: the output).
pub(crate) fn nccl_size(kind: CollectiveKind, bytes_per_rank: u64, n: usize) -> u64 {
    kind.ops().nccl_size(bytes_per_rank, n as u64)
}

/// The nccl-tests size of each of a schedule's collective groups, in their order.
pub(crate) fn group_sizes(
    groups: &[crate::model::schedule::CollectiveGroup],
    n: usize,
) -> Vec<u64> {
    groups
        .iter()
        .map(|g| nccl_size(g.kind, g.bytes_per_rank, n))
        .collect()
}

/// How the ranks split over nodes.
pub(crate) fn nodes(p: &Profile, n: usize) -> (usize, usize) {
    match (p.gpus_per_node, &p.inter) {
        (Some(g), Some(_)) if n > g => {
            let nodes = n.div_ceil(g);
            (nodes, n.div_ceil(nodes))
        }
        _ => (1, n),
    }
}

/// Steps a ring takes (total, of which over the network) for `op` on `n` ranks.
pub(crate) fn ring_steps(op: CollectiveKind, n: usize, nodes: usize) -> (usize, usize) {
    op.ops().ring_steps(n, nodes)
}

/// Device time (us) of one `op` of nccl-tests size `size` bytes on `n` ranks with `algo` and
/// `proto`, or `None` when NCCL has no such algorithm for the collective (tree: all-reduce only).
///
/// Every collective is priced from its table ([`crate::model::collective`]): latency = base +
/// ring steps x hop, bytes = bus factor x size over the slowest link. What that means for the
/// two that are not reductions or gathers:
/// - broadcast: a pipeline along the ring from the root, n-1 hops of latency (the last rank
///   waits for the first chunk to cross every link), the whole message once over each link
///   (bus factor 1); ring only, as in NCCL.
/// - all-to-all: n-1 point-to-point transfers per rank (NCCL's grouped send/recv), each paying
///   one hop of latency in turn, their (n-1)/n of the send buffer sharing the rank's link; the
///   same protocol rules as a ring. This over-prices the latency where NCCL overlaps peers on
///   separate channels, which the calibration of a real machine would show.
pub(crate) fn device_us(
    p: &Profile,
    op: CollectiveKind,
    size: u64,
    n: usize,
    algo: Algo,
    proto: Proto,
) -> Option<f64> {
    // Plain matches rather than closures and Option adaptors: every fit step prices every
    // point through here, and test builds run it unoptimised.
    let (nn, per_node) = nodes(p, n);
    let net = match &p.inter {
        Some(l) if nn > 1 => Some(l),
        _ => None,
    };
    let intra_hop = p.intra.hop_lat_us.get(algo, proto);
    let net_hop = match net {
        Some(l) => l.hop_lat_us.get(algo, proto),
        None => 0.0,
    };
    let base = p.base_lat_us.get(algo, proto);
    let link_bw = match net {
        Some(l) => l.bw_gbps.min(p.intra.bw_gbps),
        None => p.intra.bw_gbps,
    };
    let mut bw = link_bw * proto.efficiency();
    if proto == Proto::Ll {
        bw = bw.min(p.ll_max_gbps);
    }
    // Steps between CPU sockets: a ring of n ranks crosses `sockets` of its n edges; the tree's
    // chain crosses sockets - 1 times, up and down.
    let sockets = match p.cross_socket {
        Some(c) if c.gpus_per_socket > 0 && per_node > c.gpus_per_socket => {
            Some((per_node.div_ceil(c.gpus_per_socket), c.extra_hop_us))
        }
        _ => None,
    };
    let ops = op.ops();
    let size = size as f64;
    let (lat, bytes) = match algo {
        Algo::Ring => {
            let (steps, inter) = ops.ring_steps(n, nn);
            let mut lat = base + (steps - inter) as f64 * intra_hop + inter as f64 * net_hop;
            if let Some((s, extra)) = sockets {
                lat += (steps - inter) as f64 * s as f64 / per_node as f64 * extra;
            }
            (lat, ops.ring_bytes(size, n))
        }
        Algo::Tree => {
            let bytes = ops.tree_bytes(size)?;
            // Within a node NCCL's tree is a chain; between nodes a binary tree; up and down.
            let mut lat =
                base + 2.0 * ((per_node - 1) as f64 * intra_hop + (nn as f64).log2() * net_hop);
            if let Some((s, extra)) = sockets {
                lat += 2.0 * (s - 1) as f64 * extra;
            }
            (lat, bytes)
        }
    };
    // LL fitted on small messages (one node): its first bus bytes move faster.
    let transfer = match p.ll_fitted {
        Some(f) if proto == Proto::Ll && net.is_none() => {
            let fast = bytes.min(f.up_to_bus_bytes);
            fast / (f.gbps * 1e3) + (bytes - fast) / (bw * 1e3)
        }
        _ => bytes / (bw * 1e3),
    };
    Some(lat + transfer)
}

/// The (algorithm, protocol) NCCL would use for `op` under `force`, and its device time.
pub(crate) fn choose(
    p: &Profile,
    op: CollectiveKind,
    size: u64,
    n: usize,
    force: &Force,
) -> anyhow::Result<(Algo, Proto, f64)> {
    if force.is_empty() {
        if let Some(proto) = p.observed_proto(op, size, n) {
            if let Some(t) = device_us(p, op, size, n, Algo::Ring, proto) {
                return Ok((Algo::Ring, proto, t));
            }
        }
    }
    let protos: BTreeSet<Proto> = force.protos(op).unwrap_or_else(|| {
        Proto::ALL
            .into_iter()
            .filter(|&x| x != Proto::Ll128 || p.ll128_default)
            .collect()
    });
    let algos: BTreeSet<Algo> = force
        .algos(op)
        .unwrap_or_else(|| Algo::ALL.into_iter().collect());
    let mut best: Option<(Algo, Proto, f64)> = None;
    for &a in &algos {
        for &pr in &protos {
            if let Some(t) = device_us(p, op, size, n, a, pr) {
                if best.map(|b| t < b.2).unwrap_or(true) {
                    best = Some((a, pr, t));
                }
            }
        }
    }
    best.ok_or_else(|| {
        usage(format!(
            "--algo (or NCCL_ALGO) allows no algorithm NCCL has for {} (all-gather, reduce-scatter, broadcast and all-to-all run Ring only)",
            op.name()
        ))
    })
}

/// Where one operation's time goes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct OpTime {
    pub(crate) algo: Algo,
    pub(crate) proto: Proto,
    pub(crate) device_us: f64,
    pub(crate) launch_us: f64,
}

impl OpTime {
    pub(crate) fn total(&self) -> f64 {
        self.device_us + self.launch_us
    }
}

/// One collective as the application sees it: device time plus the launch cost of the mode.
pub(crate) fn op_time(
    p: &Profile,
    op: CollectiveKind,
    size: u64,
    n: usize,
    graph: bool,
    launcher: Launcher,
    force: &Force,
) -> anyhow::Result<OpTime> {
    if n < 2 {
        crate::usage_bail!(
            "a collective needs at least 2 ranks (got {n}); use --gpus/--tp 2 or more"
        );
    }
    let (algo, proto, device_us) = choose(p, op, size, n, force)?;
    Ok(OpTime {
        algo,
        proto,
        device_us,
        launch_us: if graph {
            p.launch_graph_us
        } else {
            p.launch_eager_us.get(launcher)
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::costmodel::profile::builtin;

    const AR: CollectiveKind = CollectiveKind::AllReduce;

    #[test]
    fn h200_reference_is_reproduced() {
        let p = builtin("nvlink-h200").unwrap();
        let f = Force::default();
        let g = op_time(&p, AR, 43008, 2, true, Launcher::Threads, &f).unwrap();
        assert_eq!((g.algo, g.proto), (Algo::Ring, Proto::Ll));
        assert!((7.0..=7.4).contains(&g.total()), "{}", g.total());
        let t = op_time(&p, AR, 43008, 2, false, Launcher::Threads, &f).unwrap();
        assert!((t.total() - 8.4).abs() < 0.2, "{}", t.total());
        let pr = op_time(&p, AR, 43008, 2, false, Launcher::Processes, &f).unwrap();
        assert!((pr.total() - 11.0).abs() < 0.3, "{}", pr.total());
        let shm = builtin("pcie-gen5-no-p2p").unwrap();
        let s = op_time(&shm, AR, 43008, 2, true, Launcher::Threads, &f).unwrap();
        assert!((14.0..=15.0).contains(&s.total()), "{}", s.total());
    }

    #[test]
    fn steps_and_bytes_follow_the_algorithm() {
        assert_eq!(ring_steps(AR, 8, 1), (14, 0));
        assert_eq!(ring_steps(CollectiveKind::AllGather, 8, 1), (7, 0));
        let p = builtin("pcie-gen4").unwrap();
        // Latency grows with ranks; a larger message takes longer.
        let t2 = device_us(&p, AR, 43008, 2, Algo::Ring, Proto::Ll).unwrap();
        let t8 = device_us(&p, AR, 43008, 8, Algo::Ring, Proto::Ll).unwrap();
        assert!((t8 - t2 - 12.0 * 1.0 - 43008.0 * (1.75 - 1.0) / 11e3).abs() < 1e-9);
        // Pure bandwidth term: 1 MiB more of Simple costs size x 2(n-1)/n / bw.
        let a = device_us(&p, AR, 1 << 20, 8, Algo::Ring, Proto::Simple).unwrap();
        let b = device_us(&p, AR, 2 << 20, 8, Algo::Ring, Proto::Simple).unwrap();
        assert!((b - a - (1u64 << 20) as f64 * 1.75 / 22e3).abs() < 1e-9);
        assert!(device_us(&p, CollectiveKind::AllGather, 8, 8, Algo::Tree, Proto::Ll).is_none());
    }

    #[test]
    fn broadcast_is_a_ring_pipeline_and_all_to_all_n_minus_1_transfers() {
        let p = builtin("pcie-gen4").unwrap();
        let (bc, a2a) = (CollectiveKind::Broadcast, CollectiveKind::AllToAll);
        // broadcast: 8 ranks against 2 add 6 hops of 1.0 us; the bytes (the whole message,
        // bus factor 1) do not change with the ranks
        let t2 = device_us(&p, bc, 43008, 2, Algo::Ring, Proto::Ll).unwrap();
        let t8 = device_us(&p, bc, 43008, 8, Algo::Ring, Proto::Ll).unwrap();
        assert!((t8 - t2 - 6.0).abs() < 1e-9, "{t8} {t2}");
        // 1 MiB more of Simple costs 1 MiB / 22 GB/s
        let a = device_us(&p, bc, 1 << 20, 8, Algo::Ring, Proto::Simple).unwrap();
        let b = device_us(&p, bc, 2 << 20, 8, Algo::Ring, Proto::Simple).unwrap();
        assert!((b - a - (1u64 << 20) as f64 / 22e3).abs() < 1e-9);
        // all-to-all: 7 transfers against 1 (6 hops), 7/8 of the send buffer against 1/2 over
        // the link at LL's 11 GB/s
        let t2 = device_us(&p, a2a, 43008, 2, Algo::Ring, Proto::Ll).unwrap();
        let t8 = device_us(&p, a2a, 43008, 8, Algo::Ring, Proto::Ll).unwrap();
        let hand = 6.0 + 43008.0 * (7.0 / 8.0 - 1.0 / 2.0) / 11e3;
        assert!((t8 - t2 - hand).abs() < 1e-9, "{}", t8 - t2);
        // neither has a tree: NCCL runs both on rings / point-to-point only
        let f = Force::parse(None, Some("tree")).unwrap();
        assert!(choose(&p, bc, 8192, 8, &f).is_err() && choose(&p, a2a, 8192, 8, &f).is_err());
    }

    #[test]
    fn pcie_gen5_is_priced_at_its_physical_bound() {
        let f = Force::default();
        let t = |name: &str, size: u64| {
            let p = builtin(name).unwrap();
            op_time(&p, AR, size, 8, true, Launcher::Threads, &f)
                .unwrap()
                .total()
        };
        // By hand, 8 ranks, graph, Ring/LL: 1.0 launch + 4.7 base + 14 x 1.19 hop = 22.36 us,
        // plus bus bytes (size x 2 x 7/8) at 31.5 GB/s up to 458,752 bus bytes, beyond at
        // min(42 x 0.5, 31.5) = 21 GB/s:
        // 256 B: 22.36 + 448 / 31.5e3 = 22.374; 32 KB: 22.36 + 57344 / 31.5e3 = 24.180;
        // 256 KB: 22.36 + 14.564 = 36.924; 512 KB: 36.924 + 458752 / 21e3 = 58.769.
        for (size, hand) in [
            (256, 22.374),
            (32768, 24.180),
            (262144, 36.924),
            (524288, 58.769),
        ] {
            let m = t("pcie-gen5", size);
            assert!((m - hand).abs() < 0.002, "{size} B: {m} vs {hand}");
        }
        // Dual socket without a topology file, Tree/LL at 32 KB: 1.0 + 4.9 + 2 x 7 x 1.19 +
        // 2 x 32768 / 0.92 / 31.5e3 + 2 x 11.7 = 48.22 us (the public 48.2 us).
        let d = t("pcie-gen5-dual-socket", 32768);
        assert!((d - 48.22).abs() < 0.01, "{d}");
        // two ranks under one socket pay no crossing
        let p = builtin("pcie-gen5-dual-socket").unwrap();
        let q = builtin("pcie-gen5").unwrap();
        let two = |p: &Profile| device_us(p, AR, 43008, 2, Algo::Ring, Proto::Ll).unwrap();
        assert_eq!(two(&p), two(&q));
    }

    #[test]
    fn nccl_picks_ll_small_and_simple_large() {
        let p = builtin("pcie-gen5").unwrap();
        let f = Force::default();
        assert_eq!(choose(&p, AR, 8192, 8, &f).unwrap().1, Proto::Ll);
        assert_eq!(choose(&p, AR, 64 << 20, 8, &f).unwrap().1, Proto::Simple);
        // LL128 is off by default on PCIe, on by default on NVLink.
        let nv = builtin("nvlink-h100").unwrap();
        assert_eq!(choose(&nv, AR, 4 << 20, 8, &f).unwrap().1, Proto::Ll128);
    }

    #[test]
    fn multi_node_uses_the_network() {
        let p = builtin("ib-ndr").unwrap();
        let one = device_us(&p, AR, 1 << 20, 8, Algo::Ring, Proto::Simple).unwrap();
        let two = device_us(&p, AR, 1 << 20, 16, Algo::Ring, Proto::Simple).unwrap();
        assert!(two > 3.0 * one, "{one} {two}");
        // Across nodes the tree's log2 latency wins for small messages at many nodes.
        let ring = device_us(&p, AR, 8192, 64, Algo::Ring, Proto::Ll).unwrap();
        let tree = device_us(&p, AR, 8192, 64, Algo::Tree, Proto::Ll).unwrap();
        assert!(tree < ring);
    }

    #[test]
    fn force_syntax_like_nccl() {
        let f = Force::parse(Some("LL128"), None).unwrap();
        let p = builtin("pcie-gen5").unwrap();
        assert_eq!(choose(&p, AR, 8192, 8, &f).unwrap().1, Proto::Ll128);
        // As in NCCL, "^LL" enables every other protocol explicitly, LL128 included on PCIe.
        let f = Force::parse(Some("^LL"), None).unwrap();
        assert_eq!(choose(&p, AR, 8192, 8, &f).unwrap().1, Proto::Ll128);
        let f = Force::parse(Some("^LL,LL128"), None).unwrap();
        assert_eq!(choose(&p, AR, 8192, 8, &f).unwrap().1, Proto::Simple);
        let f = Force::parse(None, Some("ring;allreduce:tree")).unwrap();
        assert_eq!(choose(&p, AR, 8192, 8, &f).unwrap().0, Algo::Tree);
        let ag = CollectiveKind::AllGather;
        assert_eq!(choose(&p, ag, 8192, 8, &f).unwrap().0, Algo::Ring);
        // All-gather has no tree: forcing only tree is an error, not a silent ring.
        let f = Force::parse(None, Some("tree")).unwrap();
        assert!(choose(&p, ag, 8192, 8, &f).is_err());
        for bad in ["LL256", "allreduce:", "^LL,LL128,Simple", "bcast:LL"] {
            let e = Force::parse(Some(bad), None).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{bad}");
        }
        assert!(Force::parse(None, Some("nvls")).is_err());
    }

    #[test]
    fn one_rank_is_refused() {
        let p = builtin("pcie-gen5").unwrap();
        let e = op_time(&p, AR, 8192, 1, true, Launcher::Threads, &Force::default()).unwrap_err();
        assert!(e.to_string().contains("at least 2 ranks"));
        assert_eq!(crate::error::exit_code(&e), 2);
    }
}
