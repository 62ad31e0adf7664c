//! What this machine offers a run (`verifybench env`): GPUs, peer access, driver, NCCL and
//! NVRTC libraries, and the NCCL_* environment each worker process really sees. Rendering is
//! [`crate::report::env`]'s, the flags `cli/env.rs`'s.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::comm;
/// What the platform does to peer traffic (`env`'s P2P section).
pub(crate) use crate::comm::p2p::sysfs::Platform as P2pPlatform;
use crate::launch::{run::run_job, Job, LaunchSpec};
use crate::record::{kinds, GpuInfo, Provenance, Record, Source, WorkerInfo};
use crate::request::GpuSpec;

/// The provenance of a record made on this machine's GPUs `devices` without workers (bandwidth,
/// selftest, env): this process, the GPUs as the driver names them, the driver, and NCCL's
/// version and library when NCCL is loaded. A GPU the driver cannot describe is left out.
pub(crate) fn provenance(backend: &str, started: String, devices: &[usize]) -> Provenance {
    let mut p = Provenance::here(backend, started);
    p.gpus = devices
        .iter()
        .filter_map(|&d| comm::device::info(d).ok())
        .collect();
    p.driver_version = comm::device::driver_version();
    p.nccl_library = comm::libs::loaded_path("libnccl");
    if p.nccl_library.is_some() {
        p.nccl_version = comm::nccl::version();
    }
    p
}

/// `env --format json`: the report as a record of kind `env` (source `measured`: it was read
/// from this machine), with the workers' NCCL_* environment in its provenance too.
pub(crate) fn env_record(r: &EnvReport, started: String) -> Record {
    let mut p = Provenance::here("none", started);
    p.gpus = r.gpus.clone();
    p.driver_version = r.driver_version.clone();
    p.nccl_version = r.nccl_version.clone();
    p.nccl_library = r.nccl_library.clone();
    p.workers = r.workers.clone();
    Record::other(Source::Measured, p, kinds::ENV, r).expect("env reports serialize")
}

/// The floors of [`comm::requirements`], as `env` prints them.
fn requirement_lines() -> Vec<String> {
    use comm::requirements as q;
    vec![
        format!(
            "CUDA driver API {} or newer (driver {}+): cudarc's cuda-13000 bindings time events with cuEventElapsedTime_v2",
            q::DRIVER_FLOOR,
            q::DRIVER_FLOOR_BRANCH
        ),
        format!(
            "NVRTC {} or newer (12.8 for compute_100/compute_120) and no newer than the driver's CUDA version (its JIT loads only PTX of its own version or older)",
            q::NVRTC_FLOOR
        ),
        format!(
            "NCCL {} or newer (the oldest per-collective log line the sweep reads)",
            q::NCCL_FLOOR
        ),
    ]
}

/// What `env` found.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct EnvReport {
    pub(crate) host: String,
    pub(crate) driver_version: Option<String>,
    pub(crate) cuda_driver_api: Option<String>,
    pub(crate) gpus: Vec<GpuInfo>,
    /// peer[i][j]: GPU i can access GPU j's memory directly.
    pub(crate) peer_access: Vec<Vec<bool>>,
    /// What the platform does to peer traffic, read from sysfs: the IOMMU, each GPU's ports
    /// and their ACS controls, each pair's PCIe path and NCCL's P2P verdict on it.
    pub(crate) p2p_platform: Option<P2pPlatform>,
    /// The P2P access checks of this boot (from the cache; `env` probes nothing): "from -> to:
    /// outcome" by PCI bus id.
    pub(crate) p2p_access: Vec<String>,
    pub(crate) nccl_version: Option<String>,
    pub(crate) nccl_library: Option<String>,
    pub(crate) nvrtc_available: bool,
    pub(crate) nvrtc_library: Option<String>,
    /// The NVRTC chosen for this run and why (the first in search order the driver can load).
    pub(crate) nvrtc_choice: Option<String>,
    /// Every NVRTC found, "path (version, where found)".
    pub(crate) nvrtc_found: Vec<String>,
    /// The floors this binary checks at start, one line each.
    pub(crate) requirements: Vec<String>,
    /// Every NCCL library the search knows on this machine, in search order, the one this run
    /// loads (or would load) marked.
    pub(crate) nccl_found: Vec<NcclFound>,
    /// NCCL_* variables of this process.
    pub(crate) nccl_env: BTreeMap<String, String>,
    /// What each worker process (started like a real run's workers) saw.
    pub(crate) workers: Vec<WorkerInfo>,
    pub(crate) problems: Vec<String>,
}

