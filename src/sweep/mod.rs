//! `verifybench sweep`: which NCCL settings make the verify step fastest on this machine.
//!
//! Each point (a set of NCCL_* overrides) runs as fresh child processes of this binary
//! (`verifybench verify ...`), because many NCCL variables are read once per process:
//! 1. a short probe run (`-n 2 -w 1`) with NCCL's INFO log on, whose log proves which
//!    algorithm, protocol and transport NCCL used and that it read the variables;
//! 2. the timed run with NCCL_DEBUG unset, so logging cannot distort the timing.
//!
//! With `--rounds R` every point runs once per round, each round in its own shuffled order,
//! the probe in the first round only ([`run_pairs`]). Each finished (point, round) is appended
//! to the results file at once; the ranking (first round), the rounds' judgement
//! ([`rounds`]), and the exports are computed from the file's pairs (earlier runs included
//! when resuming).
//!
//! - [`matrix`]: `-L`/`--set`/`--preset` -> points.
//! - [`settings`]: what the sweep knows of each NCCL setting: the preset's variations, the
//!   proof that NCCL did what a point asked, hints, the debug mock's fake choices.
//! - [`library`]: the NCCL library as a dimension (`--nccl-lib A,B`) and the proof of what
//!   each point's workers loaded.
//! - [`env`]: each child's environment, and the check that workers saw it.
//! - [`ncclog`]: NCCL log parsing.
//! - [`runner`]: running a point (real child processes, or a mock).
//! - [`results`]: the JSON-lines results file and resume.
//! - [`rank`]: ranking and advice.
//! - [`rounds`]: interleaved rounds, paired ratios, the measured noise floor.
//! - [`summary`]: what a sweep prints: the ranking table, the rounds' judgement, the progress
//!   line's account of a child's time.
//!
//! Not here: the command's driver (`commands::sweep`: resume merge, runner wiring, progress
//! lines, the table and its exports), the flags (`cli/sweep.rs`), the fault hooks for children
//! ([`crate::backend::fault`]), reading and appending records ([`crate::record::io`]).

pub(crate) mod env;
pub(crate) mod known;
pub(crate) mod library;
pub mod matrix;
pub(crate) mod mock;
pub mod ncclog;
pub(crate) mod rank;
pub(crate) mod results;
pub mod rounds;
pub(crate) mod runner;
pub(crate) mod settings;
pub(crate) mod signal;
pub(crate) mod summary;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use matrix::Point;
use ncclog::NcclLog;
use results::{Effective, PointKey, ResultsFile, SweepPoint};
use runner::{PointJob, PointOutcome, PointRunner, Probe};
use settings::{hint, mismatches};

use crate::record::{Body, Provenance, Record, RecordedWorkload, Source};

/// What is fixed for every point of a sweep.
#[derive(Debug, Clone)]
pub(crate) struct SweepConfig {
    pub(crate) workload: RecordedWorkload,
    /// `on`, `off`, `both`.
    pub(crate) graph: String,
    pub(crate) launcher: String,
    /// Resolved backend: `nccl` or `model` (the model has no NCCL log, so no probe).
    pub(crate) backend: String,
    pub(crate) mode: String,
    pub(crate) parent_env: env::Env,
    /// Where probe logs and the timed runs' JSON go.
    pub(crate) log_dir: PathBuf,
    pub(crate) probe: bool,
    pub(crate) timeout: Duration,
    pub(crate) source: Source,
    /// Seed of the rounds' shuffled orders (`--seed`), recorded with every pair.
    pub(crate) seed: u64,
    /// The NCCL libraries swept (`--nccl-lib A,B`), the baseline's first; empty when none is
    /// named.
    pub(crate) libraries: library::Libraries,
}

impl SweepConfig {
    /// The library a point asks for ([`library`]): its `NCCL_LIB`, else the first.
    pub(crate) fn library(&self, p: &Point) -> Option<&library::Library> {
        self.libraries.of(p.get(library::NAME))
    }

