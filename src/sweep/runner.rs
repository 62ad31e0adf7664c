//! Running one point: the [`PointRunner`] trait, the real runner (fresh child processes of
//! this binary running `verifybench verify`) and a mock for tests (like hyperfine's mock
//! executor).
//!
//! Each child gets its own process group, so a timeout or Ctrl-C kills the verify process and
//! every worker it started, and nothing else.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::env::Env;
use super::matrix::Point;
use crate::record::{read_records, Record};

/// The probe run of a point: NCCL's INFO log, written to files `<log_dir>/<id>.%h.%p.log`.
#[derive(Debug, Clone)]
pub(crate) struct Probe {
    pub(crate) env: Env,
    pub(crate) log_dir: PathBuf,
}

/// Everything a runner needs for one point.
#[derive(Debug, Clone)]
pub(crate) struct PointJob {
    pub(crate) point: Point,
    /// The round (0-based) of `sweep --rounds` this run belongs to.
    pub(crate) round: usize,
    /// Environment of the timed run (complete: the child's environment is cleared first).
    pub(crate) env: Env,
    /// The probe run, unless disabled (or meaningless: the cost model has no NCCL log).
    pub(crate) probe: Option<Probe>,
    /// Limit for each child (probe and timed run alike).
    pub(crate) timeout: Duration,
}

/// What came of one point.
#[derive(Debug, Clone, Default)]
pub(crate) struct PointOutcome {
    /// None when the point succeeded; else why it failed.
    pub(crate) failure: Option<String>,
    /// The timed run's verify record (also present for a run with wrong results).
    pub(crate) record: Option<Record>,
    /// NCCL log files of the probe run.
    pub(crate) probe_logs: Vec<PathBuf>,
    /// Last lines of the failing child's stderr.
    pub(crate) stderr_tail: String,
    pub(crate) probe_wall_s: f64,
    pub(crate) timed_wall_s: f64,
    /// Ctrl-C arrived while this point ran: it is not finished and must not be recorded.
    pub(crate) interrupted: bool,
}

/// Runs one sweep point.
pub(crate) trait PointRunner {
    fn run(&self, job: &PointJob) -> anyhow::Result<PointOutcome>;
}

/// A runner that returns whatever its closure makes (tests).
#[cfg(test)]
pub(crate) struct MockRunner<F: Fn(&PointJob) -> anyhow::Result<PointOutcome>>(pub(crate) F);

#[cfg(test)]
impl<F: Fn(&PointJob) -> anyhow::Result<PointOutcome>> PointRunner for MockRunner<F> {
    fn run(&self, job: &PointJob) -> anyhow::Result<PointOutcome> {
        (self.0)(job)
    }
}

/// The real runner: `<exe> verify <args> -n N -w W --export-json <dir>/<id>[.roundR].json --quiet`.
pub(crate) struct SubprocessRunner<'a> {
    pub(crate) exe: PathBuf,
    /// `verify` and every flag that fixes the workload, backend, launcher, graph and mode.
    pub(crate) verify_args: Vec<String>,
    pub(crate) iters: u64,
    pub(crate) warmup: u64,
    /// Where the timed runs' JSON records go.
    pub(crate) work_dir: PathBuf,
    /// Extra arguments for the children (testing: fault injection), and the one override
    /// (NAME=VALUE) a point must have to get them, if any.
    pub(crate) extra_args: Vec<String>,
    pub(crate) extra_when: Option<(String, String)>,
    pub(crate) interrupted: &'a AtomicBool,
}

/// How a child ended.
#[derive(Debug)]
pub(crate) struct ChildEnd {
    pub(crate) status: Option<ExitStatus>,
    pub(crate) timed_out: bool,
    pub(crate) interrupted: bool,
    pub(crate) stderr: String,
    pub(crate) wall_s: f64,
}

/// The last `n` non-empty lines of `s`.
pub(crate) fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn kill_group(pgid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) with a negative pid signals the process group we created for this child
    // (process_group(0) made the child its leader); no memory is touched.
    unsafe {
        libc::kill(-(pgid as libc::pid_t), sig);
    }
}

