//! `verifybench sweep`: NCCL settings x graph on/off, each point in fresh worker processes,
//! proven from NCCL's own log, ranked, resumable: the flags. The sweep itself is
//! [`crate::commands::sweep`].

use std::path::PathBuf;

use crate::cli::args::{GpuArgs, HostGapArgs, ModelArgs, RepeatArgs, WorkloadArgs};
use crate::cli::output::{ExportArgs, OutputArgs};
use crate::cli::values::{self, named};
use crate::commands::sweep::SweepRequest;
use crate::record::Mode;
use crate::request::{BackendKind, GraphChoice};

const AFTER_HELP: &str = "\
Values:
  -L NAME=a,b,c        a list, split on commas (hyperfine style); repeat -L for more variables:
                       the points are the cross product
  --set NAME=VALUE     one value taken literally, commas and semicolons included; repeat it to
                       add values to NAME's list. For NCCL's per-function form (NCCL >= 2.24):
                       --set 'NCCL_ALGO=ring;allreduce:tree' (Tree for all-reduce, Ring otherwise)
  --preset pcie        one-at-a-time variations of NCCL_PROTO, NCCL_ALGO, NCCL_P2P_LEVEL,
                       NCCL_P2P_DISABLE, NCCL_MIN/MAX_NCHANNELS, NCCL_NTHREADS, NCCL_BUFFSIZE
  --nccl-lib A,B       NCCL library builds (libnccl.so* files or their folders), also spelt
                       -L NCCL_LIB=A,B: every point runs on each library, the first one the
                       baseline's; each point's workers report the version NCCL gives and the
                       file they mapped, and a point whose workers mapped another file is
                       refused (failed, with the reason)
The baseline (nothing overridden) runs in every round. Variables held fixed for every point,
baseline included: export them before running (they pass through to every worker).

Rounds (--rounds R, default 3): every round runs every point once, in its own shuffled order
(--seed); a point's ratio to the baseline is taken per round (paired) and its 95% interval
comes from the rounds. The noise floor is measured: the largest deviation of the baseline's
rounds from their median, printed. A setting is recommended only when its whole interval lies
below 1 - floor (- --noise-margin); eager and graph replay are judged separately. With too few
rounds to resolve gains near the floor, the output says how many would.

Each point: a probe run (-n 2 -w 1, NCCL_DEBUG=INFO into <log-dir>/<point>.%h.%p.log), once, in
the first round, proves which algorithm, protocol and transport NCCL used; then the timed runs,
one per round, with NCCL_DEBUG unset so that logging cannot distort the timing. Every finished
(point, round) is appended to --results at once; --resume FILE skips the pairs already there
(files of sweeps before rounds existed hold round 1).

Examples:
  verifybench sweep --model kimi-k2.5 --tp 2 --tokens 3 -L NCCL_PROTO=LL,LL128,Simple -L NCCL_ALGO=Ring --set 'NCCL_ALGO=ring;allreduce:tree'
  NCCL_P2P_DISABLE=1 verifybench sweep --tp 2 -L NCCL_PROTO=LL,Simple
  verifybench sweep --tp 2 --preset pcie --results pcie.jsonl
  verifybench sweep --tp 2 --preset pcie --resume pcie.jsonl
";

