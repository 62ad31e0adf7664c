//! What a sweep is asked to do: the plain request `cli/sweep.rs` builds from the flags.

use std::path::PathBuf;

use crate::costmodel::ModelSettings;
use crate::record::Mode;
use crate::report::Exports;
use crate::request::{BackendKind, GpuSpec, GraphChoice, Repeat};

/// `sweep`: a cross product of NCCL settings, each point in fresh workers.
#[derive(Debug, Clone)]
pub struct SweepRequest {
    pub workload: crate::request::Workload,
    /// `-L NAME=a,b,c` lists.
    pub lists: Vec<String>,
    /// `--set NAME=VALUE` literal values.
    pub sets: Vec<String>,
    /// A built-in list of variations (`pcie`).
    pub preset: Option<String>,
    pub graph: GraphChoice,
    pub mode: Mode,
    pub backend: BackendKind,
    pub gpu: GpuSpec,
    pub repeat: Repeat,
    pub model: ModelSettings,
    /// Rounds (`--rounds`, >= 1): every round runs every point once, in its own shuffled order.
    pub rounds: usize,
    /// Seed of the rounds' shuffles (recorded in every pair's results line via its round).
    pub seed: u64,
    /// Extra relative margin on top of the measured noise floor (`--noise-margin`, default 0).
    pub noise_margin: f64,
    /// Seconds one child may take before it is killed and the point recorded as failed.
    pub point_timeout: f64,
    pub results: Option<PathBuf>,
    pub resume: Option<PathBuf>,
    pub retry_failed: bool,
    pub log_dir: Option<PathBuf>,
    pub no_probe: bool,
    pub export: Exports,
    pub export_table_markdown: Option<PathBuf>,
    pub export_table_csv: Option<PathBuf>,
    /// What stdout gets at the end: the ranking, or (json) the verify records `--export-json`
    /// writes; with json the header and summary lines go to stderr.
    pub format: crate::output::Format,
    /// No progress, no per-point lines and no notes (the ranking or JSON is still printed).
    pub quiet: bool,
    /// Fake every point in process (no child, no GPU): the mock backend.
    pub debug_mode: bool,
    /// Host gaps and a late rank, passed to every child.
    pub host_gaps: crate::request::HostGapFlags,
}
