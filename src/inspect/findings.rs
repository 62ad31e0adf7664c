//! What the tree shows, stated plainly: settings that did not reach a worker, workers that
//! disagree, names NCCL does not read, and the `--expect` gate.
//!
//! Everything here is pure: it takes a walked [`Tree`] and returns findings, so each rule is
//! unit-tested on hand-built trees.
//!
//! Which processes "should agree": the GPU-holding ones (the ranks of the server) when any
//! process has a `/dev/nvidiaN` open; otherwise every descendant of the root, because without
//! GPU information the tool cannot tell ranks from helpers. `CUDA_VISIBLE_DEVICES` is left out
//! of that comparison: engines legitimately give each worker its own devices.

use std::collections::BTreeMap;

use serde::Serialize;

use super::nccl_vars;
use super::ncclmaps;
use super::walk::{ProcessInfo, Tree};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    /// Set in the root, absent in a descendant.
    MissingInDescendant,
    /// Absent from the root's start-time environment, present in a descendant: set after the
    /// root started (os.environ) or by the code that started the descendant.
    NotInRoot,
    /// Different values (or set vs unset) across processes that should agree.
    ValuesDisagree,
    /// An `NCCL_*` name NCCL does not read (a misspelling, usually).
    UnknownVariable,
    /// An `NCCL_*` name that PyTorch reads (an old spelling of `TORCH_NCCL_*`), not NCCL.
    TorchVariable,
    /// A process whose environment could not be read.
    Unreadable,
    /// A process that exited during the walk.
    Exited,
    /// A child with its parent's exact command line: likely forked without exec.
    ForkedCopy,
    /// No `NCCL_*` variable anywhere in the tree.
    NoNcclSettings,
    /// Processes that should agree map different NCCL library files.
    NcclLibrariesDiffer,
    /// A process maps another NCCL than the one its `VLLM_NCCL_SO_PATH` names.
    NcclNotTheOneNamed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Severity {
    /// The settings may not be what the user thinks.
    Warning,
    /// Worth knowing; not a problem by itself.
    Note,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Finding {
    pub(crate) kind: Kind,
    pub(crate) severity: Severity,
    /// The variable concerned, when there is one.
    pub(crate) variable: Option<String>,
    /// The processes concerned.
    pub(crate) pids: Vec<u32>,
    /// One sentence for a person.
    pub(crate) message: String,
}

/// One `--expect NAME=VALUE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Expect {
    pub(crate) name: String,
    pub(crate) value: String,
}

/// Parses `NAME=VALUE` (VALUE may be empty: the variable must be set to the empty string).
pub(crate) fn parse_expect(s: &str) -> Result<Expect, String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("--expect {s:?}: write NAME=VALUE, e.g. --expect NCCL_PROTO=LL"))?;
    let name = name.trim();
    let valid = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit();
    if !valid {
        return Err(format!(
            "--expect {s:?}: {name:?} is not an environment variable name"
        ));
    }
    Ok(Expect {
        name: name.to_string(),
        value: value.to_string(),
    })
}

/// Which processes a check covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Basis {
    /// The processes with a GPU open.
    GpuHolders,
    /// Every process of the tree (none has a GPU open, or none could be seen to).
    AllProcesses,
    /// Every descendant of the root.
    Descendants,
}

impl Basis {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Basis::GpuHolders => "the GPU-holding processes",
            Basis::AllProcesses => "every process of the tree, as none has a GPU open",
            Basis::Descendants => "the root's descendants, as none has a GPU open",
        }
    }
}

/// A process where an expectation failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ExpectFailure {
    pub(crate) pid: u32,
    /// Its value; `null` when unset or unreadable.
    pub(crate) actual: Option<String>,
    /// The environment could not be read, so the expectation cannot be proven.
    pub(crate) unreadable: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ExpectResult {
    pub(crate) variable: String,
    pub(crate) expected: String,
    pub(crate) basis: Basis,
    /// Every process checked.
    pub(crate) checked: Vec<u32>,
    pub(crate) failures: Vec<ExpectFailure>,
    pub(crate) ok: bool,
}

/// `pid` or `pid (GPU 0,1)`.
pub(crate) fn label(p: &ProcessInfo) -> String {
    match &p.gpus {
        Some(g) if !g.is_empty() => {
            let g: Vec<String> = g.iter().map(|i| i.to_string()).collect();
            format!("{} (GPU {})", p.pid, g.join(","))
        }
        _ => p.pid.to_string(),
    }
}