/// Runs `exe args` with exactly `env`, in a new process group, until it exits, `timeout`
/// passes or `interrupted` becomes true (then the whole group is killed).
pub(crate) fn run_child(
    exe: &Path,
    args: &[String],
    env: &Env,
    timeout: Duration,
    interrupted: &AtomicBool,
) -> anyhow::Result<ChildEnd> {
    use anyhow::Context;
    use std::os::unix::process::CommandExt;
    let start = Instant::now();
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start '{}'", exe.display()))?;
    let pid = child.id();
    let mut err = child.stderr.take().expect("stderr is piped");
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = err.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    });
    let (mut timed_out, mut stopped) = (false, false);
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break Some(s);
        }
        let late = start.elapsed() >= timeout;
        let stop = interrupted.load(Ordering::SeqCst);
        if late || stop {
            timed_out = late && !stop;
            stopped = stop;
            kill_group(pid, libc::SIGTERM);
            let grace = Instant::now();
            while grace.elapsed() < Duration::from_millis(300) {
                if child.try_wait()?.is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            kill_group(pid, libc::SIGKILL);
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // Workers the child left behind would keep the pipe open: end the group.
    kill_group(pid, libc::SIGKILL);
    let stderr = reader.join().unwrap_or_default();
    Ok(ChildEnd {
        status,
        timed_out,
        interrupted: stopped,
        stderr,
        wall_s: start.elapsed().as_secs_f64(),
    })
}

/// Why a child failed, in one line, or None when it succeeded.
pub(crate) fn failure_of(end: &ChildEnd, what: &str, timeout: Duration) -> Option<String> {
    if end.timed_out {
        return Some(format!(
            "{what} exceeded --point-timeout {:.0} s; its processes were killed",
            timeout.as_secs_f64()
        ));
    }
    let last_error = end
        .stderr
        .lines()
        .rev()
        .find(|l| l.starts_with("Error:") || l.contains("error:") || l.contains("FAILED"))
        .map(|l| format!(": {}", l.trim()))
        .unwrap_or_default();
    match end.status {
        Some(s) if s.success() => None,
        Some(s) => {
            use std::os::unix::process::ExitStatusExt;
            match (s.code(), s.signal()) {
                (Some(c), _) => Some(format!("{what} exited with code {c}{last_error}")),
                (None, Some(sig)) => Some(format!("{what} was killed by signal {sig}{last_error}")),
                _ => Some(format!("{what} failed{last_error}")),
            }
        }
        None => Some(format!("{what} was stopped")),
    }
}

/// Log files of a probe: `<dir>/<id>.*.log`.
pub(crate) fn probe_logs(dir: &Path, id: &str) -> Vec<PathBuf> {
    let prefix = format!("{id}.");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".log"))
        })
        .collect();
    v.sort();
    v
}

impl SubprocessRunner<'_> {
    fn extra_for(&self, point: &Point) -> &[String] {
        match &self.extra_when {
            Some((k, v)) if point.get(k) != Some(v.as_str()) => &[],
            _ => &self.extra_args,
        }
    }
}

