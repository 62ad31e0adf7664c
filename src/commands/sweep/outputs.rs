//! Where a sweep writes (the results file and the logs folder, from the flags or fresh default
//! names) and the check of every output before any point runs.

use std::path::PathBuf;

use super::request::SweepRequest;
use crate::record::RecordedWorkload;
use crate::report::text::workload_line;
use crate::sweep::results;

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

/// Every output of the sweep checked before any point runs: the results file (an existing one
/// must be a sweep of this workload), the logs folder, the exports.
pub(super) fn check_outputs(
    a: &SweepRequest,
    results_path: &std::path::Path,
    log_dir: &std::path::Path,
    workload: &RecordedWorkload,
) -> anyhow::Result<()> {
    let results_flag = if a.results.is_some() {
        "--results"
    } else if a.resume.is_some() {
        "--resume"
    } else {
        "the default results file"
    };
    let mut outputs = vec![(results_flag, results_path)];
    outputs.extend(a.export.outputs());
    if let Some(p) = &a.export_table_markdown {
        outputs.push(("--export-table-markdown", p));
    }
    if let Some(p) = &a.export_table_csv {
        outputs.push(("--export-table-csv", p));
    }
    crate::util::check_outputs(&outputs, &[])?;
    let log_flag = if a.log_dir.is_some() {
        "--log-dir"
    } else {
        "the default logs folder"
    };
    crate::util::check_output_dir(log_flag, log_dir)?;
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
