//! `verifybench bandwidth`: the device-to-device copy bandwidth and the weight-streaming
//! kernel's achieved bandwidth, measured in the same run on each GPU: the ceiling the compute
//! of a verify step is held to. The flags only; the command is [`crate::commands::bandwidth`].

use crate::cli::output::OutputArgs;
use crate::commands::bandwidth::BandwidthRequest;
use crate::units::size_arg;

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct BandwidthArgs {
    /// Bytes per pass (rounded down to a power of two for the streaming pool); use several
    /// times the L2 size so that passes read device memory.
    #[arg(long, default_value = "2G", value_parser = size_arg)]
    pub(crate) bytes: u64,
    /// Device ordinals to measure (default: all).
    #[arg(long, value_delimiter = ',')]
    pub(crate) devices: Option<Vec<usize>>,
    /// Timed passes per measurement (the best is kept, as for a ceiling; the median is shown
    /// beside it).
    #[arg(short = 'n', long = "iters", default_value_t = 10)]
    pub(crate) iters: u32,
    /// Token counts to stream at, each on every kernel that takes it: the CUDA cores up to 16
    /// tokens, the tensor cores (compute capability 8.0 and newer) up to 512.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,4,16,32,64,128,256,512"
    )]
    pub(crate) tokens: Vec<usize>,
    /// Sizes of single streaming operations to time (3 tokens), as a verify step's ops are:
    /// small operations pay a fixed launch-and-drain cost on top of their bytes.
    #[arg(long, value_delimiter = ',', value_parser = size_arg, default_value = "16,1M,4M,16M,64M,256M")]
    pub(crate) op_sizes: Vec<u64>,
    /// Write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) export_json: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub(crate) output: OutputArgs,
}

impl From<&BandwidthArgs> for BandwidthRequest {
    fn from(a: &BandwidthArgs) -> BandwidthRequest {
        BandwidthRequest {
            bytes: a.bytes,
            devices: a.devices.clone(),
            iters: a.iters,
            tokens: a.tokens.clone(),
            op_sizes: a.op_sizes.clone(),
            export_json: a.export_json.clone(),
            format: a.output.format,
        }
    }
}
