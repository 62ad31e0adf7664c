//! The parsers of flag values that clap does not derive: a library enum by name, the CPU list
//! of `--cpu-affinity`, `--impl`'s list, and one parser per kind of number ([`Real`]: times,
//! rates, fractions; [`Whole`]: counts, ranks, seeds; [`Bytes`]: sizes). Every numeric flag of
//! every command goes through one of the three: a value that is not a number, not finite, or
//! outside the flag's stated range is refused while the command line is parsed (exit 2), with
//! one line naming the flag, the value, the range and an example; nothing later sees it (a
//! time of 1e308 s once reached `Duration::from_secs_f64` and panicked).

use std::ffi::OsStr;
use std::marker::PhantomData;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::error::ErrorKind;

use crate::request::Impl;
use crate::util::Named;

/// The clap parser of a library enum: accepts `T::ALL` by name and lists them (with their help
/// lines, a final period dropped as clap drops it from doc comments) in `--help`.
pub fn named<T: Named + Clone>() -> impl TypedValueParser<Value = T> {
    PossibleValuesParser::new(T::ALL.iter().map(|v| {
        let p = PossibleValue::new(v.name());
        let help = v.help();
        if help.is_empty() {
            p
        } else {
            p.help(help.strip_suffix('.').unwrap_or(help))
        }
    }))
    .map(|s| crate::util::parse_named::<T>(&s).expect("clap checked the possible values"))
}

/// `--cpu-affinity`: auto, none or a CPU list whose CPUs this process may run on.
pub(crate) fn affinity_arg(s: &str) -> Result<crate::launch::affinity::CpuAffinity, String> {
    use crate::launch::affinity::{allowed_cpus, format_cpulist, CpuAffinity};
    let a: CpuAffinity = s.parse()?;
    if let (CpuAffinity::List(want), Some(allowed)) = (&a, allowed_cpus(std::path::Path::new("/")))
    {
        let bad: Vec<usize> = want
            .iter()
            .copied()
            .filter(|c| !allowed.contains(c))
            .collect();
        if !bad.is_empty() {
            return Err(format!(
                "CPUs {} are not allowed to this process (allowed: {})",
                format_cpulist(&bad),
                format_cpulist(&allowed)
            ));
        }
    }
    Ok(a)
}

/// `--impl`'s parsed list (clap needs one value type for the whole list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImplList(pub Vec<Impl>);

/// Parses `--impl nccl,oneshot,twoshot`: an unknown name is an error naming `--impl` and the
/// valid names.
pub(crate) fn impl_list(s: &str) -> Result<ImplList, String> {
    Impl::parse_list(s).map(ImplList).map_err(|e| {
        let m = format!("{e:#}");
        m.strip_prefix(&format!("--impl '{s}': "))
            .unwrap_or(&m)
            .to_string()
    })
}

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

/// A time in seconds, greater than 0 and at most `max`.
pub(crate) const fn seconds(max: f64, example: &'static str) -> Real {
    Real {
        what: "a time in seconds",
        min: 0.0,
        above: true,
        max,
        below: false,
        example,
    }
}

/// The longest any timeout may be: 1000000 s (11.6 days).
pub(crate) const MAX_TIMEOUT_S: f64 = 1e6;

/// `--timeout`, `--rendezvous-timeout`, `--point-timeout`.
pub(crate) const TIMEOUT: Real = seconds(MAX_TIMEOUT_S, "60");

/// A time in milliseconds of a speculation cycle's part, at most
/// [`crate::speculative::MAX_TIME_MS`]; greater than 0 unless `zero` (a free draft, no
/// overhead).
pub(crate) const fn millis(zero: bool, example: &'static str) -> Real {
    Real {
        what: "a time in milliseconds",
        min: 0.0,
        above: !zero,
        max: crate::speculative::MAX_TIME_MS,
        below: false,
        example,
    }
}

/// A time in microseconds greater than 0 and at most 1 s.
pub(crate) const MICROS: Real = Real {
    what: "a time in microseconds",
    min: 0.0,
    above: true,
    max: 1e6,
    below: false,
    example: "2.5",
};

/// A probability: an acceptance rate.
pub(crate) const PROBABILITY: Real = Real {
    what: "an acceptance rate (a probability)",
    min: 0.0,
    above: false,
    max: 1.0,
    below: false,
    example: "0.8",
};

/// A mean accept length: 1 (the bonus token) to k + 1 for the most draft steps there are.
pub(crate) const ACCEPT_LENGTH: Real = Real {
    what: "a mean accept length (bonus token included)",
    min: 1.0,
    above: false,
    max: (crate::speculative::MAX_DRAFT_STEPS + 1) as f64,
    below: false,
    example: "2.5",
};

/// `--noise-margin`: a fraction below one half.
pub(crate) const NOISE_MARGIN: Real = Real {
    what: "a fraction",
    min: 0.0,
    above: false,
    max: 0.5,
    below: true,
    example: "0.01 (1%)",
};

/// A link's rate per direction in GB/s: above 0, at most 10 TB/s (NVLink 5 is 0.9 TB/s).
pub(crate) const LINK_GBPS: Real = Real {
    what: "a link rate in GB/s",
    min: 0.0,
    above: true,
    max: 10_000.0,
    below: false,
    example: "63 (PCIe 5.0 x16)",
};

/// `model validate --max-median-pct`: a percentage above 0.
pub(crate) const PERCENT: Real = Real {
    what: "a percentage",
    min: 0.0,
    above: true,
    max: 1000.0,
    below: false,
    example: "10",
};

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

