//! Command-line interface: flags -> one plain request per command -> one call into
//! [`crate::commands`].
//!
//! Each command lives in its own file with its clap struct (`XxxArgs`) and the conversion into
//! the library's request (`impl From<&XxxArgs> for XxxRequest`, written by `request_from!`
//! below; requests in [`crate::request`] and next to the code that runs them); [`main`] makes
//! the one call, `commands::<name>::run`. This folder and `main.rs` are the only places that
//! name clap; nothing below imports from here.

/// `impl From<&XxxArgs> for XxxRequest` written as the request's field map, one field per line:
/// `field: expression` (the expression reads the flags through the name given after `|`), or a
/// bare `field` for the flag of the same name copied as it is (`a.field.clone()`, a plain copy
/// for a `Copy` type). Every conversion of this folder reads as what each field gets and
/// nothing else.
///
/// ```text
/// request_from!(|a: &PlanArgs| -> PlanRequest {
///     workload: (&a.workload).into(),
///     format: a.output.format,
///     ops,
/// });
/// ```
macro_rules! request_from {
    (|$a:ident: &$args:ty| -> $request:ty { $($field:ident $(: $value:expr)?),* $(,)? }) => {
        impl From<&$args> for $request {
            fn from($a: &$args) -> Self {
                Self { $($field: request_from!(@field $a.$field $(, $value)?)),* }
            }
        }
    };
    (@field $a:ident.$field:ident) => {
        $a.$field.clone()
    };
    (@field $a:ident.$field:ident, $value:expr) => {
        $value
    };
}

pub(crate) mod args;
pub(crate) mod bandwidth;
pub(crate) mod breakeven;
pub(crate) mod choose;
pub(crate) mod collective;
pub(crate) mod compare;
pub(crate) mod env;
pub(crate) mod explain;
pub(crate) mod inspect;
pub(crate) mod model;
pub(crate) mod numbers;
pub(crate) mod output;
pub(crate) mod plan;
pub(crate) mod rank;
pub(crate) mod report;
pub(crate) mod selftest;
pub(crate) mod sweep;
pub(crate) mod trace;
pub(crate) mod values;
pub(crate) mod verify;
pub(crate) mod worker;

use clap::{Parser, Subcommand};

use crate::commands;

const EXAMPLES: &str = "\
Examples:
  verifybench plan --model kimi-k2.5 --tp 8 --tokens 3
  verifybench verify --model kimi-k2.5 --tp 2 --tokens 3 --graph both
  verifybench collective --op all_reduce -b 8K -e 1M -f 2 -d bf16 --graph both
  verifybench sweep --tp 2 -L NCCL_PROTO=LL,LL128,Simple --set 'NCCL_ALGO=ring;allreduce:tree' --graph both
  verifybench choose --model kimi-k2.5 --tp 8 --concurrency 1,8 --decision allreduce.json
  verifybench breakeven --decode-ms 12.2 --verify-ms 19 --draft-ms 1.5 --draft-steps 3 --accept-length 2.5
  verifybench inspect --match sglang.launch_server --expect NCCL_PROTO=LL
  verifybench verify --backend model --gpus 8 --link pcie-gen5
  verifybench explain --observed 122x0.2ms --verify-ms 30 --decode-ms 12.2 --accept-length 2.5 --gpus 8
  verifybench model fit results/h200x2/collective-allreduce-default-threads.json -o h200x2.profile.json
";

/// Replays the collective pattern of a speculative-decoding verify step over NCCL, measures it,
/// proves which NCCL settings were used, and turns it into a break-even.
#[derive(Debug, Parser)]
#[command(name = "verifybench", version, about, after_help = EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// The verify schedule of a model: every collective with its bytes per rank, and the weight
    /// bytes each rank streams between them. Needs no GPU.
    ///
    /// --format json prints the schedule itself (the input of scripts/torch_baseline.py and of
    /// --schedule FILE).
    Plan(plan::PlanArgs),
    /// One collective over a size range, nccl-tests style (time, algbw, busbw, #wrong).
    Collective(collective::CollectiveArgs),
    /// Replay the verify schedule: per-verify median/p99, eager vs CUDA graph.
    Verify(verify::VerifyArgs),
    /// A cross product of NCCL settings, each in fresh workers, proven from NCCL's log, ranked.
    ///
    /// --format json prints, at the end, the verify records --export-json writes (the header
    /// and per-point lines then go to stderr).
    Sweep(sweep::SweepArgs),
    /// Which all-reduce for each shape of the speculative cycle: NCCL or the P2P one-shot and
    /// two-shot, decided per message size beyond the noise, kept in a decision file under the
    /// key it depends on, and written as SGLang's and vLLM's settings.
    ///
    /// --format json prints the record --decision writes.
    Choose(choose::ChooseArgs),
    /// Speculative-decoding break-even from measured or given times.
    ///
    /// --format json carries every input with its origin and every output.
    Breakeven(breakeven::BreakevenArgs),
    /// Markdown report with SVG plots from results files.
    Report(report::ReportArgs),
    /// Device copy bandwidth and the weight-streaming kernel's bandwidth, in the same run.
    ///
    /// --format json prints, after the last GPU, the array --export-json writes.
    Bandwidth(bandwidth::BandwidthArgs),
    /// GPUs, links, NCCL/driver/library paths, and the NCCL_* environment workers see.
    Env(env::EnvArgs),
    /// The NCCL_* environment of every process of a running server, with findings.
    ///
    /// --format json: the processes, findings and expectation results as one document.
    Inspect(inspect::InspectArgs),
    /// Exact-result checks of every collective, launcher and graph mode on this machine's GPUs.
    ///
    /// --format json prints the checks --export-json writes.
    Selftest(selftest::SelftestArgs),
    /// One rank started by an external launcher (torchrun, Slurm, MPI), joined over TCP.
    Worker(worker::WorkerArgs),
    /// One rank of a run with --launcher processes (started by verifybench itself).
    #[command(name = "__rank", hide = true)]
    Rank(rank::RankArgs),
    /// The cost model: `model fit` calibrates it on measured results.
    Model(model::ModelCmd),
    /// Verify results side by side (verifybench and the PyTorch peer): per-verify and
    /// per-collective times, ratios with uncertainty, and where the difference comes from.
    Compare(compare::CompareArgs),
    /// Read a server's profiler traces (Kineto JSON, one per rank): collectives, steps, transfer
    /// vs waiting across ranks, and what to change. Needs no GPU.
    ///
    /// --format json prints the result record --export-json writes.
    Trace(trace::TraceArgs),
    /// From the evidence (traces, logs, a sweep, or plain numbers such as --observed
    /// 122x0.2ms) to the answer: the verify split into transfer, waiting, compute and idle;
    /// what a CUDA graph, the best NCCL setting or the one-shot all-reduce gives in verify time
    /// and tokens/s; what to run next; the known traps. Needs no GPU.
    ///
    /// --format json prints the result record --export-json writes.
    Explain(explain::ExplainArgs),
}

