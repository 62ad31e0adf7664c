//! The evidence every view reads, each file read once and every figure labelled with where it
//! came from: the one provenance vocabulary ([`Source`], with the flag, file or inputs beside
//! it in [`Origin`]). The server's log, SGLang's ([`sglang`]) or vLLM's ([`vllm`]), each format
//! parsed in one file and read once ([`server_log`]); NCCL logs as text, for the known traps.
//! `trace` builds on this layer (the traps table beside its analysis), and `speculative`,
//! `explain`, `report` and the commands take their inputs from here.

pub mod provenance;
pub mod records;
pub mod server_log;
pub mod sglang;
pub mod vllm;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use regex::Regex;
use serde::Serialize;

use crate::error::usage;
pub use provenance::{Labelled, Origin, Source};
pub use records::{read_verify_files, times_of, RecordTime};
pub use server_log::{read_accept_log, read_server_log, ServerLog};

/// The file name a label shows (the last path component).
pub fn short_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// The number that `pattern`'s first group captures in `line` (the pattern compiled once, in
/// `cell`).
fn captured(cell: &'static OnceLock<Regex>, pattern: &str, line: &str) -> Option<f64> {
    let re = cell.get_or_init(|| Regex::new(pattern).expect("valid regex"));
    re.captures(line).and_then(|c| c[1].parse::<f64>().ok())
}

/// One NCCL log as text (INIT, GRAPH, ENV or COLL lines).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NcclLogText {
    pub name: String,
    #[serde(skip)]
    pub text: String,
}

/// Reads `--nccl-log` files; one without any `NCCL` line is a usage error.
pub fn read_nccl_logs(paths: &[PathBuf]) -> anyhow::Result<Vec<NcclLogText>> {
    paths
        .iter()
        .map(|p| {
            let bytes = std::fs::read(p).map_err(|e| {
                usage(format!("--nccl-log '{}': cannot read: {e}", p.display()))
            })?;
            let text = String::from_utf8_lossy(&bytes).into_owned();
            if !text.contains("NCCL") {
                crate::usage_bail!(
                    "--nccl-log '{}': no NCCL line in it; give a log written with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV)",
                    p.display()
                );
            }
            Ok(NcclLogText {
                name: short_name(p),
                text,
            })
        })
        .collect()
}
