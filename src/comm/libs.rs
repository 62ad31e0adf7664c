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

use super::requirements::{self, choose_nvrtc, NvrtcCandidate, Version};
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

/// Whether NVRTC can be loaded (for the compute kernels).
pub(crate) fn nvrtc_present() -> bool {
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
    let mut add = |dir: &Path, how: &str| {
        for f in file_names {
            out.push((dir.join(f), how.to_string()));
        }
    };
    for d in ld_library_dirs() {
        add(&d, "LD_LIBRARY_PATH");
    }
    for d in SYSTEM_DIRS {
        add(Path::new(d), "system");
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
                add(&t.join(sub), "CUDA toolkit");
            }
        }
    }
    for site in python_site_dirs() {
        for sub in wheel_subdirs {
            add(&site.join(sub), "Python site-packages");
        }
    }
    out
}

/// What was found for one library.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    pub(crate) path: PathBuf,
    pub(crate) how: String,
}

/// What a library given by name must be.
const NCCL_WANTED: &str =
    "give libnccl.so* (a shared library of this machine that exports ncclGetVersion) or the folder holding one";

/// The NCCL library file `p` names (itself, or a folder's libnccl.so or libnccl.so.2), read
/// before anything loads it ([`super::elf`]): a shared library of this machine that exports
/// `ncclGetVersion`. The error says what the file is, without the flag's name: `'P' is a text
/// file: give ...`.
pub(crate) fn nccl_file(p: &Path) -> Result<PathBuf, String> {
    let file = if p.is_dir() {
        ["libnccl.so", "libnccl.so.2"]
            .iter()
            .map(|f| p.join(f))
            .find(|f| f.exists())
            .ok_or_else(|| {
                format!(
                    "'{}' is a folder without libnccl.so or libnccl.so.2: {NCCL_WANTED}",
                    p.display()
                )
            })?
    } else if p.exists() {
        p.to_path_buf()
    } else {
        return Err(format!(
            "'{}': no such file or folder; {NCCL_WANTED}",
            p.display()
        ));
    };
    super::elf::check_shared_library(&file, "ncclGetVersion")
        .map_err(|what| format!("'{}' is {what}: {NCCL_WANTED}", file.display()))?;
    Ok(file)
}

/// Finds NCCL: `--nccl-lib` (file or folder, checked by [`nccl_file`]), else the names cudarc
/// loads, else libnccl.so.2 on LD_LIBRARY_PATH, system folders, CUDA toolkits, Python's
/// nvidia-nccl wheels.
pub(crate) fn find_nccl(explicit: Option<&Path>) -> anyhow::Result<Option<Found>> {
    if let Some(p) = explicit {
        let path = nccl_file(p).map_err(|m| usage(format!("--nccl-lib {m}")))?;
        return Ok(Some(Found {
            path,
            how: "--nccl-lib".into(),
        }));
    }
    if nccl_loadable_by_default() {
        return Ok(None);
    }
    let c = candidates(&["libnccl.so.2", "libnccl.so"], &["nvidia/nccl/lib"]);
    Ok(c.into_iter()
        .find(|(p, _)| p.exists())
        .map(|(path, how)| Found { path, how }))
}

/// Every NCCL library file on this machine that the search of [`find_nccl`] knows, in its
/// order, each once (by resolved path) with every place it was found: first the one the
/// loader finds by cudarc's names (what loads without help), then libnccl.so.2 and
/// libnccl.so on LD_LIBRARY_PATH, the system folders, CUDA toolkits and Python's nvidia-nccl
/// wheels. Paths are resolved (`libnccl.so.2` -> `libnccl.so.2.28.3`).
pub(crate) fn nccl_candidates() -> Vec<Found> {
    let mut out: Vec<Found> = vec![];
    let mut push = |path: PathBuf, how: String| {
        let canon = std::fs::canonicalize(&path).unwrap_or(path);
        match out.iter_mut().find(|f| f.path == canon) {
            Some(f) if !f.how.split(", ").any(|h| h == how) => f.how = format!("{}, {how}", f.how),
            Some(_) => {}
            None => out.push(Found { path: canon, how }),
        }
    };
    if let Some(p) = loader_default_nccl() {
        push(p, LOADER_DEFAULT.into());
    }
    for (p, how) in candidates(&["libnccl.so.2", "libnccl.so"], &["nvidia/nccl/lib"]) {
        if p.is_file() {
            push(p, how);
        }
    }
    out
}

