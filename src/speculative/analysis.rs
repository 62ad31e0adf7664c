//! The break-even of labelled inputs: one row per verify time, the break-even accept length
//! and rate, tokens/s at the given acceptance, and a grid over accept lengths.

use serde::Serialize;

use super::bound::{hold, Floor};
use super::inputs::Inputs;
use super::{
    baseline_tokens_per_s, breakeven_accept_length, cycle_ms, rate_for_accept_length, tokens_per_s,
    ASSUMPTION,
};
use crate::evidence::Labelled;

/// Tokens/s at one accept length.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Point {
    pub(crate) accept_length: f64,
    pub(crate) tokens_per_s: f64,
    /// Tokens/s with speculation over tokens/s without.
    pub(crate) speedup: f64,
    /// True when speculation beats plain decoding here; never for a row whose verify time is
    /// a lower bound (its tokens/s are upper bounds, which prove no gain).
    pub(crate) beats_baseline: bool,
}

/// The break-even of one verify time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Row {
    pub(crate) verify_ms: Labelled,
    /// The verify time the row computes with: `verify_ms`, or the floor where it is below it
    /// (a verify is never faster than a decode step of the same model on the same machine).
    pub(crate) held_verify_ms: f64,
    /// True when `verify_ms` was below the floor and the row is held at it.
    pub(crate) at_floor: bool,
    /// k T_draft + T_verify + overhead.
    pub(crate) cycle_ms: f64,
    /// tau* = cycle / T_decode.
    pub(crate) breakeven_accept_length: f64,
    /// The constant acceptance rate whose expected tokens equal tau* (0 when tau* <= 1);
    /// absent when tau* > k + 1.
    pub(crate) breakeven_accept_rate: Option<f64>,
    /// False when tau* > k + 1: no acceptance can pay for this verify.
    pub(crate) reachable: bool,
    /// At the given acceptance, if any.
    pub(crate) at_accept_length: Option<Point>,
    /// At each of the table's accept lengths.
    pub(crate) grid: Vec<Point>,
    /// True when this row uses a modeled time (its verify, the decode or the draft time).
    pub(crate) modeled: bool,
    /// True when the verify time is a lower bound (a part of the verify only): tau* is then a
    /// lower bound, tokens/s and speedups upper bounds.
    pub(crate) bound: bool,
}

/// A whole break-even.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct BreakevenAnalysis {
    pub(crate) assumption: String,
    pub(crate) inputs: Inputs,
    /// 1000 / T_decode.
    pub(crate) baseline_tokens_per_s: f64,
    /// The least a verify can take here: the decode step ([`super::bound`]).
    pub(crate) floor: Floor,
    pub(crate) rows: Vec<Row>,
    /// Inputs that break a physical bound (a verify faster than the decode step).
    pub(crate) warnings: Vec<String>,
    /// True when any row is modeled (uses a time from the cost model).
    pub(crate) modeled: bool,
}

/// What the engine's step is beyond the given times, as `explain` prices it from the same
/// inputs ([`crate::explain::step_terms`]): the floor of every row (the decode plus what the
/// extra tokens add), the draft forwards of a step (k, or 1 for a block drafter) and the
/// requests per step. Without it a row is the arithmetic of the times alone: held at the decode
/// step, k draft forwards, one request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StepTerms {
    pub(crate) floor: Option<Floor>,
    pub(crate) draft_forwards: u64,
    pub(crate) concurrency: u64,
}

fn point(i: &Inputs, s: &StepTerms, verify: &Labelled, verify_ms: f64, tau: f64) -> Point {
    let base = s.concurrency as f64 * baseline_tokens_per_s(i.decode_ms.value);
    let tps = s.concurrency as f64
        * tokens_per_s(
            tau,
            verify_ms,
            i.draft_ms.value,
            s.draft_forwards,
            i.overhead_ms.value,
        );
    Point {
        accept_length: tau,
        tokens_per_s: tps,
        speedup: tps / base,
        beats_baseline: tps > base && !verify.origin.bound,
    }
}

