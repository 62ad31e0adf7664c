//! `verifybench __rank` (hidden): one worker process of `--launcher processes`.

use std::path::PathBuf;

use crate::commands::rank::RankRequest;
use crate::launch::Fault;

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RankArgs {
    /// JSON file holding the job.
    #[arg(long)]
    pub(crate) job: PathBuf,
    #[arg(long)]
    pub(crate) rank: usize,
    #[arg(long)]
    pub(crate) nranks: usize,
    #[arg(long)]
    pub(crate) device: usize,
    /// NCCL unique id, hex.
    #[arg(long)]
    pub(crate) id: String,
    #[arg(long)]
    pub(crate) fault: Option<Fault>,
    /// auto, none or a CPU list (the launcher's --cpu-affinity).
    #[arg(long, default_value = "auto", value_parser = crate::cli::values::affinity_arg)]
    pub(crate) cpu_affinity: crate::launch::affinity::CpuAffinity,
}

request_from!(|a: &RankArgs| -> RankRequest {
    job,
    rank,
    nranks,
    device,
    id,
    fault,
    cpu_affinity,
});
