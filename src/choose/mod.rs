//! `verifybench choose`: which all-reduce for each shape of the speculative cycle, NCCL (its
//! default and the settings asked) or the P2P one-shot and two-shot kernels, decided per
//! message size, kept in a decision file under the key it depends on, and written as the
//! engines' settings.
//!
//! Why a command of its own and not a mode of `sweep`: a sweep ranks NCCL settings for the
//! whole verify and recommends one; a choice is per message size and across implementations,
//! and its output is a file an engine's operator keeps and re-uses while the machine stays the
//! same. It reuses the sweep's pieces: the interleaved rounds and their paired ratios
//! ([`crate::sweep::rounds`]), fresh worker processes with each point's NCCL variables
//! ([`crate::sweep::runner`], [`crate::sweep::env`]), NCCL's log as the proof of what it chose
//! ([`crate::sweep::ncclog`]), and `collective`'s harness for the timing and the exact check
//! of every implementation ([`crate::backend`]).
//!
//! - [`shapes`]: the cycle's distinct collectives (decode, verify, draft, the logits gather).
//! - [`measure`]: the candidates, the points a round runs, the rounds; the cost model's runs.
//! - [`children`]: the measured runs, in fresh worker processes.
//! - [`decide`]: the choice per shape, beyond the noise of the same run, and the crossover.
//! - [`key`]: the decision's key; [`file`]: the decision file, reused while its key holds.
//! - [`engines`]: what the decision means for SGLang and vLLM, with the files it comes from.
//! - [`on_one_gpu`]: the P2P path on virtual ranks of one GPU (not a P2P measurement).
//! - [`render`]: the text; [`for_explain`]: the decision as `explain` prices it.

pub(crate) mod children;
pub(crate) mod decide;
pub(crate) mod engines;
pub(crate) mod file;
pub(crate) mod for_explain;
pub(crate) mod key;
pub(crate) mod measure;
pub(crate) mod on_one_gpu;
pub(crate) mod render;
pub(crate) mod shapes;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::model::{CollectiveKind, DType};
use crate::request::{BackendKind, GpuSpec, ModelSettings, Repeat, Workload};
use decide::{Band, ModeChoice};
use engines::{EngineSetting, Links};
use key::{Fingerprint, KeyOfWork};
use measure::{Candidate, Measure, Point, Rounds};
use shapes::Shape;

/// Most draft steps (`--draft-steps`).
pub(crate) const MAX_DRAFT_STEPS: u64 = 16;
/// Most concurrencies in one choice (`--concurrency`).
pub(crate) const MAX_CONCURRENCIES: usize = 16;
/// Most rounds (`--rounds`).
pub(crate) const MAX_ROUNDS: usize = 100;

/// `verifybench choose`, as the flags give it.
#[derive(Debug, Clone)]
pub(crate) struct ChooseRequest {
    /// The model, tp, dtype, draft vocabulary and logits; its tokens and phase are set per
    /// forward.
    pub(crate) workload: Workload,
    /// Requests in flight: each gives a decode of C tokens, a verify of C(k+1), a draft step.
    pub(crate) concurrency: Vec<u64>,
    /// Draft steps k per cycle.
    pub(crate) draft_steps: u64,
    /// NCCL_PROTO values compared beside NCCL's default.
    pub(crate) protos: Vec<String>,
    /// NCCL_ALGO values compared beside NCCL's default.
    pub(crate) algos: Vec<String>,
    pub(crate) rounds: usize,
    pub(crate) seed: u64,
    pub(crate) repeat: Repeat,
    pub(crate) backend: BackendKind,
    pub(crate) gpu: GpuSpec,
    pub(crate) model: ModelSettings,
    /// The decision file: reused while its key holds, written otherwise.
    pub(crate) decision: Option<PathBuf>,
    /// Measure again even where the decision file's key holds.
    pub(crate) remeasure: bool,
    /// Also run the P2P path on virtual ranks of one GPU.
    pub(crate) virtual_ranks: bool,
    /// Testing (`--debug-children-on-model`): the measured pipeline with `collective
    /// --backend model` children.
    pub(crate) children_on_model: bool,
    pub(crate) format: crate::output::Format,
}

