//! A decision file as `explain` prices it (`explain --allreduce-choice FILE`): the verify's
//! transfer with each all-reduce run as the decision chose for its size, in place of the
//! one-shot kernel at every size. Each all-reduce's modeled NCCL time is scaled by the chosen
//! candidate's paired ratio to NCCL's default at that size (CUDA graph: the engines capture
//! the verify), so that a measured decision brings its measured ratios and the model keeps its
//! scale; the all-gather stays on NCCL, and an all-reduce of a size the file does not hold is
//! priced on NCCL and named.

use std::path::Path;

use super::measure::NCCL_DEFAULT;
use super::Decision;
use crate::model::{CollectiveKind, Op, Schedule};
use crate::record::Source;

/// A decision file read for `explain`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LoadedChoice {
    /// The file, as given.
    pub(crate) file: String,
    /// Measured or modeled.
    pub(crate) source: Source,
    pub(crate) decision: Decision,
}

/// Reads `--allreduce-choice FILE`.
pub(crate) fn load(path: &Path) -> anyhow::Result<LoadedChoice> {
    let (rec, decision) = super::file::read(path, "--allreduce-choice")?;
    Ok(LoadedChoice {
        file: path.display().to_string(),
        source: rec.source,
        decision,
    })
}

/// The transfer of one pass of `s` on `nranks` ranks with every all-reduce as `c` chose for
/// its size, from the modeled NCCL time of each collective (`nccl_per_collective_us`, in the
/// schedule's order), and the line that says where it comes from; an error (the row's reason
/// to be absent) when the decision is of another world size or dtype.
pub(crate) fn transfer_with_choice(
    c: &LoadedChoice,
    s: &Schedule,
    nranks: usize,
    nccl_per_collective_us: &[f64],
) -> (Result<f64, String>, String) {
    let d = &c.decision;
    let src = match c.source {
        Source::Measured => "measured",
        _ => "modeled",
    };
    if d.world_size != nranks || d.dtype != s.dtype {
        let why = format!(
            "--allreduce-choice {}: its decision is for {} ranks in {}, this verify runs {nranks} in {}",
            c.file,
            d.world_size,
            d.dtype.name(),
            s.dtype.name()
        );
        return (Err(why.clone()), why);
    }
    let (mut sum, mut k) = (0.0, 0);
    let mut missing: Vec<u64> = vec![];
    let mut chosen: Vec<String> = vec![];
    for op in &s.ops {
        let Op::Collective {
            kind,
            bytes_per_rank,
            ..
        } = op
        else {
            continue;
        };
        let base = nccl_per_collective_us.get(k).copied().unwrap_or(0.0);
        k += 1;
        if *kind != CollectiveKind::AllReduce {
            sum += base;
            continue;
        }
        let shape = d.shapes.iter().find(|x| {
            x.shape.kind == CollectiveKind::AllReduce && x.shape.bytes == *bytes_per_rank
        });
        let ratio = match shape {
            Some(x) => {
                let word = format!(
                    "{} at {} B",
                    super::decide::choice_words(&x.graph, &d.candidates),
                    crate::units::grouped(*bytes_per_rank)
                );
                if !chosen.contains(&word) {
                    chosen.push(word);
                }
                match x.graph.figure(&x.graph.choice) {
                    Some(f) if x.graph.choice != NCCL_DEFAULT => f.ratio.unwrap_or(1.0),
                    _ => 1.0,
                }
            }
            None => {
                if !missing.contains(bytes_per_rank) {
                    missing.push(*bytes_per_rank);
                }
                1.0
            }
        };
        sum += base * ratio;
    }
    let mut said = chosen;
    if !missing.is_empty() {
        let m: Vec<String> = missing.iter().map(|b| crate::units::grouped(*b)).collect();
        said.push(format!(
            "sizes the file does not hold priced on NCCL: {} B",
            m.join(", ")
        ));
    }
    let line = format!(
        "the all-reduces as --allreduce-choice {} chose per size ({src}, paired ratios to NCCL's default in CUDA graphs): {}",
        c.file,
        said.join("; ")
    );
    (Ok(sum), line)
}
