//! One parser per kind of number a flag takes ([`Real`]: times, rates, fractions; [`Whole`]:
//! counts, ranks, seeds; [`Bytes`]: sizes), each with its range; the kinds themselves (a
//! timeout, a time in ms, the ranks, ...) are named in [`super::values`]. A value that is not a
//! number, not finite, or outside the range is refused while the command line is parsed (exit
//! 2), with one line naming the flag, the value, the range and an example: nothing later sees
//! it (a time of 1e308 s once reached `Duration::from_secs_f64` and panicked).

use std::ffi::OsStr;
use std::marker::PhantomData;

use clap::builder::TypedValueParser;
use clap::error::ErrorKind;

/// The refusal of `value` given to `arg`: `--flag VALUE: why` (`-n/--iters VALUE: why` for a
/// flag with a short name), one line, exit 2. The value is shown escaped and cut (it may hold
/// anything).
fn refuse(cmd: &clap::Command, arg: Option<&clap::Arg>, value: &str, why: &str) -> clap::Error {
    let flag = match arg.map(|a| (a.get_short(), a.get_long())) {
        Some((Some(s), Some(l))) => format!("-{s}/--{l}"),
        Some((None, Some(l))) => format!("--{l}"),
        _ => arg.map_or("a flag".into(), |a| a.get_id().to_string()),
    };
    let shown = crate::util::escaped(value, 40);
    let mut e = clap::Error::raw(
        ErrorKind::ValueValidation,
        format!("{flag} {shown}: {why}\n"),
    );
    e = e.with_cmd(cmd);
    e
}

/// A flag's value as text (a value that is not UTF-8 is no number either).
fn text(value: &OsStr) -> String {
    value.to_string_lossy().trim().to_string()
}

/// A real number a flag takes: what it is, its range and an example, e.g. a time in seconds
/// greater than 0 and at most 1000000. Non-finite values (NaN, inf) are never taken.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Real {
    what: &'static str,
    min: f64,
    /// The minimum itself is refused (a timeout of 0 s).
    above: bool,
    max: f64,
    /// The maximum itself is refused (a noise margin of 0.5).
    below: bool,
    example: &'static str,
}

impl Real {
    /// This range with its minimum refused: greater than the minimum.
    pub(crate) const fn min_excluded(self) -> Real {
        Real {
            above: true,
            ..self
        }
    }

    /// This range with its maximum refused: less than the maximum.
    pub(crate) const fn max_excluded(self) -> Real {
        Real {
            below: true,
            ..self
        }
    }

    /// The range in words: `greater than 0 and at most 1000000`, `from 0 to 0.5 (0.5 excluded)`.
    fn range(&self) -> String {
        let (lo, hi) = (
            crate::util::fmt_number(self.min),
            crate::util::fmt_number(self.max),
        );
        match (self.above, self.below) {
            (true, false) => format!("greater than {lo} and at most {hi}"),
            (true, true) => format!("greater than {lo} and less than {hi}"),
            (false, false) => format!("from {lo} to {hi}"),
            (false, true) => format!("from {lo} to {hi} ({hi} excluded)"),
        }
    }

    fn why(&self) -> String {
        format!("give {} {}, e.g. {}", self.what, self.range(), self.example)
    }

    /// Whether `v` lies in the range (NaN does not).
    pub(crate) fn holds(&self, v: f64) -> bool {
        v.is_finite()
            && (if self.above {
                v > self.min
            } else {
                v >= self.min
            })
            && (if self.below {
                v < self.max
            } else {
                v <= self.max
            })
    }
}

impl TypedValueParser for Real {
    type Value = f64;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<f64, clap::Error> {
        let s = text(value);
        match s.parse::<f64>() {
            Ok(v) if self.holds(v) => Ok(v),
            Ok(v) => Err(refuse(cmd, arg, &crate::util::fmt_number(v), &self.why())),
            Err(_) => Err(refuse(
                cmd,
                arg,
                &format!("'{s}'"),
                &format!("not a number; {}", self.why()),
            )),
        }
    }
}

/// A whole number a flag takes (a count, a rank, an ordinal, a seed) of type `T`, within
/// `min..=max`.
#[derive(Debug)]
pub(crate) struct Whole<T> {
    /// What is counted, plural (`ranks`, `timed iterations`: "give 1 to 1024 ranks"), or in
    /// parentheses what the number is (`(a seed)`).
    what: &'static str,
    min: u64,
    max: u64,
    example: &'static str,
    of: PhantomData<fn() -> T>,
}

impl<T> Clone for Whole<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Whole<T> {}

impl<T> Whole<T> {
    fn why(&self) -> String {
        format!(
            "give {} to {} {}, e.g. {}",
            self.min, self.max, self.what, self.example
        )
    }
}

