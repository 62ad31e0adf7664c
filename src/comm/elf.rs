//! What a file given as a shared library is, read from its headers and dynamic symbols before
//! anything loads it: `--nccl-lib` must name a shared object of this machine's class (64-bit,
//! its byte order and architecture) that exports `ncclGetVersion`. Anything else (a text file,
//! a folder, a FIFO, an ELF of another class or architecture, a library without the symbol)
//! used to be taken until a worker failed to load it at run time; now it is named at once.
//!
//! Only what the check needs of ELF is read (the System V gABI, "ELF Header", "Sections",
//! "Symbol Table"): the 64-byte header, the section header table, the `SHT_DYNSYM` section
//! and the string table it links to, each read from its offset and bounded, never the whole
//! file (an NCCL library is hundreds of MB).

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// `e_machine` of the machine this program runs on (0: not known here, not checked).
const HOST_MACHINE: u16 = if cfg!(target_arch = "x86_64") {
    62
} else if cfg!(target_arch = "aarch64") {
    183
} else if cfg!(target_arch = "powerpc64") {
    21
} else if cfg!(target_arch = "riscv64") {
    243
} else {
    0
};

/// A table read from the file (section headers, symbols, their names) larger than this is
/// taken for damage: real libraries' dynamic symbol tables are a few MB at most.
const MAX_TABLE: u64 = 64 << 20;

const SHT_DYNSYM: u32 = 11;
const SHN_UNDEF: u16 = 0;
const STB_GLOBAL: u8 = 1;
const STB_WEAK: u8 = 2;

/// An architecture by its `e_machine`.
fn machine_name(m: u16) -> String {
    match m {
        3 => "x86".into(),
        8 => "MIPS".into(),
        20 => "PowerPC".into(),
        21 => "PowerPC64".into(),
        40 => "ARM".into(),
        62 => "x86-64".into(),
        183 => "AArch64".into(),
        243 => "RISC-V".into(),
        m => format!("machine {m}"),
    }
}

/// Checks that `path` is a shared library this machine can load that exports `symbol`; the
/// error says what the file is instead (`a text file`, `a FIFO`, `a 32-bit x86 ELF file ...`,
/// `a 64-bit x86-64 shared object that does not export ncclGetVersion ...`).
pub(crate) fn check_shared_library(path: &Path, symbol: &str) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    // the type first: opening a FIFO to read it would wait for a writer
    let m = std::fs::metadata(path).map_err(|e| format!("not readable ({e})"))?;
    let t = m.file_type();
    let kind = if t.is_dir() {
        "a folder"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        ""
    };
    if !kind.is_empty() {
        return Err(kind.into());
    }
    let mut f = std::fs::File::open(path).map_err(|e| format!("not readable ({e})"))?;
    let mut head = Vec::with_capacity(512);
    (&mut f)
        .take(512)
        .read_to_end(&mut head)
        .map_err(|e| format!("not readable ({e})"))?;
    if !head.starts_with(b"\x7fELF") {
        return Err(not_elf(&head, m.len()));
    }
    let elf = Header::read(&head)?;
    elf.exports(&mut f, m.len(), symbol)
}

/// What a file that is no ELF is, from its first bytes.
fn not_elf(head: &[u8], len: u64) -> String {
    if len == 0 {
        "an empty file".into()
    } else if head.starts_with(&[0x1f, 0x8b]) {
        "a gzip-compressed file".into()
    } else if head.starts_with(b"!<arch>\n") {
        "a static library (an ar archive), not a shared one".into()
    } else if !head.contains(&0) && std::str::from_utf8(head).is_ok() {
        "a text file".into()
    } else {
        "not an ELF file (binary data of another kind)".into()
    }
}

/// The fields of the ELF header the check reads, of a 64-bit file of this byte order.
struct Header {
    le: bool,
    shoff: u64,
    shentsize: u64,
    shnum: u64,
    /// `64-bit x86-64`, for the messages.
    what: String,
}

