//! Walking a process tree: one snapshot of every process's parent (from `stat`), then, for
//! each process under the root, its command line, the variables it was started with, the
//! GPUs it has open and the NCCL library files it has mapped.
//!
//! Children are found by scanning every `/proc/PID/stat` for its parent id rather than through
//! `/proc/PID/task/*/children`, which exists only on kernels built with CONFIG_PROC_CHILDREN.
//! A process may exit at any moment of the walk; it is then listed as skipped with the reason,
//! never an error.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use super::ncclmaps::{self, MappedNccl};
use super::procfs::{self, ProcSource, Stat};

/// One process of the tree, as read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ProcessInfo {
    pub(crate) pid: u32,
    /// The parent's pid.
    pub(crate) ppid: u32,
    /// 0 for the root, 1 for its children, ...
    pub(crate) depth: usize,
    /// The executable name the kernel keeps (at most 15 bytes).
    pub(crate) comm: String,
    /// The full command line, arguments joined by spaces (`[comm]` when the kernel has none).
    pub(crate) command: String,
    /// GPUs the process has open (`/dev/nvidiaN` file descriptors); `null` when unreadable.
    pub(crate) gpus: Option<Vec<u32>>,
    /// Why the open files could not be read.
    pub(crate) gpus_error: Option<String>,
    /// The NCCL_*, CUDA_* and TORCH_NCCL_* variables the process was started with
    /// (`/proc/PID/environ`); `null` when unreadable.
    pub(crate) env: Option<BTreeMap<String, String>>,
    /// Why the environment could not be read.
    pub(crate) env_error: Option<String>,
    /// The NCCL library files the process has mapped (`libnccl*.so*` in /proc/PID/maps), each
    /// with the version its name tells; `null` when unreadable.
    pub(crate) nccl: Option<Vec<MappedNccl>>,
    /// Why the mapped files could not be read.
    pub(crate) nccl_error: Option<String>,
    /// The file `VLLM_NCCL_SO_PATH` names, links resolved (when the process has it and the
    /// file exists here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) nccl_so_path: Option<String>,
}

impl ProcessInfo {
    /// Whether the process has at least one GPU open (false when unknown).
    pub(crate) fn holds_gpu(&self) -> bool {
        self.gpus.as_ref().is_some_and(|g| !g.is_empty())
    }
}

/// A process of the tree that could not be reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Skipped {
    pub(crate) pid: u32,
    pub(crate) ppid: u32,
    pub(crate) comm: String,
    /// Why: it exited during the walk, or it is a zombie (exited, not yet reaped).
    pub(crate) reason: String,
}

/// The processes under one root, in tree order (each parent before its children).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub(crate) struct Tree {
    pub(crate) root: u32,
    pub(crate) processes: Vec<ProcessInfo>,
    pub(crate) skipped: Vec<Skipped>,
}

/// Why a walk could not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WalkError {
    /// No process has this pid.
    NoSuchProcess(u32),
    /// /proc itself could not be listed.
    Proc(String),
}

impl std::fmt::Display for WalkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WalkError::NoSuchProcess(p) => write!(
                f,
                "no process with pid {p} (it is not running, or it exited); \
                 find the server's pid with `pgrep -af launch_server` or use --match"
            ),
            WalkError::Proc(e) => write!(f, "cannot list processes in /proc: {e}"),
        }
    }
}

impl std::error::Error for WalkError {}

/// Every process present now, by pid. Processes that exit while being listed are left out.
pub(crate) fn snapshot(src: &dyn ProcSource) -> Result<HashMap<u32, Stat>, WalkError> {
    let pids = src.pids().map_err(|e| WalkError::Proc(e.to_string()))?;
    let mut table = HashMap::with_capacity(pids.len());
    for pid in pids {
        let Ok(bytes) = src.read(pid, "stat") else {
            continue;
        };
        if let Ok(st) = procfs::parse_stat(&String::from_utf8_lossy(&bytes)) {
            table.insert(pid, st);
        }
    }
    Ok(table)
}

