//! `verifybench plan`: the schedule of a model (or of a schedule file), as a table or JSON.
//! Needs no GPU.

use crate::model::{self, Engine, Phase};
use crate::output::Format;
use crate::report::plan::{cycle_json, json_with_engine, one_line, render_cycle, render_with};
use crate::request::Workload;

/// `plan`: the workload and the flags of the same names.
#[derive(Debug, Clone)]
pub(crate) struct PlanRequest {
    pub(crate) workload: Workload,
    pub(crate) format: Format,
    pub(crate) ops: bool,
    pub(crate) engine: Engine,
    pub(crate) allreduce_fusion: bool,
}

/// Runs `verifybench plan`.
pub(crate) fn run(a: &PlanRequest) -> anyhow::Result<i32> {
    let w = &a.workload;
    w.check_bounds()?;
    if let Some(f) = w.load_schedule_file(&|_| Ok(()))? {
        // `plan --schedule FILE`: the file's schedule, checked, as `verify --schedule` replays it.
        if a.format.is_json() {
            println!("{}", serde_json::to_string_pretty(&f)?);
        } else {
            print!("{}", crate::report::plan::render_file(&f, a.ops));
        }
        return Ok(0);
    }
    if w.phase == Phase::Cycle {
        return cycle(a);
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
    match a.format.is_json() {
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

/// `plan --phase cycle`: the cycle built once from the workload (at TP 8 without `--tp`),
/// printed part by part with the engine's names, or as JSON.
fn cycle(a: &PlanRequest) -> anyhow::Result<i32> {
    let w = a.workload.resolve()?;
    let c = w.cycle(8)?;
    let shape = w.shape()?;
    let engine = |s: &model::Schedule| model::engine::EngineView {
        in_cycle: true,
        ..model::engine::view(s, &shape, a.engine, a.allreduce_fusion)
    };
    if a.format.is_json() {
        println!(
            "{}",
            serde_json::to_string_pretty(&cycle_json(&c, &engine)?)?
        );
    } else {
        print!("{}", render_cycle(&c, a.ops, &engine));
    }
    Ok(0)
}
