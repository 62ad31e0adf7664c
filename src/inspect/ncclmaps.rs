//! Which NCCL a process has mapped: the `libnccl*.so*` files of `/proc/PID/maps`, each with
//! the version its name tells (`libnccl.so.2.28.3`), or the pip wheel that installed it
//! (PyTorch's `nvidia/nccl/lib/libnccl.so.2` is only `.so.2`). What that shows in a process
//! tree (workers that map different builds, or a build other than the one `VLLM_NCCL_SO_PATH`
//! names: "the engine picked up the wheel's NCCL, not the patched one") is found in
//! [`super::findings`].
//!
//! The version from a name is what the file is called, not what NCCL reports: a build copied
//! under another name says what its name says. Where NCCL itself can be asked (a run's workers:
//! `ncclGetVersion`), its answer is what counts.

use std::path::Path;

use serde::Serialize;

/// The variable vLLM loads its NCCL from (the path of a libnccl.so* file).
pub(crate) const SO_PATH_VAR: &str = "VLLM_NCCL_SO_PATH";

/// What the name says when it carries no version.
pub(crate) const UNKNOWN_FROM_NAME: &str = "version unknown from the name";

/// One NCCL library file a process has mapped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct MappedNccl {
    /// The file, as the kernel names it (symbolic links resolved).
    pub(crate) path: String,
    /// The version its name (or its wheel) tells; `null` when neither does.
    pub(crate) version: Option<String>,
    /// Where the version comes from, or [`UNKNOWN_FROM_NAME`].
    pub(crate) version_from: String,
    /// The file was deleted (or replaced) after the process mapped it: an upgrade the running
    /// process has not picked up.
    pub(crate) deleted: bool,
}

impl MappedNccl {
    /// `/path (2.28.3)`, `/path (version unknown from the name)`: the path as the kernel names
    /// it (a file's name may hold any byte but `/` and NUL: print it through
    /// [`super::findings::shown`]).
    pub(crate) fn describe(&self) -> String {
        let v = match &self.version {
            Some(v) if self.version_from == FROM_NAME => v.clone(),
            Some(v) => format!("{v}, {}", self.version_from),
            None => self.version_from.clone(),
        };
        let deleted = if self.deleted {
            "; the file was deleted or replaced since it was mapped"
        } else {
            ""
        };
        format!("{} ({v}{deleted})", self.path)
    }
}

/// Where the version comes from when the file name tells it.
pub(crate) const FROM_NAME: &str = "from the file name";

/// Whether a file name is NCCL's library or one of its plugins: `libnccl*.so*`.
pub(crate) fn is_nccl_file_name(name: &str) -> bool {
    name.starts_with("libnccl") && name.contains(".so")
}

/// The distinct `libnccl*.so*` files mapped in a `/proc/PID/maps` text, in address order, each
/// with whether the kernel marks it `(deleted)`.
pub(crate) fn parse_maps(text: &str) -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = vec![];
    for line in text.lines() {
        // address perms offset dev inode [path]; the path may contain spaces.
        let mut rest = line.trim_start();
        for _ in 0..5 {
            rest = match rest.find(char::is_whitespace) {
                Some(i) => rest[i..].trim_start(),
                None => "",
            };
        }
        let (path, deleted) = match rest.strip_suffix(" (deleted)") {
            Some(p) => (p, true),
            None => (rest, false),
        };
        if !path.starts_with('/') {
            continue;
        }
        let name = path.rsplit('/').next().unwrap_or(path);
        if is_nccl_file_name(name) && !out.iter().any(|(p, _)| p == path) {
            out.push((path.to_string(), deleted));
        }
    }
    out
}

/// The version in a library file name: `libnccl.so.2.28.3` -> `2.28.3`; None when the name
/// has fewer than three numbers after `.so` (`libnccl.so.2`, `libnccl.so`).
pub(crate) fn version_from_name(file_name: &str) -> Option<String> {
    let (_, after) = file_name.split_once(".so.")?;
    let parts: Vec<&str> = after.split('.').collect();
    (parts.len() >= 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())))
    .then(|| after.to_string())
}

