//! What one GPU can show of a choice: the whole P2P path at each all-reduce shape of the cycle
//! on N virtual ranks of the one GPU (each rank its own workspace and stream; the real kernels,
//! the exact check of every element before anything is timed, eager and CUDA graph), through
//! [`crate::comm::p2p::virtual_rank_shapes`]. The peers' memory is the GPU's own, so the times
//! say what the kernels and their signalling cost there, not what a link costs: never a P2P
//! measurement, and never part of the decision, which one GPU takes from the cost model.

use serde::{Deserialize, Serialize};

use super::shapes::Shape;
use crate::comm::p2p::Impl;
use crate::model::CollectiveKind;

/// The label every virtual-rank figure carries.
pub(crate) const NOT_P2P: &str =
    "virtual ranks on one GPU: not a P2P measurement (the peers' memory is this GPU's own)";

/// One kernel at one shape on virtual ranks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct VirtualRow {
    /// `oneshot` or `twoshot`.
    pub(crate) imp: String,
    /// Bytes per rank.
    pub(crate) bytes: u64,
    /// Whether every element of every rank's output was the exact sum.
    pub(crate) exact: bool,
    /// What the check saw.
    pub(crate) detail: String,
    /// Us per call, eager (one host thread per rank in lockstep) and from a CUDA graph; none
    /// when the check failed.
    pub(crate) eager_us: Option<f64>,
    pub(crate) graph_us: Option<f64>,
    pub(crate) blocks: Option<u32>,
}

/// The virtual-rank section of a choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct VirtualRanks {
    /// [`NOT_P2P`].
    pub(crate) label: String,
    pub(crate) gpu: usize,
    pub(crate) ranks: usize,
    pub(crate) rows: Vec<VirtualRow>,
}

impl VirtualRanks {
    /// Whether every shape's results were exact.
    pub(crate) fn all_exact(&self) -> bool {
        self.rows.iter().all(|r| r.exact)
    }
}

/// One-shot and two-shot at every all-reduce shape of `shapes` on `ranks` virtual ranks of GPU
/// `gpu`.
pub(crate) fn run(gpu: usize, ranks: usize, shapes: &[Shape]) -> anyhow::Result<VirtualRanks> {
    let ar: Vec<&Shape> = shapes
        .iter()
        .filter(|s| s.kind == CollectiveKind::AllReduce)
        .collect();
    let counts: Vec<usize> = ar.iter().map(|s| s.count as usize).collect();
    let dtype = ar.first().map_or(crate::model::DType::Bf16, |s| s.dtype);
    let got = crate::comm::p2p::virtual_rank_shapes(
        gpu,
        ranks,
        &[Impl::OneShot, Impl::TwoShot],
        &counts,
        dtype,
    )?;
    let rows = got
        .into_iter()
        .map(|s| VirtualRow {
            imp: s.imp.name().into(),
            bytes: s.count as u64 * dtype.size(),
            exact: s.exact.pass,
            detail: s.exact.detail,
            eager_us: s.timing.as_ref().map(|t| t.eager_us),
            graph_us: s.timing.as_ref().map(|t| t.graph_us),
            blocks: s.timing.as_ref().map(|t| t.blocks),
        })
        .collect();
    Ok(VirtualRanks {
        label: NOT_P2P.into(),
        gpu,
        ranks,
        rows,
    })
}
