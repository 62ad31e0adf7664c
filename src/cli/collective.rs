//! `verifybench collective`: the flags; the run itself is [`crate::commands::collective`].

use crate::cli::args::{BackendArg, GpuArgs, GraphArg, ModelArgs, RepeatArgs};
use crate::cli::output::{ExportArgs, OutputArgsMd};
use crate::cli::values::{self, impl_list, ImplList};
use crate::model::{CollectiveKind, DType};
use crate::request::CollectiveRequest;

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CollectiveArgs {
    /// The collective to time.
    #[arg(long, default_value = "all_reduce")]
    pub(crate) op: CollectiveKind,
    /// Smallest size in bytes (K/M/G suffixes), nccl-tests' -b. Sizes are 1 to 16G, rounded
    /// down to whole elements per rank (said on stderr).
    #[arg(short = 'b', long = "minbytes", default_value = "8K", value_parser = values::COLLECTIVE_BYTES, allow_negative_numbers = true)]
    pub(crate) min_bytes: u64,
    /// Largest size in bytes, nccl-tests' -e (at most 16G).
    #[arg(short = 'e', long = "maxbytes", default_value = "1M", value_parser = values::COLLECTIVE_BYTES, allow_negative_numbers = true)]
    pub(crate) max_bytes: u64,
    /// Multiplication factor between sizes, nccl-tests' -f: 2 to 1024.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2, value_parser = values::STEP_FACTOR, allow_negative_numbers = true)]
    pub(crate) step_factor: u64,
    /// Extra exact sizes to include, e.g. 43008,57344 (the verify step's all-reduce); each is
    /// rounded down to whole elements per rank, and one below an element per rank is dropped
    /// (both said on stderr).
    #[arg(long, value_delimiter = ',', value_parser = values::COLLECTIVE_BYTES, allow_negative_numbers = true)]
    pub(crate) sizes: Vec<u64>,
    /// Element type, nccl-tests' -d.
    #[arg(short = 'd', long = "datatype", default_value = "bf16")]
    pub(crate) dtype: DType,
    #[command(flatten)]
    pub(crate) graph: GraphArg,
    #[command(flatten)]
    pub(crate) backend: BackendArg,
    #[command(flatten)]
    pub(crate) gpu: GpuArgs,
    #[command(flatten)]
    pub(crate) repeat: RepeatArgs,
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    #[command(flatten)]
    pub(crate) export: ExportArgs,
    #[command(flatten)]
    pub(crate) output: OutputArgsMd,
    /// Implementations to run side by side, comma-separated: nccl (NCCL's collective),
    /// oneshot and twoshot (the P2P all-reduces of kernels/allreduce.cu; --op all_reduce only,
    /// messages up to 4 MiB, 2 to 8 GPUs with peer access). Prints a crossover table.
    #[arg(long = "impl", value_name = "LIST", value_parser = impl_list, default_value = "nccl")]
    pub(crate) impls: ImplList,
    /// Repetitions, each in fresh workers (processes launcher: new worker processes; threads:
    /// new communicators), 1 to 100: the output adds the median of the repetitions' medians,
    /// their min-max and a 95% interval; a cold first repetition is named and left out.
    #[arg(long, default_value_t = 1, value_name = "R", value_parser = values::repetitions("fresh runs"), allow_negative_numbers = true)]
    pub(crate) fresh_runs: usize,
}

request_from!(|a: &CollectiveArgs| -> CollectiveRequest {
    op,
    min_bytes,
    max_bytes,
    step_factor,
    sizes,
    dtype,
    graph: a.graph.graph,
    backend: a.backend.backend,
    gpu: (&a.gpu).into(),
    repeat: (&a.repeat).into(),
    model: (&a.model).into(),
    export: (&a.export).into(),
    format: a.output.format,
    impls: a.impls.0.clone(),
    fresh_runs,
    fresh_run: 0,
});

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        c: CollectiveArgs,
    }

    #[test]
    fn nccl_tests_style_size_range() {
        let sizes = |argv: &[&str]| CollectiveRequest::from(&T::parse_from(argv).c).sizes(2);
        assert_eq!(
            sizes(&["t", "-b", "8K", "-e", "64K", "-f", "2", "--sizes", "43008"]).unwrap(),
            vec![8192, 16384, 32768, 43008, 65536]
        );
        assert!(sizes(&["t", "-b", "64K", "-e", "8K"]).is_err());
        // sizes round down to whole elements per rank
        assert_eq!(
            sizes(&["t", "-b", "10", "-e", "10", "-d", "f32"]).unwrap(),
            vec![8]
        );
    }
}
