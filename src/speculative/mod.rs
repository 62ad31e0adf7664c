//! Speculative-decoding break-even: when does drafting k tokens and verifying k + 1 of them in
//! one forward beat plain decoding?
//!
//! The model is the batch-1 cycle of EAGLE-3 / MTP / n-gram speculation as SGLang runs it with
//! topk = 1: draft k tokens one after another (k x T_draft), verify the k + 1 tokens in one
//! target forward (T_verify), pay a fixed per-cycle overhead (draft extend, sampling), and keep
//! tau tokens on average (SGLang's "accept length": accepted draft tokens plus the bonus token,
//! so 1 <= tau <= k + 1). Plain decoding makes one token per T_decode.
//!
//! tokens/s with speculation = tau / cycle, cycle = k T_draft + T_verify + overhead;
//! break-even accept length tau* = cycle / T_decode.
//!
//! Batch 1 is the assumption: one sequence, so a verify forward serves exactly one request and
//! nothing else competes for the step. With larger batches the verify forward grows with the
//! batch and the baseline is a batched decode step; this module does not model that.
//!
//! [`analysis`] is pure arithmetic on f64 milliseconds and computes the table the CLI and
//! report show; [`inputs`] checks the flags and merges them with the times read from records
//! and traces ([`crate::evidence`] reads them) into labelled inputs.

pub(crate) mod analysis;
pub(crate) mod bound;
pub(crate) mod cycle;
pub(crate) mod inputs;

use crate::error::usage;

/// The one-line statement of the assumption, printed with every result.
pub(crate) const ASSUMPTION: &str = "batch 1 (one sequence): each cycle drafts k tokens one after another, verifies k+1 tokens in one target forward, and keeps tau of them (accept length, bonus token included)";

/// Expected tokens per cycle with a constant per-position acceptance rate `alpha` and `k`
/// draft tokens: 1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha), and k + 1 at
/// alpha = 1.
pub(crate) fn expected_tokens_const_rate(alpha: f64, k: u64) -> f64 {
    // The sum form (the same rate at every position) is exact at alpha = 1 and has no
    // cancellation near it.
    expected_tokens_rates(&vec![alpha; k as usize])
}

/// Expected tokens per cycle with per-position acceptance rates (rate i = probability that
/// draft token i is accepted given tokens 1..i-1 were): 1 + r1 + r1 r2 + r1 r2 r3 + ...
pub(crate) fn expected_tokens_rates(rates: &[f64]) -> f64 {
    let mut sum = 1.0;
    let mut p = 1.0;
    for r in rates {
        p *= r;
        sum += p;
    }
    sum
}

/// Milliseconds of one speculation cycle: k draft steps, one verify, the fixed overhead.
pub(crate) fn cycle_ms(verify_ms: f64, draft_ms: f64, steps: u64, overhead_ms: f64) -> f64 {
    steps as f64 * draft_ms + verify_ms + overhead_ms
}

/// Tokens/s of plain decoding: 1000 / T_decode.
pub(crate) fn baseline_tokens_per_s(decode_ms: f64) -> f64 {
    1000.0 / decode_ms
}

/// Tokens/s with speculation at accept length `accept_length`: tau / cycle.
pub(crate) fn tokens_per_s(
    accept_length: f64,
    verify_ms: f64,
    draft_ms: f64,
    steps: u64,
    overhead_ms: f64,
) -> f64 {
    1000.0 * accept_length / cycle_ms(verify_ms, draft_ms, steps, overhead_ms)
}

/// The accept length at which speculation exactly matches plain decoding:
/// tau* = (k T_draft + T_verify + overhead) / T_decode. Below 1 it pays at any acceptance;
/// above k + 1 it cannot pay.
pub(crate) fn breakeven_accept_length(
    verify_ms: f64,
    draft_ms: f64,
    steps: u64,
    overhead_ms: f64,
    decode_ms: f64,
) -> f64 {
    cycle_ms(verify_ms, draft_ms, steps, overhead_ms) / decode_ms
}

