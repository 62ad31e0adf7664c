//! Every example in `verifybench --help`, each command's `--help` and the code blocks of
//! README.md and of every page under docs/ is run (issue 15, item 11; issue 29): through the
//! cost model where a GPU would be needed (`--backend model` added to verify, collective,
//! sweep and choose, `--backend nccl` replaced by it); a GPU-only command (selftest, bandwidth, worker)
//! and `inspect` of a server that is not running must fail only with exit 2 and the message
//! saying so. Examples run in order, by `sh`, in a scratch folder holding a copy of results/
//! and tests/data/, so files one example writes feed the next. The output a document shows
//! under a `$ ` command is checked against what the command prints, line by line, and the
//! figures README quotes against the results files it names.

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

/// One command of a document's code blocks, with the output shown under it.
struct Example {
    /// The command line (continuations joined).
    line: String,
    /// The lines shown after a `$ ` command until the next command or the end of the block:
    /// each must be a line of what the command prints (see [`check_shown`]).
    shown: Vec<String>,
}

/// Whether a code block's line runs verifybench (`$ ` prompt already removed).
fn runs_verifybench(l: &str) -> bool {
    l.starts_with("verifybench ")
        || l.starts_with("cargo run --release -- ")
        || l.split_whitespace().next().is_some_and(|w| w.contains('='))
            && l.contains(" verifybench ")
}

/// The commands of a Markdown document's code blocks that run verifybench, with the output
/// shown under each `$ `-prompted one. Lines that start with a launcher (`srun`, `mpirun`,
/// `torchrun`) are shown, not run: they need that launcher.
fn doc_examples(text: &str) -> Vec<Example> {
    let mut out: Vec<Example> = vec![];
    let mut in_block = false;
    let mut pending: Option<String> = None;
    // whether the lines that follow are the output of the last example
    let mut output = false;
    for line in text.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            output = false;
            continue;
        }
        if !in_block {
            continue;
        }
        if let Some(p) = pending.as_mut() {
            p.push(' ');
            p.push_str(line.trim().trim_end_matches('\\'));
            if !line.trim_end().ends_with('\\') {
                out.push(Example {
                    line: pending.take().unwrap(),
                    shown: vec![],
                });
            }
            continue;
        }
        let prompted = line.starts_with("$ ");
        let l = line.strip_prefix("$ ").unwrap_or(line);
        if !runs_verifybench(l) {
            if prompted {
                output = false;
            } else if output {
                out.last_mut().unwrap().shown.push(line.to_string());
            }
            continue;
        }
        output = prompted;
        if l.trim_end().ends_with('\\') {
            pending = Some(l.trim_end().trim_end_matches('\\').to_string());
        } else {
            out.push(Example {
                line: l.to_string(),
                shown: vec![],
            });
        }
    }
    out
}

/// A printed line with the commit in the banner (`verifybench 0.1.0 (c25d825cc015)`) replaced,
/// so that output pasted at one commit still reads as the same line at the next.
fn normalised(line: &str) -> String {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re =
        RE.get_or_init(|| regex::Regex::new(r"verifybench (\d+\.\d+\.\d+) \([^)]*\)").unwrap());
    re.replace_all(line.trim_end(), "verifybench $1 (COMMIT)")
        .into_owned()
}

/// Every non-blank line shown under an example is a line the command printed (stdout or
/// stderr): a document may leave lines out, never change one.
fn check_shown(ex: &Example, printed: &str) {
    let lines: std::collections::HashSet<String> = printed.lines().map(normalised).collect();
    for s in ex.shown.iter().filter(|s| !s.trim().is_empty()) {
        if lines.contains(&normalised(s)) {
            continue;
        }
        if let Some(new) = blessed(s, printed) {
            BLESSED.lock().unwrap().push((s.clone(), new));
            continue;
        }
        panic!(
            "example `{}` shows a line it does not print:\n{s}\n--- it printed:\n{printed}\n\
             (after a deliberate change of the output, VERIFYBENCH_BLESS_DOCS=1 rewrites such \
             lines to what is printed now)",
            ex.line
        );
    }
}

