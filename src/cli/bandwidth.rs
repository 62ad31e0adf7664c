//! `verifybench bandwidth`: the device-to-device copy bandwidth and the weight-streaming
//! kernel's achieved bandwidth, measured in the same run on each GPU: the ceiling the compute
//! of a verify step is held to. The flags only; the command is [`crate::commands::bandwidth`].

use crate::cli::output::OutputArgs;
use crate::cli::values;
use crate::commands::bandwidth::BandwidthRequest;

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct BandwidthArgs {
    /// Bytes per pass (rounded down to a power of two for the streaming pool); use several
    /// times the L2 size so that passes read device memory.
    #[arg(long, default_value = "2G", value_parser = values::bytes(1 << 20, 1 << 40, "2G"), allow_negative_numbers = true)]
    pub(crate) bytes: u64,
    /// Device ordinals to measure (default: all).
    #[arg(long, value_delimiter = ',', value_parser = values::ordinal::<usize>(), allow_negative_numbers = true)]
    pub(crate) devices: Option<Vec<usize>>,
    /// Timed passes per measurement (the best is kept, as for a ceiling; the median is shown
    /// beside it).
    #[arg(short = 'n', long = "iters", default_value_t = 10, value_parser = values::whole::<u32>("timed passes", 1, 10_000, "10"), allow_negative_numbers = true)]
    pub(crate) iters: u32,
    /// Token counts to stream at, each on every kernel that takes it: the CUDA cores up to 16
    /// tokens, the tensor cores (compute capability 8.0 and newer) up to 512.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,4,16,32,64,128,256,512",
        value_parser = values::whole::<usize>("tokens", 1, crate::comm::MAX_STREAM_TOKENS as u64, "16"),
        allow_negative_numbers = true
    )]
    pub(crate) tokens: Vec<usize>,
    /// Sizes of single streaming operations to time (3 tokens), as a verify step's ops are:
    /// small operations pay a fixed launch-and-drain cost on top of their bytes.
    #[arg(long, value_delimiter = ',', value_parser = values::bytes(16, 16 << 30, "1M"), default_value = "16,1M,4M,16M,64M,256M", allow_negative_numbers = true)]
    pub(crate) op_sizes: Vec<u64>,
    /// Write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) export_json: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub(crate) output: OutputArgs,
}

request_from!(|a: &BandwidthArgs| -> BandwidthRequest {
    bytes,
    devices,
    iters,
    tokens,
    op_sizes,
    export_json,
    format: a.output.format,
});
