//! Small helpers every layer may use: host name, time, the NCCL_* environment, writing a file
//! by temp-and-rename, and [`Named`] enums (one name per value, parsed back by `FromStr`).
//! Nothing here knows the record types, the command line or the GPU. (Parsers of /proc files
//! live with their user, [`crate::inspect::procfs`].)

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

/// An enum with a fixed set of command-line names (the `name()` printed in records, tables and
/// child command lines, and parsed back by `FromStr`). [`crate::named_enum!`] implements it.
pub trait Named: Copy + Sized + Send + Sync + 'static {
    /// The values a user may give, in the order `--help` lists them.
    const ALL: &'static [Self];
    /// The name of this value.
    fn name(self) -> &'static str;
    /// One line describing this value (for `--help`; may be empty).
    fn help(self) -> &'static str;
}

/// Parses `s` as one of `T::ALL` by name; the error lists the accepted names.
pub fn parse_named<T: Named>(s: &str) -> Result<T, String> {
    T::ALL
        .iter()
        .copied()
        .find(|v| v.name() == s)
        .ok_or_else(|| {
            let names: Vec<&str> = T::ALL.iter().map(|v| v.name()).collect();
            format!("'{s}' is not one of: {}", names.join(", "))
        })
}

/// Implements [`Named`], an inherent `name()` and `FromStr` for a field-less enum:
/// `named_enum!(Routing { Uniform => "uniform": "help line", Worst => "worst": "..." })`.
#[macro_export]
macro_rules! named_enum {
    ($t:ident { $($v:ident => $n:literal : $h:literal),+ $(,)? }) => {
        impl $crate::util::Named for $t {
            const ALL: &'static [Self] = &[$($t::$v),+];
            fn name(self) -> &'static str {
                match self { $($t::$v => $n),+ }
            }
            fn help(self) -> &'static str {
                match self { $($t::$v => $h),+ }
            }
        }
        impl $t {
            /// The command-line name of this value.
            pub fn name(self) -> &'static str {
                <$t as $crate::util::Named>::name(self)
            }
        }
        impl std::str::FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                $crate::util::parse_named(s)
            }
        }
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}
