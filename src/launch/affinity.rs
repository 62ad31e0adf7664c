//! CPU affinity of a rank (`--cpu-affinity auto|none|LIST`) and the host facts that decide how
//! noisy its timings are (the CPU frequency governor), for the provenance.
//!
//! A rank whose host thread migrates between sockets pays remote memory and cold caches on its
//! launch path; serving deployments pin each GPU's worker to the CPUs of that GPU's NUMA node
//! (numactl), and so does `auto`: the GPU's PCI bus id gives its node
//! (`/sys/bus/pci/devices/<bus id>/numa_node`), the node gives its CPUs
//! (`/sys/devices/system/node/node<N>/cpulist`). A governor other than `performance` lets
//! clocks ramp under load, one source of first-repetition (cold start) effects.
//!
//! The readers take the filesystem root as a parameter, so tests run them on a temporary
//! directory laid out like sysfs. Pinning is `sched_setaffinity(2)` on the calling thread;
//! threads it starts afterwards inherit the mask, so a worker applies it first thing.

use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub(crate) use crate::request::CpuAffinity;

impl CpuAffinity {
    /// The command-line form (`auto`, `none`, `0-7,16-23`), for a worker's arguments.
    pub(crate) fn arg(&self) -> String {
        match self {
            CpuAffinity::Auto => "auto".into(),
            CpuAffinity::None => "none".into(),
            CpuAffinity::List(v) => format_cpulist(v),
        }
    }
}

/// Parses a Linux CPU list (`0-7,16-23`, `3`, `0-15:2` with a stride), as sysfs writes it and
/// as numactl and taskset take it. Sorted, without duplicates; empty input is an error.
pub(crate) fn parse_cpulist(s: &str) -> Result<Vec<usize>, String> {
    let mut out = std::collections::BTreeSet::new();
    let t = s.trim();
    if t.is_empty() {
        return Err("an empty CPU list".into());
    }
    for part in t.split(',').map(str::trim) {
        let num = |x: &str| {
            x.trim()
                .parse::<usize>()
                .map_err(|_| format!("'{part}' in CPU list '{t}' is not a CPU number or range"))
        };
        let (range, stride) = match part.split_once(':') {
            Some((r, st)) => (r, num(st)?),
            None => (part, 1),
        };
        if stride == 0 {
            return Err(format!("'{part}' in CPU list '{t}' has a zero stride"));
        }
        let (a, b) = match range.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let a = num(range)?;
                (a, a)
            }
        };
        if a > b {
            return Err(format!("'{part}' in CPU list '{t}' runs backwards"));
        }
        if b >= MAX_CPUS {
            return Err(format!(
                "CPU {b} in '{t}' is beyond the {MAX_CPUS} CPUs an affinity mask holds"
            ));
        }
        out.extend((a..=b).step_by(stride));
    }
    Ok(out.into_iter().collect())
}

/// The compact form of a CPU set: `0-7,16-23`.
pub(crate) fn format_cpulist(cpus: &[usize]) -> String {
    let mut v = cpus.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts = vec![];
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// CPUs a `cpu_set_t` holds.
pub(crate) const MAX_CPUS: usize = libc::CPU_SETSIZE as usize;

impl FromStr for CpuAffinity {
    type Err = String;
    fn from_str(s: &str) -> Result<CpuAffinity, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(CpuAffinity::Auto),
            "none" => Ok(CpuAffinity::None),
            _ => parse_cpulist(s)
                .map(CpuAffinity::List)
                .map_err(|e| format!("{e} (give auto, none or a list like 0-7,16-23)")),
        }
    }
}

/// The sysfs form of a PCI bus id: CUDA writes an 8-digit domain (`00000000:19:00.0`),
/// sysfs a 4-digit one (`0000:19:00.0`), both lower case in sysfs.
pub(crate) fn sysfs_bus_id(bus_id: &str) -> String {
    let b = bus_id.trim().to_ascii_lowercase();
    match b.split_once(':') {
        Some((dom, rest)) if dom.len() > 4 && dom[..dom.len() - 4].chars().all(|c| c == '0') => {
            format!("{}:{rest}", &dom[dom.len() - 4..])
        }
        _ => b,
    }
}

