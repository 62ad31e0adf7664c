//! Finding and loading the CUDA driver, NCCL and NVRTC libraries.
//!
//! cudarc loads each library lazily by a fixed list of names (`libnccl.so`, `libnvrtc.so.13`,
//! ...) and panics when none loads. Two consequences handled here:
//! - absence is checked first and turned into an error that says what was searched and how to
//!   point verifybench at the library;
//! - a library known only by another name (pip's `nvidia/nccl/lib/libnccl.so.2` has no
//!   `libnccl.so`), or one chosen with `--nccl-lib`, is made visible under cudarc's name: a
//!   private folder gets a `libnccl.so` link to it and the program re-executes itself once with
//!   that folder first on `LD_LIBRARY_PATH` (the loader reads it only at start). Workers inherit
//!   it, so every rank loads the same NCCL.

use std::path::{Path, PathBuf};

use crate::error::usage;

const REEXEC_MARK: &str = "VERIFYBENCH_LIBS_PREPARED";

/// The driver library is loadable.
pub fn cuda_present() -> bool {
    // SAFETY: only tries dlopen by name.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

fn nccl_loadable_by_default() -> bool {
    // SAFETY: only tries dlopen by name.
    unsafe { cudarc::nccl::sys::is_culib_present() }
}

fn nvrtc_loadable_by_default() -> bool {
    // SAFETY: only tries dlopen by name.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Directories of Python's site-packages (for pip-installed nvidia-* wheels). Asking Python
/// costs a process start, so it is asked once per run.
fn python_site_dirs() -> Vec<PathBuf> {
    static DIRS: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();
    DIRS.get_or_init(ask_python_site_dirs).clone()
}

fn ask_python_site_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![];
    for py in ["python3", "python"] {
        let out = std::process::Command::new(py)
            .args([
                "-c",
                "import site,sys\nfor p in site.getsitepackages()+[site.getusersitepackages()]: print(p)",
            ])
            .stderr(std::process::Stdio::null())
            .output();
        if let Ok(o) = out {
            if o.status.success() {
                dirs.extend(
                    String::from_utf8_lossy(&o.stdout)
                        .lines()
                        .map(PathBuf::from)
                        .filter(|p| p.is_dir()),
                );
                break;
            }
        }
    }
    if let Ok(v) = std::env::var("VIRTUAL_ENV") {
        if let Ok(rd) = std::fs::read_dir(Path::new(&v).join("lib")) {
            for e in rd.flatten() {
                dirs.push(e.path().join("site-packages"));
            }
        }
    }
    dirs
}

fn ld_library_dirs() -> Vec<PathBuf> {
    std::env::var("LD_LIBRARY_PATH")
        .unwrap_or_default()
        .split(':')
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .collect()
}

const SYSTEM_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
    "/usr/local/cuda/lib64",
    "/usr/local/cuda/targets/x86_64-linux/lib",
    "/usr/local/nccl/lib",
];

/// Candidate files for a library, in search order, with where each came from.
fn candidates(file_names: &[&str], wheel_subdirs: &[&str]) -> Vec<(PathBuf, String)> {
    let mut out = vec![];
    for d in ld_library_dirs() {
        for f in file_names {
            out.push((d.join(f), "LD_LIBRARY_PATH".to_string()));
        }
    }
    for d in SYSTEM_DIRS {
        for f in file_names {
            out.push((Path::new(d).join(f), "system".to_string()));
        }
    }
    // CUDA toolkits installed side by side (/usr/local/cuda-13.0/...)
    if let Ok(rd) = std::fs::read_dir("/usr/local") {
        let mut tk: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("cuda-"))
            })
            .collect();
        tk.sort();
        tk.reverse();
        for t in tk {
            for sub in ["lib64", "targets/x86_64-linux/lib"] {
                for f in file_names {
                    out.push((t.join(sub).join(f), "CUDA toolkit".to_string()));
                }
            }
        }
    }
    for site in python_site_dirs() {
        for sub in wheel_subdirs {
            for f in file_names {
                out.push((site.join(sub).join(f), "Python site-packages".to_string()));
            }
        }
    }
    out
}

/// What was found for one library.
#[derive(Debug, Clone)]
pub struct Found {
    pub path: PathBuf,
    pub how: String,
}

