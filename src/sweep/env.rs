//! Worker environments, built explicitly, and the check that workers saw them.
//!
//! Many NCCL variables are read once per process, so every point runs in fresh processes
//! whose environment is the parent's plus the point's overrides, set one by one after
//! clearing (never a half-inherited environment). NVLink multicast stays off: the parent's
//! NCCL_NVLS_ENABLE passes through, and when it is absent the workers get NCCL_NVLS_ENABLE=0.
//! The timed run gets no NCCL_DEBUG* at all (logging must not distort the timing); only the
//! probe run logs.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::matrix::Point;
use super::ncclog::NcclLog;
use crate::record::WorkerInfo;

/// A complete process environment.
pub(crate) type Env = BTreeMap<OsString, OsString>;

/// Variables the sweep controls itself.
pub(crate) const DEBUG_VARS: [&str; 3] = ["NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"];

/// The subsystems whose lines prove what NCCL did (TUNING carries the per-collective choice).
pub(crate) const PROBE_SUBSYS: &str = "INIT,ENV,GRAPH,TUNING";

/// This process's environment.
pub(crate) fn parent_env() -> Env {
    std::env::vars_os().collect()
}

/// The environment of a point's timed run: `parent` + NCCL_NVLS_ENABLE=0 when absent + the
/// point's overrides, without NCCL_DEBUG*.
pub(crate) fn timed_env(parent: &Env, point: &Point) -> Env {
    let mut env = parent.clone();
    for v in DEBUG_VARS {
        env.remove(&OsString::from(v));
    }
    env.entry("NCCL_NVLS_ENABLE".into())
        .or_insert_with(|| "0".into());
    // NCCL_LIB is no variable: the library reaches the child through its own variable
    // (see [`super::library`]).
    for (k, v) in point
        .overrides
        .iter()
        .filter(|(k, _)| k != super::library::NAME)
    {
        env.insert(k.into(), v.into());
    }
    env
}

/// The probe run's environment: the timed one plus NCCL's INFO log into files named by
/// `log_pattern` (NCCL expands `%h` to the host and `%p` to the process id).
pub(crate) fn probe_env(timed: &Env, log_pattern: &Path) -> Env {
    let mut env = timed.clone();
    env.insert("NCCL_DEBUG".into(), "INFO".into());
    env.insert("NCCL_DEBUG_SUBSYS".into(), PROBE_SUBSYS.into());
    env.insert("NCCL_DEBUG_FILE".into(), log_pattern.as_os_str().into());
    env
}

/// The NCCL_* part of an environment (what a worker is expected to report).
pub(crate) fn nccl_part(env: &Env) -> BTreeMap<String, String> {
    env.iter()
        .filter_map(|(k, v)| {
            let k = k.to_str()?;
            k.starts_with("NCCL_")
                .then(|| (k.to_string(), v.to_string_lossy().into_owned()))
        })
        .collect()
}

/// Did the workers get what was asked?
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct EnvCheck {
    /// `ok` (every worker reported every requested value), `mismatch`, or `unknown` (no
    /// worker reported its environment, e.g. the cost model).
    pub(crate) status: String,
    /// Workers that reported their environment.
    pub(crate) workers: usize,
    /// One line per problem: `rank 1 saw NCCL_PROTO=<unset>, asked LL128`.
    #[serde(default)]
    pub(crate) problems: Vec<String>,
    /// Overridden variables NCCL itself reported as "set by environment" in the probe log.
    #[serde(default)]
    pub(crate) nccl_confirmed: Vec<String>,
}

impl EnvCheck {
    /// Short form for a table cell.
    pub(crate) fn cell(&self) -> String {
        match self.status.as_str() {
            "ok" => format!("ok ({}w)", self.workers),
            "mismatch" => format!("MISMATCH ({})", self.problems.len()),
            _ => "n/a".into(),
        }
    }
}