/// The constant acceptance rate alpha with expected tokens `tau` for `k` draft tokens, by
/// bisection on the increasing function alpha -> 1 + alpha + ... + alpha^k.
/// `Some(0.0)` when tau <= 1 (any rate reaches it), `None` when tau > k + 1 (unreachable) or
/// tau is not a number.
pub(crate) fn rate_for_accept_length(tau: f64, k: u64) -> Option<f64> {
    if tau.is_nan() || tau > (k + 1) as f64 {
        return None;
    }
    if tau <= 1.0 {
        return Some(0.0);
    }
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if expected_tokens_const_rate(mid, k) < tau {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(0.5 * (lo + hi))
}

/// The default accept lengths of a table: 1.5, 2.0, ..., 4.0, those not above k + 1.
pub(crate) fn default_accept_lengths(k: u64) -> Vec<f64> {
    (3..=8)
        .map(|i| i as f64 * 0.5)
        .filter(|&t| t <= (k + 1) as f64 + 1e-9)
        .collect()
}

/// The longest time any break-even input may be: 1000 s (a decode step takes milliseconds).
pub(crate) const MAX_TIME_MS: f64 = 1e6;
/// The most draft steps per cycle (--draft-steps): speculative decoding drafts a handful.
pub(crate) const MAX_DRAFT_STEPS: u64 = 64;

/// A time flag must be a finite number of at most [`MAX_TIME_MS`]; `positive` ones (decode, verify) must be > 0, the
/// others (draft, overhead) >= 0.
pub(crate) fn check_time(name: &str, v: f64, positive: bool) -> anyhow::Result<f64> {
    if !v.is_finite() || v < 0.0 || (positive && v == 0.0) || v > MAX_TIME_MS {
        let need = if positive {
            "a time in milliseconds greater than 0 and at most 1000000 (1000 s)"
        } else {
            "a time in milliseconds, 0 to 1000000 (1000 s)"
        };
        return Err(usage(format!(
            "{name} {}: need {need}",
            crate::util::fmt_number(v)
        )));
    }
    Ok(v)
}

/// An acceptance rate must lie in [0, 1].
pub(crate) fn check_rate(name: &str, r: f64) -> anyhow::Result<f64> {
    if !(0.0..=1.0).contains(&r) {
        return Err(usage(format!(
            "{name} {}: an acceptance rate is a probability between 0 and 1",
            crate::util::fmt_number(r)
        )));
    }
    Ok(r)
}

/// An accept length must lie in [1, k + 1] (the bonus token is always kept; at most all k
/// draft tokens are accepted).
pub(crate) fn check_accept_length(name: &str, tau: f64, k: u64) -> anyhow::Result<f64> {
    if !(1.0..=(k + 1) as f64).contains(&tau) {
        return Err(usage(format!(
            "{name} {}: the accept length (bonus token included) lies between 1 and k+1 = {} for {k} draft steps",
            crate::util::fmt_number(tau),
            k + 1
        )));
    }
    Ok(tau)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, eps: f64) -> bool {
        (a - b).abs() <= eps
    }

    #[test]
    fn alpha_zero_keeps_only_the_bonus_token() {
        for k in 0..6 {
            assert_eq!(expected_tokens_const_rate(0.0, k), 1.0);
        }
    }

    #[test]
    fn alpha_one_keeps_all_k_plus_one() {
        for k in 0..6 {
            assert_eq!(expected_tokens_const_rate(1.0, k), (k + 1) as f64);
        }
    }

    #[test]
    fn constant_rate_matches_closed_form() {
        for &a in &[0.1f64, 0.5, 0.7, 0.9, 0.99] {
            for k in 1..8u64 {
                let closed = (1.0 - a.powi(k as i32 + 1)) / (1.0 - a);
                assert!(close(expected_tokens_const_rate(a, k), closed, 1e-12));
            }
        }
    }

    #[test]
    fn per_position_rates() {
        assert_eq!(expected_tokens_rates(&[]), 1.0);
        // 1 + 0.8 + 0.8*0.6 + 0.8*0.6*0.45 = 2.496
        assert!(close(
            expected_tokens_rates(&[0.8, 0.6, 0.45]),
            2.496,
            1e-12
        ));
        assert_eq!(expected_tokens_rates(&[1.0, 1.0, 1.0]), 4.0);
        assert_eq!(expected_tokens_rates(&[0.0, 1.0, 1.0]), 1.0);
        // Equal rates are the constant-rate case.
        assert!(close(
            expected_tokens_rates(&[0.7; 4]),
            expected_tokens_const_rate(0.7, 4),
            1e-12
        ));
    }

    #[test]
    fn rate_inverts_expected_tokens() {
        for k in 1..6u64 {
            for &a in &[0.05, 0.3, 0.6, 0.85, 0.999] {
                let tau = expected_tokens_const_rate(a, k);
                let back = rate_for_accept_length(tau, k).unwrap();
                assert!(close(back, a, 1e-9), "k={k} a={a} back={back}");
            }
        }
        assert_eq!(rate_for_accept_length(1.0, 3), Some(0.0));
        assert_eq!(rate_for_accept_length(0.5, 3), Some(0.0));
        assert!(close(rate_for_accept_length(4.0, 3).unwrap(), 1.0, 1e-9));
        assert_eq!(rate_for_accept_length(4.01, 3), None);
        assert_eq!(rate_for_accept_length(f64::NAN, 3), None);
    }

    /// The worked example: plain decode 12.2 ms (82 tok/s); verify 30, 19, 12 ms; k = 3.
    #[test]
    fn worked_example() {
        assert!(close(baseline_tokens_per_s(12.2), 81.967, 1e-3));
        // Free drafting: tau* = T_verify / T_decode.
        assert!(close(
            breakeven_accept_length(30.0, 0.0, 3, 0.0, 12.2),
            2.459,
            1e-3
        ));
        assert!(close(
            breakeven_accept_length(19.0, 0.0, 3, 0.0, 12.2),
            1.557,
            1e-3
        ));
        assert!(close(
            breakeven_accept_length(12.0, 0.0, 3, 0.0, 12.2),
            0.984,
            1e-3
        ));
        // 1 ms per draft step, 3 steps.
        assert!(close(
            breakeven_accept_length(30.0, 1.0, 3, 0.0, 12.2),
            2.705,
            1e-3
        ));
        assert!(close(
            breakeven_accept_length(19.0, 1.0, 3, 0.0, 12.2),
            1.803,
            1e-3
        ));
        assert!(close(
            breakeven_accept_length(12.0, 1.0, 3, 0.0, 12.2),
            1.230,
            1e-3
        ));
        // At verify 12 ms, 167 tok/s needs tau = 2 without draft cost, 2.5 with 3 x 1 ms.
        assert!(close(tokens_per_s(2.0, 12.0, 0.0, 3, 0.0), 166.667, 1e-3));
        assert!(close(tokens_per_s(2.5, 12.0, 1.0, 3, 0.0), 166.667, 1e-3));
        // At verify 30 ms, even tau = 3.5 stays near the baseline with drafting cost.
        assert!(close(tokens_per_s(3.5, 30.0, 1.0, 3, 0.0), 106.061, 1e-3));
        assert!(close(tokens_per_s(2.0, 30.0, 0.0, 3, 0.0), 66.667, 1e-3));
        // The break-even rate for verify 30 ms, free drafting: 1 + a + a^2 + a^3 = 2.459.
        let a = rate_for_accept_length(30.0 / 12.2, 3).unwrap();
        assert!(close(expected_tokens_const_rate(a, 3), 30.0 / 12.2, 1e-9));
        assert!(a > 0.6 && a < 0.7, "{a}");
    }

    #[test]
    fn throughput_rises_with_tau_and_falls_with_verify_time() {
        let taus = [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0];
        for w in taus.windows(2) {
            assert!(tokens_per_s(w[1], 19.0, 1.0, 3, 0.5) > tokens_per_s(w[0], 19.0, 1.0, 3, 0.5));
        }
        let vs = [5.0, 12.0, 19.0, 30.0, 60.0];
        for w in vs.windows(2) {
            assert!(tokens_per_s(2.5, w[1], 1.0, 3, 0.5) < tokens_per_s(2.5, w[0], 1.0, 3, 0.5));
            assert!(
                breakeven_accept_length(w[1], 1.0, 3, 0.5, 12.2)
                    > breakeven_accept_length(w[0], 1.0, 3, 0.5, 12.2)
            );
        }
        // Expected tokens rise with alpha.
        let mut last = 0.0;
        for i in 0..=20 {
            let t = expected_tokens_const_rate(i as f64 / 20.0, 3);
            assert!(t > last);
            last = t;
        }
    }

    #[test]
    fn at_breakeven_speculation_matches_the_baseline() {
        let tau = breakeven_accept_length(19.0, 1.0, 3, 0.5, 12.2);
        assert!(close(
            tokens_per_s(tau, 19.0, 1.0, 3, 0.5),
            baseline_tokens_per_s(12.2),
            1e-9
        ));
    }

    #[test]
    fn default_columns_are_capped_at_k_plus_one() {
        assert_eq!(
            default_accept_lengths(3),
            vec![1.5, 2.0, 2.5, 3.0, 3.5, 4.0]
        );
        assert_eq!(default_accept_lengths(1), vec![1.5, 2.0]);
        assert_eq!(default_accept_lengths(8).len(), 6);
    }

    #[test]
    fn validation() {
        assert!(check_time("--decode-ms", 0.0, true).is_err());
        assert!(check_time("--decode-ms", -1.0, true).is_err());
        assert!(check_time("--decode-ms", f64::NAN, true).is_err());
        assert!(check_time("--draft-ms", 0.0, false).is_ok());
        assert!(check_time("--draft-ms", -0.1, false).is_err());
        assert!(check_rate("--accept-rate", 1.1).is_err());
        assert!(check_rate("--accept-rate", -0.1).is_err());
        assert!(check_rate("--accept-rate", f64::NAN).is_err());
        assert!(check_rate("--accept-rate", 1.0).is_ok());
        assert!(check_accept_length("--accept-length", 0.9, 3).is_err());
        assert!(check_accept_length("--accept-length", 4.1, 3).is_err());
        assert!(check_accept_length("--accept-length", 4.0, 3).is_ok());
        let e = check_accept_length("--accept-length", 5.0, 3).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
    }
}
