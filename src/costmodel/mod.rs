//! The cost model: `--backend model` of `collective`, `verify` and `sweep`, and the automatic
//! fallback when fewer than two GPUs are present. Every number it produces is labelled modeled.

use std::path::PathBuf;

use crate::cli::args::Launcher;
use crate::model::{CollectiveKind, DType, Schedule};
use crate::report::record::{CollectiveResult, Mode, VerifyResult};

/// Flags of the cost model.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// Link profile the cost model assumes (`--backend model`), e.g. nvlink-h200, pcie-gen5.
    #[arg(long, default_value = "nvlink-h200")]
    pub link: String,
    /// Calibrated profile file written by `verifybench model fit` (overrides --link).
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
}

/// A modeled result and where its parameters came from.
#[derive(Debug, Clone)]
pub struct Modeled<T> {
    pub result: T,
    /// Name of the profile (built-in link profile or file) the numbers came from.
    pub profile: String,
    /// Assumptions worth printing next to the numbers.
    pub notes: Vec<String>,
}

/// Predicts a verify replay of `schedule` on `nranks` ranks, one run per (graph, mode).
pub fn verify(
    _schedule: &Schedule,
    _nranks: usize,
    _runs: &[(bool, Mode)],
    _launcher: Launcher,
    _m: &ModelArgs,
) -> anyhow::Result<Modeled<VerifyResult>> {
    anyhow::bail!("the cost model is not built yet")
}

/// Predicts one collective over `sizes` (nccl-tests "size" in bytes) for each graph flag.
pub fn collective(
    _op: CollectiveKind,
    _dtype: DType,
    _sizes: &[u64],
    _nranks: usize,
    _graphs: &[bool],
    _m: &ModelArgs,
) -> anyhow::Result<Modeled<CollectiveResult>> {
    anyhow::bail!("the cost model is not built yet")
}
