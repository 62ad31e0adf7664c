//! The pieces of the answer: a figure with its source and how it was obtained, the lines of the
//! verify as it ran, the scenarios, the speculation cycle.

use serde::Serialize;

use crate::evidence::{Labelled, LaunchMode, Source};

/// One figure, us, with its source and how it was obtained.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Figure {
    pub(crate) us: f64,
    pub(crate) source: Source,
    pub(crate) how: String,
}

pub(crate) fn fig(us: f64, source: Source, how: impl Into<String>) -> Figure {
    Figure {
        us,
        source,
        how: how.into(),
    }
}

/// One line of the verify as it ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Part {
    pub(crate) name: String,
    /// 0: a whole; 1: a part of the line above.
    pub(crate) depth: u8,
    pub(crate) figure: Figure,
}

pub(crate) fn part(name: &str, depth: u8, figure: Figure) -> Part {
    let name = name.into();
    Part {
        name,
        depth,
        figure,
    }
}

/// What a row of the answer is: the summary, the rendering and the JSON find rows by it, and
/// its name ([`Row::name`], the JSON's `name`) comes from it. A new what-if row (the
/// speculative cycle's: another drafter, another k) is a new variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Row {
    /// The verify as it ran, launched as the evidence says.
    AsRan(LaunchMode),
    /// As the server log's tokens/s with one running request implies it.
    Logged,
    /// No verify given: the model's graphed verify held to the given decode.
    Predicted,
    Graph,
    Nccl,
    /// The best NCCL setting on a verify that already ran from a CUDA graph.
    NcclOnGraph,
    NcclGraph,
    OneShot,
    OneShotGraph,
}

impl Row {
    /// The row's name as the answer prints it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Row::AsRan(LaunchMode::Eager) => "as it ran (eager)",
            Row::AsRan(LaunchMode::PartlyEager) => "as it ran (partly eager)",
            Row::AsRan(LaunchMode::Graph) => "as it ran (CUDA graph)",
            Row::Logged => "as the server log measured it",
            Row::Predicted => "predicted (CUDA graph)",
            Row::Graph => "with a CUDA graph",
            Row::Nccl => "best NCCL setting",
            Row::NcclOnGraph => "best NCCL setting (graph)",
            Row::NcclGraph => "best NCCL setting + CUDA graph",
            Row::OneShot => "one-shot all-reduce",
            Row::OneShotGraph => "one-shot all-reduce + CUDA graph",
        }
    }
}

/// A row is written as its name.
impl Serialize for Row {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// One counterfactual (or the verify as it ran) with what it gives.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Scenario {
    #[serde(rename = "name")]
    pub(crate) row: Row,
    pub(crate) verify: Figure,
    /// Tokens/s with speculation at the accept length (needs --decode-ms's baseline too).
    pub(crate) tokens_per_s: Option<f64>,
    /// Tokens/s over decoding without speculation.
    pub(crate) vs_baseline: Option<f64>,
    /// The accept length at which this verify breaks even (needs --decode-ms).
    pub(crate) breakeven_tau: Option<f64>,
    /// True when the row's own figure fell below the floor of a verify on this machine and
    /// the row is held at it ([`crate::speculative::bound`]).
    pub(crate) at_floor: bool,
    /// Low and high of the verify from the model's stated error on the row's modeled part, us
    /// (`None`: nothing modeled in it, or the error is not known).
    pub(crate) range_us: Option<[f64; 2]>,
    /// Tokens/s at the high and low ends of `range_us`.
    pub(crate) tokens_per_s_range: Option<[f64; 2]>,
    /// The plain decode step the row is compared with, ms: the given one, less what the
    /// row's change (an NCCL setting, the one-shot all-reduce) would save on the decode too.
    pub(crate) plain_decode_ms: Option<f64>,
    /// Where the row's change speeds the decode too (`plain_decode_ms` under the given decode):
    /// its tokens/s over decoding without speculation as the user measured it, unchanged.
    pub(crate) vs_measured_plain: Option<f64>,
    /// The step the row's tokens/s divides by, part by part.
    pub(crate) step: StepParts,
}