/// How [`nccl_candidates`] names the library the loader finds by cudarc's names.
pub(crate) const LOADER_DEFAULT: &str = "the loader's default";

/// The file the loader maps for cudarc's NCCL names (`libnccl.so`, ...), or None when none
/// loads. The library is opened with RTLD_LOCAL, its path read with dladdr, and closed again.
fn loader_default_nccl() -> Option<PathBuf> {
    cudarc::get_lib_name_candidates("nccl")
        .into_iter()
        .find_map(|name| {
            let flags = libc::RTLD_LAZY | libc::RTLD_LOCAL;
            with_symbol(&name, flags, c"ncclGetVersion", |_, path| {
                path.map(PathBuf::from)
            })
        })
}

/// Opens the library `name` (a file path, or a name for the loader's search) with `flags`,
/// finds `symbol` in it and gives `f` its address and the file the loader mapped it from (when
/// `dladdr` says), then closes the library again: `f`'s answer, or `None` when the library or
/// the symbol is missing. RTLD_LOCAL in `flags` keeps its symbols out of the global namespace.
fn with_symbol<T>(
    name: &str,
    flags: std::ffi::c_int,
    symbol: &std::ffi::CStr,
    f: impl FnOnce(*mut libc::c_void, Option<String>) -> Option<T>,
) -> Option<T> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: dlopen of a shared library by a NUL-terminated name.
    let h = unsafe { libc::dlopen(c.as_ptr(), flags) };
    if h.is_null() {
        return None;
    }
    // SAFETY: h is a live handle; the symbol name is NUL-terminated.
    let sym = unsafe { libc::dlsym(h, symbol.as_ptr()) };
    let mut res = None;
    if !sym.is_null() {
        // SAFETY: a zeroed Dl_info is a valid out-parameter; sym lies in the library.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        let path = (unsafe { libc::dladdr(sym, &mut info) } != 0 && !info.dli_fname.is_null())
            .then(|| {
                // SAFETY: dladdr set dli_fname to a NUL-terminated string owned by the loader,
                // valid while the library is open (copied here before dlclose).
                let f = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
                f.to_string_lossy().into_owned()
            });
        res = f(sym, path);
    }
    // SAFETY: h came from dlopen above and no pointer into the library outlives this call
    // (`f` returns owned values).
    unsafe { libc::dlclose(h) };
    res
}

/// The variables by which a re-executed run knows its libraries are prepared: a child that
/// must load ANOTHER NCCL than its parent (a sweep point's library) is started without them,
/// so it prepares its own.
pub(crate) const PREPARED_VARS: [&str; 2] = [REEXEC_MARK, NVRTC_WHY];

/// The NVRTC libraries on this machine in search order, each with its version: first the one
/// the loader finds by cudarc's names (what would load without help), then every
/// libnvrtc.so.13/.12 on LD_LIBRARY_PATH, system folders, CUDA toolkits and Python's wheels.
/// Each is opened once to ask `nvrtcVersion` and closed again.
fn nvrtc_candidates() -> Vec<NvrtcCandidate> {
    let mut out: Vec<NvrtcCandidate> = vec![];
    let mut push = |path: String, how: String, version: Option<Version>| {
        let canon = std::fs::canonicalize(&path)
            .map(|c| c.display().to_string())
            .unwrap_or(path);
        if !out.iter().any(|c| c.path == canon) {
            out.push(NvrtcCandidate {
                path: canon,
                how,
                version,
            });
        }
    };
    for name in ["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"] {
        if let Some((path, v)) = probe_nvrtc(name) {
            push(path, "the loader's default".into(), Some(v));
            break;
        }
    }
    for (p, how) in candidates(
        &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"],
        &["nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"],
    ) {
        if p.exists() {
            let s = p.display().to_string();
            let v = probe_nvrtc(&s).map(|(_, v)| v);
            push(s, how, v);
        }
    }
    out
}

