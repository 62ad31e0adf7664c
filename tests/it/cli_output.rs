//! End-to-end tests of the one output convention (issue 15, item 15): every command that prints
//! a result takes `--format` (table, json; markdown where a Markdown table exists) and
//! `-q/--quiet`; `--format json` prints one JSON document, exactly what `--export-json` writes;
//! `-q` leaves stderr empty on success. The commands come from clap's command tree, so a new
//! command without the convention, or without a case here, fails. Through the cost model, the
//! `--debug-mode` sweep and pure commands: no GPU needed.

use std::path::{Path, PathBuf};

use clap::CommandFactory;
use serde_json::Value;

use crate::common;
use common::vb;

/// Commands without the convention, and why.
const EXEMPT: &[(&str, &str)] = &[
    (
        "report",
        "writes report.md and its plots to -o DIR: files, not a printed result",
    ),
    (
        "__rank",
        "hidden: one worker process of --launcher processes",
    ),
];

/// Commands that need a GPU to print a result: here only their flags are checked (`cargo
/// test` runs anywhere); `verifybench selftest` and the GPU runs check the rest.
const NEED_A_GPU: &[&str] = &["bandwidth", "selftest", "worker"];

/// Every leaf command of the command tree ("model fit" for `model`'s subcommand).
fn leaves() -> Vec<(String, clap::Command)> {
    fn walk(c: &clap::Command, path: &str, out: &mut Vec<(String, clap::Command)>) {
        for s in c.get_subcommands() {
            let p = if path.is_empty() {
                s.get_name().to_string()
            } else {
                format!("{path} {}", s.get_name())
            };
            if s.has_subcommands() {
                walk(s, &p, out);
            } else {
                out.push((p, s.clone()));
            }
        }
    }
    let mut out = vec![];
    walk(&verifybench::cli::Cli::command(), "", &mut out);
    out
}

/// The commands that follow the convention.
fn covered() -> Vec<(String, clap::Command)> {
    leaves()
        .into_iter()
        .filter(|(n, _)| !EXEMPT.iter().any(|(e, _)| e == n))
        .collect()
}

fn argv(name: &str) -> Vec<String> {
    name.split(' ').map(String::from).collect()
}

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

/// One successful run of a command: its arguments, and the export flag whose file must hold
/// what `--format json` prints (None: the command has no `--export-json`).
struct Case {
    args: Vec<String>,
    export: Option<&'static str>,
}

/// A committed collective record measured on two GPUs (model fit leaves modeled records out).
fn measured_collective() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("results/h200x2/collective-allreduce-default-threads.json")
}

fn verify_file(d: &Path, name: &str) -> PathBuf {
    let p = d.join(name);
    vb().args([
        "verify",
        "--backend",
        "model",
        "--tp",
        "2",
        "-q",
        "--export-json",
    ])
    .arg(&p)
    .assert()
    .success();
    p
}

