//! The sweep's results file: one JSON record per finished point, appended at once (write,
//! flush, fsync), so an interrupted or crashed sweep loses nothing finished; `--resume` reads
//! it back and skips what is there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::env::EnvCheck;
use super::ncclog::{Choice, NcclLog};
use crate::error::usage;
use crate::record::{Body, Record, RecordedWorkload};

/// The record kind of a sweep point (`Body::Other { name }`).
pub(crate) const KIND: &str = "sweep_point";

/// What makes two points the same measurement: resume skips a point whose key is in the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PointKey {
    /// Overrides sorted by name.
    pub(crate) overrides: Vec<(String, String)>,
    /// `on`, `off` or `both`.
    pub(crate) graph: String,
    pub(crate) launcher: String,
    pub(crate) backend: String,
    pub(crate) mode: String,
    /// Hash of the verify schedule (model, tp, tokens, dtype, every op).
    pub(crate) schedule_hash: String,
    /// The NCCL_* variables every point inherits from the parent (NCCL_DEBUG* excluded).
    pub(crate) base_nccl_env: BTreeMap<String, String>,
    /// The NCCL library file the point asked for (links resolved); absent when the sweep named
    /// none (and in files before libraries were swept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) nccl_lib: Option<String>,
}

/// NCCL's choices and transports at a point, and where they differ from the request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Effective {
    pub(crate) nccl_version: Option<String>,
    /// The verify step's all-reduce (most frequent size).
    pub(crate) all_reduce: Option<Choice>,
    /// The logits all-gather.
    pub(crate) all_gather: Option<Choice>,
    /// Transport kinds, most used first (`P2P/CUMEM`, `SHM/direct/direct`, `NET/Socket`).
    pub(crate) transports: Vec<String>,
    /// Requested vs effective: one line per thing NCCL did not do as asked.
    #[serde(default)]
    pub(crate) mismatches: Vec<String>,
    /// Everything parsed from the log.
    pub(crate) log: NcclLog,
    /// At one rank (a communicator of size 1), what the probe's log proves there: NCCL picks
    /// no algorithm, protocol or transport at one rank, so only that NCCL ran, which version,
    /// and which variables it read.
    #[serde(default)]
    pub(crate) one_rank: Option<String>,
}

impl Effective {
    /// `RING/LL` of the all-reduce (plus the all-gather when it differs), or `?`.
    pub(crate) fn algo_proto(&self) -> String {
        if self.one_rank.is_some() && self.all_reduce.is_none() && self.all_gather.is_none() {
            return "none (1 rank)".into();
        }
        let f = |c: &Choice| format!("{}/{}", c.algo, c.proto);
        match (&self.all_reduce, &self.all_gather) {
            (Some(a), Some(g)) if f(a) != f(g) => format!("AR {} AG {}", f(a), f(g)),
            (Some(a), _) => f(a),
            (None, Some(g)) => format!("AG {}", f(g)),
            (None, None) => "?".into(),
        }
    }

    pub(crate) fn transport(&self) -> String {
        if self.one_rank.is_some() && self.transports.is_empty() {
            return "no transport (1 rank)".into();
        }
        if self.transports.is_empty() {
            "?".into()
        } else {
            self.transports.join("+")
        }
    }
}