impl PointRunner for SubprocessRunner<'_> {
    fn run(&self, job: &PointJob) -> anyhow::Result<PointOutcome> {
        let p = &job.point;
        let extra = self.extra_for(p);
        let mut out = PointOutcome::default();
        if let Some(probe) = &job.probe {
            std::fs::create_dir_all(&probe.log_dir)?;
            for old in probe_logs(&probe.log_dir, &p.id) {
                let _ = std::fs::remove_file(old);
            }
            let mut args = self.verify_args.clone();
            args.extend(["-n", "2", "-w", "1", "--quiet"].map(String::from));
            args.extend(extra.iter().cloned());
            let end = run_child(&self.exe, &args, &probe.env, job.timeout, self.interrupted)?;
            out.probe_wall_s = end.wall_s;
            out.probe_logs = probe_logs(&probe.log_dir, &p.id);
            if end.interrupted {
                out.interrupted = true;
                return Ok(out);
            }
            if let Some(f) = failure_of(&end, "the probe run (NCCL_DEBUG=INFO)", job.timeout) {
                out.failure = Some(f);
                out.stderr_tail = tail(&end.stderr, 12);
                return Ok(out);
            }
        }
        std::fs::create_dir_all(&self.work_dir)?;
        // One file per (point, round): round 1 keeps the name of sweeps before rounds.
        let json = self.work_dir.join(if job.round == 0 {
            format!("{}.json", p.id)
        } else {
            format!("{}.round{}.json", p.id, job.round + 1)
        });
        let _ = std::fs::remove_file(&json);
        let mut args = self.verify_args.clone();
        args.extend([
            "-n".into(),
            self.iters.to_string(),
            "-w".into(),
            self.warmup.to_string(),
            "--export-json".into(),
            json.display().to_string(),
            "--quiet".into(),
        ]);
        args.extend(extra.iter().cloned());
        let end = run_child(&self.exe, &args, &job.env, job.timeout, self.interrupted)?;
        out.timed_wall_s = end.wall_s;
        if end.interrupted {
            out.interrupted = true;
            return Ok(out);
        }
        out.failure = failure_of(&end, "the timed run", job.timeout);
        if out.failure.is_some() {
            out.stderr_tail = tail(&end.stderr, 12);
        }
        if json.exists() {
            match read_records(&json) {
                Ok(mut r) if !r.is_empty() => out.record = Some(r.remove(0)),
                Ok(_) => {}
                Err(e) if out.failure.is_none() => {
                    out.failure = Some(format!("the timed run's record is unreadable: {e:#}"))
                }
                Err(_) => {}
            }
        } else if out.failure.is_none() {
            out.failure = Some(format!(
                "the timed run succeeded but wrote no record ({})",
                json.display()
            ));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, timeout_ms: u64) -> ChildEnd {
        let flag = AtomicBool::new(false);
        let env: Env = [("PATH".into(), "/usr/bin:/bin".into())]
            .into_iter()
            .collect();
        run_child(
            Path::new("/bin/sh"),
            &["-c".to_string(), script.to_string()],
            &env,
            Duration::from_millis(timeout_ms),
            &flag,
        )
        .unwrap()
    }

    #[test]
    fn exit_code_and_error_line_become_the_reason() {
        let end = sh(
            "echo 'Error: NCCL failed: invalid usage' >&2; exit 3",
            60_000,
        );
        let why = failure_of(&end, "the timed run", Duration::from_secs(5)).unwrap();
        assert_eq!(
            why,
            "the timed run exited with code 3: Error: NCCL failed: invalid usage"
        );
        assert!(failure_of(&sh("true", 60_000), "x", Duration::from_secs(5)).is_none());
    }

    #[test]
    fn environment_is_exactly_the_one_given() {
        let flag = AtomicBool::new(false);
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("env.txt");
        let env: Env = [("NCCL_PROTO".into(), "LL128".into())]
            .into_iter()
            .collect();
        run_child(
            Path::new("/bin/sh"),
            &["-c".into(), format!("env > {}", out.display())],
            &env,
            Duration::from_secs(60),
            &flag,
        )
        .unwrap();
        let text = std::fs::read_to_string(out).unwrap();
        assert!(text.contains("NCCL_PROTO=LL128"));
        assert!(!text.contains("HOME="), "{text}");
    }

    #[test]
    fn a_hanging_child_and_its_children_are_killed_at_the_timeout() {
        // The background sleep holds stderr open: it must die with the group, or the run
        // lasts its ten minutes (the limit below, two minutes, only catches that).
        let end = sh("sleep 600 & sleep 600", 300);
        assert!(end.timed_out);
        assert!(
            end.wall_s >= 0.3,
            "killed before the timeout: {} s",
            end.wall_s
        );
        assert!(
            end.wall_s < 120.0,
            "the group outlived the kill: {} s",
            end.wall_s
        );
        let why = failure_of(&end, "the timed run", Duration::from_millis(300)).unwrap();
        assert!(why.contains("--point-timeout"), "{why}");
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\n\nb\nc\n", 2), "b\nc");
    }
}
