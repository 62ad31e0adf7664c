//! Records the git commit the binary was built from (provenance of every result).
use std::process::Command;

/// The trimmed output of a successful `git` command.
fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    let value = if dirty && commit != "unknown" {
        format!("{commit}-dirty")
    } else {
        commit
    };
    println!("cargo:rustc-env=VERIFYBENCH_GIT_COMMIT={value}");
    // HEAD and the index, and on a branch the ref HEAD names, which moves with each commit (an
    // amend need not touch the index), and packed-refs where refs end up. Paths from git
    // itself (a worktree's `.git` is a file), and only paths that exist: a missing one would
    // rerun this on every build.
    let git_path = |p: &str| git(&["rev-parse", "--git-path", p]);
    let head = git_path("HEAD");
    let text = head
        .as_deref()
        .and_then(|h| std::fs::read_to_string(h).ok());
    let r = text.as_deref().and_then(|h| h.trim().strip_prefix("ref: "));
    for path in [
        head,
        git_path("index"),
        r.and_then(git_path),
        git_path("packed-refs"),
    ]
    .into_iter()
    .flatten()
    {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