/// A value as shown in a sentence: `LL`, `""` for empty, `unset`; escaped ([`shown`]).
pub(crate) fn show_value(v: Option<&str>) -> String {
    match v {
        None => "unset".into(),
        Some("") => "\"\"".into(),
        Some(v) => shown(v),
    }
}

/// The longest text read from /proc that a line shows whole (a variable, a value, a path).
pub(crate) const SHOWN_MAX: usize = 4096;

/// Text read from /proc (a variable's name or value, a command line, a mapped file's name) as
/// a line of the report shows it: escaped by [`crate::util::escaped`], so that a process
/// cannot write control characters to the terminal or hide text in the report.
pub(crate) fn shown(text: &str) -> String {
    crate::util::escaped(text, SHOWN_MAX)
}

fn list(ps: &[&ProcessInfo]) -> String {
    ps.iter().map(|p| label(p)).collect::<Vec<_>>().join(", ")
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Variables excluded from "should agree": each worker may have its own.
const PER_WORKER: &[&str] = &["CUDA_VISIBLE_DEVICES"];

/// All findings for one tree, warnings first.
pub(crate) fn analyze(tree: &Tree, expects: &[Expect]) -> Vec<Finding> {
    let readable: Vec<&ProcessInfo> = tree.processes.iter().filter(|p| p.env.is_some()).collect();
    let any_gpu = tree.processes.iter().any(|p| p.holds_gpu());
    let root_env = tree
        .processes
        .iter()
        .find(|p| p.pid == tree.root && p.depth == 0)
        .and_then(|r| r.env.as_ref());
    let mut out = vec![];
    if let Some(root_env) = root_env {
        out.extend(missing_in_descendants(tree, root_env, &readable, any_gpu));
        out.extend(not_in_root(tree, root_env, &readable));
    }
    out.extend(disagreements(&readable, any_gpu));
    let (unknown, any_nccl) = unknown_names(&readable, expects);
    out.extend(unknown);
    out.extend(forked_copies(tree));
    out.extend(nccl_findings(tree));
    out.extend(unseen(tree, !readable.is_empty() && !any_nccl));
    out.sort_by_key(|f| f.severity == Severity::Note);
    out
}

/// The environment of a readable process.
fn env_of(p: &ProcessInfo) -> &BTreeMap<String, String> {
    p.env.as_ref().expect("a readable process")
}

/// Rule 1: Set in the root, missing in a descendant.
fn missing_in_descendants(
    tree: &Tree,
    root_env: &BTreeMap<String, String>,
    readable: &[&ProcessInfo],
    any_gpu: bool,
) -> Vec<Finding> {
    let mut out = vec![];
    for (name, value) in root_env {
        let missing: Vec<&ProcessInfo> = readable
            .iter()
            .copied()
            .filter(|p| p.depth > 0 && !env_of(p).contains_key(name))
            .collect();
        if missing.is_empty() {
            continue;
        }
        let gpu_missing = missing.iter().any(|p| p.holds_gpu());
        let n_desc = readable.iter().filter(|p| p.depth > 0).count();
        out.push(Finding {
            kind: Kind::MissingInDescendant,
            severity: if gpu_missing || !any_gpu {
                Severity::Warning
            } else {
                Severity::Note
            },
            variable: Some(name.clone()),
            pids: missing.iter().map(|p| p.pid).collect(),
            message: format!(
                "{}={} is set in the root (pid {}) but missing in {} of {}: {}{}",
                shown(name),
                show_value(Some(value)),
                tree.root,
                missing.len(),
                plural(n_desc, "descendant", "descendants"),
                list(&missing),
                if gpu_missing {
                    ", which hold GPUs: NCCL there runs without it"
                } else if any_gpu {
                    " (none of them holds a GPU)"
                } else {
                    ""
                }
            ),
        });
    }
    out
}

/// The variables set in any of `ps` but those [`PER_WORKER`], sorted, once each.
fn compared_names<'a>(ps: &[&'a ProcessInfo]) -> Vec<&'a String> {
    let mut names: Vec<&String> = ps
        .iter()
        .flat_map(|p| env_of(p).keys())
        .filter(|n| !PER_WORKER.contains(&n.as_str()))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Rule 1b: In a descendant but not in the root's start-time environment.
