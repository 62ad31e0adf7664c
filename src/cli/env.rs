//! `verifybench env`: GPUs, links, driver, NCCL library and version, and the NCCL_* environment
//! each worker process really sees: the flags; the look is [`crate::machine::gather`].

use crate::cli::args::GpuArgs;
use crate::cli::output::OutputArgs;
use crate::machine::gather;
use crate::report::env::render;

#[derive(Debug, Clone, clap::Args)]
pub struct EnvArgs {
    #[command(flatten)]
    pub gpu: GpuArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

pub fn run(a: &EnvArgs) -> anyhow::Result<i32> {
    let r = gather(&(&a.gpu).into())?;
    if a.output.format.is_json() {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", render(&r));
    }
    Ok(0)
}