#[derive(Debug, Clone, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct SweepArgs {
    #[command(flatten)]
    pub(crate) workload: WorkloadArgs,
    /// A variable and its values, comma-separated: -L NCCL_PROTO=LL,LL128,Simple. Repeatable:
    /// the points are the cross product.
    #[arg(short = 'L', long = "parameter-list", value_name = "NAME=a,b")]
    pub(crate) lists: Vec<String>,
    /// One value taken literally (commas and semicolons included), added to NAME's list:
    /// --set 'NCCL_ALGO=ring;allreduce:tree'. Repeatable.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub(crate) sets: Vec<String>,
    /// A built-in list of one-at-a-time variations around the defaults: pcie.
    #[arg(long, value_name = "NAME")]
    pub(crate) preset: Option<String>,
    /// Eager launches, CUDA-graph replay, or both (one child runs both: one column each).
    #[arg(short = 'G', long, value_parser = named::<GraphChoice>(), default_value = "both")]
    pub(crate) graph: GraphChoice,
    /// What each point replays: the collectives only (comm), the weight-streaming compute only
    /// (compute), or collectives and compute interleaved (full).
    #[arg(long, value_parser = named::<Mode>(), default_value = "comm")]
    pub(crate) mode: Mode,
    /// nccl: real GPUs; model: the cost model (no NCCL log, so no probe); auto: nccl with 2+ GPUs.
    #[arg(long, value_parser = named::<BackendKind>(), default_value = "auto")]
    pub(crate) backend: BackendKind,
    #[command(flatten)]
    pub(crate) gpu: GpuArgs,
    #[command(flatten)]
    pub(crate) repeat: RepeatArgs,
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    /// Rounds, 1 to 100: every round runs every point once in a shuffled order, the baseline
    /// included. 1 round measures no noise and recommends nothing.
    #[arg(long, default_value_t = crate::sweep::rounds::DEFAULT_ROUNDS, value_name = "R", value_parser = values::repetitions("rounds"), allow_negative_numbers = true)]
    pub(crate) rounds: usize,
    /// Seed of the rounds' shuffled orders (any unsigned 64-bit number).
    #[arg(long, default_value_t = crate::sweep::rounds::DEFAULT_SEED, value_name = "N", value_parser = values::seed(), allow_negative_numbers = true)]
    pub(crate) seed: u64,
    /// An extra margin, a fraction in [0, 0.5), added to the measured noise floor before a
    /// setting counts as faster (default 0: the measured floor alone). The old --noise-floor
    /// (a constant floor) is accepted as this margin.
    #[arg(
        long,
        alias = "noise-floor",
        default_value_t = 0.0,
        value_name = "FRACTION",
        value_parser = values::NOISE_MARGIN,
        allow_negative_numbers = true
    )]
    pub(crate) noise_margin: f64,
    /// Seconds one child (probe or timed run, workers included) may take before it is killed
    /// and the point recorded as failed (greater than 0, at most 1000000).
    #[arg(long, default_value_t = 120.0, value_name = "SECONDS", value_parser = values::seconds(values::MAX_TIMEOUT_S, "120"), allow_negative_numbers = true)]
    pub(crate) point_timeout: f64,
    /// JSON-lines file each finished point is appended to (default: sweep-<timestamp>.jsonl, or
    /// the --resume file).
    #[arg(long, value_name = "FILE")]
    pub(crate) results: Option<PathBuf>,
    /// Skip the points already in FILE (the results file of an earlier sweep of the same
    /// workload) and append the rest to it.
    #[arg(long, value_name = "FILE")]
    pub(crate) resume: Option<PathBuf>,
    /// With --resume: run the failed points again instead of skipping them.
    #[arg(long, requires = "resume")]
    pub(crate) retry_failed: bool,
    /// Directory of the probe runs' NCCL logs and the timed runs' JSON
    /// (default: <results file without extension>.logs).
    #[arg(long, value_name = "DIR")]
    pub(crate) log_dir: Option<PathBuf>,
    /// Skip the probe run (faster, but nothing proves what NCCL used).
    #[arg(long)]
    pub(crate) no_probe: bool,
    #[command(flatten)]
    pub(crate) export: ExportArgs,
    #[command(flatten)]
    pub(crate) host_gaps: HostGapArgs,
    /// Write the ranking table as Markdown to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) export_table_markdown: Option<PathBuf>,
    /// Write the ranking table as CSV to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) export_table_csv: Option<PathBuf>,
    // --format json: the verify records --export-json writes, printed at the end (progress
    // stays on stderr); -q: only the ranking and the recommendation (or the JSON).
    #[command(flatten)]
    pub(crate) output: OutputArgs,
    /// Testing only: fake every point (no child process, no GPU), FAKE numbers.
    #[arg(long, hide = true)]
    pub(crate) debug_mode: bool,
}

request_from!(|a: &SweepArgs| -> SweepRequest {
    workload: (&a.workload).into(),
    lists,
    sets,
    preset,
    graph,
    mode,
    backend,
    rounds,
    seed,
    noise_margin,
    point_timeout,
    results,
    resume,
    retry_failed,
    log_dir,
    no_probe,
    export_table_markdown,
    export_table_csv,
    format: a.output.format,
    quiet: a.output.quiet,
    debug_mode,
    gpu: (&a.gpu).into(),
    repeat: (&a.repeat).into(),
    model: (&a.model).into(),
    export: (&a.export).into(),
    host_gaps: (&a.host_gaps).into(),
});
