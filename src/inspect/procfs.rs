//! Reading Linux /proc: pure parsers of each file's contents, and a small [`ProcSource`] trait
//! so the walk can run against the real /proc, a fake directory tree, or a mock that fails
//! the way the kernel does (permission denied, process gone).
//!
//! Only files a non-root user may read for their own processes are used: `stat` and `cmdline`
//! (world-readable), `environ`, `maps` and `fd/` (same user, or ptrace-capable). Nothing here needs
//! root, and a read another user's process refuses is reported, never fatal.

use std::io;
use std::path::PathBuf;

/// The fields of `/proc/PID/stat` the walk needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stat {
    pub(crate) pid: u32,
    /// The executable name (at most 15 bytes), as the kernel keeps it.
    pub(crate) comm: String,
    /// R, S, D, Z (zombie: exited, not yet reaped), T, ...
    pub(crate) state: char,
    pub(crate) ppid: u32,
}

/// Parses one `/proc/PID/stat` line: `pid (comm) state ppid ...`.
///
/// `comm` may contain spaces and `)` itself (a process may name itself `a) b`), so it runs from
/// the first `(` to the LAST `)` of the line.
pub(crate) fn parse_stat(line: &str) -> Result<Stat, String> {
    let bad = || format!("malformed stat line: {:?}", truncate(line, 80));
    let open = line.find('(').ok_or_else(bad)?;
    let close = line.rfind(')').ok_or_else(bad)?;
    if close < open {
        return Err(bad());
    }
    let pid = line[..open].trim().parse().map_err(|_| bad())?;
    let comm = line[open + 1..close].to_string();
    let mut rest = line[close + 1..].split_ascii_whitespace();
    let state = rest.next().and_then(|s| s.chars().next()).ok_or_else(bad)?;
    let ppid = rest.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    Ok(Stat {
        pid,
        comm,
        state,
        ppid,
    })
}