/// Parses the command line and runs the command; the value is the process exit code.
pub fn main() -> anyhow::Result<i32> {
    match Cli::parse().command {
        Command::Plan(a) => run(&a, a.output.quiet, commands::plan::run),
        Command::Collective(a) => run(&a, a.output.quiet, commands::collective::run),
        Command::Verify(a) => run(&a, a.output.quiet, commands::verify::run),
        Command::Env(a) => run(&a, a.output.quiet, commands::env::run),
        Command::Bandwidth(a) => run(&a, a.output.quiet, commands::bandwidth::run),
        Command::Inspect(a) => run(&a, a.output.quiet, commands::inspect::run),
        Command::Breakeven(a) => run(&a, a.output.quiet, commands::breakeven::run),
        Command::Choose(a) => run(&a, a.output.quiet, commands::choose::run),
        // no -q/--quiet: report's output is files, and __rank is hidden
        Command::Report(a) => run(&a, false, commands::report::run),
        Command::Selftest(a) => run(&a, a.output.quiet, commands::selftest::run),
        Command::Rank(a) => run(&a, false, commands::rank::run),
        Command::Worker(a) => run(&a, a.output.quiet, commands::worker::run),
        Command::Model(c) => match &c.cmd {
            model::ModelSub::Fit(a) => run(a, a.print.quiet, commands::model::fit),
            model::ModelSub::Validate(a) => run(a, a.print.quiet, commands::model::validate),
            model::ModelSub::FitCycle(a) => run(a, a.print.quiet, commands::model::fit_cycle),
        },
        Command::Compare(a) => run(&a, a.output.quiet, commands::compare::run),
        Command::Sweep(a) => run(&a, a.output.quiet, commands::sweep::run),
        Command::Trace(a) => run(&a, a.output.quiet, commands::trace::run),
        Command::Explain(a) => run(&a, a.output.quiet, commands::explain::run),
    }
}

/// One command: its `-q/--quiet` set for everything it prints, then its run on the request its
/// flags convert into.
fn run<A, R>(args: &A, quiet: bool, command: fn(&R) -> anyhow::Result<i32>) -> anyhow::Result<i32>
where
    R: for<'a> From<&'a A>,
{
    crate::output::set_quiet(quiet);
    command(&R::from(args))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// Every flag of every command has help text (issue 15 item 15).
    #[test]
    fn every_flag_has_help() {
        fn walk(c: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in c.get_arguments() {
                if a.is_hide_set() || matches!(a.get_id().as_str(), "help" | "version") {
                    continue;
                }
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("{path} {}", a.get_id()));
                }
            }
            for s in c.get_subcommands().filter(|s| !s.is_hide_set()) {
                walk(s, &format!("{path} {}", s.get_name()), missing);
            }
        }
        let mut missing = vec![];
        walk(&Cli::command(), "verifybench", &mut missing);
        assert!(missing.is_empty(), "flags without help: {missing:?}");
    }

    #[test]
    fn library_enums_parse_by_name_and_refuse_the_rest() {
        let ok = Cli::try_parse_from([
            "verifybench",
            "verify",
            "--backend",
            "model",
            "--launcher",
            "threads",
            "-G",
            "on",
            "--mode",
            "comm,full",
            "--phase",
            "draft",
            "--routing",
            "worst",
            "--logits",
            "none",
        ]);
        let Ok(Cli {
            command: Command::Verify(v),
        }) = ok
        else {
            panic!("parses: {ok:?}")
        };
        let r = crate::request::VerifyRequest::from(&v);
        assert_eq!(r.backend, crate::request::BackendKind::Model);
        assert_eq!(r.gpu.launcher, crate::request::Launcher::Threads);
        assert_eq!(
            r.runs(),
            vec![
                (true, crate::record::Mode::Comm),
                (true, crate::record::Mode::Full)
            ]
        );
        assert_eq!(r.workload.phase, crate::model::Phase::Draft);
        // the mock backend is for tests only: not a value of --backend
        let e = Cli::try_parse_from(["verifybench", "verify", "--backend", "mock"]).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("possible values: auto, nccl, model"), "{msg}");
    }
}
