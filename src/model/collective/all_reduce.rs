//! All-reduce (sum): every rank sends `count` elements and receives the element-wise sum over
//! all ranks.

use super::{CollectiveOps, ElementSource};

pub(crate) struct AllReduce;

impl CollectiveOps for AllReduce {
    fn name(&self) -> &'static str {
        "all_reduce"
    }
    fn nccl_call(&self) -> &'static str {
        "ncclAllReduce"
    }
    fn bus_factor(&self, nranks: usize) -> f64 {
        let n = nranks as f64;
        2.0 * (n - 1.0) / n
    }
    fn source(&self, _count: usize, _nranks: usize, _rank: usize, i: usize) -> ElementSource {
        ElementSource::Sum { elem: i }
    }
    /// A reduce-scatter ring then an all-gather ring; across nodes each half crosses the
    /// network once per node.
    fn ring_steps(&self, nranks: usize, nodes: usize) -> (usize, usize) {
        (2 * (nranks - 1), if nodes > 1 { 2 * nodes } else { 0 })
    }
    /// NCCL's tree all-reduce: busbw x 0.92, algbw = busbw / 2.
    fn tree_bytes(&self, size: f64) -> Option<f64> {
        Some(2.0 * size / 0.92)
    }
}
