//! `verifybench collective`: one collective over a size range, nccl-tests style.

use crate::cli::args::{Backend, GpuArgs, GraphChoice, RepeatArgs};
use crate::costmodel::ModelArgs;
use crate::model::{CollectiveKind, DType};
use crate::record::{Body, Provenance, Record, Source};
use crate::report::{text, ExportArgs};
use crate::units::size_arg;

#[derive(Debug, Clone, clap::Args)]
pub struct CollectiveArgs {
    /// The collective to time.
    #[arg(long, default_value = "all_reduce")]
    pub op: CollectiveKind,
    /// Smallest size in bytes (K/M/G suffixes), nccl-tests' -b.
    #[arg(short = 'b', long = "minbytes", default_value = "8K", value_parser = size_arg)]
    pub min_bytes: u64,
    /// Largest size in bytes, nccl-tests' -e.
    #[arg(short = 'e', long = "maxbytes", default_value = "1M", value_parser = size_arg)]
    pub max_bytes: u64,
    /// Multiplication factor between sizes, nccl-tests' -f.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2)]
    pub step_factor: u64,
    /// Extra exact sizes to include, e.g. 43008,57344 (the verify step's all-reduce).
    #[arg(long, value_delimiter = ',', value_parser = size_arg)]
    pub sizes: Vec<u64>,
    /// Element type, nccl-tests' -d.
    #[arg(short = 'd', long = "datatype", default_value = "bf16")]
    pub dtype: DType,
    /// Eager launches, CUDA-graph replay, or both.
    #[arg(short = 'G', long, value_enum, default_value_t = GraphChoice::Both)]
    pub graph: GraphChoice,
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,
    #[command(flatten)]
    pub gpu: GpuArgs,
    #[command(flatten)]
    pub repeat: RepeatArgs,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub export: ExportArgs,
}

/// The sizes to run: min, min*f, ... <= max, plus the explicit ones, each rounded down to a
/// whole number of elements that splits evenly over `nranks` ranks; sorted, deduplicated.
pub fn sizes(a: &CollectiveArgs, nranks: usize) -> anyhow::Result<Vec<u64>> {
    if a.min_bytes == 0 || a.max_bytes < a.min_bytes {
        crate::usage_bail!(
            "-b/--minbytes must be positive and at most -e/--maxbytes (got {} and {})",
            a.min_bytes,
            a.max_bytes
        );
    }
    if a.step_factor < 2 {
        crate::usage_bail!("-f/--stepfactor must be at least 2");
    }
    let unit = a.dtype.size() * nranks as u64;
    let mut out = vec![];
    let mut s = a.min_bytes;
    while s <= a.max_bytes {
        out.push(s);
        s = match s.checked_mul(a.step_factor) {
            Some(x) => x,
            None => break,
        };
    }
    out.extend(&a.sizes);
    let mut v: Vec<u64> = out
        .into_iter()
        .map(|s| s / unit * unit)
        .filter(|&s| s > 0)
        .collect();
    v.sort_unstable();
    v.dedup();
    if v.is_empty() {
        crate::usage_bail!("no size holds one element per rank: raise -b/--minbytes");
    }
    Ok(v)
}

pub fn run(a: &CollectiveArgs) -> anyhow::Result<i32> {
    let started = crate::util::now_utc();
    let backend = crate::cli::resolve_backend(a.backend, false)?;
    let record = match backend {
        Backend::Model => {
            let n = a.gpu.gpus.unwrap_or(8);
            let m = crate::costmodel::collective(
                a.op,
                a.dtype,
                &sizes(a, n)?,
                n,
                &a.graph.modes(),
                a.gpu.launcher,
                &a.model,
            )?;
            let mut p = Provenance::here("model", started);
            p.model_profile = Some(m.profile);
            p.notes = m.notes;
            Record::new(Source::Modeled, p, Body::Collective(m.result))
        }
        _ => crate::cli::nccl_collective(a, started)?,
    };
    a.export.write(std::slice::from_ref(&record))?;
    print!("{}", text::collective_table(&record));
    let Body::Collective(c) = &record.body else {
        unreachable!("collective produces collective records")
    };
    let wrong: u64 = c
        .rows
        .iter()
        .flat_map(|r| [&r.eager, &r.graph])
        .flatten()
        .map(|t| t.wrong)
        .sum();
    if wrong > 0 {
        anyhow::bail!("{wrong} elements of the collectives' results were wrong");
    }
    Ok(0)
}

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
        let t = T::parse_from(["t", "-b", "8K", "-e", "64K", "-f", "2", "--sizes", "43008"]);
        assert_eq!(
            sizes(&t.c, 2).unwrap(),
            vec![8192, 16384, 32768, 43008, 65536]
        );
        let t = T::parse_from(["t", "-b", "64K", "-e", "8K"]);
        assert!(sizes(&t.c, 2).is_err());
        // sizes round down to whole elements per rank
        let t = T::parse_from(["t", "-b", "10", "-e", "10", "-d", "f32"]);
        assert_eq!(sizes(&t.c, 2).unwrap(), vec![8]);
    }
}
