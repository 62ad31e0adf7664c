//! The parsers of flag values that clap does not derive: a library enum by name, the CPU list
//! of `--cpu-affinity`, `--timeout`, `-n/--iters` and `--impl`'s list.

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};

use crate::request::Impl;
use crate::util::Named;

/// The clap parser of a library enum: accepts `T::ALL` by name and lists them (with their help
/// lines, a final period dropped as clap drops it from doc comments) in `--help`.
pub(crate) fn named<T: Named + Clone>() -> impl TypedValueParser<Value = T> {
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

/// `--timeout`: seconds, more than 0 (0 would abort every run before it starts) and finite.
pub(crate) fn timeout_arg(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds; give e.g. 60"))?;
    if !v.is_finite() || v <= 0.0 || v > 1e6 {
        return Err(format!(
            "{}: the time any rendezvous, collective or worker may take is a number of seconds greater than 0 and at most 1000000; give e.g. 60 (the default)",
            crate::util::fmt_number(v)
        ));
    }
    Ok(v)
}

/// `-n/--iters`: at least one timed iteration (with 0 there is nothing to time or print).
pub(crate) fn iters_arg(s: &str) -> Result<u64, String> {
    let v: u64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number of timed iterations; give e.g. 200"))?;
    if v == 0 {
        return Err(
            "0 timed iterations leave nothing to measure; give 1 or more (default 200)".into(),
        );
    }
    Ok(v)
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
