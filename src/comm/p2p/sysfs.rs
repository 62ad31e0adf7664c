//! What the platform does to peer traffic between two GPUs, read from sysfs: the IOMMU's mode,
//! the ACS controls of the PCIe ports above each GPU, the PCIe path type between two GPUs, and
//! what NCCL's own P2P level would do on that path.
//!
//! Why: the driver reports peer access (`cuDeviceCanAccessPeer`) whatever the platform does with
//! the traffic. With the IOMMU translating DMA, or ACS P2P Request/Completion Redirect on at a
//! root or switch port (the default on many AMD hosts), peer writes are redirected to the root
//! complex and dropped or mistranslated, and a P2P all-reduce waits for a signal that never
//! comes (NVIDIA/nccl#1999, vllm-project/vllm#33041). The access check (`access.rs`) sees that
//! the traffic is lost; these readers name the likely cause, and `env` shows them.
//!
//! Every reader takes the file system root (`/` on a machine, a recorded tree in the tests), so
//! the parsers are pure functions of the files.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// The PCIe extended capability ID of Access Control Services (PCIe base spec, 7.7.11).
pub(crate) const ACS_CAP_ID: u16 = 0x000D;
/// Where the PCIe extended capabilities start in a function's configuration space.
pub(crate) const EXT_CAP_START: usize = 0x100;

/// The ACS control register's bits, low to high, as `lspci -vvv` names them (ACSCtl).
pub(crate) const ACS_BITS: [&str; 7] = [
    "SrcValid",    // 0: Source Validation
    "TransBlk",    // 1: Translation Blocking
    "ReqRedir",    // 2: P2P Request Redirect
    "CmpltRedir",  // 3: P2P Completion Redirect
    "UpstreamFwd", // 4: Upstream Forwarding
    "EgressCtrl",  // 5: P2P Egress Control
    "DirectTrans", // 6: Direct Translated P2P
];
/// P2P Request Redirect and P2P Completion Redirect: peer requests (completions) go up to the
/// root complex instead of across the switch.
pub(crate) const ACS_REDIRECT: u16 = (1 << 2) | (1 << 3);

/// The ACS state of one PCIe function, from its configuration space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub(crate) enum Acs {
    /// The file holds only the first 256 bytes or less (Linux shows the extended configuration
    /// space to root only).
    Unreadable,
    /// No ACS capability in the chain.
    Absent,
    /// The capability's registers: what the port can do, and what is on.
    Present { capability: u16, control: u16 },
}

impl Acs {
    /// Whether peer requests or completions are redirected upstream at this port.
    pub(crate) fn redirects(&self) -> bool {
        matches!(self, Acs::Present { control, .. } if control & ACS_REDIRECT != 0)
    }

    /// "SrcValid+ TransBlk- ReqRedir+ ..." as `lspci -vvv` prints ACSCtl, or what stands in.
    pub(crate) fn describe(&self) -> String {
        match self {
            Acs::Unreadable => "ACS not readable (the extended config space needs root)".into(),
            Acs::Absent => "no ACS capability".into(),
            Acs::Present { control, .. } => {
                let bits: Vec<String> = ACS_BITS
                    .iter()
                    .enumerate()
                    .map(|(b, name)| {
                        format!("{name}{}", if control >> b & 1 == 1 { '+' } else { '-' })
                    })
                    .collect();
                format!("ACSCtl: {}", bits.join(" "))
            }
        }
    }
}

/// The ACS capability of a function from the bytes of its `config` file: the extended
/// capability chain is walked from offset 0x100 (each header: ID in bits 0-15, version 16-19,
/// next offset 20-31), at most as many steps as the space holds headers.
pub(crate) fn parse_acs(config: &[u8]) -> Acs {
    if config.len() < EXT_CAP_START + 8 {
        return Acs::Unreadable;
    }
    let u32_at = |o: usize| u32::from_le_bytes(config[o..o + 4].try_into().expect("4 bytes"));
    let u16_at = |o: usize| u16::from_le_bytes(config[o..o + 2].try_into().expect("2 bytes"));
    let mut off = EXT_CAP_START;
    for _ in 0..(config.len() - EXT_CAP_START) / 4 {
        if off + 8 > config.len() {
            break;
        }
        let h = u32_at(off);
        if h == 0 || h == u32::MAX {
            break;
        }
        if (h & 0xffff) as u16 == ACS_CAP_ID {
            return Acs::Present {
                capability: u16_at(off + 4),
                control: u16_at(off + 6),
            };
        }
        let next = ((h >> 20) & 0xffc) as usize;
        if next < EXT_CAP_START {
            break;
        }
        off = next;
    }
    Acs::Absent
}