    pub(crate) fn key(&self, p: &Point) -> PointKey {
        let mut base = env::nccl_part(&env::timed_env(
            &self.parent_env,
            &Point {
                id: String::new(),
                overrides: vec![],
            },
        ));
        base.retain(|k, _| !env::DEBUG_VARS.contains(&k.as_str()));
        PointKey {
            overrides: p.sorted_overrides(),
            graph: self.graph.clone(),
            launcher: self.launcher.clone(),
            backend: self.backend.clone(),
            mode: self.mode.clone(),
            schedule_hash: self.workload.schedule_hash.clone(),
            base_nccl_env: base,
            nccl_lib: self.library(p).map(|l| l.path.display().to_string()),
        }
    }

    /// The job of a point in `round`, its environments and limits: the NCCL-log probe runs in
    /// round 0 only (NCCL's choices do not change between rounds, and the probe costs a second
    /// child per point).
    pub(crate) fn job(&self, p: &Point, round: usize) -> PointJob {
        let mut timed = env::timed_env(&self.parent_env, p);
        if let Some(lib) = self.library(p) {
            library::Libraries::apply(lib, &mut timed);
        }
        let probe = (self.probe && round == 0).then(|| Probe {
            env: env::probe_env(&timed, &self.log_dir.join(format!("{}.%h.%p.log", p.id))),
            log_dir: self.log_dir.clone(),
        });
        PointJob {
            point: p.clone(),
            round,
            env: timed,
            probe,
            timeout: self.timeout,
        }
    }
}

/// What a probe log of one rank proves: that NCCL ran (its version), which of the point's
/// variables NCCL reported as read, and that no algorithm, protocol or transport was chosen
/// (NCCL has none to choose at one rank), so the setting's effect is not proven there.
pub(crate) fn one_rank_proof(e: &Effective, confirmed: &[String]) -> String {
    let version = e
        .nccl_version
        .as_deref()
        .map_or("NCCL ran (version not logged)".to_string(), |v| {
            format!("NCCL {v} ran")
        });
    let read = if confirmed.is_empty() {
        "no variable of the point reported as set by environment".to_string()
    } else {
        format!("NCCL read {}", confirmed.join(", "))
    };
    let chose = if e.log.choices.is_empty() && e.transports.is_empty() {
        "no algorithm, protocol or transport chosen (none exists at one rank), so the setting's effect cannot be proven here".to_string()
    } else {
        format!(
            "the log still names {} via {}",
            e.algo_proto(),
            e.transport()
        )
    };
    format!(
        "{}: {version}; {read}; {chose}",
        crate::record::vocab::ONE_RANK
    )
}

/// The stored point of a round-0 run (what most tests build).
#[cfg(test)]
pub(crate) fn assemble(cfg: &SweepConfig, p: &Point, out: PointOutcome) -> SweepPoint {
    assemble_in_round(cfg, p, 0, out)
}

