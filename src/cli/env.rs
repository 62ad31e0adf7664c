//! `verifybench env`: the flags; the look is [`crate::commands::env`].

use crate::cli::args::GpuArgs;
use crate::cli::output::OutputArgs;
use crate::commands::env::EnvRequest;

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct EnvArgs {
    #[command(flatten)]
    pub(crate) gpu: GpuArgs,
    #[command(flatten)]
    pub(crate) output: OutputArgs,
}

request_from!(|a: &EnvArgs| -> EnvRequest {
    gpu: (&a.gpu).into(),
    format: a.output.format,
});
