//! Command-line interface: flags -> one typed request per command -> the module that does it.
//!
//! Each command lives in its own file with its flags (`XxxArgs`) and its `run`, so a command
//! can grow without touching the others.

pub mod args;
pub mod bandwidth;
pub mod breakeven;
pub mod collective;
pub mod compare;
pub mod env;
pub mod inspect;
pub mod modelfit;
pub mod plan;
pub mod report;
pub mod selftest;
pub mod sweep;
pub mod trace;
pub mod verify;
pub mod worker;

use clap::{Parser, Subcommand};

const EXAMPLES: &str = "\
Examples:
  verifybench plan --model kimi-k2.5 --tp 8 --tokens 3
  verifybench verify --model kimi-k2.5 --tp 2 --tokens 3 --graph both
  verifybench collective --op all_reduce -b 8K -e 1M -f 2 -d bf16 --graph both
  verifybench sweep --tp 2 -L NCCL_PROTO=LL,LL128,Simple -L NCCL_ALGO=Ring,Tree --graph both
  verifybench breakeven --decode-ms 12.2 --verify-ms 19 --draft-ms 1.5 --draft-steps 3 --accept-length 2.5
  verifybench inspect --match sglang.launch_server --expect NCCL_PROTO=LL
  verifybench verify --backend model --gpus 8 --link pcie-gen5
  verifybench model fit results/h200x2-collective.json -o h200x2.profile.json
";

/// Replays the collective pattern of a speculative-decoding verify step over NCCL, measures it,
/// proves which NCCL settings were used, and turns it into a break-even.
#[derive(Debug, Parser)]
#[command(name = "verifybench", version, about, after_help = EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The verify schedule of a model: every collective with its bytes per rank, and the weight
    /// bytes each rank streams between them. Needs no GPU.
    Plan(plan::PlanArgs),
    /// One collective over a size range, nccl-tests style (time, algbw, busbw, #wrong).
    Collective(collective::CollectiveArgs),
    /// Replay the verify schedule: per-verify median/p99, eager vs CUDA graph.
    Verify(verify::VerifyArgs),
    /// A cross product of NCCL settings, each in fresh workers, proven from NCCL's log, ranked.
    Sweep(sweep::SweepArgs),
    /// Speculative-decoding break-even from measured or given times.
    Breakeven(breakeven::BreakevenArgs),
    /// Markdown report with SVG plots from results files.
    Report(report::ReportArgs),
    /// Device copy bandwidth and the weight-streaming kernel's bandwidth, in the same run.
    Bandwidth(bandwidth::BandwidthArgs),
    /// GPUs, links, NCCL/driver/library paths, and the NCCL_* environment workers see.
    Env(env::EnvArgs),
    /// The NCCL_* environment of every process of a running server, with findings.
    Inspect(inspect::InspectArgs),
    /// Exact-result checks of every collective, launcher and graph mode on this machine's GPUs.
    Selftest(selftest::SelftestArgs),
    /// One rank started by an external launcher (torchrun, Slurm, MPI), joined over TCP.
    Worker(worker::WorkerArgs),
    /// One rank of a run with --launcher processes (started by verifybench itself).
    #[command(name = "__rank", hide = true)]
    Rank(crate::launch::worker::RankArgs),
    /// The cost model: `model fit` calibrates it on measured results.
    Model(modelfit::ModelCmd),
    /// Verify results side by side (verifybench and the PyTorch peer): per-verify and
    /// per-collective times, ratios with uncertainty, and where the difference comes from.
    Compare(compare::CompareArgs),
    /// Read a server's profiler traces (Kineto JSON, one per rank): collectives, steps, transfer
    /// vs waiting across ranks, and what to change. Needs no GPU.
    Trace(trace::TraceArgs),
}

/// Parses the command line and runs the command; the value is the process exit code.
pub fn main() -> anyhow::Result<i32> {
    let cli = Cli::parse();
    match cli.command {
        Command::Plan(a) => plan::run(&a),
        Command::Collective(a) => collective::run(&a),
        Command::Verify(a) => verify::run(&a),
        Command::Env(a) => env::run(&a),
        Command::Bandwidth(a) => bandwidth::run(&a),
        Command::Inspect(a) => inspect::run(&a),
        Command::Breakeven(a) => breakeven::run(&a),
        Command::Report(a) => report::run(&a),
        Command::Selftest(a) => selftest::run(&a),
        Command::Rank(a) => crate::launch::worker::run(&a),
        Command::Worker(a) => worker::run(&a),
        Command::Model(c) => modelfit::run(&c),
        Command::Compare(a) => compare::run(&a),
        Command::Sweep(a) => sweep::run(&a),
        Command::Trace(a) => trace::run(&a),
    }
}

/// Picks the backend: `auto` means NCCL when at least two GPUs are present, else the cost
/// model, and says so on stderr (unless `quiet`).
pub fn resolve_backend(requested: args::Backend, quiet: bool) -> anyhow::Result<args::Backend> {
    use args::Backend;
    match requested {
        Backend::Model | Backend::Nccl => Ok(requested),
        Backend::Auto => {
            let n = crate::comm::device_count();
            if n >= 2 {
                Ok(Backend::Nccl)
            } else {
                if !quiet {
                    eprintln!(
                        "verifybench: {} GPU{} found, so the numbers below are MODELED by the cost model, not measured (use --backend nccl on a machine with 2+ GPUs)",
                        n,
                        if n == 1 { "" } else { "s" }
                    );
                }
                Ok(Backend::Model)
            }
        }
    }
}

/// The NCCL backend of `verify`.
pub fn nccl_verify(
    a: &verify::VerifyArgs,
    started: String,
) -> anyhow::Result<crate::report::Record> {
    crate::launch::verify(a, started)
}

/// The NCCL backend of `collective`.
pub fn nccl_collective(
    a: &collective::CollectiveArgs,
    started: String,
) -> anyhow::Result<crate::report::Record> {
    crate::launch::collective(a, started)
}
