//! Bounded reads and numbers as the files wrote them (issue 50), through the binary: every
//! file flag refuses a device, a named pipe or a file past its kind's limit before reading it
//! (exit 2, the flag and the limit named); a gzip trace is refused past its limits as it
//! streams; a log's numbers are read whole and checked, and a line that does not fit is quoted,
//! escaped, with its number; a schedule's op sizes and a config's expert counts stay within
//! what real models have. Every run has a deadline, so that a read that never ends fails the
//! test instead of hanging it. (The limits themselves are tested small, through the same code,
//! in the library: `util::read`, `trace::limits`.)

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::vb;

/// Runs `args` in `dir` (at most 60 s) and returns stderr after checking that it exited 2 and
/// that stderr holds every one of `wants`.
fn refused(dir: &Path, args: &[&str], wants: &[&str]) -> String {
    let out = vb()
        .current_dir(dir)
        .args(args)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    for w in wants {
        assert!(err.contains(w), "{args:?}: stderr lacks '{w}': {err}");
    }
    err
}

fn data(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
        .display()
        .to_string()
}

/// A named pipe at `path` that nobody writes: opening it to read would wait forever.
fn fifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only reads it.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// A file of `len` bytes that holds `head` and then a hole (no disk used).
fn sparse(path: &Path, head: &[u8], len: u64) -> String {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(head).unwrap();
    f.set_len(len).unwrap();
    path.display().to_string()
}

/// Each file flag of each command, with `F` where the file goes, and the name its refusal
/// gives the file.
const FILE_FLAGS: &[(&[&str], &str)] = &[
    (&["plan", "--model-config", "F"], "model config 'F'"),
    (
        &[
            "verify",
            "--backend",
            "model",
            "--gpus",
            "2",
            "--schedule",
            "F",
        ],
        "schedule file 'F'",
    ),
    (
        &[
            "verify",
            "--backend",
            "model",
            "--gpus",
            "2",
            "--profile",
            "F",
        ],
        "profile file 'F'",
    ),
    (
        &[
            "verify",
            "--backend",
            "model",
            "--gpus",
            "2",
            "--host-gap-from",
            "F",
        ],
        "schedule file 'F'",
    ),
    (&["report", "F", "-o", "out"], "results file 'F'"),
    (
        &["breakeven", "--decode-ms", "12", "--from", "F"],
        "results file 'F'",
    ),
    (
        &[
            "breakeven",
            "--decode-ms",
            "12",
            "--verify-ms",
            "20",
            "--accept-from-log",
            "F",
        ],
        "--accept-from-log 'F'",
    ),
    (
        &["explain", "--verify-ms", "20", "--server-log", "F"],
        "--server-log 'F'",
    ),
    (
        &["explain", "--verify-ms", "20", "--nccl-log", "F"],
        "--nccl-log 'F'",
    ),
    (
        &["model", "fit", "-o", "p.json", "--nccl-tests", "F"],
        "--nccl-tests file 'F'",
    ),
    (&["model", "fit", "-o", "p.json", "F"], "results file 'F'"),
    (&["trace", "F"], "trace 'F'"),
    (
        &[
            "sweep",
            "--tp",
            "2",
            "--debug-mode",
            "-L",
            "NCCL_PROTO=LL",
            "--resume",
            "F",
        ],
        // refused by the sweep's own output check first: the file is appended to as well
        "--resume 'F'",
    ),
];

fn with(args: &[&str], f: &str) -> Vec<String> {
    args.iter()
        .map(|a| {
            if *a == "F" {
                f.to_string()
            } else {
                a.to_string()
            }
        })
        .collect()
}

