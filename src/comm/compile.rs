//! NVRTC compilation of the CUDA sources in `kernels/`; its tests list every one of them, so
//! that one check (`cargo test -- --ignored nvrtc`, run by CI with pip's NVRTC) compiles them all
//! without a GPU and a compile error never first shows up on the GPU machine.

use crate::error::usage;

/// `kernels/stream.cu`: the weight-streaming stand-in for a rank's compute.
pub(crate) const STREAM_SRC: &str = include_str!("../../kernels/stream.cu");
/// `kernels/stream_mma.cu`: the weight streaming on the tensor cores, for many tokens.
pub(crate) const STREAM_MMA_SRC: &str = include_str!("../../kernels/stream_mma.cu");
/// `kernels/allreduce.cu`: the one-shot and two-shot P2P all-reduces.
pub(crate) const ALLREDUCE_SRC: &str = include_str!("../../kernels/allreduce.cu");

/// The virtual architecture NVRTC compiles for on a device of compute capability
/// `major.minor`: the newest baseline architecture (no `a`/`f` suffix, so the PTX JIT-compiles
/// forward) at or below the device that NVRTC 12.8 and 13.x both know. NVRTC takes a 'static
/// string, so the few architectures are spelled out. CC 11.x (Thor) gets compute_100: NVRTC
/// 12.8/12.9 call it compute_101, 13.x compute_110, and compute_100 PTX runs on it either way.
/// Below 7.5 nothing fits: NVRTC 13 knows nothing older than compute_75.
pub(crate) fn arch(major: i32, minor: i32) -> anyhow::Result<&'static str> {
    Ok(match (major, minor) {
        (m, _) if m >= 12 => "compute_120",
        (10 | 11, _) => "compute_100",
        (9, _) => "compute_90",
        (8, 9) => "compute_89",
        (8, 7) => "compute_87",
        (8, 6) => "compute_86",
        (8, _) => "compute_80",
        (7, m) if m >= 5 => "compute_75",
        _ => {
            return Err(usage(format!(
                "a GPU of compute capability {major}.{minor}: the kernels of kernels/ need 7.5 or newer (the oldest architecture NVRTC 13 compiles for)"
            )))
        }
    })
}

/// Whether PTX for `arch` has `griddepcontrol` (PTX ISA 7.8 for sm_90 and newer), which the
/// programmatic-dependent-launch kernels wait with: below compute_90 `#if __CUDA_ARCH__ >= 900`
/// compiles the wait away, and a launch serialized for PDL would then race on its inputs.
pub(crate) fn has_griddepcontrol(arch: &str) -> bool {
    arch.trim_start_matches("compute_")
        .trim_end_matches(['a', 'f'])
        .parse::<u32>()
        .is_ok_and(|n| n >= 90)
}

/// Refuses programmatic dependent launch for a PTX target without `griddepcontrol`.
pub(crate) fn check_pdl(arch: &str, what: &str) -> anyhow::Result<()> {
    if has_griddepcontrol(arch) {
        return Ok(());
    }
    Err(usage(format!(
        "--pdl: programmatic dependent launch needs PTX with griddepcontrol (compute_90 and newer); {what} compiles for {arch}: leave --pdl off"
    )))
}

/// Compiles `src` (named `file` in messages) for `arch` once per process (NVRTC takes about a
/// second per compile, and the virtual-rank checks open the same GPU many times).
pub(crate) fn ptx(
    file: &'static str,
    src: &str,
    arch: &'static str,
) -> anyhow::Result<cudarc::nvrtc::Ptx> {
    ptx_with(file, src, arch, &[])
}

/// [`ptx`] with preprocessor `defines` ("NAME" or "NAME=VALUE", see [`TEST_BUILDS`]), each
/// build compiled once per process.
pub(crate) fn ptx_with(
    file: &'static str,
    src: &str,
    arch: &'static str,
    defines: &'static [&'static str],
) -> anyhow::Result<cudarc::nvrtc::Ptx> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    type Key = (&'static str, &'static str, &'static [&'static str]);
    type Cache = Mutex<HashMap<Key, cudarc::nvrtc::Ptx>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(p) = cache
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&(file, arch, defines))
    {
        return Ok(p.clone());
    }
    super::libs::check_nvrtc_for(arch)?;
    let p = compile_with(file, src, arch, defines)?;
    cache
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert((file, arch, defines), p.clone());
    Ok(p)
}

