//! The one reader of the files a user names: each kind of file has a stated limit ([`Limit`]),
//! and only a regular file is read. A device (`/dev/zero`, `/dev/full`, `/dev/urandom`), a
//! named pipe, a socket or a folder is refused by its type before a byte is read (no command
//! reads standard input or `-`), and a file larger than its kind's limit is refused by its size
//! before it is read, or when it grows past the limit while being read. Every refusal is a
//! usage error (exit 2) that names the flag or file and the limit.
//!
//! Traces are read as a stream, not whole: [`open`] gives them the same type check, and
//! `trace::reader` bounds what they expand to. Files the kernel makes (`/proc`, `/sys`) and the
//! program's own scratch files are not read here: their size is the kernel's or the program's.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use crate::error::usage;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// A kind of file, with the most of it the program reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limit {
    /// The most bytes read.
    pub(crate) bytes: u64,
    /// What such a file is, as the refusal says it ("a model config").
    pub(crate) kind: &'static str,
    /// How large real ones are, as the refusal says it.
    pub(crate) real: &'static str,
}

/// `--rendezvous-token-file`.
pub(crate) const TOKEN: Limit = Limit {
    bytes: 4 * KIB,
    kind: "a rendezvous token file",
    real: "`openssl rand -hex 32` writes 65 bytes",
};

/// `--model-config`: a Hugging Face `config.json`.
pub(crate) const CONFIG: Limit = Limit {
    bytes: 4 * MIB,
    kind: "a model config",
    real: "the largest of the tests' real configs, Llama-3.3-Nemotron-Super-49B's with one entry per layer, is 37 KB",
};

/// `--schedule`, `--host-gap-from`, `--against-plan`: a schedule file.
pub(crate) const SCHEDULE: Limit = Limit {
    bytes: 256 * MIB,
    kind: "a schedule file",
    real: "`plan --format json` of the longest preset is 132 KB; one of the 117,649 operations an exact run checks at most is about 30 MB",
};

/// A cost-model profile (`--profile`).
pub(crate) const PROFILE: Limit = Limit {
    bytes: 16 * MIB,
    kind: "a profile",
    real: "a profile fitted on a real machine is 40 KB",
};

/// A results file: a record, an array of records, JSON lines of a sweep.
pub(crate) const RESULTS: Limit = Limit {
    bytes: 256 * MIB,
    kind: "a results file",
    real: "a sweep's JSON lines are about 1 KB per point and round; the largest committed results file is 90 KB",
};

/// The text output of nccl-tests (`--nccl-tests`).
pub(crate) const NCCL_TESTS: Limit = Limit {
    bytes: 16 * MIB,
    kind: "an nccl-tests output",
    real: "a full sweep of sizes is about 10 KB",
};

/// A server's log (`--server-log`, `--accept-from-log`).
pub(crate) const SERVER_LOG: Limit = Limit {
    bytes: GIB,
    kind: "a server log",
    real: "SGLang logs a decode line of about 250 bytes per 40 iterations: a day of serving is tens of MB",
};

/// An NCCL log (`--nccl-log`, NCCL logs in `trace`'s inputs, a sweep's worker logs).
pub(crate) const NCCL_LOG: Limit = Limit {
    bytes: GIB,
    kind: "an NCCL log",
    real: "a COLL log has one line of about 200 bytes per call, 16 MB for 80,000 calls; an INFO log is 4-30 KB",
};

/// The job a `__rank` worker is given by its parent.
pub(crate) const JOB: Limit = Limit {
    bytes: 512 * MIB,
    kind: "a worker's job file",
    real: "a job holds its schedule, at most 256 MiB, and the run's settings",
};

/// The peer-access cache of this machine (written by the program, in a folder of the user).
pub(crate) const P2P_CACHE: Limit = Limit {
    bytes: MIB,
    kind: "the peer-access cache",
    real: "the 56 GPU pairs of 8 GPUs take a few KB",
};

/// A rank's P2P handles, written for the other ranks of its job.
pub(crate) const P2P_HANDLES: Limit = Limit {
    bytes: 64 * KIB,
    kind: "a rank's P2P handle file",
    real: "a rank's handles are a few hundred bytes of hex",
};

/// What a file system object is, in words, when it is not a regular file.
fn not_regular(t: std::fs::FileType) -> Option<&'static str> {
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a folder")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_fifo() {
        Some("a named pipe (FIFO)")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        Some("not a regular file")
    }
}

