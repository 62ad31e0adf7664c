//! `verifybench compare`: verify results side by side (verifybench and its PyTorch peer, or two
//! settings), with ratios against the first file and their uncertainty, and a note on where the
//! difference comes from. Reads only files; needs no GPU.
//!
//! Here: the entries and rows, the comparison and its explanation, and the table and Markdown
//! renderers of a comparison. The command itself is `commands::compare`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

mod explain;
pub(crate) mod nccl_tests;
mod render;

pub(crate) use explain::explain;
#[cfg(test)]
use explain::setup_differences;
#[cfg(test)]
use render::{decimals, wrap};
pub(crate) use render::{render_markdown, render_table};

use crate::error::usage;
use crate::measure::Summary;
use crate::record::{read_records, Mode, RecordedWorkload, VerifyResult, VerifyRun};
use crate::record::{Body, Record, Source};

/// The output of `compare`: the format every command shares; compare offers all three.
pub(crate) use crate::output::Format;

/// How the ratio uncertainty is computed (printed under every table).
pub(crate) const UNCERTAINTY_METHOD: &str = "ratio = median / median of the first file; ± is one \
standard error of the ratio, R·sqrt((seA/mA)² + (seB/mB)²), with each median's standard error \
taken as 1.2533·stddev/sqrt(n) (normal approximation; outliers widen stddev, so it errs large)";

/// One verify record of one file: a column of the comparison.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Entry {
    /// File name, with `#k` when the file holds several verify records.
    pub(crate) label: String,
    pub(crate) file: String,
    /// `nccl`, `torch`, `model`, ...
    pub(crate) backend: String,
    pub(crate) source: Source,
    pub(crate) tool_version: String,
    pub(crate) nccl_version: Option<String>,
    /// The NCCL library file the workers mapped.
    pub(crate) nccl_library: Option<String>,
    pub(crate) host: String,
    pub(crate) gpu: Option<String>,
    /// NCCL_* environment of rank 0 (all ranks of one run normally agree).
    pub(crate) nccl_env: BTreeMap<String, String>,
    /// Whether the record says what its workers saw (else `nccl_env` is unknown, not empty).
    pub(crate) has_workers: bool,
    #[serde(skip)]
    pub(crate) result: VerifyResult,
}

/// One line of the table: one run of one entry, with its ratio to the first entry's same run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Row {
    pub(crate) mode: Mode,
    pub(crate) graph: bool,
    /// Index into the entries.
    pub(crate) entry: usize,
    pub(crate) label: String,
    pub(crate) median_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) stddev_us: f64,
    pub(crate) per_collective_us: f64,
    pub(crate) n: usize,
    pub(crate) wrong: u64,
    pub(crate) iterations: u64,
    pub(crate) warmup: u64,
    /// Median divided by the first entry's median for the same run; absent when it has none.
    pub(crate) ratio: Option<f64>,
    /// One standard error of `ratio` (0 for the base itself).
    pub(crate) ratio_err: Option<f64>,
}

/// The whole comparison (what `--format json` prints).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Comparison {
    pub(crate) workload: RecordedWorkload,
    pub(crate) entries: Vec<Entry>,
    pub(crate) rows: Vec<Row>,
    pub(crate) uncertainty: &'static str,
    /// Where the difference comes from, one finding per line.
    pub(crate) notes: Vec<String>,
}

/// `compare --schedule FILE`: every entry must have replayed the file's schedule (same
/// schedule_hash); with `force`, the ones that did not are named in notes instead.
pub(crate) fn against_schedule_file(
    entries: &[Entry],
    path: &Path,
    force: bool,
) -> anyhow::Result<Vec<String>> {
    let f = crate::model::schedule_file::ScheduleFile::load(path)?;
    let hash = f.schedule.hash();
    let mut notes = vec![];
    for e in entries {
        let w = &e.result.workload;
        if w.schedule_hash == hash {
            continue;
        }
        let msg = format!(
            "'{}' replays {}, not the schedule of --schedule '{}' (schedule {hash})",
            e.label,
            describe(w),
            path.display()
        );
        if !force {
            return Err(usage(format!("{msg}; pass --force to compare anyway")));
        }
        notes.push(format!("{msg} (--force)"));
    }
    if notes.is_empty() {
        notes.push(format!(
            "every record replays the schedule of '{}' (schedule {hash})",
            path.display()
        ));
    }
    Ok(notes)
}

