//! Small helpers every layer may use: host name, time, the NCCL_* environment, the files a
//! command reads and writes ([`files`]: checked before any work, written by temp-and-rename or
//! in place), and [`Named`] enums (one name per value, parsed back by `FromStr`).
//! Nothing here knows the record types, the command line or the GPU. (Parsers of /proc files
//! live with their user, [`crate::inspect::procfs`].)

use std::collections::BTreeMap;
use std::path::Path;

mod files;
pub use files::write_file;
pub(crate) use files::{identity, Files, Identity};

pub(crate) mod read;

/// The serde default of a count that is 1 when a record or file leaves it out.
pub(crate) fn one() -> u64 {
    1
}

/// Current UTC time as RFC 3339.
pub fn now_utc() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// This machine's host name.
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "unknown".into())
}

/// Text that came from outside the program (a peer's message, a name it claims) as it may be
/// printed on one line of a terminal or a log: control characters and the invisible characters
/// that reorder or hide text (bidirectional overrides, zero-width ones) written as escapes (`\n`,
/// `\t`, `\r`, else `\u{1b}`), everything else as it is, and cut after `max` characters with the
/// length of the whole. The one escaping function for such text: escaping escaped text again
/// changes nothing (below the cut).
pub(crate) fn escaped(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max.saturating_add(32)));
    for (n, c) in text.chars().enumerate() {
        if n == max {
            out.push_str(&format!("... ({} bytes in all)", text.len()));
            break;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if hides_text(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Control characters, and the format characters that change how the text around them shows
/// (soft hyphen, Arabic letter mark, zero-width ones, bidirectional embeddings, overrides and
/// isolates, word joiners, the byte-order mark).
fn hides_text(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{ad}'
                | '\u{61c}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2060}'..='\u{206f}'
                | '\u{feff}'
        )
}

/// The NCCL_* variables of this process's environment.
pub(crate) fn nccl_env() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| k.starts_with("NCCL_"))
        .collect()
}

/// This process's file-mode creation mask, read from /proc/self/status (Linux 4.7+); where that
/// cannot be read, 0o022, the common default.
pub fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

