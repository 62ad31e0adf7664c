//! The points a fit reproduces: every measured time of a set of records, with the collectives
//! it is made of and the NCCL choices its workers were held to.

use crate::costmodel::predict::{self, Force};
use crate::costmodel::profile::Profile;
use crate::error::usage;
use crate::model::CollectiveKind;
use crate::record::{Body, Mode, Record, Source};
use crate::request::Launcher;

/// One collective kind of a point, `count` times.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Term {
    pub(crate) op: CollectiveKind,
    /// nccl-tests size in bytes (all-gather: the output).
    pub(crate) size: u64,
    pub(crate) count: u64,
}

/// One measured time the model must reproduce.
#[derive(Debug, Clone)]
pub(crate) struct Point {
    /// File the point came from.
    pub(crate) source: String,
    /// What was measured, for the table.
    pub(crate) label: String,
    pub(crate) terms: Vec<Term>,
    pub(crate) n: usize,
    pub(crate) graph: bool,
    pub(crate) launcher: Launcher,
    pub(crate) force: Force,
    pub(crate) measured_us: f64,
}

/// The model's time for a point.
pub(crate) fn predict(p: &Profile, pt: &Point) -> anyhow::Result<f64> {
    let mut t = 0.0;
    for term in &pt.terms {
        let o = predict::op_time(
            p,
            term.op,
            term.size,
            pt.n,
            pt.graph,
            pt.launcher,
            &pt.force,
        )?;
        t += o.total() * term.count as f64;
    }
    Ok(t)
}

pub(super) fn launcher_of(r: &Record) -> Launcher {
    match r.provenance.launcher.as_deref() {
        Some("threads") => Launcher::Threads,
        _ => Launcher::Processes,
    }
}

/// NCCL_PROTO/NCCL_ALGO the workers saw, as a restriction on the model's choice.
pub(super) fn force_of(r: &Record, source: &str) -> anyhow::Result<(Force, String)> {
    let env = r.provenance.workers.first().map(|w| &w.nccl_env);
    let get = |k: &str| env.and_then(|e| e.get(k)).map(|s| s.as_str());
    let (proto, algo) = (get("NCCL_PROTO"), get("NCCL_ALGO"));
    let f = Force::parse(proto, algo)
        .map_err(|e| usage(format!("results file '{source}': NCCL settings: {e}")))?;
    let mut tag = String::new();
    if let Some(p) = proto {
        tag.push_str(&format!(" proto={p}"));
    }
    if let Some(a) = algo {
        tag.push_str(&format!(" algo={a}"));
    }
    Ok((f, tag))
}

/// The points of `records` (read from `source`): every size and launch mode of a measured
/// collective record, every comm-mode run of a measured verify record. Returns the points and
/// one line per record left out (modeled ones, other kinds).
pub(crate) fn points_of(
    source: &str,
    records: &[Record],
) -> anyhow::Result<(Vec<Point>, Vec<String>)> {
    let mut pts = vec![];
    let mut skipped = vec![];
    for (i, r) in records.iter().enumerate() {
        if r.source != Source::Measured {
            skipped.push(format!(
                "{source} record {}: modeled, not a measurement",
                i + 1
            ));
            continue;
        }
        let launcher = launcher_of(r);
        let (force, tag) = force_of(r, source)?;
        match &r.body {
            Body::Collective(c) => {
                for row in &c.rows {
                    for (graph, t) in [(false, &row.eager), (true, &row.graph)] {
                        let Some(t) = t else { continue };
                        pts.push(Point {
                            source: source.into(),
                            label: format!(
                                "{} {} B n={} {}{tag}",
                                c.op.name(),
                                row.size_bytes,
                                c.nranks,
                                if graph { "graph" } else { "eager" }
                            ),
                            terms: vec![Term {
                                op: c.op,
                                size: row.size_bytes,
                                count: 1,
                            }],
                            n: c.nranks,
                            graph,
                            launcher,
                            force: force.clone(),
                            measured_us: t.time_us,
                        });
                    }
                }
            }
            Body::Verify(v) => {
                let w = &v.workload;
                let n = w.tp as usize;
                let mut terms = vec![];
                if w.n_all_reduce > 0 {
                    terms.push(Term {
                        op: CollectiveKind::AllReduce,
                        size: w.all_reduce_bytes_per_rank,
                        count: w.n_all_reduce,
                    });
                }
                if w.n_all_gather > 0 {
                    terms.push(Term {
                        op: CollectiveKind::AllGather,
                        size: w.all_gather_bytes_per_rank * w.tp,
                        count: w.n_all_gather,
                    });
                }
                for run in v.runs.iter().filter(|r| r.mode == Mode::Comm) {
                    pts.push(Point {
                        source: source.into(),
                        label: format!(
                            "verify {} tp={} tokens={} {}{tag}",
                            w.model,
                            w.tp,
                            w.tokens,
                            if run.graph { "graph" } else { "eager" }
                        ),
                        terms: terms.clone(),
                        n,
                        graph: run.graph,
                        launcher,
                        force: force.clone(),
                        measured_us: run.per_verify.median_us,
                    });
                }
            }
            Body::Other { name, .. } => skipped.push(format!(
                "{source} record {}: kind '{name}' carries no collective timings the fit reads",
                i + 1
            )),
        }
    }
    for p in &pts {
        if !(p.measured_us.is_finite() && p.measured_us > 0.0) {
            crate::usage_bail!(
                "results file '{source}': {} has a non-positive time",
                p.label
            );
        }
        if p.n < 2 {
            crate::usage_bail!(
                "results file '{source}': {}: a collective needs at least 2 ranks",
                p.label
            );
        }
    }
    Ok((pts, skipped))
}