/// The verify records of one file as entries; any other kind of record is a usage error.
pub(crate) fn load(path: &Path) -> anyhow::Result<Vec<Entry>> {
    let records = read_records(path)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    if records.is_empty() {
        return Err(usage(format!(
            "results file '{}' holds no record",
            path.display()
        )));
    }
    let several = records.len() > 1;
    records
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let label = if several {
                format!("{name}#{}", i + 1)
            } else {
                name.clone()
            };
            entry(r, label, path)
        })
        .collect()
}

fn entry(r: Record, label: String, path: &Path) -> anyhow::Result<Entry> {
    let kind = r.body.kind().to_string();
    let result = match r.body {
        Body::Verify(v) => v,
        _ => {
            return Err(usage(format!(
                "'{}' holds a '{kind}' record; compare reads verify records (from `verifybench verify --export-json` or scripts/torch_baseline.py)",
                path.display()
            )))
        }
    };
    let p = r.provenance;
    Ok(Entry {
        label,
        file: path.display().to_string(),
        backend: p.backend,
        source: r.source,
        tool_version: p.tool_version,
        nccl_version: p.nccl_version,
        nccl_library: p.nccl_library,
        host: p.host,
        gpu: p.gpus.first().map(|g| g.name.clone()),
        nccl_env: p
            .workers
            .iter()
            .min_by_key(|w| w.rank)
            .map(|w| w.nccl_env.clone())
            .unwrap_or_default(),
        has_workers: !p.workers.is_empty(),
        result,
    })
}

/// Ratio of medians b/a and one standard error of it; `None` when a's median is not positive.
pub(crate) fn ratio(a: &Summary, b: &Summary) -> Option<(f64, f64)> {
    crate::measure::stats::ratio_with_error(
        (b.median_us, b.median_se()),
        (a.median_us, a.median_se()),
    )
}

fn run_key(r: &VerifyRun) -> (u8, bool) {
    let m = match r.mode {
        Mode::Comm => 0,
        Mode::Compute => 1,
        Mode::Full => 2,
    };
    (m, r.graph)
}

fn describe(w: &RecordedWorkload) -> String {
    format!(
        "{} {:?}, TP={}, {} token{}, {}, schedule {}",
        w.model,
        w.phase,
        w.tp,
        w.tokens,
        if w.tokens == 1 { "" } else { "s" },
        w.dtype.name(),
        w.schedule_hash
    )
    .replace("Verify", "verify")
    .replace("Decode", "decode")
    .replace("Draft", "draft")
}

