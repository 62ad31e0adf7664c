//! The files a command reads and writes, gathered in one place per command ([`Files`]) and
//! checked before any work: an output is never one of the inputs (the files in a folder given
//! included) nor another output, compared by identity, not by spelling (the same file after
//! every link: its device and inode, so a hard link or a symbolic link is the file it names);
//! an output is never a folder, a disk or a socket, and its folder can be written.
//!
//! And the one way a whole output is written ([`write_file`]): `-` is standard output; a
//! regular file, or a new one, by temp-and-rename, through symbolic links to the file they
//! name (the link stays a link); a character device (`/dev/null`, a terminal) or a FIFO in
//! place, opened for writing and never renamed over: a rename over `/dev/null`, run as root,
//! replaced the system's `/dev/null` with a regular file.

use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::parent_dir;
use crate::error::usage;

/// What a path names, for telling whether two paths are one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Identity {
    /// `-`: standard output.
    Stdout,
    /// An existing file, after every link: its device and inode (hard links are one file).
    Inode(u64, u64),
    /// A file not there yet: the real path of its folder joined with its name (after links).
    New(PathBuf),
}

/// Whether `path` is `-`, standard output.
pub(crate) fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// What `path` names ([`Identity`]); None when neither it nor its folder can be found.
pub(crate) fn identity(path: &Path) -> Option<Identity> {
    if is_stdout(path) {
        return Some(Identity::Stdout);
    }
    if let Ok(m) = std::fs::metadata(path) {
        return Some(Identity::Inode(m.dev(), m.ino()));
    }
    let target = link_target(path).ok()?;
    let dir = std::fs::canonicalize(parent_dir(&target)).ok()?;
    Some(Identity::New(dir.join(target.file_name()?)))
}

/// The path a chain of symbolic links ends at (`path` itself when it is no link); the end
/// need not exist (a link to a file not written yet).
fn link_target(path: &Path) -> anyhow::Result<PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let t = std::fs::read_link(&p)?;
                p = if t.is_absolute() {
                    t
                } else {
                    parent_dir(&p).join(t)
                };
            }
            _ => return Ok(p),
        }
    }
    Err(usage(format!(
        "'{}': more than 40 symbolic links in a row (a loop?)",
        path.display()
    )))
}