/// The refusal of a path that exists and is not a regular file (`None` for a regular file or
/// one that cannot be looked at): for the callers that look at a path before opening it.
pub(crate) fn refuse_special(path: &Path, name: &str) -> Option<anyhow::Error> {
    let what = not_regular(std::fs::metadata(path).ok()?.file_type())?;
    Some(special(path, name, what))
}

fn special(path: &Path, name: &str, what: &str) -> anyhow::Error {
    usage(format!(
        "{name} '{}' is {what}, not a regular file: nothing is read from devices, pipes, sockets or folders; give a file",
        path.display()
    ))
}

/// A size in the largest binary unit that divides it (`16 MiB`), else in bytes.
pub(crate) fn size_words(b: u64) -> String {
    match b {
        _ if b >= GIB && b % GIB == 0 => format!("{} GiB", b / GIB),
        _ if b >= MIB && b % MIB == 0 => format!("{} MiB", b / MIB),
        _ if b >= KIB && b % KIB == 0 => format!("{} KiB", b / KIB),
        _ => format!("{b} bytes"),
    }
}

/// `path` (given as `name`: a flag or what the file is) opened for reading, with its size; a
/// usage error unless it is a regular file. Opened without blocking, so that a named pipe
/// put in the file's place after any earlier look is refused, not waited on.
pub(crate) fn open(path: &Path, name: &str) -> anyhow::Result<(File, u64)> {
    let cannot = |e: std::io::Error| usage(format!("cannot read {name} '{}': {e}", path.display()));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(cannot)?;
    let meta = f.metadata().map_err(cannot)?;
    if let Some(what) = not_regular(meta.file_type()) {
        return Err(special(path, name, what));
    }
    Ok((f, meta.len()))
}

/// The bytes of `path` (given as `name`), at most `limit.bytes`: a regular file only, refused by
/// its size before it is read, or when it grows past the limit while read.
pub(crate) fn read(path: &Path, name: &str, limit: Limit) -> anyhow::Result<Vec<u8>> {
    let (f, len) = open(path, name)?;
    let too_big = |held: String| {
        usage(format!(
            "{name} '{}' {held}, more than the {} {} may be ({}): is it the right file?",
            path.display(),
            size_words(limit.bytes),
            limit.kind,
            limit.real
        ))
    };
    if len > limit.bytes {
        return Err(too_big(format!("is {len} bytes")));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    f.take(limit.bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| usage(format!("cannot read {name} '{}': {e}", path.display())))?;
    if bytes.len() as u64 > limit.bytes {
        return Err(too_big("grew while it was read".into()));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(r: anyhow::Result<Vec<u8>>) -> String {
        let e = r.unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2, "{e}");
        e.to_string()
    }

    #[test]
    fn devices_pipes_and_folders_are_refused_before_a_byte_is_read() {
        for dev in ["/dev/zero", "/dev/null", "/dev/urandom"] {
            let m = message(read(Path::new(dev), "--model-config", CONFIG));
            assert!(
                m.starts_with(&format!("--model-config '{dev}' is a character device")),
                "{m}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let m = message(read(dir.path(), "--schedule", SCHEDULE));
        assert!(m.contains("is a folder, not a regular file"), "{m}");
        // a named pipe with no writer: opening it to read would block; it is refused at once
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo reads it and returns a status.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let m = message(read(&fifo, "--server-log", SERVER_LOG));
        assert!(m.contains("is a named pipe (FIFO)"), "{m}");
        assert!(refuse_special(&fifo, "x").is_some());
        assert!(refuse_special(&dir.path().join("absent"), "x").is_none());
    }

    #[test]
    fn a_file_past_its_limit_is_refused_with_the_limit_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token");
        std::fs::write(&p, vec![b'a'; 4097]).unwrap();
        let m = message(read(&p, "--rendezvous-token-file", TOKEN));
        assert!(
            m.contains("is 4097 bytes, more than the 4 KiB a rendezvous token file may be"),
            "{m}"
        );
        std::fs::write(&p, vec![b'a'; 4096]).unwrap();
        assert_eq!(read(&p, "x", TOKEN).unwrap().len(), 4096);
        let m = message(read(&dir.path().join("absent"), "--profile", PROFILE));
        assert!(m.starts_with("cannot read --profile '"), "{m}");
    }

    #[test]
    fn sizes_in_words() {
        assert_eq!(size_words(4096), "4 KiB");
        assert_eq!(size_words(16 << 20), "16 MiB");
        assert_eq!(size_words(1 << 30), "1 GiB");
        assert_eq!(size_words(1000), "1000 bytes");
    }
}