fn not_in_root(
    tree: &Tree,
    root_env: &BTreeMap<String, String>,
    readable: &[&ProcessInfo],
) -> Vec<Finding> {
    let descendants: Vec<&ProcessInfo> = readable.iter().copied().filter(|p| p.depth > 0).collect();
    compared_names(&descendants)
        .into_iter()
        .filter(|n| !root_env.contains_key(*n))
        .map(|name| {
            let having: Vec<&ProcessInfo> = descendants
                .iter()
                .copied()
                .filter(|p| env_of(p).contains_key(name))
                .collect();
            Finding {
                kind: Kind::NotInRoot,
                severity: Severity::Note,
                variable: Some(name.clone()),
                pids: having.iter().map(|p| p.pid).collect(),
                message: format!(
                    "{} is not in the environment the root (pid {}) was started with, but \
                     {} it: {}; it was set after the root started (e.g. os.environ) or by \
                     the code that started {}, so only processes started later get it",
                    shown(name),
                    tree.root,
                    plural(having.len(), "descendant has", "descendants have"),
                    list(&having),
                    if having.len() == 1 { "it" } else { "them" },
                ),
            }
        })
        .collect()
}

/// Rule 2: Values that should agree but do not.
fn disagreements(readable: &[&ProcessInfo], any_gpu: bool) -> Vec<Finding> {
    let (group, basis): (Vec<&ProcessInfo>, Basis) = if any_gpu {
        (
            readable.iter().copied().filter(|p| p.holds_gpu()).collect(),
            Basis::GpuHolders,
        )
    } else {
        (
            readable.iter().copied().filter(|p| p.depth > 0).collect(),
            Basis::Descendants,
        )
    };
    if group.len() < 2 {
        return vec![];
    }
    let mut out = vec![];
    for name in compared_names(&group) {
        let mut by_value: BTreeMap<Option<&str>, Vec<&ProcessInfo>> = BTreeMap::new();
        for p in &group {
            let v = env_of(p).get(name).map(String::as_str);
            by_value.entry(v).or_default().push(p);
        }
        if by_value.len() < 2 {
            continue;
        }
        let parts: Vec<String> = by_value
            .iter()
            .map(|(v, ps)| format!("{} in {}", show_value(*v), list(ps)))
            .collect();
        out.push(Finding {
            kind: Kind::ValuesDisagree,
            severity: Severity::Warning,
            variable: Some(name.clone()),
            pids: group.iter().map(|p| p.pid).collect(),
            message: format!(
                "{} differs across {}: {}",
                shown(name),
                basis.describe(),
                parts.join("; ")
            ),
        });
    }
    out
}

/// Rule 3: NCCL_* names NCCL does not read, set in a process or named in `--expect`; the second
/// value says whether any process sets an NCCL_* variable at all.
fn unknown_names(readable: &[&ProcessInfo], expects: &[Expect]) -> (Vec<Finding>, bool) {
    let mut seen: BTreeMap<&str, Vec<&ProcessInfo>> = BTreeMap::new();
    for p in readable {
        for name in env_of(p).keys() {
            if name.len() >= 5 && name[..5].eq_ignore_ascii_case("NCCL_") {
                seen.entry(name).or_default().push(p);
            }
        }
    }
    let mut out = vec![];
    for (name, ps) in &seen {
        out.extend(unknown_name(
            name,
            format!("set in {}", list(ps)),
            ps.iter().map(|p| p.pid).collect(),
        ));
    }
    for e in expects {
        if !seen.contains_key(e.name.as_str()) && e.name.starts_with("NCCL_") {
            out.extend(unknown_name(&e.name, "named in --expect".into(), vec![]));
        }
    }
    (out, !seen.is_empty())
}

/// The finding about `name` when NCCL does not read it: PyTorch's old name of a variable, or
/// a misspelling with the name it is closest to.
fn unknown_name(name: &str, where_: String, pids: Vec<u32>) -> Option<Finding> {
    if nccl_vars::is_known_nccl_var(name) {
        return None;
    }
    if let Some(torch) = nccl_vars::torch_legacy_alias(name) {
        return Some(Finding {
            kind: Kind::TorchVariable,
            severity: Severity::Note,
            variable: Some(name.into()),
            pids,
            message: format!(
                "{} is read by PyTorch (old name of {torch}), not by NCCL; {where_}",
                shown(name)
            ),
        });
    }
    let hint = match nccl_vars::suggest(name) {
        Some(s) if !s.eq_ignore_ascii_case(name) => format!(" (did you mean {s}?)"),
        Some(s) => format!(" (did you mean {s}? names are case-sensitive)"),
        None => String::new(),
    };
    Some(Finding {
        kind: Kind::UnknownVariable,
        severity: Severity::Warning,
        variable: Some(name.into()),
        pids,
        message: format!(
            "{} is not a variable NCCL reads, so it changes nothing{hint}; {where_}",
            shown(name)
        ),
    })
}

