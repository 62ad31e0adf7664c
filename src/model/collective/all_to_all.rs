//! All-to-all: every rank sends block `p` (`count` elements) of its `count x nranks` send
//! buffer to rank `p`, and receives in block `p` of its receive buffer what rank `p` sent it.
//!
//! NCCL has no all-to-all call: PyTorch's `all_to_all_single` (ProcessGroupNCCL) and
//! nccl-tests' `src/alltoall.cu` both issue, inside `ncclGroupStart`/`ncclGroupEnd`, one
//! `ncclSend` and one `ncclRecv` of `count` elements per peer, which NCCL fuses into one
//! `SendRecv` kernel. `count` here is that per-peer count, as in nccl-tests; nccl-tests sizes
//! the operation by the whole send buffer and gives it a bus factor of (n-1)/n
//! (`AlltoAllGetBw`): the block a rank keeps for itself crosses no link.

use super::{CollectiveOps, ElementSource};

pub(crate) struct AllToAll;

impl CollectiveOps for AllToAll {
    fn name(&self) -> &'static str {
        "all_to_all"
    }
    /// The grouped point-to-point calls that make it.
    fn nccl_call(&self) -> &'static str {
        "ncclSend/ncclRecv"
    }
    fn send_elems(&self, count: usize, nranks: usize) -> usize {
        count * nranks
    }
    fn recv_elems(&self, count: usize, nranks: usize) -> usize {
        count * nranks
    }
    /// nccl-tests sizes an all-to-all by a rank's whole send buffer.
    fn nccl_size(&self, bytes_per_rank: u64, nranks: u64) -> u64 {
        bytes_per_rank * nranks
    }
    fn bytes_out(&self, bytes_per_rank: u64, nranks: u64) -> u64 {
        bytes_per_rank * nranks
    }
    fn source(&self, count: usize, _nranks: usize, rank: usize, i: usize) -> ElementSource {
        ElementSource::Copy {
            rank: i / count,
            elem: rank * count + i % count,
        }
    }
    /// n-1 point-to-point transfers, all in flight at once: one step's latency per peer
    /// message, which the cost model serialises per rank (see `costmodel::predict`).
    fn ring_steps(&self, nranks: usize, nodes: usize) -> (usize, usize) {
        (nranks - 1, nodes - 1)
    }
}
