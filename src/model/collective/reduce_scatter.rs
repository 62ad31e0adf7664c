//! Reduce-scatter (sum): every rank sends `count x nranks` elements and receives block `rank`
//! (`count` elements) of the element-wise sum over all ranks. nccl-tests sizes it by its input,
//! which is what each rank contributes.

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
    fn bytes_out(&self, bytes_per_rank: u64, nranks: u64) -> u64 {
        bytes_per_rank / nranks.max(1)
    }
    fn source(&self, count: usize, _nranks: usize, rank: usize, i: usize) -> ElementSource {
        ElementSource::Sum {
            elem: rank * count + i,
        }
    }
}