/// One NCCL library file on this machine.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct NcclFound {
    /// The file, links resolved.
    pub(crate) path: String,
    /// The version its name (or its pip wheel) tells.
    pub(crate) version: Option<String>,
    /// Where the version comes from, or that the name does not tell it.
    pub(crate) version_from: String,
    /// Where the search found it (`the loader's default`, `LD_LIBRARY_PATH`, `system`, ...).
    pub(crate) how: String,
    /// The one this run loads: the one loaded, else `--nccl-lib`'s, else the first found.
    pub(crate) chosen: bool,
}

impl NcclFound {
    /// `2.28.3`, `2.28.9 (from the wheel nvidia-nccl-cu13 2.28.9)`, or why it is not known.
    pub(crate) fn version_text(&self) -> String {
        match &self.version {
            Some(v) if self.version_from == crate::inspect::ncclmaps::FROM_NAME => v.clone(),
            Some(v) => format!("{v} ({})", self.version_from),
            None => self.version_from.clone(),
        }
    }
}

/// Marks the chosen library among `found` (in search order): `loaded` (what this process
/// mapped), else `explicit` (`--nccl-lib`, added when the search did not find it), else the
/// first, which is what the search takes.
fn mark_nccl(
    found: Vec<comm::libs::Found>,
    explicit: Option<std::path::PathBuf>,
    loaded: Option<&str>,
) -> Vec<NcclFound> {
    let mut list: Vec<(std::path::PathBuf, String)> =
        found.into_iter().map(|f| (f.path, f.how)).collect();
    let want = loaded.map(std::path::PathBuf::from).or(explicit.clone());
    if let Some(e) = &explicit {
        if !list.iter().any(|(p, _)| p == e) {
            list.insert(0, (e.clone(), "--nccl-lib".into()));
        }
    }
    let chosen = want
        .as_ref()
        .and_then(|w| list.iter().position(|(p, _)| p == w))
        .or((!list.is_empty() && loaded.is_none()).then_some(0));
    list.into_iter()
        .enumerate()
        .map(|(i, (path, how))| {
            let (version, version_from) = crate::inspect::ncclmaps::version_of_file(&path);
            NcclFound {
                path: path.display().to_string(),
                version,
                version_from,
                how,
                chosen: Some(i) == chosen,
            }
        })
        .collect()
}

/// Every NCCL the search finds, the chosen one marked (see [`mark_nccl`]).
fn nccl_found(gpu: &GpuSpec, loaded: Option<&str>) -> Vec<NcclFound> {
    let explicit = gpu
        .nccl_lib
        .as_deref()
        .and_then(|p| comm::libs::find_nccl(Some(p)).ok().flatten())
        .map(|f| std::fs::canonicalize(&f.path).unwrap_or(f.path));
    mark_nccl(comm::libs::nccl_candidates(), explicit, loaded)
}

