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
            &["-n/--iters 0", "give 1 to 10000000 timed iterations"],
        );
        exit2(
            None,
            &[],
            &[cmd, "--backend", "model", "--gpus", "2", "--timeout", "0"],
            &["--timeout 0", "greater than 0", "e.g. 60"],
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
            "'eager.json' is the only results file",
            "give a second results file",
        ],
    );
    // one record with eager and graph runs too: its table would be the base alone (each mode
    // against itself); its two modes are in its own report
    exit2(
        d,
        &[],
        &["compare", "v.json"],
        &[
            "a table of the base alone",
            "give a second results file",
            "verifybench report v.json",
        ],
    );
    vb().current_dir(dir.path())
        .args(["compare", "v.json", "eager.json"])
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

#[test]
fn config_fields_beyond_any_real_model_are_refused_not_aborted() {
    let dir = tempfile::tempdir().unwrap();
    let d = Some(dir.path());
    let base = || {
        serde_json::json!({"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 1024,
            "vocab_size": 8000, "num_attention_heads": 8, "intermediate_size": 2048})
    };
    for (key, value, says) in [
        // 10^12 layers used to ask for 10^12 bytes and abort (SIGABRT)
        (
            "num_hidden_layers",
            serde_json::json!(1_000_000_000_000u64),
            "at most 1024",
        ),
        (
            "num_hidden_layers",
            serde_json::json!(100_000),
            "at most 1024",
        ),
        (
            "hidden_size",
            serde_json::json!(1u64 << 40),
            "at most 131072",
        ),
    ] {
        let mut c = base();
        c[key] = value;
        std::fs::write(dir.path().join("config.json"), c.to_string()).unwrap();
        exit2(
            d,
            &[],
            &["plan", "--model-config", "config.json"],
            &[
                "model config 'config.json'",
                key,
                says,
                "more than a real model has",
            ],
        );
    }
}

#[test]
fn files_of_the_wrong_kind_are_named_as_what_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let d = Some(dir.path());
    verify_export(dir.path(), "v.json");
    vb().current_dir(dir.path())
        .args(["plan", "--format", "json", "--tp", "2"])
        .output()
        .map(|o| std::fs::write(dir.path().join("plan.json"), o.stdout).unwrap())
        .unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 1024, "vocab_size": 8000, "num_attention_heads": 8, "intermediate_size": 2048}"#,
    )
    .unwrap();
    // a results record and a plan given as a config
    exit2(
        d,
        &[],
        &["plan", "--model-config", "v.json"],
        &["'v.json'", "'verify'", "not a model's config.json"],
    );
    exit2(
        d,
        &[],
        &["plan", "--model-config", "plan.json"],
        &["'plan.json'", "a schedule", "--schedule"],
    );
    // a config given as a result, to compare, report and sweep --resume
    for args in [
        &["compare", "config.json", "v.json"][..],
        &["report", "config.json", "-o", "out"][..],
    ] {
        exit2(
            d,
            &[],
            args,
            &["'config.json' is a model's config.json", "--model-config"],
        );
    }
    exit2(
        d,
        &[],
        &[
            "sweep",
            "--backend",
            "model",
            "--gpus",
            "2",
            "-L",
            "NCCL_PROTO=LL",
            "--resume",
            "config.json",
        ],
        &[
            "'config.json' is a model's config.json",
            "not a sweep's results file",
        ],
    );
    // not text at all, empty, compressed
    std::fs::write(dir.path().join("bin.json"), [0xff, 0xfe, 0x00, 0x41]).unwrap();
    exit2(
        d,
        &[],
        &["plan", "--model-config", "bin.json"],
        &[
            "model config 'bin.json' is not text",
            "give the model's Hugging Face config.json",
        ],
    );
    exit2(
        d,
        &[],
        &["report", "bin.json", "-o", "out"],
        &["'bin.json' is not text", "give the --export-json"],
    );
    std::fs::write(dir.path().join("empty.json"), "").unwrap();
    exit2(
        d,
        &[],
        &["compare", "empty.json", "v.json"],
        &["'empty.json' is empty (0 bytes)", "give the --export-json"],
    );
}

#[test]
fn truncated_and_empty_traces_and_resume_files_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let d = Some(dir.path());
    // a 0-byte file named .gz is empty, not "no NCCL line"
    std::fs::write(dir.path().join("t.json.gz"), "").unwrap();
    exit2(
        d,
        &[],
        &["trace", "t.json.gz"],
        &["'t.json.gz' is empty (0 bytes)", "profiler trace"],
    );
    // a gzip cut short: the public HTA trace's first 20,000 compressed bytes
    let whole = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/traces/hta/df_index_resolver.json.gz"),
    )
    .unwrap();
    std::fs::write(dir.path().join("cut.json.gz"), &whole[..20_000]).unwrap();
    let err = exit2(
        d,
        &[],
        &["trace", "cut.json.gz"],
        &["'cut.json.gz'", "truncated gzip file"],
    );
    assert!(
        !err.contains("incomplete deflate stream:") || err.contains("truncated"),
        "{err}"
    );
    // a sweep's results file cut mid-line, its only line
    std::fs::write(dir.path().join("r.jsonl"), "{\"schema_version\": 1, \"sou").unwrap();
    exit2(
        d,
        &[],
        &[
            "sweep",
            "--backend",
            "model",
            "--gpus",
            "2",
            "-L",
            "NCCL_PROTO=LL",
            "--resume",
            "r.jsonl",
        ],
        &["'r.jsonl' is truncated", "line 1 ends early"],
    );
}