/// Finds NCCL: `--nccl-lib` (file or folder), else the names cudarc loads, else libnccl.so.2 on
/// LD_LIBRARY_PATH, system folders, CUDA toolkits, Python's nvidia-nccl wheels.
pub fn find_nccl(explicit: Option<&Path>) -> anyhow::Result<Option<Found>> {
    if let Some(p) = explicit {
        let file = if p.is_dir() {
            ["libnccl.so", "libnccl.so.2"]
                .iter()
                .map(|f| p.join(f))
                .find(|f| f.exists())
        } else if p.exists() {
            Some(p.to_path_buf())
        } else {
            None
        };
        return match file {
            Some(f) => Ok(Some(Found {
                path: f,
                how: "--nccl-lib".into(),
            })),
            None => Err(usage(format!(
                "--nccl-lib '{}' is neither libnccl.so* nor a folder holding one",
                p.display()
            ))),
        };
    }
    if nccl_loadable_by_default() {
        return Ok(None);
    }
    let c = candidates(&["libnccl.so.2", "libnccl.so"], &["nvidia/nccl/lib"]);
    Ok(c.into_iter()
        .find(|(p, _)| p.exists())
        .map(|(path, how)| Found { path, how }))
}

fn find_nvrtc() -> Option<Found> {
    if nvrtc_loadable_by_default() {
        return None;
    }
    candidates(
        &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"],
        &["nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"],
    )
    .into_iter()
    .find(|(p, _)| p.exists())
    .map(|(path, how)| Found { path, how })
}

/// Makes NCCL (and NVRTC) loadable under cudarc's names, re-executing this program once if the
/// loader's search path must change. Returns an error when no NCCL or driver is found.
pub fn prepare(nccl_explicit: Option<&Path>) -> anyhow::Result<()> {
    if !cuda_present() {
        return Err(usage(
            "no CUDA driver library (libcuda.so) found: this machine has no NVIDIA driver, or its folder is not on LD_LIBRARY_PATH; this command needs a GPU (verify, collective and sweep can run the cost model instead: --backend model)",
        ));
    }
    if std::env::var_os(REEXEC_MARK).is_some() {
        if !nccl_loadable_by_default() {
            return Err(usage(nccl_missing_message()));
        }
        return Ok(());
    }
    let nccl = find_nccl(nccl_explicit)?;
    if nccl.is_none() && !nccl_loadable_by_default() {
        return Err(usage(nccl_missing_message()));
    }
    let nvrtc = find_nvrtc();
    if nccl.is_none() && nvrtc.is_none() {
        return Ok(());
    }
    let mut links = vec![];
    if let Some(f) = &nccl {
        links.push(("libnccl.so", f));
    }
    if let Some(f) = &nvrtc {
        links.push(("libnvrtc.so", f));
    }
    let dir = std::env::temp_dir().join(format!("verifybench-libs-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut path_dirs = vec![dir.clone()];
    for (name, f) in &links {
        let link = dir.join(name);
        let _ = std::fs::remove_file(&link);
        let target = std::fs::canonicalize(&f.path).unwrap_or(f.path.clone());
        std::os::unix::fs::symlink(&target, &link)?;
        if let Some(parent) = target.parent() {
            path_dirs.push(parent.to_path_buf());
        }
    }
    path_dirs.extend(ld_library_dirs());
    let joined = std::env::join_paths(&path_dirs)?;
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe()?;
    let err = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env("LD_LIBRARY_PATH", joined)
        .env(REEXEC_MARK, dir)
        .exec();
    Err(anyhow::anyhow!(
        "re-executing with the NCCL library path failed: {err}"
    ))
}

fn nccl_missing_message() -> String {
    "no NCCL library found (searched: libnccl.so by the loader's path, libnccl.so.2 on \
     LD_LIBRARY_PATH, system folders, CUDA toolkits and Python's nvidia/nccl/lib): install NCCL, \
     or point to it with --nccl-lib PATH (a libnccl.so* file or its folder); verify, collective and sweep can run the cost model instead (--backend model)"
        .into()
}

/// The file a loaded library was mapped from, read from /proc/self/maps.
pub fn loaded_path(name_part: &str) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| {
            Path::new(p)
                .file_name()
                .and_then(|f| f.to_str())
                .is_some_and(|f| f.starts_with(name_part))
        })
        .map(|p| {
            std::fs::canonicalize(p)
                .map(|c| c.display().to_string())
                .unwrap_or(p.to_string())
        })
}

/// Whether NVRTC can be loaded (for the compute kernels).
pub fn nvrtc_present() -> bool {
    nvrtc_loadable_by_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_missing_nccl_is_a_usage_error() {
        let e = find_nccl(Some(Path::new("/nonexistent/libnccl.so.2"))).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("--nccl-lib"));
    }

    #[test]
    fn explicit_folder_is_searched_for_so_2() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("libnccl.so.2"), b"").unwrap();
        let f = find_nccl(Some(d.path())).unwrap().unwrap();
        assert!(f.path.ends_with("libnccl.so.2"));
        assert_eq!(f.how, "--nccl-lib");
    }
}
