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
    let started = crate::util::now_utc();
    let r = gather(&(&a.gpu).into())?;
    if a.output.format.is_json() {
        println!(
            "{}",
            crate::machine::env_record(&r, started).to_json_pretty()
        );
    } else {
        print!("{}", render(&r));
    }
    Ok(0)
}
