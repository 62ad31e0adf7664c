//! `--observed COUNTxTIME`: what a profiler shows inside the collectives of one verify, as a
//! user reads it off the timeline ("122 all-reduces of about 0.2 ms").

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// The most collectives one verify may hold (a forward has a few hundred).
pub(crate) const MAX_COUNT: u64 = 100_000;
/// The longest one collective may take: 1 s.
pub(crate) const MAX_TIME_US: f64 = 1e6;

/// COUNT collectives of TIME each, per verify.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Observed {
    pub(crate) count: u64,
    /// Time of one collective as the profiler shows it (transfer + waiting), us.
    pub(crate) time_us: f64,
}

impl Observed {
    /// COUNT x TIME, us.
    pub(crate) fn total_us(&self) -> f64 {
        self.count as f64 * self.time_us
    }
}

impl fmt::Display for Observed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.time_us >= 1000.0 {
            write!(
                f,
                "{}x{}ms",
                self.count,
                crate::util::fmt_number(self.time_us / 1000.0)
            )
        } else {
            write!(
                f,
                "{}x{}us",
                self.count,
                crate::util::fmt_number(self.time_us)
            )
        }
    }
}

impl FromStr for Observed {
    type Err = String;

    /// `122x0.2ms`, `122x200us`, `122 x 0.2 ms`. The unit is required (ms or us).
    fn from_str(s: &str) -> Result<Observed, String> {
        let t: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        let example = "write the profiler's collective count per verify and the time of one, e.g. 122x0.2ms or 122x200us";
        let (c, time) = t
            .split_once(['x', 'X', '*'])
            .ok_or_else(|| format!("'{s}' is not COUNTxTIME: {example}"))?;
        // `1e9` or 123456789012345678901 is a whole number, too large: say so, not "not whole"
        let count: u64 = match (c.parse::<u64>(), c.parse::<f64>()) {
            (Ok(n), _) => n,
            (Err(_), Ok(f)) if f.is_finite() && f.fract() == 0.0 && f >= 1.0 => u64::MAX,
            _ => {
                return Err(format!(
                    "'{s}': the count '{c}' is not a whole number: {example}"
                ))
            }
        };
        if !(1..=MAX_COUNT).contains(&count) {
            return Err(format!(
                "'{s}': the count {c} is outside 1..={MAX_COUNT} collectives per verify"
            ));
        }
        let lower = time.to_ascii_lowercase();
        let (num, scale) = if let Some(n) = lower.strip_suffix("ms") {
            (n, 1000.0)
        } else if let Some(n) = lower
            .strip_suffix("us")
            .or_else(|| lower.strip_suffix("µs"))
        {
            (n, 1.0)
        } else {
            return Err(format!(
                "'{s}': the time '{time}' has no unit: give ms or us, e.g. 122x0.2ms or 122x200us"
            ));
        };
        let v: f64 = num
            .parse()
            .map_err(|_| format!("'{s}': the time '{time}' is not a number: {example}"))?;
        let us = v * scale;
        if !us.is_finite() || us <= 0.0 || us > MAX_TIME_US {
            return Err(format!(
                "'{s}': the time of one collective must be above 0 and at most 1 s"
            ));
        }
        Ok(Observed { count, time_us: us })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_counts_times_and_units() {
        let o: Observed = "122x0.2ms".parse().unwrap();
        assert_eq!(o.count, 122);
        assert!((o.time_us - 200.0).abs() < 1e-9);
        // 122 x 200 us = 24,400 us
        assert!((o.total_us() - 24_400.0).abs() < 1e-6);
        let o: Observed = "8 x 35us".parse().unwrap();
        assert_eq!((o.count, o.time_us), (8, 35.0));
        assert_eq!("122X1.5MS".parse::<Observed>().unwrap().time_us, 1500.0);
        assert_eq!(o.to_string(), "8x35us");
        assert_eq!(
            "122x0.2ms".parse::<Observed>().unwrap().to_string(),
            "122x200us"
        );
    }

    #[test]
    fn refuses_malformed_values_with_what_to_give() {
        for (bad, says) in [
            ("122", "not COUNTxTIME"),
            ("x0.2ms", "not a whole number"),
            ("1.5x0.2ms", "not a whole number"),
            ("1e9x1ms", "the count 1e9 is outside 1..="),
            ("99999999999999999999999x1ms", "is outside 1..="),
            ("0x0.2ms", "outside 1..="),
            ("122x0.2", "has no unit"),
            ("122xfastms", "not a number"),
            ("122x0ms", "above 0"),
            ("122x-1ms", "above 0"),
            ("122x2000ms", "at most 1 s"),
        ] {
            let e = bad.parse::<Observed>().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