#[test]
fn every_file_flag_refuses_devices_and_pipes_before_reading_them() {
    let dir = tempfile::tempdir().unwrap();
    let pipe = dir.path().join("pipe.json");
    fifo(&pipe);
    let pipe = pipe.display().to_string();
    for (args, name) in FILE_FLAGS {
        for (f, what) in [
            ("/dev/zero", "a character device"),
            ("/dev/urandom", "a character device"),
            (pipe.as_str(), "a named pipe (FIFO)"),
        ] {
            let args = with(args, f);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let name = name.replace('F', f);
            // `NAME 'F' is a character device, not a regular file` from the reader; the one
            // file a command also appends to is refused by its output check, in its words
            let what = if name.starts_with("--resume") && what.contains("FIFO") {
                "a FIFO"
            } else {
                what
            };
            refused(dir.path(), &args, &[&format!("{name} is {what}")]);
        }
    }
    // the token file's own check (it must be a file of mode 0600) says it first
    for f in ["/dev/zero", pipe.as_str()] {
        let args = [
            "worker",
            "--rank",
            "0",
            "--world-size",
            "2",
            "--rendezvous",
            "127.0.0.1:9",
            "--rendezvous-token-file",
            f,
        ];
        refused(dir.path(), &args, &[&format!("'{f}' is not a file")]);
    }
    // a trace folder is searched for regular files only: the pipe beside a trace is not opened
    let traces = dir.path().join("traces");
    std::fs::create_dir(&traces).unwrap();
    fifo(&traces.join("rank-1.json"));
    std::fs::copy(
        data("traces/kimi-tp1-world1-eager-rank-0.trace.json.gz"),
        traces.join("rank-0.trace.json.gz"),
    )
    .unwrap();
    vb().current_dir(dir.path())
        .args(["trace", "traces"])
        .timeout(Duration::from_secs(60))
        .assert()
        .success();
}

#[test]
fn a_file_past_its_kinds_limit_is_refused_by_its_size_with_the_limit_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let token = d.join("token");
    std::fs::write(&token, "a".repeat(4097)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let t = token.display().to_string();
    let worker = [
        "worker",
        "--rank",
        "0",
        "--world-size",
        "2",
        "--rendezvous",
        "127.0.0.1:9",
        "--rendezvous-token-file",
        &t,
    ];
    refused(
        d,
        &worker,
        &["is 4097 bytes, more than the 4 KiB a rendezvous token file may be"],
    );
    let gib = 1u64 << 30;
    let cases: Vec<(Vec<String>, String)> = vec![
        (
            with(
                &["plan", "--model-config", "F"],
                &sparse(&d.join("c.json"), b"{", (4 << 20) + 1),
            ),
            "is 4194305 bytes, more than the 4 MiB a model config may be".into(),
        ),
        (
            with(
                &[
                    "verify",
                    "--backend",
                    "model",
                    "--gpus",
                    "2",
                    "--schedule",
                    "F",
                ],
                &sparse(&d.join("s.json"), b"{", (256 << 20) + 1),
            ),
            "more than the 256 MiB a schedule file may be".into(),
        ),
        (
            with(
                &["report", "F", "-o", "out"],
                &sparse(&d.join("r.json"), b"[", (256 << 20) + 1),
            ),
            "more than the 256 MiB a results file may be".into(),
        ),
        (
            with(
                &["explain", "--verify-ms", "20", "--server-log", "F"],
                &sparse(&d.join("server.log"), b"INFO", gib + 1),
            ),
            "is 1073741825 bytes, more than the 1 GiB a server log may be".into(),
        ),
        (
            with(
                &["trace", "F"],
                &sparse(&d.join("coll.log"), b"x NCCL INFO", gib + 1),
            ),
            "more than the 1 GiB an NCCL log may be".into(),
        ),
        // a plain trace past the 32 GiB a trace may hold: refused by its size, unread
        (
            with(
                &["trace", "F"],
                &sparse(&d.join("t.json"), b"{", (32 * gib) + 1),
            ),
            "it holds more than 32 GiB of JSON, the most one trace file may hold".into(),
        ),
    ];
    for (args, want) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        refused(d, &args, &[&want]);
    }
}