/// The NUMA node of the PCI device `bus_id` under `root`; `Ok(None)` when the kernel does not
/// know it (-1, as on single-node machines and many VMs).
pub(crate) fn numa_node(root: &Path, bus_id: &str) -> Result<Option<u32>, String> {
    let p = root
        .join("sys/bus/pci/devices")
        .join(sysfs_bus_id(bus_id))
        .join("numa_node");
    let s = std::fs::read_to_string(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    let v: i64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{} holds '{}', not a node number", p.display(), s.trim()))?;
    Ok((v >= 0).then_some(v as u32))
}

/// The CPUs of NUMA node `node` under `root`.
pub(crate) fn node_cpus(root: &Path, node: u32) -> Result<Vec<usize>, String> {
    let p = root.join(format!("sys/devices/system/node/node{node}/cpulist"));
    let s = std::fs::read_to_string(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    parse_cpulist(&s).map_err(|e| format!("{}: {e}", p.display()))
}

/// What a rank's affinity came to, for the provenance.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct AffinityFacts {
    /// `auto`, `none` or the list asked for.
    pub(crate) requested: String,
    /// The CPUs pinned to (compact list), or `None` when left as inherited.
    pub(crate) cpus: Option<String>,
    /// The GPU's NUMA node (auto).
    pub(crate) numa_node: Option<u32>,
    /// Why the affinity was left alone, or how it was found.
    pub(crate) note: String,
}

/// The CPUs `req` asks for on the GPU with PCI bus id `bus_id`, and how they were found.
/// `auto` falls back to leaving the affinity alone (with the reason) when sysfs does not tell
/// the GPU's node: pinning is an improvement, never a reason to fail a run.
pub(crate) fn resolve(req: &CpuAffinity, root: &Path, bus_id: Option<&str>) -> AffinityFacts {
    match req {
        CpuAffinity::None => AffinityFacts {
            requested: "none".into(),
            note: "left as inherited (--cpu-affinity none)".into(),
            ..Default::default()
        },
        CpuAffinity::List(v) => AffinityFacts {
            requested: format_cpulist(v),
            cpus: Some(format_cpulist(v)),
            note: "the CPUs given with --cpu-affinity".into(),
            ..Default::default()
        },
        CpuAffinity::Auto => {
            let mut f = AffinityFacts {
                requested: "auto".into(),
                ..Default::default()
            };
            let Some(b) = bus_id else {
                f.note = "left as inherited: the GPU's PCI bus id is unknown".into();
                return f;
            };
            match numa_node(root, b) {
                Ok(Some(n)) => match node_cpus(root, n) {
                    Ok(c) => {
                        f.numa_node = Some(n);
                        f.note = format!("the CPUs of NUMA node {n}, the node of GPU {b}");
                        f.cpus = Some(format_cpulist(&c));
                    }
                    Err(e) => f.note = format!("left as inherited: {e}"),
                },
                Ok(None) => {
                    f.note = format!(
                        "left as inherited: the kernel reports no NUMA node for GPU {b} (single-node machine or VM)"
                    )
                }
                Err(e) => f.note = format!("left as inherited: {e}"),
            }
            f
        }
    }
}

/// Pins the calling thread (and the threads it starts afterwards) to `cpus`.
pub(crate) fn apply(cpus: &[usize]) -> std::io::Result<()> {
    if cpus.is_empty() || cpus.iter().any(|&c| c >= MAX_CPUS) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("cannot pin to CPUs '{}'", format_cpulist(cpus)),
        ));
    }
    // SAFETY: `set` is a plain bit mask owned by this frame, zeroed before use; CPU_SET only
    // writes bits below CPU_SETSIZE (checked above); sched_setaffinity reads
    // size_of::<cpu_set_t>() bytes of it and changes only the scheduling of the calling thread.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The CPUs the calling thread may run on, from `<root>/proc/thread-self/status`