/// Rule 4: A child that kept its parent's command line and environment.
fn forked_copies(tree: &Tree) -> Vec<Finding> {
    let mut out = vec![];
    for p in tree.processes.iter().filter(|p| p.depth > 0) {
        let Some(parent) = tree.processes.iter().find(|q| q.pid == p.ppid) else {
            continue;
        };
        if parent.command == p.command && parent.env.is_some() && parent.env == p.env {
            out.push(Finding {
                kind: Kind::ForkedCopy,
                severity: Severity::Note,
                variable: None,
                pids: vec![p.pid],
                message: format!(
                    "pid {} has the command line of its parent {}: probably forked without exec \
                     (multiprocessing 'fork'); /proc then shows the environment the parent was \
                     started with, not changes the parent made before forking",
                    p.pid, parent.pid
                ),
            });
        }
    }
    out
}

/// Rule 5: What could not be seen: unreadable environments, processes that exited during the
/// walk, and (`no_nccl`) no NCCL_* variable in any readable process.
fn unseen(tree: &Tree, no_nccl: bool) -> Vec<Finding> {
    let mut out = vec![];
    let unreadable: Vec<&ProcessInfo> = tree.processes.iter().filter(|p| p.env.is_none()).collect();
    if !unreadable.is_empty() {
        let why = unreadable[0].env_error.clone().unwrap_or_default();
        out.push(Finding {
            kind: Kind::Unreadable,
            severity: Severity::Warning,
            variable: None,
            pids: unreadable.iter().map(|p| p.pid).collect(),
            message: format!(
                "the environment of {} could not be read ({why}): {}",
                plural(unreadable.len(), "process", "processes"),
                list(&unreadable)
            ),
        });
    }
    if !tree.skipped.is_empty() {
        let parts: Vec<String> = tree
            .skipped
            .iter()
            .map(|s| format!("{} ({}): {}", s.pid, shown(&s.comm), s.reason))
            .collect();
        out.push(Finding {
            kind: Kind::Exited,
            severity: Severity::Note,
            variable: None,
            pids: tree.skipped.iter().map(|s| s.pid).collect(),
            message: format!("skipped {}", parts.join("; ")),
        });
    }
    if no_nccl {
        out.push(Finding {
            kind: Kind::NoNcclSettings,
            severity: Severity::Note,
            variable: None,
            pids: vec![],
            message: "no NCCL_* variable is set in any process: NCCL uses its defaults \
                      (and NCCL_CONF_FILE, ~/.nccl.conf or /etc/nccl.conf, if present)"
                .into(),
        });
    }
    out
}

/// The NCCL library itself among a process's mapped files (not a plugin such as
/// `libnccl-net.so`): the file names that start `libnccl.so`.
fn library_of(libs: &[ncclmaps::MappedNccl]) -> Vec<&ncclmaps::MappedNccl> {
    libs.iter()
        .filter(|m| {
            m.path
                .rsplit('/')
                .next()
                .is_some_and(|n| n.starts_with("libnccl.so"))
        })
        .collect()
}