/// The run of `name` (fresh files in `d`, `n` telling runs apart), or None for a command that
/// needs a GPU. A command missing here fails the test.
fn case(name: &str, d: &Path, n: usize) -> Option<Case> {
    let v = |x: &[&str]| x.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    let c = match name {
        "plan" => Case {
            args: v(&["plan", "--tp", "2"]),
            export: None,
        },
        "verify" => Case {
            args: v(&["verify", "--backend", "model", "--tp", "2", "-n", "5"]),
            export: Some("--export-json"),
        },
        "collective" => Case {
            args: v(&[
                "collective",
                "--backend",
                "model",
                "--gpus",
                "2",
                "-b",
                "8K",
                "-e",
                "64K",
            ]),
            export: Some("--export-json"),
        },
        "sweep" => {
            let mut args = v(&[
                "sweep",
                "--debug-mode",
                "--tp",
                "2",
                "-L",
                "NCCL_PROTO=LL,Simple",
                "--rounds",
                "1",
                "--results",
            ]);
            args.push(s(&d.join(format!("sweep{n}.jsonl"))));
            Case {
                args,
                export: Some("--export-json"),
            }
        }
        "breakeven" => Case {
            args: v(&[
                "breakeven",
                "--decode-ms",
                "12",
                "--verify-ms",
                "19",
                "--draft-ms",
                "1.5",
                "--draft-steps",
                "3",
                "--accept-length",
                "2.5",
            ]),
            export: None,
        },
        "env" => Case {
            args: v(&["env"]),
            export: None,
        },
        "inspect" => Case {
            args: vec![
                "inspect".into(),
                "--pid".into(),
                std::process::id().to_string(),
            ],
            export: None,
        },
        "model fit" => {
            let mut args = v(&["model", "fit"]);
            args.push(s(&measured_collective()));
            Case {
                args,
                // the profile file is what model fit writes
                export: Some("-o"),
            }
        }
        "model validate" => {
            // 6 sizes of the public 8x RTX 5090 table (tests/data/public-nccl/S01), its header
            // lines as published.
            let f = d.join(format!("nt{n}.txt"));
            let src = std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/data/public-nccl/S01_aikitoria_8x5090_p2p.txt"
            ))
            .unwrap();
            let lines: Vec<&str> = src.lines().collect();
            std::fs::write(
                &f,
                format!(
                    "{}\n{}\n",
                    lines[15..21].join("\n"),
                    lines[31..37].join("\n")
                ),
            )
            .unwrap();
            let mut args = v(&["model", "validate", "--link-gbps", "63", "--nccl-tests"]);
            args.push(s(&f));
            Case { args, export: None }
        }
        "model fit-cycle" => Case {
            args: v(&[
                "model",
                "fit-cycle",
                concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/tests/data/published-spec-runs.json"
                ),
            ]),
            export: None,
        },
        "compare" => {
            let mut args = v(&["compare"]);
            args.push(s(&verify_file(d, &format!("a{n}.json"))));
            args.push(s(&verify_file(d, &format!("b{n}.json"))));
            Case { args, export: None }
        }
        "trace" => Case {
            args: vec![
                "trace".into(),
                concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/tests/data/traces/kimi-tp2-world1-eager-rank-0.trace.json.gz"
                )
                .into(),
            ],
            export: Some("--export-json"),
        },
        "choose" => Case {
            args: v(&["choose", "--backend", "model", "--tp", "8"]),
            // the decision file is what choose keeps
            export: Some("--decision"),
        },
        "explain" => Case {
            args: v(&["explain", "--verify-ms", "30", "--gpus", "8"]),
            export: Some("--export-json"),
        },
        _ if NEED_A_GPU.contains(&name) => return None,
        _ => panic!("no case for `verifybench {name}`: add one to tests/it/cli_output.rs"),
    };
    Some(c)
}

fn run(args: &[String], extra: &[String]) -> std::process::Output {
    vb().args(args).args(extra).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn every_command_that_prints_a_result_has_format_and_quiet() {
    let names: Vec<String> = leaves().into_iter().map(|(n, _)| n).collect();
    for (e, _) in EXEMPT {
        assert!(names.iter().any(|n| n == e), "exempt `{e}` is no command");
    }
    for (name, c) in covered() {
        let format = c
            .get_arguments()
            .find(|a| a.get_long() == Some("format"))
            .unwrap_or_else(|| panic!("`{name}` has no --format"));
        let values: Vec<String> = format
            .get_possible_values()
            .iter()
            .map(|p| p.get_name().to_string())
            .collect();
        assert!(
            values.starts_with(&["table".to_string(), "json".to_string()]),
            "`{name} --format`: {values:?}"
        );
        assert_eq!(
            format.get_default_values(),
            ["table"],
            "`{name} --format` defaults to table"
        );
        let quiet = c
            .get_arguments()
            .find(|a| a.get_long() == Some("quiet"))
            .unwrap_or_else(|| panic!("`{name}` has no --quiet"));
        assert_eq!(quiet.get_short(), Some('q'), "`{name}`: -q is --quiet");
        // --help shows both
        let help = vb().args(argv(&name)).arg("--help").output().unwrap();
        let h = text(&help.stdout);
        assert!(
            h.contains("--format <FORMAT>") && h.contains("-q, --quiet"),
            "`{name} --help`:\n{h}"
        );
    }
}

#[test]
fn a_bad_format_exits_2_with_one_line_naming_the_flag() {
    for (name, c) in covered() {
        let markdown = c
            .get_arguments()
            .find(|a| a.get_long() == Some("format"))
            .unwrap()
            .get_possible_values()
            .iter()
            .any(|p| p.get_name() == "markdown");
        let mut bad = vec!["yaml"];
        if !markdown {
            bad.push("markdown");
        }
        for b in bad {
            let out = vb()
                .args(argv(&name))
                .args(["--format", b])
                .output()
                .unwrap();
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "`{name} --format {b}`: {err}");
            assert!(
                out.stdout.is_empty(),
                "`{name} --format {b}` printed a result"
            );
            let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error")).collect();
            assert_eq!(errors.len(), 1, "`{name} --format {b}`: {err}");
            assert!(
                errors[0].contains("--format") && errors[0].contains(b),
                "`{name} --format {b}`: {err}"
            );
        }
    }
}