#[test]
fn explain_takes_a_trace_given_as_an_nccl_log_for_what_it_is() {
    let trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/traces/kimi-tp1-world1-eager-rank-0.trace.json.gz");
    let dir = tempfile::tempdir().unwrap();
    // decompressed, as a user would give it
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(&trace).unwrap()),
        &mut text,
    )
    .unwrap();
    std::fs::write(dir.path().join("t.json"), text).unwrap();
    exit2(
        Some(dir.path()),
        &[],
        &["explain", "--nccl-log", "t.json", "--verify-ms", "20"],
        &[
            "--nccl-log 't.json' is a JSON document",
            "give traces to --trace",
        ],
    );
}

#[test]
fn observed_counts_too_large_are_called_too_large() {
    exit2(
        None,
        &[],
        &["explain", "--observed", "1e9x1ms", "--verify-ms", "20"],
        &["the count 1e9 is outside 1..="],
    );
}

#[test]
fn a_global_tree_point_of_a_model_sweep_points_to_the_per_function_form() {
    let dir = tempfile::tempdir().unwrap();
    let out = vb()
        .current_dir(dir.path())
        .args([
            "sweep",
            "--backend",
            "model",
            "--gpus",
            "8",
            "-L",
            "NCCL_ALGO=Tree",
            "--format",
            "json",
        ])
        .args(["--results", "r.jsonl"])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("NCCL_ALGO=ring;allreduce:tree"), "{text}");
}

#[test]
fn a_link_beside_a_profile_is_refused() {
    // --profile replaces the whole link model: a --link beside it was dropped without a word
    // (explain; verify with the default link spelled out), so the two are refused together as
    // other flags that exclude each other are; a sweep hands its children --profile alone
    // the profile fitted on the H200 pair, committed with its results
    let prof =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("results/h200x2/model-profile-h200x2.json");
    let p = prof.to_str().unwrap();
    for (cmd, link) in [
        (
            &["verify", "--backend", "model", "--gpus", "2"][..],
            "nvlink-h100",
        ),
        (
            &["verify", "--backend", "model", "--gpus", "2"][..],
            "pcie-gen5",
        ),
        (
            &["collective", "--backend", "model", "--gpus", "2"][..],
            "nvlink-h100",
        ),
        (
            &["sweep", "--debug-mode", "--tp", "2", "-L", "NCCL_PROTO=LL"][..],
            "nvlink-h100",
        ),
        (&["explain", "--observed", "122x0.2ms"][..], "nvlink-h100"),
    ] {
        let mut args = cmd.to_vec();
        args.extend(["--link", link, "--profile", p]);
        exit2(
            None,
            &[],
            &args,
            &["'--link <LINK>' cannot be used with '--profile <FILE>'"],
        );
    }
    // the profile alone prices the sweep's points: its children get no --link
    let dir = tempfile::tempdir().unwrap();
    vb().current_dir(dir.path())
        .args([
            "sweep",
            "--backend",
            "model",
            "--tp",
            "2",
            "-L",
            "NCCL_PROTO=LL,Simple",
        ])
        .args(["--rounds", "1", "-q", "--profile", p])
        .assert()
        .success();
}

#[test]
fn a_results_file_without_a_verify_record_is_named_by_what_it_holds() {
    // one collective record: "holds 1 'collective' record and no verify record", not "only 1
    // record" (as if a second would do)
    let dir = tempfile::tempdir().unwrap();
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
        .args(["-q", "--export-json", "c.json"])
        .assert()
        .success();
    let err = exit2(
        Some(dir.path()),
        &[],
        &[
            "breakeven",
            "--from",
            "c.json",
            "--decode-ms",
            "20",
            "--draft-ms",
            "2",
            "--draft-steps",
            "3",
            "--accept-length",
            "2",
        ],
        &[
            "'c.json' holds 1 'collective' record and no verify record",
            "from `verifybench verify`",
        ],
    );
    assert!(!err.contains("only"), "{err}");
}

