//! `verifybench plan`: the schedule of a model, as a table or JSON. Needs no GPU.

use crate::cli::args::WorkloadArgs;
use crate::model::{self, Phase};
use crate::report::plan::{one_line, render};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
}

#[derive(Debug, Clone, clap::Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Output format. JSON is the schedule itself (the input of scripts/torch_baseline.py).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Also list every operation in order.
    #[arg(long)]
    pub ops: bool,
}

pub fn run(a: &PlanArgs) -> anyhow::Result<i32> {
    let w = crate::request::Workload::from(&a.workload);
    w.check_bounds()?;
    if let Some(f) = w.load_schedule_file()? {
        // `plan --schedule FILE`: the file's schedule, checked, as `verify --schedule` replays it.
        match a.format {
            Format::Json => println!("{}", serde_json::to_string_pretty(&f)?),
            Format::Table => print!("{}", crate::report::plan::render_file(&f, a.ops)),
        }
        return Ok(0);
    }
    let shape = w.shape()?;
    let opt = w.options(8);
    let s = model::build(&shape, &opt, w.phase)?;
    match a.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&s)?),
        Format::Table => {
            print!("{}", render(&s, a.ops));
            if w.phase == Phase::Verify {
                println!("\nOther phases with the same flags (break-even needs all three):");
                for ph in [Phase::Decode, Phase::Draft] {
                    let o = model::build(&shape, &opt, ph)?;
                    println!("  {}", one_line(&o));
                }
            }
        }
    }
    Ok(0)
}