/// Opens an NVRTC library (a file path, or a name for the loader's search), asks its version
/// and the file it was mapped from, and closes it.
fn probe_nvrtc(name: &str) -> Option<(String, Version)> {
    // RTLD_LOCAL: a second NVRTC opened later does not clash.
    let flags = libc::RTLD_NOW | libc::RTLD_LOCAL;
    with_symbol(name, flags, c"nvrtcVersion", |sym, path| {
        type VersionFn = unsafe extern "C" fn(*mut i32, *mut i32) -> i32;
        // SAFETY: nvrtcVersion has the signature nvrtcResult(int*, int*) in every NVRTC.
        let f: VersionFn = unsafe { std::mem::transmute::<*mut libc::c_void, VersionFn>(sym) };
        let (mut a, mut b) = (0, 0);
        // SAFETY: two valid out-pointers.
        let ok = unsafe { f(&mut a, &mut b) } == 0;
        let version = Version::new(a.max(0) as u32, b.max(0) as u32, 0);
        ok.then(|| (path.unwrap_or_else(|| name.to_string()), version))
    })
}

/// The CUDA version of the driver's API (`cuDriverGetVersion`), None without a driver.
pub(crate) fn driver_api_version() -> Option<Version> {
    if !cuda_present() {
        return None;
    }
    let mut v = 0;
    // SAFETY: v is a valid out-pointer; cuDriverGetVersion needs no cuInit.
    let r = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
    (r == cudarc::driver::sys::CUresult::CUDA_SUCCESS).then(|| Version::from_cuda_int(v))
}

/// NVRTC as chosen for this run: the libraries found, the choice and why (`env` shows it).
#[derive(Debug, Clone)]
pub(crate) struct NvrtcSelection {
    pub(crate) candidates: Vec<NvrtcCandidate>,
    pub(crate) chosen: Option<NvrtcCandidate>,
    pub(crate) why: String,
}

const NVRTC_WHY: &str = "VERIFYBENCH_NVRTC_CHOICE";

/// NVRTC's selection (computed once per process; after the re-execution that made the chosen
/// library the loader's default, the reason recorded before it is kept).
pub(crate) fn nvrtc_selection() -> NvrtcSelection {
    static SEL: std::sync::OnceLock<NvrtcSelection> = std::sync::OnceLock::new();
    SEL.get_or_init(|| {
        let candidates = nvrtc_candidates();
        let ch = choose_nvrtc(driver_api_version(), &candidates);
        let why = match std::env::var(NVRTC_WHY) {
            Ok(w) if !w.is_empty() && ch.chosen == Some(0) => w,
            _ => ch.why,
        };
        NvrtcSelection {
            chosen: ch.chosen.map(|i| candidates[i].clone()),
            candidates,
            why,
        }
    })
    .clone()
}

/// Checks the NVRTC that will compile for `arch` against the driver (see
/// [`super::requirements`]): an error that names the library to change and how.
pub(crate) fn check_nvrtc_for(arch: &str) -> anyhow::Result<()> {
    let sel = nvrtc_selection();
    let Some(c) = sel.chosen else {
        return Err(usage(format!("NVRTC compiles the kernels: {}", sel.why)));
    };
    let (Some(v), Some(d)) = (c.version, driver_api_version()) else {
        return Ok(());
    };
    requirements::check_nvrtc(v, d, Some(arch), &c.path).map_err(usage)
}