/// Compiles `src` (named `file` in messages) for `arch` with the project's options and the
/// preprocessor `defines` (each passed to NVRTC as `-D`); a compile error carries NVRTC's log.
pub(crate) fn compile_with(
    file: &str,
    src: &str,
    arch: &'static str,
    defines: &[&str],
) -> anyhow::Result<cudarc::nvrtc::Ptx> {
    if !super::libs::nvrtc_present() {
        return Err(usage(format!(
            "NVRTC (libnvrtc.so) not found: it compiles kernels/{file}. Install the CUDA toolkit's NVRTC or pip's nvidia-cuda-nvrtc, or put its folder on LD_LIBRARY_PATH"
        )));
    }
    let mut options = vec!["--std=c++17".to_string()];
    options.extend(defines.iter().map(|d| format!("-D{d}")));
    let opts = cudarc::nvrtc::CompileOptions {
        arch: Some(arch),
        options,
        name: Some(file.into()),
        ..Default::default()
    };
    let with = if defines.is_empty() {
        String::new()
    } else {
        format!(" with {}", defines.join(" "))
    };
    cudarc::nvrtc::compile_ptx_with_opts(src, opts).map_err(|e| match e {
        cudarc::nvrtc::CompileError::CompileError { log, .. } => anyhow::anyhow!(
            "NVRTC could not compile kernels/{file}{with} for {arch}:\n{}",
            log.to_string_lossy()
        ),
        other => {
            anyhow::anyhow!("NVRTC could not compile kernels/{file}{with} for {arch}: {other:?}")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel source file of `kernels/`, embedded in the binary.
    struct KernelSource {
        file: &'static str,
        text: &'static str,
    }

    /// Every file of `kernels/*.cu` (a test checks the folder holds no other).
    const SOURCES: &[KernelSource] = &[
        KernelSource {
            file: "stream.cu",
            text: STREAM_SRC,
        },
        KernelSource {
            file: "stream_mma.cu",
            text: STREAM_MMA_SRC,
        },
        KernelSource {
            file: "allreduce.cu",
            text: ALLREDUCE_SRC,
        },
    ];

    /// Test-only builds of a kernel file (a preprocessor define passed to NVRTC), compiled
    /// only by `selftest`; CI compiles them with the files. `allreduce.cu` with `P2P_SELFTEST`
    /// adds the stress test's support kernels, with `P2P_JITTER` its read-phase pauses; with
    /// `P2P_FAULT=1` and `P2P_FAULT=2` it is the stress test's negative controls (see the top
    /// of the file).
    const TEST_BUILDS: &[(&str, &[&str])] = &[
        ("allreduce.cu", &["P2P_SELFTEST"]),
        ("allreduce.cu", &["P2P_JITTER"]),
        ("allreduce.cu", &["P2P_FAULT=1"]),
        ("allreduce.cu", &["P2P_FAULT=2"]),
    ];

    /// The targets CI compiles every kernel for: Hopper, datacenter Blackwell, and the users'
    /// RTX PRO 6000 (sm_120).
    const CI_TARGETS: &[&str] = &["compute_90", "compute_100", "compute_120"];

    #[test]
    fn every_kernel_file_is_listed() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".cu"))
            .collect();
        on_disk.sort();
        let mut listed: Vec<String> = SOURCES.iter().map(|s| s.file.to_string()).collect();
        listed.sort();
        assert_eq!(on_disk, listed, "kernels/*.cu and compile::SOURCES differ");
        for s in SOURCES {
            let text = std::fs::read_to_string(dir.join(s.file)).unwrap();
            assert_eq!(text, s.text, "{} is not the embedded text", s.file);
        }
    }

    #[test]
    fn architectures_nvrtc_12_8_and_13_accept() {
        assert_eq!(arch(9, 0).unwrap(), "compute_90");
        assert_eq!(arch(8, 6).unwrap(), "compute_86");
        assert_eq!(arch(7, 5).unwrap(), "compute_75");
        assert_eq!(arch(12, 0).unwrap(), "compute_120");
        assert_eq!(arch(10, 3).unwrap(), "compute_100");
        // Thor (11.0): compute_100 PTX, not the compute_75 that drops griddepcontrol
        assert_eq!(arch(11, 0).unwrap(), "compute_100");
        // V100 (7.0) cannot run compute_75 PTX: refused rather than mis-compiled
        let e = arch(7, 0).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("7.5 or newer"), "{e}");
    }

    #[test]
    fn pdl_only_where_the_ptx_target_has_griddepcontrol() {
        for a in ["compute_90", "compute_100", "compute_120", "compute_90a"] {
            assert!(has_griddepcontrol(a), "{a}");
            check_pdl(a, "GPU 0").unwrap();
        }
        for a in [
            "compute_75",
            "compute_80",
            "compute_86",
            "compute_89",
            "bogus",
        ] {
            assert!(!has_griddepcontrol(a), "{a}");
            let e = check_pdl(a, "GPU 0").unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2);
            assert!(e.to_string().contains(&format!("compiles for {a}")), "{e}");
        }
        // every compute capability from 9.0 up maps to a target with griddepcontrol, every
        // one below to one without (so --pdl is refused there)
        for (ma, mi) in [(9, 0), (10, 0), (10, 3), (11, 0), (12, 0), (12, 1)] {
            assert!(has_griddepcontrol(arch(ma, mi).unwrap()), "{ma}.{mi}");
        }
        for (ma, mi) in [(7, 5), (8, 0), (8, 6), (8, 7), (8, 9)] {
            assert!(!has_griddepcontrol(arch(ma, mi).unwrap()), "{ma}.{mi}");
        }
    }

    /// Compiles every kernel file for every target of [`CI_TARGETS`] through the same path the
    /// GPU code uses, and prints the NVRTC version and each target compiled (CI shows these
    /// lines). Needs libnvrtc (no GPU): CI installs pip's nvidia-cuda-nvrtc wheels and runs it
    /// by name once per wheel; without the library it fails rather than passing unchecked.
    #[test]
    #[ignore = "needs libnvrtc"]
    fn nvrtc_compiles_every_kernel_file() {
        assert!(
            crate::comm::libs::nvrtc_present(),
            "libnvrtc is not loadable: put its folder on LD_LIBRARY_PATH"
        );
        let version = crate::comm::kernels::nvrtc_version().expect("nvrtcVersion");
        let mut failed = vec![];
        for arch in CI_TARGETS {
            for s in SOURCES {
                match compile_with(s.file, s.text, arch, &[]) {
                    Ok(ptx) => {
                        let src = ptx.to_src();
                        assert!(
                            src.contains(".entry"),
                            "{}: PTX without a kernel entry",
                            s.file
                        );
                        let target = format!(".target sm_{}", arch.trim_start_matches("compute_"));
                        assert!(
                            src.contains(&target),
                            "{} for {arch}: no '{target}'",
                            s.file
                        );
                        // the PDL kernels keep their wait on every CI target (all >= compute_90)
                        if s.text.contains("griddepcontrol") {
                            assert!(src.contains("griddepcontrol.wait"), "{} for {arch}", s.file);
                        }
                        println!("NVRTC {version}: kernels/{} compiles for {arch}", s.file);
                    }
                    Err(e) => failed.push(format!("{e:#}")),
                }
            }
            for (file, defines) in TEST_BUILDS {
                let s = SOURCES
                    .iter()
                    .find(|s| s.file == *file)
                    .expect("a listed file");
                match compile_with(s.file, s.text, arch, defines) {
                    Ok(ptx) => {
                        let src = ptx.to_src();
                        // each test build has the kernels the selftest loads from it
                        let want: &[&str] = if defines.contains(&"P2P_SELFTEST") {
                            &[
                                "stress_fill_bf16",
                                "stress_check_f32",
                                "stress_delay",
                                "stress_advance",
                            ]
                        } else {
                            &["oneshot_bf16", "twoshot_f32", "p2p_barrier"]
                        };
                        for k in want {
                            assert!(
                                src.contains(&format!(".entry {k}")),
                                "{file} {defines:?}: no {k}"
                            );
                        }
                        println!(
                            "NVRTC {version}: kernels/{file} with {} compiles for {arch}",
                            defines.join(" ")
                        );
                    }
                    Err(e) => failed.push(format!("{e:#}")),
                }
            }
        }
        assert!(failed.is_empty(), "{}", failed.join("\n"));
    }
}