/// A seed: any unsigned 64-bit number.
pub(crate) const fn seed() -> Whole<u64> {
    whole("(a seed)", 0, u64::MAX, "1")
}

/// A size in bytes from `min` to `max`.
pub(crate) const fn bytes(min: u64, max: u64, example: &'static str) -> Bytes {
    Bytes { min, max, example }
}

/// The ranks of a tensor-parallel group: 1 to [`crate::request::MAX_RANKS`].
pub(crate) const fn ranks<T>() -> Whole<T> {
    whole("ranks", 1, crate::request::MAX_RANKS as u64, "8")
}

/// The GPUs of a run, one rank each: 1 to [`crate::request::MAX_RANKS`].
pub(crate) const fn gpus() -> Whole<usize> {
    whole("GPUs", 1, crate::request::MAX_RANKS as u64, "8")
}

/// A rank or a GPU ordinal: 0 to [`crate::request::MAX_RANKS`] - 1.
pub(crate) const fn ordinal<T>() -> Whole<T> {
    whole(
        "(a rank or a GPU ordinal)",
        0,
        crate::request::MAX_RANKS as u64 - 1,
        "0",
    )
}

/// Tokens per forward: 1 to [`crate::request::MAX_TOKENS`].
pub(crate) const fn tokens() -> Whole<u64> {
    whole("tokens per forward", 1, crate::request::MAX_TOKENS, "3")
}

/// Draft steps per speculation cycle: 1 to [`crate::speculative::MAX_DRAFT_STEPS`].
pub(crate) const fn draft_steps() -> Whole<u64> {
    whole("draft steps", 1, crate::speculative::MAX_DRAFT_STEPS, "3")
}

/// Timed iterations: 1 to 10 million (0 leaves nothing to measure).
pub(crate) const fn iters<T>() -> Whole<T> {
    whole("timed iterations", 1, 10_000_000, "200")
}

/// Untimed warm-up iterations: 0 to 1 million.
pub(crate) const fn warmup() -> Whole<u64> {
    whole("warm-up iterations", 0, 1_000_000, "20")
}

/// `--fresh-runs` and `--rounds` (`what`): 1 to [`crate::request::MAX_FRESH_RUNS`] (100)
/// repetitions.
pub(crate) const fn repetitions(what: &'static str) -> Whole<usize> {
    whole(what, 1, crate::request::MAX_FRESH_RUNS as u64, "3")
}

/// `--launches-per-layer`: 0 to 10000 (a real layer launches tens).
pub(crate) const fn launches() -> Whole<u32> {
    whole("kernel launches per layer", 0, 10_000, "20")
}

/// The vocabulary of a draft head: 1 to 2^24 entries (real ones have tens of thousands).
pub(crate) const DRAFT_VOCAB: Whole<u64> = whole("vocabulary entries", 1, 1 << 24, "32000");

/// `collective -f/--stepfactor`: 2 to 1024.
pub(crate) const STEP_FACTOR: Whole<u64> = whole("(the factor between sizes)", 2, 1024, "2");

/// A collective's size: 1 byte to [`crate::request::MAX_COLLECTIVE_BYTES`].
pub(crate) const COLLECTIVE_BYTES: Bytes = bytes(1, crate::request::MAX_COLLECTIVE_BYTES, "8K");

#[cfg(test)]
mod tests {
    use super::*;

    /// `value` through `p` as the value of `--flag`: the value, or the error's one line.
    fn parse<P: TypedValueParser>(p: P, value: &str) -> Result<P::Value, String> {
        let cmd = clap::Command::new("t");
        let arg = clap::Arg::new("flag").long("flag");
        p.parse_ref(&cmd, Some(&arg), OsStr::new(value))
            .map_err(|e| e.to_string().trim_end().to_string())
    }

    #[test]
    fn times_are_finite_positive_and_bounded() {
        assert_eq!(parse(TIMEOUT, "60").unwrap(), 60.0);
        assert_eq!(parse(TIMEOUT, "1e6").unwrap(), 1e6);
        for bad in ["0", "-5", "NaN", "inf", "-inf", "1e308", "1000000.5"] {
            let e = parse(TIMEOUT, bad).unwrap_err();
            assert!(
                e.starts_with("error: --flag ")
                    && e.contains("greater than 0 and at most 1000000, e.g. 60"),
                "{bad}: {e}"
            );
        }
        // the value as a person reads it: 1e308, not 309 digits
        assert!(parse(TIMEOUT, "1e308")
            .unwrap_err()
            .contains("--flag 1e308:"));
        let e = parse(TIMEOUT, "soon").unwrap_err();
        assert!(
            e.contains("--flag 'soon': not a number; give a time in seconds"),
            "{e}"
        );
        // a free draft: 0 taken; a decode step: 0 refused
        assert_eq!(parse(millis(true, "1.5"), "0").unwrap(), 0.0);
        assert!(parse(millis(false, "12.2"), "0").is_err());
    }

    #[test]
    fn fractions_keep_their_open_ends() {
        assert_eq!(parse(NOISE_MARGIN, "0").unwrap(), 0.0);
        assert_eq!(parse(NOISE_MARGIN, "0.49").unwrap(), 0.49);
        let e = parse(NOISE_MARGIN, "0.5").unwrap_err();
        assert!(e.contains("from 0 to 0.5 (0.5 excluded)"), "{e}");
        assert_eq!(parse(PROBABILITY, "1").unwrap(), 1.0);
        assert!(parse(PROBABILITY, "1.01").is_err());
        assert!(parse(ACCEPT_LENGTH, "0.99").is_err());
        assert_eq!(parse(ACCEPT_LENGTH, "65").unwrap(), 65.0);
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
