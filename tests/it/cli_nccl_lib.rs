//! `--nccl-lib` is read before any worker starts (issue 50): a shared library of this machine
//! (64-bit, its architecture) that exports `ncclGetVersion`, else exit 2 with what the file is
//! (a text file, a folder, a FIFO, an ELF of another class or machine, a library without the
//! symbol). Against the binary, with the real ELF files at hand (this build's own binary, the
//! system's C library) and fakes made by `tests/support/fake_elf.rs`.

use std::path::Path;

use crate::common::{refused_in, vb};
use crate::fake_elf::{fake_elf, fake_nccl, host_machine};

/// Every command that takes `--nccl-lib`, with what it needs besides (the cost model, the
/// debug sweep: the check comes first either way).
const COMMANDS: &[&[&str]] = &[
    &["verify", "--backend", "model", "--tp", "2"],
    &["collective", "--backend", "model", "--gpus", "2"],
    &["sweep", "--debug-mode", "--tp", "2", "-L", "NCCL_PROTO=LL"],
    &["env"],
    &["selftest"],
    &[
        "worker",
        "--rank",
        "0",
        "--world-size",
        "2",
        "--rendezvous",
        "127.0.0.1:1",
        "--timeout",
        "1",
    ],
];

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; mkfifo only creates the node.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

#[test]
fn what_is_no_nccl_library_is_named_before_any_worker_starts() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("notes.txt"), "libnccl.so.2.28.3\n").unwrap();
    std::fs::create_dir(d.join("empty")).unwrap();
    std::fs::create_dir(d.join("lib")).unwrap();
    std::fs::write(d.join("lib/libnccl.so.2"), "not a library\n").unwrap();
    mkfifo(&d.join("pipe"));
    std::fs::write(
        d.join("lib32.so"),
        fake_elf(1, 3, &[("ncclGetVersion", true)]),
    )
    .unwrap();
    let other = if host_machine() == 183 { 62 } else { 183 };
    std::fs::write(
        d.join("other.so"),
        fake_elf(2, other, &[("ncclGetVersion", true)]),
    )
    .unwrap();
    std::fs::write(
        d.join("imports.so"),
        fake_elf(2, host_machine(), &[("ncclGetVersion", false)]),
    )
    .unwrap();
    let me = env!("CARGO_BIN_EXE_verifybench");
    let mut cases: Vec<(String, String)> = vec![
        ("notes.txt".into(), "'notes.txt' is a text file".into()),
        (
            "empty".into(),
            "'empty' is a folder without libnccl.so".into(),
        ),
        ("lib".into(), "'lib/libnccl.so.2' is a text file".into()),
        ("pipe".into(), "'pipe' is a FIFO".into()),
        ("lib32.so".into(), "is a 32-bit x86 ELF file".into()),
        ("other.so".into(), "not for this machine".into()),
        ("imports.so".into(), "does not export ncclGetVersion".into()),
        (me.into(), "does not export ncclGetVersion".into()),
        ("nope.so".into(), "'nope.so': no such file or folder".into()),
    ];
    for libc_so in [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/lib/aarch64-linux-gnu/libc.so.6",
    ] {
        if Path::new(libc_so).is_file() {
            cases.push((libc_so.into(), "does not export ncclGetVersion".into()));
        }
    }
    for cmd in COMMANDS {
        for (lib, says) in &cases {
            let mut args = cmd.to_vec();
            args.extend(["--nccl-lib", lib]);
            let line = refused_in(Some(d), &[], &args, &[says]);
            let flag = if cmd[0] == "sweep" {
                "NCCL_LIB"
            } else {
                "--nccl-lib"
            };
            assert!(line.contains(flag), "{args:?}: {line}");
        }
    }
    // every file is as it was (the FIFO was never opened: nothing waited on it)
    assert_eq!(
        std::fs::read_to_string(d.join("notes.txt")).unwrap(),
        "libnccl.so.2.28.3\n"
    );
}

#[test]
fn a_library_that_exports_nccl_get_version_passes_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("libnccl.so.2"), fake_nccl()).unwrap();
    // the cost model loads no library: the run goes on past the check, file or folder
    for lib in ["libnccl.so.2", "."] {
        vb().current_dir(d)
            .args(["verify", "--backend", "model", "--tp", "2", "-q"])
            .args(["--nccl-lib", lib])
            .assert()
            .success();
    }
}
