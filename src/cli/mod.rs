//! Command-line interface: flags -> one typed request per command -> the module that does it.
//!
//! Each command lives in its own file with its flags (`XxxArgs`) and its `run`, so a command
//! can grow without touching the others.

pub mod args;
pub mod compare;
pub mod plan;
pub mod stub;

use clap::{Parser, Subcommand};

const EXAMPLES: &str = "\
Examples:
  verifybench plan --model kimi-k2.5 --tp 8 --tokens 3
  verifybench verify --model kimi-k2.5 --tp 2 --tokens 3 --graph both
  verifybench collective --op all_reduce -b 8K -e 1M -f 2 -d bf16 --graph both
  verifybench sweep --tp 2 -L NCCL_PROTO=LL,LL128,Simple -L NCCL_ALGO=Ring,Tree --graph both
  verifybench breakeven --decode-ms 12.2 --verify-ms 19 --draft-ms 1.5 --draft-steps 3 --accept-length 2.5
  verifybench inspect --match sglang.launch_server --expect NCCL_PROTO=LL
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
    Collective(stub::StubArgs),
    /// Replay the verify schedule: per-verify median/p99, eager vs CUDA graph.
    Verify(stub::StubArgs),
    /// A cross product of NCCL settings, each in fresh workers, proven from NCCL's log, ranked.
    Sweep(stub::StubArgs),
    /// Speculative-decoding break-even from measured or given times.
    Breakeven(stub::StubArgs),
    /// Markdown report with SVG plots from results files.
    Report(stub::StubArgs),
    /// GPUs, links, NCCL/driver/library paths, and the NCCL_* environment workers see.
    Env(stub::StubArgs),
    /// The NCCL_* environment of every process of a running server, with findings.
    Inspect(stub::StubArgs),
    /// Exact-result checks of every collective, launcher and graph mode on this machine's GPUs.
    Selftest(stub::StubArgs),
    /// Verify results side by side (verifybench and the PyTorch peer): per-verify and
    /// per-collective times, ratios with uncertainty, and where the difference comes from.
    Compare(compare::CompareArgs),
}

/// Parses the command line and runs the command; the value is the process exit code.
pub fn main() -> anyhow::Result<i32> {
    let cli = Cli::parse();
    match cli.command {
        Command::Plan(a) => plan::run(&a),
        Command::Collective(_) => stub::not_built("collective", "the NCCL backend"),
        Command::Verify(_) => stub::not_built("verify", "the NCCL backend and the cost model"),
        Command::Sweep(_) => stub::not_built("sweep", "the settings sweep"),
        Command::Breakeven(_) => stub::not_built("breakeven", "the break-even math"),
        Command::Report(_) => stub::not_built("report", "the report renderer"),
        Command::Env(_) => stub::not_built("env", "the NCCL backend"),
        Command::Inspect(_) => stub::not_built("inspect", "the process inspector"),
        Command::Selftest(_) => stub::not_built("selftest", "the NCCL backend"),
        Command::Compare(a) => compare::run(&a),
    }
}