impl<T: TryFrom<u64> + Clone + Send + Sync + 'static> TypedValueParser for Whole<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<T, clap::Error> {
        let s = text(value);
        let refused = |shown: &str, why: String| Err(refuse(cmd, arg, shown, &why));
        match s.parse::<u64>() {
            Ok(v) if (self.min..=self.max).contains(&v) => {
                T::try_from(v).or_else(|_| refused(&s, self.why()))
            }
            Ok(_) => refused(&s, self.why()),
            // -1, 1e308, 2.5, inf: a number, but not a whole one in the range
            Err(_) => match s.parse::<f64>() {
                Ok(v) => refused(&crate::util::fmt_number(v), self.why()),
                Err(_) => refused(&format!("'{s}'"), format!("not a number; {}", self.why())),
            },
        }
    }
}

/// A size in bytes a flag takes (`43008`, `8K`, `1M`, `2G`), within `min..=max`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bytes {
    min: u64,
    max: u64,
    example: &'static str,
}

impl TypedValueParser for Bytes {
    type Value = u64;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<u64, clap::Error> {
        let s = text(value);
        let why = format!(
            "give a size in bytes, at least {} and at most {} (K, M, G: 1024, 1024^2, 1024^3), e.g. {}",
            show_bytes(self.min),
            show_bytes(self.max),
            self.example
        );
        match crate::units::parse_size(&s) {
            Ok(v) if (self.min..=self.max).contains(&v) => Ok(v),
            _ => Err(refuse(cmd, arg, &s, &why)),
        }
    }
}

/// `16G` for a whole number of GiB, `1M`, `8K`, else the bytes.
fn show_bytes(b: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if b >= 1 << shift && b % (1 << shift) == 0 {
            return format!("{}{unit}", b >> shift);
        }
    }
    b.to_string()
}

/// A whole number of `what` (see [`Whole`]) from `min` to `max`.
pub(crate) const fn whole<T>(
    what: &'static str,
    min: u64,
    max: u64,
    example: &'static str,
) -> Whole<T> {
    Whole {
        what,
        min,
        max,
        example,
        of: PhantomData,
    }
}

/// A real number, `what` it is, from `min` to `max`, both taken (see [`Real::min_excluded`] and
/// [`Real::max_excluded`]).
pub(crate) const fn real(what: &'static str, min: f64, max: f64, example: &'static str) -> Real {
    Real {
        what,
        min,
        above: false,
        max,
        below: false,
        example,
    }
}

/// A size in bytes from `min` to `max`.
pub(crate) const fn bytes(min: u64, max: u64, example: &'static str) -> Bytes {
    Bytes { min, max, example }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cli::values::*;

    /// `value` through `p` as the value of `--flag`: the value, or the error's one line.
    pub(crate) fn parse<P: TypedValueParser>(p: P, value: &str) -> Result<P::Value, String> {
        let cmd = clap::Command::new("t");
        let arg = clap::Arg::new("flag").long("flag");
        p.parse_ref(&cmd, Some(&arg), OsStr::new(value))
            .map_err(|e| e.to_string().trim_end().to_string())
    }

    #[test]
    fn whole_numbers_name_their_range_whatever_the_bad_value() {
        assert_eq!(parse(ranks::<u64>(), "1024").unwrap(), 1024);
        for bad in [
            "0",
            "-1",
            "NaN",
            "inf",
            "1e308",
            "2.5",
            "1025",
            "99999999999999999999999",
        ] {
            let e = parse(ranks::<u64>(), bad).unwrap_err();
            assert!(e.contains("give 1 to 1024 ranks, e.g. 8"), "{bad}: {e}");
        }
        assert!(parse(ranks::<u64>(), "x")
            .unwrap_err()
            .contains("--flag 'x': not a number"));
        // a seed takes every u64, 0 included
        assert_eq!(parse(seed(), "0").unwrap(), 0);
        assert_eq!(parse(seed(), "18446744073709551615").unwrap(), u64::MAX);
        assert!(parse(seed(), "-1").is_err());
        // the value type is the flag's: a u32 past its range is refused, not wrapped
        assert_eq!(parse(launches(), "10000").unwrap(), 10_000u32);
        assert!(parse(launches(), "10001").is_err());
    }

    #[test]
    fn sizes_take_suffixes_within_their_range() {
        assert_eq!(parse(COLLECTIVE_BYTES, "8K").unwrap(), 8192);
        assert_eq!(parse(COLLECTIVE_BYTES, "16G").unwrap(), 16 << 30);
        for bad in ["0", "-1", "NaN", "inf", "1e308", "17G", "99999999999G"] {
            let e = parse(COLLECTIVE_BYTES, bad).unwrap_err();
            assert!(
                e.contains("give a size in bytes, at least 1 and at most 16G"),
                "{bad}: {e}"
            );
        }
        assert_eq!(show_bytes(1 << 40), "1T");
        assert_eq!(show_bytes(16), "16");
        assert_eq!(show_bytes(3 << 20), "3M");
    }

    #[test]
    fn a_value_with_control_characters_is_shown_escaped() {
        let e = parse(TIMEOUT, "1\u{1b}[2J").unwrap_err();
        assert!(e.contains("'1\\u{1b}[2J'"), "{e}");
    }
}
