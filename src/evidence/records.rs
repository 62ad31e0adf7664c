//! The times of verify records, for a break-even: a `verify` record gives T_verify, a
//! `decode` record T_decode, a `draft` record T_draft (one EAGLE-3 draft step), each from the
//! forward the record timed (`workload.phase`), labelled with the file it came from.

use std::path::{Path, PathBuf};

use super::{short_name, tally, Labelled, Origin, Source};
use crate::error::usage;
use crate::model::Phase;
use crate::record::{Body, Mode, Record, VerifyResult, VerifyRun};

/// The run of a verify record that stands for its time, best first: CUDA graph with compute,
/// eager with compute, then comm-only runs, then compute-only (both only lower bounds of the
/// forward: see [`times_of`]).
fn representative_run(v: &VerifyResult) -> Option<&VerifyRun> {
    [
        (true, Mode::Full),
        (false, Mode::Full),
        (true, Mode::Comm),
        (false, Mode::Comm),
        (true, Mode::Compute),
        (false, Mode::Compute),
    ]
    .iter()
    .find_map(|&(g, m)| v.run(g, m))
}

/// Words for a run: `graph, full` or `eager, comm only`.
fn run_words(run: &VerifyRun) -> String {
    let g = if run.graph { "graph" } else { "eager" };
    match run.mode {
        Mode::Full => format!("{g}, full"),
        Mode::Comm => format!("{g}, comm only"),
        Mode::Compute => format!("{g}, compute only"),
    }
}

/// One time read from a verify record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RecordTime {
    pub(crate) phase: Phase,
    pub(crate) ms: Labelled,
    /// Tokens of the forward (k + 1 for a verify).
    pub(crate) tokens: u64,
    /// What the run replayed: only a full run (collectives and compute) is a whole forward.
    pub(crate) mode: Mode,
    /// The model and tensor-parallel size of the record's workload, where it has them.
    pub(crate) model_tp: Option<(String, u64)>,
}

/// The times of the verify records of one file, in file order, and the kinds it skipped.
pub(crate) fn times_of(path: &Path, records: &[Record]) -> (Vec<RecordTime>, Vec<String>) {
    let file = short_name(path);
    let mut times = vec![];
    let mut skipped = vec![];
    for r in records {
        let Body::Verify(v) = &r.body else {
            skipped.push(r.body.kind().to_string());
            continue;
        };
        let Some(run) = representative_run(v) else {
            skipped.push("verify (no runs)".into());
            continue;
        };
        let w = &v.workload;
        let detail = format!(
            "{} {} TP={} T={}, {}, median of {}",
            w.model,
            phase_word(w.phase),
            w.tp,
            w.tokens,
            run_words(run),
            run.per_verify.n
        );
        let origin = run_origin(r.source, file.clone(), detail, run.mode, "");
        let value = run.per_verify.median_us / 1000.0;
        times.push(RecordTime {
            phase: w.phase,
            ms: Labelled { value, origin },
            tokens: w.tokens,
            mode: run.mode,
            model_tp: Some((w.model.clone(), w.tp)),
        });
    }
    (times, skipped)
}

/// The origin of a forward's time as a run of `mode` gave it, read from `file`. One rule for
/// every command that reads records or traces (breakeven, report, explain): a forward's part
/// (collectives or compute only) is a lower bound of the forward, shown as such after `detail`
/// (`why`, then what the run leaves out), never as its time.
pub(crate) fn run_origin(
    source: Source,
    file: String,
    detail: String,
    mode: Mode,
    why: &str,
) -> Origin {
    let missing = match mode {
        Mode::Comm => "collectives only: the forward's compute is missing",
        Mode::Compute => "compute only: the forward's collectives are missing",
        Mode::Full => return Origin::read(source, file, detail),
    };
    Origin {
        bound: true,
        ..Origin::read(source, file, format!("{detail}; {why}{missing}"))
    }
}

pub(crate) fn phase_word(p: Phase) -> &'static str {
    match p {
        Phase::Verify => "verify",
        Phase::Decode => "decode",
        Phase::Draft => "draft step",
        Phase::Cycle => "speculative cycle",
    }
}

/// "17 'sweep_point' records, 1 'collective' record": each kind once, with its count.
fn counted_kinds(kinds: &[String]) -> String {
    tally(kinds.iter().map(|k| (k, 1)))
        .iter()
        .map(|(k, n)| format!("{n} '{k}' record{}", if *n == 1 { "" } else { "s" }))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Reads results files for a break-even: every file must hold at least one verify record
/// (kind "verify"); other kinds next to them are skipped and named in the notes.
pub(crate) fn read_verify_files(
    paths: &[PathBuf],
) -> anyhow::Result<(Vec<RecordTime>, Vec<String>)> {
    let mut all = vec![];
    let mut notes = vec![];
    for p in paths {
        let records = crate::record::read_records(p)?;
        let (times, skipped) = times_of(p, &records);
        if times.is_empty() {
            // what the file is, not "only 1 record" (which reads as if more would do)
            let kinds = if skipped.is_empty() {
                "no record".to_string()
            } else {
                format!("{} and no verify record", counted_kinds(&skipped))
            };
            return Err(usage(format!(
                "results file '{}' holds {kinds}; breakeven reads verify records (kind \"verify\", from `verifybench verify`)",
                p.display()
            )));
        }
        if !skipped.is_empty() {
            notes.push(format!(
                "{}: skipped {}",
                short_name(p),
                counted_kinds(&skipped)
            ));
        }
        all.extend(times);
    }
    Ok((all, notes))
}
