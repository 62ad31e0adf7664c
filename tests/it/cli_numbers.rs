//! Every numeric flag of every command, found in its `--help`, given 0, -1, NaN, inf and 1e308
//! (issue 50): never a panic (exit 101) or an abort (a signal); a value outside the flag's
//! range is refused at once with exit 2 and one line naming the flag. A flag is numeric unless
//! its value name says it takes something else ([`NOT_NUMBERS`]), so a new flag is tried
//! without being listed here.

use std::path::Path;

use crate::common::vb;

/// Each command with the arguments it needs besides the flag tried (cheap: the cost model, the
/// debug sweep, a worker that gives up after a second), in `dir`.
const COMMANDS: &[(&[&str], &[&str])] = &[
    (&["plan"], &[]),
    (
        &["collective"],
        &[
            "--backend",
            "model",
            "--gpus",
            "2",
            "-n",
            "2",
            "-w",
            "1",
            "-b",
            "8K",
            "-e",
            "8K",
            "-q",
        ],
    ),
    (
        &["verify"],
        &[
            "--backend",
            "model",
            "--gpus",
            "2",
            "-n",
            "2",
            "-w",
            "1",
            "-q",
        ],
    ),
    (
        &["sweep"],
        &["--debug-mode", "--tp", "2", "-L", "NCCL_PROTO=LL", "-q"],
    ),
    (&["breakeven"], &[]),
    (&["report"], &["v.json", "-o", "out"]),
    (&["bandwidth"], &[]),
    (&["env"], &[]),
    (&["inspect"], &["--pid", "1"]),
    (&["selftest"], &[]),
    (
        &["worker"],
        &[
            "--rank",
            "0",
            "--world-size",
            "2",
            "--rendezvous",
            "127.0.0.1:1",
            "--timeout",
            "1",
        ],
    ),
    (
        &["model", "fit"],
        &["--nccl-tests", "nt.txt", "-o", "fit.json"],
    ),
    (&["model", "validate"], &["--nccl-tests", "nt.txt"]),
    (&["compare"], &["v.json", "v.json"]),
    (&["trace"], &["t.json"]),
    (&["explain"], &[]),
];

/// Value names of flags that take no number: files, names, lists of names, patterns, and the
/// composite values whose parsers are tried by hand in their own tests (`US[:JITTER]` and
/// `RANK:US` are numbers and are tried here too).
const NOT_NUMBERS: &[&str] = &[
    "FILE",
    "PATH",
    "DIR",
    "FILE|DIR",
    "RESULTS",
    "RESULTS.json",
    "SCHEDULE",
    "PROFILE.json",
    "OUTPUT",
    "FORMAT",
    "MODEL",
    "DTYPE",
    "ROUTING",
    "LOGITS",
    "PHASE",
    "GRAPH",
    "MODE",
    "BACKEND",
    "LAUNCHER",
    "LINK",
    "LIST",
    "NAME",
    "BASE",
    "OP",
    "ENGINE",
    "PATTERN",
    "NAME|PATTERN",
    "auto|none|LIST",
    "max|mean",
    "op|layer",
    "NAME=VALUE",
    "NAME=a,b",
    "ROLE=PATH",
    "RENDEZVOUS",
    "COUNTxTIME",
];

/// (flag, value) pairs that are in range: 0 for the flags that document 0 (a seed, a free
/// draft, no overhead, no warm-up, rank or GPU 0, no host gap, no margin, no extra launches,
/// an acceptance rate of 0).
const VALID: &[(&str, &str)] = &[
    ("--warmup", "0"),
    ("--seed", "0"),
    ("--gap-seed", "0"),
    ("--launches-per-layer", "0"),
    ("--draft-ms", "0"),
    ("--overhead-ms", "0"),
    ("--noise-margin", "0"),
    ("--host-gap-us", "0"),
    ("--devices", "0"),
    ("--rank", "0"),
    ("--local-rank", "0"),
    ("--accept-rate", "0"),
    ("--accept-rates", "0"),
    ("--accept-rates-of-drafts", "0"),
    // no KV cache priced
    ("--context", "0"),
    // a plain decode measured with no context
    ("--decode-context", "0"),
];

const TRIED: &[&str] = &["0", "-1", "NaN", "inf", "1e308"];

