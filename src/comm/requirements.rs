//! The lowest CUDA driver, NVRTC and NCCL versions this binary needs, and the checks of what
//! is loaded against them: pure functions of version numbers (tested without a GPU), called
//! by [`super::libs::prepare`] before any work.
//!
//! Why these floors:
//! - **CUDA driver API 12.8** (driver r570 or newer): the binary is built on cudarc's
//!   `cuda-13000` bindings, whose event timing calls `cuEventElapsedTime_v2`, a symbol drivers
//!   export from CUDA 12.8 on (an older driver panics "Missing symbol" at the first timing).
//!   Every other driver call used (`cuLaunchKernelEx`, graphs, stream capture, virtual memory
//!   for the P2P workspaces) is older than that. r570 is the first driver of the users' RTX PRO
//!   6000 (sm_120) cards, so no user driver is excluded by this floor.
//! - **NVRTC no newer than the driver**: a driver JIT-compiles PTX of its own CUDA version or
//!   older only, so PTX from NVRTC 13.0 fails to load on an r570/r575 (CUDA 12.8/12.9) driver.
//!   NVRTC must also know the GPU's architecture: compute_100 and compute_120 arrived with
//!   NVRTC 12.8, compute_90 with 11.8; 12.0 is the oldest NVRTC accepted at all.
//! - **NCCL 2.20**: the oldest NCCL whose per-collective log line the sweep reads to prove
//!   what NCCL chose (`43008 Bytes -> Algo 1 proto 0 time ...`); every NCCL call the binary
//!   makes (bf16 collectives, `ncclCommGetAsyncError`, `ncclCommAbort`) is older.

use std::fmt;

/// A library version `major.minor.patch` (patch 0 where the library reports none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Version {
    pub(crate) major: u32,
    pub(crate) minor: u32,
    pub(crate) patch: u32,
}

impl Version {
    pub(crate) const fn new(major: u32, minor: u32, patch: u32) -> Version {
        Version {
            major,
            minor,
            patch,
        }
    }

    /// From `cuDriverGetVersion`'s integer (`1000 * major + 10 * minor`: 12080 is CUDA 12.8).
    pub(crate) fn from_cuda_int(v: i32) -> Version {
        let v = v.max(0) as u32;
        Version::new(v / 1000, (v % 1000) / 10, 0)
    }

    /// From `ncclGetVersion`'s integer (NCCL >= 2.9: `10000 * major + 100 * minor + patch`).
    pub(crate) fn from_nccl_int(v: i32) -> Version {
        let v = v.max(0) as u32;
        Version::new(v / 10000, (v % 10000) / 100, v % 100)
    }

    /// Major and minor only (what PTX compatibility depends on).
    fn minor_level(self) -> (u32, u32) {
        (self.major, self.minor)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.patch == 0 {
            write!(f, "{}.{}", self.major, self.minor)
        } else {
            write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
        }
    }
}

/// The CUDA driver API the binary needs (see the module doc).
pub(crate) const DRIVER_FLOOR: Version = Version::new(12, 8, 0);
/// The first driver branch with [`DRIVER_FLOOR`].
pub(crate) const DRIVER_FLOOR_BRANCH: &str = "r570";
/// The oldest NVRTC accepted for any architecture.
pub(crate) const NVRTC_FLOOR: Version = Version::new(12, 0, 0);
/// The oldest NCCL accepted.
pub(crate) const NCCL_FLOOR: Version = Version::new(2, 20, 0);

/// The oldest NVRTC that compiles for the virtual architecture `arch` (`compute_120`).
pub(crate) fn nvrtc_floor_for(arch: &str) -> Version {
    let n: u32 = arch
        .trim_start_matches("compute_")
        .parse()
        .unwrap_or_default();
    let own = if n >= 100 {
        Version::new(12, 8, 0)
    } else if n >= 90 {
        Version::new(11, 8, 0)
    } else {
        Version::new(11, 0, 0)
    };
    own.max(NVRTC_FLOOR)
}