/// The version of the pip wheel that installed `path` (`<site>/nvidia/nccl/lib/<file>`, its
/// metadata `<site>/nvidia_nccl_cu13-2.28.9.dist-info`), as ("2.28.9", "nvidia-nccl-cu13");
/// None when the file is not in such a place or the wheel is not unique there.
fn wheel_version(path: &Path) -> Option<(String, String)> {
    let lib = path.parent()?;
    let nccl = lib.parent()?;
    let nvidia = nccl.parent()?;
    let named = |p: &Path, n: &str| p.file_name().is_some_and(|f| f == n);
    if !(named(lib, "lib") && named(nccl, "nccl") && named(nvidia, "nvidia")) {
        return None;
    }
    let site = nvidia.parent()?;
    let mut found: Vec<(String, String)> = std::fs::read_dir(site)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_str()?.to_string();
            let stem = n.strip_suffix(".dist-info")?;
            let (dist, version) = stem.split_once('-')?;
            dist.starts_with("nvidia_nccl")
                .then(|| (version.to_string(), dist.replace('_', "-")))
        })
        .collect();
    found.sort();
    found.dedup();
    (found.len() == 1).then(|| found.remove(0))
}

/// The version of an NCCL library file, and where it comes from: its name, the name it links to
/// (`libnccl.so.2` -> `libnccl.so.2.28.3`), or the pip wheel that installed it.
pub(crate) fn version_of_file(path: &Path) -> (Option<String>, String) {
    let name = |p: &Path| p.file_name().and_then(|f| f.to_str()).map(str::to_string);
    if let Some(v) = name(path).as_deref().and_then(version_from_name) {
        return (Some(v), FROM_NAME.into());
    }
    if let Ok(real) = std::fs::canonicalize(path) {
        if let Some(v) = name(&real).as_deref().and_then(version_from_name) {
            return (Some(v), "from the name it links to".into());
        }
    }
    if let Some((v, dist)) = wheel_version(path) {
        return (Some(v.clone()), format!("from the wheel {dist} {v}"));
    }
    (None, UNKNOWN_FROM_NAME.into())
}

/// The NCCL files mapped in a maps text, each with its version.
pub(crate) fn mapped(maps: &str) -> Vec<MappedNccl> {
    parse_maps(maps)
        .into_iter()
        .map(|(path, deleted)| {
            let (version, version_from) = version_of_file(Path::new(&path));
            MappedNccl {
                path,
                version,
                version_from,
                deleted,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c0a00000-55d0c0a02000 r--p 00000000 fd:01 1234   /usr/bin/python3.12
7f1c20000000-7f1c20400000 r--p 00000000 fd:01 777    /opt/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2
7f1c20400000-7f1c28000000 r-xp 00400000 fd:01 777    /opt/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2
7f1c30000000-7f1c30100000 r-xp 00000000 fd:01 778    /usr/lib/x86_64-linux-gnu/libnccl-net.so
7f1c31000000-7f1c31100000 r--p 00000000 fd:01 779    /srv/old build/libnccl.so.2.27.7 (deleted)
7f1c32000000-7f1c32100000 rw-p 00000000 00:00 0 
7f1c33000000-7f1c33100000 r--p 00000000 fd:01 780    /usr/lib/x86_64-linux-gnu/libncursesw.so.6.4
7ffd1c000000-7ffd1c021000 rw-p 00000000 00:00 0      [stack]
";

    #[test]
    fn maps_give_each_nccl_file_once_with_its_deleted_mark() {
        let got = parse_maps(MAPS);
        assert_eq!(
            got,
            vec![
                (
                    "/opt/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2".into(),
                    false
                ),
                ("/usr/lib/x86_64-linux-gnu/libnccl-net.so".into(), false),
                ("/srv/old build/libnccl.so.2.27.7".into(), true),
            ]
        );
        assert!(parse_maps("").is_empty());
        assert!(parse_maps("garbage\n\n7f-7f r--p").is_empty());
    }

    #[test]
    fn the_name_tells_the_version_only_when_it_has_three_numbers() {
        assert_eq!(
            version_from_name("libnccl.so.2.28.3").as_deref(),
            Some("2.28.3")
        );
        assert_eq!(
            version_from_name("libnccl.so.2.29.1.1").as_deref(),
            Some("2.29.1.1")
        );
        for none in [
            "libnccl.so.2",
            "libnccl.so",
            "libnccl.so.2.28",
            "libnccl.so.2.x.3",
        ] {
            assert_eq!(version_from_name(none), None, "{none}");
        }
        let (v, from) = version_of_file(Path::new("/nonexistent/libnccl.so.2"));
        assert_eq!((v, from.as_str()), (None, UNKNOWN_FROM_NAME));
    }

    #[test]
    fn a_link_and_a_wheel_tell_the_version_a_bare_so_2_does_not() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("libnccl.so.2.28.3"), b"x").unwrap();
        std::os::unix::fs::symlink("libnccl.so.2.28.3", d.path().join("libnccl.so.2")).unwrap();
        let (v, from) = version_of_file(&d.path().join("libnccl.so.2"));
        assert_eq!(v.as_deref(), Some("2.28.3"));
        assert_eq!(from, "from the name it links to");
        // a pip wheel: site/nvidia/nccl/lib/libnccl.so.2 and site/nvidia_nccl_cu13-2.28.9.dist-info
        let site = d.path().join("site");
        let lib = site.join("nvidia/nccl/lib");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join("libnccl.so.2"), b"x").unwrap();
        let (v, _) = version_of_file(&lib.join("libnccl.so.2"));
        assert_eq!(v, None, "no metadata yet");
        std::fs::create_dir(site.join("nvidia_nccl_cu13-2.28.9.dist-info")).unwrap();
        let (v, from) = version_of_file(&lib.join("libnccl.so.2"));
        assert_eq!(v.as_deref(), Some("2.28.9"));
        assert_eq!(from, "from the wheel nvidia-nccl-cu13 2.28.9");
        // two wheels there: which one installed the file is not known
        std::fs::create_dir(site.join("nvidia_nccl_cu12-2.27.5.dist-info")).unwrap();
        assert_eq!(version_of_file(&lib.join("libnccl.so.2")).0, None);
    }

    #[test]
    fn describe_says_where_the_version_comes_from() {
        let m = |path: &str, version: Option<&str>, from: &str, deleted| MappedNccl {
            path: path.into(),
            version: version.map(str::to_string),
            version_from: from.into(),
            deleted,
        };
        assert_eq!(
            m("/a/libnccl.so.2.28.3", Some("2.28.3"), FROM_NAME, false).describe(),
            "/a/libnccl.so.2.28.3 (2.28.3)"
        );
        assert_eq!(
            m("/w/libnccl.so.2", None, UNKNOWN_FROM_NAME, false).describe(),
            "/w/libnccl.so.2 (version unknown from the name)"
        );
        assert_eq!(
            m("/w/libnccl.so.2", Some("2.28.9"), "from the wheel x 2.28.9", true).describe(),
            "/w/libnccl.so.2 (2.28.9, from the wheel x 2.28.9; the file was deleted or replaced since it was mapped)"
        );
    }
}

