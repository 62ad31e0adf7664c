//! All-gather: every rank sends `count` elements and receives every rank's, in rank order
//! (`count x nranks` elements).

use super::{CollectiveOps, ElementSource};

pub(crate) struct AllGather;

impl CollectiveOps for AllGather {
    fn name(&self) -> &'static str {
        "all_gather"
    }
    fn nccl_call(&self) -> &'static str {
        "ncclAllGather"
    }
    fn send_elems(&self, count: usize, _nranks: usize) -> usize {
        count
    }
    fn recv_elems(&self, count: usize, nranks: usize) -> usize {
        count * nranks
    }
    fn count_for_size(&self, size_bytes: u64, elem_bytes: u64, nranks: usize) -> usize {
        (size_bytes / elem_bytes) as usize / nranks
    }
    /// nccl-tests sizes an all-gather by its output.
    fn nccl_size(&self, bytes_per_rank: u64, nranks: u64) -> u64 {
        bytes_per_rank * nranks
    }
    fn bytes_out(&self, bytes_per_rank: u64, nranks: u64) -> u64 {
        bytes_per_rank * nranks
    }
    fn bus_factor(&self, nranks: usize) -> f64 {
        let n = nranks as f64;
        (n - 1.0) / n
    }
    fn source(&self, count: usize, _nranks: usize, _rank: usize, i: usize) -> ElementSource {
        ElementSource::Copy {
            rank: i / count,
            elem: i % count,
        }
    }
    fn ring_steps(&self, nranks: usize, nodes: usize) -> (usize, usize) {
        (nranks - 1, nodes - 1)
    }
    /// NCCL runs all-gather on rings only.
    fn tree_bytes(&self, _size: f64) -> Option<f64> {
        None
    }
}
