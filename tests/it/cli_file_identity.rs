//! Outputs never touch inputs or devices (issue 50), against the binary: every command x every
//! input flag x every output flag, the output being the input itself, a symbolic link to it or
//! a hard link to it: refused with exit 2 naming both flags, the input unchanged, nothing left
//! in the folder. And the outputs that are not regular files: a FIFO and a link to one are
//! written in place (they stay FIFOs), a link to a file is written through (it stays a link),
//! `-` is stdout, and a sweep's results file (appended to, read back) must be a regular file.

use std::path::Path;

use crate::common::{listing, vb};

/// One command: its arguments without the file flags tried, its input flags (`""`: a
/// positional file) with the arguments each needs besides, and its output flags.
struct Case {
    base: &'static [&'static str],
    inputs: &'static [(&'static str, &'static [&'static str])],
    outputs: &'static [&'static str],
}

const VERIFY_INPUTS: &[(&str, &[&str])] = &[
    ("--model-config", &[]),
    ("--schedule", &[]),
    ("--profile", &[]),
    ("--host-gap-from", &[]),
    ("--nccl-lib", &[]),
];

const EXPORTS: &[&str] = &["--export-json", "--export-csv", "--export-markdown"];

const CASES: &[Case] = &[
    Case {
        base: &["verify", "--backend", "model", "--tp", "2", "-q"],
        inputs: VERIFY_INPUTS,
        outputs: &[
            "--export-json",
            "--export-csv",
            "--export-markdown",
            "--export-trace",
        ],
    },
    Case {
        base: &["collective", "--backend", "model", "--gpus", "2", "-q"],
        inputs: &[("--profile", &[]), ("--nccl-lib", &[])],
        outputs: EXPORTS,
    },
    Case {
        base: &[
            "sweep",
            "--debug-mode",
            "--tp",
            "2",
            "-L",
            "NCCL_PROTO=LL",
            "-q",
        ],
        inputs: &[
            ("--model-config", &[]),
            ("--schedule", &[]),
            ("--profile", &[]),
            ("--host-gap-from", &[]),
            ("--nccl-lib", &[]),
            ("--resume", &[]),
        ],
        outputs: &[
            "--results",
            "--export-json",
            "--export-csv",
            "--export-markdown",
            "--export-table-markdown",
            "--export-table-csv",
        ],
    },
    Case {
        base: &[
            "worker",
            "--rank",
            "0",
            "--world-size",
            "2",
            "--rendezvous",
            "127.0.0.1:1",
            "--timeout",
            "1",
        ],
        inputs: &[
            ("--model-config", &[]),
            ("--schedule", &[]),
            ("--host-gap-from", &[]),
            ("--nccl-lib", &[]),
            ("--rendezvous-token-file", &[]),
        ],
        outputs: EXPORTS,
    },
    Case {
        base: &["explain", "--observed", "122x0.2ms"],
        inputs: &[
            ("--trace", &[]),
            ("--server-log", &[]),
            ("--nccl-log", &[]),
            ("--sweep", &[]),
            ("--model-config", &[]),
            ("--profile", &[]),
        ],
        outputs: &["--export-json"],
    },
    Case {
        base: &["trace"],
        inputs: &[
            ("", &[]),
            ("--nccl-log", &["other.json"]),
            ("--model-config", &["other.json", "--against-plan"]),
            ("--schedule", &["other.json", "--against-plan"]),
        ],
        outputs: &["--export-json", "--export-schedule"],
    },
    Case {
        base: &["model", "fit"],
        inputs: &[
            ("", &[]),
            ("--nccl-tests", &[]),
            ("--base-profile", &["other.json"]),
        ],
        outputs: &["-o"],
    },
    Case {
        base: &["selftest"],
        inputs: &[("--nccl-lib", &[])],
        outputs: &["--export-json"],
    },
];

/// How the output names the input.
#[derive(Debug, Clone, Copy)]
enum Same {
    /// The same path, spelled through a folder and back.
    Path,
    Symlink,
    Hardlink,
}

