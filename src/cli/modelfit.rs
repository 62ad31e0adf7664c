//! `verifybench model fit`: calibrate the cost model on measured results and write a profile.

use std::path::PathBuf;

use clap::Subcommand;

use crate::cli::output::OutputArgs;
use crate::costmodel::fit;
use crate::costmodel::profile::{self, ProfileBody};
use crate::report::fit::table;

/// `verifybench model ...`
#[derive(Debug, Clone, clap::Args)]
pub struct ModelCmd {
    #[command(subcommand)]
    pub cmd: ModelSub,
}

#[derive(Debug, Clone, Subcommand)]
pub enum ModelSub {
    /// Fit the cost model's parameters to measured collective and verify results, print the
    /// error per point and leave-one-out, and write a profile for `--profile FILE`.
    ///
    /// --format json prints the profile -o writes.
    Fit(FitArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct FitArgs {
    /// Results files (JSON, JSON array or JSON lines) of measured `collective` and `verify`
    /// runs. Modeled records are left out.
    #[arg(required = true, value_name = "RESULTS")]
    pub results: Vec<PathBuf>,
    /// Where to write the fitted profile (JSON).
    #[arg(short = 'o', long, value_name = "PROFILE.json")]
    pub output: PathBuf,
    /// Built-in link profile to start from; parameters the data cannot pin down keep its values.
    #[arg(long, default_value = "nvlink-h200")]
    pub base: String,
    /// Start from a profile file instead of a built-in one (overrides --base).
    #[arg(long, value_name = "FILE")]
    pub base_profile: Option<PathBuf>,
    /// Name of the fitted profile (default: the output file's stem).
    #[arg(long)]
    pub name: Option<String>,
    // --format json: the profile file -o writes.
    #[command(flatten)]
    pub print: OutputArgs,
}

pub fn run(c: &ModelCmd) -> anyhow::Result<i32> {
    match &c.cmd {
        ModelSub::Fit(a) => fit_cmd(a),
    }
}

fn fit_cmd(a: &FitArgs) -> anyhow::Result<i32> {
    let started = crate::util::now_utc();
    let mut inputs: Vec<&std::path::Path> = a.results.iter().map(|p| p.as_path()).collect();
    inputs.extend(a.base_profile.as_deref());
    crate::util::check_outputs(&[("-o/--output", &a.output)], &inputs)?;
    let (base, base_name) = match &a.base_profile {
        Some(p) => {
            let prof = profile::load(p)?;
            let n = format!("{} (file {})", prof.name, p.display());
            (prof, n)
        }
        None => {
            let prof = profile::builtin_or_usage(&a.base)?;
            let n = prof.name.clone();
            (prof, n)
        }
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
    let name = a.name.clone().unwrap_or_else(|| {
        a.output
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "fitted".into())
    });
    let mut prof = r.profile.clone();
    // The P2P terms: fitted on the P2P rows only, from the NCCL-fitted launch costs.
    let p2p_fit = if p2p_pts.is_empty() {
        None
    } else {
        let f = crate::costmodel::custom::fit_p2p(&prof, &p2p_pts)?;
        prof.p2p = Some(f.link.clone());
        Some(f)
    };
    prof.name = name;
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
    let json = file
        .to_record(crate::record::Provenance::here("none", started))
        .to_json_pretty();
    crate::output::write_and_print(&json, Some(&a.output), a.print.format.is_json())?;
    if !a.print.format.is_json() {
        print!("{}", table(&r, &base_name, a.results.len()));
        if let Some(f) = &p2p_fit {
            print!("{}", crate::report::fit::p2p_table(f));
        }
        println!(
            "# wrote profile '{}' to {}: use it with --backend model --profile {}",
            file.profile.name,
            a.output.display(),
            a.output.display()
        );
    }
    Ok(0)
}
