//! `verifybench worker`: the flags of one externally launched rank; the rank itself runs in
//! [`crate::launch::external_worker`].

use crate::cli::args::{HostGapArgs, RepeatArgs, WorkloadArgs};
use crate::cli::output::{ExportArgs, OutputArgsMd};
use crate::cli::values::{self, named};
use crate::launch::rendezvous::{endpoint_arg, Endpoint};
use crate::record::Mode;
use crate::request::{GraphChoice, WorkerRequest};

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WorkerArgs {
    #[command(flatten)]
    pub(crate) workload: WorkloadArgs,
    /// Where rank 0 serves the NCCL id: HOST:PORT (default from MASTER_ADDR/MASTER_PORT).
    #[arg(long, value_parser = endpoint_arg)]
    pub(crate) rendezvous: Option<Endpoint>,
    /// Seconds a rank waits for the others to join the rendezvous (default: --timeout); greater
    /// than 0, at most 1000000.
    #[arg(long, value_parser = values::TIMEOUT, allow_negative_numbers = true)]
    pub(crate) rendezvous_timeout: Option<f64>,
    /// A file (mode 0600) holding the run's secret: only ranks that prove it join (else from
    /// VERIFYBENCH_RENDEZVOUS_TOKEN; neither: any host that reaches the port may join).
    #[arg(long, value_name = "FILE")]
    pub(crate) rendezvous_token_file: Option<std::path::PathBuf>,
    /// This rank (else from the launcher's environment).
    #[arg(long, value_parser = values::ordinal::<usize>(), allow_negative_numbers = true)]
    pub(crate) rank: Option<usize>,
    /// Number of ranks (else from the launcher's environment).
    #[arg(long, value_parser = values::ranks::<usize>(), allow_negative_numbers = true)]
    pub(crate) world_size: Option<usize>,
    /// GPU ordinal on this host (else from the launcher's environment).
    #[arg(long, value_parser = values::ordinal::<usize>(), allow_negative_numbers = true)]
    pub(crate) local_rank: Option<usize>,
    /// Eager launches, CUDA-graph replay, or both (one column each).
    #[arg(short = 'G', long, value_parser = named::<GraphChoice>(), default_value = "both")]
    pub(crate) graph: GraphChoice,
    /// What to replay (comma-separated): comm, compute, full.
    #[arg(long, value_parser = named::<Mode>(), value_delimiter = ',', default_value = "comm")]
    pub(crate) mode: Vec<Mode>,
    /// Tiny kernels launched per layer to model a real layer's many small kernels (as verify's
    /// flag): eager mode pays their launch cost, graph mode does not. 0 to 10000.
    #[arg(long, default_value_t = 0, value_parser = values::launches(), allow_negative_numbers = true)]
    pub(crate) launches_per_layer: u32,
    /// Launch the compute kernels with programmatic dependent launch (as verify's flag).
    #[arg(long)]
    pub(crate) pdl: bool,
    #[command(flatten)]
    pub(crate) repeat: RepeatArgs,
    /// Seconds without progress after which this rank aborts its communicator and exits
    /// (greater than 0, at most 1000000).
    #[arg(long, default_value_t = 60.0, value_parser = values::TIMEOUT, allow_negative_numbers = true)]
    pub(crate) timeout: f64,
    /// libnccl.so to load.
    #[arg(long, value_name = "PATH", env = "VERIFYBENCH_NCCL_LIB")]
    pub(crate) nccl_lib: Option<std::path::PathBuf>,
    /// Pin this rank to CPUs: auto (its GPU's NUMA node), none, or a CPU list (0-7,16-23).
    #[arg(long, value_name = "auto|none|LIST", default_value = "auto", value_parser = crate::cli::values::affinity_arg)]
    pub(crate) cpu_affinity: crate::launch::affinity::CpuAffinity,
    #[command(flatten)]
    pub(crate) export: ExportArgs,
    #[command(flatten)]
    pub(crate) output: OutputArgsMd,
    #[command(flatten)]
    pub(crate) host_gaps: HostGapArgs,
}

request_from!(|a: &WorkerArgs| -> WorkerRequest {
    workload: (&a.workload).into(),
    rendezvous,
    rendezvous_timeout,
    rendezvous_token_file,
    cpu_affinity,
    rank,
    world_size,
    local_rank,
    graph,
    mode,
    launches_per_layer,
    pdl,
    repeat: (&a.repeat).into(),
    timeout,
    nccl_lib,
    export: (&a.export).into(),
    format: a.output.format,
    host_gaps: (&a.host_gaps).into(),
});
