//! What is compared and how it is run: the candidates (NCCL's default, each NCCL setting asked,
//! one-shot, two-shot), the points a round runs (one NCCL setting on one collective, the P2P
//! kernels beside NCCL's default on the all-reduces, all sizes of that collective in one run,
//! eager and CUDA graph), and the rounds themselves: every round runs every point once in its
//! own shuffled order ([`crate::sweep::rounds::RoundPlan`]), so that a candidate is judged
//! against NCCL's default of the same round.
//!
//! A [`Measure`] runs one point of one round: [`ModelMeasure`] through the cost model
//! (`collective --backend model`), `children::ChildMeasure` in fresh worker processes
//! (`collective --backend nccl`, with NCCL's log of the first round proving what it chose).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::comm::p2p::Impl;
use crate::model::{CollectiveKind, DType};
use crate::record::{Body, Provenance, Record, Source};
use crate::request::{
    BackendKind, CollectiveRequest, GpuSpec, GraphChoice, Launcher, ModelSettings, Repeat,
};
use crate::sweep::rounds::{RoundKey, RoundPlan, RoundTiming};

/// The id of NCCL's default among the candidates: every ratio is to it.
pub(crate) const NCCL_DEFAULT: &str = "nccl";

/// One implementation compared: NCCL with a setting, or a P2P kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Candidate {
    /// `nccl`, `nccl:NCCL_PROTO=LL`, `oneshot`, `twoshot`.
    pub(crate) id: String,
    /// `NCCL`, `NCCL/LL`, `one-shot`, `two-shot`.
    pub(crate) label: String,
    pub(crate) imp: Impl,
    /// The NCCL_* variables of an NCCL candidate (none for the default and the P2P kernels).
    pub(crate) overrides: Vec<(String, String)>,
}

/// The candidates: NCCL's default, each of `protos` x `algos` (a missing list leaves that
/// variable at its default), one-shot and two-shot.
pub(crate) fn candidates(protos: &[String], algos: &[String]) -> Vec<Candidate> {
    let opt = |v: &[String]| -> Vec<Option<String>> {
        if v.is_empty() {
            vec![None]
        } else {
            v.iter().cloned().map(Some).collect()
        }
    };
    let mut out = vec![Candidate {
        id: NCCL_DEFAULT.into(),
        label: "NCCL".into(),
        imp: Impl::Nccl,
        overrides: vec![],
    }];
    for a in opt(algos) {
        for p in opt(protos) {
            let mut ov = vec![];
            if let Some(a) = &a {
                ov.push(("NCCL_ALGO".to_string(), a.clone()));
            }
            if let Some(p) = &p {
                ov.push(("NCCL_PROTO".to_string(), p.clone()));
            }
            if ov.is_empty() {
                continue;
            }
            let words: Vec<&str> = ov.iter().map(|(_, v)| v.as_str()).collect();
            let settings: Vec<String> = ov.iter().map(|(k, v)| format!("{k}={v}")).collect();
            out.push(Candidate {
                id: format!("nccl:{}", settings.join(",")),
                label: format!("NCCL/{}", words.join("/")),
                imp: Impl::Nccl,
                overrides: ov,
            });
        }
    }
    for (imp, label) in [(Impl::OneShot, "one-shot"), (Impl::TwoShot, "two-shot")] {
        out.push(Candidate {
            id: imp.name().into(),
            label: label.into(),
            imp,
            overrides: vec![],
        });
    }
    out
}

/// The NCCL settings of `c` beside the default, as the key holds them (`NCCL_PROTO=LL`).
pub(crate) fn settings_of(c: &[Candidate]) -> Vec<String> {
    c.iter()
        .filter(|c| c.imp == Impl::Nccl && !c.overrides.is_empty())
        .map(|c| c.id.trim_start_matches("nccl:").to_string())
        .collect()
}

