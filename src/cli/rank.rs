//! `verifybench __rank` (hidden): one worker process of `--launcher processes`.

use std::path::PathBuf;

use crate::commands::rank::RankRequest;
use crate::launch::Fault;

#[derive(Debug, Clone, clap::Args)]
pub struct RankArgs {
    /// JSON file holding the job.
    #[arg(long)]
    pub job: PathBuf,
    #[arg(long)]
    pub rank: usize,
    #[arg(long)]
    pub nranks: usize,
    #[arg(long)]
    pub device: usize,
    /// NCCL unique id, hex.
    #[arg(long)]
    pub id: String,
    #[arg(long)]
    pub fault: Option<Fault>,
    /// auto, none or a CPU list (the launcher's --cpu-affinity).
    #[arg(long, default_value = "auto", value_parser = crate::cli::values::affinity_arg)]
    pub cpu_affinity: crate::launch::affinity::CpuAffinity,
}

impl From<&RankArgs> for RankRequest {
    fn from(a: &RankArgs) -> RankRequest {
        RankRequest {
            job: a.job.clone(),
            rank: a.rank,
            nranks: a.nranks,
            device: a.device,
            id: a.id.clone(),
            fault: a.fault,
            cpu_affinity: a.cpu_affinity.clone(),
        }
    }
}