/// Builds the stored point of a run of `round` from a runner's outcome (pure: tests call it
/// directly).
pub(crate) fn assemble_in_round(
    cfg: &SweepConfig,
    p: &Point,
    round: usize,
    out: PointOutcome,
) -> SweepPoint {
    let log = (!out.probe_logs.is_empty())
        .then(|| NcclLog::parse_files(&out.probe_logs).unwrap_or_default());
    let effective = log.as_ref().map(|l| Effective {
        nccl_version: l.version.clone(),
        all_reduce: l.main_choice(Some("AllReduce")).cloned().or_else(|| {
            // NCCL 2.20-2.22 does not name the function.
            l.main_choice(None).filter(|c| c.func.is_none()).cloned()
        }),
        all_gather: l.main_choice(Some("AllGather")).cloned(),
        transports: l.transport_summary(),
        mismatches: mismatches(p, l),
        log: l.clone(),
        one_rank: None,
    });
    let requested = env::nccl_part(&cfg.job(p, round).env);
    let workers = out
        .record
        .as_ref()
        .map(|r| r.provenance.workers.clone())
        .unwrap_or_default();
    let env_check = env::check(&requested, &p.overrides, &workers, log.as_ref());
    let mut effective = effective;
    if workers.len() == 1 {
        if let Some(e) = effective.as_mut() {
            e.one_rank = Some(one_rank_proof(e, &env_check.nccl_confirmed));
        }
    }
    let warnings = log.as_ref().map(|l| l.warnings.clone()).unwrap_or_default();
    let mut reason = out.failure.clone();
    if let Some(r) = reason.as_mut() {
        if let Some(w) = warnings.first() {
            r.push_str(&format!("; NCCL WARN {w}"));
        }
    }
    let wrong = rank::wrong_in(out.record.as_ref());
    if reason.is_none() && wrong > 0 {
        reason = Some(format!("{wrong} elements of the results were wrong"));
    }
    // The library asked against what the workers mapped: another one refuses the point.
    let library = cfg.library(p).map(|lib| {
        library::prove(
            lib,
            out.record.as_ref(),
            log.as_ref().and_then(|l| l.version.as_deref()),
        )
    });
    if let Some(l) = library.as_ref().filter(|l| l.status == "refused") {
        if reason.is_none() {
            reason = Some(format!(
                "refused: its workers did not run the NCCL asked ({}): {}",
                l.asked,
                l.problems.join("; ")
            ));
        }
    }
    let hint = reason.as_deref().and_then(|r| hint(p, r, &warnings));
    SweepPoint {
        point_id: p.id.clone(),
        round,
        seed: Some(cfg.seed),
        overrides: p.overrides.clone(),
        key: cfg.key(p),
        workload: cfg.workload.clone(),
        status: if reason.is_none() { "ok" } else { "failed" }.into(),
        reason,
        hint,
        stderr_tail: (!out.stderr_tail.is_empty()).then_some(out.stderr_tail),
        nccl_warnings: warnings,
        log_paths: out.probe_logs,
        library,
        unknown_vars: p
            .overrides
            .iter()
            .filter(|(k, _)| !known::is_known(k))
            .map(|(k, _)| k.clone())
            .collect(),
        effective,
        env_check,
        probe_wall_s: out.probe_wall_s,
        timed_wall_s: out.timed_wall_s,
        verify: out.record,
    }
}

/// The record stored for a point.
pub(crate) fn to_record(cfg: &SweepConfig, sp: &SweepPoint, started: String) -> Record {
    let mut prov = Provenance::here(&cfg.backend, started);
    prov.launcher = Some(cfg.launcher.clone());
    if let Some(v) = &sp.verify {
        prov.workers = v.provenance.workers.clone();
        prov.gpus = v.provenance.gpus.clone();
        prov.driver_version = v.provenance.driver_version.clone();
        prov.nccl_version = v.provenance.nccl_version.clone();
        prov.nccl_library = v.provenance.nccl_library.clone();
        prov.worker_nccl = v.provenance.worker_nccl.clone();
        prov.model_profile = v.provenance.model_profile.clone();
    }
    if prov.nccl_version.is_none() {
        prov.nccl_version = sp.effective.as_ref().and_then(|e| e.nccl_version.clone());
    }
    prov.notes.push(
        "timed with NCCL_DEBUG unset; algorithm/protocol/transport come from a separate probe run with NCCL_DEBUG=INFO".into(),
    );
    let source = sp.verify.as_ref().map_or(cfg.source, |r| r.source);
    Record::new(
        source,
        prov,
        Body::Other {
            name: results::KIND.into(),
            data: serde_json::to_value(sp).expect("sweep points serialize"),
        },
    )
}

/// How a sweep of rounds ended.
#[derive(Debug)]
pub(crate) struct PairsRun {
    /// (point, round) results finished in this run, in order.
    pub(crate) finished: Vec<SweepPoint>,
    /// Pairs not run because the point's first round failed.
    pub(crate) skipped: Vec<rounds::RoundKey>,
    pub(crate) interrupted: bool,
}

