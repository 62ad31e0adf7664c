//! `report`: results files -> a Markdown report with SVG plots.
//!
//! [`build`] is pure (records in, Markdown and SVG text out); [`write`] puts them in a
//! directory. Record kinds this version does not render (sweep points, later kinds) are listed
//! as skipped rather than refused, so an old report binary still reads new results files.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::export::{markdown_table, tables, Table};
use super::plots::{self, BarGroup, Series, SpeedLine, Stack};
use crate::model::Phase;
use crate::record::{self, Body, Mode, Record, Source, VerifyResult};
use crate::speculative::analysis::{analyse, Analysis};
use crate::speculative::inputs::{self, Flags, RecordTime};

/// The records of one results file, and the records it holds of kinds this version does not
/// know (listed, not refused).
#[derive(Debug, Clone)]
pub struct LoadedFile {
    pub path: PathBuf,
    pub records: Vec<Record>,
    /// Kinds of records that were not understood, in file order.
    pub unknown_kinds: Vec<String>,
}

impl LoadedFile {
    /// Reads a results file (one record, an array, or JSON lines). A record of another
    /// schema version is refused; a record of a kind this version does not know is kept aside.
    pub fn read(path: &Path) -> anyhow::Result<LoadedFile> {
        match record::read_records(path) {
            Ok(records) => Ok(LoadedFile {
                path: path.to_path_buf(),
                records,
                unknown_kinds: vec![],
            }),
            Err(e) => Self::read_lenient(path).map_err(|_| e),
        }
    }

    /// Record by record: records that do not parse but carry a `kind` no variant knows are
    /// set aside. Any other failure is an error.
    fn read_lenient(path: &Path) -> anyhow::Result<LoadedFile> {
        let text = std::fs::read_to_string(path)?;
        let values = record::io::json_values(&text).map_err(|(_, e)| e)?;
        let mut records = vec![];
        let mut unknown_kinds = vec![];
        for v in values {
            if v.get("schema_version").and_then(|x| x.as_u64())
                != Some(record::SCHEMA_VERSION as u64)
            {
                anyhow::bail!("schema");
            }
            match serde_json::from_value::<Record>(v.clone()) {
                Ok(r) => records.push(r),
                Err(e) => match v.get("kind").and_then(|k| k.as_str()) {
                    Some(k) if !["collective", "verify", "other"].contains(&k) => {
                        unknown_kinds.push(k.to_string())
                    }
                    _ => return Err(e.into()),
                },
            }
        }
        Ok(LoadedFile {
            path: path.to_path_buf(),
            records,
            unknown_kinds,
        })
    }
}

/// A rendered report: the Markdown and the SVG files it embeds (name, content).
#[derive(Debug, Clone)]
pub struct Report {
    pub markdown: String,
    pub svgs: Vec<(String, String)>,
    /// Record kinds left out, as "file: kind".
    pub skipped: Vec<String>,
}

pub const LATENCY_SVG: &str = "collective_latency.svg";
pub const VERIFY_SVG: &str = "verify_time.svg";
pub const TOKENS_SVG: &str = "tokens_per_s.svg";

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
        Some(w) if !w.nccl_env.is_empty() => w
            .nccl_env
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" "),
        _ => "-".into(),
    }
}

/// The NCCL protocol and algorithm settings of a record, for legends.
fn settings_label(r: &Record) -> String {
    let env = r
        .provenance
        .workers
        .first()
        .map(|w| w.nccl_env.clone())
        .unwrap_or_default();
    let picked: Vec<String> = ["NCCL_PROTO", "NCCL_ALGO"]
        .iter()
        .filter_map(|k| env.get(*k).map(|v| format!("{}={v}", &k[5..])))
        .collect();
    if picked.is_empty() {
        "NCCL defaults".into()
    } else {
        picked.join(" ")
    }
}

fn phase_word(p: Phase) -> &'static str {
    match p {
        Phase::Verify => "verify",
        Phase::Decode => "decode",
        Phase::Draft => "draft",
    }
}

fn cell(x: &str) -> String {
    x.replace('|', "\\|")
}