/// A PCI address as sysfs names it: "dddd:bb:dd.f", lower case (CUDA gives upper-case hex,
/// NVML an 8-digit domain).
pub(crate) fn normalize_bus(bus: &str) -> String {
    let b = bus.trim().to_ascii_lowercase();
    match b.split_once(':') {
        Some((dom, rest)) if dom.len() > 4 && dom.chars().all(|c| c == '0') => {
            format!("0000:{rest}")
        }
        Some((dom, rest)) if dom.len() > 4 => format!("{}:{rest}", &dom[dom.len() - 4..]),
        _ => b,
    }
}

/// Whether a path component is a PCI function address ("0000:00:01.0").
fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && s.chars()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

/// One PCIe port above a GPU and its ACS state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Port {
    pub(crate) bus: String,
    pub(crate) acs: Acs,
}

/// One GPU's place in the PCIe tree and its IOMMU group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct GpuPci {
    pub(crate) bus: String,
    /// The PCI root (host bridge) it hangs from, e.g. "pci0000:00"; `None` when sysfs does not
    /// know the device.
    pub(crate) root: Option<String>,
    /// The ports from the GPU up to its root port, nearest first.
    pub(crate) upstream: Vec<Port>,
    pub(crate) numa_node: Option<i32>,
    pub(crate) iommu_group: Option<u32>,
    /// The group's `type`: "identity" (passthrough), "DMA" or "DMA-FQ" (translated), ...
    pub(crate) iommu_type: Option<String>,
}

impl GpuPci {
    /// Whether the IOMMU translates this GPU's DMA (its group's type is DMA or DMA-FQ).
    pub(crate) fn translated(&self) -> bool {
        self.iommu_type
            .as_deref()
            .is_some_and(|t| t.starts_with("DMA"))
    }
}

/// Reads one GPU's facts under `root` (see the module doc).
pub(crate) fn gpu_pci(root: &Path, bus: &str) -> GpuPci {
    let bus = normalize_bus(bus);
    let dev = root.join("sys/bus/pci/devices").join(&bus);
    let mut g = GpuPci {
        bus: bus.clone(),
        root: None,
        upstream: vec![],
        numa_node: read_trim(&dev.join("numa_node")).and_then(|s| s.parse().ok()),
        iommu_group: None,
        iommu_type: None,
    };
    if let Ok(real) = std::fs::canonicalize(&dev) {
        let sys_devices = std::fs::canonicalize(root.join("sys/devices")).unwrap_or_default();
        let rel = real.strip_prefix(&sys_devices).unwrap_or(&real);
        let parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        g.root = parts.iter().find(|p| p.starts_with("pci")).cloned();
        // every function address on the way down but the GPU's own, nearest to the GPU first
        let mut at: PathBuf = real.clone();
        for p in parts.iter().rev().skip(1) {
            at.pop();
            if is_bdf(p) {
                let config = std::fs::read(at.join("config")).unwrap_or_default();
                g.upstream.push(Port {
                    bus: p.clone(),
                    acs: parse_acs(&config),
                });
            }
        }
    }
    if let Ok(link) = std::fs::read_link(dev.join("iommu_group")) {
        let group = link
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse::<u32>().ok());
        if let Some(n) = group {
            g.iommu_group = Some(n);
            g.iommu_type = read_trim(
                &root
                    .join("sys/kernel/iommu_groups")
                    .join(n.to_string())
                    .join("type"),
            );
        }
    }
    g
}

/// The file's text trimmed; `None` when it cannot be read or holds only blanks.
pub(super) fn read_trim(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The machine's IOMMU: the hardware units the kernel drives (/sys/class/iommu: dmar* on Intel,
/// ivhd* on AMD), the number of IOMMU groups, and the kernel command line's IOMMU settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Iommu {
    pub(crate) units: Vec<String>,
    pub(crate) groups: usize,
    /// `iommu=`, `intel_iommu=`, `amd_iommu=` and `pci=` words of /proc/cmdline.
    pub(crate) cmdline: Vec<String>,
}

