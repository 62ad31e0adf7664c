//! Where a sweep writes (the results file and the logs folder, from the flags or fresh default
//! names) and the check of every file before any point runs.

use std::path::{Path, PathBuf};

use super::request::SweepRequest;
use crate::record::RecordedWorkload;
use crate::report::text::workload_line;
use crate::sweep::results;
use crate::util::Files;

/// The results file and the logs folder: the flags', or fresh default names
/// (`sweep-<timestamp>-<pid>[-<n>].jsonl` and its `.logs` folder, neither of which exists).
pub(super) fn output_paths(a: &SweepRequest) -> anyhow::Result<(PathBuf, PathBuf)> {
    let results = a.results.clone().or_else(|| a.resume.clone());
    let results = match results {
        Some(r) => r,
        None => {
            let stamp = chrono::Utc::now().format("%Y%m%d-%H%M%S").to_string();
            let pid = std::process::id();
            (0..)
                .map(|n| match n {
                    0 => PathBuf::from(format!("sweep-{stamp}-{pid}.jsonl")),
                    n => PathBuf::from(format!("sweep-{stamp}-{pid}-{n}.jsonl")),
                })
                .find(|p| {
                    !p.exists() && (a.log_dir.is_some() || !p.with_extension("logs").exists())
                })
                .expect("some name is free")
        }
    };
    let log_dir = a
        .log_dir
        .clone()
        .unwrap_or_else(|| results.with_extension("logs"));
    Ok((results, log_dir))
}

/// Every file the sweep reads (the workload's, the profile, the host gaps, the libraries, the
/// --resume file) and writes (the results file, appended to; the exports; the logs folder),
/// checked together before anything else: the results file may be the --resume file, no
/// other output may be an input or another output.
pub(super) fn files(a: &SweepRequest, results_path: &Path, log_dir: &Path) -> Files {
    let results_flag = if a.results.is_some() {
        "--results"
    } else if a.resume.is_some() {
        "--resume"
    } else {
        "the default results file"
    };
    let log_flag = if a.log_dir.is_some() {
        "--log-dir"
    } else {
        "the default logs folder"
    };
    let mut f = Files::new();
    a.workload.add_to(&mut f);
    a.gpu.add_to(&mut f);
    a.model.add_to(&mut f);
    a.host_gaps.add_to(&mut f);
    f.input("--resume", a.resume.as_deref())
        .appended(results_flag, results_path)
        .shared(results_flag, "--resume");
    a.export.add_to(&mut f);
    f.output(
        "--export-table-markdown",
        a.export_table_markdown.as_deref(),
    )
    .output("--export-table-csv", a.export_table_csv.as_deref())
    .output_dir(log_flag, log_dir, &[]);
    f
}

/// The results file checked before any point runs, once the workload is known: an existing
/// one must be a sweep of this workload, and a new one's default logs folder must be new.
pub(super) fn check_results_file(
    a: &SweepRequest,
    log_dir: &Path,
    workload: &RecordedWorkload,
) -> anyhow::Result<()> {
    if a.resume.is_none() {
        if let Some(rp) = &a.results {
            let existing = std::fs::metadata(rp).map(|m| m.len() > 0).unwrap_or(false);
            if existing {
                let refuse = |why: String| {
                    crate::error::usage(format!(
                        "--results '{}' exists and {why}; sweep appends only to its own results file of the same workload: give a new path, or --resume FILE to continue a sweep",
                        rp.display()
                    ))
                };
                let (pts, _) = results::load(rp)
                    .map_err(|e| refuse(format!("is not a sweep results file ({e})")))?;
                if let Some(p) = pts
                    .iter()
                    .find(|p| p.key.schedule_hash != workload.schedule_hash)
                {
                    return Err(refuse(format!(
                        "holds points of another workload ({})",
                        workload_line(&p.workload)
                    )));
                }
            } else if a.log_dir.is_none() && log_dir.exists() {
                crate::usage_bail!(
                    "the default logs folder '{}' of --results '{}' already exists (another sweep's?); give --log-dir DIR or another --results path",
                    log_dir.display(),
                    rp.display()
                );
            }
        }
    }
    Ok(())
}
