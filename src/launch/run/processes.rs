//! The processes launcher: one worker process per rank (`verifybench __rank`), its protocol
//! lines read, its stderr kept, every worker killed and reaped on any way out; the listening
//! rules are [`super::supervise`]'s.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;

use super::supervise::{Cause, Listen, GRACE};
use super::LaunchSpec;
use crate::comm;
use crate::launch::job::{Job, RankResult};
use crate::launch::worker::Message;

/// Children that are killed and reaped when this guard drops (no orphans on any exit path).
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}

fn worker_env(spec: &LaunchSpec) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = std::env::vars().collect();
    env.extend(spec.env_overrides.clone());
    env.insert(
        crate::launch::worker::RANK_TIMEOUT_ENV.into(),
        spec.timeout.as_secs_f64().to_string(),
    );
    env
}

pub(super) fn run_processes(
    spec: &LaunchSpec,
    job: &Job,
    id: comm::UniqueId,
) -> anyhow::Result<Vec<RankResult>> {
    let n = spec.devices.len();
    let dir = tempfile::Builder::new()
        .prefix("verifybench-job-")
        .tempdir()
        .context("creating a temporary folder for the job")?;
    let job_path: PathBuf = dir.path().join("job.json");
    std::fs::write(&job_path, serde_json::to_vec(job)?)?;
    let exe = std::env::current_exe()?;
    let env = worker_env(spec);
    let id_hex = crate::comm::p2p::to_hex(&id);
    let (tx, rx) = mpsc::channel::<(usize, Option<Message>)>();
    let tails: Vec<Arc<Mutex<VecDeque<String>>>> = (0..n)
        .map(|_| Arc::new(Mutex::new(VecDeque::new())))
        .collect();
    let mut children = Children(vec![]);
    for (rank, &device) in spec.devices.iter().enumerate() {
        let mut cmd = Command::new(&exe);
        cmd.arg("__rank")
            .arg("--job")
            .arg(&job_path)
            .args(["--rank", &rank.to_string()])
            .args(["--nranks", &n.to_string()])
            .args(["--device", &device.to_string()])
            .args(["--id", &id_hex])
            .args(["--cpu-affinity", &spec.affinity.arg()])
            .env_clear()
            .envs(&env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(f) = spec.fault {
            cmd.args(["--fault", &format!("{}:{}", f.kind.name(), f.rank)]);
        }
        // SAFETY: the closure runs in the child between fork and exec and only calls prctl,
        // which is async-signal-safe. It makes the worker die with its parent, so a killed
        // parent leaves no worker waiting forever inside NCCL.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting the worker of rank {rank}"))?;
        let out = child.stdout.take().expect("piped");
        let err = child.stderr.take().expect("piped");
        children.0.push(child);
        let txo = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                match serde_json::from_str::<Message>(&line) {
                    Ok(m) => {
                        let _ = txo.send((rank, Some(m)));
                    }
                    Err(_) => eprintln!("[rank {rank}] {line}"),
                }
            }
            let _ = txo.send((rank, None));
        });
        let tail = tails[rank].clone();
        let echo = spec.echo_stderr;
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if echo {
                    eprintln!("[rank {rank}] {line}");
                }
                let mut t = tail.lock().expect("tail lock");
                if t.len() == 20 {
                    t.pop_front();
                }
                t.push_back(line);
            }
        });
    }
    drop(tx);
    let tail_of = |rank: usize| -> String {
        // give the stderr reader a moment to drain what the dead worker wrote
        std::thread::sleep(Duration::from_millis(100));
        let t = tails[rank].lock().expect("tail lock");
        if t.is_empty() {
            String::new()
        } else {
            format!(
                "\n  last lines of rank {rank}'s stderr:\n    {}",
                t.iter().cloned().collect::<Vec<_>>().join("\n    ")
            )
        }
    };
    // As the threads launcher: on the first failure (a worker's error, a worker's death, or no
    // progress for --timeout) listen for GRACE more, so that the other workers can report
    // NCCL's own error or their deadline, then stop every worker and show the most telling
    // failure.
    let mut l = Listen::new(n, spec.timeout, GRACE);
    while l.waiting() {
        match rx.recv_timeout(l.wait_for()) {
            Ok((_, Some(Message::Progress(_)))) => l.progress(),
            Ok((rank, Some(Message::Result(r)))) => l.result(rank, *r),
            Ok((rank, Some(Message::Error(e)))) => {
                let cause = Cause::of_text(&e);
                l.failed(rank, cause, anyhow::anyhow!("{e}{}", tail_of(rank)), || ());
            }
            Ok((rank, None)) => {
                if !l.left[rank] {
                    let status = children.0[rank]
                        .wait()
                        .map(|s| s.to_string())
                        .unwrap_or_else(|e| e.to_string());
                    let pid = children.0[rank].id();
                    let e = anyhow::anyhow!(
                        "pid {pid} died before reporting ({status}){}",
                        tail_of(rank)
                    );
                    l.failed(rank, Cause::Own, e, || ());
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) if !l.ending() => l.silent(|| ()),
            Err(_) => break,
        }
    }
    drop(children);
    let name = |rank: usize| format!("rank {rank} (GPU {})", spec.devices[rank]);
    l.end(&name, "all workers were stopped", &[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Launcher;

    #[test]
    fn workers_get_the_run_timeout() {
        let spec = LaunchSpec::new(vec![0, 1], Launcher::Processes, 12.5);
        let env = worker_env(&spec);
        assert_eq!(env[crate::launch::worker::RANK_TIMEOUT_ENV], "12.5");
        let back =
            crate::launch::worker::watch_of(Some(&env[crate::launch::worker::RANK_TIMEOUT_ENV]));
        assert_eq!(back.timeout(), Some(Duration::from_millis(12500)));
    }

    #[test]
    fn the_guard_kills_and_reaps_its_children() {
        // a child that sleeps ten minutes: a guard that waited for it instead of killing it
        // would pass the two-minute limit, which only catches that
        let child = Command::new("sleep").arg("600").spawn().unwrap();
        let pid = child.id();
        let t0 = std::time::Instant::now();
        drop(Children(vec![child]));
        assert!(t0.elapsed() < Duration::from_secs(120));
        // reaped: not even a zombie is left under /proc
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }
}
