//! `verifybench report`: results files -> DIR/report.md with SVG plots. Needs no GPU.

use std::path::PathBuf;

use crate::cli::breakeven::CycleArgs;
use crate::commands::report::{self as render, LoadedFile};

#[derive(Debug, Clone, clap::Args)]
pub struct ReportArgs {
    /// Results files (JSON record, JSON array or JSON lines). Rendered: collective and verify
    /// records (plots, tables, break-even), sweep results (`sweep --results`: the ranking as
    /// sweep prints it), bandwidth and selftest exports. Named and skipped with a note: env,
    /// compare and model-fit profiles, unknown kinds, empty files, `[]`; exit 2 when nothing at
    /// all is renderable.
    #[arg(value_name = "RESULTS", required = true)]
    pub results: Vec<PathBuf>,
    /// Directory to write report.md and its SVG plots into (created if missing; its parent folder
    /// must exist).
    #[arg(short = 'o', long = "out", value_name = "DIR")]
    pub out: PathBuf,
    /// Break-even inputs for the tokens/s plot (verify times come from the verify records).
    #[command(flatten)]
    pub cycle: CycleArgs,
}

pub fn run(a: &ReportArgs) -> anyhow::Result<i32> {
    crate::util::check_output_dir("-o/--out", &a.out)?;
    let files = a
        .results
        .iter()
        .map(|p| LoadedFile::read(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let report = render::build(&files, &a.cycle.flags())?;
    for s in &report.skipped {
        eprintln!("note: skipped {s}");
    }
    for p in render::write(&report, &a.out)? {
        println!("wrote {}", p.display());
    }
    Ok(0)
}
