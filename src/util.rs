//! Small operating-system helpers every layer may use: host name, time, the NCCL_* environment,
//! /proc stat parsing and writing a file by temp-and-rename. Nothing here knows the record
//! types, the command line or the GPU.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// Current UTC time as RFC 3339.
pub fn now_utc() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// This machine's host name.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "unknown".into())
}

/// The NCCL_* variables of this process's environment.
pub fn nccl_env() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| k.starts_with("NCCL_"))
        .collect()
}

/// Writes `bytes` to `path` atomically enough for results: a temporary file, fsync, rename.
pub fn write_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use anyhow::Context;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating directory '{}'", dir.display()))?;
    }
    let tmp = path.with_extension(format!(
        "{}.tmp{}",
        path.extension().and_then(|e| e.to_str()).unwrap_or(""),
        std::process::id()
    ));
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("cannot write '{}'", tmp.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write '{}'", path.display()))?;
    Ok(())
}