/// The flag as the message names it.
fn named(flag: &str) -> &str {
    match flag {
        "-o" => "-o/--output",
        f => f,
    }
}

/// Runs one case in a fresh folder; an error message when anything is wrong.
fn run(base: &[&str], input: &str, extra: &[&str], output: &str, same: Same) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let content = b"an input that must stay as it is\n";
    std::fs::write(d.join("in.dat"), content).unwrap();
    std::fs::create_dir(d.join("sub")).unwrap();
    let out = match same {
        Same::Path => "sub/../in.dat",
        Same::Symlink => {
            std::os::unix::fs::symlink("in.dat", d.join("link.dat")).unwrap();
            "link.dat"
        }
        Same::Hardlink => {
            std::fs::hard_link(d.join("in.dat"), d.join("hard.dat")).unwrap();
            "hard.dat"
        }
    };
    let before = listing(d);
    let mut args: Vec<&str> = base.to_vec();
    args.extend(extra);
    if !input.is_empty() {
        args.push(input);
    }
    args.extend(["in.dat", output, out]);
    let o = vb().current_dir(d).args(&args).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let line = err
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    let given = if input.is_empty() {
        "given as ".to_string()
    } else {
        format!("given to {input}")
    };
    let mut wrong = vec![];
    if o.status.code() != Some(2)
        || !line.contains(&format!("{} '{out}' is also an input", named(output)))
        || !line.contains(&given)
    {
        wrong.push(format!("exit {:?}: {err}", o.status.code()));
    }
    if std::fs::read(d.join("in.dat")).unwrap() != content {
        wrong.push("the input changed".into());
    }
    if listing(d) != before {
        wrong.push(format!("the folder changed: {:?}", listing(d)));
    }
    let link_kept = match same {
        Same::Symlink => std::fs::symlink_metadata(d.join("link.dat"))
            .unwrap()
            .file_type()
            .is_symlink(),
        _ => true,
    };
    if !link_kept {
        wrong.push("the link was replaced".into());
    }
    (!wrong.is_empty()).then(|| format!("{args:?} ({same:?}): {}", wrong.join("; ")))
}

#[test]
fn no_output_of_any_command_replaces_any_input_by_any_name() {
    let mut all = vec![];
    for c in CASES {
        for (input, extra) in c.inputs {
            for output in c.outputs {
                // a sweep appends to the file it resumes: the one pair that may share a file
                if (*input, *output) == ("--resume", "--results") {
                    continue;
                }
                for same in [Same::Path, Same::Symlink, Same::Hardlink] {
                    all.push((c.base, *input, *extra, *output, same));
                }
            }
        }
    }
    assert!(all.len() > 250, "{} cases", all.len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let bad = std::sync::Mutex::new(vec![]);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&(base, input, extra, output, same)) = all.get(i) else {
                    break;
                };
                if let Some(e) = run(base, input, extra, output, same) {
                    bad.lock().unwrap().push(e);
                }
            });
        }
    });
    let bad = bad.into_inner().unwrap();
    assert!(
        bad.is_empty(),
        "{} of {}:\n{}",
        bad.len(),
        all.len(),
        bad.join("\n")
    );
}