/// A gzip trace of one string of 8 MiB (8 KB of gzip): refused where the string passes 1 MiB,
/// in a fraction of a second, instead of holding the string (2.1 GB for a 1 GB string before).
#[test]
fn a_gzip_trace_of_one_long_string_is_refused_at_the_strings_limit() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bomb.json.gz");
    let f = std::fs::File::create(&p).unwrap();
    let mut z = flate2::write::GzEncoder::new(f, flate2::Compression::best());
    let head = br#"{"traceEvents":[{"ph":"X","cat":"kernel","name":""#;
    z.write_all(head).unwrap();
    for _ in 0..8 {
        z.write_all(&[b'a'; 1 << 20]).unwrap();
    }
    z.write_all(br#"","ts":1,"dur":1}]}"#).unwrap();
    z.finish().unwrap();
    assert!(std::fs::metadata(&p).unwrap().len() < 64 << 10);
    // the string's byte 1 MiB + 1 is byte 48 + 2^20 of the JSON
    let at = head.len() + (1 << 20);
    refused(
        dir.path(),
        &["trace", "bomb.json.gz"],
        &[
            "'bomb.json.gz': a string longer than 1 MiB",
            &format!("at byte {at} of its JSON"),
        ],
    );
}

/// SGLang's decode lines of the committed fixture with `edit` applied to each, written to
/// `dir/name`.
fn sglang_log(dir: &Path, name: &str, edit: impl Fn(&str) -> String) -> PathBuf {
    let text = std::fs::read_to_string(data("sglang-decode-eagle3.log")).unwrap();
    let p = dir.join(name);
    let lines: Vec<String> = text.lines().map(edit).collect();
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    p
}

/// The first decode line's number after `key`, replaced by `to`.
fn first_decode(key: &'static str, to: &'static str) -> impl Fn(&str) -> String {
    let re = regex::Regex::new(&format!(r"{}\s*[0-9.]+", regex::escape(key))).unwrap();
    let done = std::cell::Cell::new(false);
    move |l: &str| {
        if done.get() || !l.contains("Decode batch") || !re.is_match(l) {
            return l.to_string();
        }
        done.set(true);
        re.replace(l, format!("{key} {to}")).into_owned()
    }
}

#[test]
fn a_logs_numbers_are_read_whole_and_a_line_that_does_not_fit_is_quoted() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // an exponent is read, not cut at its first letter: 25e-1 is 2.5 (it was 25)
    let exp = sglang_log(d, "exp.log", |l| {
        regex::Regex::new(r"accept len: [0-9.]+")
            .unwrap()
            .replace(l, "accept len: 25e-1")
            .into_owned()
    });
    let out = vb()
        .args([
            "breakeven",
            "--decode-ms",
            "12",
            "--verify-ms",
            "20",
            "--draft-steps",
            "3",
        ])
        .arg("--accept-from-log")
        .arg(&exp)
        .args(["--format", "json"])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tau = find_number(&v, "accept_length").expect("an accept length in the JSON");
    assert_eq!(tau, 2.5, "{v}");
    // the line number is the file's: the first decode line is line 4 (two comment lines and a
    // prefill line before it)
    let line = 4;
    for (name, key, value, what) in [
        (
            "big.log",
            "gen throughput (token/s):",
            "1e308",
            "is not a throughput",
        ),
        (
            "neg.log",
            "gen throughput (token/s):",
            "-5",
            "is not a throughput",
        ),
        (
            "nan.log",
            "gen throughput (token/s):",
            "nan",
            "is not a throughput",
        ),
        ("acc.log", "accept len:", "inf", "is not an accept length"),
        ("req.log", "#running-req:", "1.5", "is not a count"),
    ] {
        let p = sglang_log(d, name, first_decode(key, value));
        let p = p.display().to_string();
        refused(
            d,
            &["explain", "--verify-ms", "20", "--server-log", &p],
            &[
                &format!("--server-log '{p}' line {line}: `{key} {value}` {what}"),
                "Decode batch",
            ],
        );
    }
    // a line's control characters are escaped when it is quoted
    let esc = sglang_log(d, "esc.log", |l| {
        first_decode("accept len:", "x")(l).replace("Decode batch", "Decode batch\u{1b}[2J")
    });
    let err = refused(
        d,
        &[
            "breakeven",
            "--decode-ms",
            "12",
            "--verify-ms",
            "20",
            "--accept-from-log",
            esc.to_str().unwrap(),
        ],
        &[
            "`accept len: x` is not an accept length",
            "Decode batch\\u{1b}[2J",
        ],
    );
    assert!(!err.contains('\u{1b}'), "{err:?}");
}

