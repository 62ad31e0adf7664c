//! `verifybench plan`: the schedule of a model, as a table or JSON. Needs no GPU.

use crate::cli::args::WorkloadArgs;
use crate::cli::output::OutputArgs;
use crate::model::{self, Phase};
use crate::report::plan::{one_line, render};

#[derive(Debug, Clone, clap::Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    // --format json: the schedule itself (the input of scripts/torch_baseline.py).
    #[command(flatten)]
    pub output: OutputArgs,
    /// Also list every operation in order.
    #[arg(long)]
    pub ops: bool,
}

pub fn run(a: &PlanArgs) -> anyhow::Result<i32> {
    let w = crate::request::Workload::from(&a.workload);
    w.check_bounds()?;
    if let Some(f) = w.load_schedule_file()? {
        // `plan --schedule FILE`: the file's schedule, checked, as `verify --schedule` replays it.
        if a.output.format.is_json() {
            println!("{}", serde_json::to_string_pretty(&f)?);
        } else {
            print!("{}", crate::report::plan::render_file(&f, a.ops));
        }
        return Ok(0);
    }
    let shape = w.shape()?;
    let opt = w.options(8);
    let s = model::build(&shape, &opt, w.phase)?;
    match a.output.format.is_json() {
        true => println!("{}", serde_json::to_string_pretty(&s)?),
        false => {
            print!("{}", render(&s, a.ops));
            if w.phase == Phase::Verify {
                println!("\nOther phases with the same flags (break-even needs all three):");
                for ph in [Phase::Decode, Phase::Draft] {
                    let o = model::build(&shape, &opt, ph)?;
                    println!("  {}", one_line(&o));
                }
                if let Some((total, active)) = model::schedule::parameter_counts(&shape) {
                    println!(
                        "\nParameters as the shape counts them (modeled; compare with the model card): {:.2} billion total, {:.2} billion active per token",
                        total as f64 / 1e9,
                        active as f64 / 1e9
                    );
                }
            }
        }
    }
    Ok(0)
}
