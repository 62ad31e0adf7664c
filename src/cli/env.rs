//! `verifybench env`: GPUs, links, driver, NCCL library and version, and the NCCL_* environment
//! each worker process really sees: the flags; the look is [`crate::machine::gather`].

use crate::cli::args::GpuArgs;
use crate::machine::gather;
use crate::report::env::render;

#[derive(Debug, Clone, clap::Args)]
pub struct EnvArgs {
    #[command(flatten)]
    pub gpu: GpuArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = crate::cli::plan::Format::Table)]
    pub format: crate::cli::plan::Format,
}

pub fn run(a: &EnvArgs) -> anyhow::Result<i32> {
    let started = crate::util::now_utc();
    let r = gather(&(&a.gpu).into())?;
    match a.format {
        crate::cli::plan::Format::Json => {
            println!(
                "{}",
                crate::machine::env_record(&r, started).to_json_pretty()
            )
        }
        crate::cli::plan::Format::Table => print!("{}", render(&r)),
    }
    Ok(0)
}