/// What pip names the NVRTC wheel of a CUDA version (the fix an error proposes).
pub(crate) fn pip_nvrtc_for(cuda: Version) -> String {
    if cuda.major >= 13 {
        format!(
            "pip install \"nvidia-cuda-nvrtc=={}.{}.*\"",
            cuda.major, cuda.minor
        )
    } else {
        format!(
            "pip install \"nvidia-cuda-nvrtc-cu12=={}.{}.*\"",
            cuda.major, cuda.minor
        )
    }
}

/// Checks the driver: `driver` is `cuDriverGetVersion`'s CUDA version, `branch` the kernel
/// module's version (e.g. "565.57.01") where known, for the message only.
pub(crate) fn check_driver(driver: Version, branch: Option<&str>) -> Result<(), String> {
    if driver >= DRIVER_FLOOR {
        return Ok(());
    }
    let which = branch.map(|b| format!(" {b}")).unwrap_or_default();
    Err(format!(
        "the NVIDIA driver{which} supports CUDA {driver}; verifybench needs CUDA {DRIVER_FLOOR} or newer (its event timing calls cuEventElapsedTime_v2, which drivers have from CUDA {DRIVER_FLOOR} on): upgrade the NVIDIA driver to {DRIVER_FLOOR_BRANCH} or newer"
    ))
}

/// Checks one NVRTC: it must be at least [`NVRTC_FLOOR`] (and, for `arch`, new enough to know
/// it), and no newer than the driver's CUDA version, whose JIT must load its PTX.
pub(crate) fn check_nvrtc(
    nvrtc: Version,
    driver: Version,
    arch: Option<&str>,
    path: &str,
) -> Result<(), String> {
    if nvrtc.minor_level() > driver.minor_level() {
        return Err(format!(
            "NVRTC {nvrtc} ({path}) writes PTX that the driver (CUDA {driver}) cannot load: use the NVRTC of CUDA {driver} or older ({}, then put its nvidia/cuda_nvrtc/lib or nvidia/cu{}/lib folder first on LD_LIBRARY_PATH), or upgrade the NVIDIA driver to one of CUDA {nvrtc}",
            pip_nvrtc_for(driver),
            driver.major
        ));
    }
    let floor = arch.map(nvrtc_floor_for).unwrap_or(NVRTC_FLOOR);
    if nvrtc < floor {
        let what = arch
            .map(|a| format!("compiling for {a} needs NVRTC {floor} or newer"))
            .unwrap_or_else(|| format!("verifybench needs NVRTC {floor} or newer"));
        return Err(format!(
            "NVRTC {nvrtc} ({path}) is too old: {what}: install a newer one that the driver (CUDA {driver}) can load ({})",
            pip_nvrtc_for(driver)
        ));
    }
    Ok(())
}

/// Checks NCCL: present and at least [`NCCL_FLOOR`].
pub(crate) fn check_nccl(nccl: Option<Version>) -> Result<(), String> {
    match nccl {
        None => Err(
            "no NCCL library loaded: install NCCL (pip install nvidia-nccl-cu12, or the system's libnccl2), or point to it with --nccl-lib PATH (a libnccl.so* file or its folder)"
                .into(),
        ),
        Some(v) if v < NCCL_FLOOR => Err(format!(
            "NCCL {v} is older than the {NCCL_FLOOR} verifybench needs (the sweep reads NCCL's per-collective log line of {NCCL_FLOOR} and newer): install a newer NCCL (pip install nvidia-nccl-cu12) and point to it with --nccl-lib PATH"
        )),
        Some(_) => Ok(()),
    }
}

/// One NVRTC library found: where, and its version (None when it could not be asked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NvrtcCandidate {
    pub(crate) path: String,
    /// Where it was found (LD_LIBRARY_PATH, system, CUDA toolkit, Python site-packages, the
    /// loader's default).
    pub(crate) how: String,
    pub(crate) version: Option<Version>,
}

/// Which NVRTC to use, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NvrtcChoice {
    /// Index into the candidates; None when none fits.
    pub(crate) chosen: Option<usize>,
    pub(crate) why: String,
}