/// One run of a round: one NCCL candidate on one collective over all of its sizes, with the
/// P2P kernels beside NCCL's default on the all-reduces.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Point {
    /// File-name safe: `all_reduce-nccl`, `all_gather-NCCL_PROTO-LL`.
    pub(crate) id: String,
    pub(crate) op: CollectiveKind,
    /// The NCCL candidate's id.
    pub(crate) candidate: String,
    pub(crate) overrides: Vec<(String, String)>,
    /// Whether the P2P kernels run beside NCCL in this point.
    pub(crate) p2p: bool,
    /// The sizes of `op` (nccl-tests' sizes), ascending.
    pub(crate) sizes: Vec<u64>,
    pub(crate) dtype: DType,
}

/// The points of a choice over `shapes` (all-reduces first). The P2P kernels take
/// all-reduces up to [`crate::impls::capacity`] (4 MiB): larger all-reduces run in a point of
/// their own, NCCL's settings only.
pub(crate) fn points(shapes: &[super::shapes::Shape], cands: &[Candidate]) -> Vec<Point> {
    let cap = crate::impls::capacity() as u64;
    let mut out = vec![];
    for op in [CollectiveKind::AllReduce, CollectiveKind::AllGather] {
        let mut sizes: Vec<u64> = shapes
            .iter()
            .filter(|s| s.kind == op)
            .map(|s| s.size)
            .collect();
        if sizes.is_empty() {
            continue;
        }
        sizes.sort_unstable();
        sizes.dedup();
        let dtype = shapes[0].dtype;
        for c in cands.iter().filter(|c| c.imp == Impl::Nccl) {
            let point = |slug: &str, p2p: bool, sizes: Vec<u64>| Point {
                id: format!("{}-{slug}", op.name()),
                op,
                candidate: c.id.clone(),
                overrides: c.overrides.clone(),
                p2p,
                sizes,
                dtype,
            };
            let slug = slug_of(c);
            if op == CollectiveKind::AllReduce && c.overrides.is_empty() {
                let (small, large): (Vec<u64>, Vec<u64>) = sizes.iter().partition(|&&s| s <= cap);
                if !small.is_empty() {
                    out.push(point(&slug, true, small));
                }
                if !large.is_empty() {
                    out.push(point(&format!("{slug}-above-4MiB"), false, large));
                }
            } else {
                out.push(point(&slug, false, sizes.clone()));
            }
        }
    }
    out
}

/// A file-name safe name of an NCCL candidate: `nccl`, `PROTO-LL`, `ALGO-Ring-PROTO-LL`.
fn slug_of(c: &Candidate) -> String {
    if c.overrides.is_empty() {
        return "nccl".into();
    }
    c.overrides
        .iter()
        .map(|(k, v)| format!("{}-{v}", k.trim_start_matches("NCCL_")))
        .collect::<Vec<_>>()
        .join("-")
        .chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() || ch == '-' {
                ch
            } else {
                '_'
            }
        })
        .collect()
}

/// One candidate's time at one size in one run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub(crate) candidate: String,
    pub(crate) op: CollectiveKind,
    pub(crate) size: u64,
    pub(crate) eager_us: Option<f64>,
    pub(crate) graph_us: Option<f64>,
}

/// What one point of one round gave.
#[derive(Debug, Clone, Default)]
pub(crate) struct PointRun {
    pub(crate) samples: Vec<Sample>,
    /// (candidate, op, size, graph) -> NCCL's algorithm/protocol (`Ring/LL`), where known.
    pub(crate) nccl_used: BTreeMap<(String, CollectiveKind, u64, bool), String>,
    /// Lines of the run worth keeping (a P2P skip, a rounded size).
    pub(crate) notes: Vec<String>,
    /// The run's provenance (the first one kept: GPUs, driver, NCCL as the workers saw them).
    pub(crate) provenance: Option<Provenance>,
    /// Why the point failed (its results are then not used).
    pub(crate) failure: Option<String>,
}

/// Runs one point of one round.
pub(crate) trait Measure {
    /// `measured` or `modeled`.
    fn source(&self) -> Source;
    fn run(&self, p: &Point, round: usize) -> anyhow::Result<PointRun>;
}