/// What an output path names now, and so how it is written.
#[derive(Debug, Clone, PartialEq)]
enum Target {
    /// `-`.
    Stdout,
    /// A regular file (its real path) or a file not there yet (the path to create, after
    /// links): written by temp-and-rename in that folder.
    Replace(PathBuf),
    /// A character device or a FIFO (`fifo`): written in place.
    InPlace { fifo: bool },
    /// A folder.
    Dir,
    /// What may not be written (a block device, a socket), in words.
    Refused(&'static str),
}

fn target(path: &Path) -> anyhow::Result<Target> {
    if is_stdout(path) {
        return Ok(Target::Stdout);
    }
    let cannot = |e: std::io::Error| anyhow::anyhow!("cannot write '{}': {e}", path.display());
    match std::fs::metadata(path) {
        Ok(m) => {
            let t = m.file_type();
            Ok(if t.is_file() {
                Target::Replace(std::fs::canonicalize(path).map_err(cannot)?)
            } else if t.is_dir() {
                Target::Dir
            } else if t.is_char_device() || t.is_fifo() {
                Target::InPlace { fifo: t.is_fifo() }
            } else if t.is_block_device() {
                Target::Refused("a block device (a disk)")
            } else if t.is_socket() {
                Target::Refused("a socket")
            } else {
                Target::Refused("not a regular file")
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok(Target::Replace(link_target(path)?))
        }
        Err(e) => Err(cannot(e)),
    }
}

/// Writes `bytes` to `path` ([`Target`]): `-` to standard output; a regular file or a new one
/// atomically enough for results (a temporary file in the same folder, fsync, rename; through
/// symbolic links, in the folder of the file they name); a character device or a FIFO in place.
/// The folder must exist (nothing is created silently); on any failure the temporary file is
/// removed and the error names `path`.
pub fn write_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    match target(path)? {
        Target::Stdout => {
            let mut out = std::io::stdout().lock();
            out.write_all(bytes)
                .and_then(|_| out.flush())
                .map_err(|e| anyhow::anyhow!("cannot write to stdout: {e}"))
        }
        Target::Replace(real) => replace(path, &real, bytes),
        Target::InPlace { fifo } => in_place(path, fifo, bytes),
        Target::Dir => Err(usage(format!(
            "cannot write '{}': it is a directory; give a file path",
            path.display()
        ))),
        Target::Refused(what) => Err(usage(format!(
            "cannot write '{}': it is {what}; give a regular file, a new path or - (stdout)",
            path.display()
        ))),
    }
}

/// Temp-and-rename into `real` (the file `shown` names).
fn replace(shown: &Path, real: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use anyhow::Context;
    let dir = parent_dir(real);
    if !dir.is_dir() {
        return Err(usage(format!(
            "cannot write '{}': folder '{}' does not exist; create it first",
            shown.display(),
            dir.display()
        )));
    }
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(
            ".{}.",
            real.file_name().and_then(|n| n.to_str()).unwrap_or("out")
        ))
        .suffix(".tmp")
        .tempfile_in(dir)
        .with_context(|| format!("cannot write '{}'", shown.display()))?;
    tmp.write_all(bytes)
        .and_then(|_| tmp.as_file().sync_all())
        .with_context(|| format!("cannot write '{}'", shown.display()))?;
    // A temporary file is created mode 0600; the result is a file like any other the user
    // writes, so it takes the mode `>` would give it: 0666 less the umask.
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = 0o666 & !super::umask();
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("cannot write '{}'", shown.display()))?;
    }
    tmp.persist(real)
        .map_err(|e| anyhow::anyhow!("cannot write '{}': {}", shown.display(), e.error))?;
    Ok(())
}

/// Writes into a character device or a FIFO as it is. A FIFO is opened without waiting: with
/// no reader the open fails at once (it would block forever), then its writes wait for the
/// reader as a pipe's do.
fn in_place(path: &Path, fifo: bool, bytes: &[u8]) -> anyhow::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let mut o = std::fs::OpenOptions::new();
    o.write(true);
    if fifo {
        o.custom_flags(libc::O_NONBLOCK);
    }
    let mut f = o.open(path).map_err(|e| {
        if e.raw_os_error() == Some(libc::ENXIO) {
            usage(format!(
                "cannot write '{}': it is a FIFO that no process reads; start its reader first",
                path.display()
            ))
        } else {
            anyhow::anyhow!("cannot write '{}': {e}", path.display())
        }
    })?;
    if fifo {
        let fd = f.as_raw_fd();
        // SAFETY: fd is the open descriptor of `f`, alive for the two calls; F_GETFL and
        // F_SETFL only read and set its status flags.
        let ok = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) == 0
        };
        if !ok {
            anyhow::bail!(
                "cannot write '{}': {}",
                path.display(),
                std::io::Error::last_os_error()
            );
        }
    }
    f.write_all(bytes)
        .and_then(|_| f.flush())
        .map_err(|e| anyhow::anyhow!("cannot write '{}': {e}", path.display()))
}

/// Whether a file can be created in `dir` (tried for real, and removed at once).
fn check_writable_dir(flag: &str, target: &Path, dir: &Path) -> anyhow::Result<()> {
    if !dir.is_dir() {
        return Err(usage(format!(
            "{flag} '{}': folder '{}' does not exist; create it first or give another path",
            target.display(),
            dir.display()
        )));
    }
    tempfile::Builder::new()
        .prefix(".verifybench-check")
        .tempfile_in(dir)
        .map(drop)
        .map_err(|e| {
            usage(format!(
                "{flag} '{}': cannot write into folder '{}' ({e}); give a writable path",
                target.display(),
                dir.display()
            ))
        })
}

