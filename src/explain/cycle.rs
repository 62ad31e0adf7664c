//! The speculative cycle of the workload as the cost model prices it: the plain decode forward
//! of the batch, the draft forwards and the verify ([`crate::model::cycle`] builds them), each
//! from a CUDA graph; what [`crate::speculative::cycle`] turns into the step with the engine's
//! calibrated terms.

use crate::costmodel::ModelSettings;
use crate::model::cycle::{draft_groups, Cycle};
use crate::request::Workload;
use crate::speculative::cycle::Forwards;

use super::pricing;

/// The model's graphed forward of one schedule, us, and the profile that priced it.
fn graphed(
    s: &crate::model::Schedule,
    ranks: usize,
    m: &ModelSettings,
) -> anyhow::Result<(f64, String)> {
    let p = pricing::price(s, ranks, m)?;
    let us = p.graph_forward_us().ok_or_else(|| {
        anyhow::anyhow!(
            "the {} forward of {} holds no compute: the cycle cannot be priced",
            s.phase.name(),
            s.model
        )
    })?;
    Ok((us, p.profile))
}

/// The cycle of `workload` with `k` draft steps on `ranks` ranks, built once.
pub(crate) fn build(workload: &Workload, ranks: usize, k: u64) -> anyhow::Result<Cycle> {
    let mut w = workload.clone();
    w.cycle.draft_steps = Some(k);
    w.resolve()?.cycle(ranks as u64)
}

/// The model's prices of `cycle`'s forwards, and the profile's label; `decode_context`: the
/// context at which the user's plain decode step was measured, where it is not the cycle's (the
/// decode is priced there too).
pub(crate) fn forwards(
    cycle: &Cycle,
    workload: &Workload,
    ranks: usize,
    m: &ModelSettings,
    decode_context: Option<u64>,
) -> anyhow::Result<(Forwards, String)> {
    let (decode_at_context_us, profile) = graphed(&cycle.decode, ranks, m)?;
    let decode_us = match decode_context.filter(|&c| c != workload.batch.context) {
        Some(c) => {
            let mut w = workload.clone();
            w.batch.context = c;
            let other = build(&w, ranks, cycle.draft_steps)?;
            graphed(&other.decode, ranks, m)?.0
        }
        None => decode_at_context_us,
    };
    let mut drafts_us = 0.0;
    for (s, n) in draft_groups(&cycle.draft) {
        drafts_us += n as f64 * graphed(s, ranks, m)?.0;
    }
    let f = Forwards {
        decode_us,
        decode_at_context_us,
        verify_us: graphed(&cycle.verify, ranks, m)?.0,
        drafts_us,
        draft_forwards: cycle.draft.len() as u64,
    };
    Ok((f, profile))
}