/// (`Cpus_allowed_list`); `None` when unreadable.
pub(crate) fn allowed_cpus(root: &Path) -> Option<Vec<usize>> {
    let s = std::fs::read_to_string(root.join("proc/thread-self/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("Cpus_allowed_list:"))?;
    parse_cpulist(line.split_once(':')?.1).ok()
}

/// The CPU frequency governors under `root`
/// (`sys/devices/system/cpu/cpu<N>/cpufreq/scaling_governor`), as one line:
/// `performance (64 CPUs)`, or `powersave (32 CPUs), performance (32 CPUs)`; `None` where
/// there is no cpufreq (many VMs and containers).
pub(crate) fn governors(root: &Path) -> Option<String> {
    let dir = root.join("sys/devices/system/cpu");
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for e in std::fs::read_dir(&dir).ok()?.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let Some(num) = name.strip_prefix("cpu") else {
            continue;
        };
        if num.is_empty() || !num.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        if let Ok(g) = std::fs::read_to_string(e.path().join("cpufreq/scaling_governor")) {
            *count.entry(g.trim().to_string()).or_default() += 1;
        }
    }
    if count.is_empty() {
        return None;
    }
    let mut v: Vec<(String, usize)> = count.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Some(
        v.iter()
            .map(|(g, n)| format!("{g} ({n} CPU{})", if *n == 1 { "" } else { "s" }))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_and_print_back() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11\n").unwrap(),
            [0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_cpulist("0-7:2").unwrap(), [0, 2, 4, 6]);
        assert_eq!(parse_cpulist("3,1,1").unwrap(), [1, 3]);
        assert_eq!(format_cpulist(&[16, 17, 18, 0, 1, 2, 3, 5]), "0-3,5,16-18");
        let v = parse_cpulist("0-7,16-23").unwrap();
        assert_eq!(format_cpulist(&v), "0-7,16-23");
        for bad in ["", "7-3", "a", "1,,2", "0-", "0-3:0", "5000"] {
            assert!(parse_cpulist(bad).is_err(), "{bad}");
        }
        assert_eq!("auto".parse::<CpuAffinity>().unwrap(), CpuAffinity::Auto);
        assert_eq!("None".parse::<CpuAffinity>().unwrap(), CpuAffinity::None);
        assert_eq!(
            "0-1".parse::<CpuAffinity>().unwrap(),
            CpuAffinity::List(vec![0, 1])
        );
        assert!("numa"
            .parse::<CpuAffinity>()
            .unwrap_err()
            .contains("auto, none"));
    }

    fn sysfs(dir: &Path, bus: &str, node: &str, cpulist: Option<&str>) {
        let d = dir.join("sys/bus/pci/devices").join(bus);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("numa_node"), format!("{node}\n")).unwrap();
        if let Some(c) = cpulist {
            let n = dir.join(format!("sys/devices/system/node/node{node}"));
            std::fs::create_dir_all(&n).unwrap();
            std::fs::write(n.join("cpulist"), format!("{c}\n")).unwrap();
        }
    }

    #[test]
    fn auto_finds_the_gpus_node_and_falls_back_with_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        sysfs(root, "0000:19:00.0", "1", Some("48-95,144-191"));
        sysfs(root, "0000:3b:00.0", "-1", None);
        // CUDA's 8-digit domain, upper case.
        let f = resolve(&CpuAffinity::Auto, root, Some("00000000:19:00.0"));
        assert_eq!(f.numa_node, Some(1));
        assert_eq!(f.cpus.as_deref(), Some("48-95,144-191"));
        assert!(f.note.contains("NUMA node 1"), "{}", f.note);
        let f = resolve(&CpuAffinity::Auto, root, Some("0000:3B:00.0"));
        assert_eq!((f.cpus, f.numa_node), (None, None));
        assert!(f.note.contains("no NUMA node"), "{}", f.note);
        let f = resolve(&CpuAffinity::Auto, root, Some("0000:99:00.0"));
        assert!(
            f.cpus.is_none() && f.note.contains("cannot read"),
            "{}",
            f.note
        );
        let f = resolve(&CpuAffinity::Auto, root, None);
        assert!(f.cpus.is_none() && f.note.contains("bus id is unknown"));
        let f = resolve(&CpuAffinity::List(vec![2, 3, 4]), root, None);
        assert_eq!(f.cpus.as_deref(), Some("2-4"));
        assert!(resolve(&CpuAffinity::None, root, Some("0000:19:00.0"))
            .cpus
            .is_none());
        assert_eq!(sysfs_bus_id("0001:19:00.0"), "0001:19:00.0");
    }

    #[test]
    fn governors_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert_eq!(governors(root), None);
        for (i, g) in ["performance", "performance", "powersave"]
            .iter()
            .enumerate()
        {
            let d = root.join(format!("sys/devices/system/cpu/cpu{i}/cpufreq"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("scaling_governor"), format!("{g}\n")).unwrap();
        }
        // Not CPUs: ignored.
        std::fs::create_dir_all(root.join("sys/devices/system/cpu/cpufreq")).unwrap();
        std::fs::create_dir_all(root.join("sys/devices/system/cpu/cpuidle")).unwrap();
        assert_eq!(
            governors(root).unwrap(),
            "performance (2 CPUs), powersave (1 CPU)"
        );
    }

    #[test]
    fn pinning_this_thread_to_an_allowed_cpu_takes_effect() {
        // A thread of its own, so the test harness's other threads keep their affinity.
        std::thread::spawn(|| {
            let root = Path::new("/");
            let Some(allowed) = allowed_cpus(root) else {
                return; // no procfs here: nothing to check against
            };
            let one = allowed[allowed.len() - 1];
            apply(&[one]).unwrap();
            assert_eq!(allowed_cpus(root).unwrap(), [one]);
            assert!(apply(&[]).is_err());
            assert!(apply(&[MAX_CPUS]).is_err());
        })
        .join()
        .unwrap();
    }
}
