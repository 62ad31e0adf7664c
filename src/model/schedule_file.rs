//! Schedule files: a [`Schedule`] as JSON (exactly what `verifybench plan --format json`
//! prints), optionally with the host gap a server spent before each op, and where it came from.
//!
//! `trace --export-schedule` writes them from a profiler trace, so the exact collective
//! sequence a real server ran can be replayed (`--schedule FILE`) and its host gaps reused
//! (`--host-gap-from FILE`). A plain `plan --format json` output is a valid schedule file
//! (the two extra fields are optional).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::schedule::{Op, Schedule};
use crate::error::usage;

/// A schedule with what a trace adds to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleFile {
    #[serde(flatten)]
    pub schedule: Schedule,
    /// Host time before each op (us), aligned with `schedule.ops`, as a trace measured it
    /// (median over its steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_gaps_us: Option<Vec<f64>>,
    /// Where the schedule came from (e.g. `trace of rank-0.json.gz, 12 steps`).
    #[serde(default)]
    pub origin: Option<String>,
}

impl ScheduleFile {
    /// Checks what serde cannot: gaps aligned with ops, finite and non-negative; collectives
    /// whose bytes agree with their count.
    pub fn validate(&self) -> Result<(), String> {
        if self.schedule.ops.is_empty() {
            return Err("it has no ops".into());
        }
        if let Some(g) = &self.host_gaps_us {
            if g.len() != self.schedule.ops.len() {
                return Err(format!(
                    "host_gaps_us has {} entries for {} ops (one per op)",
                    g.len(),
                    self.schedule.ops.len()
                ));
            }
            if let Some((i, x)) = g
                .iter()
                .enumerate()
                .find(|(_, x)| !x.is_finite() || **x < 0.0)
            {
                return Err(format!("host_gaps_us[{i}] is {x} (gaps are >= 0 us)"));
            }
        }
        for (i, op) in self.schedule.ops.iter().enumerate() {
            if let Op::Collective {
                dtype,
                count,
                bytes_per_rank,
                ..
            } = op
            {
                if count * dtype.size() != *bytes_per_rank {
                    return Err(format!(
                        "op {i}: bytes_per_rank {bytes_per_rank} is not count {count} x {} B",
                        dtype.size()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Reads a schedule file; every problem is a usage error (exit 2) naming the file.
    pub fn load(path: &Path) -> anyhow::Result<ScheduleFile> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            usage(format!(
                "schedule file '{}': cannot read: {e}",
                path.display()
            ))
        })?;
        let f: ScheduleFile = serde_json::from_str(&text).map_err(|e| {
            usage(format!(
                "schedule file '{}' is {}; give the JSON of `plan --format json` or `trace --export-schedule`",
                path.display(),
                crate::util::json_problem(&e)
            ))
        })?;
        f.validate()
            .map_err(|m| usage(format!("schedule file '{}': {m}", path.display())))?;
        Ok(f)
    }

    /// Writes the file (temp-and-rename).
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self).expect("schedules serialize") + "\n";
        crate::util::write_file(path, text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{build, presets::preset, Phase, ScheduleOptions};

    fn kimi() -> Schedule {
        let opt = ScheduleOptions {
            tp: 2,
            ..Default::default()
        };
        build(&preset("kimi-k2.5").unwrap(), &opt, Phase::Verify).unwrap()
    }

    #[test]
    fn plan_json_is_a_schedule_file_and_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("plan.json");
        std::fs::write(&p, serde_json::to_string_pretty(&kimi()).unwrap()).unwrap();
        let f = ScheduleFile::load(&p).unwrap();
        assert_eq!(f.schedule, kimi());
        assert_eq!((f.host_gaps_us.clone(), f.origin.clone()), (None, None));
        let n = f.schedule.ops.len();
        let with = ScheduleFile {
            host_gaps_us: Some(vec![12.5; n]),
            origin: Some("trace of x".into()),
            ..f
        };
        let q = dir.path().join("s.json");
        with.save(&q).unwrap();
        assert_eq!(ScheduleFile::load(&q).unwrap(), with);
    }

    #[test]
    fn bad_files_are_usage_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.json");
        for (text, needle) in [
            (
                "{\"ops\": 3}",
                "is not the expected JSON: invalid type: integer `3`, expected an array",
            ),
            ("not json", "is not JSON"),
            ("{\"model\": ", "is truncated"),
        ] {
            std::fs::write(&p, text).unwrap();
            let e = ScheduleFile::load(&p).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2);
            assert!(
                e.to_string().contains("bad.json") && e.to_string().contains(needle),
                "{e}"
            );
        }
        let f = ScheduleFile {
            schedule: kimi(),
            host_gaps_us: Some(vec![1.0; 3]),
            origin: None,
        };
        f.save(&p).unwrap();
        let e = ScheduleFile::load(&p).unwrap_err();
        assert!(e.to_string().contains("host_gaps_us has 3 entries"), "{e}");
        let e = ScheduleFile::load(&dir.path().join("missing.json")).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
    }
}