/// What the mapped libraries show: processes of the tree that map different NCCL builds (the
/// GPU-holding ones when any holds a GPU), and a process that maps another NCCL than the one its
/// `VLLM_NCCL_SO_PATH` names (compared with that file's links resolved, as the walk read it, and
/// as written).
fn nccl_findings(tree: &Tree) -> Vec<Finding> {
    let mut out = vec![];
    let any_gpu = tree.processes.iter().any(|p| p.holds_gpu());
    let group: Vec<&ProcessInfo> = tree
        .processes
        .iter()
        .filter(|p| !any_gpu || p.holds_gpu())
        .collect();
    let mut by_lib: BTreeMap<String, Vec<&ProcessInfo>> = BTreeMap::new();
    for p in &group {
        for m in library_of(p.nccl.as_deref().unwrap_or_default()) {
            by_lib.entry(m.describe()).or_default().push(p);
        }
    }
    if by_lib.len() >= 2 {
        let parts: Vec<String> = by_lib
            .iter()
            .map(|(lib, ps)| format!("{} in {}", shown(lib), list(ps)))
            .collect();
        out.push(Finding {
            kind: Kind::NcclLibrariesDiffer,
            severity: Severity::Warning,
            variable: None,
            pids: group.iter().map(|p| p.pid).collect(),
            message: format!(
                "{} map different NCCL libraries: {}",
                if any_gpu {
                    "the GPU-holding processes"
                } else {
                    "the processes"
                },
                parts.join("; ")
            ),
        });
    }
    for p in &tree.processes {
        let (Some(env), Some(libs)) = (&p.env, &p.nccl) else {
            continue;
        };
        let Some(asked) = env.get(ncclmaps::SO_PATH_VAR) else {
            continue;
        };
        let own = library_of(libs);
        if own.is_empty() {
            continue;
        }
        let want = p.nccl_so_path.as_deref().unwrap_or(asked);
        if own.iter().any(|m| m.path == want || m.path == *asked) {
            continue;
        }
        let maps: Vec<String> = own.iter().map(|m| shown(&m.describe())).collect();
        out.push(Finding {
            kind: Kind::NcclNotTheOneNamed,
            severity: Severity::Warning,
            variable: Some(ncclmaps::SO_PATH_VAR.into()),
            pids: vec![p.pid],
            message: format!(
                "{} was started with {}={} but maps {}: the NCCL it runs is not the one named",
                label(p),
                ncclmaps::SO_PATH_VAR,
                shown(asked),
                maps.join(" and ")
            ),
        });
    }
    out
}

