//! Schedule files: a [`Schedule`] as JSON (exactly what `verifybench plan --format json`
//! prints), optionally with the host gap a server spent before each op, and where it came from.
//!
//! `trace --export-schedule` writes them from a profiler trace, so the exact collective
//! sequence a real server ran can be replayed (`--schedule FILE`) and its host gaps reused
//! (`--host-gap-from FILE`). A plain `plan --format json` output is a valid schedule file
//! (the two extra fields are optional).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::schedule::{Op, Schedule, MAX_RANKS, MAX_TOKENS};
use crate::error::usage;

/// The most bytes one op of a schedule file may move or stream per rank: 1 TiB. `plan` writes
/// at most 40 GiB (the logits all-gather of 65,536 tokens in f32 on one rank of Kimi-K2.5, whose
/// vocabulary is 163,840), and the largest compute op of a preset at one rank is the routed
/// experts of DeepSeek-V3 at 65,536 tokens, 10.5 GiB.
pub(crate) const MAX_OP_BYTES: u64 = 1 << 40;

/// The longest host gap before an op: an hour (a server's are microseconds to milliseconds).
const MAX_GAP_US: f64 = 3.6e9;

/// The most distinct routed experts per MoE layer: the most experts a config may have
/// (`model::arch::bound`).
const MAX_EXPERTS: f64 = 65_536.0;

/// A schedule with what a trace adds to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleFile {
    #[serde(flatten)]
    pub schedule: Schedule,
    /// Host time before each op (us), aligned with `schedule.ops`, as a trace measured it
    /// (median over its steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_gaps_us: Option<Vec<f64>>,
    /// Each rank's own host time before each op (us), indexed by rank, each aligned with
    /// `schedule.ops` (median over that rank's steps): written when the trace holds every rank
    /// of the group, so that a replay gives each rank its own gaps and the server's skew (and
    /// the waiting it causes) comes back. Files without it stay valid: every rank then replays
    /// `host_gaps_us`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_gaps_per_rank_us: Option<Vec<Vec<f64>>>,
    /// Where the schedule came from (e.g. `trace of rank-0.json.gz, 12 steps`).
    #[serde(default)]
    pub origin: Option<String>,
}