/// Builds the comparison; refuses entries whose schedule differs from the first unless `force`.
pub(crate) fn compare(entries: Vec<Entry>, force: bool) -> anyhow::Result<Comparison> {
    let Some(first) = entries.first() else {
        return Err(usage("compare needs at least one results file"));
    };
    let workload = first.result.workload.clone();
    let mut notes = Vec::new();
    for e in &entries[1..] {
        let w = &e.result.workload;
        if w.schedule_hash != workload.schedule_hash {
            if !force {
                return Err(usage(format!(
                    "'{}' replays a different workload ({}) than '{}' ({}); pass --force to compare anyway",
                    e.label,
                    describe(w),
                    first.label,
                    describe(&workload)
                )));
            }
            notes.push(format!(
                "different workloads (--force): '{}' replays {}, the base {}; ratios mix schedules",
                e.label,
                describe(w),
                describe(&workload)
            ));
        }
    }
    let mut keys: Vec<(u8, bool)> = entries
        .iter()
        .flat_map(|e| e.result.runs.iter().map(run_key))
        .collect();
    keys.sort();
    keys.dedup();
    let mut rows = Vec::new();
    for key in keys {
        let base = first.result.runs.iter().find(|r| run_key(r) == key);
        for (i, e) in entries.iter().enumerate() {
            for r in e.result.runs.iter().filter(|r| run_key(r) == key) {
                let (ratio, ratio_err) = match base {
                    Some(_) if i == 0 => (Some(1.0), Some(0.0)),
                    Some(b) => ratio(&b.per_verify, &r.per_verify).unzip(),
                    None => (None, None),
                };
                rows.push(Row {
                    mode: r.mode,
                    graph: r.graph,
                    entry: i,
                    label: e.label.clone(),
                    median_us: r.per_verify.median_us,
                    p99_us: r.per_verify.p99_us,
                    stddev_us: r.per_verify.stddev_us,
                    per_collective_us: r.per_collective_us,
                    n: r.per_verify.n,
                    wrong: r.wrong,
                    iterations: r.iterations,
                    warmup: r.warmup,
                    ratio,
                    ratio_err,
                });
            }
        }
    }
    notes.extend(explain(&entries, &rows));
    Ok(Comparison {
        workload,
        entries,
        rows,
        uncertainty: UNCERTAINTY_METHOD,
        notes,
    })
}

fn run_name(mode: Mode, graph: bool) -> String {
    format!("{} {}", mode.name(), if graph { "graph" } else { "eager" })
}