/// Makes NCCL (and NVRTC) loadable under cudarc's names, re-executing this program once if the
/// loader's search path must change, and checks the driver and NCCL against the floors of
/// [`super::requirements`] before any work. NVRTC is chosen here too (the first the driver can
/// load, see [`nvrtc_selection`]) and checked where kernels are compiled
/// ([`check_nvrtc_for`]), since runs without kernels do not need it. Returns an error when no
/// driver or NCCL is found, or one is too old.
pub fn prepare(nccl_explicit: Option<&Path>) -> anyhow::Result<()> {
    if !cuda_present() {
        return Err(usage(
            "no CUDA driver library (libcuda.so) found: this machine has no NVIDIA driver, or its folder is not on LD_LIBRARY_PATH; this command needs a GPU (verify, collective and sweep can run the cost model instead: --backend model)",
        ));
    }
    if let Some(d) = driver_api_version() {
        requirements::check_driver(d, super::device::driver_version().as_deref()).map_err(usage)?;
    }
    if std::env::var_os(REEXEC_MARK).is_some() {
        return check_loaded_nccl();
    }
    let nccl = find_nccl(nccl_explicit)?;
    if nccl.is_none() && !nccl_loadable_by_default() {
        return Err(usage(nccl_missing_message()));
    }
    let sel = nvrtc_selection();
    // The chosen NVRTC needs a link only when the loader would take another one.
    let nvrtc = sel
        .chosen
        .as_ref()
        .filter(|c| sel.candidates.first().map(|f| &f.path) != Some(&c.path))
        .map(|c| Found {
            path: PathBuf::from(&c.path),
            how: c.how.clone(),
        });
    if nccl.is_none() && nvrtc.is_none() {
        return check_loaded_nccl();
    }
    let mut links = vec![];
    if let Some(f) = &nccl {
        links.push(("libnccl.so", f));
    }
    if let Some(f) = &nvrtc {
        links.push(("libnvrtc.so", f));
    }
    let targets: Vec<PathBuf> = links
        .iter()
        .map(|(_, f)| std::fs::canonicalize(&f.path).unwrap_or(f.path.clone()))
        .collect();
    let dir = link_dir(&targets);
    std::fs::create_dir_all(&dir)?;
    let mut path_dirs = vec![dir.clone()];
    for ((name, _), target) in links.iter().zip(&targets) {
        let link = dir.join(name);
        if std::fs::read_link(&link).ok().as_ref() != Some(target) {
            // a link made under another name, then renamed: another run creating the same
            // folder at the same time never sees a half-made link
            let tmp = dir.join(format!(".{name}.{}", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(target, &tmp)?;
            std::fs::rename(&tmp, &link)?;
        }
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
        .env(REEXEC_MARK, &dir)
        .env(NVRTC_WHY, &sel.why)
        .exec();
    Err(anyhow::anyhow!(
        "re-executing with the NCCL library path failed: {err}"
    ))
}

/// The folder of links for one set of library targets: one per user and set (the same run
/// again reuses it), not one per run.
fn link_dir(targets: &[PathBuf]) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    targets.hash(&mut h);
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir().join(format!("verifybench-libs-{uid}-{:016x}", h.finish()))
}

/// The NCCL the loader finds is present and new enough.
fn check_loaded_nccl() -> anyhow::Result<()> {
    if !nccl_loadable_by_default() {
        return Err(usage(nccl_missing_message()));
    }
    requirements::check_nccl(super::nccl::version_number()).map_err(usage)
}

fn nccl_missing_message() -> String {
    "no NCCL library found (searched: libnccl.so by the loader's path, libnccl.so.2 on \
     LD_LIBRARY_PATH, system folders, CUDA toolkits and Python's nvidia/nccl/lib): install NCCL, \
     or point to it with --nccl-lib PATH (a libnccl.so* file or its folder); verify, collective and sweep can run the cost model instead (--backend model)"
        .into()
}

/// Whether a file name is the library `stem` itself (`libnccl.so`, `libnccl.so.2.28.3`), not
/// another library whose name starts the same (NCCL's plugins `libnccl-net.so`,
/// `libnccl-tuner.so`; NVRTC's `libnvrtc-builtins.so`).
fn is_library_file(file_name: &str, stem: &str) -> bool {
    file_name
        .strip_prefix(stem)
        .is_some_and(|rest| rest.starts_with(".so"))
}

/// The file a loaded library was mapped from, read from /proc/self/maps: `stem` is the name
/// before `.so` (`libnccl`, `libnvrtc`).
pub(crate) fn loaded_path(stem: &str) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| {
            Path::new(p)
                .file_name()
                .and_then(|f| f.to_str())
                .is_some_and(|f| is_library_file(f, stem))
        })
        .map(|p| {
            std::fs::canonicalize(p)
                .map(|c| c.display().to_string())
                .unwrap_or(p.to_string())
        })
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
    fn a_plugin_is_not_the_library_itself() {
        assert!(is_library_file("libnccl.so", "libnccl"));
        assert!(is_library_file("libnccl.so.2.28.3", "libnccl"));
        assert!(is_library_file("libnvrtc.so.13", "libnvrtc"));
        assert!(!is_library_file("libnccl-net.so", "libnccl"));
        assert!(!is_library_file("libnccl-tuner-example.so", "libnccl"));
        assert!(!is_library_file("libnvrtc-builtins.so.13.0", "libnvrtc"));
        assert!(!is_library_file("libncclx.so", "libnccl"));
    }

    #[test]
    fn explicit_folder_is_searched_for_so_2() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("libnccl.so.2"),
            super::super::elf::fake_nccl(),
        )
        .unwrap();
        let f = find_nccl(Some(d.path())).unwrap().unwrap();
        assert!(f.path.ends_with("libnccl.so.2"));
        assert_eq!(f.how, "--nccl-lib");
    }
}
