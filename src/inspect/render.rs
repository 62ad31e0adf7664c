//! The human-readable report and the JSON one.

use std::fmt::Write as _;

use serde::Serialize;

use super::findings::{label, show_value, shown, ExpectResult, Finding, Severity};
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
            s.pid,
            s.ppid,
            "",
            shown(&s.comm),
            s.reason
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
            // a command line of several lines (python3 -c CODE) stays on its row, its control
            // characters written as escapes
            &shown(&short_command(&p.command)),
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
                let _ = writeln!(o, "{pad}{}={}", shown(k), shown(v));
            }
        }
    }
    match (&p.nccl, &p.env) {
        (Some(libs), _) => {
            for m in libs {
                let _ = writeln!(o, "{pad}NCCL mapped: {}", shown(&m.describe()));
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
        let what = format!("{}={}", shown(&e.variable), shown(&e.expected));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::walk::tests::Mock;

    /// Whether a line holds a character that moves the cursor, clears the screen or hides or
    /// reorders text.
    fn raw(line: &str) -> bool {
        line.chars().any(|c| {
            c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{200b}'..='\u{200f}')
        })
    }

    #[test]
    fn text_from_proc_is_printed_escaped() {
        let mut m = Mock::default();
        let esc = "\u{1b}[2J";
        // a process whose name, command line, variables and mapped NCCL hold control
        // characters and a right-to-left override
        m.add(
            200,
            1,
            "evil\u{1b}]0;x\u{7}",
            &format!("python3 -c line1{esc}\nline2\u{202e}dlrow"),
            &[("NCCL_PROTO", "LL\u{1b}[31m"), ("NCCL_\u{1b}[2JX", "1")],
        );
        m.add(201, 200, "w", "python3 worker", &[("NCCL_PROTO", "Simple")]);
        // (the kernel writes a newline of a mapped file's name as \012: no line of maps
        // holds one)
        let lib = format!("/opt/x{esc}\u{202e}/libnccl.so.2.28.3");
        m.files.insert(
            (200, "maps".into()),
            format!("7f00-7f10 r-xp 00000000 fd:01 9 {lib}\n").into_bytes(),
        );
        let expects = [crate::inspect::parse_expect("NCCL_PROTO=LL").unwrap()];
        let table = crate::inspect::snapshot(&m).unwrap();
        let r = crate::inspect::inspect(&m, &table, &[200], &expects).unwrap();
        let out = render_table(&r);
        let bad: Vec<&str> = out.lines().filter(|l| raw(l)).collect();
        assert!(bad.is_empty(), "raw control characters in: {bad:?}\n{out}");
        // each text is there, escaped: the value, the variable, the command, the mapped file
        for want in [
            "NCCL_PROTO=LL\\u{1b}[31m",
            "NCCL_\\u{1b}[2JX=1",
            "line1\\u{1b}[2J\\nline2\\u{202e}",
            "/opt/x\\u{1b}[2J\\u{202e}/libnccl.so.2.28.3",
            "200: LL\\u{1b}[31m; 201: Simple",
        ] {
            assert!(out.contains(want), "'{want}' not in:\n{out}");
        }
    }
}