/// The (long flag, value name) pairs of a command's `--help`.
fn flags(cmd: &[&str]) -> Vec<(String, String)> {
    let out = vb().args(cmd).arg("--help").output().unwrap();
    assert!(out.status.success(), "{cmd:?} --help");
    let re = regex::Regex::new(r"^\s+(?:-[A-Za-z], )?--([a-z0-9-]+) <([^>]+)>").unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| re.captures(l))
        .map(|c| (format!("--{}", &c[1]), c[2].to_string()))
        .collect()
}

/// `base` without the flag tried (and its value), so that it is given once.
fn without(base: &[&str], flag: &str) -> Vec<String> {
    let short = match flag {
        "--iters" => Some("-n"),
        "--warmup" => Some("-w"),
        "--minbytes" => Some("-b"),
        "--maxbytes" => Some("-e"),
        _ => None,
    };
    let mut out = vec![];
    let mut i = 0;
    while i < base.len() {
        if base[i] == flag || Some(base[i]) == short {
            i += 2;
            continue;
        }
        out.push(base[i].to_string());
        i += 1;
    }
    out
}

/// The cases of one command: (its argv, flag, value).
fn cases(cmd: &[&str], base: &[&str]) -> Vec<(Vec<String>, String, String)> {
    let mut v = vec![];
    for (flag, value_name) in flags(cmd) {
        if NOT_NUMBERS.contains(&value_name.as_str()) {
            continue;
        }
        for value in TRIED {
            let mut argv: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
            argv.extend(without(base, &flag));
            argv.push(format!("{flag}={value}"));
            v.push((argv, flag.clone(), value.to_string()));
        }
    }
    v
}

/// Runs one case in `dir`; an error message for each thing wrong.
fn check(dir: &Path, argv: &[String], flag: &str, value: &str) -> Option<String> {
    let out = vb().current_dir(dir).args(argv).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let Some(code) = out.status.code() else {
        return Some(format!("{argv:?}: killed by a signal: {err}"));
    };
    if code == 101 || err.contains("panicked") {
        return Some(format!("{argv:?}: panicked: {err}"));
    }
    if VALID.contains(&(flag, value)) {
        return None;
    }
    let line = err.lines().find(|l| l.starts_with("error: ")).unwrap_or("");
    if code != 2 || !line.contains(&format!("{flag} ")) {
        return Some(format!(
            "{argv:?}: exit {code}, not 2 with a line naming {flag}: {err}"
        ));
    }
    None
}

#[test]
fn every_numeric_flag_refuses_zero_negative_nan_inf_and_huge_values() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    vb().current_dir(d)
        .args([
            "verify",
            "--backend",
            "model",
            "--gpus",
            "2",
            "-n",
            "2",
            "-w",
            "1",
        ])
        .args(["-q", "--export-json", "v.json"])
        .assert()
        .success();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    std::fs::copy(
        data.join("public-nccl/S01_aikitoria_8x5090_p2p.txt"),
        d.join("nt.txt"),
    )
    .unwrap();
    let all: Vec<(Vec<String>, String, String)> = COMMANDS
        .iter()
        .flat_map(|(cmd, base)| cases(cmd, base))
        .collect();
    // the walk finds the flags the issue named, and many more
    for f in [
        "--timeout",
        "--rendezvous-timeout",
        "--point-timeout",
        "--tp",
        "--iters",
    ] {
        assert!(all.iter().any(|(_, g, _)| g == f), "{f} not found");
    }
    assert!(all.len() >= 5 * 80, "{} cases", all.len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let bad = std::sync::Mutex::new(vec![]);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((argv, flag, value)) = all.get(i) else {
                    break;
                };
                if let Some(e) = check(d, argv, flag, value) {
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

/// The three panics the issue found, and `worker --timeout` values the docs say are refused.
#[test]
fn timeouts_past_what_a_duration_holds_are_refused_not_panicked() {
    for (args, flag) in [
        (vec!["worker", "--timeout", "1e308"], "--timeout 1e308:"),
        (
            vec!["worker", "--rendezvous-timeout", "inf"],
            "--rendezvous-timeout inf:",
        ),
        (
            vec!["sweep", "--point-timeout", "1e20"],
            "--point-timeout 1e20:",
        ),
        (vec!["worker", "--timeout", "-5"], "--timeout -5:"),
        (vec!["worker", "--timeout", "0"], "--timeout 0:"),
        (vec!["worker", "--timeout", "NaN"], "--timeout NaN:"),
    ] {
        crate::common::refused(&args, &[flag, "greater than 0 and at most 1000000"]);
    }
}