/// How an output is written.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Out {
    /// One document, written whole by [`write_file`] (`-`: stdout).
    Whole,
    /// A file appended to and read back (a sweep's results): a regular file or a new one.
    Appended,
    /// A folder (created if missing) and the names of the files written into it.
    Dir(&'static [&'static str]),
}

/// The files one command reads (each with its flag) and writes, checked together before any
/// work ([`Files::check`]).
#[derive(Debug, Default)]
pub(crate) struct Files {
    inputs: Vec<(String, PathBuf)>,
    outputs: Vec<(String, PathBuf, Out)>,
    /// (output flag, input flag) pairs that may name one file (`sweep --results F --resume F`).
    shared: Vec<(&'static str, &'static str)>,
}

/// Files of a folder input, at most this deep and this many: a folder given as an input is
/// read that far at most by any reader.
const FOLDER_DEPTH: usize = 8;
const FOLDER_FILES: usize = 100_000;

impl Files {
    pub(crate) fn new() -> Files {
        Files::default()
    }

    /// An input file or folder (a folder stands for every file in it and below).
    pub(crate) fn input(&mut self, flag: &str, path: Option<&Path>) -> &mut Files {
        if let Some(p) = path {
            self.inputs.push((flag.to_string(), p.to_path_buf()));
        }
        self
    }

    /// Inputs given to one flag.
    pub(crate) fn inputs<'a>(
        &mut self,
        flag: &str,
        paths: impl IntoIterator<Item = &'a PathBuf>,
    ) -> &mut Files {
        for p in paths {
            self.input(flag, Some(p));
        }
        self
    }

    /// A whole output (`-` is stdout).
    pub(crate) fn output(&mut self, flag: &str, path: Option<&Path>) -> &mut Files {
        if let Some(p) = path {
            self.outputs
                .push((flag.to_string(), p.to_path_buf(), Out::Whole));
        }
        self
    }

    /// An output appended to and read back: a regular file or a new one.
    pub(crate) fn appended(&mut self, flag: &str, path: &Path) -> &mut Files {
        self.outputs
            .push((flag.to_string(), path.to_path_buf(), Out::Appended));
        self
    }

    /// An output folder and the names of the files written into it.
    pub(crate) fn output_dir(
        &mut self,
        flag: &str,
        dir: &Path,
        names: &'static [&'static str],
    ) -> &mut Files {
        self.outputs
            .push((flag.to_string(), dir.to_path_buf(), Out::Dir(names)));
        self
    }

    /// The output of `output_flag` may be the input of `input_flag` (a file appended to that
    /// the command reads first).
    pub(crate) fn shared(
        &mut self,
        output_flag: &'static str,
        input_flag: &'static str,
    ) -> &mut Files {
        self.shared.push((output_flag, input_flag));
        self
    }

    /// Checks every output before any work: it can be written where it is, and it is neither
    /// an input nor another output. Exit code 2 with one line naming the flag otherwise.
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        let inputs = self.input_files();
        let mut seen: Vec<(&str, Identity)> = vec![];
        for (flag, path, out) in &self.outputs {
            let mut ids = vec![];
            match out {
                Out::Whole => check_whole(flag, path, &mut ids)?,
                Out::Appended => check_appended(flag, path, &mut ids)?,
                Out::Dir(names) => check_dir(flag, path, names, &mut ids)?,
            }
            for (written, id) in ids {
                let input = inputs.iter().find(|i| {
                    i.id == id && i.flag != *flag && !self.shared.contains(&(flag, &i.flag))
                });
                if let Some(i) = input {
                    return Err(usage(format!(
                        "{flag} '{}' is also an input, {}: writing it would replace the input; give another output path",
                        written.display(),
                        i.describe()
                    )));
                }
                if let Some((other, _)) = seen.iter().find(|(_, s)| *s == id) {
                    return Err(usage(format!(
                        "{flag} '{}' is also given to {other}; give each output its own path",
                        written.display()
                    )));
                }
                seen.push((flag, id));
            }
        }
        Ok(())
    }

    /// Every input file with its identity, the files of folders included.
    fn input_files(&self) -> Vec<InputFile> {
        let mut out = vec![];
        for (flag, path) in &self.inputs {
            if path.is_dir() {
                let mut files = vec![];
                folder_files(path, FOLDER_DEPTH, &mut files);
                for f in files {
                    if let Some(id) = identity(&f) {
                        out.push(InputFile {
                            flag: flag.clone(),
                            path: f,
                            folder: Some(path.clone()),
                            id,
                        });
                    }
                }
            } else if let Some(id @ Identity::Inode(..)) = identity(path) {
                out.push(InputFile {
                    flag: flag.clone(),
                    path: path.clone(),
                    folder: None,
                    id,
                });
            }
        }
        out
    }
}

