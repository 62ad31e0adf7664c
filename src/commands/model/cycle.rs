//! `model fit-cycle`: the speculative cycle's engine terms fitted to published runs, and every
//! run predicted with the terms fitted without it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::costmodel::ModelSettings;
use crate::explain::published::{self, Priced};
use crate::output::Format;
use crate::speculative::cycle::{self, Forwards, Terms};

/// `model fit-cycle`: the flags of the same names.
#[derive(Debug, Clone)]
pub(crate) struct FitCycleRequest {
    pub(crate) runs: PathBuf,
    pub(crate) configs: Option<PathBuf>,
    pub(crate) model: ModelSettings,
    pub(crate) format: Format,
}

/// One run of the answer.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RunRow {
    pub(crate) id: String,
    pub(crate) source: String,
    pub(crate) concurrency: u64,
    pub(crate) draft_steps: u64,
    pub(crate) drafter: String,
    pub(crate) context: u64,
    pub(crate) plain_ms: f64,
    pub(crate) accept_length: f64,
    /// The model's forwards of the run (graphed, us).
    pub(crate) modeled: Forwards,
    pub(crate) published_step_ms: Option<f64>,
    /// The step predicted with the terms fitted on the other runs, ms, and its parts.
    pub(crate) held_out: Option<cycle::Step>,
    pub(crate) held_out_step_ms: Option<f64>,
    /// held-out / published - 1.
    pub(crate) held_out_error: Option<f64>,
    /// The held-out step's range from the held-out errors of the other runs (each fitted
    /// without this run too), ms; whether the published step lies in it.
    pub(crate) held_out_range_ms: Option<[f64; 2]>,
    pub(crate) published_in_range: Option<bool>,
    /// The step with the terms fitted on every run (what `explain` prints for the run), ms.
    pub(crate) fitted_step_ms: f64,
    /// The `explain` command its user would type for the run.
    pub(crate) explain: Vec<String>,
}

/// The answer: the terms fitted on every run, the held-out errors, the runs.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FitCycle {
    pub(crate) runs_file: String,
    pub(crate) profile: String,
    pub(crate) terms: Terms,
    /// The least and the most held-out error of the step, and of what it adds to the plain step.
    pub(crate) spread: [f64; 2],
    pub(crate) increment_spread: [f64; 2],
    pub(crate) within_15_pct: usize,
    pub(crate) fitted_on: usize,
    pub(crate) runs: Vec<RunRow>,
}

/// Fits the terms on every priced run with a published step, and predicts each run with the
/// terms fitted on the others.
pub(crate) fn fit(
    priced: &[Priced],
    runs_file: &str,
    profile: &str,
    configs: &Path,
    model_flags: &[String],
) -> anyhow::Result<FitCycle> {
    let fit_runs: Vec<cycle::FitRun> = priced.iter().filter_map(|p| p.fit.clone()).collect();
    let Some(terms) = cycle::fit(&fit_runs) else {
        crate::usage_bail!(
            "{runs_file}: {} run(s) with a published step: the three terms need at least 3 runs that differ in their batch and drafter",
            fit_runs.len()
        );
    };
    let held = cycle::held_out(&fit_runs);
    let mut rows = vec![];
    let mut i = 0;
    for p in priced {
        let s = &p.spec;
        let (held_out, range) = match &p.fit {
            Some(f) => {
                let h = held[i];
                let range = h
                    .zip(cycle::nested_spread(&fit_runs, i))
                    .map(|(h, (_, inc))| {
                        let r = cycle::range_us(f.decode_us, h.step.total_us(), inc);
                        [r[0] / 1000.0, r[1] / 1000.0]
                    });
                i += 1;
                (h, range)
            }
            None => (None, None),
        };
        let published = p.fit.as_ref().map(|f| f.published_step_us / 1000.0);
        rows.push(RunRow {
            id: s.id.clone(),
            source: s.source.clone(),
            concurrency: s.concurrency,
            draft_steps: s.draft_steps,
            drafter: s.drafter.to_string(),
            context: s.context,
            plain_ms: s.decode_ms()?,
            accept_length: p.accept_length,
            modeled: p.forwards,
            published_step_ms: published,
            held_out_step_ms: held_out.map(|h| h.step.total_us() / 1000.0),
            held_out: held_out.map(|h| h.step),
            held_out_error: held_out.map(|h| h.error),
            published_in_range: range
                .zip(published)
                .map(|([lo, hi], p)| (lo..=hi).contains(&p)),
            held_out_range_ms: range,
            fitted_step_ms: cycle::step(
                s.decode_ms()? * 1000.0,
                &p.forwards,
                &terms,
                s.concurrency,
                s.draft_steps,
            )
            .total_us()
                / 1000.0,
            explain: [s.explain_args(configs)?, model_flags.to_vec()].concat(),
        });
    }
    let h: Vec<cycle::HeldOut> = held.iter().flatten().copied().collect();
    let errs: Vec<f64> = h.iter().map(|h| h.error).collect();
    let nan = [f64::NAN, f64::NAN];
    Ok(FitCycle {
        runs_file: runs_file.to_string(),
        profile: profile.to_string(),
        terms,
        spread: cycle::extent(errs.iter().copied()).unwrap_or(nan),
        increment_spread: cycle::extent(h.iter().map(|h| h.increment_error)).unwrap_or(nan),
        within_15_pct: errs.iter().filter(|e| e.abs() <= 0.15).count(),
        fitted_on: fit_runs.len(),
        runs: rows,
    })
}