/// Runs the (point, round) pairs of `plan` not in `done`, in plan order, appending each
/// finished one to `file` at once (so resume works per pair). A point whose round 0 failed
/// (in `failed_first` or in this run) is not run in later rounds. `each` is told about every
/// finished pair.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_pairs(
    cfg: &SweepConfig,
    plan: &rounds::RoundPlan,
    points: &[Point],
    done: &std::collections::BTreeSet<rounds::RoundKey>,
    failed_first: &std::collections::BTreeSet<String>,
    runner: &dyn PointRunner,
    file: &mut ResultsFile,
    interrupted: &AtomicBool,
    mut each: impl FnMut(&Point, &rounds::RoundKey, &SweepPoint),
) -> anyhow::Result<PairsRun> {
    let mut finished: Vec<SweepPoint> = vec![];
    let mut skipped = vec![];
    let mut failed = failed_first.clone();
    let r = rounds::run_rounds(
        plan,
        done,
        |k| {
            let p = points
                .iter()
                .find(|p| p.id == k.point_id)
                .expect("the plan is made of these points");
            if k.round > 0 && failed.contains(&p.id) {
                skipped.push(k.clone());
                return Ok(true);
            }
            let started = crate::util::now_utc();
            let out = runner.run(&cfg.job(p, k.round))?;
            if out.interrupted || interrupted.load(Ordering::SeqCst) {
                return Ok(false);
            }
            let sp = assemble_in_round(cfg, p, k.round, out);
            file.append(&to_record(cfg, &sp, started))?;
            if k.round == 0 && !sp.ok() {
                failed.insert(p.id.clone());
            }
            each(p, k, &sp);
            finished.push(sp);
            Ok(true)
        },
        || interrupted.load(Ordering::SeqCst),
    )?;
    Ok(PairsRun {
        finished,
        skipped,
        interrupted: r.interrupted,
    })
}

/// The per-verify medians of a finished pair, eager and graph (`None` for a failed one).
pub(crate) fn round_timing(sp: &SweepPoint) -> rounds::RoundTiming {
    let mut t = rounds::RoundTiming {
        key: rounds::RoundKey {
            point_id: sp.point_id.clone(),
            round: sp.round,
        },
        eager_us: None,
        graph_us: None,
    };
    if let (true, Some(Body::Verify(v))) = (sp.ok(), sp.verify.as_ref().map(|r| &r.body)) {
        for run in &v.runs {
            let m = Some(run.per_verify.median_us);
            if run.graph {
                t.graph_us = m;
            } else {
                t.eager_us = m;
            }
        }
    }
    t
}

/// Where a pair's wall time went: (NCCL init, timed loops), in seconds, from the timed
/// child's record: the largest per-rank NCCL init of its provenance note, and the per-verify
/// medians times the iterations and warm-ups run. The rest of the child's wall time is
/// process and worker start (and the record's writing). `None` for a record that is not
/// measured (the cost model's: its medians are modeled, no loop ran to take that time).
pub(crate) fn time_split(sp: &SweepPoint) -> Option<(Option<f64>, f64)> {
    let rec = sp.verify.as_ref()?;
    if rec.source != crate::record::Source::Measured {
        return None;
    }
    let init = rec.provenance.notes.iter().find_map(|n| {
        let list = n.strip_prefix("NCCL init per rank (s): ")?;
        list.split(", ")
            .filter_map(|x| x.trim().parse::<f64>().ok())
            .reduce(f64::max)
    });
    let Body::Verify(v) = &rec.body else {
        return None;
    };
    let timed = v
        .runs
        .iter()
        .map(|r| r.per_verify.median_us * (r.iterations + r.warmup) as f64 * 1e-6)
        .sum();
    Some((init, timed))
}

#[cfg(test)]
mod tests;