/// Computes the break-even of validated inputs, the times alone ([`analyse_step`] without
/// the engine's terms).
#[cfg(test)]
pub(crate) fn analyse(inputs: Inputs) -> BreakevenAnalysis {
    let terms = StepTerms {
        floor: None,
        draft_forwards: inputs.draft_steps,
        concurrency: 1,
    };
    analyse_step(inputs, &terms)
}

/// Computes the break-even of validated inputs within the engine's step `terms`: the rows held
/// at its floor, the drafts counted per forward, the tokens/s of its batch.
pub(crate) fn analyse_step(inputs: Inputs, terms: &StepTerms) -> BreakevenAnalysis {
    let base = terms.concurrency as f64 * baseline_tokens_per_s(inputs.decode_ms.value);
    let k = terms.draft_forwards;
    let shared_modeled = inputs.decode_ms.origin.is_modeled()
        || inputs.draft_ms.origin.is_modeled()
        || inputs.overhead_ms.origin.is_modeled();
    let floor = terms.floor.clone().unwrap_or_else(|| {
        Floor::decode(
            inputs.decode_ms.value,
            &format!("T_decode, {}", inputs.decode_ms.origin.kind()),
        )
    });
    let mut warnings = vec![];
    let rows: Vec<Row> = inputs
        .verify_ms
        .iter()
        .map(|v| {
            let held = hold(v.value, Some(&floor));
            let at = if terms.floor.is_some() {
                format!("the floor {:.2} ms ({})", floor.ms, floor.how)
            } else {
                "T_decode".to_string()
            };
            if held.at_floor && v.origin.bound {
                let why = if terms.floor.is_some() {
                    ""
                } else {
                    " (a verify is never faster than a decode step of the same model on the same machine)"
                };
                warnings.push(format!(
                    "T_verify {:.2} ms is a part of the verify only and below T_decode {:.2} ms: the row is held at {at}, the tighter lower bound{why}",
                    v.value, inputs.decode_ms.value
                ));
            } else if held.at_floor && v.value < inputs.decode_ms.value {
                warnings.push(format!(
                    "T_verify {:.2} ms ({}) is faster than T_decode {:.2} ms ({}): {}; was one of them run from a CUDA graph and the other eagerly? The row is held at {at}",
                    v.value,
                    v.origin.kind(),
                    inputs.decode_ms.value,
                    inputs.decode_ms.origin.kind(),
                    "a verify is never faster than a decode step of the same model on the same machine"
                ));
            } else if held.at_floor {
                warnings.push(format!(
                    "T_verify {:.2} ms ({}) is under {at}: the row is held there",
                    v.value,
                    v.origin.kind(),
                ));
            }
            let tau_star = breakeven_accept_length(
                held.ms,
                inputs.draft_ms.value,
                k,
                inputs.overhead_ms.value,
                inputs.decode_ms.value,
            );
            Row {
                verify_ms: v.clone(),
                held_verify_ms: held.ms,
                at_floor: held.at_floor,
                cycle_ms: cycle_ms(held.ms, inputs.draft_ms.value, k, inputs.overhead_ms.value),
                breakeven_accept_length: tau_star,
                breakeven_accept_rate: rate_for_accept_length(tau_star, k),
                reachable: tau_star <= (k + 1) as f64,
                at_accept_length: inputs
                    .accept_length
                    .as_ref()
                    .map(|t| point(&inputs, terms, v, held.ms, t.value)),
                grid: inputs
                    .table_accept_lengths
                    .iter()
                    .map(|&t| point(&inputs, terms, v, held.ms, t))
                    .collect(),
                // a row held at a floor the engine terms priced is modeled too
                modeled: shared_modeled
                    || v.origin.is_modeled()
                    || (held.at_floor && terms.floor.is_some()),
                bound: v.origin.bound,
            }
        })
        .collect();
    let modeled = rows.iter().any(|r| r.modeled);
    BreakevenAnalysis {
        assumption: ASSUMPTION.into(),
        inputs,
        baseline_tokens_per_s: base,
        floor,
        rows,
        warnings,
        modeled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::speculative::inputs::{resolve, Acceptance, Flags};

    #[test]
    fn worked_example_rows() {
        let a = analyse(
            resolve(
                &Flags {
                    decode_ms: Some(12.2),
                    verify_ms: vec![30.0, 19.0, 12.0],
                    draft_ms: Some(1.0),
                    draft_steps: Some(3),
                    acceptance: Some(Acceptance::Length(2.5)),
                    ..Default::default()
                },
                &[],
                true,
            )
            .unwrap(),
        );
        assert!((a.baseline_tokens_per_s - 81.967).abs() < 1e-3);
        let taus: Vec<f64> = a.rows.iter().map(|r| r.breakeven_accept_length).collect();
        assert!((taus[0] - 33.0 / 12.2).abs() < 1e-12);
        // 12 ms is below the decode step of 12.2 ms: the row is held at 12.2 ms (a verify is
        // never faster than a decode step), cycle 3 x 1 + 12.2 = 15.2 ms.
        assert!((taus[2] - 15.2 / 12.2).abs() < 1e-12);
        assert!(a.rows.iter().all(|r| r.reachable));
        let r12 = &a.rows[2];
        assert!(r12.at_floor && !a.rows[0].at_floor && !a.rows[1].at_floor);
        assert_eq!(r12.held_verify_ms, 12.2);
        assert_eq!(a.warnings.len(), 1);
        let p = r12.at_accept_length.as_ref().unwrap();
        // 1000 x 2.5 / 15.2 = 164.474 tok/s, 2.006x the 81.967 without speculation (<= 2.5).
        assert!((p.tokens_per_s - 164.474).abs() < 1e-3);
        assert!(p.beats_baseline);
        // tau = 2.5 does not pay at verify 30 ms (tau* = 2.70).
        assert!(!a.rows[0].at_accept_length.as_ref().unwrap().beats_baseline);
        // The grid's cells beat the baseline exactly above tau*.
        for r in &a.rows {
            for p in &r.grid {
                assert_eq!(
                    p.beats_baseline,
                    p.accept_length > r.breakeven_accept_length
                );
            }
        }
        assert!(!a.modeled);
    }

    #[test]
    fn a_verify_faster_than_the_decode_is_warned_about_and_held_at_it() {
        // breakeven --decode-ms 12.2 --verify-ms 6 --draft-steps 3 --accept-length 2.5: as
        // given, 2.5 / 6 ms = 416.7 tok/s, 5.08x decoding, twice the accept length; held at
        // the decode step: 2.5 / 12.2 ms = 204.9 tok/s, 2.5x exactly.
        let a = analyse(
            resolve(
                &Flags {
                    decode_ms: Some(12.2),
                    verify_ms: vec![6.0],
                    draft_steps: Some(3),
                    acceptance: Some(Acceptance::Length(2.5)),
                    ..Default::default()
                },
                &[],
                true,
            )
            .unwrap(),
        );
        let r = &a.rows[0];
        assert!(r.at_floor);
        assert_eq!(r.held_verify_ms, 12.2);
        let p = r.at_accept_length.as_ref().unwrap();
        assert!((p.tokens_per_s - 2500.0 / 12.2).abs() < 1e-9);
        assert!((p.speedup - 2.5).abs() < 1e-12);
        assert!(r.grid.iter().all(|g| g.speedup <= g.accept_length + 1e-12));
        assert!(a.warnings[0].contains("faster than T_decode 12.20 ms"));
    }

    #[test]
    fn unreachable_breakeven() {
        let a = analyse(
            resolve(
                &Flags {
                    decode_ms: Some(10.0),
                    verify_ms: vec![50.0],
                    draft_steps: Some(3),
                    ..Default::default()
                },
                &[],
                true,
            )
            .unwrap(),
        );
        assert!(!a.rows[0].reachable);
        assert_eq!(a.rows[0].breakeven_accept_rate, None);
    }
}
