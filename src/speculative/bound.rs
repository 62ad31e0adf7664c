//! The physical bounds every row of a break-even obeys, in one place (`breakeven`, `explain`
//! and `report` call it).
//!
//! A verify pushes k + 1 tokens through the same weights as a decode step pushes one, on the
//! same GPUs, through the same collectives (of k + 1 times the bytes): on the same machine it is
//! never faster than a decode step launched the same way. Its floor is the decode step plus
//! what the extra tokens add, where that is known (the cost model prices it from the schedule's
//! bytes); else the decode step alone.
//!
//! From that floor the second bound follows: tokens/s with speculation over tokens/s without is
//! tau x T_decode / (k T_draft + T_verify + overhead) <= tau x T_decode / T_verify <= tau, so a
//! row held at the floor never claims a gain above the accept length.

use serde::Serialize;

/// The least time a verify of the workload can take on the machine, ms, and how it was found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Floor {
    pub(crate) ms: f64,
    /// `the decode step 12.2 ms (given) + 0.31 ms that 3 tokens add over 1 (modeled)`.
    pub(crate) how: String,
}

impl Floor {
    /// The decode step alone, `decode_words` saying where it came from.
    pub(crate) fn decode(decode_ms: f64, decode_words: &str) -> Floor {
        Floor {
            ms: decode_ms,
            how: format!(
                "a verify is never faster than a decode step of the same model on the same machine ({} {decode_words})",
                fmt_ms(decode_ms)
            ),
        }
    }

    /// The decode step plus what the verify's extra tokens add (never less than the decode).
    pub(crate) fn decode_plus(
        decode_ms: f64,
        decode_words: &str,
        extra_ms: f64,
        extra_words: &str,
    ) -> Floor {
        let extra = extra_ms.max(0.0);
        Floor {
            ms: decode_ms + extra,
            how: format!(
                "a verify is never faster than a decode step of the same model on the same machine ({} {decode_words}) plus what its extra tokens add ({} {extra_words})",
                fmt_ms(decode_ms),
                fmt_ms(extra)
            ),
        }
    }
}

/// A verify time held to its floor.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Held {
    /// The time the row uses: the candidate, or the floor where the candidate is below it.
    pub(crate) ms: f64,
    /// True when the candidate was below the floor.
    pub(crate) at_floor: bool,
}

/// `candidate_ms` held to `floor` (unchanged without a floor).
pub(crate) fn hold(candidate_ms: f64, floor: Option<&Floor>) -> Held {
    match floor {
        Some(f) if candidate_ms < f.ms => Held {
            ms: f.ms,
            at_floor: true,
        },
        _ => Held {
            ms: candidate_ms,
            at_floor: false,
        },
    }
}

/// Milliseconds as the tables print them (`12.2 ms`, `0.310 ms`).
pub(crate) fn fmt_ms(ms: f64) -> String {
    if ms.abs() >= 10.0 {
        format!("{ms:.1} ms")
    } else if ms.abs() >= 1.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.3} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::speculative::tokens_per_s;

    #[test]
    fn a_candidate_below_the_floor_is_held_and_one_above_is_kept() {
        let f = Floor::decode(12.2, "given");
        assert_eq!(
            hold(8.52, Some(&f)),
            Held {
                ms: 12.2,
                at_floor: true
            }
        );
        assert_eq!(
            hold(30.0, Some(&f)),
            Held {
                ms: 30.0,
                at_floor: false
            }
        );
        assert_eq!(hold(8.52, None).ms, 8.52);
    }

    #[test]
    fn the_extra_tokens_raise_the_floor_and_never_lower_it() {
        let f = Floor::decode_plus(12.2, "given", 0.31, "modeled");
        assert!((f.ms - 12.51).abs() < 1e-12);
        let g = Floor::decode_plus(12.2, "given", -1.0, "modeled");
        assert_eq!(g.ms, 12.2);
        assert!(f.how.contains("12.2 ms given") && f.how.contains("0.310 ms modeled"));
    }

    #[test]
    fn at_the_floor_no_gain_exceeds_the_accept_length() {
        // gain = tau x T_decode / (k T_draft + T_verify + overhead): with T_verify held at
        // T_decode and any draft or overhead >= 0 it is at most tau.
        let decode = 12.2;
        let f = Floor::decode(decode, "given");
        for tau in [1.0, 1.5, 2.5, 3.2, 4.0] {
            for draft in [0.0, 0.5, 3.0] {
                for verify in [1.0, 6.0, 8.52, 12.2, 30.0] {
                    let v = hold(verify, Some(&f)).ms;
                    let gain = tokens_per_s(tau, v, draft, 3, 0.0) / (1000.0 / decode);
                    // never more than the accept length
                    assert!(gain <= tau + 1e-12, "tau {tau} verify {verify}");
                }
            }
        }
    }
}