/// Looks at this machine: devices, peer access, libraries, and (with 2+ GPUs) what workers
/// started as `gpu` says see.
pub(crate) fn gather(gpu: &GpuSpec) -> anyhow::Result<EnvReport> {
    crate::launch::run::check_gpu_flags(gpu, None)?;
    let mut r = EnvReport {
        host: crate::util::hostname(),
        driver_version: comm::device::driver_version(),
        requirements: requirement_lines(),
        nccl_env: crate::util::nccl_env(),
        ..Default::default()
    };
    for k in r.nccl_env.keys() {
        if !crate::inspect::nccl_vars::is_known_nccl_var(k) {
            r.problems.push(crate::inspect::nccl_vars::unknown_words(k));
        }
    }
    let n = comm::device_count();
    if n == 0 {
        r.problems
            .push("no CUDA driver or no GPU: only the cost model (--backend model of verify, collective and sweep) can run here".into());
        r.nccl_found = nccl_found(gpu, None);
        return Ok(r);
    }
    if let Err(e) = comm::libs::prepare(gpu.nccl_lib.as_deref()) {
        r.problems.push(format!("{e:#}"));
    }
    r.cuda_driver_api = comm::device::driver_cuda_version();
    for i in 0..n {
        match comm::device::info(i) {
            Ok(g) => r.gpus.push(g),
            Err(e) => r.problems.push(e.to_string()),
        }
    }
    r.peer_access = peer_access(&(0..n).collect::<Vec<_>>());
    let buses: Vec<String> = r.gpus.iter().map(|g| g.pci_bus_id.clone()).collect();
    let (disable, level) = (
        std::env::var("NCCL_P2P_DISABLE").ok(),
        std::env::var("NCCL_P2P_LEVEL").ok(),
    );
    r.p2p_platform = Some(comm::p2p::sysfs::platform(
        std::path::Path::new("/"),
        &buses,
        disable.as_deref(),
        level.as_deref(),
    ));
    let cache = comm::p2p::access::AccessCache::here();
    r.p2p_access = cache
        .entries()
        .into_iter()
        .map(|(a, b, p)| {
            let what = p.describe(comm::p2p::access::PROBE_BOUND_MS);
            format!("{a} -> {b}: {}", if what.is_empty() { "ok" } else { &what })
        })
        .collect();
    r.nccl_version = comm::nccl::version();
    r.nccl_library = comm::libs::loaded_path("libnccl");
    r.nccl_found = nccl_found(gpu, r.nccl_library.as_deref());
    let sel = comm::libs::nvrtc_selection();
    r.nvrtc_choice = Some(sel.why.clone());
    r.nvrtc_found = sel
        .candidates
        .iter()
        .map(|c| {
            format!(
                "{} ({}, {})",
                c.path,
                c.version
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "version unknown".into()),
                c.how
            )
        })
        .collect();
    r.nvrtc_available = comm::libs::nvrtc_present();
    if r.nvrtc_available {
        let _ = comm::kernels::nvrtc_version();
        r.nvrtc_library = comm::libs::loaded_path("libnvrtc");
    }
    if let Ok((major, minor)) = comm::device::compute_capability(0) {
        if let Ok(arch) = comm::compile::arch(major, minor) {
            if let Err(e) = comm::libs::check_nvrtc_for(arch) {
                r.problems.push(format!("{e:#}"));
            }
        }
    }
    if n >= 2 {
        let devices = crate::launch::run::select_devices(gpu, None, n)?;
        let spec = LaunchSpec::new(devices, gpu.launcher, gpu.timeout);
        let res = run_job(&spec, &Job::Env)?;
        r.workers = res.iter().map(|x| x.worker()).collect();
        for w in &r.workers {
            if w.nccl_env != r.nccl_env {
                r.problems.push(format!(
                    "worker of rank {} sees different NCCL_* variables than this process",
                    w.rank
                ));
            }
        }
    }
    Ok(r)
}

/// One GPU as a result that depends on the machine names it: the driver's name, its UUID and
/// its PCI address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub(crate) struct GpuIdentity {
    pub(crate) name: String,
    /// `GPU-...` as `nvidia-smi -L` prints it (`None` where the driver does not say).
    pub(crate) uuid: Option<String>,
    pub(crate) pci_bus_id: String,
}