impl ScheduleFile {
    /// Checks what serde cannot: the tp, tokens and experts within what a run accepts; gaps
    /// aligned with ops, finite, non-negative and at most an hour; every op at most
    /// [`MAX_OP_BYTES`] per rank; collectives whose bytes agree with their count.
    pub(crate) fn validate(&self) -> Result<(), String> {
        let s = &self.schedule;
        if s.ops.is_empty() {
            return Err("it has no ops".into());
        }
        if !(1..=MAX_RANKS as u64).contains(&s.tp) {
            return Err(format!(
                "tp is {}: a schedule is for 1 to {MAX_RANKS} ranks",
                s.tp
            ));
        }
        // 0: not known (`trace --export-schedule` without `--against-plan`)
        if s.tokens > MAX_TOKENS {
            return Err(format!(
                "tokens is {}: a forward has at most {MAX_TOKENS} tokens (0 where not known)",
                s.tokens
            ));
        }
        if !(0.0..=MAX_EXPERTS).contains(&s.experts_per_layer) {
            return Err(format!(
                "experts_per_layer is {}: 0 (dense) to {MAX_EXPERTS} routed experts per layer",
                s.experts_per_layer
            ));
        }
        let n = self.schedule.ops.len();
        let per_rank = self.host_gaps_per_rank_us.iter().flatten().enumerate();
        let lists = self
            .host_gaps_us
            .iter()
            .map(|g| ("host_gaps_us".to_string(), g))
            .chain(per_rank.map(|(r, g)| (format!("host_gaps_per_rank_us[{r}]"), g)));
        for (name, g) in lists {
            if g.len() != n {
                return Err(format!(
                    "{name} has {} entries for {n} ops (one per op)",
                    g.len()
                ));
            }
            if let Some((i, x)) = g
                .iter()
                .enumerate()
                .find(|(_, x)| !(0.0..=MAX_GAP_US).contains(*x))
            {
                return Err(format!(
                    "{name}[{i}] is {x} (gaps are 0 to {MAX_GAP_US:e} us, an hour)"
                ));
            }
        }
        if self
            .host_gaps_per_rank_us
            .as_ref()
            .is_some_and(|v| v.is_empty())
        {
            return Err(
                "host_gaps_per_rank_us is empty (one list per rank, or leave it out)".into(),
            );
        }
        let tokens = self.schedule.tokens;
        for (i, op) in self.schedule.ops.iter().enumerate() {
            if let Op::Compute {
                weight_bytes,
                token_histogram: Some(h),
                ..
            } = op
            {
                if h.units().checked_mul(h.unit_bytes) != Some(*weight_bytes) {
                    return Err(format!(
                        "op {i}: weight_bytes {weight_bytes} is not the token histogram's {} units x unit_bytes {}",
                        h.units(),
                        h.unit_bytes
                    ));
                }
                let bad = h.rows.iter().enumerate().find(|(k, r)| {
                    r.units == 0
                        || r.tokens == 0
                        || r.tokens > tokens
                        || (*k > 0 && h.rows[k - 1].tokens >= r.tokens)
                });
                if let Some((_, r)) = bad {
                    return Err(format!(
                        "op {i}: token histogram row {{tokens: {}, units: {}}}: rows need 1..={tokens} tokens in increasing order, each with units",
                        r.tokens, r.units
                    ));
                }
            }
            let (key, bytes) = match op {
                Op::Collective { bytes_per_rank, .. } => ("bytes_per_rank", *bytes_per_rank),
                Op::Compute { weight_bytes, .. } => ("weight_bytes", *weight_bytes),
            };
            if bytes > MAX_OP_BYTES {
                return Err(format!(
                    "op {i}: {key} {bytes} is more than one op of a real model moves per rank (at most {MAX_OP_BYTES}, 1 TiB; `plan` writes at most 40 GiB)"
                ));
            }
            if let Op::Collective {
                dtype,
                count,
                bytes_per_rank,
                ..
            } = op
            {
                if count.checked_mul(dtype.size()) != Some(*bytes_per_rank) {
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
        Self::load_checking_length(path, &|_| Ok(()))
    }

    /// [`ScheduleFile::load`] that first gives the number of operations to `check_length`
    /// (counted without building them, [`count_ops`]) and returns its refusal before the
    /// parse: a schedule too long for the run fails at once, not after reading every op.
    pub(crate) fn load_checking_length(
        path: &Path,
        check_length: &dyn Fn(usize) -> anyhow::Result<()>,
    ) -> anyhow::Result<ScheduleFile> {
        let text = crate::util::read_text(
            path,
            "schedule file",
            "a schedule (`verifybench plan --format json`, `trace --export-schedule`)",
            crate::util::read::SCHEDULE,
        )?;
        if let Some(n) = count_ops(text.as_bytes()) {
            check_length(n)?;
        }
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
    pub(crate) fn save(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self).expect("schedules serialize") + "\n";
        crate::util::write_file(path, text.as_bytes())
    }
}

/// The number of elements of the top-level `"ops"` array of a JSON object, from serde_json
/// skipping every value (`IgnoredAny`: nothing is built): `None` unless the text is one object
/// with exactly one `"ops"` key whose value is an array (the parse then says what is wrong).
fn count_ops(b: &[u8]) -> Option<usize> {
    #[derive(serde::Deserialize)]
    struct Ops {
        ops: Vec<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<Ops>(b).ok().map(|o| o.ops.len())
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
            host_gaps_per_rank_us: Some(vec![vec![12.5; n], vec![40.0; n]]),
            origin: Some("trace of x".into()),
            ..f
        };
        let q = dir.path().join("s.json");
        with.save(&q).unwrap();
        assert_eq!(ScheduleFile::load(&q).unwrap(), with);
    }

    /// The early count is the parse's on real files (a plan, one with host gaps, pretty and
    /// compact) and on hand-written texts whose strings hold what would mislead a text scan:
    /// brackets, commas, escaped quotes, a key "ops" inside an op.
    #[test]
    fn the_scanned_op_count_is_the_parsed_one() {
        let s = kimi();
        let n = s.ops.len();
        let with = ScheduleFile {
            host_gaps_us: Some(vec![1.5; n]),
            host_gaps_per_rank_us: Some(vec![vec![2.0; n]; 2]),
            origin: Some("a \"quoted\" [origin], with {brackets}".into()),
            schedule: s.clone(),
        };
        for text in [
            serde_json::to_string_pretty(&s).unwrap(),
            serde_json::to_string(&with).unwrap(),
            serde_json::to_string_pretty(&with).unwrap(),
        ] {
            assert_eq!(count_ops(text.as_bytes()), Some(n));
        }
        for (text, want) in [
            (r#"{"ops": []}"#, Some(0)),
            (r#" {"ops": [ ] } "#, Some(0)),
            (
                r#"{"a": "ops", "ops": [{"x": "],\"[,"}, [1, 2], 3]}"#,
                Some(3),
            ),
            (r#"{"ops": [{"ops": [1, 2, 3]}], "b": [1, 2]}"#, Some(1)),
            (r#"{"x": {"ops": [1, 2]}, "ops": [1]}"#, Some(1)),
            // not one object with one "ops" array: left to the parse
            (r#"{"ops": 3, "b": [1, 2]}"#, None),
            (r#"{"ops": "x"}"#, None),
            (r#"{"ops": [1], "ops": [2]}"#, None),
            (r#"{"ops": [1, 2]"#, None),
            (r#"{"ops": [1, 2]} x"#, None),
            (r#"{"ops": ["a\"]}"#, None),
            (r#"[1, 2]"#, None),
            ("", None),
        ] {
            assert_eq!(count_ops(text.as_bytes()), want, "{text}");
        }
    }

    /// A length check refuses before the parse (a file whose ops do not parse is refused by
    /// its length), and a file within the check loads as with `load`.
    #[test]
    fn a_length_check_refuses_before_the_parse() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.json");
        std::fs::write(&p, r#"{"ops": [1, 2, 3]}"#).unwrap();
        let at_most_2 = |n: usize| {
            if n > 2 {
                anyhow::bail!("{n} ops")
            }
            Ok(())
        };
        let e = ScheduleFile::load_checking_length(&p, &at_most_2).unwrap_err();
        assert_eq!(e.to_string(), "3 ops");
        let q = dir.path().join("plan.json");
        std::fs::write(&q, serde_json::to_string_pretty(&kimi()).unwrap()).unwrap();
        let n = kimi().ops.len();
        let f = ScheduleFile::load_checking_length(&q, &|m| {
            assert_eq!(m, n);
            Ok(())
        })
        .unwrap();
        assert_eq!(f, ScheduleFile::load(&q).unwrap());
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
            host_gaps_per_rank_us: None,
            origin: None,
        };
        f.save(&p).unwrap();
        let e = ScheduleFile::load(&p).unwrap_err();
        assert!(e.to_string().contains("host_gaps_us has 3 entries"), "{e}");
        // Per-rank lists are checked one by one, naming the rank.
        let n = f.schedule.ops.len();
        let mut bad = vec![vec![1.0; n], vec![1.0; n]];
        bad[1][7] = -2.0;
        for (per_rank, needle) in [
            (bad, "host_gaps_per_rank_us[1][7] is -2"),
            (
                vec![vec![1.0; n], vec![1.0; 2]],
                "host_gaps_per_rank_us[1] has 2 entries",
            ),
            (vec![], "host_gaps_per_rank_us is empty"),
        ] {
            let g = ScheduleFile {
                host_gaps_us: Some(vec![1.0; n]),
                host_gaps_per_rank_us: Some(per_rank),
                ..f.clone()
            };
            g.save(&p).unwrap();
            let e = ScheduleFile::load(&p).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2);
            assert!(e.to_string().contains(needle), "{e}");
        }
        let e = ScheduleFile::load(&dir.path().join("missing.json")).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
    }
}
