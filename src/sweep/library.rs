//! The NCCL library as a sweep dimension: `--nccl-lib A,B` (or `-L NCCL_LIB=A,B`).
//!
//! `NCCL_LIB` is no variable NCCL reads: it names the library file a point's fresh workers
//! load. The first library listed is the baseline's: the points on it set no `NCCL_LIB`, so
//! "(defaults)" stays NCCL's defaults (on that build), and every further library repeats every
//! point with `NCCL_LIB=<that library>`; rounds, noise floor and recommendation then treat the
//! library like any other setting. A point's children get their library through
//! `VERIFYBENCH_NCCL_LIB` (the `--nccl-lib` of every command), started without the markers of a
//! library preparation their parent may have made, so each prepares its own.
//!
//! The proof ([`LibraryProof`]): every worker reports the version `ncclGetVersion` returned and
//! the file it mapped (its own /proc/self/maps, links resolved); the probe's log adds its
//! `NCCL version` line. A point whose workers mapped another file than the one asked (resolved
//! paths compared), or whose log names another version than its workers, is refused: marked
//! failed with the reason.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::usage;
use crate::record::{Record, WorkerNccl};

/// The name of the library dimension.
pub(crate) const NAME: &str = "NCCL_LIB";

/// The variable that tells a child which NCCL to load (`--nccl-lib`'s).
pub(crate) const ENV: &str = "VERIFYBENCH_NCCL_LIB";

/// One library of the sweep.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Library {
    /// As given (`--nccl-lib` or `-L NCCL_LIB=`): the value points carry.
    pub(crate) given: String,
    /// The library file (a folder resolved to its libnccl.so*), links resolved.
    pub(crate) path: PathBuf,
}

/// The libraries of a sweep, in the order given; the first is the baseline's. Empty when the
/// sweep names none (every point then loads what the search finds, unchecked).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Libraries(pub(crate) Vec<Library>);

/// The `-L` lists with `--nccl-lib A,B` put first as `NCCL_LIB=A,B`; both spellings at once
/// are refused (the list is given once).
pub(crate) fn lists(lists: &[String], nccl_lib: Option<&Path>) -> anyhow::Result<Vec<String>> {
    let Some(libs) = nccl_lib else {
        return Ok(lists.to_vec());
    };
    if lists
        .iter()
        .any(|l| l.split_once('=').is_some_and(|(k, _)| k == NAME))
    {
        return Err(usage(format!(
            "--nccl-lib '{}' (or {ENV}) and -L {NAME}=... both name the libraries: give the list once",
            libs.display()
        )));
    }
    let mut out = vec![format!("{NAME}={}", libs.display())];
    out.extend(lists.iter().cloned());
    Ok(out)
}

impl Libraries {
    /// The libraries of the `NCCL_LIB` dimension's `values`, each resolved (a folder to its
    /// libnccl.so*, links followed); a value that names no library is a usage error.
    pub(crate) fn from_values(values: &[String]) -> anyhow::Result<Libraries> {
        let mut out = vec![];
        for given in values {
            let found = crate::comm::libs::nccl_file(Path::new(given))
                .map_err(|m| usage(format!("{NAME} {m}")))?;
            let path = std::fs::canonicalize(&found).unwrap_or(found);
            if let Some(twin) = out.iter().find(|l: &&Library| l.path == path) {
                return Err(usage(format!(
                    "{NAME}: '{given}' and '{}' are the same file ({}): list each library once",
                    twin.given,
                    path.display()
                )));
            }
            out.push(Library {
                given: given.clone(),
                path,
            });
        }
        Ok(Libraries(out))
    }

    /// The library of a point whose `NCCL_LIB` is `asked`: that one, else (none asked) the
    /// first, the baseline's.
    pub(crate) fn of(&self, asked: Option<&str>) -> Option<&Library> {
        match asked {
            Some(v) => self.0.iter().find(|l| l.given == v),
            None => self.0.first(),
        }
    }

    /// The header line naming the libraries, or None when the sweep names none.
    pub(crate) fn header(&self) -> Option<String> {
        let (first, rest) = self.0.split_first()?;
        let mut parts = vec![format!(
            "L1 {} (the baseline's, and every point without {NAME})",
            first.path.display()
        )];
        for (i, l) in rest.iter().enumerate() {
            parts.push(format!(
                "L{} {} ({NAME}={})",
                i + 2,
                l.path.display(),
                l.given
            ));
        }
        Some(format!(
            "# NCCL libraries, each point's workers checked to map theirs: {}",
            parts.join(", ")
        ))
    }

