//! Break-even inputs from a trace: the step time it measured (a verify trace gives the verify
//! time, a decode trace the decode time).

use serde::Serialize;

use super::analysis::Analysis;

/// A step time measured from a trace (ms).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct TraceStepTime {
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub steps: usize,
    /// `eager (no CUDA graph)`, `CUDA graph`, ...
    pub mode: String,
    pub files: Vec<String>,
}

/// The step time of an analysed trace (for `breakeven --from-trace`); a usage error when the
/// trace holds no complete step.
pub(crate) fn step_time(a: &Analysis) -> anyhow::Result<TraceStepTime> {
    let s = a.step.as_ref().ok_or_else(|| {
        crate::error::usage(format!(
            "{}: no complete step found, so no step time",
            a.files.join(", ")
        ))
    })?;
    Ok(TraceStepTime {
        median_ms: s.step_us.median / 1000.0,
        min_ms: s.step_us.min / 1000.0,
        max_ms: s.step_us.max / 1000.0,
        steps: s.steps,
        mode: s.mode_words(),
        files: a.files.clone(),
    })
}
