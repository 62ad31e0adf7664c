//! Every example in `verifybench --help`, each command's `--help` and README.md's code blocks
//! is run (issue 15, item 11): through the cost model where a GPU would be needed (`--backend
//! model` added to verify, collective and sweep, `--backend nccl` replaced by it); a GPU-only
//! command (selftest, bandwidth, worker) and `inspect` of a server that is not running must
//! fail only with exit 2 and the message saying so. Examples run in order, by `sh`, in a
//! scratch folder holding a copy of results/, so files one example writes feed the next.

use std::path::{Path, PathBuf};

use crate::common;
use common::vb;

/// The example lines (`verifybench ...`) of a help text's "Examples:" section.
fn help_examples(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Examples:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.trim().to_string())
        .filter(|l| l.contains("verifybench "))
        .collect()
}

/// The command lines of README.md's code blocks that run verifybench (continuations joined).
fn readme_examples(text: &str) -> Vec<String> {
    let mut out = vec![];
    let mut in_block = false;
    let mut pending: Option<String> = None;
    for line in text.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if !in_block {
            continue;
        }
        if let Some(p) = pending.as_mut() {
            p.push(' ');
            p.push_str(line.trim().trim_end_matches('\\'));
            if !line.trim_end().ends_with('\\') {
                out.push(pending.take().unwrap());
            }
            continue;
        }
        let l = line.strip_prefix("$ ").unwrap_or(line);
        let runs = l.starts_with("verifybench ")
            || l.starts_with("cargo run --release -- ")
            || l.split_whitespace().next().is_some_and(|w| w.contains('='))
                && l.contains(" verifybench ");
        if !runs {
            continue;
        }
        if l.trim_end().ends_with('\\') {
            pending = Some(l.trim_end().trim_end_matches('\\').to_string());
        } else {
            out.push(l.to_string());
        }
    }
    out
}

/// The example as `sh` runs it here: comments, `&` and `|| exit 1` dropped, the model backend
/// where a GPU would be needed.
fn as_run(example: &str) -> String {
    let mut e = example.to_string();
    if let Some(i) = e.find("  #") {
        e.truncate(i);
    }
    let mut e = e.trim().trim_end_matches('&').trim().to_string();
    if let Some(i) = e.find("|| exit") {
        e.truncate(i);
    }
    let e = e.replace("cargo run --release -- ", "verifybench ");
    let e = e.replace("--backend nccl", "--backend model");
    let words: Vec<&str> = e.split_whitespace().collect();
    let cmd = words
        .iter()
        .skip_while(|w| **w != "verifybench")
        .nth(1)
        .copied()
        .unwrap_or("");
    if ["verify", "collective", "sweep"].contains(&cmd) && !e.contains("--backend") {
        format!("{} --backend model", e.trim())
    } else {
        e.trim().to_string()
    }
}

/// What a GPU-only or server-only example may say instead of running.
const ALLOWED_REFUSALS: &[&str] = &[
    "this command needs a GPU",
    "no GPU found",
    "no process with pid",
    "no running process has a matching command line",
];

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), &t).unwrap();
        }
    }
}

fn run_all(examples: &[String]) {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&repo.join("results"), &dir.path().join("results"));
    // examples that read the committed trace fixtures name them from the repository root
    copy_dir(&repo.join("tests/data"), &dir.path().join("tests/data"));
    let bin = assert_cmd::cargo::cargo_bin("verifybench");
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for ex in examples {
        let cmd = as_run(ex);
        let out = std::process::Command::new("sh")
            .args(["-c", &cmd])
            .current_dir(dir.path())
            .env("PATH", &path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let ok = out.status.success()
            || out.status.code() == Some(2) && ALLOWED_REFUSALS.iter().any(|m| err.contains(m));
        assert!(
            ok,
            "example `{ex}` (run as `{cmd}`) failed: {:?}\n{err}",
            out.status.code()
        );
        // An example that measures on GPUs feeds the next ones measured records: its modeled
        // stand-in's export is relabelled measured (as the cost-model tests' synthetic data).
        if ex.contains("--backend nccl") {
            let words: Vec<&str> = ex.split_whitespace().collect();
            if let Some(i) = words.iter().position(|w| *w == "--export-json") {
                let f = dir.path().join(words[i + 1]);
                let t = std::fs::read_to_string(&f).unwrap();
                std::fs::write(&f, t.replace("\"modeled\"", "\"measured\"")).unwrap();
            }
        }
    }
}

#[test]
fn every_help_example_runs() {
    // wide enough that clap does not wrap an example line
    let help = |args: &[&str]| {
        String::from_utf8(
            vb().env("COLUMNS", "500")
                .args(args)
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap()
    };
    let top = help(&["--help"]);
    let mut examples = help_examples(&top);
    assert!(examples.len() >= 5, "{top}");
    let subs = [
        "plan",
        "collective",
        "verify",
        "sweep",
        "breakeven",
        "report",
        "bandwidth",
        "env",
        "inspect",
        "selftest",
        "worker",
        "compare",
    ];
    for s in subs {
        examples.extend(help_examples(&help(&[s, "--help"])));
    }
    let h = help(&["model", "fit", "--help"]);
    examples.extend(help_examples(&h));
    run_all(&examples);
}

#[test]
fn every_readme_example_runs() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let examples = readme_examples(&readme);
    assert!(examples.len() >= 10, "{examples:?}");
    run_all(&examples);
}
