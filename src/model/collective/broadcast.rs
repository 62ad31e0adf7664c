//! Broadcast from rank 0: every rank receives rank 0's `count` elements. Every rank passes a
//! send buffer of `count` elements (NCCL reads only the root's).
//!
//! nccl-tests sizes it by the message and gives it a bus factor of 1 (`src/broadcast.cu`,
//! `BroadcastGetBw`: "busBw = algBw"): each link of NCCL's ring pipeline carries the whole
//! message once.

use super::{CollectiveOps, ElementSource};

pub(crate) struct Broadcast;

/// The root every broadcast of a schedule uses (PyTorch's `broadcast(src=0)` of a TP group).
pub(crate) const ROOT: usize = 0;

impl CollectiveOps for Broadcast {
    fn name(&self) -> &'static str {
        "broadcast"
    }
    fn nccl_call(&self) -> &'static str {
        "ncclBroadcast"
    }
    fn bus_factor(&self, _nranks: usize) -> f64 {
        1.0
    }
    fn source(&self, _count: usize, _nranks: usize, _rank: usize, i: usize) -> ElementSource {
        ElementSource::Copy {
            rank: ROOT,
            elem: i,
        }
    }
    /// A chain from the root: the message crosses n-1 links, pipelined in chunks.
    fn ring_steps(&self, nranks: usize, nodes: usize) -> (usize, usize) {
        (nranks - 1, nodes - 1)
    }
}
