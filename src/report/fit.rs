//! The table of `verifybench model fit`: fitted parameters, every point with its error and its
//! leave-one-out prediction, and the median errors.

use std::fmt::Write as _;

use crate::costmodel::fit::FitReport;

fn pct(x: f64) -> String {
    format!("{:+.1}%", x * 100.0)
}

/// The fit as a table: parameters, then one row per point, then the medians.
pub(crate) fn table(r: &FitReport, base: &str, files: usize) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# verifybench model fit: {} measured points from {files} file{}, {} parameters, starting from {base}",
        r.points.len(),
        if files == 1 { "" } else { "s" },
        r.params.len()
    );
    let _ = writeln!(o, "# {:<32} {:>12} {:>12}", "parameter", "base", "fitted");
    for p in &r.params {
        let _ = writeln!(o, "  {:<32} {:>12.4} {:>12.4}", p.name, p.base, p.fitted);
    }
    // What the data could tell: which parameters were fitted and which held, and why.
    let _ = writeln!(
        o,
        "# fitted on {} rank count(s): {}",
        r.rank_counts.len(),
        r.rank_counts
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    for line in r.param_lines() {
        let _ = writeln!(o, "#   {line}");
    }
    let _ = writeln!(o, "#");
    let _ = writeln!(
        o,
        "# {:<48} {:>12} {:>12} {:>8} {:>12} {:>8}",
        "point", "measured_us", "fitted_us", "error", "loo_us", "loo_err"
    );
    for p in &r.points {
        let _ = writeln!(
            o,
            "  {:<48} {:>12.2} {:>12.2} {:>8} {:>12} {:>8}",
            p.label,
            p.measured_us,
            p.fitted_us,
            pct(p.rel_err),
            p.loo_us
                .map(|x| format!("{x:.2}"))
                .unwrap_or_else(|| "-".into()),
            p.loo_rel_err.map(pct).unwrap_or_else(|| "-".into())
        );
    }
    let _ = writeln!(
        o,
        "# median |error| of the fit: {:.1}%",
        r.median_abs_err * 100.0
    );
    match r.median_abs_loo_err {
        Some(l) => {
            let _ = writeln!(
                o,
                "# median |error| leave-one-out (refit without the point, predict it): {:.1}%",
                l * 100.0
            );
        }
        None => {
            let _ = writeln!(
                o,
                "# leave-one-out needs at least {} points (one more than the parameters)",
                r.params.len() + 1
            );
        }
    }
    o
}

/// The P2P part of a fit: which of `p2p.signal_us` / `p2p.read_gbps` were fitted or held, and
/// every P2P point with its error.
pub(crate) fn p2p_table(f: &crate::costmodel::custom::P2pFit) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# P2P all-reduce terms, fitted on the {} P2P rows only:",
        f.points.len()
    );
    for l in &f.lines {
        let _ = writeln!(o, "  {l}");
    }
    let _ = writeln!(
        o,
        "# {:<48} {:>12} {:>12} {:>8}",
        "point", "measured_us", "fitted_us", "error"
    );
    for (label, m, fit) in &f.points {
        let _ = writeln!(
            o,
            "  {:<48} {:>12.2} {:>12.2} {:>8}",
            label,
            m,
            fit,
            pct(fit / m - 1.0)
        );
    }
    let _ = writeln!(
        o,
        "# median |error| of the P2P fit: {:.1}%",
        f.median_abs_err * 100.0
    );
    o
}

/// What a fit on nccl-tests adds to the table: the base and why, the sizes fitted, the switch
/// found per table and the parameters that ended on a physical bound.
pub(crate) fn nccl_tests_lines(
    f: &crate::costmodel::ntfit::NtFit,
    base: &crate::costmodel::ntfit::BaseChoice,
) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# base {} ({}): {}", base.name, base.from, base.reason);
    if let Some(s) = &f.report.profile.fit_scope {
        let _ = writeln!(
            o,
            "# fitted on sizes {}-{} B: a size outside them is priced as outside the fitted range",
            s.bytes[0], s.bytes[1]
        );
    }
    for s in &f.switches {
        let _ = writeln!(
            o,
            "# switch {} n={}: Ring/LL up to {} B, Ring/Simple above",
            s.op.name(),
            s.nranks,
            s.ll_up_to_bytes
        );
    }
    if f.at_bound.is_empty() {
        let _ = writeln!(o, "# no parameter on its physical bound");
    }
    for b in &f.at_bound {
        let _ = writeln!(o, "# at bound: {b}");
    }
    o
}
