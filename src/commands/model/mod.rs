//! `verifybench model`: `fit` calibrates the cost model on measured results (or nccl-tests
//! output) and writes a profile; `validate` checks the fit held out on nccl-tests output;
//! `fit-cycle` fits the speculative cycle's engine terms to published runs ([`cycle`]).

mod cycle;
pub(crate) use cycle::{fit_cycle, FitCycleRequest};

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::costmodel::profile::{self, ProfileBody};
use crate::costmodel::{fit, ntfit};
use crate::output::Format;
use crate::report::fit::table;

/// `model fit`: the flags of the same names (see `verifybench model fit --help`).
#[derive(Debug, Clone)]
pub(crate) struct FitRequest {
    pub(crate) results: Vec<PathBuf>,
    pub(crate) nccl_tests: Vec<PathBuf>,
    pub(crate) link_gbps: Option<f64>,
    pub(crate) p2p_latency_us: Option<f64>,
    pub(crate) output: PathBuf,
    pub(crate) base: Option<String>,
    pub(crate) base_profile: Option<PathBuf>,
    pub(crate) name: Option<String>,
    pub(crate) format: Format,
}

/// `model validate`: the flags of the same names (see `verifybench model validate --help`).
#[derive(Debug, Clone)]
pub(crate) struct ValidateRequest {
    pub(crate) nccl_tests: Vec<PathBuf>,
    pub(crate) link_gbps: Vec<f64>,
    pub(crate) base: String,
    pub(crate) max_median_pct: f64,
    pub(crate) format: Format,
}

/// Runs `verifybench model fit`.
pub(crate) fn fit(a: &FitRequest) -> anyhow::Result<i32> {
    let started = crate::util::now_utc();
    crate::util::Files::new()
        .inputs("RESULTS", &a.results)
        .inputs("--nccl-tests", &a.nccl_tests)
        .input("--base-profile", a.base_profile.as_deref())
        .output("-o/--output", Some(&a.output))
        .check()?;
    let builtin = |name: &str| -> anyhow::Result<_> {
        let prof = profile::builtin_or_usage(name)?;
        let n = prof.name.clone();
        Ok((prof, n, "--base"))
    };
    let given = match (&a.base_profile, &a.base) {
        (Some(p), _) => {
            let prof = profile::load(p)?;
            let n = format!("{} (file {})", prof.name, p.display());
            Some((prof, n, "--base-profile"))
        }
        (None, Some(b)) => Some(builtin(b)?),
        (None, None) => None,
    };
    if !a.nccl_tests.is_empty() {
        return nccl_tests_cmd(a, given, started);
    }
    let (base, base_name, _) = match given {
        Some(g) => g,
        None => builtin("nvlink-h200")?,
    };
    let mut pts = vec![];
    let mut p2p_pts = vec![];
    let mut sources = vec![];
    for f in &a.results {
        let recs = crate::record::read_records(f)?;
        p2p_pts.extend(crate::costmodel::custom::p2p_points(&recs));
        let name = f.display().to_string();
        let (p, skipped) = fit::points_of(&name, &recs)?;
        for s in skipped {
            crate::note!("verifybench: left out {s}");
        }
        pts.extend(p);
        sources.push(name);
    }
    let r = fit::calibrate(&base, &pts)?;
    let mut prof = r.profile.clone();
    // The P2P terms: fitted on the P2P rows only, from the NCCL-fitted launch costs.
    let p2p_fit = if p2p_pts.is_empty() {
        None
    } else {
        let f = crate::costmodel::custom::fit_p2p(&prof, &p2p_pts)?;
        f.apply_to(&mut prof);
        Some(f)
    };
    // Rates past the base's link: the measurements are of another (faster) link.
    if let Err(e) = prof.check_bounds() {
        crate::usage_bail!(
            "the profile fitted from {base_name} is not a profile of its link: {e}; the measurements come from a faster link than {base_name}'s: fit from the measured machine's base (--base NAME, or --base-profile FILE)"
        );
    }
    prof.name = output_name(a);
    prof.description = format!(
        "fitted by `verifybench model fit` to {} measured points from {}, starting from {base_name} ({}); median error {:.1}%{}",
        r.points.len(),
        sources.join(", "),
        base.description,
        r.median_abs_err * 100.0,
        r.median_abs_loo_err
            .map(|l| format!(", leave-one-out {:.1}%", l * 100.0))
            .unwrap_or_default()
    );
    let file = ProfileBody {
        profile: prof,
        fit: Some(serde_json::json!({
            "base": base_name,
            "sources": sources,
            "fitted_utc": crate::util::now_utc(),
            "parameters": r.params,
            "points": r.points,
            "median_abs_rel_err": r.median_abs_err,
            "median_abs_loo_rel_err": r.median_abs_loo_err,
            "p2p": p2p_fit.as_ref().map(|f| serde_json::json!({
                "parameters": f.lines,
                "points": f.points,
                "median_abs_rel_err": f.median_abs_err,
            })),
        })),
    };
    write_profile(a, &file, started, || {
        let mut s = table(&r, &base_name, a.results.len());
        if let Some(f) = &p2p_fit {
            s.push_str(&crate::report::fit::p2p_table(f));
        }
        s
    })
}

