//! What `model fit --nccl-tests` checks around the fit: the base profile taken from the tables
//! when none is given (PCIe or NVLink from their bandwidth, P2P from NCCL's log lines), every
//! row against what the link can carry, and whether a table covers the sizes of the verify and
//! was printed whole.

use super::Table;
use crate::costmodel::predict::nccl_size;
use crate::costmodel::profile::{
    self, Profile, NVLINK4_RATE_GBPS, PCIE3_X16_RATE_GBPS, PCIE4_X16_RATE_GBPS, PCIE5_X16_RATE_GBPS,
};
use crate::model::CollectiveKind;
use crate::nccl_tests::NcclTestsRun;

/// At most this share of a PCIe link's rate reaches NCCL as bus bandwidth: a packet carries at
/// most 256 B of data behind ~24 B of header, sequence number, CRC and framing, and flow
/// control takes a few percent more (256 / 280 x ~0.97 = 0.89); the public 8x RTX 5090 host
/// (tests/data/public-nccl/S01) moves 55.6 of PCIe 5.0 x16's 63 GB/s peer to peer (0.88).
pub(crate) const PCIE_DATA_SHARE: f64 = 0.88;

/// Room for measurement noise in the row check: nccl-tests prints the mean time of its timed
/// iterations to 4 significant digits, and the link rates are rounded (PCIe 5.0 x16 63.0 for
/// 63.02); a row up to 5% past the link's rate is taken as noise, not as an impossible row.
const NOISE_MARGIN: f64 = 0.05;

/// nccl-tests' default largest size (`-e`, 32 MiB, its README), and the size a sweep must
/// reach not to be called short: 1/32 of it. On the public 8x RTX 5090 table 1 MiB reaches
/// 24.6 of its 45.7 GB/s best bus bandwidth, so a table that stops below it has not measured
/// the bandwidth of large messages.
const SHORT_BELOW_BYTES: u64 = (32 << 20) / 32;

/// The PCIe generations (x16) a table is placed on, slowest first: (name, rate GB/s).
const PCIE_X16: [(&str, f64); 3] = [
    ("PCIe 3.0 x16", PCIE3_X16_RATE_GBPS),
    ("PCIe 4.0 x16", PCIE4_X16_RATE_GBPS),
    ("PCIe 5.0 x16", PCIE5_X16_RATE_GBPS),
];

/// The profile a fit starts from, the link rate that bounds it, and why.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct BaseChoice {
    #[serde(skip)]
    pub(crate) profile: Profile,
    /// The base as printed (`pcie-gen5`, `pcie-gen4 at PCIe 3.0 x16 (15.75 GB/s)`).
    pub(crate) name: String,
    /// `--base`, `--base-profile` or `table`.
    pub(crate) from: &'static str,
    /// The link's rate per direction that bounds the fit, GB/s.
    pub(crate) link_rate_gbps: f64,
    pub(crate) reason: String,
}

/// The bus bandwidth a row implies, GB/s: size / time x the collective's bus factor (what
/// nccl-tests prints as busbw, from the out-of-place time the fit uses).
fn busbw_gbps(op: CollectiveKind, n: usize, size: u64, us: f64) -> f64 {
    size as f64 / us / 1e3 * op.bus_factor(n)
}