/// The command line of a process as one string, `[comm]` when the kernel has none; `None` when
/// the process is gone.
pub(crate) fn command_of(src: &dyn ProcSource, pid: u32, comm: &str) -> Option<String> {
    match src.read(pid, "cmdline") {
        Ok(b) => {
            let args = procfs::parse_cmdline(&b);
            Some(if args.is_empty() {
                format!("[{comm}]")
            } else {
                args.join(" ")
            })
        }
        Err(e) if procfs::is_gone(&e) => None,
        Err(_) => Some(format!("[{comm}]")),
    }
}

/// The roots of the trees whose command line matches `pattern`: matching processes with no
/// matching ancestor, leaving out `exclude` and its ancestors (this program and the shell that
/// started it, whose command lines contain the pattern too). Sorted by pid.
pub(crate) fn find_roots(
    src: &dyn ProcSource,
    table: &HashMap<u32, Stat>,
    pattern: &regex::Regex,
    exclude: u32,
) -> Vec<u32> {
    let mut excluded: HashSet<u32> = ancestors(table, exclude).collect();
    if exclude != 0 {
        excluded.insert(exclude);
    }
    let matching: HashSet<u32> = table
        .values()
        .filter(|s| !excluded.contains(&s.pid))
        .filter(|s| command_of(src, s.pid, &s.comm).is_some_and(|c| pattern.is_match(&c)))
        .map(|s| s.pid)
        .collect();
    let mut roots: Vec<u32> = matching
        .iter()
        .copied()
        // Keep only the topmost match of each chain.
        .filter(|&pid| !ancestors(table, pid).any(|p| matching.contains(&p)))
        .collect();
    roots.sort_unstable();
    roots
}

/// The ancestors of `pid`, its parent first, up to pid 0 or the first one seen again.
fn ancestors(table: &HashMap<u32, Stat>, pid: u32) -> impl Iterator<Item = u32> + '_ {
    let mut seen = HashSet::new();
    let parent = move |p: &u32| Some(table.get(p).map_or(0, |s| s.ppid));
    std::iter::successors(parent(&pid), parent).take_while(move |&p| p != 0 && seen.insert(p))
}

/// Walks the tree under `root` using a snapshot from [`snapshot`].
pub(crate) fn walk(
    src: &dyn ProcSource,
    table: &HashMap<u32, Stat>,
    root: u32,
) -> Result<Tree, WalkError> {
    if !table.contains_key(&root) {
        return Err(WalkError::NoSuchProcess(root));
    }
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for s in table.values() {
        if s.ppid != s.pid {
            children.entry(s.ppid).or_default().push(s.pid);
        }
    }
    for c in children.values_mut() {
        c.sort_unstable();
    }
    let mut order = vec![];
    let mut stack = vec![(root, 0usize)];
    let mut seen = HashSet::new();
    while let Some((pid, depth)) = stack.pop() {
        if !seen.insert(pid) {
            continue;
        }
        order.push((pid, depth));
        if let Some(c) = children.get(&pid) {
            for &k in c.iter().rev() {
                stack.push((k, depth + 1));
            }
        }
    }
    let mut tree = Tree {
        root,
        ..Default::default()
    };
    for (pid, depth) in order {
        let st = &table[&pid];
        match read_process(src, st, depth) {
            Ok(p) => tree.processes.push(p),
            Err(reason) => tree.skipped.push(Skipped {
                pid,
                ppid: st.ppid,
                comm: st.comm.clone(),
                reason,
            }),
        }
    }
    Ok(tree)
}

const EXITED: &str = "exited during the walk";