/// The first number named `key` anywhere in `v`.
fn find_number(v: &serde_json::Value, key: &str) -> Option<f64> {
    match v {
        serde_json::Value::Object(m) => m
            .get(key)
            .and_then(|x| x.as_f64().or_else(|| x.get("value")?.as_f64()))
            .or_else(|| m.values().find_map(|x| find_number(x, key))),
        serde_json::Value::Array(a) => a.iter().find_map(|x| find_number(x, key)),
        _ => None,
    }
}

/// vLLM's metrics line (vllm/v1/spec_decode/metrics.py) with the given counts and rates.
fn vllm_line(accepted: u64, drafted: u64, rates: &str) -> String {
    format!(
        "INFO 05-01 10:00:00 [metrics.py:86] SpecDecoding metrics: Mean acceptance length: 2.00, Accepted throughput: 5.00 tokens/s, Drafted throughput: 15.00 tokens/s, Accepted: {accepted} tokens, Drafted: {drafted} tokens, Per-position acceptance rate: {rates}, Avg Draft acceptance rate: 33.3%\n"
    )
}

#[test]
fn vllm_counts_that_do_not_fit_are_refused_naming_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let breakeven = |p: &Path, wants: &[&str]| {
        let p = p.display().to_string();
        let args = [
            "breakeven",
            "--decode-ms",
            "12",
            "--verify-ms",
            "20",
            "--draft-steps",
            "3",
            "--accept-from-log",
            &p,
        ];
        let wants: Vec<String> = wants.iter().map(|w| w.replace("F", &p)).collect();
        let wants: Vec<&str> = wants.iter().map(String::as_str).collect();
        refused(d, &args, &wants);
    };
    // five positions all accepted: 1 + 5 = 6 tokens per cycle, more than --draft-steps 3 allows
    let six = d.join("six.log");
    std::fs::write(&six, vllm_line(5000, 5000, "1.0, 1.0, 1.0, 1.0, 1.0")).unwrap();
    breakeven(
        &six,
        &["--accept-from-log 'F' gives an accept length of 6: the accept length (bonus token included) lies between 1 and k+1 = 4 for 3 draft steps"],
    );
    let err = refused(
        d,
        &[
            "explain",
            "--verify-ms",
            "20",
            "--decode-ms",
            "12",
            "--draft-steps",
            "3",
            "--server-log",
            six.to_str().unwrap(),
        ],
        &["gives an accept length of 6"],
    );
    assert!(
        err.contains(&format!("--server-log '{}'", six.display())),
        "{err}"
    );
    let more = d.join("more.log");
    std::fs::write(
        &more,
        format!("start\n{}", vllm_line(5000, 1000, "0.5, 0.3")),
    )
    .unwrap();
    breakeven(
        &more,
        &["--accept-from-log 'F' line 2: 5000 tokens accepted of 1000 drafted"],
    );
    let rate = d.join("rate.log");
    std::fs::write(&rate, vllm_line(500, 1500, "0.6, 1.5e0, 0.1")).unwrap();
    breakeven(
        &rate,
        &["line 1: `Per-position acceptance rate: 1.5e0` is not a rate (a fraction from 0 to 1)"],
    );
}

