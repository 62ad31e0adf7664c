//! The human-readable report and the JSON one.

use std::fmt::Write as _;

use serde::Serialize;

use super::findings::{label, show_value, ExpectResult, Finding, Severity};
use super::procfs::{short_command, truncate};
use super::walk::{ProcessInfo, Tree};

/// One inspected tree with what was found in it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TreeReport {
    #[serde(flatten)]
    pub(crate) tree: Tree,
    pub(crate) findings: Vec<Finding>,
    pub(crate) expectations: Vec<ExpectResult>,
}

/// Everything `inspect` reports (the JSON document).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    /// `verifybench.inspect/1`.
    pub(crate) schema: &'static str,
    /// Where each environment comes from, in words.
    pub(crate) source: &'static str,
    pub(crate) trees: Vec<TreeReport>,
    /// Every expectation held in every tree (true when none was given).
    pub(crate) ok: bool,
}

pub(crate) const SCHEMA: &str = "verifybench.inspect/1";
pub(crate) const SOURCE: &str = "/proc/PID/environ: the environment each process was started with";

impl Report {
    pub(crate) fn new(trees: Vec<TreeReport>) -> Report {
        let ok = trees.iter().all(|t| t.expectations.iter().all(|e| e.ok));
        Report {
            schema: SCHEMA,
            source: SOURCE,
            trees,
            ok,
        }
    }
}

const COMMAND_WIDTH: usize = 72;

/// The table: each process with its variables, then findings and expectations.
pub(crate) fn render_table(r: &Report) -> String {
    let mut o = String::new();
    for (i, t) in r.trees.iter().enumerate() {
        if i > 0 {
            o.push('\n');
        }
        render_tree(&mut o, t);
    }
    if r.trees.iter().any(|t| !t.expectations.is_empty()) {
        let _ = writeln!(
            o,
            "\n{}",
            if r.ok {
                "OK: every expectation holds"
            } else {
                "FAILED: at least one expectation does not hold (exit code 1)"
            }
        );
    }
    o
}

fn render_tree(o: &mut String, t: &TreeReport) {
    let tr = &t.tree;
    let _ = writeln!(
        o,
        "# verifybench inspect: process tree of pid {}, {} process{}{}",
        tr.root,
        tr.processes.len(),
        if tr.processes.len() == 1 { "" } else { "es" },
        if tr.skipped.is_empty() {
            String::new()
        } else {
            format!(", {} skipped", tr.skipped.len())
        }
    );
    let _ = writeln!(
        o,
        "# variables: NCCL_*, CUDA_*, TORCH_NCCL_* as each process was started (/proc/PID/environ)"
    );
    let _ = writeln!(
        o,
        "# NCCL mapped: the libnccl*.so* files each process has mapped (/proc/PID/maps), with the version the file name (or its pip wheel) tells"
    );
    let _ = writeln!(
        o,
        "# GPUS: open /dev/nvidiaN devices; - none, ? unreadable\n"
    );
    let _ = writeln!(o, "{:>8} {:>8}  {:<6} COMMAND", "PID", "PPID", "GPUS");
    for p in &tr.processes {
        render_process(o, tr, p);
    }
    for s in &tr.skipped {
        let _ = writeln!(
            o,
            "{:>8} {:>8}  {:<6} [{}] skipped: {}",
            s.pid, s.ppid, "", s.comm, s.reason
        );
    }
    let _ = writeln!(o, "\nFindings");
    if t.findings.is_empty() {
        let _ = writeln!(
            o,
            "  none: every variable of the root reached every descendant, and they agree"
        );
    }
    for f in &t.findings {
        let tag = match f.severity {
            Severity::Warning => "warning",
            Severity::Note => "note",
        };
        let _ = writeln!(o, "  {tag:<8} {}", f.message);
    }
    if !t.expectations.is_empty() {
        render_expectations(o, t);
    }
}

/// A process's row (indented under its parent), then its variables (or that it has its
/// parent's) and the NCCL libraries it maps.
fn render_process(o: &mut String, tr: &Tree, p: &ProcessInfo) {
    let gpus = match &p.gpus {
        None => "?".to_string(),
        Some(g) if g.is_empty() => "-".to_string(),
        Some(g) => g
            .iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(","),
    };
    let indent = "  ".repeat(p.depth);
    let _ = writeln!(
        o,
        "{:>8} {:>8}  {:<6} {indent}{}",
        p.pid,
        p.ppid,
        gpus,
        truncate(
            // a command line of several lines (python3 -c CODE) stays on its row
            &short_command(&p.command).replace(char::is_control, " "),
            COMMAND_WIDTH.saturating_sub(indent.len()).max(20)
        )
    );
    let pad = format!("{:26}{indent}", "");
    let parent = tr.processes.iter().find(|q| q.pid == p.ppid);
    match &p.env {
        None => {
            let _ = writeln!(
                o,
                "{pad}environment unreadable: {}",
                p.env_error.as_deref().unwrap_or("unknown error")
            );
        }
        Some(env) if env.is_empty() => {
            let _ = writeln!(o, "{pad}(no NCCL_*, CUDA_* or TORCH_NCCL_* variables)");
        }
        Some(env) if parent.and_then(|q| q.env.as_ref()) == Some(env) => {
            let _ = writeln!(
                o,
                "{pad}(the same {} variable{} as its parent)",
                env.len(),
                if env.len() == 1 { "" } else { "s" }
            );
        }
        Some(env) => {
            for (k, v) in env {
                let _ = writeln!(o, "{pad}{k}={v}");
            }
        }
    }
    match (&p.nccl, &p.env) {
        (Some(libs), _) => {
            for m in libs {
                let _ = writeln!(o, "{pad}NCCL mapped: {}", m.describe());
            }
        }
        // an unreadable environment has said why already
        (None, Some(_)) => {
            let _ = writeln!(
                o,
                "{pad}NCCL mappings unreadable: {}",
                p.nccl_error.as_deref().unwrap_or("unknown error")
            );
        }
        (None, None) => {}
    }
}

/// Each `--expect` with the processes where it failed.
fn render_expectations(o: &mut String, t: &TreeReport) {
    let basis = t.expectations[0].basis.describe();
    let _ = writeln!(o, "\nExpectations (checked in {basis})");
    for e in &t.expectations {
        let what = format!("{}={}", e.variable, e.expected);
        if e.ok {
            let _ = writeln!(o, "  ok       {what}: in all {} checked", e.checked.len());
        } else if e.checked.is_empty() {
            let _ = writeln!(o, "  FAIL     {what}: no process to check");
        } else {
            let parts: Vec<String> = e
                .failures
                .iter()
                .map(|f| {
                    let who = t
                        .tree
                        .processes
                        .iter()
                        .find(|p| p.pid == f.pid)
                        .map_or(f.pid.to_string(), label);
                    if f.unreadable {
                        format!("{who}: unreadable")
                    } else {
                        format!("{who}: {}", show_value(f.actual.as_deref()))
                    }
                })
                .collect();
            let _ = writeln!(
                o,
                "  FAIL     {what}: {} of {} differ: {}",
                e.failures.len(),
                e.checked.len(),
                parts.join("; ")
            );
        }
    }
}