/// What a result measured on the GPUs `devices` depends on, read from this machine: each GPU's
/// identity, peer access between them (as the driver reports it), the driver, and the NCCL
/// this process loads (call [`comm::libs::prepare`] first). `choose` keys its decision file on
/// it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Identity {
    pub(crate) gpus: Vec<GpuIdentity>,
    /// peer[i][j]: GPU devices[i] can access GPU devices[j]'s memory directly.
    pub(crate) peer_access: Vec<Vec<bool>>,
    pub(crate) driver: Option<String>,
    pub(crate) nccl_library: Option<String>,
    pub(crate) nccl_version: Option<String>,
}

/// peer[i][j]: GPU devices[i] can access GPU devices[j]'s memory directly, as the driver
/// reports it (a GPU always reaches its own; a failed query counts as no).
fn peer_access(devices: &[usize]) -> Vec<Vec<bool>> {
    let can = |i: usize, j: usize| i == j || comm::device::can_access_peer(i, j).unwrap_or(false);
    let row = |i| devices.iter().map(|&j| can(i, j)).collect();
    devices.iter().map(|&i| row(i)).collect()
}

/// [`Identity`] of the GPUs `devices`, in the order given (the ranks' order).
pub(crate) fn identity(devices: &[usize]) -> anyhow::Result<Identity> {
    let mut gpus = vec![];
    for &d in devices {
        let g = comm::device::info(d)?;
        gpus.push(GpuIdentity {
            name: g.name,
            uuid: comm::device::uuid(d).ok(),
            pci_bus_id: g.pci_bus_id,
        });
    }
    let nccl_version = comm::nccl::version();
    Ok(Identity {
        gpus,
        peer_access: peer_access(devices),
        driver: comm::device::driver_version(),
        nccl_library: comm::libs::loaded_path("libnccl"),
        nccl_version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::libs::Found;

    #[test]
    fn the_chosen_nccl_is_the_loaded_one_else_the_explicit_one_else_the_first() {
        let d = tempfile::tempdir().unwrap();
        let sys = d.path().join("libnccl.so.2.28.3");
        let wheel = d.path().join("site/nvidia/nccl/lib/libnccl.so.2");
        std::fs::create_dir_all(wheel.parent().unwrap()).unwrap();
        std::fs::write(&sys, b"x").unwrap();
        std::fs::write(&wheel, b"x").unwrap();
        let found = || {
            vec![
                Found {
                    path: sys.clone(),
                    how: "the loader's default, system".into(),
                },
                Found {
                    path: wheel.clone(),
                    how: "Python site-packages".into(),
                },
            ]
        };
        let chosen = |l: &[NcclFound]| -> Vec<bool> { l.iter().map(|f| f.chosen).collect() };
        let l = mark_nccl(found(), None, None);
        assert_eq!(chosen(&l), [true, false]);
        assert_eq!(l[0].version.as_deref(), Some("2.28.3"));
        assert_eq!(l[0].version_text(), "2.28.3");
        assert_eq!(l[1].version_text(), "version unknown from the name");
        let w = wheel.display().to_string();
        assert_eq!(chosen(&mark_nccl(found(), None, Some(&w))), [false, true]);
        assert_eq!(
            chosen(&mark_nccl(found(), Some(wheel.clone()), None)),
            [false, true]
        );
        // a loaded library the search does not know: none of the found is marked
        assert_eq!(
            chosen(&mark_nccl(found(), None, Some("/elsewhere/libnccl.so.2"))),
            [false, false]
        );
        // --nccl-lib outside the search's folders: listed first, marked
        let other = d.path().join("patched/libnccl.so.2.29.1");
        let l = mark_nccl(found(), Some(other.clone()), None);
        assert_eq!(chosen(&l), [true, false, false]);
        assert_eq!(
            (l[0].how.as_str(), l[0].version.as_deref()),
            ("--nccl-lib", Some("2.29.1"))
        );
    }
}
