//! A minimal ELF file for tests of the check of `--nccl-lib` (`src/comm/elf.rs`): the unit
//! tests and the integration tests each include it as their own module. It holds headers and
//! a dynamic symbol table only: nothing can load or run it.

/// `e_machine` of the machine the tests run on (x86-64 62, AArch64 183).
pub fn host_machine() -> u16 {
    if cfg!(target_arch = "aarch64") {
        183
    } else {
        62
    }
}

/// A minimal ELF shared object of `class` (1: 32-bit, 2: 64-bit) for `machine`, whose
/// dynamic symbol table holds `symbols` (name, defined): the header, the names, the
/// symbols and three section headers (null, .dynsym, .dynstr), little-endian.
pub fn fake_elf(class: u8, machine: u16, symbols: &[(&str, bool)]) -> Vec<u8> {
    let mut names = vec![0u8];
    let mut syms = vec![0u8; 24];
    for (n, defined) in symbols {
        let at = names.len() as u32;
        names.extend_from_slice(n.as_bytes());
        names.push(0);
        let mut s = [0u8; 24];
        s[0..4].copy_from_slice(&at.to_le_bytes());
        s[4] = (1 << 4) | 2; // STB_GLOBAL, STT_FUNC
        s[6..8].copy_from_slice(&(if *defined { 12u16 } else { 0 }).to_le_bytes());
        syms.extend_from_slice(&s);
    }
    let names_at = 64u64;
    let syms_at = (names_at + names.len() as u64).next_multiple_of(8);
    let sh_at = syms_at + syms.len() as u64;
    let mut f = vec![0u8; 64];
    f[0..4].copy_from_slice(b"\x7fELF");
    f[4] = class;
    f[5] = 1;
    f[6] = 1;
    f[16..18].copy_from_slice(&3u16.to_le_bytes());
    f[18..20].copy_from_slice(&machine.to_le_bytes());
    f[40..48].copy_from_slice(&sh_at.to_le_bytes());
    f[58..60].copy_from_slice(&64u16.to_le_bytes());
    f[60..62].copy_from_slice(&3u16.to_le_bytes());
    f.extend_from_slice(&names);
    f.resize(syms_at as usize, 0);
    f.extend_from_slice(&syms);
    let section = |ty: u32, off: u64, size: u64, link: u32| {
        let mut s = [0u8; 64];
        s[4..8].copy_from_slice(&ty.to_le_bytes());
        s[24..32].copy_from_slice(&off.to_le_bytes());
        s[32..40].copy_from_slice(&size.to_le_bytes());
        s[40..44].copy_from_slice(&link.to_le_bytes());
        s
    };
    f.extend_from_slice(&[0u8; 64]);
    f.extend_from_slice(&section(11, syms_at, syms.len() as u64, 2));
    f.extend_from_slice(&section(3, names_at, names.len() as u64, 0));
    f
}

/// A fake NCCL: a 64-bit shared object of this machine that exports `ncclGetVersion`.
pub fn fake_nccl() -> Vec<u8> {
    fake_elf(2, host_machine(), &[("ncclGetVersion", true)])
}
