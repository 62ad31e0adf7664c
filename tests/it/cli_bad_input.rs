//! Bad input that used to pass (issue 28 item 8): each case exits 2 with a message that says
//! what the file or value is and what to give instead; files the tool writes follow the umask.

use std::path::Path;

use crate::common::{self, vb};

/// Runs `args` (in `dir` when given, with `env` added) and returns stderr after checking the
/// exit code is 2 and stderr holds every one of `wants`. (clap's refusals end with a "For more
/// information" line, so the whole stderr is searched rather than its last line.)
fn exit2(dir: Option<&Path>, env: &[(&str, &str)], args: &[&str], wants: &[&str]) -> String {
    let mut c = vb();
    if let Some(d) = dir {
        c.current_dir(d);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    for w in wants {
        assert!(err.contains(w), "{args:?}: stderr lacks '{w}': {err}");
    }
    err
}

/// A modeled verify export of 2 ranks written to `dir/name` (cheap: no GPU).
fn verify_export(dir: &Path, name: &str) {
    vb().current_dir(dir)
        .args([
            "verify",
            "--backend",
            "model",
            "--gpus",
            "2",
            "-n",
            "5",
            "-w",
            "1",
        ])
        .args(["-q", "--export-json", name])
        .assert()
        .success();
}

#[test]
fn report_refuses_out_of_range_cycle_flags_even_without_a_break_even() {
    let dir = tempfile::tempdir().unwrap();
    verify_export(dir.path(), "v.json");
    let d = Some(dir.path());
    exit2(
        d,
        &[],
        &["report", "v.json", "-o", "out", "--decode-ms", "0"],
        &["--decode-ms 0", "greater than 0"],
    );
    exit2(
        d,
        &[],
        &["report", "v.json", "-o", "out", "--draft-steps", "100"],
        &["--draft-steps 100", "give 1 to 64"],
    );
    exit2(
        d,
        &[],
        &["report", "v.json", "-o", "out", "--draft-steps", "0"],
        &["--draft-steps 0", "give 1 to 64"],
    );
    // nothing was written: the refusal comes before any file
    assert!(!dir.path().join("out").exists());
    // a valid value is accepted (the report then renders without a break-even: no decode time)
    vb().current_dir(dir.path())
        .args(["report", "v.json", "-o", "out", "--draft-steps", "3"])
        .assert()
        .success();
}

#[test]
fn zero_iterations_and_zero_timeout_are_refused() {
    for cmd in ["verify", "collective"] {
        exit2(
            None,
            &[],
            &[cmd, "--backend", "model", "--gpus", "2", "-n", "0"],
            &["--iters", "0 timed iterations", "give 1 or more"],
        );
        exit2(
            None,
            &[],
            &[cmd, "--backend", "model", "--gpus", "2", "--timeout", "0"],
            &["--timeout", "greater than 0", "give e.g. 60"],
        );
    }
    exit2(
        None,
        &[],
        &[
            "verify",
            "--backend",
            "model",
            "--gpus",
            "2",
            "--timeout=-5",
        ],
        &["--timeout"],
    );
}

#[test]
fn a_swept_variable_set_in_the_environment_is_refused() {
    let err = exit2(
        None,
        &[("NCCL_PROTO", "Simple")],
        &[
            "sweep",
            "--tp",
            "2",
            "--debug-mode",
            "-L",
            "NCCL_PROTO=LL,LL128",
        ],
        &[
            "NCCL_PROTO=Simple is set in this environment",
            "(defaults)",
            "env -u NCCL_PROTO",
        ],
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn sweeping_nccl_settings_over_compute_warns() {
    let dir = tempfile::tempdir().unwrap();
    let out = vb()
        .current_dir(dir.path())
        .env_remove("NCCL_PROTO")
        .args([
            "sweep",
            "--tp",
            "2",
            "--debug-mode",
            "-n",
            "5",
            "--rounds",
            "1",
        ])
        .args(["--mode", "compute", "-L", "NCCL_PROTO=LL,Simple"])
        .args(["--results", "r.jsonl"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: --mode compute runs no collective")
            && err.contains("--mode comm or --mode full"),
        "{err}"
    );
    // and comm mode has no such warning
    let out = vb()
        .current_dir(dir.path())
        .env_remove("NCCL_PROTO")
        .args([
            "sweep",
            "--tp",
            "2",
            "--debug-mode",
            "-n",
            "5",
            "--rounds",
            "1",
        ])
        .args(["--mode", "comm", "-L", "NCCL_PROTO=LL,Simple"])
        .args(["--results", "r2.jsonl"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("--mode compute runs no collective"), "{err}");
}

/// nccl-tests 2.19's table layout (util.cu), numbers written for this test.
fn nccl_tests_output(graph: u32) -> String {
    format!(
        "\
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 2 minBytes 8192 maxBytes 8192 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: {graph} unalign: 0
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
        8192          4096  bfloat16     sum      -1     6.50    1.26    1.26       0     6.42    1.28    1.28       0
# Out of bounds values : 0 OK
"
    )
}

#[test]
fn compare_refuses_one_file_the_same_file_twice_and_two_runs_of_one_mode() {
    let dir = tempfile::tempdir().unwrap();
    let d = Some(dir.path());
    verify_export(dir.path(), "v.json");
    vb().current_dir(dir.path())
        .args([
            "verify",
            "--backend",
            "model",
            "--gpus",
            "2",
            "-n",
            "5",
            "-w",
            "1",
        ])
        .args(["--graph", "off", "-q", "--export-json", "eager.json"])
        .assert()
        .success();
    exit2(
        d,
        &[],
        &["compare", "eager.json"],
        &[
            "holds one verify record with one launch mode",
            "give a second results file",
        ],
    );
    // one record with eager and graph runs is compared with itself (eager - graph)
    vb().current_dir(dir.path())
        .args(["compare", "v.json"])
        .assert()
        .success();
    exit2(
        d,
        &[],
        &["compare", "v.json", "./v.json"],
        &["given twice", "give each results file once"],
    );
    vb().current_dir(dir.path())
        .args([
            "collective",
            "--backend",
            "model",
            "--gpus",
            "2",
            "-b",
            "8K",
            "-e",
            "8K",
        ])
        .args(["-d", "bf16", "-q", "--export-json", "c.json"])
        .assert()
        .success();
    std::fs::write(dir.path().join("g.txt"), nccl_tests_output(20)).unwrap();
    std::fs::write(dir.path().join("g2.txt"), nccl_tests_output(20)).unwrap();
    exit2(
        d,
        &[],
        &[
            "compare",
            "--nccl-tests",
            "g.txt",
            "--nccl-tests",
            "g.txt",
            "c.json",
        ],
        &["'g.txt' is given twice", "one per launch mode"],
    );
    exit2(
        d,
        &[],
        &[
            "compare",
            "--nccl-tests",
            "g.txt",
            "--nccl-tests",
            "g2.txt",
            "c.json",
        ],
        &[
            "'g2.txt' is a second graph run",
            "one nccl-tests output per launch mode",
        ],
    );
    // one output per mode is accepted
    vb().current_dir(dir.path())
        .args(["compare", "--nccl-tests", "g.txt", "c.json"])
        .assert()
        .success();
}

#[test]
fn truncated_and_misshapen_json_say_what_they_are_in_json_terms() {
    let dir = tempfile::tempdir().unwrap();
    let d = Some(dir.path());
    let p = |n: &str| dir.path().join(n);
    // a results file cut short after its first bracket: one line, so "line 1 column 1" alone
    // would read like a bad first character
    std::fs::write(p("t.json"), "[").unwrap();
    let err = exit2(
        d,
        &[],
        &["report", "t.json", "-o", "out"],
        &["'t.json' is truncated", "ends early", "--export-json"],
    );
    assert!(!err.contains("line 1: not JSON"), "{err}");
    // a schedule cut short mid-way
    std::fs::write(p("s.json"), "{\"model\": {\"name\": \"x\",").unwrap();
    exit2(
        d,
        &[],
        &["verify", "--backend", "model", "--schedule", "s.json"],
        &["schedule file 's.json' is truncated", "plan --format json"],
    );
    // a schedule of the wrong shape: JSON words, no Rust type names
    std::fs::write(p("a.json"), "[1, 2]").unwrap();
    let err = exit2(
        d,
        &[],
        &["verify", "--backend", "model", "--schedule", "a.json"],
        &["an array, expected a JSON object", "plan --format json"],
    );
    assert!(
        !err.contains("struct") && !err.contains("ScheduleFile"),
        "{err}"
    );
}

#[test]
fn huge_numbers_are_printed_in_scientific_notation() {
    let err = exit2(
        None,
        &[],
        &[
            "breakeven",
            "--decode-ms",
            "1e308",
            "--verify-ms",
            "19",
            "--draft-steps",
            "3",
            "--accept-length",
            "2.5",
        ],
        &["--decode-ms 1e308:", "at most 1000000"],
    );
    // 1e308 written out has 309 digits; the message stays short
    assert!(err.len() < 200, "{err}");
}

#[test]
fn exported_files_follow_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    verify_export(dir.path(), "v.json");
    let mode = std::fs::metadata(dir.path().join("v.json"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    // the test process's umask is inherited by the child: 0666 less it, as `>` would give
    let want = 0o666 & !verifybench::util::umask();
    assert_eq!(mode, want, "{mode:o} vs {want:o}");
    // whatever the umask, a temporary file's 0600 would differ from that unless the umask is
    // 0066 or more: check the case that matters on the common 022 umask
    if verifybench::util::umask() & 0o044 == 0 {
        assert_ne!(mode & 0o044, 0, "group/other may read it: {mode:o}");
    }
    let _ = common::listing(dir.path());
}
