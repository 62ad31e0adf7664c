//! Each collective's knowledge in one place, the way nccl-tests gives every collective one
//! table of functions: element counts of the send and receive buffers, the nccl-tests size and
//! bus-bandwidth factor, where every output element comes from (which the exact-result check
//! turns into expected values), the NCCL entry point, and the cost model's ring and tree terms.
//!
//! One file per collective holds its [`CollectiveOps`]; [`CollectiveKind::ops`] finds it. A new
//! collective is a new file here, its variant of [`CollectiveKind`] with one arm in `ops`, and
//! (NCCL's entry points being unsafe foreign calls) its binding in `comm::nccl`. Everything here
//! is pure: the NCCL backend, the exact check and the cost model all read it, with or without a
//! GPU.

mod all_gather;
mod all_reduce;
mod all_to_all;
pub(crate) mod broadcast;
mod reduce_scatter;

use super::CollectiveKind;

/// Where one element of a rank's receive buffer comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ElementSource {
    /// The sum over all ranks of send element `elem`.
    Sum { elem: usize },
    /// Send element `elem` of rank `rank`, copied.
    Copy { rank: usize, elem: usize },
}

/// One collective's table. `count` is always the element count NCCL's call takes: the
/// all-reduce's count, the all-gather's send count, the reduce-scatter's receive count.
pub(crate) trait CollectiveOps: Sync {
    /// The name records and tables use (`all_reduce`).
    fn name(&self) -> &'static str;
    /// NCCL's function for it (`ncclAllReduce`).
    fn nccl_call(&self) -> &'static str;
    /// Elements of each rank's send buffer: `count` unless the collective says otherwise.
    fn send_elems(&self, count: usize, _nranks: usize) -> usize {
        count
    }
    /// Elements of each rank's receive buffer: `count` unless the collective says otherwise.
    fn recv_elems(&self, count: usize, _nranks: usize) -> usize {
        count
    }
    /// NCCL's `count` for an operation of nccl-tests size `size_bytes` (rounded down): the
    /// nccl-tests size is the larger buffer, which holds `count` or `count x nranks` elements.
    fn count_for_size(&self, size_bytes: u64, elem_bytes: u64, nranks: usize) -> usize {
        let per_count = self.send_elems(1, nranks).max(self.recv_elems(1, nranks));
        (size_bytes / elem_bytes) as usize / per_count
    }
    /// nccl-tests size (the larger buffer) of an operation in which each rank contributes
    /// `bytes_per_rank` bytes: those bytes unless the collective says otherwise.
    fn nccl_size(&self, bytes_per_rank: u64, _nranks: u64) -> u64 {
        bytes_per_rank
    }
    /// Bytes each rank holds afterwards when each contributed `bytes_per_rank`: as many unless
    /// the collective says otherwise.
    fn bytes_out(&self, bytes_per_rank: u64, _nranks: u64) -> u64 {
        bytes_per_rank
    }
    /// nccl-tests' bus-bandwidth factor: busbw = algbw x factor; (n-1)/n unless the
    /// collective says otherwise.
    fn bus_factor(&self, nranks: usize) -> f64 {
        let n = nranks as f64;
        (n - 1.0) / n
    }
    /// Where receive element `i` of `rank` comes from.
    fn source(&self, count: usize, nranks: usize, rank: usize, i: usize) -> ElementSource;
    /// Steps a ring takes (total, of which over the network) on `nranks` ranks over `nodes`
    /// nodes: one pass round the ring, n-1 links of which nodes-1 cross the network, unless the
    /// collective says otherwise.
    fn ring_steps(&self, nranks: usize, nodes: usize) -> (usize, usize) {
        (nranks - 1, nodes - 1)
    }
    /// Bytes each rank moves over its slowest link in a ring for nccl-tests size `size`: the
    /// bus factor's definition.
    fn ring_bytes(&self, size: f64, nranks: usize) -> f64 {
        self.bus_factor(nranks) * size
    }
    /// Bytes a tree moves for nccl-tests size `size`, or `None` where NCCL has no tree for this
    /// collective: NCCL runs all but the all-reduce on rings only (`src/enqueue.cc` has no tree
    /// for the broadcast).
    fn tree_bytes(&self, _size: f64) -> Option<f64> {
        None
    }
}

impl CollectiveKind {
    /// Every collective, in the order tables list them.
    pub(crate) const ALL: [CollectiveKind; 5] = [
        CollectiveKind::AllReduce,
        CollectiveKind::AllGather,
        CollectiveKind::ReduceScatter,
        CollectiveKind::Broadcast,
        CollectiveKind::AllToAll,
    ];

