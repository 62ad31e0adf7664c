//! NVRTC compilation of the CUDA sources in `kernels/`, and the list of every one of them, so
//! that one check (`cargo test -- --ignored nvrtc`, run by CI with pip's NVRTC) compiles them all
//! without a GPU and a compile error never first shows up on the GPU machine.

use crate::error::usage;

/// `kernels/stream.cu`: the weight-streaming stand-in for a rank's compute.
pub const STREAM_SRC: &str = include_str!("../../kernels/stream.cu");
/// `kernels/allreduce.cu`: the one-shot and two-shot P2P all-reduces.
pub const ALLREDUCE_SRC: &str = include_str!("../../kernels/allreduce.cu");

/// A kernel source file of `kernels/`, embedded in the binary.
pub struct Source {
    pub file: &'static str,
    pub text: &'static str,
}

/// Every file of `kernels/*.cu` (a test checks the folder holds no other).
pub const SOURCES: &[Source] = &[
    Source {
        file: "stream.cu",
        text: STREAM_SRC,
    },
    Source {
        file: "allreduce.cu",
        text: ALLREDUCE_SRC,
    },
];

/// The virtual architecture NVRTC compiles for on a device of compute capability
/// `major.minor`. NVRTC takes a 'static string, so the few architectures are spelled out;
/// CUDA 13's NVRTC knows nothing older than compute_75.
pub fn arch(major: i32, minor: i32) -> &'static str {
    match (major, minor) {
        (12, _) => "compute_120",
        (10, _) => "compute_100",
        (9, _) => "compute_90",
        (8, 9) => "compute_89",
        (8, 6) => "compute_86",
        (8, _) => "compute_80",
        _ => "compute_75",
    }
}

/// Compiles `src` (named `file` in messages) for `arch` with the project's options; a compile
/// error carries NVRTC's log.
pub fn compile(file: &str, src: &str, arch: &'static str) -> anyhow::Result<cudarc::nvrtc::Ptx> {
    if !super::libs::nvrtc_present() {
        return Err(usage(format!(
            "NVRTC (libnvrtc.so) not found: it compiles kernels/{file}. Install the CUDA toolkit's NVRTC or pip's nvidia-cuda-nvrtc, or put its folder on LD_LIBRARY_PATH"
        )));
    }
    let opts = cudarc::nvrtc::CompileOptions {
        arch: Some(arch),
        options: vec!["--std=c++17".into()],
        name: Some(file.into()),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(src, opts).map_err(|e| match e {
        cudarc::nvrtc::CompileError::CompileError { log, .. } => anyhow::anyhow!(
            "NVRTC could not compile kernels/{file} for {arch}:\n{}",
            log.to_string_lossy()
        ),
        other => anyhow::anyhow!("NVRTC could not compile kernels/{file} for {arch}: {other:?}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn architectures_nvrtc_13_accepts() {
        assert_eq!(arch(9, 0), "compute_90");
        assert_eq!(arch(8, 6), "compute_86");
        assert_eq!(arch(7, 0), "compute_75");
    }

    /// Compiles every kernel file for sm_90 through the same path the GPU code uses. Needs
    /// libnvrtc (no GPU): CI installs pip's nvidia-cuda-nvrtc and runs it by name; without the
    /// library it fails rather than passing unchecked.
    #[test]
    #[ignore = "needs libnvrtc"]
    fn nvrtc_compiles_every_kernel_file() {
        assert!(
            crate::comm::libs::nvrtc_present(),
            "libnvrtc is not loadable: put its folder on LD_LIBRARY_PATH"
        );
        let mut failed = vec![];
        for s in SOURCES {
            match compile(s.file, s.text, "compute_90") {
                Ok(ptx) => assert!(
                    ptx.to_src().contains(".entry"),
                    "{}: PTX without a kernel entry",
                    s.file
                ),
                Err(e) => failed.push(format!("{e:#}")),
            }
        }
        assert!(failed.is_empty(), "{}", failed.join("\n"));
    }
}
