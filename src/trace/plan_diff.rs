//! The result of `trace --against-plan`: one step of the trace against the config-derived
//! schedule. Plain data, below both the analysis that carries it and [`super::against`], which
//! computes it.

use serde::Serialize;

/// One (op, dtype, bytes) group on either side of the diff.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiffRow {
    pub op: String,
    pub dtype: String,
    pub bytes_per_rank: u64,
    pub plan: usize,
    pub trace: usize,
}

/// The trace's step against the config-derived schedule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanDiff {
    pub plan: String,
    pub plan_collectives: usize,
    pub trace_collectives: usize,
    pub rows: Vec<DiffRow>,
    /// First position where the sequences differ: (index, plan's op, trace's op).
    pub first_difference: Option<(usize, String, String)>,
    pub same: bool,
}