impl Iommu {
    /// One line: "on (dmar0, dmar1), 74 groups; kernel command line: iommu=pt", or "off".
    pub(crate) fn describe(&self) -> String {
        let state = if self.units.is_empty() && self.groups == 0 {
            "off (no IOMMU unit in /sys/class/iommu, no IOMMU group)".to_string()
        } else {
            format!(
                "on ({}), {} groups",
                if self.units.is_empty() {
                    "units not listed".to_string()
                } else {
                    self.units.join(", ")
                },
                self.groups
            )
        };
        if self.cmdline.is_empty() {
            format!("{state}; no IOMMU setting on the kernel command line")
        } else {
            format!("{state}; kernel command line: {}", self.cmdline.join(" "))
        }
    }
}

pub(crate) fn iommu(root: &Path) -> Iommu {
    let names = |p: PathBuf| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(p)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    let cmdline = std::fs::read_to_string(root.join("proc/cmdline")).unwrap_or_default();
    Iommu {
        units: names(root.join("sys/class/iommu")),
        groups: names(root.join("sys/kernel/iommu_groups")).len(),
        cmdline: cmdline
            .split_whitespace()
            .filter(|w| {
                ["iommu=", "intel_iommu=", "amd_iommu=", "pci="]
                    .iter()
                    .any(|k| w.starts_with(k))
            })
            .map(str::to_string)
            .collect(),
    }
}

/// NCCL's PCIe path types between two GPUs, closest first (NVIDIA/nccl `src/graph/topo.h`):
/// PIX one PCIe switch, PXB several switches, PHB through a host bridge (the CPU's root
/// complex), SYS across CPU sockets. NVLink is not read here (sysfs does not show it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) enum PathType {
    #[serde(rename = "PIX")]
    Pix,
    #[serde(rename = "PXB")]
    Pxb,
    #[serde(rename = "PHB")]
    Phb,
    #[serde(rename = "SYS")]
    Sys,
}

impl PathType {
    pub(crate) fn name(self) -> &'static str {
        match self {
            PathType::Pix => "PIX",
            PathType::Pxb => "PXB",
            PathType::Phb => "PHB",
            PathType::Sys => "SYS",
        }
    }

    fn parse(s: &str) -> Option<PathType> {
        Some(match s.trim().to_ascii_uppercase().as_str() {
            "PIX" => PathType::Pix,
            "PXB" => PathType::Pxb,
            "PHB" | "NODE" => PathType::Phb,
            "SYS" => PathType::Sys,
            _ => return None,
        })
    }
}

/// The path type between two GPUs from their ports: different roots are PHB on one NUMA node
/// and SYS across nodes; on one root, no shared port is PHB, a shared port right above both
/// (one switch) PIX, a shared port further up PXB. `None` when sysfs did not place a GPU.
pub(crate) fn path_type(a: &GpuPci, b: &GpuPci) -> Option<PathType> {
    let (ra, rb) = (a.root.as_ref()?, b.root.as_ref()?);
    if ra != rb {
        let across =
            matches!((a.numa_node, b.numa_node), (Some(x), Some(y)) if x >= 0 && y >= 0 && x != y);
        return Some(if across { PathType::Sys } else { PathType::Phb });
    }
    // ports from the root down
    let da: Vec<&str> = a.upstream.iter().rev().map(|p| p.bus.as_str()).collect();
    let db: Vec<&str> = b.upstream.iter().rev().map(|p| p.bus.as_str()).collect();
    let shared = da.iter().zip(&db).take_while(|(x, y)| x == y).count();
    if shared == 0 {
        return Some(PathType::Phb);
    }
    // Below the last shared port each GPU hangs from its own downstream port (a switch: its
    // upstream port is the shared one). One switch: each GPU is at most two ports below it.
    let below = (da.len() - shared).max(db.len() - shared);
    Some(if below <= 1 {
        PathType::Pix
    } else {
        PathType::Pxb
    })
}

