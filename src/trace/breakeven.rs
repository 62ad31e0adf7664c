//! Break-even inputs from a trace: the step time it measured (a verify trace gives the verify
//! time, a decode trace the decode time).

use std::path::{Path, PathBuf};

use crate::error::usage;
use crate::evidence::records::{phase_word, run_origin, RecordTime};
use crate::evidence::{short_name, Labelled, Source};
use crate::model::Phase;
use crate::record::Mode;

/// One trace of `breakeven --from-trace ROLE=PATH`: which forward its steps are (`verify`,
/// `decode` or `draft`) and the trace file or folder of traces (one per rank).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TraceInput {
    pub(crate) phase: Phase,
    pub(crate) path: PathBuf,
}

impl std::str::FromStr for TraceInput {
    type Err = String;
    /// `verify=PATH`, `decode=PATH` or `draft=PATH`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (role, path) = s.split_once('=').ok_or_else(|| {
            format!("'{s}' names no role: write verify=PATH, decode=PATH or draft=PATH")
        })?;
        let phase: Phase = role.parse().map_err(|_| {
            format!("role '{role}' is not one of verify, decode, draft (write ROLE=PATH)")
        })?;
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
/// over the trace's steps), or a lower bound when the trace holds no compute kernel. A trace
/// that cannot be read, or has no complete step, is a usage error naming the flag and the file.
/// Tokens are unknown (0): a trace does not say them.
pub(crate) fn read_trace_times(inputs: &[TraceInput]) -> anyhow::Result<Vec<RecordTime>> {
    let mut out = vec![];
    for t in inputs {
        let name = format!("{}={}", t.phase.name(), t.path.display());
        let a = super::analyse(&super::TraceRequest::new(vec![t.path.clone()]))
            .map_err(|e| usage(format!("--from-trace {name}: {e}")))?;
        // A training job's step is no forward of a server: refused, not priced as one.
        let p = t.phase.name();
        crate::evidence::checks::serving_step(
            &super::against::traced_step(&a),
            &format!("--from-trace {p}="),
            p,
            &format!(
                "the trace of the serving engine's {p} steps, or the {p} step's time (--{p}-ms)"
            ),
        )?;
        let Some(s) = a.step.as_ref() else {
            crate::usage_bail!(
                "--from-trace {name}: {}: no complete step found, so no step time",
                a.files.join(", ")
            );
        };
        let files: Vec<String> = a.files.iter().map(|f| short_name(Path::new(f))).collect();
        let detail = format!(
            "{} step measured from the trace: median of {} steps ({:.3}..{:.3} ms), {}",
            phase_word(t.phase),
            s.steps,
            s.step_us.min / 1000.0,
            s.step_us.max / 1000.0,
            s.mode_words()
        );
        // A trace's step is the whole forward as the server ran it, collectives and compute,
        // unless the trace holds no compute kernel at all (a collectives-only replay or
        // stand-in): then it is a lower bound, as a collectives-only record is.
        let mode = if s.compute_us.max <= 0.0 {
            Mode::Comm
        } else {
            Mode::Full
        };
        let why = "no compute kernel in the trace, ";
        let origin = run_origin(Source::Measured, files.join(", "), detail, mode, why);
        let value = s.step_us.median / 1000.0;
        let ms = Labelled { value, origin };
        out.push(RecordTime {
            mode,
            phase: t.phase,
            ms,
            tokens: 0,
            model_tp: None,
        });
    }
    Ok(out)
}