fn n_collectives(w: &RecordedWorkload) -> u64 {
    (w.n_all_reduce + w.n_all_gather).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{self, Phase, ScheduleOptions};
    use crate::record::{Provenance, WorkerInfo};
    use crate::util::now_utc;

    fn workload(tp: u64) -> RecordedWorkload {
        let s = model::build(
            &model::presets::preset("kimi-k2.5").unwrap(),
            &ScheduleOptions {
                tp,
                ..Default::default()
            },
            Phase::Verify,
        )
        .unwrap();
        RecordedWorkload::of(&s)
    }

    fn run(graph: bool, samples: &[f64]) -> VerifyRun {
        let s = Summary::from_samples(samples).unwrap();
        VerifyRun {
            graph,
            mode: Mode::Comm,
            per_collective_us: s.median_us / 124.0,
            per_verify: s,
            breakdown: vec![],
            wrong: 0,
            iterations: samples.len() as u64,
            warmup: 2,
            in_collective: None,
        }
    }

    fn entry(label: &str, backend: &str, tp: u64, eager: f64, graph: f64) -> Entry {
        let jitter = |m: f64| (0..50).map(|i| m + (i % 7) as f64).collect::<Vec<_>>();
        let mut p = Provenance::here(backend, now_utc());
        p.nccl_version = Some("2.28.3".into());
        p.workers = vec![WorkerInfo {
            rank: 0,
            pid: 1,
            device: 0,
            nccl_env: [("NCCL_NVLS_ENABLE".to_string(), "0".to_string())].into(),
        }];
        let r = Record::new(
            Source::Measured,
            p,
            Body::Verify(VerifyResult::of(
                workload(tp),
                vec![run(false, &jitter(eager)), run(true, &jitter(graph))],
            )),
        );
        super::entry(r, label.into(), Path::new(label)).unwrap()
    }

    #[test]
    fn ratio_and_its_error() {
        let a = Summary {
            n: 100,
            median_us: 100.0,
            mean_us: 100.0,
            stddev_us: 10.0,
            min_us: 90.0,
            max_us: 110.0,
            p99_us: 109.0,
            outliers: 0,
        };
        let b = Summary {
            median_us: 200.0,
            stddev_us: 20.0,
            ..a.clone()
        };
        let (r, u) = ratio(&a, &b).unwrap();
        assert_eq!(r, 2.0);
        // each relative se = 1.2533 * 0.1 / 10 = 0.012533; combined sqrt(2) of that, times 2
        assert!((u - 2.0 * 0.012533 * 2f64.sqrt()).abs() < 1e-9, "{u}");
        let zero = Summary {
            median_us: 0.0,
            ..a.clone()
        };
        assert!(ratio(&zero, &b).is_none());
    }

    #[test]
    fn rows_carry_ratios_against_the_first_entry() {
        let c = compare(
            vec![
                entry("vb.json", "nccl", 2, 600.0, 400.0),
                entry("torch.json", "torch", 2, 1800.0, 800.0),
            ],
            false,
        )
        .unwrap();
        assert_eq!(c.rows.len(), 4);
        // eager rows first, base first within a run
        assert_eq!((c.rows[0].graph, c.rows[0].entry), (false, 0));
        assert_eq!(c.rows[0].ratio, Some(1.0));
        let torch_eager = &c.rows[1];
        assert!((torch_eager.ratio.unwrap() - 1803.0 / 603.0).abs() < 1e-9);
        assert!(torch_eager.ratio_err.unwrap() > 0.0);
        let t = render_table(&c);
        assert!(t.contains("1 (base)") && t.contains("torch.json"), "{t}");
        let notes = c.notes.join("\n");
        assert!(notes.contains("beyond 2 standard errors"), "{notes}");
        assert!(notes.contains("same NCCL_* environment"), "{notes}");
        let m = render_markdown(&c);
        assert!(
            m.lines()
                .any(|l| l.starts_with("| comm graph | torch.json")),
            "{m}"
        );
    }

    #[test]
    fn different_schedules_need_force() {
        let e = || {
            vec![
                entry("a.json", "nccl", 2, 600.0, 400.0),
                entry("b.json", "nccl", 8, 600.0, 400.0),
            ]
        };
        let err = compare(e(), false).unwrap_err();
        assert_eq!(crate::error::exit_code(&err), 2);
        assert!(err.to_string().contains("--force"), "{err}");
        let c = compare(e(), true).unwrap();
        assert!(c.notes[0].starts_with("different workloads"));
    }

    #[test]
    fn setup_differences_are_named() {
        let a = entry("a.json", "nccl", 2, 600.0, 400.0);
        let mut b = entry("b.json", "torch", 2, 600.0, 400.0);
        b.nccl_version = Some("2.21.5".into());
        b.nccl_env.insert("NCCL_PROTO".into(), "LL".into());
        let d = setup_differences(&a, &b).join("\n");
        assert!(d.contains("NCCL 2.28.3 vs 2.21.5"), "{d}");
        assert!(d.contains("NCCL_PROTO=unset vs LL"), "{d}");
    }

    #[test]
    fn different_libraries_are_named_with_their_versions() {
        let mut a = entry("a.json", "nccl", 2, 600.0, 400.0);
        let mut b = entry("b.json", "nccl", 2, 600.0, 400.0);
        a.nccl_library = Some("/usr/lib/libnccl.so.2.28.3".into());
        b.nccl_library = Some("/site/nvidia/nccl/lib/libnccl.so.2".into());
        let d = setup_differences(&a, &b).join("\n");
        assert!(
            d.contains("NCCL 2.28.3 in both, from two library files: /usr/lib/libnccl.so.2.28.3 vs /site/nvidia/nccl/lib/libnccl.so.2"),
            "{d}"
        );
        b.nccl_version = Some("2.28.9".into());
        let d = setup_differences(&a, &b).join("\n");
        assert!(
            d.contains("NCCL 2.28.3 (/usr/lib/libnccl.so.2.28.3) vs 2.28.9 (/site/nvidia/nccl/lib/libnccl.so.2)"),
            "{d}"
        );
    }

    #[test]
    fn decimals_show_the_uncertainty() {
        assert_eq!(decimals(0.2), 2);
        assert_eq!(decimals(0.003), 3);
        assert_eq!(decimals(0.0), 2);
        assert_eq!(decimals(1e-9), 4);
    }

    #[test]
    fn wrap_keeps_words_and_indents() {
        let w = wrap("aaa bbb ccc ddd", 9, "- ");
        assert_eq!(w, "- aaa bbb\n  ccc ddd");
    }
}