/// What NCCL's own P2P level does on a path, from `NCCL_P2P_DISABLE` and `NCCL_P2P_LEVEL`
/// (NVIDIA/nccl `src/graph/paths.cc`, `ncclTopoCheckP2p`: by default P2P up to PXB, never
/// through the CPU's root complex (PHB) or across sockets (SYS)).
pub(crate) fn nccl_p2p(
    path: Option<PathType>,
    disable: Option<&str>,
    level: Option<&str>,
) -> String {
    if disable.is_some_and(|v| matches!(v.trim(), "1" | "true" | "TRUE" | "yes")) {
        return "NCCL would not use P2P (NCCL_P2P_DISABLE is set)".into();
    }
    let (limit, how) = match level.map(|l| (l, PathType::parse(l))) {
        Some((_, Some(t))) => (t, format!("NCCL_P2P_LEVEL={}", t.name())),
        Some((l, None)) if matches!(l.trim().to_ascii_uppercase().as_str(), "LOC" | "NVL") => {
            return format!(
                "NCCL would not use P2P over PCIe (NCCL_P2P_LEVEL={})",
                l.trim()
            )
        }
        Some((l, None)) => {
            return format!(
                "NCCL_P2P_LEVEL={l} is not a path name this reads (LOC, NVL, PIX, PXB, PHB, SYS)"
            )
        }
        None => (PathType::Pxb, "its default, PXB".into()),
    };
    match path {
        None => format!("path type unknown (sysfs did not place a GPU); NCCL's P2P limit: {how}"),
        Some(p) if p <= limit => format!("NCCL would use P2P ({}, within {how})", p.name()),
        Some(p) => format!("NCCL would not use P2P ({} is beyond {how})", p.name()),
    }
}

/// The driver's P2P override: the `RegistryDwords` line of /proc/driver/nvidia/params when it
/// sets a peer key (e.g. `ForceP2P`, `PeerMappingOverride`, `RMForceP2PType`): the driver then
/// reports peer access that the platform may not carry. (The module parameter in /sys/module
/// reads empty even when it is set; /proc/driver/nvidia/params is what the driver applied.)
pub(crate) fn driver_p2p_override(root: &Path) -> Option<String> {
    let params = std::fs::read_to_string(root.join("proc/driver/nvidia/params")).ok()?;
    let line = params
        .lines()
        .find(|l| l.trim_start().starts_with("RegistryDwords"))?;
    let value = line
        .split_once(':')
        .map_or("", |x| x.1)
        .trim()
        .trim_matches('"');
    let lower = value.to_ascii_lowercase();
    (lower.contains("p2p") || lower.contains("peer")).then(|| value.to_string())
}

/// The platform's view of P2P between the GPUs, as `env` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Platform {
    pub(crate) iommu: Iommu,
    pub(crate) gpus: Vec<GpuPci>,
    /// Per pair of GPUs (i < j, indices into `gpus`): the path type and NCCL's verdict.
    pub(crate) pairs: Vec<PairPath>,
    pub(crate) driver_override: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct PairPath {
    pub(crate) a: usize,
    pub(crate) b: usize,
    pub(crate) path: Option<PathType>,
    pub(crate) nccl: String,
}

/// Reads the platform under `root` for the GPUs on `buses`, with NCCL's variables as given.
pub(crate) fn platform(
    root: &Path,
    buses: &[String],
    nccl_disable: Option<&str>,
    nccl_level: Option<&str>,
) -> Platform {
    let gpus: Vec<GpuPci> = buses.iter().map(|b| gpu_pci(root, b)).collect();
    let mut pairs = vec![];
    for a in 0..gpus.len() {
        for b in a + 1..gpus.len() {
            let path = path_type(&gpus[a], &gpus[b]);
            pairs.push(PairPath {
                a,
                b,
                path,
                nccl: nccl_p2p(path, nccl_disable, nccl_level),
            });
        }
    }
    Platform {
        iommu: iommu(root),
        gpus,
        pairs,
        driver_override: driver_p2p_override(root),
    }
}

