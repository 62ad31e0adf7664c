//! End-to-end tests of `verifybench inspect` through the real binary, on real process trees
//! started here (no GPU needed). Every variable value carries a unique tag so tests running in
//! parallel cannot see each other's settings.

use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;
use common::vb;

fn tag(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{name}_{}_{nanos}", std::process::id())
}

/// `(pid, comm, state, ppid)` of every process now.
fn processes() -> Vec<(u32, String, char, u32)> {
    let mut out = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(s) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let (Some(o), Some(c)) = (s.find('('), s.rfind(')')) else {
            continue;
        };
        let mut rest = s[c + 1..].split_whitespace();
        let state = rest.next().unwrap().chars().next().unwrap();
        let ppid = rest.next().unwrap().parse().unwrap();
        out.push((pid, s[o + 1..c].to_string(), state, ppid));
    }
    out
}

/// A process tree started by a test; killed (children first) when dropped, even on failure.
struct Spawned {
    child: Child,
    children: Vec<u32>,
}

impl Spawned {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the root has `n` children satisfying `pred(comm, state)`.
    fn wait_children(&mut self, n: usize, pred: impl Fn(&str, char) -> bool) {
        let t0 = Instant::now();
        loop {
            let kids: Vec<u32> = processes()
                .into_iter()
                .filter(|p| p.3 == self.pid() && pred(&p.1, p.2))
                .map(|p| p.0)
                .collect();
            if kids.len() >= n {
                self.children = kids;
                return;
            }
            // a limit that only catches a tree that never starts
            assert!(
                t0.elapsed() < Duration::from_secs(300),
                "the test tree did not start: {kids:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        for &p in &self.children {
            unsafe {
                libc::kill(p as i32, libc::SIGKILL);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `sh -c script` with exactly `env` as its NCCL_*/CUDA_*/TORCH_NCCL_* variables (the test's
/// own are removed so a CI machine's settings cannot leak in).
fn spawn(script: &str, env: &[(&str, &str)], uid: Option<u32>) -> Spawned {
    let mut c = StdCommand::new("sh");
    c.arg("-c").arg(script);
    for (k, _) in std::env::vars() {
        let u = k.to_ascii_uppercase();
        if u.starts_with("NCCL_") || k.starts_with("CUDA_") || k.starts_with("TORCH_NCCL_") {
            c.env_remove(k);
        }
    }
    c.envs(env.iter().copied());
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(u) = uid {
        c.uid(u).gid(u);
    }
    Spawned {
        child: c.spawn().unwrap(),
        children: vec![],
    }
}

fn json(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn findings(v: &Value) -> Vec<(String, String)> {
    v["trees"][0]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["kind"].as_str().unwrap().to_string(),
                f["variable"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn finding<'a>(v: &'a Value, kind: &str, var: &str) -> &'a Value {
    v["trees"][0]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == kind && f["variable"].as_str().unwrap_or("") == var)
        .unwrap_or_else(|| panic!("no {kind} finding for {var:?} in {v:#}"))
}

/// Root: NCCL_PROTO, NCCL_ALGO and a misspelt NCCL_PROTOCOL. Children: one without NCCL_PROTO,
/// one with another NCCL_PROTO, one that inherits everything. Returns (tree, proto, algo, other).
fn server_like(name: &str) -> (Spawned, String, String, String) {
    let t = tag(name);
    let (proto, algo, other) = (
        format!("LL_{t}"),
        format!("Ring_{t}"),
        format!("Simple_{t}"),
    );
    let script = format!(
        "env -u NCCL_PROTO sleep 120 & env NCCL_PROTO={other} sleep 120 & sleep 120 & wait"
    );
    let mut s = spawn(
        &script,
        &[
            ("NCCL_PROTO", &proto),
            ("NCCL_ALGO", &algo),
            ("NCCL_PROTOCOL", &proto),
        ],
        None,
    );
    // `env` replaces itself with sleep: wait until all three have.
    s.wait_children(3, |comm, _| comm == "sleep");
    (s, proto, algo, other)
}

/// Which child is which, from its environment in the report.
fn child_pids(v: &Value, other: &str) -> (u64, u64, u64) {
    let ps = v["trees"][0]["processes"].as_array().unwrap();
    let kids: Vec<&Value> = ps.iter().filter(|p| p["depth"] == 1).collect();
    assert_eq!(kids.len(), 3, "{v:#}");
    let pid = |f: &dyn Fn(&Value) -> bool| {
        kids.iter().find(|p| f(&p["env"])).unwrap()["pid"]
            .as_u64()
            .unwrap()
    };
    let missing = pid(&|e| e.get("NCCL_PROTO").is_none());
    let different = pid(&|e| e["NCCL_PROTO"] == other);
    let same = pid(&|e| e.get("NCCL_PROTO").is_some() && e["NCCL_PROTO"] != other);
    (missing, different, same)
}

#[test]
fn every_finding_on_a_real_tree() {
    let (s, proto, algo, other) = server_like("findings");
    let out = vb()
        .args(["inspect", "--pid", &s.pid().to_string(), "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out);
    assert_eq!(v["schema"], "verifybench.inspect/1");
    assert_eq!(v["ok"], true);
    let tree = &v["trees"][0];
    assert_eq!(tree["root"], s.pid());
    let ps = tree["processes"].as_array().unwrap();
    assert_eq!(ps.len(), 4);
    assert_eq!(ps[0]["pid"], s.pid());
    assert!(ps[0]["command"]
        .as_str()
        .unwrap()
        .starts_with("sh -c env -u NCCL_PROTO"));
    assert_eq!(ps[0]["env"]["NCCL_PROTO"], proto.as_str());
    assert_eq!(ps[0]["env"]["NCCL_ALGO"], algo.as_str());
    assert_eq!(ps[0]["gpus"], serde_json::json!([]), "no GPU here");
    for p in &ps[1..] {
        assert_eq!(p["ppid"], s.pid());
        assert_eq!(p["command"], "sleep 120");
        assert_eq!(p["env"]["NCCL_ALGO"], algo.as_str());
    }
    let (missing, different, same) = child_pids(&v, &other);

    let mut got = findings(&v);
    got.sort();
    assert_eq!(
        got,
        vec![
            ("missing_in_descendant".into(), "NCCL_PROTO".into()),
            ("unknown_variable".into(), "NCCL_PROTOCOL".into()),
            ("values_disagree".into(), "NCCL_PROTO".into()),
        ],
        "{v:#}"
    );
    let m = finding(&v, "missing_in_descendant", "NCCL_PROTO");
    assert_eq!(m["pids"], serde_json::json!([missing]));
    assert_eq!(m["severity"], "warning");
    let d = finding(&v, "values_disagree", "NCCL_PROTO");
    let msg = d["message"].as_str().unwrap();
    assert!(msg.contains(&format!("unset in {missing}")), "{msg}");
    assert!(msg.contains(&format!("{other} in {different}")), "{msg}");
    assert!(msg.contains(&format!("{proto} in {same}")), "{msg}");
    let u = finding(&v, "unknown_variable", "NCCL_PROTOCOL");
    assert!(u["message"]
        .as_str()
        .unwrap()
        .contains("did you mean NCCL_PROTO?"));
    assert_eq!(u["pids"].as_array().unwrap().len(), 4);

    // The table says the same in words.
    let out = vb()
        .args(["inspect", "--pid", &s.pid().to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("process tree of pid {}, 4 processes", s.pid())),
        "{text}"
    );
    assert!(text.contains(&format!(
        "NCCL_PROTO={proto} is set in the root (pid {}) but missing in 1 of 3 descendants: {missing}",
        s.pid()
    )), "{text}");
    assert!(
        text.contains("(the same 3 variables as its parent)"),
        "{text}"
    );
}

#[test]
fn expect_gates_with_exit_code() {
    let (s, proto, algo, other) = server_like("expect");
    let pid = s.pid().to_string();
    let ok = format!("NCCL_ALGO={algo}");
    let out = vb()
        .args([
            "inspect", "--pid", &pid, "--format", "json", "--expect", &ok,
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let v = json(&out);
    let e = &v["trees"][0]["expectations"][0];
    assert_eq!(
        (e["ok"].clone(), e["basis"].clone()),
        (true.into(), "all_processes".into())
    );
    assert_eq!(e["checked"].as_array().unwrap().len(), 4);

    let bad = format!("NCCL_PROTO={proto}");
    let out = vb()
        .args([
            "inspect", "--pid", &pid, "--format", "json", "--expect", &bad, "--expect", &ok,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v = json(&out);
    assert_eq!(v["ok"], false);
    let (missing, different, _) = child_pids(&v, &other);
    let e = &v["trees"][0]["expectations"];
    assert_eq!(e[0]["ok"], false);
    assert_eq!(
        e[0]["failures"],
        serde_json::json!([
            {"pid": missing.min(different), "actual": if missing < different { Value::Null } else { other.clone().into() }, "unreadable": false},
            {"pid": missing.max(different), "actual": if missing < different { other.clone().into() } else { Value::Null }, "unreadable": false},
        ])
    );
    assert_eq!(e[1]["ok"], true);

    let out = vb()
        .args(["inspect", "--pid", &pid, "--expect", &bad])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("FAIL     {bad}: 2 of 4 differ")),
        "{text}"
    );
    assert!(text.contains(&format!("{missing}: unset")), "{text}");
    assert!(
        text.contains("FAILED: at least one expectation does not hold"),
        "{text}"
    );
}

#[test]
fn match_finds_the_tree_by_command_line() {
    let t = tag("match");
    let mut s = spawn(
        &format!(": {t}; sleep 120 & wait"),
        &[("NCCL_DEBUG", "WARN")],
        None,
    );
    s.wait_children(1, |comm, _| comm == "sleep");
    let out = vb()
        .args([
            "inspect",
            "--match",
            &format!("^sh -c : {t};"),
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out);
    let trees = v["trees"].as_array().unwrap();
    assert_eq!(
        trees.len(),
        1,
        "only the tree, not verifybench itself: {v:#}"
    );
    assert_eq!(trees[0]["root"], s.pid());
    assert_eq!(trees[0]["processes"][1]["env"]["NCCL_DEBUG"], "WARN");
    // Plain text works as a pattern, and matches only this tree.
    let out = vb().args(["inspect", "--match", &t]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("process tree of pid {}", s.pid()))
    );
}

#[test]
fn exited_process_is_skipped_with_a_note() {
    // `true &` exits at once and `exec sleep` never reaps it: a zombie child, deterministically.
    let mut s = spawn("true & exec sleep 120", &[], None);
    s.wait_children(1, |_, state| state == 'Z');
    let zombie = s.children[0];
    let out = vb()
        .args(["inspect", "--pid", &s.pid().to_string(), "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out);
    let tree = &v["trees"][0];
    assert_eq!(tree["processes"].as_array().unwrap().len(), 1);
    assert_eq!(tree["skipped"][0]["pid"], zombie);
    assert!(tree["skipped"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("exited"));
    let f = finding(&v, "exited", "");
    assert_eq!(f["severity"], "note");
    assert_eq!(f["pids"], serde_json::json!([zombie]));
    let out = vb()
        .args(["inspect", "--pid", &s.pid().to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("skipped {zombie} (sh): exited")),
        "{text}"
    );
}

#[test]
fn bad_input_exits_2_with_one_line() {
    let pid_max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .map(|s| s.trim().parse().unwrap())
        .unwrap_or(4_194_304);
    let gone = (pid_max + 1).to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--pid", &gone], "no process with pid"),
        (
            vec!["--match", "no-such-server-zq7x3"],
            "no running process has a matching command line",
        ),
        (vec!["--match", "("], "--match"),
        (
            vec!["--pid", "1", "--expect", "NCCL_PROTO"],
            "write NAME=VALUE",
        ),
        (
            vec!["--pid", "1", "--expect", "=LL"],
            "not an environment variable name",
        ),
    ];
    for (args, msg) in cases {
        let out = vb().arg("inspect").args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(msg), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    // Neither --pid nor --match: clap's usage error, also exit 2.
    let out = vb().arg("inspect").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn non_root_user_reads_own_processes_and_not_others() {
    let bin = assert_cmd::cargo::cargo_bin("verifybench");
    let is_root = unsafe { libc::geteuid() } == 0;
    const NOBODY: u32 = 65534;
    let as_user = |args: &[&str]| {
        let mut c = StdCommand::new(&bin);
        c.arg("inspect").args(args);
        if is_root {
            c.uid(NOBODY).gid(NOBODY);
        }
        c.output()
    };
    // The user's own tree: readable.
    let t = tag("own");
    let mut own = spawn(
        "sleep 120 & wait",
        &[("NCCL_PROTO", &t)],
        is_root.then_some(NOBODY),
    );
    own.wait_children(1, |comm, _| comm == "sleep");
    let out = match as_user(&["--pid", &own.pid().to_string(), "--format", "json"]) {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            eprintln!("skipped: the test binary is not executable by uid {NOBODY} ({e})");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out);
    for p in v["trees"][0]["processes"].as_array().unwrap() {
        assert_eq!(p["env"]["NCCL_PROTO"], t.as_str(), "{v:#}");
        assert!(p["gpus"].is_array(), "own fds are readable: {v:#}");
    }
    assert!(findings(&v).is_empty(), "{v:#}");

    if !is_root {
        eprintln!("the other-user half needs root to start a process of another user: skipped");
        return;
    }
    // Another user's process (root's): reported as unreadable, never a crash.
    let mut other = spawn("sleep 120 & wait", &[("NCCL_PROTO", &t)], None);
    other.wait_children(1, |comm, _| comm == "sleep");
    let pid = other.pid().to_string();
    let out = as_user(&["--pid", &pid, "--format", "json"]).unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out);
    let ps = v["trees"][0]["processes"].as_array().unwrap();
    assert_eq!(ps.len(), 2);
    for p in ps {
        assert!(p["env"].is_null());
        assert!(p["env_error"]
            .as_str()
            .unwrap()
            .contains("permission denied"));
        assert!(p["gpus"].is_null());
        // Command lines stay readable: they are world-readable.
        let cmd = p["command"].as_str().unwrap();
        assert!(
            cmd == "sleep 120" || cmd == "sh -c sleep 120 & wait",
            "{cmd}"
        );
    }
    let u = finding(&v, "unreadable", "");
    assert_eq!(u["severity"], "warning");
    // An expectation that cannot be proven fails the gate.
    let out = as_user(&["--pid", &pid, "--expect", &format!("NCCL_PROTO={t}")]).unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("unreadable"));
}

/// Text read from /proc reaches the table escaped (issue 50): a command line and variables
/// holding a terminal's escape sequences, a newline and a right-to-left override.
#[test]
fn control_characters_of_a_process_are_printed_as_escapes() {
    let t = tag("esc");
    let value = format!("LL\u{1b}[2J{t}\u{202e}x");
    let mut s = spawn(
        &format!("sleep 120 & wait # \u{1b}]0;title\u{7}\nline2 {t}"),
        &[("NCCL_PROTO", &value), ("NCCL_\u{1b}[31mX", "1")],
        None,
    );
    s.wait_children(1, |c, _| c == "sleep");
    let out = vb()
        .args(["inspect", "--pid", &s.pid().to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for l in text.lines() {
        assert!(
            !l.chars().any(|c| c.is_control() || c == '\u{202e}'),
            "a raw control character in {l:?}\n{text}"
        );
    }
    assert!(
        text.contains(&format!("NCCL_PROTO=LL\\u{{1b}}[2J{t}\\u{{202e}}x")),
        "{text}"
    );
    assert!(text.contains("NCCL_\\u{1b}[31mX=1"), "{text}");
    assert!(text.contains("\\u{1b}]0;title\\u{7}\\nline2"), "{text}");
}
