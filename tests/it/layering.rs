//! The layering rule, checked on the sources: only `src/cli/` and `src/main.rs` may name clap
//! or import from `crate::cli`; every other module works on the library's plain requests.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Whether a line of Rust names clap or the cli module.
fn names_cli_or_clap(line: &str) -> bool {
    let l = line.trim_start();
    if l.starts_with("//") {
        return false;
    }
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        regex::Regex::new(r"\bclap::|\buse clap\b|\bcrate::cli\b|\bverifybench::cli\b").unwrap()
    })
    .is_match(l)
}

#[test]
fn the_detector_sees_what_it_must_and_nothing_else() {
    assert!(names_cli_or_clap("use clap::Parser;"));
    assert!(names_cli_or_clap("#[derive(clap::Args)]"));
    assert!(names_cli_or_clap("use crate::cli::args::GpuArgs;"));
    assert!(names_cli_or_clap("    crate::cli::verify::runs(a)"));
    assert!(!names_cli_or_clap(
        "//! cli/ turns flags into requests; clap lives there"
    ));
    assert!(!names_cli_or_clap("use crate::client::Thing;"));
}

#[test]
fn nothing_outside_cli_and_main_names_clap_or_cli() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    rust_files(&src, &mut files);
    assert!(
        files.len() > 50,
        "found the sources ({} files)",
        files.len()
    );
    let mut bad = vec![];
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        if rel.starts_with("cli") || rel == Path::new("main.rs") {
            continue;
        }
        for (i, line) in std::fs::read_to_string(f).unwrap().lines().enumerate() {
            if names_cli_or_clap(line) {
                bad.push(format!("src/{}:{}: {}", rel.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "library code names clap or crate::cli:\n{}",
        bad.join("\n")
    );
}

/// The files git tracks outside `results/` (an empty list where git or the checkout's history is
/// not there, as in a source archive).
fn tracked_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("git")
        .args(["ls-files", "-z", "--", ".", ":!results"])
        .current_dir(root)
        .output();
    match out {
        Ok(o) if o.status.success() => o
            .stdout
            .split(|b| *b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| root.join(String::from_utf8_lossy(s).as_ref()))
            .collect(),
        _ => vec![],
    }
}

#[test]
fn no_empty_file_is_tracked_outside_results() {
    let files = tracked_files();
    if files.is_empty() {
        // Not a git checkout: nothing to check, and say so rather than pass in silence.
        eprintln!("not a git checkout: the empty-file check has nothing to read");
        return;
    }
    let empty: Vec<_> = files
        .iter()
        .filter(|f| std::fs::metadata(f).is_ok_and(|m| m.is_file() && m.len() == 0))
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        empty.is_empty(),
        "empty files are tracked (litter a run left behind?): {empty:?}"
    );
}