/// Builds the report of `files`. `flags` carries --decode-ms, --draft-ms, --draft-steps and
/// --overhead-ms for the break-even section.
pub fn build(files: &[LoadedFile], flags: &Flags) -> anyhow::Result<Report> {
    let mut md = String::new();
    let mut svgs = vec![];
    let mut skipped = vec![];
    let mut rendered: Vec<&Record> = vec![];
    let mut times: Vec<RecordTime> = vec![];

    let _ = writeln!(md, "# verifybench report\n");
    let _ = writeln!(
        md,
        "Rendered by verifybench {} ({}) from {} results file(s). Every number is labelled \
         *measured* (timed on GPUs) or *modeled* (cost model).\n",
        env!("CARGO_PKG_VERSION"),
        env!("VERIFYBENCH_GIT_COMMIT"),
        files.len()
    );

    // Inputs and provenance.
    let mut inputs_t = Table {
        headers: [
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
        ]
        .map(String::from)
        .to_vec(),
        rows: vec![],
    };
    for f in files {
        let name = inputs::short_name(&f.path);
        for (i, r) in f.records.iter().enumerate() {
            let p = &r.provenance;
            inputs_t.rows.push(
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
            match &r.body {
                Body::Collective(_) | Body::Verify(_) => rendered.push(r),
                Body::Other { name: kind, .. } => {
                    skipped.push(format!("{name} record {}: kind `{kind}`", i + 1))
                }
            }
        }
        for k in &f.unknown_kinds {
            skipped.push(format!("{name}: kind `{k}`"));
        }
        let (t, _) = inputs::times_of(&f.path, &f.records);
        times.extend(t);
    }
    let _ = writeln!(md, "## Inputs\n\n{}", markdown_table(&inputs_t));
    if !skipped.is_empty() {
        let _ = writeln!(md, "Skipped (not rendered by this version):\n");
        for s in &skipped {
            let _ = writeln!(md, "- {s}");
        }
        md.push('\n');
    }
    let owned: Vec<Record> = rendered.iter().map(|r| (*r).clone()).collect();
    let tabs: BTreeMap<String, Table> = tables(&owned).into_iter().collect();

    // (a) Collective latency vs message size.
    let mut series = vec![];
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut any_modeled = false;
    for f in files {
        for r in &f.records {
            let Body::Collective(c) = &r.body else {
                continue;
            };
            any_modeled |= r.source == Source::Modeled;
            let mut base = format!("{} {} ranks, {}", c.op.name(), c.nranks, settings_label(r));
            if r.source == Source::Modeled {
                base += " (modeled)";
            }
            let n = seen.entry(base.clone()).or_default();
            *n += 1;
            if *n > 1 {
                base = format!("{base} [{}]", inputs::short_name(&f.path));
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
    if !series.is_empty() {
        let title = format!(
            "Collective latency vs message size{}",
            if any_modeled {
                " (includes modeled)"
            } else {
                ""
            }
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
        if let Some(t) = tabs.get("collective") {
            let _ = writeln!(md, "{}", markdown_table(t));
        }
    }

    // (b) Verify time per record.
    let mut groups = vec![];
    let mut any_modeled = false;
    for f in files {
        for r in &f.records {
            let Body::Verify(v) = &r.body else {
                continue;
            };
            any_modeled |= r.source == Source::Modeled;
            groups.push(bar_group(&f.path, r.source, v));
        }
    }
    if !groups.is_empty() {
        let title = format!(
            "Time per verify forward, eager vs CUDA graph{}",
            if any_modeled {
                " (includes modeled)"
            } else {
                ""
            }
        );
        svgs.push((VERIFY_SVG.to_string(), plots::verify_bars(&title, &groups)?));
        let _ = writeln!(
            md,
            "## Verify time\n\nMedian time per forward of each record, eager (light) and CUDA \
             graph (dark). Where collectives-only and compute-only runs exist they are stacked, \
             and the full run is the black marker: the gap shows how much of the two overlaps \
             or adds up.\n\n![{title}]({VERIFY_SVG})\n"
        );
        if let Some(t) = tabs.get("verify") {
            let _ = writeln!(md, "{}", markdown_table(t));
        }
    }

    // (c) Break-even.
    let _ = writeln!(md, "## Speculative-decoding break-even\n");
    match breakeven_of(flags, &times)? {
        Err(why) => {
            let _ = writeln!(md, "Not drawn: {why}\n");
        }
        Ok(a) => {
            let title = format!(
                "Tokens/s vs accept length (k = {}, T_draft {:.2} ms){}",
                a.inputs.draft_steps,
                a.inputs.draft_ms.value,
                if a.modeled { " (includes modeled)" } else { "" }
            );
            let lines: Vec<SpeedLine> = a
                .rows
                .iter()
                .take(MAX_SPEED_LINES)
                .map(|r| SpeedLine {
                    label: format!(
                        "T_verify {:.2} ms ({}), tau* {:.2}{}",
                        r.verify_ms.value,
                        if r.modeled {
                            "modeled"
                        } else {
                            r.verify_ms.origin.kind()
                        },
                        r.breakeven_accept_length,
                        if r.breakeven_accept_length < 1.0 {
                            " (< 1: pays at any acceptance)"
                        } else if !r.reachable {
                            " (> k+1: cannot pay)"
                        } else {
                            ""
                        }
                    ),
                    cycle_ms: r.cycle_ms,
                    breakeven: r.breakeven_accept_length,
                })
                .collect();
            svgs.push((
                TOKENS_SVG.to_string(),
                plots::tokens_vs_accept(
                    &title,
                    &lines,
                    a.baseline_tokens_per_s,
                    a.inputs.draft_steps,
                )?,
            ));
            md += &breakeven_markdown(&a);
            if a.rows.len() > MAX_SPEED_LINES {
                let _ = writeln!(
                    md,
                    "The plot shows the first {MAX_SPEED_LINES} of {} verify times; the tables list all.\n",
                    a.rows.len()
                );
            }
            let _ = writeln!(md, "![{title}]({TOKENS_SVG})\n");
        }
    }

    Ok(Report {
        markdown: md,
        svgs,
        skipped,
    })
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
            format!(
                "{} {} TP={} T={}",
                w.model,
                phase_word(w.phase),
                w.tp,
                w.tokens
            ),
            format!("{} ({})", inputs::short_name(path), source.label()),
        ],
        eager: stack(false),
        graph: stack(true),
    }
}

/// The break-even of the report, or why there is none (a missing input is not an error here:
/// the rest of the report still renders).
fn breakeven_of(flags: &Flags, times: &[RecordTime]) -> anyhow::Result<Result<Analysis, String>> {
    let has = |p: Phase| times.iter().any(|t| t.phase == p);
    if flags.decode_ms.is_none() && !has(Phase::Decode) {
        return Ok(Err(
            "no decode time. Give `--decode-ms` (one plain decode step, ms) or a results file \
             with a decode record to compare against plain decoding."
                .into(),
        ));
    }
    if !has(Phase::Verify) {
        return Ok(Err(
            "no verify-phase verify record in the results files.".into()
        ));
    }
    // Only whole forwards compare with a decode step: a collectives-only (or compute-only)
    // verify time against a full decode would overstate what speculation gains.
    let full: Vec<RecordTime> = times
        .iter()
        .filter(|t| t.mode == crate::record::Mode::Full)
        .cloned()
        .collect();
    if !full.iter().any(|t| t.phase == Phase::Verify) {
        return Ok(Err(
            "the verify records hold no full run (collectives and compute, `verify --mode full`);              a collectives-only or compute-only time is not a whole verify forward, so it is not              compared with a decode step."
                .into(),
        ));
    }
    if flags.decode_ms.is_none() && !full.iter().any(|t| t.phase == Phase::Decode) {
        return Ok(Err(
            "no full-mode decode record (`verify --phase decode --mode full`) and no              `--decode-ms`: a decode time that is not a whole forward is not compared."
                .into(),
        ));
    }
    let times = &full[..];
    let i = inputs::resolve(flags, times, true)?;
    Ok(Ok(analyse(i)))
}

/// The break-even as Markdown: inputs with their origins, the per-verify table, the grid.
pub fn breakeven_markdown(a: &Analysis) -> String {
    let i = &a.inputs;
    let mut md = String::new();
    let _ = writeln!(md, "Assumption: {}.\n", a.assumption);
    if a.modeled {
        let _ = writeln!(
            md,
            "**Modeled**: rows whose origin is *modeled* use times from the cost model, so their outputs are modeled.\n"
        );
    }
    let _ = writeln!(md, "| input | value | origin |\n|---|---|---|");
    let _ = writeln!(
        md,
        "| T_decode | {:.2} ms | {} |",
        i.decode_ms.value,
        cell(&i.decode_ms.origin.to_string())
    );
    let _ = writeln!(
        md,
        "| T_draft | {:.2} ms | {} |",
        i.draft_ms.value,
        cell(&i.draft_ms.origin.to_string())
    );
    let _ = writeln!(
        md,
        "| draft steps k | {} | {} |",
        i.draft_steps,
        cell(&i.draft_steps_origin.to_string())
    );
    let _ = writeln!(
        md,
        "| overhead | {:.2} ms | {} |",
        i.overhead_ms.value,
        cell(&i.overhead_ms.origin.to_string())
    );
    for v in &i.verify_ms {
        let _ = writeln!(
            md,
            "| T_verify | {:.2} ms | {} |",
            v.value,
            cell(&v.origin.to_string())
        );
    }
    md.push('\n');
    for n in &i.notes {
        let _ = writeln!(md, "- note: {n}");
    }
    let _ = writeln!(
        md,
        "Without speculation: **{:.2} tok/s** (1000 / T_decode). Cycle = k x T_draft + T_verify + \
         overhead; tau* = cycle / T_decode; alpha* = the constant acceptance rate whose expected \
         tokens are tau*.\n",
        a.baseline_tokens_per_s
    );
    let mut t = Table {
        headers: ["T_verify (ms)", "origin", "cycle (ms)", "tau*", "alpha*"]
            .map(String::from)
            .to_vec(),
        rows: vec![],
    };
    for r in &a.rows {
        t.rows.push(vec![
            format!("{:.2}", r.verify_ms.value),
            if r.modeled {
                "modeled".to_string()
            } else {
                r.verify_ms.origin.kind().to_string()
            },
            format!("{:.2}", r.cycle_ms),
            format!("{:.3}", r.breakeven_accept_length),
            match r.breakeven_accept_rate {
                None => "unreachable (tau* > k+1)".into(),
                Some(_) if r.breakeven_accept_length <= 1.0 => "any (tau* <= 1)".into(),
                Some(x) => format!("{x:.3}"),
            },
        ]);
    }
    let _ = writeln!(md, "{}", markdown_table(&t));
    let mut g = Table {
        headers: std::iter::once("T_verify (ms)".to_string())
            .chain(i.table_accept_lengths.iter().map(|x| format!("tau={x}")))
            .collect(),
        rows: vec![],
    };
    for r in &a.rows {
        g.rows.push(
            std::iter::once(format!("{:.2}", r.verify_ms.value))
                .chain(r.grid.iter().map(|p| {
                    if p.beats_baseline {
                        format!("**{:.1}**", p.tokens_per_s)
                    } else {
                        format!("{:.1}", p.tokens_per_s)
                    }
                }))
                .collect(),
        );
    }
    let _ = writeln!(
        md,
        "Tokens/s by verify time and accept length; **bold** beats plain decoding.\n\n{}",
        markdown_table(&g)
    );
    md
}

/// Writes `report.md` and the SVGs into `dir` (created if needed); returns the paths written.
pub fn write(report: &Report, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
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

    #[test]
    fn unknown_kinds_are_set_aside_not_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("mixed.jsonl");
        let known = Record::new(
            Source::Measured,
            record::Provenance::here("none", crate::util::now_utc()),
            Body::Other {
                name: "sweep_point".into(),
                data: serde_json::json!({}),
            },
        );
        let mut future = serde_json::to_value(&known).unwrap();
        future["kind"] = "bandwidth".into();
        std::fs::write(
            &p,
            format!("{}\n{}\n", serde_json::to_string(&known).unwrap(), future),
        )
        .unwrap();
        let f = LoadedFile::read(&p).unwrap();
        assert_eq!(f.records.len(), 1);
        assert_eq!(f.unknown_kinds, vec!["bandwidth".to_string()]);
        let r = build(&[f], &Flags::default()).unwrap();
        assert_eq!(r.skipped.len(), 2);
        assert!(r.svgs.is_empty());
        assert!(r.markdown.contains("kind `bandwidth`"));
        assert!(r.markdown.contains("Not drawn"));

        // A malformed record of a known kind is still an error.
        let mut bad = serde_json::to_value(&known).unwrap();
        bad["result"] = serde_json::json!(5);
        std::fs::write(&p, bad.to_string()).unwrap();
        assert!(LoadedFile::read(&p).is_err());
    }
}