/// One input file, found by its identity.
struct InputFile {
    flag: String,
    path: PathBuf,
    /// The folder given, when the file is one of its files.
    folder: Option<PathBuf>,
    id: Identity,
}

impl InputFile {
    /// `the file given to --profile as 'p.json'`, `the file given as RESULTS 'r.json'`,
    /// `'t/r0.json' of the folder given to --trace as 't'`.
    fn describe(&self) -> String {
        let given = if self.flag.starts_with('-') {
            format!("given to {} as", self.flag)
        } else {
            format!("given as {}", self.flag)
        };
        match &self.folder {
            Some(d) => format!(
                "'{}' of the folder {given} '{}'",
                self.path.display(),
                d.display()
            ),
            None => format!("the file {given} '{}'", self.path.display()),
        }
    }
}

/// The files in `dir` and its folders, `depth` levels down at most, [`FOLDER_FILES`] at most.
fn folder_files(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.filter_map(|e| e.ok()) {
        if out.len() >= FOLDER_FILES {
            return;
        }
        let p = e.path();
        if p.is_dir() {
            if depth > 0 {
                folder_files(&p, depth - 1, out);
            }
        } else {
            out.push(p);
        }
    }
}

/// A whole output: `-`, a device or FIFO written in place, or a file replaced in a writable
/// folder. Its identity (none for one written in place: it replaces nothing) goes to `ids`.
fn check_whole(flag: &str, path: &Path, ids: &mut Vec<(PathBuf, Identity)>) -> anyhow::Result<()> {
    match target(path)? {
        Target::Stdout => ids.push((path.to_path_buf(), Identity::Stdout)),
        Target::Replace(real) => {
            check_writable_dir(flag, path, parent_dir(&real))?;
            ids.extend(identity(path).map(|id| (path.to_path_buf(), id)));
        }
        Target::InPlace { .. } => {
            // two outputs into one device or FIFO would interleave: still one output each
            ids.extend(identity(path).map(|id| (path.to_path_buf(), id)));
        }
        Target::Dir => {
            return Err(usage(format!(
                "{flag} '{}' is a directory; give a file path",
                path.display()
            )))
        }
        Target::Refused(what) => {
            return Err(usage(format!(
                "{flag} '{}' is {what}: give a regular file, a new path or - (stdout)",
                path.display()
            )))
        }
    }
    Ok(())
}

/// An output appended to and read back: a regular file or a new one, never `-`, a device or a
/// FIFO.
fn check_appended(
    flag: &str,
    path: &Path,
    ids: &mut Vec<(PathBuf, Identity)>,
) -> anyhow::Result<()> {
    let what = match target(path)? {
        Target::Replace(real) => {
            check_writable_dir(flag, path, parent_dir(&real))?;
            ids.extend(identity(path).map(|id| (path.to_path_buf(), id)));
            return Ok(());
        }
        Target::Stdout => "standard output",
        Target::InPlace { fifo: true } => "a FIFO",
        Target::InPlace { fifo: false } => "a character device",
        Target::Dir => "a directory",
        Target::Refused(what) => what,
    };
    Err(usage(format!(
        "{flag} '{}' is {what}: this file is appended to point by point and read back (--resume); give a regular file or a new path",
        path.display()
    )))
}