impl ChooseRequest {
    /// The ranges of the flags, before anything is read or run.
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        if self.concurrency.is_empty() || self.concurrency.len() > MAX_CONCURRENCIES {
            crate::usage_bail!(
                "--concurrency: give 1 to {MAX_CONCURRENCIES} request counts, e.g. 1,8"
            );
        }
        if let Some(c) = self.concurrency.iter().find(|c| **c == 0) {
            crate::usage_bail!("--concurrency {c}: a cycle serves at least one request");
        }
        if !(1..=MAX_DRAFT_STEPS).contains(&self.draft_steps) {
            crate::usage_bail!(
                "--draft-steps {}: give 1 to {MAX_DRAFT_STEPS} draft steps per cycle",
                self.draft_steps
            );
        }
        let max = crate::request::MAX_TOKENS;
        if let Some(c) = self
            .concurrency
            .iter()
            .find(|c| c.saturating_mul(self.draft_steps + 1) > max)
        {
            crate::usage_bail!(
                "--concurrency {c} with --draft-steps {}: a verify of {c} x {} tokens is more than the {max} tokens of one forward",
                self.draft_steps,
                self.draft_steps + 1
            );
        }
        if !(1..=MAX_ROUNDS).contains(&self.rounds) {
            crate::usage_bail!(
                "--rounds {}: give 1 to {MAX_ROUNDS} (2 or more to measure the noise)",
                self.rounds
            );
        }
        for (flag, list, known) in [
            ("--nccl-proto", &self.protos, &["LL", "LL128", "Simple"][..]),
            ("--nccl-algo", &self.algos, &["Ring", "Tree"][..]),
        ] {
            if let Some(v) = list.iter().find(|v| !known.contains(&v.as_str())) {
                crate::usage_bail!("{flag} {v}: give values of {}", known.join(", "));
            }
        }
        self.workload.check_bounds()?;
        Ok(())
    }
}

/// The request resolved once: the rank count, the shapes, what is compared, the points.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub(crate) tp: usize,
    pub(crate) model: String,
    pub(crate) hidden: u64,
    pub(crate) dtype: DType,
    pub(crate) shapes: Vec<Shape>,
    pub(crate) candidates: Vec<Candidate>,
    pub(crate) points: Vec<Point>,
}

/// Resolves `r` at `tp` ranks (2 to 8: the P2P kernels' range).
pub(crate) fn job(r: &ChooseRequest, tp: usize) -> anyhow::Result<Job> {
    if !(2..=crate::comm::p2p::MAX_RANKS).contains(&tp) {
        crate::usage_bail!(
            "choose compares NCCL with the P2P all-reduces, which run on 2 to {} ranks (got {tp}); give --tp 2 to {}",
            crate::comm::p2p::MAX_RANKS,
            crate::comm::p2p::MAX_RANKS
        );
    }
    let shape = r.workload.shape()?;
    let shapes = shapes::cycle_shapes(&r.workload, tp as u64, &r.concurrency, r.draft_steps)?;
    let candidates = measure::candidates(&r.protos, &r.algos);
    let points = measure::points(&shapes, &candidates);
    Ok(Job {
        tp,
        model: shape.name.clone(),
        hidden: shape.hidden,
        dtype: r.workload.dtype,
        shapes,
        candidates,
        points,
    })
}

impl Job {
    /// What the key holds beside the machine.
    pub(crate) fn key_of_work(&self) -> KeyOfWork {
        KeyOfWork {
            world_size: self.tp,
            dtype: self.dtype,
            hidden_size: self.hidden,
            tokens: shapes::token_counts(&self.shapes),
            nccl_settings: measure::settings_of(&self.candidates),
        }
    }
}

/// One shape's choice, in CUDA-graph replay (as the engines capture the decode and the
/// verify) and eagerly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ShapeChoice {
    pub(crate) shape: Shape,
    pub(crate) graph: ModeChoice,
    pub(crate) eager: ModeChoice,
}