#[test]
fn a_file_in_a_folder_given_is_an_input_and_a_report_never_writes_over_its_results() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("traces/r1")).unwrap();
    std::fs::write(d.join("traces/r1/t.json"), "{}").unwrap();
    for args in [
        vec!["trace", "traces", "--export-json", "traces/r1/t.json"],
        vec![
            "explain",
            "--trace",
            "traces",
            "--export-json",
            "traces/r1/t.json",
        ],
    ] {
        crate::common::refused_in(
            Some(d),
            &[],
            &args,
            &["--export-json", "is also an input", "of the folder given"],
        );
        assert_eq!(std::fs::read(d.join("traces/r1/t.json")).unwrap(), b"{}");
    }
    // report -o DIR where a results file is DIR/report.md, or a link to it is
    std::fs::create_dir(d.join("out")).unwrap();
    std::fs::write(d.join("out/report.md"), "results").unwrap();
    crate::common::refused_in(
        Some(d),
        &[],
        &["report", "out/report.md", "-o", "out"],
        &[
            "-o/--out",
            "out/report.md' is also an input",
            "given as RESULTS",
        ],
    );
    std::fs::rename(d.join("out/report.md"), d.join("r.json")).unwrap();
    std::os::unix::fs::symlink("../r.json", d.join("out/verify_time.svg")).unwrap();
    crate::common::refused_in(
        Some(d),
        &[],
        &["report", "r.json", "-o", "out"],
        &["-o/--out", "verify_time.svg' is also an input"],
    );
    assert_eq!(std::fs::read(d.join("r.json")).unwrap(), b"results");
}

/// A FIFO of the test's own at `path`.
fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; mkfifo only creates the node.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// Reads `path` (a FIFO) to its end on a thread.
fn read_on_a_thread(path: &Path) -> std::thread::JoinHandle<String> {
    let p = path.to_path_buf();
    std::thread::spawn(move || std::fs::read_to_string(p).unwrap())
}

#[test]
fn devices_and_fifos_are_written_in_place_and_links_through() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let verify = ["verify", "--backend", "model", "--tp", "2", "-q"];
    // a FIFO, directly and through a link: the export arrives whole, the FIFO stays one
    mkfifo(&d.join("pipe"));
    std::os::unix::fs::symlink("pipe", d.join("to-pipe")).unwrap();
    for out in ["pipe", "to-pipe"] {
        let reader = read_on_a_thread(&d.join("pipe"));
        vb().current_dir(d)
            .args(verify)
            .args(["--export-json", out])
            .assert()
            .success();
        let got = reader.join().unwrap();
        let v: serde_json::Value = serde_json::from_str(&got).unwrap();
        assert!(v.is_array() || v.is_object(), "{got}");
        assert!(std::fs::metadata(d.join("pipe"))
            .unwrap()
            .file_type()
            .is_fifo());
        assert!(std::fs::symlink_metadata(d.join("to-pipe"))
            .unwrap()
            .file_type()
            .is_symlink());
    }
    // a link to a regular file: written through, the link stays
    std::fs::write(d.join("old.json"), "old").unwrap();
    std::os::unix::fs::symlink("old.json", d.join("link.json")).unwrap();
    vb().current_dir(d)
        .args(verify)
        .args(["--export-json", "link.json"])
        .assert()
        .success();
    assert!(std::fs::symlink_metadata(d.join("link.json"))
        .unwrap()
        .file_type()
        .is_symlink());
    let v = crate::common::read_json(&d.join("old.json"));
    assert!(v.is_array() || v.is_object());
    // `-`: the one stream is stdout
    let o = vb()
        .current_dir(d)
        .args(verify)
        .args(["--export-json", "-"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("\"schema_version\""), "{text}");
    // a sweep's results file is appended to and read back: a FIFO and stdout are refused
    for (results, says) in [("pipe", "is a FIFO"), ("-", "is standard output")] {
        crate::common::refused_in(
            Some(d),
            &[],
            &[
                "sweep",
                "--debug-mode",
                "--tp",
                "2",
                "-L",
                "NCCL_PROTO=LL",
                "--results",
                results,
            ],
            &["--results", says, "give a regular file"],
        );
    }
    // a socket is refused before any work
    let _l = std::os::unix::net::UnixListener::bind(d.join("s.sock")).unwrap();
    crate::common::refused_in(
        Some(d),
        &[],
        &[&verify[..], &["--export-json", "s.sock"]].concat(),
        &["--export-json 's.sock' is a socket"],
    );
    assert!(std::fs::metadata(d.join("s.sock"))
        .unwrap()
        .file_type()
        .is_socket());
}