/// Splits `/proc/PID/environ` (NUL-separated `NAME=value` entries) into pairs. Entries without
/// `=` are skipped; bytes that are not UTF-8 are replaced, not fatal.
pub(crate) fn parse_environ(bytes: &[u8]) -> Vec<(String, String)> {
    bytes
        .split(|&b| b == 0)
        .filter(|e| !e.is_empty())
        .filter_map(|e| {
            let e = String::from_utf8_lossy(e);
            let (k, v) = e.split_once('=')?;
            (!k.is_empty()).then(|| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// Splits `/proc/PID/cmdline` into arguments. A process that rewrote its title (Python's
/// setproctitle, as SGLang does for `sglang::scheduler_TP0`) may present one string with
/// spaces; that comes back as one argument. Empty for zombies and kernel threads.
pub(crate) fn parse_cmdline(bytes: &[u8]) -> Vec<String> {
    let bytes = bytes.strip_suffix(&[0]).unwrap_or(bytes);
    if bytes.is_empty() {
        return vec![];
    }
    bytes
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// The GPU index of a file-descriptor link target: `/dev/nvidia3` -> 3. The control and
/// driver nodes every CUDA process also opens (`/dev/nvidiactl`, `/dev/nvidia-uvm`,
/// `/dev/nvidia-caps/...`) are not GPUs and give `None`.
pub(crate) fn gpu_of_fd_target(target: &str) -> Option<u32> {
    let digits = target.strip_prefix("/dev/nvidia")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The distinct GPUs among a process's open file descriptors, sorted.
pub(crate) fn gpus_of_fd_targets<S: AsRef<str>>(targets: &[S]) -> Vec<u32> {
    let mut g: Vec<u32> = targets
        .iter()
        .filter_map(|t| gpu_of_fd_target(t.as_ref()))
        .collect();
    g.sort_unstable();
    g.dedup();
    g
}

/// Whether an environment variable is one this command reports: NCCL's (`NCCL_*`, in any case,
/// so a lower-case misspelling is caught), CUDA's (`CUDA_*`), PyTorch's NCCL settings
/// (`TORCH_NCCL_*`), and the NCCL library vLLM loads (`VLLM_NCCL_SO_PATH`).
pub(crate) fn is_reported_var(name: &str) -> bool {
    let up = |p: &str| {
        name.len() >= p.len() && name.as_bytes()[..p.len()].eq_ignore_ascii_case(p.as_bytes())
    };
    up("NCCL_")
        || name.starts_with("CUDA_")
        || name.starts_with("TORCH_NCCL_")
        || name == super::ncclmaps::SO_PATH_VAR
}

/// A command line as the table shows it: the program's file name without its directory, and
/// Python multiprocessing's helper processes named by role instead of by their `-c` code.
pub(crate) fn short_command(command: &str) -> String {
    let (prog, rest) = command.split_once(' ').unwrap_or((command, ""));
    let prog = if prog.starts_with('/') {
        prog.rsplit('/').next().unwrap_or(prog)
    } else {
        prog
    };
    let roles = [
        (
            "multiprocessing.spawn import spawn_main",
            "multiprocessing spawn child",
        ),
        (
            "multiprocessing.resource_tracker",
            "multiprocessing resource tracker",
        ),
        ("multiprocessing.forkserver", "multiprocessing forkserver"),
    ];
    for (code, role) in roles {
        if rest.contains(code) {
            return format!("{prog} [{role}]");
        }
    }
    if rest.is_empty() {
        prog.to_string()
    } else {
        format!("{prog} {rest}")
    }
}

/// `s` cut to at most `n` characters, with `...` when cut.
pub(crate) fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    let keep: String = s.chars().take(n.saturating_sub(3)).collect();
    format!("{keep}...")
}

/// Where process information comes from. Errors keep the kernel's kind: `NotFound` (or
/// `ESRCH`) means the process is gone, `PermissionDenied` that it belongs to someone else.
pub(crate) trait ProcSource {
    /// Every process id present now.
    fn pids(&self) -> io::Result<Vec<u32>>;
    /// The bytes of `/proc/PID/<file>` (`stat`, `cmdline`, `environ`, `maps`).
    fn read(&self, pid: u32, file: &str) -> io::Result<Vec<u8>>;
    /// The link targets of the process's open file descriptors (`/proc/PID/fd/*`).
    fn fd_targets(&self, pid: u32) -> io::Result<Vec<String>>;
}

/// The real /proc, or a directory laid out like it (tests).
#[derive(Debug, Clone)]
pub(crate) struct ProcFs {
    pub(crate) root: PathBuf,
}

impl Default for ProcFs {
    fn default() -> Self {
        ProcFs {
            root: PathBuf::from("/proc"),
        }
    }
}

impl ProcSource for ProcFs {
    fn pids(&self) -> io::Result<Vec<u32>> {
        let mut v: Vec<u32> = std::fs::read_dir(&self.root)?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        v.sort_unstable();
        Ok(v)
    }

    fn read(&self, pid: u32, file: &str) -> io::Result<Vec<u8>> {
        std::fs::read(self.root.join(pid.to_string()).join(file))
    }

    fn fd_targets(&self, pid: u32) -> io::Result<Vec<String>> {
        let dir = self.root.join(pid.to_string()).join("fd");
        let mut out = vec![];
        for e in std::fs::read_dir(dir)? {
            // An fd closed between listing and reading is simply gone.
            let Ok(e) = e else { continue };
            if let Ok(t) = std::fs::read_link(e.path()) {
                out.push(t.to_string_lossy().into_owned());
            }
        }
        Ok(out)
    }
}

/// Whether an error means the process no longer exists (exited, or exited and was reaped).
pub(crate) fn is_gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

/// A one-phrase description of why a file could not be read.
pub(crate) fn describe_read_error(e: &io::Error) -> String {
    if e.kind() == io::ErrorKind::PermissionDenied {
        "permission denied (another user's process: run as that user or as root)".to_string()
    } else {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_plain_comm() {
        let s = parse_stat("1234 (python3) S 1000 1234 1000 0 -1 4194560 100 0 0 0").unwrap();
        assert_eq!(
            s,
            Stat {
                pid: 1234,
                comm: "python3".into(),
                state: 'S',
                ppid: 1000
            }
        );
    }

    #[test]
    fn stat_comm_with_spaces_and_parens() {
        let s = parse_stat("77 (a) b (c)) Z 5 77 5 0 -1").unwrap();
        assert_eq!(s.comm, "a) b (c)");
        assert_eq!(s.state, 'Z');
        assert_eq!(s.ppid, 5);
        let s = parse_stat("8 (sglang::sched TP0) R 7 8\n").unwrap();
        assert_eq!(
            (s.pid, s.comm.as_str(), s.ppid),
            (8, "sglang::sched TP0", 7)
        );
    }

    #[test]
    fn stat_malformed() {
        for bad in [
            "",
            "12 python S 1",
            "x (a) S 1",
            "12 (a) S",
            "12 (a) S notanumber",
            "12 )a( S 1",
        ] {
            assert!(parse_stat(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn environ_split() {
        let e = parse_environ(b"A=1\0NCCL_PROTO=LL\0EMPTY=\0X=a=b\0noequals\0\0");
        assert_eq!(
            e,
            vec![
                ("A".into(), "1".into()),
                ("NCCL_PROTO".into(), "LL".into()),
                ("EMPTY".into(), "".into()),
                ("X".into(), "a=b".into()),
            ]
        );
        assert!(parse_environ(b"").is_empty());
        let lossy = parse_environ(b"V=\xff\0");
        assert_eq!(lossy[0].0, "V");
    }

    #[test]
    fn cmdline_split() {
        assert_eq!(
            parse_cmdline(b"python3\0-m\0sglang.launch_server\0--tp\x008\0"),
            vec!["python3", "-m", "sglang.launch_server", "--tp", "8"]
        );
        assert_eq!(
            parse_cmdline(b"sglang::scheduler_TP0 x"),
            vec!["sglang::scheduler_TP0 x"]
        );
        assert!(parse_cmdline(b"").is_empty());
        assert_eq!(parse_cmdline(b"a\0\0b\0"), vec!["a", "", "b"]);
    }

    #[test]
    fn fd_links_to_gpus() {
        assert_eq!(gpu_of_fd_target("/dev/nvidia0"), Some(0));
        assert_eq!(gpu_of_fd_target("/dev/nvidia13"), Some(13));
        for not_gpu in [
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools",
            "/dev/nvidia-caps/nvidia-cap1",
            "/dev/nvidia",
            "/dev/nvidia0 (deleted)",
            "socket:[12345]",
            "pipe:[99]",
            "/dev/null",
            "anon_inode:[eventfd]",
        ] {
            assert_eq!(gpu_of_fd_target(not_gpu), None, "{not_gpu}");
        }
        let t = [
            "/dev/nvidiactl",
            "/dev/nvidia3",
            "/dev/nvidia-uvm",
            "/dev/nvidia1",
            "/dev/nvidia3",
            "socket:[1]",
        ];
        assert_eq!(gpus_of_fd_targets(&t), vec![1, 3]);
    }

    #[test]
    fn reported_vars() {
        for y in [
            "NCCL_PROTO",
            "nccl_proto",
            "Nccl_Algo",
            "CUDA_VISIBLE_DEVICES",
            "TORCH_NCCL_BLOCKING_WAIT",
            "VLLM_NCCL_SO_PATH",
        ] {
            assert!(is_reported_var(y), "{y}");
        }
        for n in [
            "PATH",
            "NCCL",
            "CUDA",
            "TORCH_DISTRIBUTED_DEBUG",
            "MY_NCCL_PROTO",
            "cuda_home",
        ] {
            assert!(!is_reported_var(n), "{n}");
        }
    }

    #[test]
    fn short_commands() {
        assert_eq!(
            short_command("/srv/venv/bin/python3 -m sglang.launch_server --tp 8"),
            "python3 -m sglang.launch_server --tp 8"
        );
        assert_eq!(
            short_command(
                "/usr/bin/python3 -B -c from multiprocessing.spawn import spawn_main; \
                 spawn_main(tracker_fd=4, pipe_handle=6) --multiprocessing-fork"
            ),
            "python3 [multiprocessing spawn child]"
        );
        assert_eq!(
            short_command(
                "python3 -B -c from multiprocessing.resource_tracker import main;main(3)"
            ),
            "python3 [multiprocessing resource tracker]"
        );
        assert_eq!(
            short_command("sglang::scheduler_TP0"),
            "sglang::scheduler_TP0"
        );
        assert_eq!(short_command("/bin/sleep"), "sleep");
        assert_eq!(short_command("[kworker/0:1]"), "[kworker/0:1]");
    }

    #[test]
    fn truncation() {
        assert_eq!(truncate("abcdef", 10), "abcdef");
        assert_eq!(truncate("abcdefghijkl", 8), "abcde...");
    }

    #[test]
    fn real_proc_reads_own_process() {
        let p = ProcFs::default();
        let me = std::process::id();
        assert!(p.pids().unwrap().contains(&me));
        let st = parse_stat(&String::from_utf8_lossy(&p.read(me, "stat").unwrap())).unwrap();
        assert_eq!(st.pid, me);
        let err = p.read(u32::MAX - 1, "environ").unwrap_err();
        assert!(is_gone(&err));
    }

    #[test]
    fn permission_denied_is_described() {
        let e = io::Error::from(io::ErrorKind::PermissionDenied);
        assert!(describe_read_error(&e).contains("permission denied"));
        assert!(!is_gone(&e));
        assert!(is_gone(&io::Error::from_raw_os_error(libc::ESRCH)));
    }
}