/// Picks the first NVRTC in search order (the loader's own choice first, then LD_LIBRARY_PATH,
/// system folders, CUDA toolkits, Python's wheels) that the driver can load and that is new
/// enough; says which were passed over and why. With no driver version every candidate with
/// a version counts as loadable (nothing to compare with).
pub(crate) fn choose_nvrtc(driver: Option<Version>, candidates: &[NvrtcCandidate]) -> NvrtcChoice {
    if candidates.is_empty() {
        return NvrtcChoice {
            chosen: None,
            why: "no NVRTC library found (libnvrtc.so.13/.12 on the loader's path, LD_LIBRARY_PATH, system folders, CUDA toolkits, Python's nvidia/cu13/lib and nvidia/cuda_nvrtc/lib)".into(),
        };
    }
    let mut skipped = vec![];
    for (i, c) in candidates.iter().enumerate() {
        let Some(v) = c.version else {
            skipped.push(format!("{} (its version could not be read)", c.path));
            continue;
        };
        let fits = match driver {
            Some(d) => check_nvrtc(v, d, None, &c.path).map_err(|_| {
                if v.minor_level() > d.minor_level() {
                    format!("{} ({v}: newer than the driver's CUDA {d})", c.path)
                } else {
                    format!("{} ({v}: older than {NVRTC_FLOOR})", c.path)
                }
            }),
            None => Ok(()),
        };
        match fits {
            Ok(()) => {
                let mut why = match driver {
                    Some(d) => format!(
                        "NVRTC {v} from {} ({}): the first in search order whose PTX the driver (CUDA {d}) can load",
                        c.path, c.how
                    ),
                    None => format!("NVRTC {v} from {} ({}): the first in search order (driver version unknown)", c.path, c.how),
                };
                if !skipped.is_empty() {
                    why.push_str(&format!("; passed over: {}", skipped.join(", ")));
                }
                return NvrtcChoice {
                    chosen: Some(i),
                    why,
                };
            }
            Err(s) => skipped.push(s),
        }
    }
    let fix = driver
        .map(|d| {
            format!(
                ": install one the driver can load ({}) or upgrade the driver",
                pip_nvrtc_for(d)
            )
        })
        .unwrap_or_default();
    NvrtcChoice {
        chosen: None,
        why: format!("no usable NVRTC: {}{fix}", skipped.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(path: &str, v: Option<Version>) -> NvrtcCandidate {
        NvrtcCandidate {
            path: path.into(),
            how: "test".into(),
            version: v,
        }
    }

    #[test]
    fn version_integers_decode() {
        // cuDriverGetVersion: 12080 = 12*1000 + 8*10; 13000 = CUDA 13.0
        assert_eq!(Version::from_cuda_int(12080), Version::new(12, 8, 0));
        assert_eq!(Version::from_cuda_int(13000), Version::new(13, 0, 0));
        // ncclGetVersion: 22803 = 2*10000 + 28*100 + 3
        assert_eq!(Version::from_nccl_int(22803), Version::new(2, 28, 3));
        assert_eq!(Version::new(2, 28, 3).to_string(), "2.28.3");
        assert_eq!(Version::new(12, 8, 0).to_string(), "12.8");
    }

    #[test]
    fn an_old_driver_is_refused_naming_the_driver_to_install() {
        // r565 = CUDA 12.7: below the 12.8 floor
        let e = check_driver(Version::from_cuda_int(12070), Some("565.57.01")).unwrap_err();
        assert!(e.contains("565.57.01 supports CUDA 12.7"), "{e}");
        assert!(
            e.contains("cuEventElapsedTime_v2") && e.contains("r570"),
            "{e}"
        );
        check_driver(Version::from_cuda_int(12080), None).unwrap();
        check_driver(Version::from_cuda_int(13000), None).unwrap();
    }

    #[test]
    fn nvrtc_newer_than_the_driver_is_refused_with_the_matching_wheel() {
        // NVRTC 13.0 on an r570 driver (CUDA 12.8)
        let d = Version::new(12, 8, 0);
        let e = check_nvrtc(
            Version::new(13, 0, 0),
            d,
            Some("compute_120"),
            "/x/libnvrtc.so.13",
        )
        .unwrap_err();
        assert!(e.contains("NVRTC 13.0 (/x/libnvrtc.so.13)"), "{e}");
        assert!(e.contains("nvidia-cuda-nvrtc-cu12==12.8.*"), "{e}");
        // 12.9 is newer than 12.8 too (a minor version counts)
        assert!(check_nvrtc(Version::new(12, 9, 41), d, None, "p").is_err());
        // the same major.minor is fine whatever the patch
        check_nvrtc(Version::new(12, 8, 93), d, Some("compute_120"), "p").unwrap();
        // on a CUDA 13.0 driver the fix names the CUDA 13 wheel
        let e = check_nvrtc(Version::new(13, 1, 0), Version::new(13, 0, 0), None, "p").unwrap_err();
        assert!(e.contains("nvidia-cuda-nvrtc==13.0.*"), "{e}");
    }

    #[test]
    fn nvrtc_too_old_for_the_architecture_is_refused() {
        let d = Version::new(13, 0, 0);
        // compute_120 arrived with NVRTC 12.8
        let e = check_nvrtc(Version::new(12, 6, 0), d, Some("compute_120"), "p").unwrap_err();
        assert!(e.contains("compute_120 needs NVRTC 12.8"), "{e}");
        check_nvrtc(Version::new(12, 6, 0), d, Some("compute_90"), "p").unwrap();
        assert!(check_nvrtc(Version::new(11, 8, 0), d, Some("compute_90"), "p").is_err());
        assert_eq!(nvrtc_floor_for("compute_100"), Version::new(12, 8, 0));
        assert_eq!(nvrtc_floor_for("compute_80"), NVRTC_FLOOR);
    }

    #[test]
    fn missing_or_old_nccl_is_refused_saying_how_to_point_to_one() {
        let e = check_nccl(None).unwrap_err();
        assert!(
            e.contains("--nccl-lib") && e.contains("nvidia-nccl-cu12"),
            "{e}"
        );
        let e = check_nccl(Some(Version::new(2, 18, 5))).unwrap_err();
        assert!(e.contains("NCCL 2.18.5 is older than the 2.20"), "{e}");
        check_nccl(Some(Version::new(2, 20, 3))).unwrap();
        check_nccl(Some(Version::new(2, 28, 3))).unwrap();
    }

    #[test]
    fn nvrtc_choice_passes_over_one_the_driver_cannot_load() {
        // the loader would take NVRTC 13.0; the driver is CUDA 12.8; pip's 12.8 wheel is third
        let c = [
            cand("/a/libnvrtc.so.13", Some(Version::new(13, 0, 48))),
            cand("/b/libnvrtc.so.12", None),
            cand("/c/libnvrtc.so.12", Some(Version::new(12, 8, 93))),
        ];
        let ch = choose_nvrtc(Some(Version::new(12, 8, 0)), &c);
        assert_eq!(ch.chosen, Some(2));
        assert!(
            ch.why.contains("NVRTC 12.8.93 from /c/libnvrtc.so.12"),
            "{}",
            ch.why
        );
        assert!(
            ch.why
                .contains("/a/libnvrtc.so.13 (13.0.48: newer than the driver's CUDA 12.8)"),
            "{}",
            ch.why
        );
        assert!(ch
            .why
            .contains("/b/libnvrtc.so.12 (its version could not be read)"));
        // a CUDA 13.0 driver takes the first
        assert_eq!(
            choose_nvrtc(Some(Version::new(13, 0, 0)), &c).chosen,
            Some(0)
        );
    }

    #[test]
    fn nvrtc_choice_with_none_usable_says_what_to_install() {
        let c = [cand("/a/libnvrtc.so.13", Some(Version::new(13, 0, 0)))];
        let ch = choose_nvrtc(Some(Version::new(12, 9, 0)), &c);
        assert_eq!(ch.chosen, None);
        assert!(
            ch.why.contains("nvidia-cuda-nvrtc-cu12==12.9.*"),
            "{}",
            ch.why
        );
        assert_eq!(choose_nvrtc(Some(Version::new(12, 9, 0)), &[]).chosen, None);
    }
}