/// Writes the fitted profile as a record to `--output` (and to stdout with `--format json`);
/// in table format prints `tables()` and where the profile went. The value is the exit code.
fn write_profile(
    a: &FitRequest,
    file: &ProfileBody,
    started: String,
    tables: impl FnOnce() -> String,
) -> anyhow::Result<i32> {
    let json = file
        .to_record(crate::record::Provenance::here("none", started))
        .to_json_pretty();
    crate::output::write_and_print(&json, Some(&a.output), a.format.is_json())?;
    if !a.format.is_json() {
        print!("{}", tables());
        println!(
            "# wrote profile '{}' to {}: use it with --backend model --profile {}",
            file.profile.name,
            a.output.display(),
            a.output.display()
        );
    }
    Ok(0)
}

fn output_name(a: &FitRequest) -> String {
    a.name.clone().unwrap_or_else(|| {
        a.output
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "fitted".into())
    })
}

/// One `--nccl-tests` file: its name and its tables (the runs left out noted).
fn nccl_tests_tables(f: &std::path::Path) -> anyhow::Result<(String, Vec<ntfit::Table>)> {
    let name = f.display().to_string();
    let text = crate::util::read_text(
        f,
        "--nccl-tests file",
        "the text output of nccl-tests (all_reduce_perf and the like)",
        crate::util::read::NCCL_TESTS,
    )?;
    let runs = crate::nccl_tests::parse_runs(&text)
        .map_err(|e| crate::error::usage(format!("--nccl-tests '{name}': {e}")))?;
    let (t, skipped) = ntfit::tables_of(&name, &runs);
    for s in skipped {
        crate::note!("verifybench: left out {s}");
    }
    Ok((name, t))
}

