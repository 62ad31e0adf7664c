//! The real P2P check of every ordered pair of GPUs, before a P2P all-reduce trusts them: GPU a
//! writes words through its mapping of GPU b's memory, releases a flag after them, and reads
//! both back (kernels/allreduce.cu `p2p_probe`, bounded by the clock on the device and by a
//! deadline on the host); the host then reads b's memory itself. `cuDeviceCanAccessPeer` says
//! yes on platforms that drop or redirect the traffic (IOMMU translation, ACS redirect: see
//! `sysfs.rs`), where an all-reduce would wait for a signal that never comes; vLLM's custom
//! all-reduce likewise writes and reads back through the mapping before trusting a pair.
//!
//! A pair that fails is refused by name with its likely causes, as a usage error (exit 2), before
//! any rank starts. The outcome of each pair is cached per boot (`/proc/sys/kernel/random/
//! boot_id`), keyed by the GPUs' PCI bus ids and the driver version, in the user's cache folder,
//! so the check costs once per boot and a pair that hung is not probed again.
//!
//! The probe itself (a kernel launch) is in `peer.rs`; here the pure parts: the outcome, the
//! cache, the loop over pairs with any probe (a mock in the tests), and the refusal.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::sysfs::{self, Platform};

/// What one probe of an ordered pair saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub(crate) enum Probe {
    /// The flag and every word read back through the mapping, and lay in the peer's memory.
    Ok,
    /// The flag read back, but words differed: `through_mapping` as the writer read them back,
    /// `in_memory` as the host read the peer's memory.
    Wrong {
        through_mapping: u32,
        in_memory: u32,
    },
    /// The flag never read back within the probe's bound: the write or the read was dropped.
    NoFlag,
    /// The probe did not finish within the host's deadline (a read that never completes).
    Hung,
    /// A driver call failed (peer access, the mapping, the launch, a copy).
    Failed { error: String },
}

impl Probe {
    pub(crate) fn ok(&self) -> bool {
        *self == Probe::Ok
    }

    /// What went wrong, in words ("" when nothing did).
    pub(crate) fn describe(&self, bound_ms: u64) -> String {
        match self {
            Probe::Ok => String::new(),
            Probe::Wrong {
                through_mapping,
                in_memory,
            } => format!(
                "writes through the peer mapping came back wrong ({through_mapping} of {} words read back through the mapping, {in_memory} in the peer's memory)",
                super::PROBE_WORDS
            ),
            Probe::NoFlag => format!(
                "a flag written through the peer mapping never read back within {bound_ms} ms (the write or the read was dropped)"
            ),
            Probe::Hung => "the probe kernel never finished (a peer read that never completes)".into(),
            Probe::Failed { error } => format!("the probe could not run: {error}"),
        }
    }
}

/// One ordered pair: GPU `from` writes into GPU `to`'s memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct PairCheck {
    pub(crate) from: usize,
    pub(crate) to: usize,
    pub(crate) from_bus: String,
    pub(crate) to_bus: String,
    pub(crate) probe: Probe,
    /// Read from this boot's cache rather than probed now.
    pub(crate) cached: bool,
}

/// How long the probe kernel waits for its flag on the device, and the host for the kernel.
pub(crate) const PROBE_BOUND_MS: u64 = 200;
pub(crate) const PROBE_DEADLINE_MS: u64 = 5000;

/// The cache's file: the probes of one boot and driver.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct CacheFile {
    boot_id: String,
    driver: String,
    pairs: Vec<CachedPair>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct CachedPair {
    from_bus: String,
    to_bus: String,
    probe: Probe,
}

/// The probes of this boot (see the module doc). Without a boot id nothing is cached.
#[derive(Debug, Clone)]
pub(crate) struct AccessCache {
    path: PathBuf,
    file: CacheFile,
    /// A boot id was found: entries may be read and written.
    usable: bool,
}

/// File name of the cache in its folder.
pub(crate) const CACHE_FILE: &str = "p2p-access.json";