/// The table `model fit-cycle` prints.
pub(crate) fn render(f: &FitCycle) -> String {
    let t = &f.terms;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# verifybench model fit-cycle: {} runs with a published step of {} (cost model {})",
        f.fitted_on, f.runs_file, f.profile
    );
    let _ = writeln!(
        out,
        "# terms (every run): the forward's share of the plain decode step {:.3}; a draft forward's fixed cost {:.3} x the plain step; {:.1} us per request and drafted token",
        t.scaling, t.draft_forward, t.per_draft_token_us
    );
    let _ = writeln!(
        out,
        "  {:<24} {:>4} {:>3} {:<7} {:>7} {:>9} {:>10} {:>6} {:>10} {:>6} {:>7}",
        "run",
        "C",
        "k",
        "drafter",
        "context",
        "plain ms",
        "step ms",
        "ratio",
        "held out",
        "ratio",
        "error"
    );
    for r in &f.runs {
        let pub_ratio = r.published_step_ms.map(|s| s / r.plain_ms);
        let held_ratio = r.held_out_step_ms.map(|s| s / r.plain_ms);
        let opt = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |x| format!("{x:.p$}"));
        let _ = writeln!(
            out,
            "  {:<24} {:>4} {:>3} {:<7} {:>7} {:>9.2} {:>10} {:>6} {:>10} {:>6} {:>7} {:>15} {:>3}",
            r.id,
            r.concurrency,
            r.draft_steps,
            r.drafter,
            r.context,
            r.plain_ms,
            opt(r.published_step_ms, 2),
            opt(pub_ratio, 2),
            opt(r.held_out_step_ms, 2),
            opt(held_ratio, 2),
            r.held_out_error
                .map_or("-".to_string(), |e| format!("{:+.1}%", e * 100.0)),
            r.held_out_range_ms
                .map_or("-".to_string(), |[lo, hi]| format!("{lo:.2}-{hi:.2}")),
            r.published_in_range
                .map_or("-", |b| if b { "yes" } else { "no" }),
        );
    }
    let _ = writeln!(
        out,
        "# held out (each run predicted with the terms fitted on the others): {:+.1}% to {:+.1}% of the step, {} of {} within 15%; {:+.1}% to {:+.1}% of what the step adds to the plain step",
        f.spread[0] * 100.0,
        f.spread[1] * 100.0,
        f.within_15_pct,
        f.fitted_on,
        f.increment_spread[0] * 100.0,
        f.increment_spread[1] * 100.0,
    );
    let ranged: Vec<&RunRow> = f
        .runs
        .iter()
        .filter(|r| r.held_out_range_ms.is_some())
        .collect();
    let inside = ranged
        .iter()
        .filter(|r| r.published_in_range == Some(true))
        .count();
    let mut widths: Vec<f64> = ranged
        .iter()
        .filter_map(|r| r.held_out_range_ms.map(|[lo, hi]| hi / lo))
        .collect();
    widths.sort_by(f64::total_cmp);
    if let Some(m) = widths.get(widths.len() / 2) {
        let _ = writeln!(
            out,
            "# range (from the other runs' held-out errors, each fitted without this run too): the published step inside on {inside} of {}; median width {m:.2}x (high / low)",
            ranged.len()
        );
    }
    out
}

/// Runs `verifybench model fit-cycle`.
pub(crate) fn fit_cycle(a: &FitCycleRequest) -> anyhow::Result<i32> {
    let started = crate::util::now_utc();
    let file = published::read(&a.runs)?;
    let configs = a
        .configs
        .clone()
        .unwrap_or_else(|| published::default_configs(&a.runs));
    let priced = published::price(&file, &configs, &a.model)?;
    let profile = priced
        .first()
        .map_or_else(|| a.model.link.clone(), |p| p.profile.clone());
    // The cost model's profile as the explain commands of the runs give it.
    let model_flags: Vec<String> = match &a.model.profile {
        Some(p) => vec!["--profile".into(), p.display().to_string()],
        None if a.model.link != ModelSettings::default().link => {
            vec!["--link".into(), a.model.link.clone()]
        }
        None => vec![],
    };
    let f = fit(
        &priced,
        &a.runs.display().to_string(),
        &profile,
        &configs,
        &model_flags,
    )?;
    match a.format {
        Format::Json => {
            let p = crate::record::Provenance::here("model", started);
            let rec =
                crate::record::Record::other(crate::record::Source::Modeled, p, "fit_cycle", &f)?;
            println!("{}", rec.to_json_pretty());
        }
        _ => print!("{}", render(&f)),
    }
    Ok(0)
}
