//! `report`: results files -> a Markdown report with SVG plots.
//!
//! [`build`] is pure (records in, Markdown and SVG text out); [`write`] puts them in a
//! directory. It renders collective and verify records (plots and tables), sweep points (the
//! ranking `sweep` prints), bandwidth and selftest results, in the record envelope or in the
//! older envelope-less form of committed files. What it cannot render (env, compare, profiles,
//! kinds a later version writes, an empty file, `[]`) is named with what it is, not refused, so
//! an old report binary still reads new results files; nothing renderable at all is an error.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::evidence;
use crate::evidence::RecordTime;
use crate::record::{self, Body, Mode, Record, Source, VerifyResult};
use crate::report::export::{markdown_table, tables, Table};
use crate::report::plots::{self, BarGroup, Series, SpeedLine, Stack};
use crate::speculative::inputs::Flags;

mod breakeven;
mod loaded;
mod sections;

pub(crate) use breakeven::breakeven_markdown;
use breakeven::breakeven_of;
pub(crate) use loaded::LoadedFile;
#[cfg(test)]
use sections::noise_margin_of;
use sections::{bandwidth_section, cell, selftest_section, sweep_sections};

/// A rendered report: the Markdown and the SVG files it embeds (name, content).
#[derive(Debug, Clone)]
pub(crate) struct Report {
    pub(crate) markdown: String,
    pub(crate) svgs: Vec<(String, String)>,
    /// Record kinds left out, as "file: kind".
    pub(crate) skipped: Vec<String>,
}

/// `report`: the results files, the folder of the report (`out`), and the break-even inputs
/// of the tokens/s plot (verify times come from the verify records).
#[derive(Debug, Clone)]
pub(crate) struct ReportRequest {
    pub(crate) results: Vec<PathBuf>,
    pub(crate) out: PathBuf,
    pub(crate) cycle: Flags,
    /// The model and machine of the step's modeled parts (as `explain` prices them).
    pub(crate) engine: crate::explain::EngineSettings,
}