/// The samples of a `collective` record run for `p`: NCCL's times as `p.candidate`, the P2P
/// rows as theirs.
pub(crate) fn samples_of(rec: &Record, p: &Point) -> Vec<Sample> {
    let Body::Collective(c) = &rec.body else {
        return vec![];
    };
    let mut out = vec![];
    for row in c.rows.iter().filter(|r| p.sizes.contains(&r.size_bytes)) {
        let t = |x: &Option<crate::record::CollTiming>| x.as_ref().map(|t| t.time_us);
        if row.eager.is_some() || row.graph.is_some() {
            out.push(Sample {
                candidate: p.candidate.clone(),
                op: p.op,
                size: row.size_bytes,
                eager_us: t(&row.eager),
                graph_us: t(&row.graph),
            });
        }
        for i in &row.p2p {
            out.push(Sample {
                candidate: i.imp.name().into(),
                op: p.op,
                size: row.size_bytes,
                eager_us: t(&i.eager),
                graph_us: t(&i.graph),
            });
        }
    }
    out
}

/// The `collective` request of point `p` on the cost model's `n` ranks, launched by `launcher`.
fn collective_request(
    p: &Point,
    n: usize,
    launcher: Launcher,
    model: &ModelSettings,
) -> CollectiveRequest {
    CollectiveRequest {
        op: p.op,
        min_bytes: p.sizes[0],
        max_bytes: p.sizes[0],
        step_factor: 2,
        sizes: p.sizes.clone(),
        dtype: p.dtype,
        graph: GraphChoice::Both,
        backend: BackendKind::Model,
        gpu: GpuSpec {
            gpus: Some(n),
            launcher,
            ..Default::default()
        },
        repeat: Repeat::default(),
        model: model.clone(),
        export: Default::default(),
        format: crate::output::Format::Table,
        impls: if p.p2p {
            vec![Impl::Nccl, Impl::OneShot, Impl::TwoShot]
        } else {
            vec![Impl::Nccl]
        },
        fresh_runs: 1,
        fresh_run: 0,
    }
}

/// The cost model in this process: every round gives the same numbers.
pub(crate) struct ModelMeasure {
    pub(crate) nranks: usize,
    pub(crate) model: ModelSettings,
    pub(crate) launcher: Launcher,
}

impl ModelMeasure {
    /// The model's settings with the point's NCCL variables: NCCL_PROTO and NCCL_ALGO as the
    /// model's forced choice, the others as the environment it prices.
    fn settings(&self, p: &Point) -> ModelSettings {
        let mut m = self.model.clone();
        for (k, v) in &p.overrides {
            match k.as_str() {
                "NCCL_PROTO" => m.proto = Some(v.clone()),
                "NCCL_ALGO" => m.algo = Some(v.clone()),
                _ => {
                    m.nccl_env.insert(k.clone(), v.clone());
                }
            }
        }
        m
    }
}

impl Measure for ModelMeasure {
    fn source(&self) -> Source {
        Source::Modeled
    }

    fn run(&self, p: &Point, _round: usize) -> anyhow::Result<PointRun> {
        let m = self.settings(p);
        let req = collective_request(p, self.nranks, self.launcher, &m);
        let rec = crate::backend::resolve(BackendKind::Model, true).collective(&req)?;
        let (prof, _) = m.resolve()?;
        let force = m.force()?;
        let mut used = BTreeMap::new();
        for &size in &p.sizes {
            for graph in [false, true] {
                let t = crate::costmodel::predict::op_time(
                    &prof,
                    p.op,
                    size,
                    self.nranks,
                    graph,
                    self.launcher,
                    &force,
                )?;
                used.insert(
                    (p.candidate.clone(), p.op, size, graph),
                    format!("{}/{}", t.algo.name(), t.proto.name()),
                );
            }
        }
        Ok(PointRun {
            samples: samples_of(&rec, p),
            nccl_used: used,
            notes: rec.provenance.notes.clone(),
            provenance: Some(rec.provenance),
            failure: None,
        })
    }
}