#[cfg(test)]
mod tree_tests {
    use crate::inspect::findings::{Finding, Kind};
    use crate::inspect::procfs::ProcFs;
    use crate::inspect::walk::tests::Mock;
    use crate::inspect::{inspect, render, snapshot};

    /// A server of two GPU workers: rank 0 maps the system NCCL 2.28.3, rank 1 the wheel's
    /// (`.so.2` only), started with VLLM_NCCL_SO_PATH naming the system one.
    fn server() -> Mock {
        let mut m = Mock::default();
        let so = [("VLLM_NCCL_SO_PATH", "/usr/lib/libnccl.so.2.28.3")];
        m.add(100, 1, "python3", "python3 -m vllm serve", &so);
        m.add(101, 100, "python3", "python3 -c spawn_main", &so);
        m.add(102, 100, "python3", "python3 -c spawn_main", &so);
        m.fds.insert(101, vec!["/dev/nvidia0".into()]);
        m.fds.insert(102, vec!["/dev/nvidia1".into()]);
        let line = |p: &str| format!("7f00-7f10 r-xp 00000000 fd:01 9 {p}\n").into_bytes();
        m.files
            .insert((101, "maps".into()), line("/usr/lib/libnccl.so.2.28.3"));
        m.files.insert(
            (102, "maps".into()),
            line("/site/nvidia/nccl/lib/libnccl.so.2"),
        );
        m
    }