/// The likely causes, from the platform, of peer traffic lost between GPUs `a` and `b` (indices
/// into `p.gpus`), most likely first; empty when sysfs shows none.
pub(crate) fn likely_causes(p: &Platform, a: usize, b: usize) -> Vec<String> {
    let mut out = vec![];
    let pair = [&p.gpus[a], &p.gpus[b]];
    let translated: Vec<String> = pair
        .iter()
        .filter(|g| g.translated())
        .map(|g| {
            format!(
                "{} (group {}: {})",
                g.bus,
                g.iommu_group.map_or("?".into(), |n| n.to_string()),
                g.iommu_type.as_deref().unwrap_or("?")
            )
        })
        .collect();
    if !translated.is_empty() {
        out.push(format!(
            "IOMMU in translated mode for {}: peer writes are translated (or dropped) by the IOMMU; boot with iommu=pt, or turn the IOMMU off (amd_iommu=off / intel_iommu=off, or in the BIOS)",
            translated.join(", ")
        ));
    }
    let mut redirect = vec![];
    let mut unreadable = false;
    for g in pair {
        for port in &g.upstream {
            if port.acs.redirects() && !redirect.iter().any(|(b, _)| b == &port.bus) {
                redirect.push((port.bus.clone(), port.acs.describe()));
            }
            unreadable |= port.acs == Acs::Unreadable;
        }
    }
    if !redirect.is_empty() {
        let ports: Vec<String> = redirect.iter().map(|(b, d)| format!("{b} ({d})")).collect();
        out.push(format!(
            "ACS P2P redirect on at {}: peer requests go up to the root complex; turn ACS redirect off on those ports (BIOS, or setpci as NCCL's troubleshooting guide shows)",
            ports.join(", ")
        ));
    }
    if let Some(d) = &p.driver_override {
        out.push(format!(
            "the driver's P2P override is set (RegistryDwords: {d}): the driver reports peer access the platform may not carry"
        ));
    }
    if let Some(path) = path_type(pair[0], pair[1]) {
        if path >= PathType::Phb {
            out.push(format!(
                "the path between them is {} (through the CPU's root complex), where NCCL does not use P2P by default",
                path.name()
            ));
        }
    }
    if unreadable && redirect.is_empty() {
        out.push(
            "the ACS state of the ports is not readable without root (`sudo verifybench env`, or `sudo lspci -vvv | grep ACSCtl`)"
                .into(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    //! The readers on recorded trees: a fake sysfs built in a temp folder, with configuration
    //! spaces written as the binary files the kernel shows, capability chains and all.
    use super::*;
    use std::os::unix::fs::symlink;

    /// A 4 KiB configuration space whose extended capabilities are `caps` (ID, the registers
    /// after the header), chained from 0x100 at 0x40-byte steps.
    fn config(caps: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut c = vec![0u8; 4096];
        c[0..4].copy_from_slice(&[0xde, 0x10, 0x00, 0x00]); // a vendor id, as a real file has
        for (k, (id, body)) in caps.iter().enumerate() {
            let off = 0x100 + 0x40 * k;
            let next = if k + 1 < caps.len() { off + 0x40 } else { 0 };
            let header = *id as u32 | (1 << 16) | (next as u32) << 20;
            c[off..off + 4].copy_from_slice(&header.to_le_bytes());
            c[off + 4..off + 4 + body.len()].copy_from_slice(body);
        }
        c
    }

    /// ACS registers: capability, then control (little endian).
    fn acs(capability: u16, control: u16) -> (u16, Vec<u8>) {
        let mut b = capability.to_le_bytes().to_vec();
        b.extend_from_slice(&control.to_le_bytes());
        (ACS_CAP_ID, b)
    }

    /// Advanced Error Reporting (ID 0x0001): a capability that is not ACS.
    fn aer() -> (u16, Vec<u8>) {
        (0x0001, vec![0; 8])
    }

    #[test]
    fn the_acs_capability_is_found_along_the_chain() {
        // AER at 0x100, then ACS at 0x140: capability 0x005f, control 0x001d = bits 0, 2, 3, 4
        let c = config(&[aer(), acs(0x005f, 0x001d)]);
        let a = parse_acs(&c);
        assert_eq!(
            a,
            Acs::Present {
                capability: 0x005f,
                control: 0x001d
            }
        );
        assert!(a.redirects());
        assert_eq!(
            a.describe(),
            "ACSCtl: SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
        );
        // Source Validation alone (0x0001): no redirect
        let sv = parse_acs(&config(&[acs(0x005f, 0x0001)]));
        assert!(!sv.redirects());
        // Completion Redirect alone (bit 3, 0x0008) redirects; Request Redirect (bit 2) too
        assert!(parse_acs(&config(&[acs(0x7f, 0x0008)])).redirects());
        assert!(parse_acs(&config(&[acs(0x7f, 0x0004)])).redirects());
        // Egress Control (bit 5) and Direct Translated P2P (bit 6) are not redirects
        assert!(!parse_acs(&config(&[acs(0x7f, 0x0060)])).redirects());
    }

    #[test]
    fn short_files_endless_chains_and_no_acs_are_told_apart() {
        // what a user who is not root reads: the first 64 (or 256) bytes only
        assert_eq!(parse_acs(&[0u8; 64]), Acs::Unreadable);
        assert_eq!(parse_acs(&[0u8; 256]), Acs::Unreadable);
        assert!(Acs::Unreadable.describe().contains("needs root"));
        // a chain without ACS
        assert_eq!(parse_acs(&config(&[aer(), aer()])), Acs::Absent);
        // no capability at all (header 0), and a function that reads all ones
        assert_eq!(parse_acs(&vec![0u8; 4096]), Acs::Absent);
        assert_eq!(parse_acs(&vec![0xffu8; 4096]), Acs::Absent);
        // a chain that points back at itself ends
        let mut c = config(&[aer()]);
        let header = 0x0001u32 | (1 << 16) | (0x100u32 << 20);
        c[0x100..0x104].copy_from_slice(&header.to_le_bytes());
        assert_eq!(parse_acs(&c), Acs::Absent);
    }

    #[test]
    fn bus_ids_are_written_as_sysfs_writes_them() {
        assert_eq!(normalize_bus("0000:1B:00.0"), "0000:1b:00.0");
        assert_eq!(normalize_bus("00000000:1B:00.0"), "0000:1b:00.0");
        assert_eq!(normalize_bus("00010000:3a:00.0"), "0000:3a:00.0");
        assert!(is_bdf("0000:00:01.0") && !is_bdf("pci0000:00") && !is_bdf("0000:0g:01.0"));
    }

    /// A recorded machine: two GPUs under one switch (0 and 1), one on another root port of
    /// the same root (3), one on another root and NUMA node (2).
    ///
    /// ```text
    /// pci0000:00 - 00:01.0 (root port, ACS SV RR CR) - 01:00.0 (switch up, no ACS)
    ///                  +- 02:00.0 (down, ACS SV) - 03:00.0 GPU 0 (group 12, DMA-FQ)
    ///                  +- 02:01.0 (down, ACS SV RR CR) - 04:00.0 GPU 1 (group 13, identity)
    ///            - 00:03.0 (root port, 64-byte config) - 05:00.0 GPU 3
    /// pci0000:80 - 80:01.0 (root port, ACS absent) - 81:00.0 GPU 2 (NUMA 1)
    /// ```
    fn machine() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        let dev = |path: &str, cfg: Vec<u8>| {
            let p = r.join("sys/devices").join(path);
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join("config"), cfg).unwrap();
            p
        };
        dev("pci0000:00/0000:00:01.0", config(&[aer(), acs(0x5f, 0x0d)]));
        dev("pci0000:00/0000:00:01.0/0000:01:00.0", config(&[aer()]));
        dev(
            "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0",
            config(&[acs(0x5f, 0x01)]),
        );
        dev(
            "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0",
            config(&[acs(0x5f, 0x0d)]),
        );
        dev("pci0000:00/0000:00:03.0", vec![0u8; 64]);
        dev("pci0000:80/0000:80:01.0", config(&[aer()]));
        let gpus = [
            (
                "0000:03:00.0",
                "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
                0,
                Some(12),
            ),
            (
                "0000:04:00.0",
                "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0",
                0,
                Some(13),
            ),
            (
                "0000:81:00.0",
                "pci0000:80/0000:80:01.0/0000:81:00.0",
                1,
                None,
            ),
            (
                "0000:05:00.0",
                "pci0000:00/0000:00:03.0/0000:05:00.0",
                0,
                None,
            ),
        ];
        let bus = r.join("sys/bus/pci/devices");
        std::fs::create_dir_all(&bus).unwrap();
        for (bdf, path, numa, group) in gpus {
            let p = dev(path, config(&[aer()]));
            std::fs::write(p.join("numa_node"), format!("{numa}\n")).unwrap();
            if let Some(g) = group {
                symlink(
                    r.join(format!("sys/kernel/iommu_groups/{g}")),
                    p.join("iommu_group"),
                )
                .unwrap();
            }
            symlink(&p, bus.join(bdf)).unwrap();
        }
        for (g, t) in [(12, "DMA-FQ"), (13, "identity")] {
            let p = r.join(format!("sys/kernel/iommu_groups/{g}"));
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join("type"), format!("{t}\n")).unwrap();
        }
        for u in ["ivhd1", "ivhd0"] {
            std::fs::create_dir_all(r.join("sys/class/iommu").join(u)).unwrap();
        }
        std::fs::create_dir_all(r.join("proc/driver/nvidia")).unwrap();
        std::fs::write(
            r.join("proc/cmdline"),
            "BOOT_IMAGE=/vmlinuz ro amd_iommu=on iommu=pt pci=noaer quiet\n",
        )
        .unwrap();
        std::fs::write(
            r.join("proc/driver/nvidia/params"),
            "ResmanDebugLevel: 4294967295\nRegistryDwords: \"PeerMappingOverride=1;RMForceStaticBar1=1\"\nEnableMSI: 1\n",
        )
        .unwrap();
        d
    }

    #[test]
    fn a_gpu_is_placed_with_its_ports_group_and_node() {
        let m = machine();
        let g0 = gpu_pci(m.path(), "0000:03:00.0");
        assert_eq!(g0.root.as_deref(), Some("pci0000:00"));
        let ports: Vec<&str> = g0.upstream.iter().map(|p| p.bus.as_str()).collect();
        assert_eq!(ports, ["0000:02:00.0", "0000:01:00.0", "0000:00:01.0"]);
        assert_eq!(
            g0.upstream[0].acs,
            Acs::Present {
                capability: 0x5f,
                control: 0x01
            }
        );
        assert_eq!(g0.upstream[1].acs, Acs::Absent);
        assert!(g0.upstream[2].acs.redirects());
        assert_eq!(
            (g0.iommu_group, g0.iommu_type.as_deref()),
            (Some(12), Some("DMA-FQ"))
        );
        assert!(g0.translated());
        assert_eq!(g0.numa_node, Some(0));
        // CUDA's upper-case spelling finds the same device
        assert_eq!(
            gpu_pci(m.path(), "0000:03:00.0"),
            gpu_pci(m.path(), "00000000:03:00.0")
        );
        let g1 = gpu_pci(m.path(), "0000:04:00.0");
        assert!(!g1.translated() && g1.iommu_type.as_deref() == Some("identity"));
        let g3 = gpu_pci(m.path(), "0000:05:00.0");
        assert_eq!(g3.upstream.len(), 1);
        assert_eq!(g3.upstream[0].acs, Acs::Unreadable);
        assert_eq!(g3.iommu_group, None);
        // a device sysfs does not know
        let none = gpu_pci(m.path(), "0000:99:00.0");
        assert_eq!((none.root, none.upstream.len()), (None, 0));
    }

    #[test]
    fn path_types_follow_the_shared_ports() {
        let m = machine();
        let g: Vec<GpuPci> = [
            "0000:03:00.0",
            "0000:04:00.0",
            "0000:81:00.0",
            "0000:05:00.0",
        ]
        .iter()
        .map(|b| gpu_pci(m.path(), b))
        .collect();
        // one switch between 0 and 1
        assert_eq!(path_type(&g[0], &g[1]), Some(PathType::Pix));
        // another root on another NUMA node
        assert_eq!(path_type(&g[0], &g[2]), Some(PathType::Sys));
        // the same root, no shared port: through the host bridge
        assert_eq!(path_type(&g[0], &g[3]), Some(PathType::Phb));
        // two switches deep on one side: PXB (a made-up GPU one port further down)
        let mut deep = g[1].clone();
        deep.upstream.insert(
            0,
            Port {
                bus: "0000:06:00.0".into(),
                acs: Acs::Absent,
            },
        );
        deep.upstream.insert(
            0,
            Port {
                bus: "0000:07:00.0".into(),
                acs: Acs::Absent,
            },
        );
        assert_eq!(path_type(&g[0], &deep), Some(PathType::Pxb));
        // another root on the same node (or no node known): PHB
        let mut other = g[2].clone();
        other.numa_node = Some(0);
        assert_eq!(path_type(&g[0], &other), Some(PathType::Phb));
        other.numa_node = Some(-1);
        assert_eq!(path_type(&g[0], &other), Some(PathType::Phb));
        assert_eq!(path_type(&g[0], &gpu_pci(m.path(), "0000:99:00.0")), None);
    }

    #[test]
    fn what_nccls_p2p_level_does_on_each_path() {
        let (pix, phb, sys) = (
            Some(PathType::Pix),
            Some(PathType::Phb),
            Some(PathType::Sys),
        );
        assert_eq!(
            nccl_p2p(pix, None, None),
            "NCCL would use P2P (PIX, within its default, PXB)"
        );
        assert_eq!(
            nccl_p2p(phb, None, None),
            "NCCL would not use P2P (PHB is beyond its default, PXB)"
        );
        assert_eq!(
            nccl_p2p(sys, None, Some("sys")),
            "NCCL would use P2P (SYS, within NCCL_P2P_LEVEL=SYS)"
        );
        assert!(nccl_p2p(pix, None, Some("NVL")).contains("would not use P2P over PCIe"));
        assert!(nccl_p2p(pix, Some("1"), Some("SYS")).contains("NCCL_P2P_DISABLE"));
        assert!(nccl_p2p(pix, None, Some("7")).contains("not a path name"));
        assert!(nccl_p2p(None, None, None).starts_with("path type unknown"));
    }

    #[test]
    fn the_machine_its_override_and_the_likely_causes() {
        let m = machine();
        let io = iommu(m.path());
        assert_eq!(io.units, ["ivhd0", "ivhd1"]);
        assert_eq!(io.groups, 2);
        assert_eq!(io.cmdline, ["amd_iommu=on", "iommu=pt", "pci=noaer"]);
        assert_eq!(
            io.describe(),
            "on (ivhd0, ivhd1), 2 groups; kernel command line: amd_iommu=on iommu=pt pci=noaer"
        );
        assert_eq!(
            driver_p2p_override(m.path()).as_deref(),
            Some("PeerMappingOverride=1;RMForceStaticBar1=1")
        );
        let buses: Vec<String> = ["0000:03:00.0", "0000:04:00.0", "0000:81:00.0"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let p = platform(m.path(), &buses, None, None);
        assert_eq!(p.pairs.len(), 3);
        assert_eq!(
            (p.pairs[0].a, p.pairs[0].b, p.pairs[0].path),
            (0, 1, Some(PathType::Pix))
        );
        assert!(p.pairs[1].nccl.contains("would not use P2P (SYS"));
        // 0 -> 1: GPU 0's group translates, ports 00:01.0 and 02:01.0 redirect, the override
        let c = likely_causes(&p, 0, 1);
        assert_eq!(c.len(), 3, "{c:?}");
        assert!(c[0].starts_with("IOMMU in translated mode for 0000:03:00.0 (group 12: DMA-FQ)"));
        assert!(c[1].starts_with("ACS P2P redirect on at 0000:00:01.0 (ACSCtl: SrcValid+ TransBlk- ReqRedir+ CmpltRedir+"), "{}", c[1]);
        assert!(c[1].contains("0000:02:01.0 ("), "{}", c[1]);
        assert!(c[2].contains("PeerMappingOverride=1"));
        // 0 -> 2 adds the path through the CPU
        assert!(likely_causes(&p, 0, 2).last().unwrap().contains("SYS"));
        // a clean machine: no IOMMU, no ACS, no override, one switch: no cause found
        let clean = tempfile::tempdir().unwrap();
        let q = platform(clean.path(), &buses, None, None);
        assert!(q.iommu.describe().starts_with("off"));
        assert!(likely_causes(&q, 0, 1).is_empty());
        assert_eq!(q.driver_override, None);
    }
}