/// The plan of Kimi-K2.5 at TP 2 as JSON, with `edit` applied.
fn schedule(dir: &Path, name: &str, edit: impl Fn(&mut serde_json::Value)) -> String {
    let out = vb()
        .args(["plan", "--tp", "2", "--format", "json"])
        .output()
        .unwrap();
    let mut v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    edit(&mut v);
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
    p.display().to_string()
}

#[test]
fn schedule_sizes_and_config_expert_counts_stay_within_real_models() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let verify = |p: &str, wants: &[&str]| {
        refused(d, &["verify", "--backend", "model", "--schedule", p], wants);
    };
    // 2^63 bytes (it was priced at twelve years)
    let big = schedule(d, "big.json", |v| {
        v["ops"][0]["bytes_per_rank"] = (1u64 << 63).into();
        v["ops"][0]["count"] = (1u64 << 62).into();
    });
    verify(
        &big,
        &[&format!("schedule file '{big}': op 0: bytes_per_rank 9223372036854775808 is more than one op of a real model moves per rank (at most 1099511627776, 1 TiB")],
    );
    let weights = schedule(d, "weights.json", |v| {
        v["ops"][1]["weight_bytes"] = ((1u64 << 40) + 1).into();
    });
    verify(&weights, &["op 1: weight_bytes 1099511627777 is more than"]);
    // a count whose bytes overflow 64 bits: refused, not a panic
    let wrap = schedule(d, "wrap.json", |v| {
        v["ops"][0]["count"] = (1u64 << 63).into();
        v["ops"][0]["bytes_per_rank"] = 0.into();
    });
    verify(
        &wrap,
        &["op 0: bytes_per_rank 0 is not count 9223372036854775808 x 2 B"],
    );
    let tp = schedule(d, "tp.json", |v| v["tp"] = 0.into());
    verify(&tp, &["tp is 0: a schedule is for 1 to 1024 ranks"]);
    let tokens = schedule(d, "tokens.json", |v| v["tokens"] = 70_000.into());
    verify(
        &tokens,
        &["tokens is 70000: a forward has at most 65536 tokens"],
    );
    // an expert count of 0 is no dense model: refused, naming the key and the value
    let mixtral: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(data("configs/mistralai--Mixtral-8x7B-v0.1_config.json")).unwrap(),
    )
    .unwrap();
    for bad in [
        serde_json::json!(0),
        serde_json::json!(-8),
        serde_json::json!(7.5),
    ] {
        let mut c = mixtral.clone();
        c["num_local_experts"] = bad.clone();
        let p = d.join("config.json");
        std::fs::write(&p, serde_json::to_vec(&c).unwrap()).unwrap();
        refused(
            d,
            &["plan", "--model-config", "config.json"],
            &[&format!("model config 'config.json': key 'num_local_experts' is {bad}: a MoE config has a whole number of routed experts, at least 1")],
        );
    }
}

/// `sweep --results /dev/full` used to read the device as "existing results" until memory ran
/// out (11 GB in 6 s); it reads nothing of a device now, and ends at once on its own error.
#[test]
fn a_sweep_never_reads_a_device_given_as_its_results() {
    let dir = tempfile::tempdir().unwrap();
    for dev in ["/dev/full", "/dev/zero"] {
        let out = vb()
            .current_dir(dir.path())
            .args([
                "sweep",
                "--tp",
                "2",
                "--debug-mode",
                "-L",
                "NCCL_PROTO=LL",
                "-q",
            ])
            .args(["--results", dev])
            .timeout(Duration::from_secs(60))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let code = out.status.code();
        assert!(matches!(code, Some(1 | 2)), "{dev}: {code:?} {err}");
        assert!(err.contains(dev), "{dev}: {err}");
    }
}