/// What one read of a process gives (`f` of what was read), or why it could not be read;
/// `Err` when the process is gone.
fn read_or_why<T, U>(
    read: std::io::Result<T>,
    f: impl FnOnce(T) -> U,
) -> Result<(Option<U>, Option<String>), String> {
    match read {
        Ok(x) => Ok((Some(f(x)), None)),
        Err(e) if procfs::is_gone(&e) => Err(EXITED.into()),
        Err(e) => Ok((None, Some(procfs::describe_read_error(&e)))),
    }
}

/// Reads one process; `Err(reason)` when it is gone or a zombie.
fn read_process(src: &dyn ProcSource, st: &Stat, depth: usize) -> Result<ProcessInfo, String> {
    let pid = st.pid;
    // The freshest state: the snapshot may be a few milliseconds old.
    let now = match src.read(pid, "stat") {
        Ok(b) => procfs::parse_stat(&String::from_utf8_lossy(&b)).unwrap_or_else(|_| st.clone()),
        Err(e) if procfs::is_gone(&e) => return Err(EXITED.into()),
        Err(_) => st.clone(),
    };
    if now.state == 'Z' || now.state == 'X' {
        return Err("exited (a zombie its parent has not reaped yet)".into());
    }
    let command = command_of(src, pid, &now.comm).ok_or_else(|| EXITED.to_string())?;
    let (env, env_error) = read_or_why(src.read(pid, "environ"), |b| {
        procfs::parse_environ(&b)
            .into_iter()
            .filter(|(k, _)| procfs::is_reported_var(k))
            .collect()
    })?;
    let (gpus, gpus_error) = read_or_why(src.fd_targets(pid), |t| procfs::gpus_of_fd_targets(&t))?;
    let (nccl, nccl_error) = read_or_why(src.read(pid, "maps"), |b| {
        ncclmaps::mapped(&String::from_utf8_lossy(&b))
    })?;
    let nccl_so_path = env
        .as_ref()
        .and_then(|e: &BTreeMap<String, String>| e.get(ncclmaps::SO_PATH_VAR))
        .and_then(|p| std::fs::canonicalize(p).ok())
        .map(|p| p.display().to_string());
    Ok(ProcessInfo {
        pid,
        ppid: now.ppid,
        depth,
        comm: now.comm,
        command,
        gpus,
        gpus_error,
        env,
        env_error,
        nccl,
        nccl_error,
        nccl_so_path,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io;

    /// A process table in memory; any file can be made to fail with a chosen error.
    #[derive(Default)]
    pub(crate) struct Mock {
        pub(crate) files: HashMap<(u32, String), Vec<u8>>,
        pub(crate) fds: HashMap<u32, Vec<String>>,
        pub(crate) fail: HashMap<(u32, String), io::ErrorKind>,
    }

    impl Mock {
        pub(crate) fn add(
            &mut self,
            pid: u32,
            ppid: u32,
            comm: &str,
            cmd: &str,
            env: &[(&str, &str)],
        ) {
            let stat = format!("{pid} ({comm}) S {ppid} {pid} 0 0");
            self.files.insert((pid, "stat".into()), stat.into_bytes());
            let mut c: Vec<u8> = cmd.replace(' ', "\0").into_bytes();
            c.push(0);
            self.files.insert((pid, "cmdline".into()), c);
            let mut e = vec![];
            for (k, v) in env {
                e.extend_from_slice(format!("{k}={v}\0").as_bytes());
            }
            self.files.insert((pid, "environ".into()), e);
            self.files.insert((pid, "maps".into()), vec![]);
            self.fds.insert(pid, vec!["/dev/null".into()]);
        }
        pub(crate) fn fail(&mut self, pid: u32, file: &str, kind: io::ErrorKind) {
            self.fail.insert((pid, file.into()), kind);
        }
    }

    impl ProcSource for Mock {
        fn pids(&self) -> io::Result<Vec<u32>> {
            let mut v: Vec<u32> = self
                .files
                .keys()
                .filter(|(_, f)| f == "stat")
                .map(|(p, _)| *p)
                .collect();
            v.sort_unstable();
            Ok(v)
        }
        fn read(&self, pid: u32, file: &str) -> io::Result<Vec<u8>> {
            if let Some(k) = self.fail.get(&(pid, file.to_string())) {
                return Err(io::Error::from(*k));
            }
            self.files
                .get(&(pid, file.to_string()))
                .cloned()
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
        }
        fn fd_targets(&self, pid: u32) -> io::Result<Vec<String>> {
            if let Some(k) = self.fail.get(&(pid, "fd".to_string())) {
                return Err(io::Error::from(*k));
            }
            self.fds
                .get(&pid)
                .cloned()
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
        }
    }

    fn server() -> Mock {
        let mut m = Mock::default();
        m.add(1, 0, "init", "/sbin/init", &[]);
        m.add(50, 1, "bash", "bash", &[("NCCL_PROTO", "Simple")]);
        m.add(
            100,
            50,
            "python3",
            "python3 -m sglang.launch_server --tp 2",
            &[
                ("NCCL_PROTO", "LL"),
                ("PATH", "/bin"),
                ("CUDA_VISIBLE_DEVICES", "0,1"),
            ],
        );
        m.add(
            101,
            100,
            "python3",
            "python3 -c spawn_main",
            &[("CUDA_VISIBLE_DEVICES", "0,1")],
        );
        m.add(
            102,
            100,
            "python3",
            "python3 -c spawn_main",
            &[("NCCL_PROTO", "LL")],
        );
        m.add(103, 101, "python3", "python3 -c compile_worker", &[]);
        m.fds
            .insert(101, vec!["/dev/nvidiactl".into(), "/dev/nvidia0".into()]);
        m.fds
            .insert(102, vec!["/dev/nvidia-uvm".into(), "/dev/nvidia1".into()]);
        m
    }

    #[test]
    fn walks_the_tree_in_order_with_gpus_and_only_reported_vars() {
        let m = server();
        let t = walk(&m, &snapshot(&m).unwrap(), 100).unwrap();
        let pids: Vec<(u32, usize)> = t.processes.iter().map(|p| (p.pid, p.depth)).collect();
        assert_eq!(pids, vec![(100, 0), (101, 1), (103, 2), (102, 1)]);
        let root = &t.processes[0];
        assert_eq!(root.command, "python3 -m sglang.launch_server --tp 2");
        assert_eq!(root.gpus, Some(vec![]));
        let env = root.env.as_ref().unwrap();
        assert_eq!(
            env.keys().collect::<Vec<_>>(),
            ["CUDA_VISIBLE_DEVICES", "NCCL_PROTO"]
        );
        assert_eq!(t.processes[1].gpus, Some(vec![0]));
        assert_eq!(t.processes[3].gpus, Some(vec![1]));
        assert!(t.processes[3].holds_gpu() && !root.holds_gpu());
        assert!(t.skipped.is_empty());
    }

    #[test]
    fn missing_pid_is_an_error() {
        let m = server();
        let e = walk(&m, &snapshot(&m).unwrap(), 4242).unwrap_err();
        assert_eq!(e, WalkError::NoSuchProcess(4242));
        assert!(e.to_string().contains("no process with pid 4242"));
    }

    #[test]
    fn permission_denied_is_unreadable_not_fatal() {
        let mut m = server();
        m.fail(101, "environ", io::ErrorKind::PermissionDenied);
        m.fail(101, "fd", io::ErrorKind::PermissionDenied);
        let t = walk(&m, &snapshot(&m).unwrap(), 100).unwrap();
        let p = t.processes.iter().find(|p| p.pid == 101).unwrap();
        assert_eq!(p.env, None);
        assert!(p
            .env_error
            .as_deref()
            .unwrap()
            .contains("permission denied"));
        assert_eq!(p.gpus, None);
        assert!(p.gpus_error.is_some());
        assert_eq!(t.processes.len(), 4);
    }

    #[test]
    fn process_exiting_during_the_walk_is_skipped_with_a_reason() {
        for file in ["stat", "cmdline", "environ", "fd", "maps"] {
            let mut m = server();
            let table = snapshot(&m).unwrap();
            // Exits after the snapshot, before (or while) its files are read.
            m.fail(102, file, io::ErrorKind::NotFound);
            let t = walk(&m, &table, 100).unwrap();
            assert_eq!(t.processes.len(), 3, "{file}");
            assert_eq!(t.skipped.len(), 1);
            assert_eq!(t.skipped[0].pid, 102);
            assert_eq!(t.skipped[0].reason, EXITED);
        }
    }

    #[test]
    fn zombie_is_skipped() {
        let mut m = server();
        m.files
            .insert((103, "stat".into()), b"103 (python3) Z 101 103 0".to_vec());
        m.files.insert((103, "cmdline".into()), vec![]);
        let t = walk(&m, &snapshot(&m).unwrap(), 100).unwrap();
        assert_eq!(t.skipped[0].pid, 103);
        assert!(t.skipped[0].reason.contains("zombie"));
    }

    #[test]
    fn match_finds_the_topmost_process_and_not_ourselves() {
        let mut m = server();
        // The inspecting command and its shell contain the pattern too.
        m.add(
            900,
            50,
            "sh",
            "sh -c verifybench inspect --match launch_server",
            &[],
        );
        m.add(
            901,
            900,
            "verifybench",
            "verifybench inspect --match launch_server",
            &[],
        );
        // A second server, and a worker that kept its parent's command line (fork).
        m.add(
            200,
            1,
            "python3",
            "python3 -m sglang.launch_server --tp 8",
            &[],
        );
        m.add(
            201,
            200,
            "python3",
            "python3 -m sglang.launch_server --tp 8",
            &[],
        );
        let table = snapshot(&m).unwrap();
        let re = regex::Regex::new("sglang.launch_server").unwrap();
        assert_eq!(find_roots(&m, &table, &re, 901), vec![100, 200]);
        let none = regex::Regex::new("vllm serve").unwrap();
        assert!(find_roots(&m, &table, &none, 901).is_empty());
    }

    #[test]
    fn fake_proc_directory_with_fd_links() {
        let dir = tempfile::tempdir().unwrap();
        let mk = |pid: u32, stat: &str, env: &[u8], fds: &[&str]| {
            let p = dir.path().join(pid.to_string());
            std::fs::create_dir_all(p.join("fd")).unwrap();
            std::fs::write(p.join("stat"), stat).unwrap();
            std::fs::write(p.join("cmdline"), b"python3\0worker.py\0").unwrap();
            std::fs::write(p.join("environ"), env).unwrap();
            std::fs::write(p.join("maps"), b"").unwrap();
            for (i, t) in fds.iter().enumerate() {
                std::os::unix::fs::symlink(t, p.join("fd").join(i.to_string())).unwrap();
            }
        };
        mk(
            10,
            "10 (python3) S 1 10",
            b"NCCL_ALGO=Ring\0HOME=/root\0",
            &["/dev/null"],
        );
        mk(
            11,
            "11 (my worker) S 10 11",
            b"NCCL_ALGO=Tree\0",
            &["/dev/nvidiactl", "/dev/nvidia2", "socket:[7]"],
        );
        std::fs::create_dir_all(dir.path().join("self")).unwrap();
        let src = procfs::ProcFs {
            root: dir.path().to_path_buf(),
        };
        let t = walk(&src, &snapshot(&src).unwrap(), 10).unwrap();
        assert_eq!(t.processes.len(), 2);
        assert_eq!(t.processes[1].comm, "my worker");
        assert_eq!(t.processes[1].gpus, Some(vec![2]));
        assert_eq!(t.processes[1].env.as_ref().unwrap()["NCCL_ALGO"], "Tree");
        assert_eq!(t.processes[0].command, "python3 worker.py");
    }
}
