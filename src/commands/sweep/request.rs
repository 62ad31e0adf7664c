//! What a sweep is asked to do: the plain request `cli/sweep.rs` builds from the flags.

use std::path::PathBuf;

use crate::costmodel::ModelSettings;
use crate::record::Mode;
use crate::report::Exports;
use crate::request::{BackendKind, GpuSpec, GraphChoice, Repeat};

/// `sweep`: a cross product of NCCL settings, each point in fresh workers.
#[derive(Debug, Clone)]
pub(crate) struct SweepRequest {
    pub(crate) workload: crate::request::Workload,
    /// `-L NAME=a,b,c` lists.
    pub(crate) lists: Vec<String>,
    /// `--set NAME=VALUE` literal values.
    pub(crate) sets: Vec<String>,
    /// A built-in list of variations (`pcie`).
    pub(crate) preset: Option<String>,
    pub(crate) graph: GraphChoice,
    pub(crate) mode: Mode,
    pub(crate) backend: BackendKind,
    pub(crate) gpu: GpuSpec,
    pub(crate) repeat: Repeat,
    pub(crate) model: ModelSettings,
    /// Rounds (`--rounds`, >= 1): every round runs every point once, in its own shuffled order.
    pub(crate) rounds: usize,
    /// Seed of the rounds' shuffles (recorded in every pair's results line via its round).
    pub(crate) seed: u64,
    /// Extra relative margin on top of the measured noise floor (`--noise-margin`, default 0).
    pub(crate) noise_margin: f64,
    /// Seconds one child may take before it is killed and the point recorded as failed.
    pub(crate) point_timeout: f64,
    pub(crate) results: Option<PathBuf>,
    pub(crate) resume: Option<PathBuf>,
    pub(crate) retry_failed: bool,
    pub(crate) log_dir: Option<PathBuf>,
    pub(crate) no_probe: bool,
    pub(crate) export: Exports,
    pub(crate) export_table_markdown: Option<PathBuf>,
    pub(crate) export_table_csv: Option<PathBuf>,
    /// What stdout gets at the end: the ranking, or (json) the verify records `--export-json`
    /// writes; with json the header and summary lines go to stderr.
    pub(crate) format: crate::output::Format,
    /// No progress, no per-point lines and no notes (the ranking or JSON is still printed).
    pub(crate) quiet: bool,
    /// Fake every point in process (no child, no GPU): the mock backend.
    pub(crate) debug_mode: bool,
    /// Host gaps and a late rank, passed to every child.
    pub(crate) host_gaps: crate::request::HostGapFlags,
}
