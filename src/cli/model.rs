//! `verifybench model fit` and `model validate`: the flags; the fit and the validation are
//! [`crate::commands::model`].

use std::path::PathBuf;

use clap::Subcommand;

use crate::cli::args::ModelArgs;
use crate::cli::output::OutputArgs;
use crate::cli::values;
use crate::commands::model::{FitCycleRequest, FitRequest, ValidateRequest};

/// `verifybench model ...`
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ModelCmd {
    #[command(subcommand)]
    pub(crate) cmd: ModelSub,
}

#[derive(Debug, Clone, Subcommand)]
pub(crate) enum ModelSub {
    /// Fit the cost model's parameters to measured collective and verify results, print the
    /// error per point and leave-one-out, and write a profile for `--profile FILE`.
    ///
    /// --format json prints the profile -o writes.
    Fit(FitArgs),
    /// Held-out validation on nccl-tests output: every table (one run of a file) fitted on its
    /// own with every size left out in turn (the median and largest error of the left-out
    /// sizes), every built-in profile's error at 32 KB-256 KB, and a fit at one rank count
    /// predicting another of the same file where the file has two.
    Validate(ValidateArgs),
    /// Fit the speculative cycle's engine terms (the share of the plain decode step that scales
    /// with the modeled forward, a draft forward's fixed cost, the cost per request and drafted
    /// token) to published runs, and predict each run with the terms fitted without it.
    ///
    /// The runs: a JSON file of runs as their users had them (tests/data/published-spec-runs.json
    /// holds the published PCIe runs and says the form); --format json prints the terms, the
    /// held-out errors and every run's priced parts.
    FitCycle(FitCycleArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct FitCycleArgs {
    /// The runs file (JSON).
    #[arg(value_name = "RUNS.json")]
    pub(crate) runs: PathBuf,
    /// The folder of the config.json files the runs name (default: configs/ beside the runs
    /// file).
    #[arg(long, value_name = "DIR")]
    pub(crate) configs: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    #[command(flatten)]
    pub(crate) print: OutputArgs,
}

request_from!(|a: &FitCycleArgs| -> FitCycleRequest {
    runs,
    configs,
    model: (&a.model).into(),
    format: a.print.format,
});

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ValidateArgs {
    /// nccl-tests text output (as for `model fit --nccl-tests`).
    #[arg(long, required = true, num_args = 1.., value_name = "FILE")]
    pub(crate) nccl_tests: Vec<PathBuf>,
    /// The link's rate per direction, GB/s: one for every file, or one per file in the order
    /// of --nccl-tests (PCIe 3.0 x16 15.75, 4.0 x16 31.5, 5.0 x16 63).
    #[arg(long, num_args = 1.., value_name = "GB/s", value_parser = values::LINK_GBPS, allow_negative_numbers = true)]
    pub(crate) link_gbps: Vec<f64>,
    /// Built-in profile the fits start from.
    #[arg(long, default_value = "pcie-gen5")]
    pub(crate) base: String,
    /// The median leave-one-size-out error a table must stay within, percent.
    #[arg(long, default_value_t = 10.0, value_name = "PCT", value_parser = values::PERCENT, allow_negative_numbers = true)]
    pub(crate) max_median_pct: f64,
    #[command(flatten)]
    pub(crate) print: OutputArgs,
}

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct FitArgs {
    /// Results files (JSON, JSON array or JSON lines) of measured `collective` and `verify`
    /// runs. Modeled records are left out.
    #[arg(required_unless_present = "nccl_tests", value_name = "RESULTS")]
    pub(crate) results: Vec<PathBuf>,
    /// Fit to the text output of nccl-tests instead (all_reduce_perf, all_gather_perf,
    /// reduce_scatter_perf; eager or -G; several runs per file are read one by one): a profile
    /// of the machine that printed it, bounded by the link's rate.
    #[arg(long, num_args = 1.., value_name = "FILE", conflicts_with = "results")]
    pub(crate) nccl_tests: Vec<PathBuf>,
    /// With --nccl-tests: the link's rate per direction, GB/s (default: the base's; PCIe 3.0
    /// x16 15.75, 4.0 x16 31.5, 5.0 x16 63). Every protocol's bandwidth is bounded by it times
    /// the protocol's payload share (LL 1/2, LL128 120/128, Simple 1); a row past it is refused.
    #[arg(long, value_name = "GB/s", value_parser = values::LINK_GBPS, allow_negative_numbers = true)]
    pub(crate) link_gbps: Option<f64>,
    /// With --nccl-tests: the measured peer-to-peer latency (p2pBandwidthLatencyTest), us; no
    /// per-hop latency is fitted below it.
    #[arg(long, value_name = "US", value_parser = values::MICROS, allow_negative_numbers = true)]
    pub(crate) p2p_latency_us: Option<f64>,
    /// Where to write the fitted profile (JSON).
    #[arg(short = 'o', long, value_name = "PROFILE.json")]
    pub(crate) output: PathBuf,
    /// Built-in link profile to start from; parameters the data cannot pin down keep its values
    /// (default: with --nccl-tests, taken from the tables: PCIe generation or NVLink from their
    /// best bus bandwidth or --link-gbps, P2P from NCCL's log lines; else nvlink-h200).
    #[arg(long)]
    pub(crate) base: Option<String>,
    /// Start from a profile file instead of a built-in one (overrides --base).
    #[arg(long, value_name = "FILE")]
    pub(crate) base_profile: Option<PathBuf>,
    /// Name of the fitted profile (default: the output file's stem).
    #[arg(long)]
    pub(crate) name: Option<String>,
    // --format json: the profile file -o writes.
    #[command(flatten)]
    pub(crate) print: OutputArgs,
}

request_from!(|a: &FitArgs| -> FitRequest {
    results,
    nccl_tests,
    link_gbps,
    p2p_latency_us,
    output,
    base,
    base_profile,
    name,
    format: a.print.format,
});

request_from!(|a: &ValidateArgs| -> ValidateRequest {
    nccl_tests,
    link_gbps,
    base,
    max_median_pct,
    format: a.print.format,
});