/// Everything the rounds gave.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rounds {
    /// (op, size) -> the candidates' times per round.
    pub(crate) timings: BTreeMap<(CollectiveKind, u64), Vec<RoundTiming>>,
    pub(crate) nccl_used: BTreeMap<(String, CollectiveKind, u64, bool), String>,
    pub(crate) notes: Vec<String>,
    pub(crate) provenance: Option<Provenance>,
    /// Candidates whose point failed, with why.
    pub(crate) failed: BTreeMap<String, String>,
}

/// Runs `rounds` rounds of `points` on `m` (each round in its own shuffled order, seeded by
/// `seed`); `progress` hears of each finished run. A point whose first round failed is not run
/// again. Stops with an error when `interrupted` says so.
pub(crate) fn run_rounds(
    points: &[Point],
    rounds: usize,
    seed: u64,
    m: &dyn Measure,
    interrupted: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(&Point, usize, &PointRun),
) -> anyhow::Result<Rounds> {
    let ids: Vec<String> = points.iter().map(|p| p.id.clone()).collect();
    let plan = RoundPlan::new(&ids, &ids[0], rounds, seed)?;
    let mut out = Rounds::default();
    let mut failed_points: BTreeSet<String> = BTreeSet::new();
    let r = crate::sweep::rounds::run_rounds(
        &plan,
        &BTreeSet::new(),
        |k: &RoundKey| {
            let p = points
                .iter()
                .find(|p| p.id == k.point_id)
                .expect("the plan is made of these points");
            if failed_points.contains(&p.id) {
                return Ok(true);
            }
            let run = m.run(p, k.round)?;
            progress(p, k.round, &run);
            if let Some(why) = &run.failure {
                failed_points.insert(p.id.clone());
                out.failed.insert(p.candidate.clone(), why.clone());
                return Ok(true);
            }
            absorb(&mut out, run, k.round);
            Ok(true)
        },
        interrupted,
    )?;
    if r.interrupted {
        anyhow::bail!(
            "interrupted after {} of {} runs: nothing was decided or written",
            r.finished.len(),
            plan.order.len()
        );
    }
    Ok(out)
}

/// Adds one successful run of `round` to `out`.
fn absorb(out: &mut Rounds, run: PointRun, round: usize) {
    for s in run.samples {
        out.timings
            .entry((s.op, s.size))
            .or_default()
            .push(RoundTiming {
                key: RoundKey {
                    point_id: s.candidate,
                    round,
                },
                eager_us: s.eager_us,
                graph_us: s.graph_us,
            });
    }
    out.nccl_used.extend(run.nccl_used);
    for n in run.notes {
        if !out.notes.contains(&n) {
            out.notes.push(n);
        }
    }
    if out.provenance.is_none() {
        out.provenance = run.provenance;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_the_default_each_setting_and_the_two_kernels() {
        let c = candidates(&["LL".into(), "Simple".into()], &[]);
        let ids: Vec<&str> = c.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(
            ids,
            vec![
                "nccl",
                "nccl:NCCL_PROTO=LL",
                "nccl:NCCL_PROTO=Simple",
                "oneshot",
                "twoshot"
            ]
        );
        assert_eq!(c[1].label, "NCCL/LL");
        let both = candidates(&["LL".into()], &["Ring".into(), "Tree".into()]);
        assert_eq!(both[1].id, "nccl:NCCL_ALGO=Ring,NCCL_PROTO=LL");
        assert_eq!(both[2].label, "NCCL/Tree/LL");
        assert_eq!(
            settings_of(&both),
            vec![
                "NCCL_ALGO=Ring,NCCL_PROTO=LL",
                "NCCL_ALGO=Tree,NCCL_PROTO=LL"
            ]
        );
        assert_eq!(candidates(&[], &[]).len(), 3);
    }
}