/// The row of `tables` with the highest bus bandwidth: (GB/s, its description).
fn best_row(tables: &[Table]) -> Option<(f64, String)> {
    tables
        .iter()
        .flat_map(|t| t.points.iter().map(move |p| (t, p)))
        .map(|(t, p)| {
            let size = p.terms[0].size;
            let bw = busbw_gbps(t.op, t.nranks, size, p.measured_us);
            let what = format!(
                "{} {size} B in {} us on {} ranks, {}",
                t.op.name(),
                p.measured_us,
                t.nranks,
                t.label
            );
            (bw, what)
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

/// Peer-to-peer as NCCL's log lines in the tables say: (on, why).
fn p2p_of(tables: &[Table]) -> (bool, String) {
    if tables.iter().any(|t| t.p2p == Some(true)) {
        (true, "P2P, as NCCL's log lines in the table name it".into())
    } else if tables.iter().any(|t| t.p2p == Some(false)) {
        (
            false,
            "no P2P: NCCL's log lines in the table name host-memory or network transports only"
                .into(),
        )
    } else {
        (
            true,
            "P2P taken as on: the table does not say (nccl-tests names the transport only in NCCL's NCCL_DEBUG=INFO lines)".into(),
        )
    }
}

/// The built-in profile for PCIe generation `gen` (index into [`PCIE_X16`]) with or without
/// P2P, named as printed. PCIe 3.0 has no built-in: `pcie-gen4` at 3.0's rate, its P2P read
/// bandwidth halved as 4.0's is of 5.0's.
fn pcie_base(gen: usize, p2p: bool) -> Profile {
    let (gname, rate) = PCIE_X16[gen];
    let builtin = match (gen, p2p) {
        (_, false) => "pcie-gen5-no-p2p",
        (2, true) => "pcie-gen5",
        _ => "pcie-gen4",
    };
    let mut p = profile::builtin(builtin).expect("built in");
    if p.intra.rate_gbps != Some(rate) {
        p.name = format!("{builtin} at {gname} ({rate} GB/s)");
        p.intra.rate_gbps = Some(rate);
        if let Some(l) = p.p2p.as_mut().filter(|l| l.available) {
            l.read_gbps /= 2.0;
        }
    }
    p
}

/// The base of a fit on `tables`: `given` (a profile and where it came from) with its rate or
/// `link_gbps`; else taken from the tables: NVLink where their best bus bandwidth reaches PCIe
/// 5.0 x16's rate, else the slowest PCIe generation whose rate x [`PCIE_DATA_SHARE`] carries
/// it (or the generation `link_gbps` names; PCIe 5.0 where no size reaches
/// [`SHORT_BELOW_BYTES`], too small to show the bandwidth), with or without P2P as NCCL's log
/// lines say.
pub(crate) fn choose_base(
    given: Option<(Profile, String, &'static str)>,
    link_gbps: Option<f64>,
    tables: &[Table],
) -> anyhow::Result<BaseChoice> {
    if let Some((profile, name, from)) = given {
        let Some(rate) = link_gbps.or(profile.intra.rate_gbps) else {
            crate::usage_bail!(
                "the base profile does not know its link's rate: give --link-gbps (PCIe 4.0 x16: 31.5, 5.0 x16: 63)"
            );
        };
        // Where the tables point to another kind of link, say so beside the given base.
        let other = choose_base(None, None, tables)
            .ok()
            .filter(|t| (t.profile.intra.kind == "nvlink") != (profile.intra.kind == "nvlink"))
            .map(|t| format!(" (the table alone gives {}: {})", t.name, t.reason))
            .unwrap_or_default();
        return Ok(BaseChoice {
            reason: format!("{from} given; link rate {rate} GB/s per direction{other}"),
            profile,
            name,
            from,
            link_rate_gbps: rate,
        });
    }
    let (p2p, p2p_why) = p2p_of(tables);
    let nvlink = |why: String, rate: f64| {
        let profile = profile::builtin("nvlink-h200").expect("built in");
        BaseChoice {
            name: profile.name.clone(),
            profile,
            from: "table",
            link_rate_gbps: rate,
            reason: why,
        }
    };
    let pcie = |gen: usize, why: String, rate: f64| {
        let profile = pcie_base(gen, p2p);
        BaseChoice {
            name: profile.name.clone(),
            profile,
            from: "table",
            link_rate_gbps: rate,
            reason: format!("{why}; {p2p_why}"),
        }
    };
    if let Some(r) = link_gbps {
        return Ok(match PCIE_X16.iter().position(|g| r <= g.1) {
            Some(gen) => pcie(
                gen,
                format!(
                    "--link-gbps {r}: a PCIe link, {} ({} GB/s) the slowest generation that carries it",
                    PCIE_X16[gen].0, PCIE_X16[gen].1
                ),
                r,
            ),
            None => nvlink(
                format!("--link-gbps {r}: above PCIe 5.0 x16's {PCIE5_X16_RATE_GBPS} GB/s, an NVLink link"),
                r,
            ),
        });
    }
    let Some((best, what)) = best_row(tables) else {
        crate::usage_bail!("no nccl-tests rows to take the link from: give --base");
    };
    let seen = format!("its best bus bandwidth is {best:.2} GB/s ({what})");
    if best >= PCIE5_X16_RATE_GBPS {
        return Ok(nvlink(
            format!(
                "chosen from the table: {seen}, at or above PCIe 5.0 x16's {PCIE5_X16_RATE_GBPS} GB/s, so an NVLink link ({NVLINK4_RATE_GBPS} GB/s per direction)"
            ),
            NVLINK4_RATE_GBPS,
        ));
    }
    let largest = tables
        .iter()
        .flat_map(|t| t.points.iter().map(|p| p.terms[0].size))
        .max()
        .unwrap_or(0);
    if largest < SHORT_BELOW_BYTES {
        let (gname, rate) = PCIE_X16[PCIE_X16.len() - 1];
        return Ok(pcie(
            PCIE_X16.len() - 1,
            format!(
                "chosen from the table: {seen}, under PCIe 5.0 x16's {PCIE5_X16_RATE_GBPS} GB/s, so a PCIe link; its largest size, {largest} B, is too small to show the link's bandwidth (under {SHORT_BELOW_BYTES} B), so the generation is not known: {gname} ({rate} GB/s), the fastest, bounds the fit (--link-gbps or --base to say)"
            ),
            rate,
        ));
    }
    let need = best / PCIE_DATA_SHARE;
    let gen = PCIE_X16
        .iter()
        .position(|g| need <= g.1)
        .unwrap_or(PCIE_X16.len() - 1);
    let (gname, rate) = PCIE_X16[gen];
    Ok(pcie(
        gen,
        format!(
            "chosen from the table: {seen}, under PCIe 5.0 x16's {PCIE5_X16_RATE_GBPS} GB/s, so a PCIe link; at most {:.0}% of a PCIe link's rate reaches NCCL as bus bandwidth, so it needs {need:.2} GB/s: {gname} ({rate} GB/s) is the slowest generation that carries it",
            PCIE_DATA_SHARE * 100.0
        ),
        rate,
    ))
}

/// Refuses (exit 2) a row that implies more bus bandwidth than the link of `base` at `rate`
/// GB/s per direction carries, with [`NOISE_MARGIN`]. An NVLink all-reduce may reach the rate
/// in algorithm bandwidth (NVLS: the switch reduces, each GPU sends and receives the buffer
/// once), so its ceiling is the rate x the bus factor.
pub(crate) fn check_rows(base: &Profile, rate: f64, tables: &[Table]) -> anyhow::Result<()> {
    let nvlink = base.intra.kind == "nvlink";
    for t in tables {
        let factor = t.op.bus_factor(t.nranks);
        let ceiling = rate
            * (1.0 + NOISE_MARGIN)
            * if nvlink && t.op == CollectiveKind::AllReduce {
                factor.max(1.0)
            } else {
                1.0
            };
        for p in &t.points {
            let size = p.terms[0].size;
            let bw = busbw_gbps(t.op, t.nranks, size, p.measured_us);
            if bw > ceiling {
                crate::usage_bail!(
                    "--nccl-tests {}: {} of {size} B in {} us on {} ranks implies a bus bandwidth of {bw:.1} GB/s, more than the link carries ({rate} GB/s per direction, {}; {ceiling:.1} GB/s with {:.0}% for noise{}): a typo or a failed run, fix or delete the row",
                    t.label,
                    t.op.name(),
                    p.measured_us,
                    t.nranks,
                    base.name,
                    NOISE_MARGIN * 100.0,
                    if ceiling > rate * (1.0 + NOISE_MARGIN) {
                        ", NVLS allowed"
                    } else {
                        ""
                    }
                );
            }
        }
    }
    Ok(())
}

/// Why `r` looks cut short, where it does: its rows stop a step or more before the header's
/// maxBytes, hold fewer rows than the header's sweep, or stop far below nccl-tests' default
/// largest size ([`SHORT_BELOW_BYTES`]).
pub(super) fn cut_of(r: &NcclTestsRun) -> Option<String> {
    let largest = r.rows.iter().map(|x| x.size_bytes).max()?;
    let factor = r.step_factor.unwrap_or(2).max(2);
    if let Some(max) = r.max_bytes.filter(|&m| largest.saturating_mul(factor) <= m) {
        return Some(format!(
            "its rows stop at {largest} B where its header asks for sizes up to {max} B (maxBytes)"
        ));
    }
    if let (Some(min), Some(max), Some(f)) = (r.min_bytes, r.max_bytes, r.step_factor) {
        let (mut want, mut s) = (0usize, min.max(1));
        while s <= max && f >= 2 {
            want += 1;
            s = s.saturating_mul(f);
        }
        if r.rows.len() < want {
            return Some(format!(
                "it holds {} rows where its header's sweep (minBytes {min}, maxBytes {max}, step {f}) gives {want}",
                r.rows.len()
            ));
        }
    }
    (largest < SHORT_BELOW_BYTES).then(|| {
        format!(
            "its largest size is {largest} B, far below nccl-tests' default largest size of 32 MiB (-e): the bandwidth of large messages is not in it"
        )
    })
}

/// The nccl-tests sizes of `op` in the default verify (the command line's defaults: Kimi-K2.5,
/// 3 tokens, bf16) at tensor parallelism `n`; empty where the model does not split `n` ways.
fn verify_sizes(op: CollectiveKind, n: usize) -> Vec<u64> {
    let w = crate::request::Workload::default();
    let Ok(shape) = crate::model::presets::preset(&w.model) else {
        return vec![];
    };
    let Ok(s) = crate::model::build(&shape, &w.options(n as u64), w.phase) else {
        return vec![];
    };
    s.collective_groups()
        .iter()
        .filter(|g| g.kind == op)
        .map(|g| nccl_size(g.kind, g.bytes_per_rank, n))
        .collect()
}

/// One warning per table cut short, and per size of the default verify a table does not
/// reach: the fit then prices those sizes outside the range it was fitted on.
pub(crate) fn warnings(tables: &[Table]) -> Vec<String> {
    let mut out = vec![];
    for t in tables {
        let sizes = t.points.iter().map(|p| p.terms[0].size);
        let (lo, hi) = (sizes.clone().min().unwrap_or(0), sizes.max().unwrap_or(0));
        if let Some(why) = &t.cut {
            out.push(format!(
                "{} looks cut short: {why}; the fit is recorded on {lo}-{hi} B and says so when it prices a size outside",
                t.label
            ));
        }
        for v in verify_sizes(t.op, t.nranks) {
            if !(lo..=hi).contains(&v) {
                out.push(format!(
                    "{} ({} on {} ranks) covers {lo}-{hi} B, not {v} B, the {} of the default verify (kimi-k2.5, 3 tokens, bf16, TP {}): a fit on it prices that size outside its fitted range",
                    t.label,
                    t.op.name(),
                    t.nranks,
                    t.op.name(),
                    t.nranks
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::costmodel::ntfit::tables_of;

    const S01: &str = include_str!("../../../tests/data/public-nccl/S01_aikitoria_8x5090_p2p.txt");
    const S02: &str = include_str!(
        "../../../tests/data/public-nccl/S02_anthonyhoo_2x2080ti_pcie3_switch_nop2p.txt"
    );
    const S03: &str = include_str!(
        "../../../tests/data/public-nccl/S03_sheffield_bessemer_4xV100PCIe_noNVLink.txt"
    );
    const S13: &str = include_str!(
        "../../../tests/data/public-nccl/S13_chlc_8x4090_dualEPYC7542_SYS_p2p_off_on.txt"
    );

    fn tables(name: &str, text: &str) -> Vec<Table> {
        tables_of(name, &crate::nccl_tests::parse_runs(text).unwrap()).0
    }

    /// The lines of `text` with every size row above `keep` bytes left out.
    fn rows_up_to(text: &str, keep: u64) -> String {
        text.lines()
            .filter(|l| {
                let w = l.split_whitespace().next().unwrap_or("");
                w.parse::<u64>().map_or(true, |s| s <= keep)
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn every_public_pcie_table_gets_a_pcie_base_of_its_generation() {
        // (file, the row of its best bus bandwidth as published: size B, time us, ranks, bus
        // factor, base expected, its rate). Bus bandwidth = size / time x factor; the slowest
        // generation of PCIe 3.0/4.0/5.0 x16 (15.75/31.5/63 GB/s) with rate x 0.88 >= it.
        let cases = [
            // 8x RTX 5090: 32 MiB in 1284.81 us, 2 x 7/8 -> 45.70 GB/s; / 0.88 = 51.94 > 31.5.
            (
                "S01",
                S01,
                33_554_432.0,
                1284.81,
                8,
                1.75,
                "pcie-gen5",
                63.0,
            ),
            // 2x 2080 Ti: 256 MiB in 67137 us, 2 x 1/2 -> 4.00 GB/s; / 0.88 = 4.54 <= 15.75.
            (
                "S02",
                S02,
                268_435_456.0,
                67137.0,
                2,
                1.0,
                "pcie-gen4 at PCIe 3.0 x16 (15.75 GB/s)",
                15.75,
            ),
            // 4x V100 PCIe, run C: 128 MiB in 18003 us, 2 x 3/4 -> 11.18 GB/s; 12.71 <= 15.75.
            (
                "S03",
                S03,
                134_217_728.0,
                18003.0,
                4,
                1.5,
                "pcie-gen4 at PCIe 3.0 x16 (15.75 GB/s)",
                15.75,
            ),
            // 8x RTX 4090, P2P run: 128 MiB in 11382 us -> 20.64 GB/s; 23.45 in (15.75, 31.5].
            (
                "S13",
                S13,
                134_217_728.0,
                11382.0,
                8,
                1.75,
                "pcie-gen4",
                31.5,
            ),
        ];
        for (name, text, size, us, n, factor, want, rate) in cases {
            let best = size / us / 1e3 * factor;
            let c = choose_base(None, None, &tables(name, text)).unwrap();
            assert_eq!(
                (c.name.as_str(), c.from, c.link_rate_gbps),
                (want, "table", rate)
            );
            assert_eq!(c.profile.intra.kind, "pci", "{name}");
            assert_eq!(c.profile.intra.rate_gbps, Some(rate), "{name}");
            let row = format!(
                "its best bus bandwidth is {best:.2} GB/s (all_reduce {size} B in {us} us on {n} ranks"
            );
            assert!(c.reason.contains(&row), "{name}: {}", c.reason);
            let need = format!("so it needs {:.2} GB/s", best / 0.88);
            assert!(c.reason.contains(&need), "{name}: {}", c.reason);
            // The public files carry no NCCL log lines: P2P is taken as on, and said so.
            assert!(c.reason.contains("P2P taken as on"), "{name}");
        }
    }

    #[test]
    fn the_flags_decide_where_given_and_nccl_log_lines_name_p2p() {
        let t = tables("S01", S01);
        // --link-gbps alone: its generation (31.5 is PCIe 4.0's rate), or NVLink above 63.
        let c = choose_base(None, Some(31.5), &t).unwrap();
        assert_eq!((c.name.as_str(), c.link_rate_gbps), ("pcie-gen4", 31.5));
        let c = choose_base(None, Some(450.0), &t).unwrap();
        assert_eq!(
            (c.name.as_str(), c.profile.intra.kind.as_str()),
            ("nvlink-h200", "nvlink")
        );
        // --base overrides the table, at its own rate or --link-gbps.
        let nv = profile::builtin("nvlink-h200").unwrap();
        let c = choose_base(Some((nv.clone(), "nvlink-h200".into(), "--base")), None, &t).unwrap();
        assert_eq!((c.from, c.link_rate_gbps), ("--base", 450.0));
        // ... and says the table points to PCIe.
        assert!(
            c.reason
                .contains("(the table alone gives pcie-gen5: chosen from the table"),
            "{}",
            c.reason
        );
        let pcie5 = profile::builtin("pcie-gen5").unwrap();
        let c = choose_base(Some((pcie5, "pcie-gen5".into(), "--base")), None, &t).unwrap();
        assert_eq!(c.reason, "--base given; link rate 63 GB/s per direction");
        let c = choose_base(Some((nv, "nvlink-h200".into(), "--base")), Some(63.0), &t).unwrap();
        assert_eq!(c.link_rate_gbps, 63.0);
        // NCCL's log lines naming SHM only: no P2P, the host-memory base at the generation.
        let shm = S01.replace(
            "#        (B)",
            "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct\n#        (B)",
        );
        let c = choose_base(None, None, &tables("S01", &shm)).unwrap();
        assert_eq!(c.name, "pcie-gen5-no-p2p");
        assert!(!c.profile.p2p.unwrap().available);
        assert!(c.reason.contains("no P2P"), "{}", c.reason);
        let p2p = shm.replace("via SHM/direct/direct", "via P2P/CUMEM");
        let c = choose_base(None, None, &tables("S01", &p2p)).unwrap();
        assert_eq!(c.name, "pcie-gen5");
        assert!(
            c.reason.contains("P2P, as NCCL's log lines"),
            "{}",
            c.reason
        );
    }

    #[test]
    fn a_row_no_link_carries_is_refused_naming_it() {
        let pcie5 = profile::builtin("pcie-gen5").unwrap();
        // Every published row fits in PCIe 5.0 x16 (best 45.70 GB/s of 63).
        check_rows(&pcie5, 63.0, &tables("S01", S01)).unwrap();
        // 128 MiB in 4.17 us on 8 ranks: 134217728 / 4.17 x 1.75 / 1e3 = 56326.4 GB/s.
        let bad = S01.replace("  5355.16 ", "     4.17 ");
        let t = tables("S01", &bad);
        let e = check_rows(&pcie5, 63.0, &t).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        let busbw = 134_217_728.0 / 4.17 * 1.75 / 1e3;
        let m = e.to_string();
        assert!(
            m.contains(&format!(
                "S01 run 1: all_reduce of 134217728 B in 4.17 us on 8 ranks implies a bus bandwidth of {busbw:.1} GB/s"
            )),
            "{m}"
        );
        // 63 x 1.05 = 66.15 GB/s with the noise margin.
        assert!(
            m.contains("63 GB/s per direction, pcie-gen5; 66.2 GB/s"),
            "{m}"
        );
        // Taken from the table, that row makes it NVLink, which cannot carry it either: an
        // all-reduce there may reach 450 GB/s of algorithm bandwidth (NVLS), x 1.75 x 1.05.
        let c = choose_base(None, None, &t).unwrap();
        assert_eq!(c.name, "nvlink-h200");
        let m = check_rows(&c.profile, c.link_rate_gbps, &t)
            .unwrap_err()
            .to_string();
        assert!(
            m.contains(&format!("{:.1} GB/s with 5%", 450.0 * 1.75 * 1.05)),
            "{m}"
        );
        // Within the margin passes: a row at 64 GB/s on a 63 GB/s link (S02's 2 ranks, factor
        // 1: 1 GiB in 1073741824 / 64e3 us).
        let us = 1_073_741_824.0 / 64e3;
        let near = S02.replace("  268588 ", &format!(" {us:.1} "));
        assert!(near.contains(" 16777.2 "));
        check_rows(&pcie5, 63.0, &tables("S02", &near)).unwrap();
    }

    #[test]
    fn a_cut_or_short_table_is_named_and_its_verify_size_missing() {
        let runs = |t: &str| crate::nccl_tests::parse_runs(t).unwrap();
        assert_eq!(cut_of(&runs(S01)[0]), None);
        // Rows up to 128 B under a header asking for 128 MiB.
        let cut = rows_up_to(S01, 128);
        let why = cut_of(&runs(&cut)[0]).unwrap();
        assert_eq!(
            why,
            "its rows stop at 128 B where its header asks for sizes up to 134217728 B (maxBytes)"
        );
        // Its 0.01 GB/s tells no generation: PCIe 5.0 x16, the loosest bound, and said so.
        let c = choose_base(None, None, &tables("cut", &cut)).unwrap();
        assert_eq!((c.name.as_str(), c.link_rate_gbps), ("pcie-gen5", 63.0));
        assert!(
            c.reason.contains("its largest size, 128 B, is too small"),
            "{}",
            c.reason
        );
        let w = warnings(&tables("cut", &cut));
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].starts_with("cut run 1 looks cut short: its rows stop at 128 B"));
        // Kimi-K2.5's verify all-reduce: hidden 7168 x 3 tokens x 2 bytes = 43008 B.
        assert!(
            w[1].contains("covers 8-128 B, not 43008 B, the all_reduce of the default verify"),
            "{}",
            w[1]
        );
        // A row taken out of the middle: 24 rows where 8 B .. 128 MiB by 2x gives 25.
        let holed: String = S01
            .lines()
            .filter(|l| !l.trim_start().starts_with("1024 "))
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(
            cut_of(&runs(&holed)[0]).unwrap(),
            "it holds 24 rows where its header's sweep (minBytes 8, maxBytes 134217728, step 2) gives 25"
        );
        // A whole sweep that stops at 256 KB (-e 262144): short of 1 MiB.
        let short = rows_up_to(S01, 262_144).replace("maxBytes 134217728", "maxBytes 262144");
        let why = cut_of(&runs(&short)[0]).unwrap();
        assert!(
            why.starts_with("its largest size is 262144 B, far below"),
            "{why}"
        );
    }
}