/// A number as a person reads it in a message: plain below 1e15 (`12.5`, `0`), else in
/// scientific notation (`1e308`, not 309 digits).
pub(crate) fn fmt_number(v: f64) -> String {
    if v.is_finite() && v.abs() >= 1e15 {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// Why a JSON text could not be read, in the user's words: a file that ends early is called
/// truncated with where it ends; a syntax error says where; a value of the wrong shape says
/// what JSON was expected, without the names of this program's types ("expected struct X"
/// becomes "expected a JSON object").
pub(crate) fn json_problem(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let (line, col) = (e.line(), e.column());
    match e.classify() {
        Category::Eof => format!(
            "truncated: its JSON ends early, at line {line} column {col} (the end of the file; cut short, or copied while being written)"
        ),
        Category::Syntax => format!("not JSON: {}", plain_serde_message(&e.to_string())),
        Category::Data => format!(
            "not the expected JSON: {}",
            plain_serde_message(&e.to_string())
        ),
        Category::Io => format!("cannot be read: {e}"),
    }
}

/// serde's message with the program's type names replaced by JSON terms.
fn plain_serde_message(m: &str) -> String {
    let m = m
        .replace("a sequence", "an array")
        .replace("a map", "an object");
    let mut out = String::with_capacity(m.len());
    let mut words = m.split(' ').peekable();
    let mut first = true;
    while let Some(w) = words.next() {
        if !first {
            out.push(' ');
        }
        first = false;
        match w {
            "struct" | "enum" | "tuple" => {
                // the type name follows: "struct ScheduleFile", "enum Phase", "tuple struct X"
                let kind = if w == "enum" {
                    "one of the accepted names"
                } else {
                    "a JSON object"
                };
                if w == "tuple" && words.peek() == Some(&"struct") {
                    words.next();
                }
                let name = words.next().unwrap_or("");
                let tail: String = name
                    .trim_start_matches(|c: char| c.is_alphanumeric() || c == '_')
                    .to_string();
                out.push_str(kind);
                out.push_str(&tail);
            }
            "sequence," | "sequence" => out.push_str(&w.replace("sequence", "an array")),
            "map," | "map" => out.push_str(&w.replace("map", "an object")),
            _ => out.push_str(w),
        }
    }
    out
}

/// The text of a file the user gave as `what` ("model config", "results file"), at most
/// `limit` ([`read::read`]). A refusal is one line that names the file, says what it is and
/// what to give instead (`give`): a file that cannot be read, one that is no regular file or
/// is larger than its limit, an empty one, a gzip-compressed one, one that is not UTF-8 text.
pub(crate) fn read_text(
    path: &Path,
    what: &str,
    give: &str,
    limit: read::Limit,
) -> anyhow::Result<String> {
    let bytes = read::read(path, what, limit)?;
    let p = path.display();
    if bytes.is_empty() {
        crate::usage_bail!("{what} '{p}' is empty (0 bytes): give {give}");
    }
    if bytes.starts_with(&[0x1f, 0x8b]) {
        crate::usage_bail!(
            "{what} '{p}' is gzip-compressed: decompress it (gunzip) and give {give}"
        );
    }
    String::from_utf8(bytes).map_err(|e| {
        crate::error::usage(format!(
            "{what} '{p}' is not text (byte {} is not UTF-8: a binary or compressed file?): give {give}",
            e.utf8_error().valid_up_to() + 1
        ))
    })
}

/// Whether the first bytes of a file (decompressed) open a JSON document rather than a log,
/// decided by content, not by the first byte alone: one detector for every reader that takes
/// either (traces and NCCL logs in `trace`, `explain --nccl-log`). A document opens with `{`,
/// or with `[` followed by what may begin a trace's element (`{`, `[`, `]`, `"`). Launchers
/// put their own tag before every line of a log and some of them open with a bracket too:
/// torchrun `[rank0]:` and `[default0]:`, mpirun `[1,0]<stdout>:`, a bracketed timestamp
/// `[2024-05-01 12:00:00]`; a bracket followed by a letter or a digit is such a tag. Others
/// (`0: ` of srun, `rank0: `, `(RayWorkerWrapper pid=...)`, a bare timestamp) open with no
/// bracket at all. A UTF-8 byte-order mark and blanks before the document do not count.
pub(crate) fn looks_like_json(head: &[u8]) -> bool {
    let head = head.strip_prefix(&[0xef, 0xbb, 0xbf]).unwrap_or(head);
    let mut it = head.iter().copied().filter(|b| !b.is_ascii_whitespace());
    match it.next() {
        Some(b'{') => true,
        Some(b'[') => matches!(it.next(), None | Some(b'{' | b'[' | b']' | b'"')),
        _ => false,
    }
}

/// The next value in [0, 1) of a seeded generator (Knuth's MMIX linear congruence, 53 bits):
/// the FAKE numbers of the mock backend and of the sweep's `--debug-mode`, the same for a seed.
pub(crate) fn next_unit(state: &mut u64) -> f64 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (*state >> 11) as f64 / (1u64 << 53) as f64
}

/// The folder `path` lives in (`.` for a bare file name).
pub(crate) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// An enum with a fixed set of command-line names (the `name()` printed in records, tables and
/// child command lines, and parsed back by `FromStr`). [`crate::named_enum!`] implements it.
pub(crate) trait Named: Copy + Sized + Send + Sync + 'static {
    /// The values a user may give, in the order `--help` lists them.
    const ALL: &'static [Self];
    /// The name of this value.
    fn name(self) -> &'static str;
    /// One line describing this value (for `--help`; may be empty).
    fn help(self) -> &'static str;
}