impl Header {
    fn read(h: &[u8]) -> Result<Header, String> {
        if h.len() < 64 {
            return Err(format!(
                "an ELF file cut short ({} bytes, less than its 64-byte header)",
                h.len()
            ));
        }
        let class = h[4];
        let le = match h[5] {
            1 => true,
            2 => false,
            d => return Err(format!("a damaged ELF file (byte order {d})")),
        };
        let u16_at = |o: usize| uint(&h[o..o + 2], le) as u16;
        let machine = u16_at(18);
        let bits = match class {
            1 => "32-bit",
            2 => "64-bit",
            _ => return Err(format!("a damaged ELF file (class {class})")),
        };
        let what = format!("{bits} {}", machine_name(machine));
        let order = if le { "little-endian" } else { "big-endian" };
        if class != 2 || cfg!(not(target_pointer_width = "64")) {
            return Err(format!(
                "a {what} ELF file: this verifybench is a 64-bit program and loads 64-bit libraries only"
            ));
        }
        if le != cfg!(target_endian = "little") {
            return Err(format!(
                "a {order} {what} ELF file, of another byte order than this machine's"
            ));
        }
        if HOST_MACHINE != 0 && machine != HOST_MACHINE {
            return Err(format!(
                "an ELF file for {}, not for this machine ({})",
                machine_name(machine),
                machine_name(HOST_MACHINE)
            ));
        }
        match u16_at(16) {
            3 => {}
            1 => {
                return Err(format!(
                    "a {what} ELF object file (.o), not a shared library"
                ))
            }
            2 => return Err(format!("a {what} ELF executable, not a shared library")),
            4 => return Err(format!("a {what} ELF core dump, not a shared library")),
            t => {
                return Err(format!(
                    "a {what} ELF file of type {t}, not a shared library"
                ))
            }
        }
        Ok(Header {
            le,
            shoff: uint(&h[40..48], le),
            shentsize: u64::from(u16_at(58)),
            shnum: u64::from(u16_at(60)),
            what,
        })
    }

    /// Whether the dynamic symbol table defines `symbol` (global or weak, not undefined).
    fn exports(&self, f: &mut std::fs::File, len: u64, symbol: &str) -> Result<(), String> {
        let what = &self.what;
        if self.shoff == 0 || self.shnum == 0 {
            return Err(format!(
                "a {what} shared object without section headers: its symbols cannot be read"
            ));
        }
        if self.shentsize != 64 {
            return Err(format!(
                "a damaged {what} ELF file (section headers of {} bytes, not 64)",
                self.shentsize
            ));
        }
        let sections = read_at(f, len, self.shoff, self.shnum * 64, "section headers")?;
        let section = |i: u64| -> Option<&[u8]> {
            let o = usize::try_from(i * 64).ok()?;
            sections.get(o..o + 64)
        };
        for i in 0..self.shnum {
            let sh = section(i).expect("inside the table read");
            if uint(&sh[4..8], self.le) as u32 != SHT_DYNSYM {
                continue;
            }
            let link = uint(&sh[40..44], self.le);
            let strtab = section(link).ok_or_else(|| {
                format!(
                    "a damaged {what} ELF file (symbol names in section {link}, past the table)"
                )
            })?;
            let syms = read_at(
                f,
                len,
                uint(&sh[24..32], self.le),
                uint(&sh[32..40], self.le),
                "dynamic symbols",
            )?;
            let names = read_at(
                f,
                len,
                uint(&strtab[24..32], self.le),
                uint(&strtab[32..40], self.le),
                "symbol names",
            )?;
            if self.defines(&syms, &names, symbol) {
                return Ok(());
            }
        }
        Err(format!(
            "a {what} shared object that does not export {symbol} (not an NCCL library)"
        ))
    }

    fn defines(&self, syms: &[u8], names: &[u8], symbol: &str) -> bool {
        syms.chunks_exact(24).any(|s| {
            let name = uint(&s[0..4], self.le) as usize;
            let bind = s[4] >> 4;
            let shndx = uint(&s[6..8], self.le) as u16;
            shndx != SHN_UNDEF
                && (bind == STB_GLOBAL || bind == STB_WEAK)
                && names
                    .get(name..)
                    .and_then(|n| n.split(|&b| b == 0).next())
                    .is_some_and(|n| n == symbol.as_bytes())
        })
    }
}

/// An unsigned integer of 2, 4 or 8 bytes in the file's byte order.
fn uint(b: &[u8], le: bool) -> u64 {
    let mut v = 0u64;
    if le {
        for &x in b.iter().rev() {
            v = v << 8 | u64::from(x);
        }
    } else {
        for &x in b {
            v = v << 8 | u64::from(x);
        }
    }
    v
}

