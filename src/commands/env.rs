//! `verifybench env`: GPUs, links, driver, NCCL library and version, and the NCCL_* environment
//! each worker process really sees; the look is [`crate::machine::gather`].

use crate::output::Format;
use crate::request::GpuSpec;

/// What `env` looks at, and how it prints.
#[derive(Debug, Clone)]
pub(crate) struct EnvRequest {
    pub(crate) gpu: GpuSpec,
    pub(crate) format: Format,
}

/// Runs `verifybench env`.
pub(crate) fn run(a: &EnvRequest) -> anyhow::Result<i32> {
    let started = crate::util::now_utc();
    let r = crate::machine::gather(&a.gpu)?;
    if a.format.is_json() {
        println!(
            "{}",
            crate::machine::env_record(&r, started).to_json_pretty()
        );
    } else {
        print!("{}", crate::report::env::render(&r));
    }
    Ok(0)
}
