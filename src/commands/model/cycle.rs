//! `model fit-cycle`: the speculative cycle's engine terms fitted to published runs, and every
//! run predicted with the terms fitted without it.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;

use crate::costmodel::ModelSettings;
use crate::explain::published::{self, Priced};
use crate::output::Format;
use crate::speculative::cycle::{self, Forwards, Terms};

/// `model fit-cycle`: the flags of the same names.
#[derive(Debug, Clone)]
pub struct FitCycleRequest {
    pub runs: PathBuf,
    pub configs: Option<PathBuf>,
    pub model: ModelSettings,
    pub format: Format,
}

/// One run of the answer.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RunRow {
    pub id: String,
    pub source: String,
    pub concurrency: u64,
    pub draft_steps: u64,
    pub drafter: String,
    pub context: u64,
    pub plain_ms: f64,
    pub accept_length: f64,
    /// The model's forwards of the run (graphed, us).
    pub modeled: Forwards,
    pub published_step_ms: Option<f64>,
    /// The step predicted with the terms fitted on the other runs, ms, and its parts.
    pub held_out: Option<cycle::Step>,
    pub held_out_step_ms: Option<f64>,
    /// held-out / published - 1.
    pub held_out_error: Option<f64>,
}

/// The answer: the terms fitted on every run, the held-out errors, the runs.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FitCycle {
    pub runs_file: String,
    pub profile: String,
    pub terms: Terms,
    /// The least and the most held-out error.
    pub spread: [f64; 2],
    pub within_15_pct: usize,
    pub fitted_on: usize,
    pub runs: Vec<RunRow>,
}

/// Fits the terms on every priced run with a published step, and predicts each run with the
/// terms fitted on the others.
pub(crate) fn fit(priced: &[Priced], runs_file: &str, profile: &str) -> anyhow::Result<FitCycle> {
    let fit_runs: Vec<cycle::FitRun> = priced.iter().filter_map(|p| p.fit.clone()).collect();
    let Some(terms) = cycle::fit(&fit_runs) else {
        crate::usage_bail!(
            "{runs_file}: {} run(s) with a published step: the three terms need at least 3 runs that differ in their batch and drafter",
            fit_runs.len()
        );
    };
    let loo = cycle::leave_one_out(&fit_runs);
    let mut errors = loo.iter();
    let mut rows = vec![];
    for p in priced {
        let s = &p.spec;
        let (held_out, err) = match &p.fit {
            Some(f) => {
                let e = errors.next().copied().flatten();
                let others: Vec<cycle::FitRun> =
                    fit_runs.iter().filter(|r| *r != f).cloned().collect();
                let step = cycle::fit(&others)
                    .map(|t| cycle::step(f.decode_us, &f.forwards, &t, f.concurrency, f.k));
                (step, e)
            }
            None => (None, None),
        };
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
            published_step_ms: p.fit.as_ref().map(|f| f.published_step_us / 1000.0),
            held_out_step_ms: held_out.map(|h| h.total_us() / 1000.0),
            held_out,
            held_out_error: err,
        });
    }
    let errs: Vec<f64> = loo.iter().flatten().copied().collect();
    let lo = errs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = errs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Ok(FitCycle {
        runs_file: runs_file.to_string(),
        profile: profile.to_string(),
        terms,
        spread: [lo, hi],
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
            "  {:<24} {:>4} {:>3} {:<7} {:>7} {:>9.2} {:>10} {:>6} {:>10} {:>6} {:>7}",
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
        );
    }
    let _ = writeln!(
        out,
        "# held out (each run predicted with the terms fitted on the others): {:+.1}% to {:+.1}%, {} of {} within 15%",
        f.spread[0] * 100.0,
        f.spread[1] * 100.0,
        f.within_15_pct,
        f.fitted_on
    );
    out
}

/// Runs `verifybench model fit-cycle`.
pub fn fit_cycle(a: &FitCycleRequest) -> anyhow::Result<i32> {
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
    let f = fit(&priced, &a.runs.display().to_string(), &profile)?;
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
