//! `verifybench inspect`: the flags; the inspection is [`crate::commands::inspect`].

use crate::cli::output::OutputArgs;
use crate::commands::inspect::InspectRequest;

#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["pid", "pattern"])))]
pub(crate) struct InspectArgs {
    /// The server's top process: it and every process under it are inspected.
    #[arg(long, value_parser = crate::cli::values::whole::<u32>("(a process id)", 1, 1 << 22, "1234"), allow_negative_numbers = true)]
    pub(crate) pid: Option<u32>,
    /// Find the server by command line (a regular expression, or plain text such as
    /// `sglang.launch_server`); every matching process tree is inspected. Must not be empty.
    #[arg(long = "match", value_name = "PATTERN")]
    pub(crate) pattern: Option<String>,
    /// NAME=VALUE that every GPU-holding process (every process when none holds a GPU) must have
    /// exactly; repeatable. Exit code 1 when one does not hold.
    #[arg(long, value_name = "NAME=VALUE")]
    pub(crate) expect: Vec<String>,
    // --format table: each process with its variables, then findings and expectations;
    // json: processes, findings, expectation results.
    #[command(flatten)]
    pub(crate) output: OutputArgs,
}

request_from!(|a: &InspectArgs| -> InspectRequest {
    pid,
    pattern,
    expect,
    format: a.output.format,
});