    /// This collective's table.
    pub(crate) fn ops(self) -> &'static dyn CollectiveOps {
        match self {
            CollectiveKind::AllReduce => &all_reduce::AllReduce,
            CollectiveKind::AllGather => &all_gather::AllGather,
            CollectiveKind::ReduceScatter => &reduce_scatter::ReduceScatter,
            CollectiveKind::Broadcast => &broadcast::Broadcast,
            CollectiveKind::AllToAll => &all_to_all::AllToAll,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every receive element's source lies inside the send buffers, for each collective.
    #[test]
    fn sources_lie_inside_the_send_buffers() {
        for kind in CollectiveKind::ALL {
            let ops = kind.ops();
            for n in [2, 3, 8] {
                let count = 5;
                let send = ops.send_elems(count, n);
                for rank in 0..n {
                    for i in 0..ops.recv_elems(count, n) {
                        match ops.source(count, n, rank, i) {
                            ElementSource::Sum { elem } => assert!(elem < send, "{kind:?}"),
                            ElementSource::Copy { rank: r, elem } => {
                                assert!(r < n && elem < send, "{kind:?}")
                            }
                        }
                    }
                }
            }
        }
    }

    /// Every send element of every rank reaches some output (nothing NCCL moves goes
    /// unchecked): all-gather's and all-to-all's copies cover every (rank, element) once, the
    /// reductions every element; a broadcast moves the root's elements only.
    #[test]
    fn every_send_element_is_checked_somewhere() {
        for kind in CollectiveKind::ALL {
            let ops = kind.ops();
            let (n, count) = (4, 3);
            let mut seen = std::collections::BTreeSet::new();
            for rank in 0..n {
                for i in 0..ops.recv_elems(count, n) {
                    match ops.source(count, n, rank, i) {
                        ElementSource::Sum { elem } => {
                            for r in 0..n {
                                seen.insert((r, elem));
                            }
                        }
                        ElementSource::Copy { rank: r, elem } => {
                            seen.insert((r, elem));
                        }
                    }
                }
            }
            let senders = if kind == CollectiveKind::Broadcast {
                1
            } else {
                n
            };
            assert_eq!(seen.len(), senders * ops.send_elems(count, n), "{kind:?}");
        }
    }

    #[test]
    fn sizes_counts_and_factors_agree_with_nccl_tests() {
        let (ar, ag, rs) = (
            CollectiveKind::AllReduce.ops(),
            CollectiveKind::AllGather.ops(),
            CollectiveKind::ReduceScatter.ops(),
        );
        // 8 ranks, bf16: 43,008 B all-reduce is 21,504 elements in and out
        assert_eq!(ar.count_for_size(43008, 2, 8), 21504);
        assert_eq!(
            (ar.send_elems(21504, 8), ar.recv_elems(21504, 8)),
            (21504, 21504)
        );
        // an all-gather of nccl-tests size 983,040 B sends 61,440 elements per rank
        assert_eq!(ag.count_for_size(983040, 2, 8), 61440);
        assert_eq!(ag.recv_elems(61440, 8), 491520);
        assert_eq!(ag.nccl_size(122880, 8), 983040);
        assert_eq!(rs.send_elems(10, 8), 80);
        assert_eq!(rs.bytes_out(160, 8), 20);
        assert_eq!(ar.bus_factor(8), 1.75);
        assert_eq!(ag.bus_factor(8), 0.875);
        assert_eq!(rs.bus_factor(8), 0.875);
        assert_eq!(ar.ring_steps(8, 1), (14, 0));
        assert_eq!(ag.ring_steps(8, 1), (7, 0));
        assert_eq!(ar.ring_steps(16, 2), (30, 4));
        assert!(ar.tree_bytes(1.0).is_some());
        assert!(ag.tree_bytes(1.0).is_none() && rs.tree_bytes(1.0).is_none());
        // nccl-tests' broadcast.cu: size = the message, busbw = algbw; alltoall.cu: count =
        // size / nranks per peer, size = the whole send buffer, busbw = algbw x (n-1)/n
        let (bc, a2a) = (
            CollectiveKind::Broadcast.ops(),
            CollectiveKind::AllToAll.ops(),
        );
        assert_eq!(bc.count_for_size(43008, 2, 8), 21504);
        assert_eq!((bc.send_elems(7, 8), bc.recv_elems(7, 8)), (7, 7));
        assert_eq!((bc.nccl_size(100, 8), bc.bytes_out(100, 8)), (100, 100));
        assert_eq!(bc.bus_factor(8), 1.0);
        assert_eq!(bc.ring_steps(8, 1), (7, 0));
        // 1 MiB of bf16 over 8 ranks: 65,536 elements to each peer
        assert_eq!(a2a.count_for_size(1 << 20, 2, 8), 65536);
        assert_eq!(
            (a2a.send_elems(65536, 8), a2a.recv_elems(65536, 8)),
            (524288, 524288)
        );
        assert_eq!(a2a.nccl_size(131072, 8), 1 << 20);
        assert_eq!(a2a.bus_factor(8), 0.875);
        // rank 2 receives in block 5 what rank 5 sent to it: rank 5's block 2
        assert_eq!(
            a2a.source(10, 8, 2, 53),
            ElementSource::Copy { rank: 5, elem: 23 }
        );
        assert_eq!(
            bc.source(10, 8, 6, 4),
            ElementSource::Copy { rank: 0, elem: 4 }
        );
        assert!(bc.tree_bytes(1.0).is_none() && a2a.tree_bytes(1.0).is_none());
        for k in CollectiveKind::ALL {
            assert_eq!(k.ops().name(), k.name());
            assert_eq!(k.ops().name().parse::<CollectiveKind>(), Ok(k));
        }
    }
}