/// The speculation cycle as resolved (for tokens/s): a step is `draft_forwards` draft forwards
/// of `draft_ms` each, the verify, and the overhead; it makes `concurrency x accept_length`
/// tokens.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Cycle {
    pub(crate) decode_ms: Option<Labelled>,
    /// concurrency x 1000 / decode ms: decoding without speculation.
    pub(crate) baseline_tokens_per_s: Option<f64>,
    pub(crate) accept_length: Option<Labelled>,
    /// One draft forward with its fixed cost: given, else the draft's schedule through the
    /// engine terms.
    pub(crate) draft_ms: Labelled,
    /// k: the tokens drafted per request.
    pub(crate) draft_steps: u64,
    /// The draft forwards of a step (k, or 1 for a block drafter).
    pub(crate) draft_forwards: u64,
    /// The step's cost beside the forwards: given, else the drafted tokens' bookkeeping.
    pub(crate) overhead_ms: Labelled,
    /// Requests per step.
    pub(crate) concurrency: u64,
}

/// The answer's times are us; the cycle's are the ms given, and the break-even's arithmetic
/// ([`crate::speculative`]) is ms: a row's figure crosses into it here, and only here.
impl Cycle {
    /// Plain decoding with a row's change saving `cut_us` on the decode too, ms.
    pub(crate) fn plain_decode_ms(&self, cut_us: f64) -> Option<f64> {
        let d = self.decode_ms.as_ref()?;
        Some((d.value - cut_us / 1000.0).max(1e-9))
    }

    /// The step around a verify of `verify_us`: the drafts, the verify, the overhead, us.
    pub(crate) fn step_us(&self, verify_us: f64) -> f64 {
        1000.0
            * crate::speculative::cycle_ms(
                verify_us / 1000.0,
                self.draft_ms.value,
                self.draft_forwards,
                self.overhead_ms.value,
            )
    }

    /// Tokens/s of the batch with a step of `step_us`, where the acceptance and the baseline
    /// are known.
    pub(crate) fn tokens_per_s_of_step(&self, step_us: f64) -> Option<f64> {
        let t = self.accept_length.as_ref()?;
        self.baseline_tokens_per_s?;
        Some(self.concurrency as f64 * t.value * 1e6 / step_us)
    }

    /// The accept length at which a verify of `verify_us` breaks even against plain decoding of
    /// `plain_ms`.
    pub(crate) fn breakeven_tau(&self, verify_us: f64, plain_ms: f64) -> f64 {
        crate::speculative::breakeven_accept_length(
            verify_us / 1000.0,
            self.draft_ms.value,
            self.draft_forwards,
            self.overhead_ms.value,
            plain_ms,
        )
    }
}

/// A row's step, part by part, us: what its tokens/s divides by.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct StepParts {
    pub(crate) verify_us: f64,
    /// The draft forwards with their fixed cost.
    pub(crate) drafts_us: f64,
    pub(crate) overhead_us: f64,
    pub(crate) step_us: f64,
    /// Low and high of the step: the calibrated parts' held-out spread and the model's stated
    /// error on its modeled part.
    pub(crate) range_us: Option<[f64; 2]>,
}

/// The verify's collectives and the as-ran figures the counterfactuals start from.
pub(crate) struct Base {
    pub(crate) verify: Option<Figure>,
    pub(crate) transfer: Figure,
    /// What a CUDA graph removes (waiting), when known.
    pub(crate) waiting: Option<Figure>,
    /// The verify from a CUDA graph.
    pub(crate) graph: Option<Figure>,
    pub(crate) already_graph: bool,
    /// The graph figure is the model's price of the whole forward (no measured part in it).
    pub(crate) graph_modeled_whole: bool,
}