/// Checks every `--expect` on the GPU-holding processes, or on every process of the tree when
/// none holds a GPU. A process whose environment cannot be read fails: it cannot be proven.
pub(crate) fn check_expectations(tree: &Tree, expects: &[Expect]) -> Vec<ExpectResult> {
    let any_gpu = tree.processes.iter().any(|p| p.holds_gpu());
    let (targets, basis): (Vec<&ProcessInfo>, Basis) = if any_gpu {
        (
            tree.processes.iter().filter(|p| p.holds_gpu()).collect(),
            Basis::GpuHolders,
        )
    } else {
        (tree.processes.iter().collect(), Basis::AllProcesses)
    };
    expects
        .iter()
        .map(|e| {
            let failures: Vec<ExpectFailure> = targets
                .iter()
                .filter_map(|p| match &p.env {
                    None => Some(ExpectFailure {
                        pid: p.pid,
                        actual: None,
                        unreadable: true,
                    }),
                    Some(env) => {
                        let v = env.get(&e.name);
                        (v != Some(&e.value)).then(|| ExpectFailure {
                            pid: p.pid,
                            actual: v.cloned(),
                            unreadable: false,
                        })
                    }
                })
                .collect();
            ExpectResult {
                variable: e.name.clone(),
                expected: e.value.clone(),
                basis,
                checked: targets.iter().map(|p| p.pid).collect(),
                ok: failures.is_empty() && !targets.is_empty(),
                failures,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::walk::Skipped;

    fn proc(pid: u32, ppid: u32, depth: usize, gpus: &[u32], env: &[(&str, &str)]) -> ProcessInfo {
        ProcessInfo {
            pid,
            ppid,
            depth,
            comm: "python3".into(),
            command: format!("python3 worker {pid}"),
            gpus: Some(gpus.to_vec()),
            gpus_error: None,
            env: Some(
                env.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            env_error: None,
            nccl: Some(vec![]),
            nccl_error: None,
            nccl_so_path: None,
        }
    }

    fn tree(processes: Vec<ProcessInfo>) -> Tree {
        Tree {
            root: processes[0].pid,
            processes,
            skipped: vec![],
        }
    }

    fn kinds(f: &[Finding]) -> Vec<(Kind, Option<&str>)> {
        f.iter().map(|f| (f.kind, f.variable.as_deref())).collect()
    }

    /// A server whose rank 1 lost NCCL_PROTO and whose rank 2 got another NCCL_ALGO.
    fn server() -> Tree {
        let all = [("NCCL_PROTO", "LL"), ("NCCL_ALGO", "Ring")];
        tree(vec![
            proc(10, 1, 0, &[], &all),
            proc(11, 10, 1, &[0], &all),
            proc(12, 10, 1, &[1], &[("NCCL_ALGO", "Ring")]),
            proc(
                13,
                10,
                1,
                &[2],
                &[("NCCL_PROTO", "LL"), ("NCCL_ALGO", "Tree")],
            ),
            proc(14, 10, 1, &[], &[("NCCL_ALGO", "Ring")]),
        ])
    }

    #[test]
    fn missing_and_disagreeing_on_gpu_holders() {
        let f = analyze(&server(), &[]);
        assert_eq!(
            kinds(&f),
            vec![
                (Kind::MissingInDescendant, Some("NCCL_PROTO")),
                (Kind::ValuesDisagree, Some("NCCL_ALGO")),
                (Kind::ValuesDisagree, Some("NCCL_PROTO")),
            ]
        );
        assert_eq!(f[0].pids, vec![12, 14]);
        assert!(f[0].message.contains("12 (GPU 1)"), "{}", f[0].message);
        assert!(f[0].message.contains("hold GPUs"));
        // Only the GPU holders are compared: 14 (no GPU) is not part of the disagreement.
        assert_eq!(f[1].pids, vec![11, 12, 13]);
        assert!(f[1]
            .message
            .contains("Ring in 11 (GPU 0), 12 (GPU 1); Tree in 13 (GPU 2)"));
        assert!(f[2].message.contains("unset in 12 (GPU 1)"));
    }

    #[test]
    fn missing_only_in_a_helper_is_a_note_when_gpus_are_known() {
        let all = [("NCCL_PROTO", "LL")];
        let t = tree(vec![
            proc(10, 1, 0, &[], &all),
            proc(11, 10, 1, &[0], &all),
            proc(12, 10, 1, &[1], &all),
            proc(14, 10, 1, &[], &[]),
        ]);
        let f = analyze(&t, &[]);
        assert_eq!(
            kinds(&f),
            vec![(Kind::MissingInDescendant, Some("NCCL_PROTO"))]
        );
        assert_eq!(f[0].severity, Severity::Note);
    }

    #[test]
    fn without_gpus_all_descendants_should_agree() {
        let t = tree(vec![
            proc(10, 1, 0, &[], &[("NCCL_PROTO", "LL")]),
            proc(11, 10, 1, &[], &[("NCCL_PROTO", "LL")]),
            proc(12, 10, 1, &[], &[("NCCL_PROTO", "Simple")]),
        ]);
        let f = analyze(&t, &[]);
        assert_eq!(kinds(&f), vec![(Kind::ValuesDisagree, Some("NCCL_PROTO"))]);
        assert!(f[0].message.contains("root's descendants"));
        assert_eq!(f[0].pids, vec![11, 12]);
    }

    #[test]
    fn set_in_workers_but_not_in_the_root() {
        let t = tree(vec![
            proc(10, 1, 0, &[], &[("NCCL_DEBUG", "WARN")]),
            proc(
                11,
                10,
                1,
                &[],
                &[("NCCL_DEBUG", "WARN"), ("NCCL_ALGO", "Ring")],
            ),
            proc(
                12,
                10,
                1,
                &[],
                &[("NCCL_DEBUG", "WARN"), ("NCCL_ALGO", "Ring")],
            ),
        ]);
        let f = analyze(&t, &[]);
        assert_eq!(kinds(&f), vec![(Kind::NotInRoot, Some("NCCL_ALGO"))]);
        assert_eq!(f[0].pids, vec![11, 12]);
        assert!(
            f[0].message.contains("2 descendants have it: 11, 12"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn cuda_visible_devices_may_differ_per_worker() {
        let t = tree(vec![
            proc(10, 1, 0, &[], &[]),
            proc(11, 10, 1, &[0], &[("CUDA_VISIBLE_DEVICES", "0")]),
            proc(12, 10, 1, &[1], &[("CUDA_VISIBLE_DEVICES", "1")]),
        ]);
        let f = analyze(&t, &[]);
        assert_eq!(kinds(&f), vec![(Kind::NoNcclSettings, None)]);
    }

    #[test]
    fn unknown_misspelt_and_torch_names() {
        let t = tree(vec![proc(
            10,
            1,
            0,
            &[],
            &[
                ("NCCL_PROTOCOL", "LL"),
                ("nccl_algo", "Ring"),
                ("NCCL_ASYNC_ERROR_HANDLING", "1"),
                ("NCCL_DEBUG", "INFO"),
            ],
        )]);
        let f = analyze(&t, &[parse_expect("NCCL_ALGORITHM=Ring").unwrap()]);
        assert_eq!(
            kinds(&f),
            vec![
                (Kind::UnknownVariable, Some("NCCL_PROTOCOL")),
                (Kind::UnknownVariable, Some("nccl_algo")),
                (Kind::UnknownVariable, Some("NCCL_ALGORITHM")),
                (Kind::TorchVariable, Some("NCCL_ASYNC_ERROR_HANDLING")),
            ]
        );
        assert!(f[0].message.contains("did you mean NCCL_PROTO?"));
        assert!(f[1].message.contains("case-sensitive"));
        assert!(f[2].message.contains("named in --expect"));
        assert!(f[2].message.contains("did you mean NCCL_ALGO?"));
    }

    #[test]
    fn unreadable_exited_and_forked() {
        let mut t = server();
        t.processes[2].env = None;
        t.processes[2].env_error = Some("permission denied (x)".into());
        t.processes[4].command = t.processes[0].command.clone();
        t.processes[4].env = t.processes[0].env.clone();
        t.skipped.push(Skipped {
            pid: 15,
            ppid: 10,
            comm: "python3".into(),
            reason: "exited during the walk".into(),
        });
        let f = analyze(&t, &[]);
        let u = f.iter().find(|f| f.kind == Kind::Unreadable).unwrap();
        assert_eq!(u.pids, vec![12]);
        assert!(u.message.contains("permission denied"));
        let e = f.iter().find(|f| f.kind == Kind::Exited).unwrap();
        assert!(e.message.contains("15 (python3): exited during the walk"));
        let fc = f.iter().find(|f| f.kind == Kind::ForkedCopy).unwrap();
        assert_eq!(fc.pids, vec![14]);
        // Unreadable 12 is not counted as missing NCCL_PROTO.
        let m = f.iter().find(|f| f.kind == Kind::MissingInDescendant);
        assert!(m.is_none(), "{m:?}");
        // Warnings come before notes.
        let first_note = f.iter().position(|f| f.severity == Severity::Note).unwrap();
        assert!(f[first_note..].iter().all(|f| f.severity == Severity::Note));
    }

    #[test]
    fn expectations_on_gpu_holders() {
        let t = server();
        let r = check_expectations(
            &t,
            &[
                parse_expect("NCCL_PROTO=LL").unwrap(),
                parse_expect("NCCL_ALGO=Ring").unwrap(),
                parse_expect("NCCL_DEBUG=").unwrap(),
            ],
        );
        assert_eq!(r[0].basis, Basis::GpuHolders);
        assert_eq!(r[0].checked, vec![11, 12, 13]);
        assert!(!r[0].ok);
        assert_eq!(
            r[0].failures,
            vec![ExpectFailure {
                pid: 12,
                actual: None,
                unreadable: false
            }]
        );
        assert_eq!(r[1].failures[0].actual.as_deref(), Some("Tree"));
        assert_eq!(r[2].failures.len(), 3, "unset is not the empty string");
        let t = tree(vec![
            proc(10, 1, 0, &[], &[("NCCL_PROTO", "LL")]),
            proc(11, 10, 1, &[], &[("NCCL_PROTO", "LL")]),
        ]);
        let r = check_expectations(&t, &[parse_expect("NCCL_PROTO=LL").unwrap()]);
        assert!(r[0].ok);
        assert_eq!(r[0].basis, Basis::AllProcesses);
        assert_eq!(r[0].checked, vec![10, 11]);
    }

    #[test]
    fn unreadable_process_fails_an_expectation() {
        let mut t = server();
        t.processes[1].env = None;
        let r = check_expectations(&t, &[parse_expect("NCCL_ALGO=Ring").unwrap()]);
        assert!(!r[0].ok);
        assert!(r[0].failures.iter().any(|f| f.pid == 11 && f.unreadable));
    }

    #[test]
    fn expect_parsing() {
        assert_eq!(
            parse_expect("NCCL_PROTO=LL").unwrap(),
            Expect {
                name: "NCCL_PROTO".into(),
                value: "LL".into()
            }
        );
        assert_eq!(parse_expect("NCCL_X=a=b").unwrap().value, "a=b");
        assert_eq!(parse_expect("NCCL_X=").unwrap().value, "");
        for bad in ["NCCL_PROTO", "=LL", "NC CL=1", "1X=2", ""] {
            assert!(parse_expect(bad).is_err(), "{bad:?}");
        }
    }
}