/// `n` bytes at `off` of a file of `len` bytes: a table that lies past the end, or is larger
/// than [`MAX_TABLE`], is damage.
fn read_at(
    f: &mut std::fs::File,
    len: u64,
    off: u64,
    n: u64,
    what: &str,
) -> Result<Vec<u8>, String> {
    let end = off.checked_add(n);
    if n > MAX_TABLE || end.is_none_or(|e| e > len) {
        return Err(format!(
            "a damaged or cut-short ELF file (its {what}, {n} bytes at offset {off}, lie past its {len} bytes)"
        ));
    }
    let mut buf = vec![0u8; n as usize];
    f.seek(SeekFrom::Start(off))
        .and_then(|_| f.read_exact(&mut buf))
        .map_err(|e| format!("not readable ({e})"))?;
    Ok(buf)
}

/// A fake NCCL for tests: a minimal 64-bit shared object of this machine that exports
/// `ncclGetVersion` (nothing can run it; the check reads its headers only).
#[cfg(test)]
pub(crate) fn fake_nccl() -> Vec<u8> {
    fake_elf::fake_nccl()
}

#[cfg(test)]
#[path = "../../tests/support/fake_elf.rs"]
#[allow(unreachable_pub)]
pub(crate) mod fake_elf;

#[cfg(test)]
mod tests {
    use super::fake_elf::fake_elf;
    use super::*;

    fn check(bytes: &[u8]) -> Result<(), String> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("libnccl.so.2");
        std::fs::write(&p, bytes).unwrap();
        check_shared_library(&p, "ncclGetVersion")
    }

    #[test]
    fn a_library_of_this_machine_that_exports_the_symbol_passes() {
        assert_eq!(super::fake_elf::host_machine(), HOST_MACHINE);
        check(&fake_nccl()).unwrap();
        let ok = fake_elf(
            2,
            HOST_MACHINE,
            &[("ncclCommInitRank", true), ("ncclGetVersion", true)],
        );
        check(&ok).unwrap();
        // declared but not defined here (it imports it): not exported
        let imports = fake_elf(2, HOST_MACHINE, &[("ncclGetVersion", false)]);
        let e = check(&imports).unwrap_err();
        assert!(e.contains("does not export ncclGetVersion"), "{e}");
        // a name that only begins like it
        let e = check(&fake_elf(2, HOST_MACHINE, &[("ncclGetVersionX", true)])).unwrap_err();
        assert!(e.contains("does not export ncclGetVersion"), "{e}");
    }

    #[test]
    fn other_classes_machines_and_kinds_are_named() {
        let e = check(&fake_elf(1, 3, &[("ncclGetVersion", true)])).unwrap_err();
        assert!(e.contains("32-bit") && e.contains("64-bit program"), "{e}");
        let other = if HOST_MACHINE == 183 { 62 } else { 183 };
        let e = check(&fake_elf(2, other, &[("ncclGetVersion", true)])).unwrap_err();
        assert!(e.contains("not for this machine"), "{e}");
        let mut exe = fake_elf(2, HOST_MACHINE, &[("ncclGetVersion", true)]);
        exe[16] = 2;
        assert!(check(&exe).unwrap_err().contains("ELF executable"));
        // cut after the header: the section table lies past the end
        let whole = fake_elf(2, HOST_MACHINE, &[("ncclGetVersion", true)]);
        let e = check(&whole[..100]).unwrap_err();
        assert!(e.contains("cut-short"), "{e}");
        assert!(check(&whole[..40]).unwrap_err().contains("cut short"));
        assert_eq!(check(b"libnccl\n").unwrap_err(), "a text file");
        assert_eq!(check(b"").unwrap_err(), "an empty file");
        assert!(check(&[0x1f, 0x8b, 8, 0]).unwrap_err().contains("gzip"));
        assert!(check(b"!<arch>\nx").unwrap_err().contains("static library"));
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            check_shared_library(dir.path(), "ncclGetVersion").unwrap_err(),
            "a folder"
        );
    }

    #[test]
    fn a_real_elf_without_the_symbol_is_read_to_its_symbols() {
        // this test program: a 64-bit ELF of this machine (position-independent, so of the
        // shared-object type) that exports no ncclGetVersion
        let me = std::env::current_exe().unwrap();
        let e = check_shared_library(&me, "ncclGetVersion").unwrap_err();
        assert!(
            e.contains("64-bit") && e.contains("does not export ncclGetVersion"),
            "{e}"
        );
        // a system library that exports what it should, where one is at a known place
        for libc_so in [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib/aarch64-linux-gnu/libc.so.6",
        ] {
            if Path::new(libc_so).is_file() {
                check_shared_library(Path::new(libc_so), "malloc").unwrap();
                let e = check_shared_library(Path::new(libc_so), "ncclGetVersion").unwrap_err();
                assert!(e.contains("does not export ncclGetVersion"), "{e}");
            }
        }
    }
}
