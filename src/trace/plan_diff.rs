//! The result of `trace --against-plan`: one step of the trace against the config-derived
//! schedule. Plain data, below both the analysis that carries it and [`super::against`], which
//! computes it.

use serde::Serialize;

/// One (op, dtype, bytes) group on either side of the diff.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct DiffRow {
    pub(crate) op: String,
    pub(crate) dtype: String,
    pub(crate) bytes_per_rank: u64,
    pub(crate) plan: usize,
    pub(crate) trace: usize,
}

/// The trace's step against the config-derived schedule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct PlanDiff {
    pub(crate) plan: String,
    pub(crate) plan_collectives: usize,
    pub(crate) trace_collectives: usize,
    pub(crate) rows: Vec<DiffRow>,
    /// First position where the sequences differ: (index, plan's op, trace's op).
    pub(crate) first_difference: Option<(usize, String, String)>,
    pub(crate) same: bool,
}
