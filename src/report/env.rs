//! The table of `verifybench env`.

use std::fmt::Write as _;

use super::text::env_line;
use crate::machine::EnvReport;

pub(crate) fn render(r: &EnvReport) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "host            {}", r.host);
    let _ = writeln!(
        o,
        "driver          {}{}",
        r.driver_version
            .as_deref()
            .unwrap_or("not found (no CUDA driver library)"),
        r.cuda_driver_api
            .as_deref()
            .map(|c| format!(" (CUDA {c})"))
            .unwrap_or_default()
    );
    let _ = match (&r.nccl_version, &r.nccl_library) {
        (Some(v), Some(l)) => writeln!(o, "NCCL            {v} from {l}"),
        (Some(v), None) => writeln!(o, "NCCL            {v} (library path unknown)"),
        (None, _) if r.driver_version.is_none() => writeln!(
            o,
            "NCCL            not loaded (it is loaded only where a CUDA driver is)"
        ),
        (None, _) => writeln!(o, "NCCL            not loaded (see the problems below)"),
    };
    let _ = if r.nccl_found.is_empty() {
        writeln!(
            o,
            "NCCL found      none (searched: the loader's path, LD_LIBRARY_PATH, system folders, CUDA toolkits, Python's nvidia/nccl/lib)"
        )
    } else {
        writeln!(o, "NCCL found      (* the one this run loads)")
    };
    for f in &r.nccl_found {
        let _ = writeln!(
            o,
            "  {} {}  {}  [{}]",
            if f.chosen { "*" } else { " " },
            f.path,
            f.version_text(),
            f.how
        );
    }
    let _ = writeln!(
        o,
        "NVRTC           {}",
        if r.nvrtc_available {
            r.nvrtc_library.as_deref().unwrap_or("available")
        } else {
            "not found (needed only for --mode compute/full)"
        }
    );
    if let Some(w) = &r.nvrtc_choice {
        let _ = writeln!(o, "NVRTC choice    {w}");
    }
    for f in &r.nvrtc_found {
        let _ = writeln!(o, "  found         {f}");
    }
    if !r.requirements.is_empty() {
        let _ = writeln!(o, "\nRequirements (checked at start)");
        for l in &r.requirements {
            let _ = writeln!(o, "  {l}");
        }
    }
    let _ = writeln!(o, "\nGPUs");
    for g in &r.gpus {
        let _ = writeln!(
            o,
            "  {:>2}  {:<24} {:<14} {:>8.1} GiB",
            g.index,
            g.name,
            g.pci_bus_id,
            g.memory_bytes as f64 / (1u64 << 30) as f64
        );
    }
    if r.peer_access.len() > 1 {
        let _ = writeln!(
            o,
            "\nPeer access (P2P) matrix: row can read column's memory"
        );
        let _ = write!(o, "     ");
        for j in 0..r.peer_access.len() {
            let _ = write!(o, "{j:>4}");
        }
        let _ = writeln!(o);
        for (i, row) in r.peer_access.iter().enumerate() {
            let _ = write!(o, "  {i:>2} ");
            for (j, &p) in row.iter().enumerate() {
                let _ = write!(
                    o,
                    "{:>4}",
                    if i == j {
                        "-"
                    } else if p {
                        "yes"
                    } else {
                        "no"
                    }
                );
            }
            let _ = writeln!(o);
        }
    }
    if let Some(p) = &r.p2p_platform {
        p2p_platform(&mut o, p, &r.p2p_access);
    }
    let _ = writeln!(o, "\nNCCL_* in this process: {}", env_line(&r.nccl_env));
    for w in &r.workers {
        let _ = writeln!(
            o,
            "NCCL_* seen by the worker of rank {} (pid {}, GPU {}): {}",
            w.rank,
            w.pid,
            w.device,
            env_line(&w.nccl_env)
        );
    }
    for p in &r.problems {
        let _ = writeln!(o, "problem: {p}");
    }
    o
}

/// The P2P platform section: the IOMMU, each GPU's IOMMU group and ports with their ACS
/// controls (from the GPU up), each pair's PCIe path and NCCL's P2P verdict, the driver's P2P
/// override, and this boot's access checks.
fn p2p_platform(o: &mut String, p: &crate::machine::P2pPlatform, checks: &[String]) {
    let _ = writeln!(o, "\nP2P platform (read from sysfs)");
    let _ = writeln!(o, "  IOMMU         {}", p.iommu.describe());
    for (i, g) in p.gpus.iter().enumerate() {
        let group = match (g.iommu_group, g.iommu_type.as_deref()) {
            (Some(n), Some(t)) => format!(
                "IOMMU group {n} ({t}{})",
                if g.translated() { ": translated" } else { "" }
            ),
            (Some(n), None) => format!("IOMMU group {n}"),
            _ => "no IOMMU group".into(),
        };
        let node = g.numa_node.map_or("NUMA ?".into(), |n| format!("NUMA {n}"));
        let _ = writeln!(o, "  GPU {i:<2} {}  {group}, {node}", g.bus);
        if g.root.is_none() {
            let _ = writeln!(o, "         not found in /sys/bus/pci/devices");
        }
        for port in &g.upstream {
            let _ = writeln!(
                o,
                "         port {}  {}{}",
                port.bus,
                port.acs.describe(),
                if port.acs.redirects() {
                    "  (redirects P2P upstream)"
                } else {
                    ""
                }
            );
        }
    }
    for pair in &p.pairs {
        let _ = writeln!(
            o,
            "  GPU {} - GPU {}  {}: {}",
            pair.a,
            pair.b,
            pair.path.map_or("path ?", |t| t.name()),
            pair.nccl
        );
    }
    let _ = writeln!(
        o,
        "  driver P2P override: {}",
        p.driver_override
            .as_deref()
            .unwrap_or("none (RegistryDwords sets no peer key)")
    );
    if checks.is_empty() {
        let _ = writeln!(o, "  P2P access check: none in this boot's cache (a run with --impl oneshot/twoshot, or selftest, makes it)");
    }
    for c in checks {
        let _ = writeln!(o, "  P2P access check (this boot): {c}");
    }
}
