//! Break-even inputs from a trace: the step time it measured (a verify trace gives the verify
//! time, a decode trace the decode time).

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::analysis::Analysis;
use crate::error::usage;
use crate::evidence::records::{missing_part, phase_word, RecordTime};
use crate::evidence::{short_name, Labelled, Origin, Source};
use crate::model::Phase;
use crate::record::Mode;

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

/// One trace of `breakeven --from-trace ROLE=PATH`: which forward its steps are (`verify`,
/// `decode` or `draft`) and the trace file or folder of traces (one per rank).
#[derive(Debug, Clone, PartialEq)]
pub struct TraceInput {
    pub phase: Phase,
    pub path: PathBuf,
}

impl std::str::FromStr for TraceInput {
    type Err = String;
    /// `verify=PATH`, `decode=PATH` or `draft=PATH`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (role, path) = s.split_once('=').ok_or_else(|| {
            format!("'{s}' names no role: write verify=PATH, decode=PATH or draft=PATH")
        })?;
        let phase = match role {
            "verify" => Phase::Verify,
            "decode" => Phase::Decode,
            "draft" => Phase::Draft,
            _ => {
                return Err(format!(
                    "role '{role}' is not one of verify, decode, draft (write ROLE=PATH)"
                ))
            }
        };
        if path.is_empty() {
            return Err(format!("'{s}' names no trace file or folder after '='"));
        }
        Ok(TraceInput {
            phase,
            path: PathBuf::from(path),
        })
    }
}

/// The step times of `--from-trace` traces, labelled measured from the trace (median step
/// over the trace's steps), or a lower bound when the trace holds no compute kernel. A trace that cannot be read, or has no complete step, is a usage
/// error naming the flag and the file. Tokens are unknown (0): a trace does not say them.
pub fn read_trace_times(inputs: &[TraceInput]) -> anyhow::Result<Vec<RecordTime>> {
    let mut out = vec![];
    for t in inputs {
        let name = format!("{}={}", t.phase.name(), t.path.display());
        let a = super::analyse(&super::TraceRequest::new(vec![t.path.clone()]))
            .map_err(|e| usage(format!("--from-trace {name}: {e}")))?;
        let st = step_time(&a).map_err(|e| usage(format!("--from-trace {name}: {e}")))?;
        let files: Vec<String> = st.files.iter().map(|f| short_name(Path::new(f))).collect();
        let detail = format!(
            "{} step measured from the trace: median of {} steps ({:.3}..{:.3} ms), {}",
            phase_word(t.phase),
            st.steps,
            st.min_ms,
            st.max_ms,
            st.mode
        );
        // A trace's step is the whole forward as the server ran it, collectives and compute,
        // unless the trace holds no compute kernel at all (a collectives-only replay or
        // stand-in): then it is a lower bound, as a collectives-only record is.
        let collectives_only = a.step.as_ref().is_some_and(|s| s.compute_us.max <= 0.0);
        let (mode, origin) = if collectives_only {
            (
                Mode::Comm,
                Origin::lower_bound(
                    false,
                    files.join(", "),
                    format!(
                        "{detail}; no compute kernel in the trace, {}",
                        missing_part(Mode::Comm)
                    ),
                ),
            )
        } else {
            (
                Mode::Full,
                Origin::read(Source::Measured, files.join(", "), detail),
            )
        };
        out.push(RecordTime {
            mode,
            phase: t.phase,
            ms: Labelled {
                value: st.median_ms,
                origin,
            },
            tokens: 0,
        });
    }
    Ok(out)
}
