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
    fn recv_elems(&self, count: usize, nranks: usize) -> usize {
        count * nranks
    }
    /// nccl-tests sizes an all-gather by its output.
    fn nccl_size(&self, bytes_per_rank: u64, nranks: u64) -> u64 {
        bytes_per_rank * nranks
    }
    fn bytes_out(&self, bytes_per_rank: u64, nranks: u64) -> u64 {
        bytes_per_rank * nranks
    }
    fn source(&self, count: usize, _nranks: usize, _rank: usize, i: usize) -> ElementSource {
        ElementSource::Copy {
            rank: i / count,
            elem: i % count,
        }
    }
}