/// One finished point, as stored in the results file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SweepPoint {
    pub(crate) point_id: String,
    /// The round (0-based) of `sweep --rounds`; files written before rounds existed hold one
    /// round, read as round 0.
    #[serde(default)]
    pub(crate) round: usize,
    /// The `--seed` of the rounds' shuffled orders (absent in files before rounds existed).
    #[serde(default)]
    pub(crate) seed: Option<u64>,
    /// (name, value) as requested, in dimension order; empty for the baseline.
    pub(crate) overrides: Vec<(String, String)>,
    pub(crate) key: PointKey,
    /// The workload, for messages (resume refusals) and tables.
    pub(crate) workload: RecordedWorkload,
    /// `ok` or `failed`.
    pub(crate) status: String,
    #[serde(default)]
    pub(crate) reason: Option<String>,
    /// What to try instead (e.g. NCCL's per-function NCCL_ALGO form).
    #[serde(default)]
    pub(crate) hint: Option<String>,
    #[serde(default)]
    pub(crate) stderr_tail: Option<String>,
    /// Distinct `NCCL WARN` lines of the probe log.
    #[serde(default)]
    pub(crate) nccl_warnings: Vec<String>,
    /// The probe's NCCL log files.
    #[serde(default)]
    pub(crate) log_paths: Vec<PathBuf>,
    /// The NCCL library asked and what the workers loaded; absent when the sweep named none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) library: Option<super::library::LibraryProof>,
    /// Overrides NCCL does not know (misspelt?).
    #[serde(default)]
    pub(crate) unknown_vars: Vec<String>,
    /// Parsed from the probe log; None without a probe.
    #[serde(default)]
    pub(crate) effective: Option<Effective>,
    pub(crate) env_check: EnvCheck,
    pub(crate) probe_wall_s: f64,
    pub(crate) timed_wall_s: f64,
    /// The timed run's verify record (present for points that ran, even with wrong results).
    #[serde(default)]
    pub(crate) verify: Option<Record>,
}

impl SweepPoint {
    pub(crate) fn ok(&self) -> bool {
        self.status == "ok"
    }
}

pub(crate) use crate::record::io::JsonLinesFile as ResultsFile;

/// Reads the sweep points of a results file. A torn line (a crash mid-write) is skipped with a
/// warning; a record that is not a sweep point is an error naming the file and line.
pub(crate) fn load(path: &Path) -> anyhow::Result<(Vec<SweepPoint>, Vec<String>)> {
    // A whole-file JSON export (one record or an array: `--export-json`, a profile) is not
    // the JSON lines of a sweep; say what it is instead of where its lines fail to parse.
    let bytes = crate::util::read::read(path, "resume file", crate::util::read::RESULTS);
    if let Some(text) = bytes.ok().and_then(|b| String::from_utf8(b).ok()) {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
            let what = crate::record::io::foreign(&v)
                .map(String::from)
                .or_else(|| {
                    (text.trim_end().lines().count() > 1 || v.is_array())
                        .then(|| crate::record::io::describe(&v))
                });
            if let Some(what) = what {
                return Err(usage(format!(
                    "'{}' is {what}, not a sweep's results file (JSON lines of sweep points written by `verifybench sweep --results`)",
                    path.display()
                )));
            }
        }
    }
    let mut points = vec![];
    let warnings = crate::record::io::read_record_lines(path, "resume file", |i, rec| {
        match rec.body {
            Body::Other { name, data } if name == KIND => {
                points.push(serde_json::from_value(data).map_err(|e| {
                    usage(format!(
                        "'{}' line {}: malformed sweep point: {e}",
                        path.display(),
                        i + 1
                    ))
                })?)
            }
            other => {
                return Err(usage(format!(
                    "'{}' line {} is a '{}' record, not a sweep point: --resume takes the results file of a sweep",
                    path.display(),
                    i + 1,
                    other.kind()
                )))
            }
        }
        Ok(())
    })?;
    Ok((points, warnings))
}

/// Refuses to resume from points of another workload.
pub(crate) fn check_same_workload(
    path: &Path,
    done: &[SweepPoint],
    current: &RecordedWorkload,
) -> anyhow::Result<()> {
    if let Some(p) = done
        .iter()
        .find(|p| p.key.schedule_hash != current.schedule_hash)
    {
        let w = &p.workload;
        return Err(usage(format!(
            "refusing to resume from '{}': it holds points of another workload ({} {} tp {} tokens {} {}, schedule {}) than this sweep ({} {} tp {} tokens {} {}, schedule {}); give the same workload flags, or a new --results file",
            path.display(),
            w.model, w.phase.name(), w.tp, w.tokens, w.dtype.name(), w.schedule_hash,
            current.model, current.phase.name(), current.tp, current.tokens, current.dtype.name(), current.schedule_hash
        )));
    }
    Ok(())
}