/// Compares the NCCL_* variables we gave (`requested`) with what each worker reported, and
/// the point's overrides with what NCCL's log says it read.
pub(crate) fn check(
    requested: &BTreeMap<String, String>,
    overrides: &[(String, String)],
    workers: &[WorkerInfo],
    log: Option<&NcclLog>,
) -> EnvCheck {
    let mut c = EnvCheck {
        workers: workers.len(),
        ..EnvCheck::default()
    };
    for w in workers {
        for (k, want) in requested {
            let seen = w.nccl_env.get(k);
            if seen != Some(want) {
                let seen = seen.map_or("<unset>", String::as_str);
                c.problems.push(format!(
                    "rank {} (pid {}) saw {k}={seen}, asked {want}",
                    w.rank, w.pid
                ));
            }
        }
    }
    if let Some(log) = log {
        for (k, want) in overrides {
            match log.env_set.get(k) {
                Some(seen) if seen == want => c.nccl_confirmed.push(k.clone()),
                Some(seen) => c
                    .problems
                    .push(format!("NCCL's log says {k} set to {seen}, asked {want}")),
                None => {}
            }
        }
    }
    c.status = if !c.problems.is_empty() {
        "mismatch"
    } else if workers.is_empty() {
        "unknown"
    } else {
        "ok"
    }
    .into();
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(o: &[(&str, &str)]) -> Point {
        Point {
            id: "p01-x".into(),
            overrides: o
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
        }
    }

    fn env(kv: &[(&str, &str)]) -> Env {
        kv.iter().map(|(a, b)| (a.into(), b.into())).collect()
    }

    #[test]
    fn timed_env_is_parent_plus_point_without_debug_and_with_nvls_off() {
        let parent = env(&[
            ("PATH", "/bin"),
            ("NCCL_DEBUG", "INFO"),
            ("NCCL_PROTO", "Simple"),
        ]);
        let e = timed_env(&parent, &point(&[("NCCL_PROTO", "LL128")]));
        assert_eq!(e.get(&OsString::from("PATH")).unwrap(), "/bin");
        assert_eq!(e.get(&OsString::from("NCCL_PROTO")).unwrap(), "LL128");
        assert_eq!(e.get(&OsString::from("NCCL_NVLS_ENABLE")).unwrap(), "0");
        assert!(!e.contains_key(&OsString::from("NCCL_DEBUG")));
        let p = probe_env(&e, Path::new("logs/p01.%h.%p.log"));
        assert_eq!(p.get(&OsString::from("NCCL_DEBUG")).unwrap(), "INFO");
        assert_eq!(
            p.get(&OsString::from("NCCL_DEBUG_SUBSYS")).unwrap(),
            "INIT,ENV,GRAPH,TUNING"
        );
        assert_eq!(
            p.get(&OsString::from("NCCL_DEBUG_FILE")).unwrap(),
            "logs/p01.%h.%p.log"
        );
    }

    #[test]
    fn parent_nvls_setting_is_kept() {
        let e = timed_env(&env(&[("NCCL_NVLS_ENABLE", "0")]), &point(&[]));
        assert_eq!(nccl_part(&e).get("NCCL_NVLS_ENABLE").unwrap(), "0");
    }

    #[test]
    fn worker_that_missed_a_variable_is_flagged() {
        let req: BTreeMap<String, String> = [("NCCL_PROTO".to_string(), "LL128".to_string())]
            .into_iter()
            .collect();
        let good = WorkerInfo {
            rank: 0,
            pid: 10,
            device: 0,
            nccl_env: req.clone(),
        };
        let bad = WorkerInfo {
            rank: 1,
            pid: 11,
            device: 1,
            nccl_env: BTreeMap::new(),
        };
        let o = vec![("NCCL_PROTO".to_string(), "LL128".to_string())];
        let c = check(&req, &o, std::slice::from_ref(&good), None);
        assert_eq!((c.status.as_str(), c.cell()), ("ok", "ok (1w)".to_string()));
        let c = check(&req, &o, &[good, bad], None);
        assert_eq!(c.status, "mismatch");
        assert!(c.problems[0].contains("rank 1 (pid 11) saw NCCL_PROTO=<unset>"));
        assert_eq!(check(&req, &o, &[], None).status, "unknown");
    }

    #[test]
    fn nccl_log_confirms_or_contradicts() {
        let req = BTreeMap::new();
        let log = NcclLog::parse("x NCCL INFO NCCL_PROTO set by environment to LL128\n");
        let o = vec![("NCCL_PROTO".to_string(), "LL128".to_string())];
        let c = check(&req, &o, &[], Some(&log));
        assert_eq!(c.nccl_confirmed, vec!["NCCL_PROTO"]);
        let o = vec![("NCCL_PROTO".to_string(), "LL".to_string())];
        assert_eq!(check(&req, &o, &[], Some(&log)).status, "mismatch");
    }
}