#[test]
fn binary_files_are_called_not_text_by_every_reader() {
    // bytes that are not UTF-8, given where text is read: each reader names the file, says it
    // is not text and what to give (never "stream did not contain valid UTF-8")
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bin.txt"),
        [0x4e, 0x43, 0xff, 0xfe, 0x00, 0x80],
    )
    .unwrap();
    for (args, give) in [
        (
            &[
                "model",
                "validate",
                "--link-gbps",
                "63",
                "--nccl-tests",
                "bin.txt",
            ][..],
            "the text output of nccl-tests",
        ),
        (
            &["verify", "--backend", "model", "--schedule", "bin.txt"][..],
            "a schedule",
        ),
        (&["plan", "--model-config", "bin.txt"][..], "config.json"),
        (
            &[
                "collective",
                "--backend",
                "model",
                "--gpus",
                "2",
                "--profile",
                "bin.txt",
            ][..],
            "model fit",
        ),
    ] {
        let err = exit2(
            Some(dir.path()),
            &[],
            args,
            &["'bin.txt' is not text", give],
        );
        assert!(!err.contains("valid UTF-8"), "{args:?}: {err}");
    }
}

#[test]
fn a_coll_log_with_junk_and_half_lines_keeps_its_two_processes() {
    // the public torchtitan#1369 log (7 calls of 2 processes, hopper01:191369 and :191370)
    // with a line of junk before it, its 2nd line also written cut after `sendbuff 0x7f9`, and
    // its 4th line glued to junk (`99hopper01:...`): still 2 processes; the half-line and the
    // glued line are counted and named (file lines 3 and 6), never joined into a process id;
    // 7 - 1 glued = 6 calls read
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/nccl-coll-public/pytorch-torchtitan-issue1369_tp2.log"),
    )
    .unwrap();
    let mut out = vec!["garbage ### not a log line".to_string()];
    for (i, l) in text.lines().enumerate() {
        if i == 1 {
            let cut = l.find("sendbuff").unwrap() + "sendbuff 0x7f9".len();
            out.push(l[..cut].to_string());
        }
        out.push(if i == 3 {
            format!("99{l}")
        } else {
            l.to_string()
        });
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("junk.log"), out.join("\n") + "\n").unwrap();
    let o = vb()
        .current_dir(dir.path())
        .args(["trace", "--format", "json", "junk.log"])
        .assert()
        .success();
    let v: serde_json::Value = serde_json::from_slice(&o.get_output().stdout).unwrap();
    let d = &v["result"]["data"];
    let procs: Vec<String> = d["sequences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| format!("{}:{}", s["host"].as_str().unwrap(), s["pid"]))
        .collect();
    assert_eq!(procs, ["hopper01:191369", "hopper01:191370"]);
    assert_eq!(d["calls"], 6);
    assert_eq!(d["unreadable_lines"], 2);
    let lines: Vec<u64> = d["unreadable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, [3, 6]);
}

#[test]
fn a_truncated_results_file_is_called_truncated_with_where_it_was_cut() {
    let dir = tempfile::tempdir().unwrap();
    let d = Some(dir.path());
    let p = |n: &str| dir.path().join(n);
    let sweep = |extra: &[&str]| {
        let mut a = vec![
            "sweep",
            "--debug-mode",
            "--tp",
            "2",
            "-L",
            "NCCL_PROTO=LL,Simple",
        ];
        a.extend_from_slice(extra);
        a.push("-q");
        vb().current_dir(dir.path()).args(&a).assert().success();
    };
    sweep(&["--results", "r.jsonl", "--export-json", "e.json"]);
    let lines = std::fs::read_to_string(p("r.jsonl")).unwrap();
    let pretty = std::fs::read_to_string(p("e.json")).unwrap();
    // a whole-file export cut in its middle: where its JSON ends, not "line 1 is not a JSON
    // record" (its first line is a lone bracket)
    std::fs::write(p("cut.json"), &pretty[..pretty.len() / 2]).unwrap();
    // a JSON-lines file whose beginning was cut off: its first line is a record's tail
    std::fs::write(p("head.jsonl"), &lines[lines.len() / 2..]).unwrap();
    for args in [
        vec![
            "sweep",
            "--debug-mode",
            "--tp",
            "2",
            "-L",
            "NCCL_PROTO=LL",
            "--resume",
            "cut.json",
        ],
        vec!["explain", "--observed", "122x0.2ms", "--sweep", "cut.json"],
    ] {
        let err = exit2(
            d,
            &[],
            &args,
            &["'cut.json' is truncated: its JSON ends early, at line"],
        );
        assert!(!err.contains("not a JSON record"), "{err}");
    }
    exit2(
        d,
        &[],
        &[
            "sweep",
            "--debug-mode",
            "--tp",
            "2",
            "-L",
            "NCCL_PROTO=LL",
            "--resume",
            "head.jsonl",
        ],
        &["'head.jsonl' is truncated at its start: line 1 holds the end of a record"],
    );
    // text that is no record at all is still called that
    std::fs::write(p("notes.txt"), "hello\nworld\n").unwrap();
    exit2(
        d,
        &[],
        &[
            "sweep",
            "--debug-mode",
            "--tp",
            "2",
            "-L",
            "NCCL_PROTO=LL",
            "--resume",
            "notes.txt",
        ],
        &["'notes.txt' line 1 is not a JSON record"],
    );
}