/// Parses `s` as one of `T::ALL` by name; the error lists the accepted names.
pub(crate) fn parse_named<T: Named>(s: &str) -> Result<T, String> {
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
/// Values after `hidden` have a name but are left out of `ALL` (never offered by `--help`).
#[macro_export]
macro_rules! named_enum {
    ($t:ident { $($v:ident => $n:literal : $h:literal),+ $(,)? }
     $(hidden { $($hv:ident => $hn:literal : $hh:literal),+ $(,)? })?) => {
        impl $crate::util::Named for $t {
            const ALL: &'static [Self] = &[$($t::$v),+];
            fn name(self) -> &'static str {
                match self { $($t::$v => $n,)+ $($($t::$hv => $hn,)+)? }
            }
            fn help(self) -> &'static str {
                match self { $($t::$v => $h,)+ $($($t::$hv => $hh,)+)? }
            }
        }
        impl $t {
            /// The command-line name of this value.
            pub(crate) fn name(self) -> &'static str {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_numbers_are_short() {
        assert_eq!(fmt_number(1e308), "1e308");
        assert_eq!(fmt_number(-2.5e20), "-2.5e20");
        assert_eq!(fmt_number(12.5), "12.5");
        assert_eq!(fmt_number(0.0), "0");
        assert_eq!(fmt_number(f64::NAN), "NaN");
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Thing {
        a: u32,
    }

    #[test]
    fn json_problems_speak_json_not_rust() {
        let eof = serde_json::from_str::<Thing>("{\"a\": ").unwrap_err();
        let m = json_problem(&eof);
        assert!(
            m.starts_with("truncated") && m.contains("line 1 column 6"),
            "{m}"
        );
        let shape = serde_json::from_str::<Thing>("true").unwrap_err();
        let m = json_problem(&shape);
        assert!(
            m.contains("invalid type: boolean `true`, expected a JSON object")
                && !m.contains("Thing"),
            "{m}"
        );
        let seq = serde_json::from_str::<Vec<u32>>("{}").unwrap_err();
        let m = json_problem(&seq);
        assert!(
            m.contains("invalid type: an object, expected an array"),
            "{m}"
        );
        let syn = serde_json::from_str::<Thing>("{a}").unwrap_err();
        assert!(json_problem(&syn).starts_with("not JSON: key must be a string"));
    }

    #[test]
    fn json_is_told_from_logs_by_content() {
        for json in [
            "{\"traceEvents\": []}",
            "  \n[{\"ph\": \"X\"}]",
            "[\n  {\"ph\": \"X\"}",
            "[]",
            "[",
            "\u{feff}{\"a\": 1}",
        ] {
            assert!(looks_like_json(json.as_bytes()), "{json:?}");
        }
        let coll = "hopper01:191369:191420 [0] NCCL INFO AllReduce: opCount 0";
        for prefix in [
            "[rank0]:",
            "[default0]:",
            "[1,0]<stdout>:",
            "[2024-05-01 12:00:00] ",
            "0: ",
            "rank0: ",
            "(RayWorkerWrapper pid=4121) ",
            "2024-05-01 12:00:00.123 ",
            "",
        ] {
            let line = format!("{prefix}{coll}\n");
            assert!(!looks_like_json(line.as_bytes()), "{prefix:?}");
        }
        assert!(!looks_like_json(b""));
    }

    #[test]
    fn text_from_outside_prints_on_one_line_and_escaping_twice_changes_nothing() {
        // ESC [ 2 J clears a terminal; U+202E turns the rest of the line around
        let evil = "host\u{1b}[2J\nverifybench: rank 1 joined\u{202e}kcatta\t\u{0}";
        let e = escaped(evil, 1000);
        assert_eq!(
            e,
            "host\\u{1b}[2J\\nverifybench: rank 1 joined\\u{202e}kcatta\\t\\u{0}"
        );
        assert!(!e.chars().any(hides_text), "{e}");
        assert_eq!(escaped(&e, 1000), e);
        // plain text, quotes, backslashes and other scripts pass as they are
        for plain in ["node-1.cluster", "it's \"here\" \\ there", "Grüße, 東京"] {
            assert_eq!(escaped(plain, 1000), plain);
        }
        // cut after `max` characters, with the length of the whole in bytes (4, and 2 of "é")
        assert_eq!(escaped("abcdé", 2), "ab... (6 bytes in all)");
        assert_eq!(escaped("abcdé", 5), "abcdé");
    }

    #[test]
    fn written_files_take_0666_less_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.txt");
        write_file(&p, b"x").unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o666 & !umask());
    }
}