/// The folder of the cache: `$XDG_CACHE_HOME/verifybench`, `$HOME/.cache/verifybench`, or the
/// temp folder's `verifybench-cache` where neither is set.
pub(crate) fn cache_dir() -> PathBuf {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    match (env("XDG_CACHE_HOME"), env("HOME")) {
        (Some(x), _) => x.join("verifybench"),
        (None, Some(h)) => h.join(".cache").join("verifybench"),
        (None, None) => std::env::temp_dir().join("verifybench-cache"),
    }
}

/// The boot id under `root` (`proc/sys/kernel/random/boot_id`), trimmed.
pub(crate) fn boot_id(root: &Path) -> Option<String> {
    sysfs::read_trim(&root.join("proc/sys/kernel/random/boot_id"))
}

impl AccessCache {
    /// The cache in `dir` for this boot and driver: the file's entries when it was written in
    /// the same boot with the same driver, none otherwise (a file of another boot is stale and
    /// is replaced at the next save).
    pub(crate) fn open(dir: &Path, boot_id: Option<String>, driver: &str) -> AccessCache {
        let path = dir.join(CACHE_FILE);
        let usable = boot_id.is_some();
        let boot_id = boot_id.unwrap_or_default();
        let mut file = CacheFile {
            boot_id: boot_id.clone(),
            driver: driver.to_string(),
            pairs: vec![],
        };
        if usable {
            if let Some(f) = read_cache(&path) {
                if f.boot_id == boot_id && f.driver == driver {
                    file = f;
                }
            }
        }
        AccessCache { path, file, usable }
    }