/// `model fit --nccl-tests FILE...`.
fn nccl_tests_cmd(
    a: &FitRequest,
    given: Option<(profile::Profile, String, &'static str)>,
    started: String,
) -> anyhow::Result<i32> {
    let mut tables = vec![];
    let mut sources = vec![];
    for f in &a.nccl_tests {
        let (name, t) = nccl_tests_tables(f)?;
        tables.extend(t);
        sources.push(name);
    }
    let choice = ntfit::choose_base(given, a.link_gbps, &tables)?;
    let (base, base_name, rate) = (&choice.profile, &choice.name, choice.link_rate_gbps);
    let phys = ntfit::Physics {
        rate_gbps: rate,
        p2p_lat_us: a.p2p_latency_us,
    };
    let warnings = ntfit::warnings(&tables);
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    let f = ntfit::calibrate(base, &phys, &tables)?;
    let r = &f.report;
    let mut prof = r.profile.clone();
    prof.name = output_name(a);
    prof.description = format!(
        "fitted by `verifybench model fit --nccl-tests` to {} sizes of {} table(s) from {}, link rate {rate} GB/s, starting from {base_name}; median error {:.1}%, leave-one-size-out {:.1}%",
        r.points.len(),
        tables.len(),
        sources.join(", "),
        r.median_abs_err * 100.0,
        r.median_abs_loo_err.unwrap_or(f64::NAN) * 100.0
    );
    let file = ProfileBody {
        profile: prof,
        fit: Some(serde_json::json!({
            "base": base_name,
            "base_choice": choice,
            "warnings": warnings,
            "nccl_tests": sources,
            "link_rate_gbps": rate,
            "p2p_latency_us": a.p2p_latency_us,
            "fitted_utc": crate::util::now_utc(),
            "parameters": r.params,
            "at_bound": f.at_bound,
            "switches": f.switches,
            "points": r.points,
            "median_abs_rel_err": r.median_abs_err,
            "median_abs_loo_rel_err": r.median_abs_loo_err,
        })),
    };
    write_profile(a, &file, started, || {
        let mut s = table(r, base_name, a.nccl_tests.len());
        s.push_str(&crate::report::fit::nccl_tests_lines(&f, &choice));
        s
    })
}

/// One `--nccl-tests` file of `model validate`: its name, the bounds its fits use (its link
/// rate, no measured latency), and its tables.
type ValidateFile = (String, ntfit::Physics, Vec<ntfit::Table>);

/// Runs `verifybench model validate --nccl-tests FILE...`.
pub(crate) fn validate(a: &ValidateRequest) -> anyhow::Result<i32> {
    if a.link_gbps.len() > 1 && a.link_gbps.len() != a.nccl_tests.len() {
        crate::usage_bail!(
            "--link-gbps: give one rate, or one per --nccl-tests file ({} files, {} rates)",
            a.nccl_tests.len(),
            a.link_gbps.len()
        );
    }
    let base = profile::builtin_or_usage(&a.base)?;
    let mut files = vec![];
    for (i, f) in a.nccl_tests.iter().enumerate() {
        let (name, t) = nccl_tests_tables(f)?;
        let rate = match a
            .link_gbps
            .get(i)
            .or(a.link_gbps.first())
            .copied()
            .or(base.intra.rate_gbps)
        {
            Some(r) => r,
            None => {
                crate::usage_bail!("--link-gbps: the base profile does not know its link's rate")
            }
        };
        let phys = ntfit::Physics {
            rate_gbps: rate,
            p2p_lat_us: None,
        };
        files.push((name, phys, t));
    }
    let (mut out, failed, json_rows) = held_out_sizes(a, &base, &files)?;
    out += &builtin_profiles(&files)?;
    out += &across_rank_counts(&base, &files)?;
    let _ = writeln!(
        out,
        "\n# {failed} table(s) above the {}% median",
        a.max_median_pct
    );
    if a.format.is_json() {
        // The leave-one-size-out part (the figure the acceptance bound is on), modeled.
        let doc = serde_json::json!({
            "source": "modeled",
            "base": a.base,
            "max_median_pct": a.max_median_pct,
            "tables": json_rows,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{out}");
    }
    Ok(if failed > 0 { 1 } else { 0 })
}

/// Leave-one-size-out: each table fitted on its own from `base`, each size left out in turn
/// and predicted. The value: the lines, the tables whose median error is past
/// `--max-median-pct`, and the JSON rows.
fn held_out_sizes(
    a: &ValidateRequest,
    base: &profile::Profile,
    files: &[ValidateFile],
) -> anyhow::Result<(String, usize, Vec<serde_json::Value>)> {
    let mut out = String::new();
    let mut failed = 0;
    let mut json_rows = vec![];
    let _ = writeln!(
        out,
        "# leave-one-size-out: each table fitted on its own (`model fit --nccl-tests`, from {}), each size left out in turn and predicted; |error| of the left-out sizes",
        a.base
    );
    let _ = writeln!(
        out,
        "# table | collective | ranks | link GB/s | sizes | median | max | median <= {}%",
        a.max_median_pct
    );
    for (_, phys, tables) in files {
        let rate = phys.rate_gbps;
        for t in tables {
            let l = ntfit::loso_of_table(base, phys, t)?;
            let ok = l.median_abs * 100.0 <= a.max_median_pct;
            failed += usize::from(!ok);
            json_rows.push(serde_json::json!({
                "table": l.label,
                "op": l.op.name(),
                "nranks": l.nranks,
                "link_rate_gbps": rate,
                "loso_rel_err": l.errs.iter().map(|(s, e)| serde_json::json!({"size_bytes": s, "rel_err": e})).collect::<Vec<_>>(),
                "median_abs_loso_rel_err": l.median_abs,
                "max_abs_loso_rel_err": l.max_abs,
                "within": ok,
            }));
            let _ = writeln!(
                out,
                "{} | {} | {} | {rate} | {} | {:.1}% | {:.1}% | {}",
                l.label,
                l.op.name(),
                l.nranks,
                l.errs.len(),
                l.median_abs * 100.0,
                l.max_abs * 100.0,
                if ok { "yes" } else { "NO" }
            );
        }
    }
    Ok((out, failed, json_rows))
}

/// The built-in profiles, uncalibrated, against each table at 32 KB-256 KB.
fn builtin_profiles(files: &[ValidateFile]) -> anyhow::Result<String> {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n# built-in profiles (modeled, uncalibrated) against each table at 32 KB-256 KB: predicted / measured - 1 per size; median |error|"
    );
    for t in files.iter().flat_map(|(_, _, tables)| tables) {
        let _ = writeln!(
            out,
            "{} ({} n={}, {}):",
            t.label,
            t.op.name(),
            t.nranks,
            t.device.as_deref().unwrap_or("GPU not listed")
        );
        for name in profile::BUILTIN {
            let p = profile::builtin_or_usage(name)?;
            let e = ntfit::profile_errors(&p, t, 32 * 1024, 256 * 1024)?;
            if e.is_empty() {
                continue;
            }
            let cells: Vec<String> = e
                .iter()
                .map(|(s, _, r)| format!("{} KB {:+.0}%", s / 1024, r * 100.0))
                .collect();
            let _ = writeln!(
                out,
                "  {name:<22} median {:>5.1}%  {}",
                median_abs_err(&e) * 100.0,
                cells.join(", ")
            );
        }
    }
    Ok(out)
}

/// Fitted at one rank count, predicted at another of the same file and collective.
fn across_rank_counts(base: &profile::Profile, files: &[ValidateFile]) -> anyhow::Result<String> {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n# fit at one rank count, predict another of the same file and collective"
    );
    let mut any = false;
    for (name, phys, tables) in files {
        for fit_t in tables {
            for pred_t in tables
                .iter()
                .filter(|t| t.op == fit_t.op && t.nranks != fit_t.nranks)
            {
                any = true;
                let f = ntfit::calibrate(base, phys, std::slice::from_ref(fit_t))?;
                let e = ntfit::profile_errors(&f.report.profile, pred_t, 0, u64::MAX)?;
                let _ = writeln!(
                    out,
                    "{name}: fit n={} ({}) -> predict n={} ({}): median |error| {:.1}%",
                    fit_t.nranks,
                    fit_t.label,
                    pred_t.nranks,
                    pred_t.label,
                    median_abs_err(&e) * 100.0
                );
            }
        }
    }
    if !any {
        let _ = writeln!(out, "none: no file holds one collective at two rank counts");
    }
    Ok(out)
}

/// The median |relative error| of a profile's predictions (size, predicted, relative error).
fn median_abs_err(e: &[(u64, f64, f64)]) -> f64 {
    crate::measure::stats::median_abs(&e.iter().map(|x| x.2).collect::<Vec<_>>())
}
