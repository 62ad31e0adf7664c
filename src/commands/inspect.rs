//! `verifybench inspect`: the NCCL_* environment of every process of a running server, with
//! findings and an `--expect` gate. Linux only (reads /proc); needs no GPU and no root for the
//! user's own processes.
//!
//! Exit codes: 0 when every expectation holds (or none was given), 1 when one fails, 2 for bad
//! input (a pid that does not exist, a pattern that matches nothing, a malformed --expect).

use crate::inspect::{self, procfs::ProcFs, render, Expect, WalkError};
use crate::output::Format;

/// `inspect`: `--pid`, `--match` (`pattern`), `--expect` as given, and the format.
#[derive(Debug, Clone)]
pub(crate) struct InspectRequest {
    pub(crate) pid: Option<u32>,
    pub(crate) pattern: Option<String>,
    pub(crate) expect: Vec<String>,
    pub(crate) format: Format,
}

/// Runs `verifybench inspect`.
pub(crate) fn run(a: &InspectRequest) -> anyhow::Result<i32> {
    let expects: Vec<Expect> = a
        .expect
        .iter()
        .map(|s| inspect::parse_expect(s).map_err(crate::error::usage))
        .collect::<anyhow::Result<_>>()?;
    let src = ProcFs::default();
    if !src.root.join("self").exists() {
        crate::usage_bail!("`verifybench inspect` needs Linux /proc, which this system lacks");
    }
    let table = inspect::snapshot(&src)?;
    let roots = match (&a.pid, &a.pattern) {
        (Some(pid), _) => vec![*pid],
        (None, Some(p)) if p.trim().is_empty() => crate::usage_bail!(
            "--match '': an empty pattern matches every process; give part of the server's command line, e.g. --match sglang.launch_server"
        ),
        (None, Some(p)) => {
            let re = regex::Regex::new(p)
                .map_err(|e| crate::error::usage(format!("--match {p:?}: {e}")))?;
            let roots = inspect::find_roots(&src, &table, &re, std::process::id());
            if roots.is_empty() {
                crate::usage_bail!(
                    "--match {p:?}: no running process has a matching command line \
                     (check with `ps -eo pid,args | grep -- {p:?}`)"
                );
            }
            roots
        }
        (None, None) => crate::usage_bail!("give --pid PID or --match PATTERN"),
    };
    let report = inspect::inspect(&src, &table, &roots, &expects).map_err(|e| match e {
        WalkError::NoSuchProcess(_) => crate::error::usage(e.to_string()),
        WalkError::Proc(_) => anyhow::Error::new(e),
    })?;
    if a.format.is_json() {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render::render_table(&report));
    }
    Ok(if report.ok { 0 } else { 1 })
}