/// An output folder: an existing writable one, or a new one whose parent folder exists and is
/// writable (created later, when the work writes into it); the files `names` written into it
/// go to `ids`.
fn check_dir(
    flag: &str,
    dir: &Path,
    names: &[&str],
    ids: &mut Vec<(PathBuf, Identity)>,
) -> anyhow::Result<()> {
    if is_stdout(dir) {
        return Err(usage(format!(
            "{flag} -: this output is a folder of several files, not one stream; give a directory path"
        )));
    }
    if dir.exists() {
        if !dir.is_dir() {
            return Err(usage(format!(
                "{flag} '{}' is a file, not a directory; give a directory path",
                dir.display()
            )));
        }
        check_writable_dir(flag, dir, dir)?;
    } else {
        check_writable_dir(flag, dir, parent_dir(dir))?;
    }
    for name in names {
        let p = dir.join(name);
        ids.extend(identity(&p).map(|id| (p, id)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(f: &Files) -> String {
        let e = f.check().unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2, "{e}");
        e.to_string()
    }

    #[test]
    fn an_output_is_no_input_by_any_name() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let input = d.join("p.json");
        std::fs::write(&input, "input").unwrap();
        std::os::unix::fs::symlink(&input, d.join("link.json")).unwrap();
        std::fs::hard_link(&input, d.join("hard.json")).unwrap();
        for out in ["p.json", "./p.json", "link.json", "hard.json"] {
            let o = d.join(out);
            let e = refused(
                Files::new()
                    .input("--profile", Some(&input))
                    .output("--export-json", Some(&o)),
            );
            assert!(
                e.starts_with(&format!("--export-json '{}' is also an input", o.display()))
                    && e.contains("the file given to --profile"),
                "{e}"
            );
        }
        // a file of a folder given
        let traces = d.join("traces");
        std::fs::create_dir_all(traces.join("rank1")).unwrap();
        std::fs::write(traces.join("rank1/t.json"), "{}").unwrap();
        let e = refused(
            Files::new()
                .input("--trace", Some(&traces))
                .output("--export-json", Some(&traces.join("rank1/t.json"))),
        );
        assert!(e.contains("of the folder given to --trace"), "{e}");
        // a new file in that folder replaces nothing
        Files::new()
            .input("--trace", Some(&traces))
            .output("--export-json", Some(&traces.join("new.json")))
            .check()
            .unwrap();
        assert_eq!(std::fs::read_to_string(&input).unwrap(), "input");
    }

    #[test]
    fn two_outputs_on_one_file_or_on_stdout_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.json");
        let e = refused(
            Files::new()
                .output("--export-json", Some(&a))
                .output("--export-csv", Some(&dir.path().join("./a.json"))),
        );
        assert!(e.contains("is also given to --export-json"), "{e}");
        let e = refused(
            Files::new()
                .output("--export-json", Some(Path::new("-")))
                .output("--export-csv", Some(Path::new("-"))),
        );
        assert!(
            e.contains("--export-csv '-' is also given to --export-json"),
            "{e}"
        );
    }

    #[test]
    fn what_may_not_be_written_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let e = refused(Files::new().output("--export-json", Some(d)));
        assert!(e.contains("is a directory"), "{e}");
        let e = refused(Files::new().appended("--results", Path::new("-")));
        assert!(e.contains("is standard output"), "{e}");
        let e = refused(Files::new().appended("--results", Path::new("/dev/null")));
        assert!(e.contains("is a character device"), "{e}");
        let e = refused(Files::new().output_dir("-o/--out", Path::new("-"), &[]));
        assert!(e.contains("not one stream"), "{e}");
        // a link to a file in a missing folder: the folder of the file it names is checked
        std::os::unix::fs::symlink(d.join("nowhere/x.json"), d.join("dangling.json")).unwrap();
        let e = refused(Files::new().output("--export-json", Some(&d.join("dangling.json"))));
        assert!(e.contains("folder") && e.contains("nowhere"), "{e}");
        // a socket
        let sock = d.join("s.sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let e = refused(Files::new().output("--export-json", Some(&sock)));
        assert!(e.contains("is a socket"), "{e}");
        assert!(write_file(&sock, b"x").is_err());
        assert!(std::fs::metadata(&sock).unwrap().file_type().is_socket());
    }

    #[test]
    fn a_link_is_written_through_and_stays_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("real")).unwrap();
        let file = d.join("real/out.json");
        std::fs::write(&file, "old").unwrap();
        let link = d.join("link.json");
        std::os::unix::fs::symlink("real/out.json", &link).unwrap();
        write_file(&link, b"new").unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "new");
        // a dangling link: the file it names is created, the link stays
        let dangling = d.join("later.json");
        std::os::unix::fs::symlink("real/later.json", &dangling).unwrap();
        write_file(&dangling, b"made").unwrap();
        assert_eq!(
            std::fs::read_to_string(d.join("real/later.json")).unwrap(),
            "made"
        );
        assert!(std::fs::symlink_metadata(&dangling)
            .unwrap()
            .file_type()
            .is_symlink());
        // no temporary file left beside the link or the file
        let mut names: Vec<String> = std::fs::read_dir(d.join("real"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["later.json", "out.json"]);
    }

    #[test]
    fn a_fifo_is_written_in_place_and_stays_a_fifo() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path; mkfifo only creates the node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // no reader: refused at once, never blocked on
        let e = write_file(&fifo, b"x").unwrap_err();
        assert!(e.to_string().contains("no process reads"), "{e}");
        let reader = {
            let f = fifo.clone();
            std::thread::spawn(move || {
                use std::io::Read;
                let mut s = String::new();
                std::fs::File::open(&f)
                    .unwrap()
                    .read_to_string(&mut s)
                    .unwrap();
                s
            })
        };
        // the reader opens the FIFO; retry until it has
        let big = vec![b'y'; 1 << 20];
        let mut tries = 0;
        while let Err(e) = write_file(&fifo, &big) {
            assert!(e.to_string().contains("no process reads"), "{e}");
            tries += 1;
            assert!(tries < 2000, "the reader never opened the FIFO");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // more than a pipe holds: the writes waited for the reader
        assert_eq!(reader.join().unwrap().len(), 1 << 20);
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
        Files::new()
            .output("--export-json", Some(&fifo))
            .check()
            .unwrap();
    }

    #[test]
    fn a_terminal_is_written_in_place_and_stays_a_device() {
        use std::io::Read;
        use std::os::fd::FromRawFd;
        // a pseudo-terminal of this test's own (never /dev/null: were the write a rename,
        // the test would replace the system's device)
        // SAFETY: posix_openpt returns a new descriptor or -1; grantpt and unlockpt take it.
        let master = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY) };
        if master < 0 || unsafe { libc::grantpt(master) != 0 || libc::unlockpt(master) != 0 } {
            eprintln!("no pseudo-terminal here: skipped");
            return;
        }
        // SAFETY: master is an open descriptor this test owns from here on.
        let mut m = unsafe { std::fs::File::from_raw_fd(master) };
        let mut name = [0 as libc::c_char; 256];
        // SAFETY: the buffer and its length are the buffer's own.
        assert_eq!(
            unsafe { libc::ptsname_r(master, name.as_mut_ptr(), name.len()) },
            0
        );
        // SAFETY: ptsname_r wrote a NUL-terminated name into the buffer.
        let pts = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
            .to_str()
            .unwrap()
            .to_string();
        let pts = Path::new(&pts);
        Files::new()
            .output("--export-json", Some(pts))
            .check()
            .unwrap();
        write_file(pts, b"hello").unwrap();
        let mut got = [0u8; 5];
        m.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hello");
        assert!(std::fs::metadata(pts).unwrap().file_type().is_char_device());
    }

    #[test]
    fn devices_are_checked_without_being_written() {
        // only looked at: /dev/null is never written by a test
        let null = Path::new("/dev/null");
        if std::fs::metadata(null).is_ok_and(|m| m.file_type().is_char_device()) {
            assert_eq!(target(null).unwrap(), Target::InPlace { fifo: false });
            Files::new()
                .output("--export-json", Some(null))
                .check()
                .unwrap();
        }
    }
}