/// Stale shown lines and what replaces them, gathered under `VERIFYBENCH_BLESS_DOCS=1`.
static BLESSED: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());

/// The line of `printed` that a stale shown line `s` stands for, under
/// `VERIFYBENCH_BLESS_DOCS=1` only: the one printed line that starts with the same words before
/// the first figure (a table row's labels, a note's name) and has as many fields. Without the
/// variable, or without exactly one such line, `None`: the example fails.
fn blessed(s: &str, printed: &str) -> Option<String> {
    std::env::var_os("VERIFYBENCH_BLESS_DOCS")?;
    // The words before the first decimal figure (`3530.8`, `0.52`): labels, sizes and counts.
    let key = |l: &str| -> String {
        l.split_whitespace()
            .take_while(|w| !(w.contains('.') && w.chars().any(|c| c.is_ascii_digit())))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let k = key(s);
    if k.len() < 3 {
        return None;
    }
    let fields = |l: &str| l.split_whitespace().count();
    let mut hits = printed
        .lines()
        .filter(|l| key(l) == k && fields(l) == fields(s));
    let one = hits.next()?;
    hits.next().is_none().then(|| one.trim_end().to_string())
}

/// Writes the gathered replacements into the documents.
fn write_blessed() {
    let subs = std::mem::take(&mut *BLESSED.lock().unwrap());
    if subs.is_empty() {
        return;
    }
    for d in DOCUMENTS {
        let path = repo().join(d);
        let text = std::fs::read_to_string(&path).unwrap();
        let out: Vec<String> = text
            .lines()
            .map(|l| match subs.iter().find(|(old, _)| old == l) {
                Some((_, new)) => new.clone(),
                None => l.to_string(),
            })
            .collect();
        let mut out = out.join("\n");
        out.push('\n');
        if out != text {
            std::fs::write(&path, out).unwrap();
            eprintln!("rewrote the stale shown output of {d}");
        }
    }
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
    if ["verify", "collective", "sweep", "choose"].contains(&cmd) && !e.contains("--backend") {
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

fn run_all(examples: &[Example]) {
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
    for example in examples {
        let ex = &example.line;
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
        if !example.shown.is_empty() {
            let printed = format!("{}{err}", String::from_utf8_lossy(&out.stdout));
            check_shown(example, &printed);
        }
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
        "choose",
    ];
    for s in subs {
        examples.extend(help_examples(&help(&[s, "--help"])));
    }
    let h = help(&["model", "fit", "--help"]);
    examples.extend(help_examples(&h));
    let examples: Vec<Example> = examples
        .into_iter()
        .map(|line| Example {
            line,
            shown: vec![],
        })
        .collect();
    run_all(&examples);
}

/// The documents whose examples run, in this order, in one scratch folder: files that an
/// example writes feed the examples after it (`model.md`'s fit reads the collective record it
/// writes first, `trace.md` replays the schedule it exports). Every `.md` under docs/ is here
/// (a test checks it), so a new page cannot be skipped.
const DOCUMENTS: &[&str] = &[
    "README.md",
    "docs/guide/output.md",
    "docs/requirements.md",
    "docs/guide/plan.md",
    "docs/guide/collective.md",
    "docs/guide/verify.md",
    "docs/guide/sweep.md",
    "docs/guide/breakeven.md",
    "docs/acceptance-and-bad-input.md",
    "docs/guide/report.md",
    "docs/guide/env.md",
    "docs/guide/inspect.md",
    "docs/guide/selftest.md",
    "docs/guide/bandwidth.md",
    "docs/guide/compare.md",
    "docs/guide/trace.md",
    "docs/trace.md",
    "docs/guide/worker.md",
    "docs/guide/model.md",
    "docs/guide/impl.md",
    "docs/guide/choose.md",
    "docs/guide/replay.md",
    "docs/guide/explain.md",
    "docs/plan-configs.md",
    "docs/model.md",
    "docs/architecture.md",
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn markdown_under(dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            markdown_under(&p, out);
        } else if p.extension().is_some_and(|x| x == "md") {
            let rel = p.strip_prefix(repo()).unwrap();
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

#[test]
fn the_documents_list_every_page_under_docs() {
    let mut pages = vec![];
    markdown_under(&repo().join("docs"), &mut pages);
    pages.sort();
    let mut listed: Vec<String> = DOCUMENTS
        .iter()
        .filter(|d| d.starts_with("docs/"))
        .map(|d| d.to_string())
        .collect();
    listed.sort();
    assert_eq!(
        pages, listed,
        "DOCUMENTS (tests/it/cli_examples.rs) must name every .md under docs/, and only those"
    );
}

#[test]
fn every_readme_and_docs_example_runs() {
    let mut examples = vec![];
    for d in DOCUMENTS {
        let text = std::fs::read_to_string(repo().join(d)).unwrap();
        let found = doc_examples(&text);
        if *d == "README.md" {
            assert!(found.len() >= 6, "README.md: {:?}", found.len());
        }
        examples.extend(found);
    }
    assert!(examples.len() >= 40, "{}", examples.len());
    run_all(&examples);
    write_blessed();
}

#[test]
fn shown_output_is_checked_line_by_line() {
    // The parser takes the lines under a `$ ` command as its output, stops at the next
    // command, and joins continuations; an unprompted (`sh`) block has no output.
    let doc = "```\n$ verifybench plan \\\n  --tp 8\nline a\n\nline b\n$ verifybench env\n```\n```sh\nverifybench sweep -L X=1\n# a comment\n```\n";
    let ex = doc_examples(doc);
    assert_eq!(ex.len(), 3);
    assert_eq!(ex[0].line, "verifybench plan  --tp 8");
    assert_eq!(ex[0].shown, vec!["line a", "", "line b"]);
    assert!(ex[1].shown.is_empty() && ex[2].shown.is_empty());
    check_shown(&ex[0], "line b\nline a  \nline c\n");
    let changed = std::panic::catch_unwind(|| check_shown(&ex[0], "line a\nline B\n"));
    assert!(changed.is_err(), "a changed line must fail");
    let banner = Example {
        line: "x".into(),
        shown: vec!["# verifybench 0.1.0 (c25d825cc015) MODELED".into()],
    };
    check_shown(
        &banner,
        "# verifybench 0.1.0 (0123456789ab-dirty) MODELED\n",
    );
}

/// The figures README.md quotes: every bold figure (`**7.40**`) in a paragraph that names
/// committed results files (`results/...`, the index results/README.md aside) appears literally
/// in the first such file named after it, the file it comes from.
#[test]
fn readme_figures_are_in_the_results_files_it_names() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let path = regex::Regex::new(r"results/[A-Za-z0-9_./-]+\.(txt|json|jsonl|md)").unwrap();
    let bold = regex::Regex::new(r"\*\*([^*]+)\*\*").unwrap();
    let mut checked = 0;
    for para in readme.split("\n\n") {
        let files: Vec<(usize, &str)> = path
            .find_iter(para)
            .filter(|m| m.as_str() != "results/README.md")
            .map(|m| (m.start(), m.as_str()))
            .collect();
        if files.is_empty() {
            continue;
        }
        for b in bold.captures_iter(para) {
            let fig = &b[1];
            if !fig.chars().any(|c| c.is_ascii_digit()) {
                continue;
            }
            let at = b.get(0).unwrap().end();
            let Some((_, file)) = files.iter().find(|(start, _)| *start > at) else {
                panic!("README quotes {fig} without naming the results file after it");
            };
            let text = std::fs::read_to_string(repo().join(file))
                .unwrap_or_else(|e| panic!("README names {file}, which cannot be read: {e}"));
            assert!(
                text.contains(fig),
                "README quotes {fig}, which {file} (named after it) does not hold"
            );
            checked += 1;
        }
    }
    assert!(checked >= 1, "README quotes no figure from a results file");
}
