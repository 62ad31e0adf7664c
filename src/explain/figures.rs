//! The pieces of the answer: a figure with its source and how it was obtained, the lines of the
//! verify as it ran, the scenarios, the speculation cycle.

use serde::Serialize;

use crate::evidence::{Labelled, Source};

/// One figure, us, with its source and how it was obtained.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figure {
    pub us: f64,
    pub source: Source,
    pub how: String,
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
pub struct Part {
    pub name: String,
    /// 0: a whole; 1: a part of the line above.
    pub depth: u8,
    pub figure: Figure,
}

/// One counterfactual (or the verify as it ran) with what it gives.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scenario {
    pub name: String,
    pub verify: Figure,
    /// Tokens/s with speculation at the accept length (needs --decode-ms's baseline too).
    pub tokens_per_s: Option<f64>,
    /// Tokens/s over decoding without speculation.
    pub vs_baseline: Option<f64>,
    /// The accept length at which this verify breaks even (needs --decode-ms).
    pub breakeven_tau: Option<f64>,
}

/// The speculation cycle as resolved (for tokens/s).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cycle {
    pub decode_ms: Option<Labelled>,
    /// 1000 / decode ms: decoding without speculation.
    pub baseline_tokens_per_s: Option<f64>,
    pub accept_length: Option<Labelled>,
    pub draft_ms: Labelled,
    pub draft_steps: u64,
    pub overhead_ms: Labelled,
}

/// The verify's collectives and the as-ran figures the counterfactuals start from.
pub(crate) struct Base {
    pub verify: Option<Figure>,
    pub transfer: Figure,
    /// What a CUDA graph removes (waiting), when known.
    pub waiting: Option<Figure>,
    /// The verify from a CUDA graph.
    pub graph: Option<Figure>,
    pub already_graph: bool,
}