#[test]
fn json_is_one_document_equal_to_the_export_and_quiet_leaves_stderr_empty() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut gpu_only = vec![];
    for (i, (name, _)) in covered().into_iter().enumerate() {
        let Some(c) = case(&name, d, 2 * i) else {
            gpu_only.push(name);
            continue;
        };
        // --format json -q together with the export: stdout is one JSON document, the file's
        let file = d.join(format!("export{i}.json"));
        let mut extra: Vec<String> = vec!["--format".into(), "json".into(), "-q".into()];
        if let Some(flag) = c.export {
            extra.extend([flag.to_string(), s(&file)]);
        }
        let out = run(&c.args, &extra);
        let err = text(&out.stderr);
        assert!(out.status.success(), "`{name}` --format json: {err}");
        assert_eq!(err, "", "`{name} -q` wrote to stderr");
        let printed: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "`{name} --format json`: stdout is not one JSON document ({e}):\n{}",
                text(&out.stdout)
            )
        });
        if c.export.is_some() {
            let written: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
            assert_eq!(
                printed, written,
                "`{name} --format json` differs from its export"
            );
        }
        // the table, quietly: a result on stdout, nothing on stderr
        let c = case(&name, d, 2 * i + 1).unwrap();
        let mut extra: Vec<String> = vec!["-q".into()];
        if c.export == Some("-o") {
            // model fit's profile file is not optional
            extra.extend(["-o".into(), s(&d.join(format!("export{i}.table.json")))]);
        }
        let out = run(&c.args, &extra);
        assert!(out.status.success(), "`{name} -q`: {}", text(&out.stderr));
        assert_eq!(text(&out.stderr), "", "`{name} -q` wrote to stderr");
        let table = text(&out.stdout);
        assert!(
            !table.trim().is_empty() && serde_json::from_str::<Value>(&table).is_err(),
            "`{name} -q` prints its table: {table}"
        );
    }
    assert_eq!(gpu_only, NEED_A_GPU, "the commands checked on a GPU only");
}

#[test]
fn quiet_drops_the_notes_and_keeps_the_result() {
    // -b 10 is rounded down to whole elements: a note on stderr, which -q drops
    let args: Vec<String> = [
        "collective",
        "--backend",
        "model",
        "--gpus",
        "2",
        "-b",
        "10",
        "-e",
        "8K",
    ]
    .map(String::from)
    .to_vec();
    let loud = run(&args, &[]);
    assert!(loud.status.success());
    assert!(
        text(&loud.stderr).contains("rounded down to 8"),
        "{}",
        text(&loud.stderr)
    );
    let quiet = run(&args, &["--quiet".into()]);
    assert!(quiet.status.success());
    assert_eq!(text(&quiet.stderr), "");
    assert_eq!(
        text(&quiet.stdout),
        text(&loud.stdout),
        "-q changes stderr only"
    );
    // errors are still printed under -q
    let bad = run(&args, &["-q".into(), "--fresh-runs".into(), "0".into()]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("--fresh-runs"));
}

#[test]
fn markdown_is_what_export_markdown_writes() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["verify", "collective"] {
        let c = case(name, dir.path(), 0).unwrap();
        let file = dir.path().join(format!("{name}.md"));
        let out = run(
            &c.args,
            &[
                "--format".into(),
                "markdown".into(),
                "-q".into(),
                "--export-markdown".into(),
                s(&file),
            ],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        let printed = text(&out.stdout);
        assert!(printed.contains("|---"), "{printed}");
        assert_eq!(printed, std::fs::read_to_string(&file).unwrap());
    }
}

#[test]
fn sweep_json_comes_at_the_end_and_the_header_goes_to_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let c = case("sweep", dir.path(), 0).unwrap();
    let out = run(&c.args, &["--format".into(), "json".into()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let recs: Value = serde_json::from_slice(&out.stdout).unwrap();
    // the baseline and the two points, one verify record each
    assert_eq!(recs.as_array().map(Vec::len), Some(3), "{recs}");
    let err = text(&out.stderr);
    assert!(err.contains("# verifybench sweep:"), "{err}");
    assert!(err.contains("round 1"), "the per-point lines: {err}");
}
