//! Records the git commit the binary was built from (provenance of every result).
use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false);
    let value = if dirty && commit != "unknown" {
        format!("{commit}-dirty")
    } else {
        commit
    };
    println!("cargo:rustc-env=VERIFYBENCH_GIT_COMMIT={value}");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/index");
    // On a branch, HEAD names a ref that moves with each commit (an amend need not touch the
    // index): watch the ref itself, and packed-refs where refs end up (only paths that exist:
    // a missing one would rerun this on every build).
    let git_path = |p: &str| {
        Command::new("git")
            .args(["rev-parse", "--git-path", p])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let head = git_path("HEAD").and_then(|h| std::fs::read_to_string(h).ok());
    let r = head.as_deref().and_then(|h| h.trim().strip_prefix("ref: "));
    for path in [r.and_then(git_path), git_path("packed-refs")]
        .into_iter()
        .flatten()
    {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
