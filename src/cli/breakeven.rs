//! `verifybench breakeven`: the flags; the break-even is [`crate::commands::breakeven`].

use std::path::PathBuf;

use crate::cli::args::BatchArgs;
use crate::cli::output::OutputArgs;
use crate::cli::values;
use crate::commands::breakeven::BreakevenRequest;
use crate::speculative::inputs::{Acceptance, Flags};
use crate::trace::breakeven::TraceInput;

/// The times of one speculation cycle besides the verify: shared by `breakeven` and `report`.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct CycleArgs {
    /// One plain decode step of the target model (T = 1), in ms (above 0, at most 1000000);
    /// tokens/s without speculation is 1000 / this. Else from a decode record (`verify --phase decode`).
    #[arg(long, value_name = "MS", value_parser = values::millis(false, "12.2"), allow_negative_numbers = true)]
    pub(crate) decode_ms: Option<f64>,
    /// One draft step, in ms, 0 to 1000000 (EAGLE-3: one draft-head forward). Else from a draft record
    /// (`verify --phase draft`), else the draft's forward priced as `explain` prices it (the
    /// model's draft schedule through the engine terms, labelled modeled); 0 for free drafting.
    #[arg(long, value_name = "MS", value_parser = values::millis(true, "1.5"), allow_negative_numbers = true)]
    pub(crate) draft_ms: Option<f64>,
    /// Draft steps k per cycle, 1 to 64; the verify forward covers k+1 tokens. Else the number of
    /// --accept-rates (breakeven), else T-1 of the verify record.
    #[arg(long, value_name = "K", value_parser = values::draft_steps(), allow_negative_numbers = true)]
    pub(crate) draft_steps: Option<u64>,
    /// Fixed per-cycle overhead (draft extend, sampling), in ms, 0 to 1000000. Default: the
    /// drafted tokens' bookkeeping as `explain` prices it (labelled modeled); 0 for none.
    #[arg(long, value_name = "MS", value_parser = values::millis(true, "0.5"), allow_negative_numbers = true)]
    pub(crate) overhead_ms: Option<f64>,
}

impl CycleArgs {
    pub(crate) fn flags(&self) -> Flags {
        Flags {
            decode_ms: self.decode_ms,
            draft_ms: self.draft_ms,
            draft_steps: self.draft_steps,
            overhead_ms: self.overhead_ms,
            ..Default::default()
        }
    }
}

/// The model and the machine the step's modeled parts are priced for, as `explain` takes them:
/// shared by `breakeven` and `report`, so that the three give one answer for one set of inputs.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct EngineArgs {
    /// GPUs of the tensor-parallel group the times were measured on (default 8), 2 to 1024.
    #[arg(long, value_name = "N", value_parser = values::gpus(), allow_negative_numbers = true)]
    pub(crate) gpus: Option<usize>,
    /// Built-in model preset whose draft and verify forwards price the modeled parts of the step:
    /// kimi-k2.5, deepseek-v3, llama-3.1-70b, qwen3-235b-a22b.
    #[arg(long, default_value = "kimi-k2.5")]
    pub(crate) model: String,
    /// A Hugging Face config.json instead of a preset.
    #[arg(long, value_name = "PATH")]
    pub(crate) model_config: Option<PathBuf>,
    /// The drafter: eagle3 (the default), mtp (the model's own MTP module), block (a
    /// DFlash-like block drafter proposing k tokens in one forward).
    #[arg(long, value_parser = values::named::<crate::model::draft::DrafterKind>())]
    pub(crate) drafter: Option<crate::model::draft::DrafterKind>,
    /// Link profile of the cost model (default pcie-gen5); not with --profile.
    #[arg(long, default_value = "pcie-gen5", conflicts_with = "profile")]
    pub(crate) link: String,
    /// Calibrated profile file written by `verifybench model fit` (instead of --link).
    #[arg(long, value_name = "FILE")]
    pub(crate) profile: Option<PathBuf>,
    /// The decode step ran eagerly (without it, it is taken as run from a CUDA graph, the
    /// engines' default).
    #[arg(long)]
    pub(crate) decode_eager: bool,
}