    #[test]
    fn each_process_shows_the_nccl_it_mapped_and_the_differences_are_found() {
        let m = server();
        let r = inspect(&m, &snapshot(&m).unwrap(), &[100], &[]).unwrap();
        let t = &r.trees[0];
        let nccl = |pid: u32| {
            t.tree
                .processes
                .iter()
                .find(|p| p.pid == pid)
                .unwrap()
                .nccl
                .clone()
                .unwrap()
        };
        assert!(nccl(100).is_empty());
        assert_eq!(nccl(101)[0].version.as_deref(), Some("2.28.3"));
        assert_eq!(nccl(102)[0].version, None);
        let kinds: Vec<Kind> = t.findings.iter().map(|f| f.kind).collect();
        assert!(kinds.contains(&Kind::NcclLibrariesDiffer), "{kinds:?}");
        let differ = t
            .findings
            .iter()
            .find(|f| f.kind == Kind::NcclLibrariesDiffer)
            .unwrap();
        assert_eq!(
            differ.message,
            "the GPU-holding processes map different NCCL libraries: \
             /site/nvidia/nccl/lib/libnccl.so.2 (version unknown from the name) in 102 (GPU 1); \
             /usr/lib/libnccl.so.2.28.3 (2.28.3) in 101 (GPU 0)"
        );
        // only rank 1 runs another NCCL than VLLM_NCCL_SO_PATH names (the file does not exist
        // on this machine, so the value is compared as written)
        let named: Vec<&Finding> = t
            .findings
            .iter()
            .filter(|f| f.kind == Kind::NcclNotTheOneNamed)
            .collect();
        assert_eq!(named.len(), 1);
        assert_eq!(named[0].pids, vec![102]);
        let text = render::render_table(&r);
        assert!(
            text.contains("NCCL mapped: /usr/lib/libnccl.so.2.28.3 (2.28.3)"),
            "{text}"
        );
        assert!(
            text.contains(
                "NCCL mapped: /site/nvidia/nccl/lib/libnccl.so.2 (version unknown from the name)"
            ),
            "{text}"
        );
    }

    #[test]
    fn unreadable_maps_are_said_and_not_fatal() {
        let mut m = server();
        m.fail(101, "maps", std::io::ErrorKind::PermissionDenied);
        let r = inspect(&m, &snapshot(&m).unwrap(), &[100], &[]).unwrap();
        let p = &r.trees[0].tree.processes[1];
        assert_eq!((p.pid, p.nccl.as_ref()), (101, None));
        // one library left among the GPU holders: nothing differs
        assert!(!r.trees[0]
            .findings
            .iter()
            .any(|f| f.kind == Kind::NcclLibrariesDiffer));
        assert!(render::render_table(&r).contains("NCCL mappings unreadable: permission denied"));
    }

    #[test]
    fn a_real_child_that_maps_a_library_is_shown_with_its_version() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libnccl.so.2.99.9");
        std::fs::write(&lib, b"not really NCCL, but mappable\n").unwrap();
        let lib = std::fs::canonicalize(&lib).unwrap();
        // The child maps the file, says so, and exits when its stdin closes.
        let code = "import mmap,sys\n\
                    f=open(sys.argv[1],'rb')\n\
                    m=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ)\n\
                    print('mapped',flush=True)\n\
                    sys.stdin.read()";
        let mut child = std::process::Command::new("python3")
            .args(["-c", code])
            .arg(&lib)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line.trim(), "mapped");
        let src = ProcFs::default();
        let me = std::process::id();
        let r = inspect(&src, &snapshot(&src).unwrap(), &[me], &[]).unwrap();
        let procs = &r.trees[0].tree.processes;
        let path = lib.display().to_string();
        let mapping: Vec<_> = procs
            .iter()
            .filter(|p| {
                p.nccl
                    .as_ref()
                    .is_some_and(|l| l.iter().any(|m| m.path == path))
            })
            .collect();
        drop(child.stdin.take());
        let _ = child.wait();
        assert_eq!(mapping.len(), 1, "one process maps it");
        let p = mapping[0];
        // python3 may be a launcher that starts the interpreter as its child
        assert!(
            p.pid == child.id() || p.ppid == child.id(),
            "pid {} (parent {}) is the child {} or under it",
            p.pid,
            p.ppid,
            child.id()
        );
        let m = &p.nccl.as_ref().unwrap()[0];
        assert_eq!(m.version.as_deref(), Some("2.99.9"));
        let text = render::render_table(&r);
        let at = text
            .lines()
            .position(|l| l.split_whitespace().next() == Some(&p.pid.to_string()))
            .expect("the process has a row");
        let want = format!("NCCL mapped: {path} (2.99.9)");
        assert!(
            text.lines()
                .skip(at + 1)
                .take_while(
                    |l| l.starts_with("   ") && !l.trim_start().starts_with(char::is_numeric)
                )
                .any(|l| l.trim() == want),
            "{want} under pid {}:\n{text}",
            p.pid
        );
    }
}