    /// The cache of this machine: [`cache_dir`], the boot id of `/`, the driver's version.
    pub(crate) fn here() -> AccessCache {
        let driver = crate::comm::device::driver_version().unwrap_or_default();
        AccessCache::open(&cache_dir(), boot_id(Path::new("/")), &driver)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The cached outcome of `from_bus` writing into `to_bus`, if this boot probed it.
    pub(crate) fn get(&self, from_bus: &str, to_bus: &str) -> Option<&Probe> {
        if !self.usable {
            return None;
        }
        self.file
            .pairs
            .iter()
            .find(|p| p.from_bus == from_bus && p.to_bus == to_bus)
            .map(|p| &p.probe)
    }

    /// Every cached pair, for `env`: (from, to, outcome).
    pub(crate) fn entries(&self) -> Vec<(String, String, Probe)> {
        if !self.usable {
            return vec![];
        }
        self.file
            .pairs
            .iter()
            .map(|p| (p.from_bus.clone(), p.to_bus.clone(), p.probe.clone()))
            .collect()
    }

    fn put(&mut self, from_bus: &str, to_bus: &str, probe: Probe) {
        self.file
            .pairs
            .retain(|p| !(p.from_bus == from_bus && p.to_bus == to_bus));
        self.file.pairs.push(CachedPair {
            from_bus: from_bus.into(),
            to_bus: to_bus.into(),
            probe,
        });
    }

    /// Records outcomes and writes the file (temp and rename), merged with what other processes
    /// of this boot wrote meanwhile. A probe that could not run (`Failed`: no NVRTC, a driver
    /// call refused) says nothing about the platform and is not kept. A cache that cannot be
    /// written is only a cost: the error is returned for a note, never fatal.
    pub(crate) fn record(&mut self, new: &[(String, String, Probe)]) -> anyhow::Result<()> {
        let new: Vec<&(String, String, Probe)> = new
            .iter()
            .filter(|(_, _, p)| !matches!(p, Probe::Failed { .. }))
            .collect();
        if !self.usable || new.is_empty() {
            return Ok(());
        }
        if let Some(f) = read_cache(&self.path) {
            if f.boot_id == self.file.boot_id && f.driver == self.file.driver {
                for p in f.pairs {
                    if self.get(&p.from_bus, &p.to_bus).is_none() {
                        self.file.pairs.push(p);
                    }
                }
            }
        }
        for (a, b, p) in new {
            self.put(a, b, p.clone());
        }
        if let Some(d) = self.path.parent() {
            std::fs::create_dir_all(d)?;
        }
        crate::util::write_file(&self.path, &serde_json::to_vec_pretty(&self.file)?)
    }
}

fn read_cache(path: &Path) -> Option<CacheFile> {
    let bytes = crate::util::read::read(path, "peer-access cache", crate::util::read::P2P_CACHE);
    serde_json::from_slice(&bytes.ok()?).ok()
}

/// Every ordered pair of distinct GPUs among `gpus` (ordinal, PCI bus id), from the cache or
/// probed now with `probe(from, to)`; new outcomes are written to the cache. The same GPU twice
/// (virtual ranks) needs no peer path and is skipped.
pub(crate) fn check_pairs(
    gpus: &[(usize, String)],
    cache: &mut AccessCache,
    mut probe: impl FnMut(usize, usize) -> Probe,
) -> (Vec<PairCheck>, Option<String>) {
    let mut seen: Vec<&(usize, String)> = vec![];
    for g in gpus {
        if !seen.iter().any(|s| s.0 == g.0) {
            seen.push(g);
        }
    }
    let (mut out, mut new) = (vec![], vec![]);
    for a in &seen {
        for b in &seen {
            if a.0 == b.0 {
                continue;
            }
            let (p, cached) = match cache.get(&a.1, &b.1) {
                Some(p) => (p.clone(), true),
                None => {
                    let p = probe(a.0, b.0);
                    new.push((a.1.clone(), b.1.clone(), p.clone()));
                    (p, false)
                }
            };
            out.push(PairCheck {
                from: a.0,
                to: b.0,
                from_bus: a.1.clone(),
                to_bus: b.1.clone(),
                probe: p,
                cached,
            });
        }
    }
    let note = cache.record(&new).err().map(|e| {
        format!(
            "the P2P access check could not be cached in '{}': {e:#}",
            cache.path().display()
        )
    });
    (out, note)
}

/// The refusal of the P2P all-reduces when a pair failed, or `None`: every failed pair named
/// (GPU and bus ids, what the probe saw), the likely causes from `platform` (the GPUs in the
/// order of `buses`), and where the cached outcome lives.
pub(crate) fn refusal(
    checks: &[PairCheck],
    platform: &Platform,
    buses: &[String],
    cache: &Path,
) -> Option<String> {
    let failed: Vec<&PairCheck> = checks.iter().filter(|c| !c.probe.ok()).collect();
    if failed.is_empty() {
        return None;
    }
    let mut lines = vec![];
    for c in &failed {
        let idx = |b: &str| buses.iter().position(|x| x == b);
        let causes = match (idx(&c.from_bus), idx(&c.to_bus)) {
            (Some(a), Some(b)) => sysfs::likely_causes(platform, a, b),
            _ => vec![],
        };
        lines.push(format!(
            "GPU {} ({}) -> GPU {} ({}): {}{}; likely cause: {}",
            c.from,
            c.from_bus,
            c.to,
            c.to_bus,
            c.probe.describe(PROBE_BOUND_MS),
            if c.cached {
                " (found earlier in this boot)"
            } else {
                ""
            },
            if causes.is_empty() {
                "none found in sysfs (`verifybench env` shows the IOMMU and ACS state)".into()
            } else {
                causes.join("; ")
            }
        ));
    }
    Some(format!(
        "the driver reports peer access, but the P2P access check failed for {} of {} GPU pairs, so --impl oneshot/twoshot is refused on these GPUs (use --impl nccl):\n  {}\n(the check's outcome is cached for this boot in '{}'; delete it to check again after a fix)",
        failed.len(),
        checks.len(),
        lines.join("\n  "),
        cache.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(n: usize) -> Vec<(usize, String)> {
        (0..n)
            .map(|i| (i, format!("0000:0{}:00.0", i + 1)))
            .collect()
    }

    fn cache_in(dir: &Path, boot: &str) -> AccessCache {
        AccessCache::open(dir, Some(boot.into()), "580.1")
    }

    #[test]
    fn every_ordered_pair_is_probed_once_per_boot() {
        let d = tempfile::tempdir().unwrap();
        let mut calls = vec![];
        let (checks, note) = check_pairs(&gpus(3), &mut cache_in(d.path(), "boot-a"), |a, b| {
            calls.push((a, b));
            Probe::Ok
        });
        assert_eq!(note, None);
        // 3 GPUs: 3 x 2 ordered pairs, both directions
        assert_eq!(calls, [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]);
        assert!(checks.iter().all(|c| c.probe.ok() && !c.cached));
        // the same boot again: nothing probed, everything from the file
        let mut again = 0;
        let (checks, _) = check_pairs(&gpus(3), &mut cache_in(d.path(), "boot-a"), |_, _| {
            again += 1;
            Probe::Ok
        });
        assert_eq!(again, 0);
        assert!(checks.iter().all(|c| c.cached) && checks.len() == 6);
        // another boot: the file is stale, every pair probed again and the file replaced
        let mut fresh = 0;
        check_pairs(&gpus(3), &mut cache_in(d.path(), "boot-b"), |_, _| {
            fresh += 1;
            Probe::NoFlag
        });
        assert_eq!(fresh, 6);
        let text = std::fs::read_to_string(d.path().join(CACHE_FILE)).unwrap();
        assert!(
            text.contains("\"boot-b\"") && !text.contains("boot-a"),
            "{text}"
        );
        assert_eq!(
            cache_in(d.path(), "boot-b").get("0000:01:00.0", "0000:02:00.0"),
            Some(&Probe::NoFlag)
        );
        // another driver in the same boot is another cache
        let other = AccessCache::open(d.path(), Some("boot-b".into()), "590.2");
        assert_eq!(other.get("0000:01:00.0", "0000:02:00.0"), None);
        // a probe that could not run is not kept: the next run probes the pair again
        let e = tempfile::tempdir().unwrap();
        check_pairs(&gpus(2), &mut cache_in(e.path(), "b"), |_, _| {
            Probe::Failed {
                error: "NVRTC not found".into(),
            }
        });
        let mut again = 0;
        check_pairs(&gpus(2), &mut cache_in(e.path(), "b"), |_, _| {
            again += 1;
            Probe::Ok
        });
        assert_eq!(again, 2);
    }

    #[test]
    fn virtual_ranks_and_missing_boot_ids_probe_nothing_or_cache_nothing() {
        let d = tempfile::tempdir().unwrap();
        // one GPU three times: no pair
        let same = vec![(0, "0000:01:00.0".to_string()); 3];
        let (checks, _) = check_pairs(&same, &mut cache_in(d.path(), "b"), |_, _| {
            panic!("no probe for one GPU")
        });
        assert!(checks.is_empty());
        // no boot id: every pair probed, nothing written
        let mut n = 0;
        let mut c = AccessCache::open(d.path(), None, "580.1");
        check_pairs(&gpus(2), &mut c, |_, _| {
            n += 1;
            Probe::Ok
        });
        assert_eq!(n, 2);
        assert!(!d.path().join(CACHE_FILE).exists());
        // a cache folder that cannot be made: a note, the outcomes still returned
        let blocker = d.path().join("file");
        std::fs::write(&blocker, "x").unwrap();
        let mut c = cache_in(&blocker.join("sub"), "b");
        let (checks, note) = check_pairs(&gpus(2), &mut c, |_, _| Probe::Ok);
        assert_eq!(checks.len(), 2);
        assert!(note.unwrap().contains("could not be cached"));
    }

    #[test]
    fn the_boot_id_is_read_from_proc() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(boot_id(d.path()), None);
        let p = d.path().join("proc/sys/kernel/random");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("boot_id"), "1c6b2f5e-0000-4000-8000-00000000abcd\n").unwrap();
        assert_eq!(
            boot_id(d.path()).as_deref(),
            Some("1c6b2f5e-0000-4000-8000-00000000abcd")
        );
    }

    fn platform_with_translated_gpu0() -> (Platform, Vec<String>) {
        let buses: Vec<String> = gpus(2).into_iter().map(|g| g.1).collect();
        let mut p = sysfs::platform(Path::new("/nonexistent"), &buses, None, None);
        p.gpus[0].iommu_group = Some(12);
        p.gpus[0].iommu_type = Some("DMA".into());
        (p, buses)
    }

    /// The refusal path with a mock probe: GPU 0 -> 1 drops the flag, 1 -> 0 works. The run
    /// is refused with exit code 2, naming the pair, what the probe saw and the likely cause.
    #[test]
    fn a_failed_pair_is_refused_by_name_with_its_likely_cause() {
        let d = tempfile::tempdir().unwrap();
        let mut cache = cache_in(d.path(), "b");
        let (checks, _) = check_pairs(&gpus(2), &mut cache, |a, _| {
            if a == 0 {
                Probe::NoFlag
            } else {
                Probe::Ok
            }
        });
        let (p, buses) = platform_with_translated_gpu0();
        let msg = refusal(&checks, &p, &buses, cache.path()).expect("refused");
        assert!(
            msg.contains("failed for 1 of 2 GPU pairs, so --impl oneshot/twoshot is refused"),
            "{msg}"
        );
        assert!(msg.contains("GPU 0 (0000:01:00.0) -> GPU 1 (0000:02:00.0): a flag written through the peer mapping never read back within 200 ms"), "{msg}");
        assert!(
            msg.contains("likely cause: IOMMU in translated mode for 0000:01:00.0 (group 12: DMA)"),
            "{msg}"
        );
        assert!(msg.contains(&d.path().join(CACHE_FILE).display().to_string()));
        assert!(!msg.contains("GPU 1 (0000:02:00.0) -> GPU 0"), "{msg}");
        // the refusal as the launcher returns it: a usage error, exit code 2
        let e = crate::error::usage(msg);
        assert_eq!(crate::error::exit_code(&e), 2);
        // the next run of this boot refuses from the cache, saying so, without probing
        let (again, _) = check_pairs(&gpus(2), &mut cache_in(d.path(), "b"), |_, _| {
            panic!("cached")
        });
        let msg = refusal(&again, &p, &buses, cache.path()).unwrap();
        assert!(msg.contains("(found earlier in this boot)"), "{msg}");
        // every pair fine: no refusal
        let ok: Vec<PairCheck> = again
            .into_iter()
            .map(|c| PairCheck {
                probe: Probe::Ok,
                ..c
            })
            .collect();
        assert_eq!(refusal(&ok, &p, &buses, cache.path()), None);
    }

    #[test]
    fn each_outcome_says_what_was_seen() {
        assert_eq!(Probe::Ok.describe(200), "");
        let w = Probe::Wrong {
            through_mapping: 63,
            in_memory: 63,
        };
        assert!(w.describe(200).contains("63 of 63 words"));
        assert!(Probe::Hung.describe(200).contains("never finished"));
        let f = Probe::Failed {
            error: "cuCtxEnablePeerAccess: CUDA_ERROR_TOO_MANY_PEERS".into(),
        };
        assert!(f.describe(200).ends_with("CUDA_ERROR_TOO_MANY_PEERS"));
        // no cause found: the refusal points at env
        let checks = vec![PairCheck {
            from: 2,
            to: 3,
            from_bus: "0000:aa:00.0".into(),
            to_bus: "0000:bb:00.0".into(),
            probe: Probe::Hung,
            cached: false,
        }];
        let p = sysfs::platform(Path::new("/nonexistent"), &[], None, None);
        let msg = refusal(&checks, &p, &[], Path::new("c.json")).unwrap();
        assert!(msg.contains("likely cause: none found in sysfs"), "{msg}");
        // the outcome's JSON, as the cache file holds it
        assert_eq!(
            serde_json::to_string(&w).unwrap(),
            r#"{"outcome":"wrong","through_mapping":63,"in_memory":63}"#
        );
    }
}