/// A decision: what the decision file holds (in the record envelope, kind `allreduce_choice`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Decision {
    /// What the decision depends on; a run with another key measures again.
    pub(crate) key: Fingerprint,
    pub(crate) model: String,
    pub(crate) world_size: usize,
    pub(crate) dtype: DType,
    pub(crate) hidden_size: u64,
    pub(crate) concurrency: Vec<u64>,
    pub(crate) draft_steps: u64,
    pub(crate) rounds: usize,
    pub(crate) seed: u64,
    /// The bar: at least this much faster than NCCL's default, relative and in us.
    pub(crate) min_rel: f64,
    pub(crate) min_us: f64,
    pub(crate) candidates: Vec<Candidate>,
    pub(crate) shapes: Vec<ShapeChoice>,
    /// The all-reduces' crossover in CUDA-graph replay and eagerly.
    pub(crate) crossover_graph: Vec<Band>,
    pub(crate) crossover_eager: Vec<Band>,
    /// The same as words: "one-shot up to 56.0 KiB (57,344 B), NCCL (Ring/LL) above".
    pub(crate) crossover_graph_words: String,
    pub(crate) crossover_eager_words: String,
    /// What the graph crossover means for vLLM and SGLang.
    pub(crate) engines: Vec<EngineSetting>,
    /// Candidates whose runs failed, with why.
    #[serde(default)]
    pub(crate) failed: BTreeMap<String, String>,
    /// The P2P path on virtual ranks of one GPU (not a P2P measurement), when asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) virtual_ranks: Option<on_one_gpu::VirtualRanks>,
}

/// What a decision is made of beside the rounds.
pub(crate) struct Frame<'a> {
    pub(crate) request: &'a ChooseRequest,
    pub(crate) job: &'a Job,
    pub(crate) key: Fingerprint,
    pub(crate) links: Links,
    pub(crate) modeled: bool,
}

/// Runs the rounds of `f`'s points on `m` and decides (`progress` hears of each run).
pub(crate) fn measure_and_decide(
    f: Frame<'_>,
    m: &dyn Measure,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(&Point, usize, &measure::PointRun),
) -> anyhow::Result<(Decision, Rounds)> {
    let rounds = measure::run_rounds(
        &f.job.points,
        f.request.rounds,
        f.request.seed,
        m,
        interrupted,
        progress,
    )?;
    Ok((decision(f, &rounds), rounds))
}

/// The decision of `f` from what the rounds gave.
pub(crate) fn decision(f: Frame<'_>, rounds: &Rounds) -> Decision {
    let (job, cands) = (f.job, &f.job.candidates);
    let shapes: Vec<ShapeChoice> = job
        .shapes
        .iter()
        .map(|s| {
            let empty = vec![];
            let t = rounds.timings.get(&(s.kind, s.size)).unwrap_or(&empty);
            let mode = |graph: bool| {
                let used = |id: &str| {
                    rounds
                        .nccl_used
                        .get(&(id.to_string(), s.kind, s.size, graph))
                        .cloned()
                };
                decide::judge(t, cands, graph, f.modeled, &used)
            };
            ShapeChoice {
                shape: s.clone(),
                graph: mode(true),
                eager: mode(false),
            }
        })
        .collect();
    let bands = |graph: bool| {
        let v: Vec<(u64, &ModeChoice)> = shapes
            .iter()
            .filter(|c| c.shape.kind == CollectiveKind::AllReduce)
            .map(|c| (c.shape.bytes, if graph { &c.graph } else { &c.eager }))
            .collect();
        decide::crossover(&v, cands)
    };
    let (graph, eager) = (bands(true), bands(false));
    let engines = engines::settings(&engines::ask(&graph, cands), job.tp, f.links);
    Decision {
        key: f.key,
        model: job.model.clone(),
        world_size: job.tp,
        dtype: job.dtype,
        hidden_size: job.hidden,
        concurrency: f.request.concurrency.clone(),
        draft_steps: f.request.draft_steps,
        rounds: f.request.rounds,
        seed: f.request.seed,
        min_rel: decide::MIN_REL,
        min_us: decide::MIN_US,
        candidates: cands.clone(),
        crossover_graph_words: decide::crossover_words(&graph),
        crossover_eager_words: decide::crossover_words(&eager),
        crossover_graph: graph,
        crossover_eager: eager,
        shapes,
        engines,
        failed: rounds.failed.clone(),
        virtual_ranks: None,
    }
}

/// How the GPUs of a modeled profile are linked (its intra-node link kind).
pub(crate) fn links_of_profile(kind: &str) -> Links {
    match kind {
        "nvlink" => Links::Nvlink,
        "pci" | "shm" => Links::Pcie,
        _ => Links::Unknown,
    }
}

#[cfg(test)]
mod tests;
