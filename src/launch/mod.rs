//! Starting ranks: threads of this process, or worker processes (the binary re-executes itself).

use crate::cli::{collective::CollectiveArgs, verify::VerifyArgs};
use crate::report::Record;

/// Runs the verify replay on real GPUs.
pub fn verify(_a: &VerifyArgs, _started: String) -> anyhow::Result<Record> {
    anyhow::bail!("the NCCL backend is not built yet")
}

/// Runs one collective over a size range on real GPUs.
pub fn collective(_a: &CollectiveArgs, _started: String) -> anyhow::Result<Record> {
    anyhow::bail!("the NCCL backend is not built yet")
}