request_from!(|a: &EngineArgs| -> crate::explain::EngineSettings {
    gpus,
    model,
    model_config,
    drafter,
    link,
    profile,
    decode_eager,
});

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct BreakevenArgs {
    #[command(flatten)]
    pub(crate) cycle: CycleArgs,
    /// The verify forward of k+1 tokens, in ms (above 0, at most 1000000). Repeat it or give a comma list for one row
    /// per verify time (e.g. 30,19,12).
    #[arg(
        long,
        value_name = "MS",
        value_delimiter = ',',
        value_parser = values::millis(false, "19"),
        allow_negative_numbers = true
    )]
    pub(crate) verify_ms: Vec<f64>,
    /// Mean accept length tau: tokens kept per cycle, bonus token included (SGLang's
    /// "accept length"), between 1 and k+1.
    #[arg(long, value_name = "TAU", value_parser = values::ACCEPT_LENGTH, allow_negative_numbers = true, conflicts_with_all = ["accept_rates", "accept_rate"])]
    pub(crate) accept_length: Option<f64>,
    /// Conditional per-position acceptance rates, one per draft step, e.g. 0.8,0.6,0.45: r_i is
    /// the chance that draft token i is accepted given that tokens 1..i-1 were; expected tokens
    /// per cycle = 1 + r1 + r1 r2 + r1 r2 r3 + ... (vLLM's `Per-position acceptance rate` is a
    /// different quantity, fractions of all drafts: give it to --accept-rates-of-drafts.)
    #[arg(
        long,
        value_name = "R1,R2,..",
        value_delimiter = ',',
        value_parser = values::PROBABILITY,
        allow_negative_numbers = true,
        conflicts_with_all = ["accept_rate", "accept_rates_of_drafts"]
    )]
    pub(crate) accept_rates: Option<Vec<f64>>,
    /// Per-position acceptance rates as vLLM prints them (`SpecDecoding metrics: ...
    /// Per-position acceptance rate: 0.645, 0.393, 0.240`): a_i is the fraction of ALL drafts
    /// whose token i was accepted (so a1 >= a2 >= ...); expected tokens per cycle = 1 + a1 + a2
    /// + ..., vLLM's own mean acceptance length.
    #[arg(
        long,
        value_name = "A1,A2,..",
        value_delimiter = ',',
        value_parser = values::PROBABILITY,
        allow_negative_numbers = true,
        conflicts_with_all = ["accept_rate", "accept_length"]
    )]
    pub(crate) accept_rates_of_drafts: Option<Vec<f64>>,
    /// One constant acceptance rate alpha for every position: expected tokens per cycle =
    /// (1 - alpha^(k+1)) / (1 - alpha). Not vLLM's accept rate (`Avg Draft acceptance rate`:
    /// accepted / drafted tokens, tau = 1 + k x rate): give that one as --accept-length.
    #[arg(long, value_name = "ALPHA", value_parser = values::PROBABILITY, allow_negative_numbers = true)]
    pub(crate) accept_rate: Option<f64>,
    /// A results file (JSON, JSON array or JSON lines) with verify records: T_verify from
    /// each verify-phase record (CUDA-graph full run's median when present), T_decode and
    /// T_draft from decode- and draft-phase records. Repeatable; flags win over records.
    #[arg(long, value_name = "RESULTS.json")]
    pub(crate) from: Vec<PathBuf>,
    /// A profiler trace (file or folder, as `verifybench trace` reads) whose median step time is
    /// T_verify, T_decode or T_draft: ROLE=PATH with ROLE verify, decode or draft (the trace does
    /// not say which forward it profiled). Repeatable; one decode and one draft at most; the
    /// times are labelled measured from the trace.
    #[arg(long, value_name = "ROLE=PATH")]
    pub(crate) from_trace: Vec<TraceInput>,
    /// The server's log, SGLang's or vLLM's (told apart by their lines): SGLang's mean of its
    /// `Decode batch. ... accept len: X` lines above 0; vLLM's `SpecDecoding metrics:` lines,
    /// 1 + accepted tokens / drafts over all of them. Labelled measured from the log, with the
    /// engine named.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["accept_length", "accept_rates", "accept_rate", "accept_rates_of_drafts"])]
    pub(crate) accept_from_log: Option<PathBuf>,
    /// Accept lengths of the table's columns (default 1.5,2,...,4 up to k+1).
    #[arg(
        long,
        value_name = "TAU,..",
        value_delimiter = ',',
        value_parser = values::ACCEPT_LENGTH,
        allow_negative_numbers = true
    )]
    pub(crate) table_accept_lengths: Vec<f64>,
    #[command(flatten)]
    pub(crate) batch: BatchArgs,
    #[command(flatten)]
    pub(crate) engine: EngineArgs,
    // --format json: every input with its origin, every output.
    #[command(flatten)]
    pub(crate) output: OutputArgs,
}

request_from!(|a: &BreakevenArgs| -> BreakevenRequest {
    flags: Flags {
        verify_ms: a.verify_ms.clone(),
        acceptance: Acceptance::from_flags(
            a.accept_length,
            a.accept_rates.as_ref(),
            a.accept_rates_of_drafts.as_ref(),
            a.accept_rate,
        ),
        table_accept_lengths: a.table_accept_lengths.clone(),
        ..a.cycle.flags()
    },
    from,
    from_trace,
    accept_from_log,
    batch: (&a.batch).into(),
    engine: (&a.engine).into(),
    format: a.output.format,
});
