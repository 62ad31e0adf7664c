//! `verifybench inspect`: did the NCCL settings reach the processes of a RUNNING server?
//!
//! Serving engines start their GPU workers with Python multiprocessing; a variable that is in
//! the launcher's environment but not in the workers' changes nothing. This module walks the
//! process tree under a server (Linux /proc), reads the environment each process was started
//! with, which GPUs it has open, which NCCL library it has mapped, and states what does not
//! add up.
//!
//! - [`procfs`]: pure parsers of /proc files and the [`procfs::ProcSource`] trait (real /proc,
//!   fake directory, or mock).
//! - [`walk`]: the tree under a root, or the roots matching a command-line pattern.
//! - [`findings`]: missing, disagreeing and unknown variables; the `--expect` gate.
//! - [`nccl_vars`]: the names NCCL reads, reusable by other commands.
//! - [`ncclmaps`]: the NCCL library files each process has mapped (/proc/PID/maps), their
//!   versions, and what differs.
//! - [`render`]: table and JSON.
//!
//! Not here: the flags (`cli/inspect.rs`).

pub(crate) mod findings;
pub(crate) mod nccl_vars;
pub(crate) mod ncclmaps;
pub(crate) mod procfs;
pub(crate) mod render;
pub(crate) mod walk;

pub(crate) use findings::{analyze, check_expectations, parse_expect, Expect};
pub(crate) use render::{Report, TreeReport};
pub(crate) use walk::{find_roots, snapshot, walk, WalkError};

/// Inspects the trees under `roots`: walk, findings, expectations.
pub(crate) fn inspect(
    src: &dyn procfs::ProcSource,
    table: &std::collections::HashMap<u32, procfs::Stat>,
    roots: &[u32],
    expects: &[Expect],
) -> Result<Report, WalkError> {
    let mut trees = vec![];
    for &root in roots {
        let tree = walk(src, table, root)?;
        let findings = analyze(&tree, expects);
        let expectations = check_expectations(&tree, expects);
        trees.push(TreeReport {
            tree,
            findings,
            expectations,
        });
    }
    Ok(Report::new(trees))
}
