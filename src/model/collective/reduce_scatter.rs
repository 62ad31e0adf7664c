//! Reduce-scatter (sum): every rank sends `count x nranks` elements and receives block `rank`
//! (`count` elements) of the element-wise sum over all ranks.

use super::{CollectiveOps, ElementSource};

pub(crate) struct ReduceScatter;

impl CollectiveOps for ReduceScatter {
    fn name(&self) -> &'static str {
        "reduce_scatter"
    }
    fn nccl_call(&self) -> &'static str {
        "ncclReduceScatter"
    }
    fn send_elems(&self, count: usize, nranks: usize) -> usize {
        count * nranks
    }
    fn recv_elems(&self, count: usize, _nranks: usize) -> usize {
        count
    }
    fn count_for_size(&self, size_bytes: u64, elem_bytes: u64, nranks: usize) -> usize {
        (size_bytes / elem_bytes) as usize / nranks
    }
    /// nccl-tests sizes a reduce-scatter by its input, which is what each rank contributes.
    fn nccl_size(&self, bytes_per_rank: u64, _nranks: u64) -> u64 {
        bytes_per_rank
    }
    fn bytes_out(&self, bytes_per_rank: u64, nranks: u64) -> u64 {
        bytes_per_rank / nranks.max(1)
    }
    fn bus_factor(&self, nranks: usize) -> f64 {
        let n = nranks as f64;
        (n - 1.0) / n
    }
    fn source(&self, count: usize, _nranks: usize, rank: usize, i: usize) -> ElementSource {
        ElementSource::Sum {
            elem: rank * count + i,
        }
    }
    fn ring_steps(&self, nranks: usize, nodes: usize) -> (usize, usize) {
        (nranks - 1, nodes - 1)
    }
    /// NCCL runs reduce-scatter on rings only.
    fn tree_bytes(&self, _size: f64) -> Option<f64> {
        None
    }
}