    /// Points the library to a child's environment: `VERIFYBENCH_NCCL_LIB` set, the markers
    /// of the parent's own library preparation removed.
    pub(crate) fn apply(lib: &Library, env: &mut BTreeMap<OsString, OsString>) {
        env.insert(ENV.into(), lib.path.as_os_str().into());
        for v in crate::comm::libs::PREPARED_VARS {
            env.remove(&OsString::from(v));
        }
    }
}

/// Which NCCL a point asked for and what its workers loaded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct LibraryProof {
    /// The library asked, as given.
    pub(crate) asked: String,
    /// The file asked, links resolved: what every worker must have mapped.
    pub(crate) path: String,
    /// The version the file name (or its wheel) tells, if any.
    #[serde(default)]
    pub(crate) name_version: Option<String>,
    /// Each worker's answer: the version `ncclGetVersion` returned and the file it mapped.
    #[serde(default)]
    pub(crate) workers: Vec<WorkerNccl>,
    /// The `NCCL version` line of the probe's log (`2.28.3+cuda13.0`).
    #[serde(default)]
    pub(crate) log_version: Option<String>,
    /// `ok` (every worker mapped the file asked), `refused` (one did not, or the log names
    /// another version) or `unproven` (no worker said: no NCCL loaded, or no record).
    pub(crate) status: String,
    #[serde(default)]
    pub(crate) problems: Vec<String>,
}

impl LibraryProof {
    /// The version the workers reported (the same in all when proven), else the log's.
    pub(crate) fn version(&self) -> Option<String> {
        self.workers
            .iter()
            .find_map(|w| w.version.clone())
            .or_else(|| self.log_version.as_deref().map(|v| numeric(v).to_string()))
    }

    /// What the point ran on, in words: `NCCL 2.28.9 from PATH (every worker: 2 ranks)`.
    pub(crate) fn describe(&self) -> String {
        let v = self
            .version()
            .map(|v| format!("NCCL {v}"))
            .unwrap_or_else(|| "NCCL (version not reported)".into());
        let how = match self.status.as_str() {
            "ok" => format!(
                "mapped by every worker ({} rank{})",
                self.workers.len(),
                if self.workers.len() == 1 { "" } else { "s" }
            ),
            "refused" => format!("REFUSED: {}", self.problems.join("; ")),
            _ => "not proven: no worker said which NCCL it mapped".into(),
        };
        format!("{v} from {}, {how}", self.path)
    }
}

/// `2.28.3` of `2.28.3+cuda13.0`.
fn numeric(v: &str) -> &str {
    v.split('+').next().unwrap_or(v).trim()
}

