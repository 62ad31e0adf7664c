//! `verifybench plan`: the schedule of a model, as a table or JSON. Needs no GPU.

use crate::cli::args::{named, WorkloadArgs};
use crate::cli::output::OutputArgs;
use crate::model::{self, Engine, Phase};
use crate::report::plan::{json_with_engine, one_line, render_with};

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
    /// The serving engine whose names for the collectives, fusions and profiler counts the
    /// plan shows (the ops themselves are the same in both).
    #[arg(long, value_parser = named::<Engine>(), default_value = "sglang")]
    pub engine: Engine,
    /// The engine fuses each all-reduce with the residual add and RMSNorm after it (SGLang
    /// --enable-flashinfer-allreduce-fusion, which it turns on by itself on SM90/SM100 GPUs
    /// for DeepSeek/Kimi, gpt-oss, GLM-4 MoE, Qwen3-MoE, Qwen3-Next; vLLM's
    /// AllReduceFusionPass): the same collectives under other kernel names.
    #[arg(long)]
    pub allreduce_fusion: bool,
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
    let opt = model::ScheduleOptions {
        engine: a.engine,
        allreduce_fusion: a.allreduce_fusion,
        ..w.options(8)
    };
    let s = model::build(&shape, &opt, w.phase)?;
    let mut v = model::engine::view(&s, &shape, opt.engine, opt.allreduce_fusion);
    if w.phase == Phase::Verify {
        // a draft vocabulary TP does not divide is refused by the draft phase itself
        if let Ok(d) = model::build(&shape, &opt, Phase::Draft) {
            v.draft = Some(model::engine::view(&d, &shape, opt.engine, opt.allreduce_fusion).count);
        }
    }
    match a.output.format.is_json() {
        true => println!(
            "{}",
            serde_json::to_string_pretty(&json_with_engine(&s, &v)?)?
        ),
        false => {
            print!("{}", render_with(&s, a.ops, Some(&v)));
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
