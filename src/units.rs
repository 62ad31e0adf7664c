//! Sizes with K/M/G suffixes (powers of 1024, as nccl-tests reads them) and their display.

use crate::error::usage;

/// Parses `43008`, `8K`, `1M`, `2G`, `64KB`, `1MiB` into bytes (K = 1024).
pub(crate) fn parse_size(s: &str) -> anyhow::Result<u64> {
    let t = s.trim();
    let upper = t.to_ascii_uppercase();
    let stripped = upper
        .strip_suffix("IB")
        .or_else(|| upper.strip_suffix('B'))
        .unwrap_or(&upper);
    let (num, mult) = match stripped.chars().last() {
        Some('K') => (&stripped[..stripped.len() - 1], 1u64 << 10),
        Some('M') => (&stripped[..stripped.len() - 1], 1u64 << 20),
        Some('G') => (&stripped[..stripped.len() - 1], 1u64 << 30),
        _ => (stripped, 1u64),
    };
    let n: u64 = num.trim().parse().map_err(|_| {
        usage(format!(
            "'{s}' is not a size: use a whole number of bytes with an optional K, M or G suffix (e.g. 43008, 8K, 1M)"
        ))
    })?;
    n.checked_mul(mult)
        .ok_or_else(|| usage(format!("size '{s}' is too large")))
}

/// Formats bytes the way a person reads them: `43008` -> `42.0 KiB`.
pub(crate) fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

/// Thousands separators for byte counts in tables: `43008` -> `43,008`.
pub(crate) fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_like_nccl_tests() {
        assert_eq!(parse_size("43008").unwrap(), 43008);
        assert_eq!(parse_size("8K").unwrap(), 8192);
        assert_eq!(parse_size("8k").unwrap(), 8192);
        assert_eq!(parse_size("1M").unwrap(), 1 << 20);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_size("64KB").unwrap(), 65536);
        assert_eq!(parse_size("1MiB").unwrap(), 1 << 20);
        assert!(parse_size("abc").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("-1K").is_err());
    }

    #[test]
    fn human_and_grouped() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(43008), "42.0 KiB");
        assert_eq!(grouped(43008), "43,008");
        assert_eq!(grouped(983040), "983,040");
        assert_eq!(grouped(7), "7");
    }
}