/// The proof of a point that asked for `lib`: its timed run's record (each worker's NCCL) and
/// the version line of its probe's log.
pub(crate) fn prove(
    lib: &Library,
    record: Option<&Record>,
    log_version: Option<&str>,
) -> LibraryProof {
    let path = lib.path.display().to_string();
    let workers = record
        .map(|r| r.provenance.worker_nccl.clone())
        .unwrap_or_default();
    let mut problems = vec![];
    let mut reported = 0;
    for w in &workers {
        let Some(mapped) = &w.library else {
            continue;
        };
        reported += 1;
        let mapped_real = std::fs::canonicalize(mapped)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| mapped.clone());
        if mapped_real != path {
            problems.push(format!(
                "rank {} (pid {}) mapped {mapped_real} (NCCL {}), not the {path} asked",
                w.rank,
                w.pid,
                w.version.as_deref().unwrap_or("of unknown version")
            ));
        }
    }
    if reported > 0 && reported < workers.len() {
        problems.push(format!(
            "{} of {} workers did not say which NCCL they mapped",
            workers.len() - reported,
            workers.len()
        ));
    }
    if let (Some(log), Some(w)) = (
        log_version,
        workers.iter().find_map(|w| w.version.as_deref()),
    ) {
        if numeric(log) != numeric(w) {
            problems.push(format!(
                "the probe's NCCL log says version {log}, the timed run's workers {w}: the two runs loaded different libraries"
            ));
        }
    }
    LibraryProof {
        asked: lib.given.clone(),
        name_version: crate::inspect::ncclmaps::version_of_file(&lib.path).0,
        workers,
        log_version: log_version.map(str::to_string),
        status: if !problems.is_empty() {
            "refused"
        } else if reported == 0 {
            "unproven"
        } else {
            "ok"
        }
        .into(),
        problems,
        path,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(rank: usize, library: Option<&str>, version: &str) -> WorkerNccl {
        WorkerNccl {
            rank,
            pid: 100 + rank as u32,
            version: Some(version.into()),
            library: library.map(str::to_string),
        }
    }

    fn record(workers: Vec<WorkerNccl>) -> Record {
        let mut p = crate::record::Provenance::here("nccl", crate::util::now_utc());
        p.worker_nccl = workers;
        Record::new(
            crate::record::Source::Measured,
            p,
            crate::record::Body::Other {
                name: "x".into(),
                data: serde_json::Value::Null,
            },
        )
    }

    #[test]
    fn the_list_flag_becomes_the_first_dimension_once() {
        let l = lists(
            &["NCCL_PROTO=LL".into()],
            Some(Path::new("/a/x.so,/b/y.so")),
        )
        .unwrap();
        assert_eq!(l, vec!["NCCL_LIB=/a/x.so,/b/y.so", "NCCL_PROTO=LL"]);
        assert_eq!(lists(&l, None).unwrap(), l);
        let e = lists(&l, Some(Path::new("/c"))).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("give the list once"), "{e}");
    }

    #[test]
    fn libraries_resolve_and_missing_or_twice_named_ones_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let sys = d.path().join("libnccl.so.2.28.3");
        std::fs::write(&sys, crate::comm::elf::fake_nccl()).unwrap();
        std::os::unix::fs::symlink(&sys, d.path().join("libnccl.so.2")).unwrap();
        let dim =
            |v: &[&Path]| -> Vec<String> { v.iter().map(|p| p.display().to_string()).collect() };
        // the folder resolves to its libnccl.so.2, which links to the versioned file
        let libs = Libraries::from_values(&dim(&[d.path()])).unwrap();
        assert_eq!(libs.0[0].path, std::fs::canonicalize(&sys).unwrap());
        assert_eq!(libs.of(None), libs.0.first());
        assert_eq!(libs.of(Some("elsewhere")), None);
        let e = Libraries::from_values(&dim(&[&d.path().join("nope.so")])).unwrap_err();
        assert!(e.to_string().contains("no such file or folder"), "{e}");
        let e = Libraries::from_values(&dim(&[d.path(), &sys])).unwrap_err();
        assert!(e.to_string().contains("are the same file"), "{e}");
        assert_eq!(Libraries::from_values(&[]).unwrap(), Libraries::default());
    }

    #[test]
    fn a_worker_that_mapped_another_file_refuses_the_point() {
        let d = tempfile::tempdir().unwrap();
        let asked = d.path().join("libnccl.so.2.28.3");
        let other = d.path().join("libnccl.so.2.28.9");
        std::fs::write(&asked, b"x").unwrap();
        std::fs::write(&other, b"x").unwrap();
        let asked = std::fs::canonicalize(asked).unwrap();
        let lib = Library {
            given: "A".into(),
            path: asked.clone(),
        };
        let a = asked.display().to_string();
        let o = std::fs::canonicalize(other).unwrap().display().to_string();
        let good = prove(
            &lib,
            Some(&record(vec![
                worker(0, Some(&a), "2.28.3"),
                worker(1, Some(&a), "2.28.3"),
            ])),
            Some("2.28.3+cuda13.0"),
        );
        assert_eq!((good.status.as_str(), good.problems.len()), ("ok", 0));
        assert_eq!(good.version().as_deref(), Some("2.28.3"));
        assert_eq!(good.name_version.as_deref(), Some("2.28.3"));
        let bad = prove(
            &lib,
            Some(&record(vec![
                worker(0, Some(&a), "2.28.3"),
                worker(1, Some(&o), "2.28.9"),
            ])),
            None,
        );
        assert_eq!(bad.status, "refused");
        assert_eq!(
            bad.problems,
            vec![format!(
                "rank 1 (pid 101) mapped {o} (NCCL 2.28.9), not the {a} asked"
            )]
        );
        // the probe's log names another version than the timed run's workers
        let log = prove(
            &lib,
            Some(&record(vec![worker(0, Some(&a), "2.28.3")])),
            Some("2.28.9+cuda13.0"),
        );
        assert_eq!(log.status, "refused");
        assert!(log.problems[0].contains("loaded different libraries"));
        // nobody said
        let none = prove(&lib, None, None);
        assert_eq!(none.status, "unproven");
        assert!(none.describe().contains("not proven"));
    }
}
