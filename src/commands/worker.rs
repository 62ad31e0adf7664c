//! `verifybench worker`: this rank of an externally launched replay
//! ([`crate::launch::external_worker`]); rank 0 exports and prints the gathered record.

use crate::request::WorkerRequest;

/// Runs `verifybench worker`.
pub(crate) fn run(a: &WorkerRequest) -> anyhow::Result<i32> {
    if let Some(rec) = crate::launch::external_worker::run(a)? {
        a.export.write(std::slice::from_ref(&rec))?;
        super::print_result(a.format, &rec, crate::report::text::verify_table)?;
    }
    Ok(0)
}
