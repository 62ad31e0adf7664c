//! `verifybench compare`: verify results side by side ([`crate::compare`]), or a `collective`
//! record beside nccl-tests' output ([`crate::compare::nccl_tests`]); prints the table,
//! Markdown or the record. Reads only files; needs no GPU.

use std::path::{Path, PathBuf};

use crate::compare::nccl_tests::{parse, rank_line, render, side_by_side, NcclTestsRun};
use crate::compare::{against_schedule_file, compare, load, render_markdown, render_table};
use crate::compare::{Comparison, Format};
use crate::error::usage;
use crate::record::{Body, Record, Source};

/// `compare`: the files (the first is the base of the ratios), whether to compare different
/// schedules, and the output format.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CompareRequest {
    pub(crate) files: Vec<PathBuf>,
    pub(crate) force: bool,
    pub(crate) format: Format,
    /// nccl-tests outputs to set beside the one `collective` record of `files`.
    pub(crate) nccl_tests: Vec<PathBuf>,
    /// A schedule file every record must have replayed (its hash equals the records'
    /// schedule_hash): checks that results of `verify --schedule FILE` come from that file.
    pub(crate) schedule: Option<PathBuf>,
}

/// Runs `verifybench compare`: loads, compares and prints; the value is the exit code.
pub(crate) fn run(a: &CompareRequest) -> anyhow::Result<i32> {
    let started = crate::util::now_utc();
    if !a.nccl_tests.is_empty() {
        if a.files.len() != 1 {
            crate::usage_bail!(
                "--nccl-tests takes exactly one FILE: the --export-json of `verifybench collective` on the same sizes"
            );
        }
        return nccl_tests(&a.files[0], &a.nccl_tests, a.format);
    }
    for (i, f) in a.files.iter().enumerate() {
        let id = crate::util::identity(f);
        if let Some(first) = a.files[..i]
            .iter()
            .find(|g| id.is_some() && crate::util::identity(g) == id)
        {
            crate::usage_bail!(
                "'{}' is given twice (also as '{}'): a file compared with itself says nothing; give each results file once",
                f.display(),
                first.display()
            );
        }
    }
    let mut entries = Vec::new();
    for f in &a.files {
        entries.extend(load(f)?);
    }
    // One file has nothing to be compared with: its table would be the base alone (every
    // ratio 1). Its eager and graph runs stand side by side in its own report. With
    // --schedule, one file is checked against the schedule: that check is the answer.
    if let ([only], None) = (a.files.as_slice(), &a.schedule) {
        crate::usage_bail!(
            "'{}' is the only results file: compare sets each file against the first, so one file gives a table of the base alone; give a second results file (another run's --export-json, or scripts/torch_baseline.py's output); one record's eager and graph runs are side by side in `verifybench report {}`",
            only.display(),
            only.display()
        );
    }
    let schedule_note = match &a.schedule {
        Some(p) => Some(against_schedule_file(&entries, p, a.force)?),
        None => None,
    };
    let mut c = compare(entries, a.force)?;
    c.notes.extend(schedule_note.into_iter().flatten());
    match a.format {
        Format::Table => print!("{}", render_table(&c)),
        Format::Markdown => print!("{}", render_markdown(&c)),
        Format::Json => println!("{}", record_of(&c, started)?.to_json_pretty()),
    }
    Ok(0)
}

/// `compare --format json`: the comparison as a record of kind `compare`, modeled when any
/// entry is.
fn record_of(c: &Comparison, started: String) -> anyhow::Result<Record> {
    let source = if c.entries.iter().any(|e| e.source == Source::Modeled) {
        Source::Modeled
    } else {
        Source::Measured
    };
    let mut p = crate::record::Provenance::here("none", started);
    p.notes.push(format!(
        "compares {}",
        c.entries
            .iter()
            .map(|e| e.file.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Record::other(source, p, crate::record::kinds::COMPARE, c)
}

/// `compare --nccl-tests FILE... COLLECTIVE.json`: reads the files, prints the table.
fn nccl_tests(
    collective: &Path,
    nccl_tests: &[std::path::PathBuf],
    format: crate::output::Format,
) -> anyhow::Result<i32> {
    let recs = crate::record::read_records(collective)?;
    let Some((vb, rank_time)) = recs.iter().find_map(|r| match &r.body {
        Body::Collective(c) => Some((c, r.provenance.rank_time)),
        _ => None,
    }) else {
        return Err(usage(format!(
            "'{}' holds no collective record: --nccl-tests compares with the --export-json of `verifybench collective`",
            collective.display()
        )));
    };
    let mut runs: Vec<NcclTestsRun> = vec![];
    let mut seen: Vec<(&Path, Option<crate::util::Identity>)> = vec![];
    for f in nccl_tests {
        let id = crate::util::identity(f);
        if let Some((first, _)) = seen.iter().find(|(_, other)| id.is_some() && *other == id) {
            return Err(usage(format!(
                "--nccl-tests '{}' is given twice (also as '{}'): give each nccl-tests output once, one per launch mode (-G 0 eager, -G N graph)",
                f.display(),
                first.display()
            )));
        }
        seen.push((f.as_path(), id));
        let text = crate::util::read_text(
            f,
            "--nccl-tests file",
            "the text output of nccl-tests (all_reduce_perf and the like)",
            crate::util::read::NCCL_TESTS,
        )?;
        let run =
            parse(&text).map_err(|e| usage(format!("--nccl-tests '{}': {e}", f.display())))?;
        let graph = run.graph_launches > 0;
        if let Some(i) = runs.iter().position(|r| (r.graph_launches > 0) == graph) {
            return Err(usage(format!(
                "--nccl-tests '{}' is a second {} run (as is '{}'): give one nccl-tests output per launch mode (-G 0 eager, -G N graph)",
                f.display(),
                if graph { "graph" } else { "eager" },
                nccl_tests[i].display()
            )));
        }
        runs.push(run);
    }
    let rows = side_by_side(vb, &runs);
    if rows.is_empty() {
        return Err(usage(
            "no size and launch mode measured by both: give the same sizes (-b/-e/-f) and the launch modes nccl-tests ran (-G 0: eager, -G N: graph)",
        ));
    }
    if format.is_json() {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print!("{}{}", rank_line(rank_time, vb.nranks), render(&rows));
    }
    Ok(0)
}