/// Runs `verifybench report`: results files -> `out`/report.md with SVG plots. Needs no GPU.
pub(crate) fn run(a: &ReportRequest) -> anyhow::Result<i32> {
    crate::util::Files::new()
        .inputs("RESULTS", &a.results)
        .output_dir("-o/--out", &a.out, WRITTEN)
        .check()?;
    let files = a
        .results
        .iter()
        .map(|p| LoadedFile::read(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let report = build(&files, &a.cycle, &a.engine)?;
    for s in &report.skipped {
        eprintln!("note: skipped {s}");
    }
    for p in write(&report, &a.out)? {
        println!("wrote {}", p.display());
    }
    Ok(0)
}

pub(crate) const LATENCY_SVG: &str = "collective_latency.svg";
pub(crate) const VERIFY_SVG: &str = "verify_time.svg";
pub(crate) const TOKENS_SVG: &str = "tokens_per_s.svg";

/// Every file a report may write into its folder (none may be one of its results files).
const WRITTEN: &[&str] = &["report.md", LATENCY_SVG, VERIFY_SVG, TOKENS_SVG];

/// Lines in the tokens/s plot at most (more would be unreadable).
const MAX_SPEED_LINES: usize = 10;

fn gpus_cell(r: &Record) -> String {
    let p = &r.provenance;
    if p.gpus.is_empty() {
        return "-".into();
    }
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for g in &p.gpus {
        *names.entry(g.name.as_str()).or_default() += 1;
    }
    names
        .iter()
        .map(|(n, c)| format!("{c} x {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The NCCL_* settings rank 0 saw, as `K=V` (or "-" when none were set).
fn nccl_env_cell(r: &Record) -> String {
    match r.provenance.workers.first() {
        Some(w) if !w.nccl_env.is_empty() => crate::report::text::env_line(&w.nccl_env),
        _ => "-".into(),
    }
}

/// NCCL_* variables that say nothing about a series' settings: NCCL's own version variable
/// and the logging ones. `NCCL_NVLS_ENABLE=0` is left out too: every run of this tool sets it.
fn is_noise_var(k: &str, v: &str) -> bool {
    k == "NCCL_VERSION" || k.starts_with("NCCL_DEBUG") || (k == "NCCL_NVLS_ENABLE" && v == "0")
}

/// The NCCL settings of a record for legends and tables: every NCCL_* variable its lowest rank's
/// worker saw, as `K=V`, less [`is_noise_var`]'s; "NCCL defaults" when nothing else was set,
/// "NCCL_* not recorded" for a record without workers (modeled records).
pub(crate) fn settings_label(r: &Record) -> String {
    let Some(w) = r.provenance.workers.iter().min_by_key(|w| w.rank) else {
        return "NCCL_* not recorded".into();
    };
    let picked: Vec<String> = w
        .nccl_env
        .iter()
        .filter(|(k, v)| !is_noise_var(k, v))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if picked.is_empty() {
        "NCCL defaults".into()
    } else {
        picked.join(" ")
    }
}

/// Builds the report of `files`. `flags` carries --decode-ms, --draft-ms, --draft-steps and
/// --overhead-ms for the break-even section.
pub(crate) fn build(
    files: &[LoadedFile],
    flags: &Flags,
    engine: &crate::explain::EngineSettings,
) -> anyhow::Result<Report> {
    flags.check_given()?;
    let inputs = Inputs::of(files);
    if inputs.renderable == 0 {
        return Err(crate::error::usage(format!(
            "nothing to render in the {} file(s): {}; report renders explain, collective, verify, sweep, bandwidth and selftest results",
            files.len(),
            inputs.skipped.join("; ")
        )));
    }
    let mut md = String::new();
    let mut svgs = vec![];
    let _ = writeln!(md, "# verifybench report\n");
    let _ = writeln!(
        md,
        "Rendered by verifybench {} ({}) from {} results file(s). Every number is labelled \
         *measured* (timed on GPUs) or *modeled* (cost model).\n",
        env!("CARGO_PKG_VERSION"),
        env!("VERIFYBENCH_GIT_COMMIT"),
        files.len()
    );
    md += &explain_sections(files);
    let _ = writeln!(md, "## Inputs\n\n{}", markdown_table(&inputs.table));
    if !inputs.skipped.is_empty() {
        let _ = writeln!(md, "Skipped (nothing this report renders):\n");
        for s in &inputs.skipped {
            let _ = writeln!(md, "- {s}");
        }
        md.push('\n');
    }
    latency_section(files, &inputs.rendered, &mut md, &mut svgs)?;
    verify_section(files, &inputs.rendered, &mut md, &mut svgs)?;
    md += &sweep_sections(files);
    md += &bandwidth_section(files);
    md += &selftest_section(files);
    breakeven_section(files, flags, engine, &inputs.times, &mut md, &mut svgs)?;
    Ok(Report {
        markdown: md,
        svgs,
        skipped: inputs.skipped,
    })
}

/// What the report read: the inputs table (a row per record, with its provenance), the
/// collective and verify records, how many records it renders, what it leaves out, and the
/// verify times the break-even reads.
struct Inputs<'a> {
    table: Table,
    rendered: Vec<&'a Record>,
    renderable: usize,
    skipped: Vec<String>,
    times: Vec<RecordTime>,
}

impl<'a> Inputs<'a> {
    fn of(files: &'a [LoadedFile]) -> Inputs<'a> {
        let mut inputs = Inputs {
            table: Table::new(&[
                "file",
                "#",
                "kind",
                "source",
                "host",
                "backend",
                "GPUs",
                "NCCL",
                "NCCL_* (rank 0)",
                "commit",
                "started (UTC)",
            ]),
            rendered: vec![],
            renderable: 0,
            skipped: vec![],
            times: vec![],
        };
        for f in files {
            inputs.add(f);
        }
        inputs
    }

    fn add(&mut self, f: &'a LoadedFile) {
        let name = evidence::short_name(&f.path);
        for (i, r) in f.records.iter().enumerate() {
            let p = &r.provenance;
            self.table.rows.push(
                [
                    name.clone(),
                    (i + 1).to_string(),
                    r.body.kind().to_string(),
                    r.source.label().to_string(),
                    p.host.clone(),
                    p.backend.clone(),
                    gpus_cell(r),
                    p.nccl_version.clone().unwrap_or_else(|| "-".into()),
                    nccl_env_cell(r),
                    p.git_commit.clone(),
                    p.started_utc.clone(),
                ]
                .iter()
                .map(|s| cell(s))
                .collect(),
            );
            let at = if f.records.len() == 1 {
                name.clone()
            } else {
                format!("{name} record {}", i + 1)
            };
            self.add_record(r, &at);
        }
        for k in &f.unknown_kinds {
            self.skipped.push(format!(
                "{name}: a '{k}' record, a kind this version does not know"
            ));
        }
        if let Some((k, _)) = &f.bare {
            self.table.rows.push(
                [name.clone(), "1".into(), format!("{k} (no envelope)")]
                    .into_iter()
                    .chain(std::iter::repeat_n("-".to_string(), 8))
                    .map(|s| cell(&s))
                    .collect(),
            );
            if RENDERED_KINDS.contains(k) {
                self.renderable += 1;
            } else {
                self.skipped.push(format!(
                    "{name}: {}, not rendered",
                    record::kinds::describe(k)
                ));
            }
        }
        if let Some(why) = &f.empty {
            self.skipped.push(format!("{name}: {why}"));
        }
        let (t, _) = evidence::times_of(&f.path, &f.records);
        self.times.extend(t);
    }

    /// Whether the record `at` is rendered, or left out and why.
    fn add_record(&mut self, r: &'a Record, at: &str) {
        match &r.body {
            Body::Collective(_) | Body::Verify(_) => {
                self.rendered.push(r);
                self.renderable += 1;
            }
            Body::Other { name: kind, data } if kind == record::kinds::SWEEP_POINT => {
                // Checked here without a copy (deserialized from the value in place).
                match <crate::sweep::results::SweepPoint as serde::Deserialize>::deserialize(data) {
                    Ok(_) => self.renderable += 1,
                    Err(e) => self
                        .skipped
                        .push(format!("{at}: a malformed sweep point ({e}), not rendered")),
                }
            }
            Body::Other { name: kind, .. }
                if kind == record::kinds::EXPLAIN
                    && explain_data(r).is_some_and(|d| !d["markdown"].is_string()) =>
            {
                self.skipped.push(format!(
                    "{at}: an explain record without its Markdown (written by an older verifybench: run explain again), not rendered"
                ))
            }
            Body::Other { name: kind, .. } if RENDERED_KINDS.contains(&kind.as_str()) => {
                self.renderable += 1
            }
            Body::Other { name: kind, .. } => self.skipped.push(format!(
                "{at}: {}, not rendered",
                record::kinds::describe(kind)
            )),
        }
    }
}

/// " (includes modeled)" after a plot's title when any of its records is modeled.
fn modeled_suffix(any_modeled: bool) -> &'static str {
    if any_modeled {
        " (includes modeled)"
    } else {
        ""
    }
}

/// (a) Collective latency against message size: a series per collective record and launch
/// mode, and the collective records' table.
fn latency_section(
    files: &[LoadedFile],
    rendered: &[&Record],
    md: &mut String,
    svgs: &mut Vec<(String, String)>,
) -> anyhow::Result<()> {
    let mut series = vec![];
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut any_modeled = false;
    for f in files {
        for r in &f.records {
            let Body::Collective(c) = &r.body else {
                continue;
            };
            any_modeled |= r.source == Source::Modeled;
            let launcher = r
                .provenance
                .launcher
                .as_deref()
                .map(|l| format!("{l}, "))
                .unwrap_or_default();
            let mut base = format!(
                "{} {} ranks, {launcher}{}",
                c.op.name(),
                c.nranks,
                settings_label(r)
            );
            if r.source == Source::Modeled {
                base += " (modeled)";
            }
            let n = seen.entry(base.clone()).or_default();
            *n += 1;
            if *n > 1 {
                base = format!("{base} [{}]", evidence::short_name(&f.path));
            }
            let colour = series.len() / 2;
            for graph in [true, false] {
                let points: Vec<(f64, f64)> = c
                    .rows
                    .iter()
                    .filter_map(|row| {
                        let t = if graph { &row.graph } else { &row.eager };
                        t.as_ref().map(|t| (row.size_bytes as f64, t.time_us))
                    })
                    .collect();
                if !points.is_empty() {
                    series.push(Series {
                        label: format!("{base}, {}", if graph { "graph" } else { "eager" }),
                        points,
                        dashed: !graph,
                        colour,
                    });
                }
            }
        }
    }
    if series.is_empty() {
        return Ok(());
    }
    let title = format!(
        "Collective latency vs message size{}",
        modeled_suffix(any_modeled)
    );
    svgs.push((
        LATENCY_SVG.to_string(),
        plots::latency_vs_size(&title, &series)?,
    ));
    let _ = writeln!(
        md,
        "## Collective latency\n\nMedian time per operation against message size; solid lines \
         are CUDA-graph replays, dashed lines eager launches.\n\n![{title}]({LATENCY_SVG})\n"
    );
    let _ = writeln!(md, "{}", markdown_table(&collective_table(rendered)));
    Ok(())
}

/// (b) Verify time per record: eager and graph bars, and the verify records' table.
fn verify_section(
    files: &[LoadedFile],
    rendered: &[&Record],
    md: &mut String,
    svgs: &mut Vec<(String, String)>,
) -> anyhow::Result<()> {
    let mut groups = vec![];
    let mut any_modeled = false;
    for f in files {
        for r in &f.records {
            let Body::Verify(v) = &r.body else {
                continue;
            };
            any_modeled |= r.source == Source::Modeled;
            let mut g = bar_group(&f.path, r.source, v);
            g.label.push(settings_label(r));
            groups.push(g);
        }
    }
    if groups.is_empty() {
        return Ok(());
    }
    let title = format!(
        "Time per verify forward, eager vs CUDA graph{}",
        modeled_suffix(any_modeled)
    );
    svgs.push((VERIFY_SVG.to_string(), plots::verify_bars(&title, &groups)?));
    let _ = writeln!(
        md,
        "## Verify time\n\nMedian time per forward of each record, eager (light) and CUDA \
         graph (dark). Where collectives-only and compute-only runs exist they are stacked, \
         and the full run is the black marker: the gap shows how much of the two overlaps \
         or adds up.\n\n![{title}]({VERIFY_SVG})\n"
    );
    let owned: Vec<Record> = rendered.iter().map(|r| (*r).clone()).collect();
    if let Some((_, t)) = tables(&owned).into_iter().find(|(k, _)| k == "verify") {
        let _ = writeln!(md, "{}", markdown_table(&t));
    }
    Ok(())
}

/// (c) The speculative-decoding break-even: tokens/s against accept length, a line per
/// verify time (at most [`MAX_SPEED_LINES`]), and its tables; or why it is not drawn.
fn breakeven_section(
    files: &[LoadedFile],
    flags: &Flags,
    engine: &crate::explain::EngineSettings,
    times: &[RecordTime],
    md: &mut String,
    svgs: &mut Vec<(String, String)>,
) -> anyhow::Result<()> {
    let _ = writeln!(md, "## Speculative-decoding break-even\n");
    let a = match breakeven_of(flags, engine, times)? {
        Err(why) => {
            let _ = writeln!(md, "Not drawn: {why}\n");
            return Ok(());
        }
        Ok(a) => a,
    };
    let title = format!(
        "Tokens/s vs accept length (k = {}, T_draft {:.2} ms){}",
        a.inputs.draft_steps,
        a.inputs.draft_ms.value,
        modeled_suffix(a.modeled)
    );
    let lines: Vec<SpeedLine> = a
        .rows
        .iter()
        .take(MAX_SPEED_LINES)
        .map(|r| SpeedLine {
            label: speed_label(r),
            cycle_ms: r.cycle_ms,
            breakeven: r.breakeven_accept_length,
        })
        .collect();
    svgs.push((
        TOKENS_SVG.to_string(),
        plots::tokens_vs_accept(
            &title,
            &lines,
            &explain_points(files),
            a.baseline_tokens_per_s,
            a.inputs.draft_steps,
        )?,
    ));
    *md += &breakeven_markdown(&a);
    if a.rows.len() > MAX_SPEED_LINES {
        let _ = writeln!(
            md,
            "The plot shows the first {MAX_SPEED_LINES} of {} verify times; the tables list all.\n",
            a.rows.len()
        );
    }
    let _ = writeln!(md, "![{title}]({TOKENS_SVG})\n");
    Ok(())
}

/// The legend of a verify time's line in the tokens/s plot: the time, where it comes from,
/// the floor it is held at, and tau*.
fn speed_label(r: &crate::speculative::analysis::Row) -> String {
    format!(
        "T_verify {:.2} ms ({}{}), tau* {}{:.2}{}",
        r.verify_ms.value,
        if r.bound {
            "lower bound: a part of the verify"
        } else if r.modeled {
            "modeled"
        } else {
            r.verify_ms.origin.kind()
        },
        if r.at_floor {
            format!(", held at the floor {:.2} ms", r.held_verify_ms)
        } else {
            String::new()
        },
        if r.bound { ">=" } else { "" },
        r.breakeven_accept_length,
        if r.bound {
            ""
        } else if r.breakeven_accept_length < 1.0 {
            " (< 1: pays at any acceptance)"
        } else if !r.reachable {
            " (> k+1: cannot pay)"
        } else {
            ""
        }
    )
}

/// The answers of the `explain` records, first: each as `explain --format markdown` printed
/// it (the record's `markdown`), under the file's name.
fn explain_sections(files: &[LoadedFile]) -> String {
    let mut md = String::new();
    for (name, data) in explain_records(files) {
        let Some(text) = data["markdown"].as_str() else {
            continue;
        };
        let _ = writeln!(md, "## The answer: explain ({name})\n");
        for line in text
            .lines()
            .filter(|l| !l.starts_with("## verifybench explain"))
        {
            let _ = writeln!(md, "{line}");
        }
        md.push('\n');
    }
    md
}

/// The rows of the `explain` records with a tokens/s, as points of the tokens/s plot: each at
/// its accept length, with its range; the first row of each answer is the verify as it ran
/// (or as predicted), the user's own point.
fn explain_points(files: &[LoadedFile]) -> Vec<plots::SpeedPoint> {
    let mut out = vec![];
    for (file, data) in explain_records(files) {
        let Some(tau) = data["cycle"]["accept_length"]["value"].as_f64() else {
            continue;
        };
        for s in data["scenarios"].as_array().into_iter().flatten() {
            let Some(tps) = s["tokens_per_s"].as_f64() else {
                continue;
            };
            let range = s["tokens_per_s_range"]
                .as_array()
                .and_then(|a| Some([a.first()?.as_f64()?, a.get(1)?.as_f64()?]));
            out.push(plots::SpeedPoint {
                label: format!(
                    "{file}: {} {tps:.1} tok/s{}",
                    s["name"].as_str().unwrap_or("row"),
                    range.map_or(String::new(), |[lo, hi]| format!(" ({lo:.1}-{hi:.1})"))
                ),
                accept_length: tau,
                tokens_per_s: tps,
                range,
            });
        }
    }
    out
}

/// The `explain` records of `files`, in order, each with its file's short name.
fn explain_records(files: &[LoadedFile]) -> impl Iterator<Item = (String, &serde_json::Value)> {
    files.iter().flat_map(|f| {
        f.records
            .iter()
            .filter_map(explain_data)
            .map(|d| (crate::evidence::short_name(&f.path), d))
    })
}

/// The data of an `explain` record, if `r` is one.
fn explain_data(r: &Record) -> Option<&serde_json::Value> {
    match &r.body {
        Body::Other { name, data } if name == record::kinds::EXPLAIN => Some(data),
        _ => None,
    }
}

/// The [`Body::Other`] kinds the report renders (besides collective and verify records).
const RENDERED_KINDS: &[&str] = &[
    record::kinds::EXPLAIN,
    record::kinds::SWEEP_POINT,
    record::kinds::BANDWIDTH,
    record::kinds::SELFTEST,
];

/// The collective records' rows, with the NCCL settings of each series beside its rank count.
fn collective_table(rendered: &[&Record]) -> Table {
    let mut out: Option<Table> = None;
    for r in rendered {
        if !matches!(r.body, Body::Collective(_)) {
            continue;
        }
        let Some((_, mut t)) = tables(std::slice::from_ref(*r))
            .into_iter()
            .find(|(k, _)| k == "collective")
        else {
            continue;
        };
        let at = t
            .headers
            .iter()
            .position(|h| h == "nranks")
            .map_or(0, |i| i + 1);
        let label = settings_label(r);
        t.headers.insert(at, "NCCL settings".into());
        for row in &mut t.rows {
            row.insert(at, cell(&label));
        }
        match &mut out {
            None => out = Some(t),
            Some(o) => o.rows.extend(t.rows),
        }
    }
    out.unwrap_or_default()
}

fn bar_group(path: &Path, source: Source, v: &VerifyResult) -> BarGroup {
    let w = &v.workload;
    let stack = |graph: bool| {
        let ms = |m: Mode| v.run(graph, m).map(|r| r.per_verify.median_us / 1000.0);
        Stack {
            comm_ms: ms(Mode::Comm),
            compute_ms: ms(Mode::Compute),
            full_ms: ms(Mode::Full),
        }
    };
    BarGroup {
        label: vec![
            format!("{} {} TP={} T={}", w.model, w.phase.name(), w.tp, w.tokens),
            format!("{} ({})", evidence::short_name(path), source.label()),
        ],
        eager: stack(false),
        graph: stack(true),
    }
}

/// Writes `report.md` and the SVGs into `dir` (created if needed); returns the paths written.
pub(crate) fn write(report: &Report, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = vec![];
    if !dir.is_dir() {
        std::fs::create_dir(dir).map_err(|e| {
            crate::error::usage(format!(
                "-o/--out '{}': cannot create the directory ({e})",
                dir.display()
            ))
        })?;
    }
    for (name, svg) in &report.svgs {
        let p = dir.join(name);
        crate::util::write_file(&p, svg.as_bytes())?;
        out.push(p);
    }
    let p = dir.join("report.md");
    crate::util::write_file(&p, report.markdown.as_bytes())?;
    out.push(p);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn other(name: &str, data: serde_json::Value) -> Record {
        Record::new(
            Source::Measured,
            record::Provenance::here("none", crate::util::now_utc()),
            Body::Other {
                name: name.into(),
                data,
            },
        )
    }

    #[test]
    fn unknown_kinds_are_set_aside_not_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("mixed.jsonl");
        let known = other("sweep_point", serde_json::json!({}));
        let mut future = serde_json::to_value(&known).unwrap();
        future["kind"] = "future_kind".into();
        std::fs::write(
            &p,
            format!("{}\n{}\n", serde_json::to_string(&known).unwrap(), future),
        )
        .unwrap();
        let f = LoadedFile::read(&p).unwrap();
        assert_eq!(f.records.len(), 1);
        assert_eq!(f.unknown_kinds, vec!["future_kind".to_string()]);
        // Alone, nothing in it renders: an error naming both.
        let e = build(
            std::slice::from_ref(&f),
            &Flags::default(),
            &Default::default(),
        )
        .unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("'future_kind'"), "{e}");
        // Beside a renderable file (selftest results of the envelope-less form) both are named.
        let st = dir.path().join("selftest.json");
        std::fs::write(
            &st,
            r#"[{"name": "c", "launcher": "threads", "pass": true, "detail": "0 wrong"}]"#,
        )
        .unwrap();
        let r = build(
            &[f, LoadedFile::read(&st).unwrap()],
            &Flags::default(),
            &Default::default(),
        )
        .unwrap();
        assert_eq!(r.skipped.len(), 2, "{:?}", r.skipped);
        assert!(
            r.markdown.contains("| selftest.json | 1 | 1 | 0 | - |"),
            "{}",
            r.markdown
        );
        assert!(r.svgs.is_empty());
        assert!(
            r.markdown.contains("a 'future_kind' record"),
            "{}",
            r.markdown
        );
        assert!(
            r.markdown.contains("mixed.jsonl: a malformed sweep point"),
            "{}",
            r.markdown
        );
        assert!(r.markdown.contains("Not drawn"));

        // A malformed record of a known kind is still an error.
        let mut bad = serde_json::to_value(&known).unwrap();
        bad["result"] = serde_json::json!(5);
        std::fs::write(&p, bad.to_string()).unwrap();
        assert!(LoadedFile::read(&p).is_err());
    }

    #[test]
    fn only_unrenderable_kinds_are_an_error_naming_each_file() {
        let dir = tempfile::tempdir().unwrap();
        let env = dir.path().join("env.json");
        std::fs::write(&env, other("env", serde_json::json!({})).to_json_pretty()).unwrap();
        let empty = dir.path().join("empty.json");
        std::fs::write(&empty, "\n").unwrap();
        let files: Vec<LoadedFile> = [&env, &empty]
            .iter()
            .map(|p| LoadedFile::read(p).unwrap())
            .collect();
        let e = build(&files, &Flags::default(), &Default::default()).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        let m = e.to_string();
        assert!(m.contains("env.json: a machine description"), "{m}");
        assert!(m.contains("empty.json: an empty file"), "{m}");
        assert_eq!(m.lines().count(), 1);
    }

    fn with_env(vars: &[(&str, &str)]) -> Record {
        let mut r = other("x", serde_json::json!({}));
        r.provenance.workers = vec![record::WorkerInfo {
            rank: 0,
            pid: 1,
            device: 0,
            nccl_env: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }];
        r
    }

    #[test]
    fn settings_labels_leave_out_what_every_run_has_and_tell_settings_apart() {
        let always = [
            ("NCCL_NVLS_ENABLE", "0"),
            ("NCCL_VERSION", "2.28.3-1"),
            ("NCCL_DEBUG", "INFO"),
            ("NCCL_DEBUG_FILE", "/x/%h.%p.log"),
            ("NCCL_DEBUG_SUBSYS", "INIT"),
        ];
        let label = |extra: &[(&str, &str)]| {
            let mut v = always.to_vec();
            v.extend_from_slice(extra);
            settings_label(&with_env(&v))
        };
        assert_eq!(label(&[]), "NCCL defaults");
        assert_eq!(label(&[("NCCL_PROTO", "LL")]), "NCCL_PROTO=LL");
        assert_eq!(
            label(&[("NCCL_P2P_DISABLE", "1"), ("NCCL_ALGO", "Tree")]),
            "NCCL_ALGO=Tree NCCL_P2P_DISABLE=1"
        );
        // NVLS switched on is a setting; an unknown variable is one too.
        assert_eq!(
            settings_label(&with_env(&[("NCCL_NVLS_ENABLE", "1")])),
            "NCCL_NVLS_ENABLE=1"
        );
        assert_eq!(
            label(&[("NCCL_BUFFSIZE", "4194304")]),
            "NCCL_BUFFSIZE=4194304"
        );
        let mut modeled = with_env(&[]);
        modeled.provenance.workers.clear();
        assert_eq!(settings_label(&modeled), "NCCL_* not recorded");
    }

    #[test]
    fn noise_margin_comes_from_the_sweeps_command_line() {
        let cl = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            noise_margin_of(&cl(&["vb", "sweep", "--noise-margin", "0.02"])),
            0.02
        );
        assert_eq!(
            noise_margin_of(&cl(&["vb", "sweep", "--noise-margin=0.01"])),
            0.01
        );
        assert_eq!(noise_margin_of(&cl(&["vb", "sweep", "--rounds", "3"])), 0.0);
    }
}
