//! The parsers of flag values that clap does not derive: a library enum by name, the CPU list
//! of `--cpu-affinity`, `--impl`'s list, and every kind of number a flag takes (a timeout, a
//! time in ms, the ranks, a size, ...), each one of [`super::numbers`]' three parsers with its
//! range: every numeric flag of every command names one of these kinds.

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};

pub(crate) use super::numbers::{bytes, real, whole, Bytes, Real, Whole};
use crate::request::Impl;
use crate::util::Named;

/// The clap parser of a library enum: accepts `T::ALL` by name and lists them (with their help
/// lines, a final period dropped as clap drops it from doc comments) in `--help`.
pub(crate) fn named<T: Named + Clone>() -> impl TypedValueParser<Value = T> {
    named_of(T::ALL)
}

/// [`named`] offering only the values `offered` (`--format` without markdown where a command
/// has no Markdown table).
pub(crate) fn named_of<T: Named + Clone>(
    offered: &'static [T],
) -> impl TypedValueParser<Value = T> {
    PossibleValuesParser::new(offered.iter().map(|v| {
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
pub(crate) struct ImplList(pub(crate) Vec<Impl>);

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

/// A time in seconds, greater than 0 and at most `max`.
pub(crate) const fn seconds(max: f64, example: &'static str) -> Real {
    real("a time in seconds", 0.0, max, example).min_excluded()
}

/// The longest any timeout may be: 1000000 s (11.6 days).
pub(crate) const MAX_TIMEOUT_S: f64 = 1e6;

/// `--timeout`, `--rendezvous-timeout`, `--point-timeout`.
pub(crate) const TIMEOUT: Real = seconds(MAX_TIMEOUT_S, "60");

/// A time in milliseconds of a speculation cycle's part, at most
/// [`crate::speculative::MAX_TIME_MS`]; greater than 0 unless `zero` (a free draft, no
/// overhead).
pub(crate) const fn millis(zero: bool, example: &'static str) -> Real {
    let r = real(
        "a time in milliseconds",
        0.0,
        crate::speculative::MAX_TIME_MS,
        example,
    );
    if zero {
        r
    } else {
        r.min_excluded()
    }
}

/// A time in microseconds greater than 0 and at most 1 s.
pub(crate) const MICROS: Real = real("a time in microseconds", 0.0, 1e6, "2.5").min_excluded();

/// A probability: an acceptance rate.
pub(crate) const PROBABILITY: Real = real("an acceptance rate (a probability)", 0.0, 1.0, "0.8");

/// A mean accept length: 1 (the bonus token) to k + 1 for the most draft steps there are.
pub(crate) const ACCEPT_LENGTH: Real = real(
    "a mean accept length (bonus token included)",
    1.0,
    (crate::speculative::MAX_DRAFT_STEPS + 1) as f64,
    "2.5",
);

/// `--noise-margin`: a fraction below one half.
pub(crate) const NOISE_MARGIN: Real = real("a fraction", 0.0, 0.5, "0.01 (1%)").max_excluded();

/// A link's rate per direction in GB/s: above 0, at most 10 TB/s (NVLink 5 is 0.9 TB/s).
pub(crate) const LINK_GBPS: Real =
    real("a link rate in GB/s", 0.0, 10_000.0, "63 (PCIe 5.0 x16)").min_excluded();

/// `model validate --max-median-pct`: a percentage above 0.
pub(crate) const PERCENT: Real = real("a percentage", 0.0, 1000.0, "10").min_excluded();

/// A seed: any unsigned 64-bit number.
pub(crate) const fn seed() -> Whole<u64> {
    whole("(a seed)", 0, u64::MAX, "1")
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

/// `--concurrency`: 1 to [`crate::request::MAX_CONCURRENCY`] requests per forward.
pub(crate) const CONCURRENCY: Whole<u64> = whole(
    "requests per forward",
    1,
    crate::request::MAX_CONCURRENCY,
    "8",
);

/// `--context`: 0 (no KV cache priced) to [`crate::request::MAX_CONTEXT`] tokens per request.
pub(crate) const CONTEXT: Whole<u64> = whole(
    "tokens of context per request",
    0,
    crate::request::MAX_CONTEXT,
    "2048",
);

/// `--dcp`: 1 to [`crate::request::MAX_RANKS`] ranks sharding the context.
pub(crate) const DCP: Whole<u64> = whole(
    "ranks sharding the context",
    1,
    crate::request::MAX_RANKS as u64,
    "4",
);

/// `--draft-layers`: 1 to 64 decoder layers of a block drafter.
pub(crate) const DRAFT_LAYERS: Whole<u64> = whole("decoder layers", 1, 64, "5");

/// `--tree-tokens`: 2 to 4096 tokens per request in the verify's tree.
pub(crate) const TREE_TOKENS: Whole<u64> = whole("tokens per request", 2, 4096, "8");

/// `collective -f/--stepfactor`: 2 to 1024.
pub(crate) const STEP_FACTOR: Whole<u64> = whole("(the factor between sizes)", 2, 1024, "2");

/// A collective's size: 1 byte to [`crate::request::MAX_COLLECTIVE_BYTES`].
pub(crate) const COLLECTIVE_BYTES: Bytes = bytes(1, crate::request::MAX_COLLECTIVE_BYTES, "8K");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::numbers::tests::parse;

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
}

/// `--weights` / `--expert-weights`: a weight format, or `as-shipped` (the checkpoint's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WeightChoice(pub(crate) Option<crate::model::shape::WeightFormat>);

pub(crate) fn weight_choice(s: &str) -> Result<WeightChoice, String> {
    if s.trim().eq_ignore_ascii_case("as-shipped") {
        return Ok(WeightChoice(None));
    }
    s.parse().map(|f| WeightChoice(Some(f)))
}
