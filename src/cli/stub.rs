//! Placeholder for commands whose backend is not built yet: they parse any flags and exit with
//! a clear error instead of pretending to work.

/// Accepts and ignores any arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct StubArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    pub rest: Vec<String>,
}

pub fn not_built(cmd: &str, what: &str) -> anyhow::Result<i32> {
    anyhow::bail!("`verifybench {cmd}` is not built yet: it needs {what}")
}
