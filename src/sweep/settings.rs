//! What the sweep knows of each NCCL setting beyond its name, in one file: the variations of
//! `--preset pcie`, how a probe log proves that NCCL did what a point asked ([`mismatches`]),
//! what to try when NCCL refused a point ([`hint`]), and what the fake NCCL of `--debug-mode`
//! chooses under a point's settings and what that costs ([`FakeChoices`]).
//!
//! A new NCCL setting the sweep treats specially changes this file. Its name must also be one
//! NCCL reads ([`crate::inspect::nccl_vars`]: otherwise each point setting it is warned about
//! as a likely typo and never judged), and `--backend model` prices it only when the cost model
//! models it (`costmodel::profile::MODELED_NCCL_VARS`; otherwise the point is listed as not
//! modeled and never ranked).

use std::collections::BTreeMap;

use super::matrix::{nccl_list_allows, Point, Variations};
use super::ncclog::NcclLog;
use crate::error::usage;

/// A named list of one-at-a-time variations.
pub(crate) struct Preset {
    pub(crate) name: &'static str,
    pub(crate) about: &'static str,
    pub(crate) points: Variations,
}

/// Settings that matter on PCIe machines (no NVLink), each varied alone around the defaults:
/// 16 points plus the baseline.
pub(crate) const PCIE: Preset = Preset {
    name: "pcie",
    about: "protocol, algorithm (per-function Tree for all-reduce), P2P level and disable, channels, threads, buffer size; one variable at a time",
    points: &[
        &[("NCCL_PROTO", "LL")],
        &[("NCCL_PROTO", "LL128")],
        &[("NCCL_PROTO", "Simple")],
        &[("NCCL_ALGO", "Ring")],
        // Global Tree has no all-gather since NCCL 2.24: Tree for the all-reduces only.
        &[("NCCL_ALGO", "ring;allreduce:tree")],
        &[("NCCL_P2P_LEVEL", "PHB")],
        &[("NCCL_P2P_LEVEL", "SYS")],
        &[("NCCL_P2P_DISABLE", "1")],
        &[("NCCL_MIN_NCHANNELS", "2"), ("NCCL_MAX_NCHANNELS", "2")],
        &[("NCCL_MIN_NCHANNELS", "4"), ("NCCL_MAX_NCHANNELS", "4")],
        &[("NCCL_MIN_NCHANNELS", "8"), ("NCCL_MAX_NCHANNELS", "8")],
        &[("NCCL_NTHREADS", "128")],
        &[("NCCL_NTHREADS", "256")],
        &[("NCCL_NTHREADS", "512")],
        &[("NCCL_BUFFSIZE", "1048576")],
        &[("NCCL_BUFFSIZE", "16777216")],
    ],
};

/// The preset called `name`.
pub(crate) fn preset(name: &str) -> anyhow::Result<&'static Preset> {
    if name == PCIE.name {
        return Ok(&PCIE);
    }
    Err(usage(format!(
        "--preset {name}: unknown preset; available: {} ({})",
        PCIE.name, PCIE.about
    )))
}

/// Requested vs effective: what NCCL did not do as the point asked.
pub(crate) fn mismatches(p: &Point, log: &NcclLog) -> Vec<String> {
    let mut out = vec![];
    let real = log.choices.iter().filter(|c| c.bytes >= 64);
    for c in real {
        let func = c.func.as_deref();
        let what = format!("{} {} B", func.unwrap_or("a collective of"), c.bytes);
        for (var, used) in [("NCCL_ALGO", &c.algo), ("NCCL_PROTO", &c.proto)] {
            if let Some(v) = p.get(var) {
                if nccl_list_allows(v, func, used) == Some(false) {
                    let m = format!("asked {var}={v}, NCCL used {used} for {what}");
                    if !out.contains(&m) {
                        out.push(m);
                    }
                }
            }
        }
        if let (Some(max), Some((lo, hi))) = (
            p.get("NCCL_MAX_NCHANNELS")
                .and_then(|v| v.parse::<u32>().ok()),
            c.channels,
        ) {
            if hi + 1 - lo.min(hi + 1) > max {
                out.push(format!(
                    "asked NCCL_MAX_NCHANNELS={max}, NCCL used channels {lo}..{hi} for {what}"
                ));
            }
        }
    }
    let uses = |prefix: &str| log.transports.keys().any(|t| t.starts_with(prefix));
    if p.get("NCCL_P2P_DISABLE") == Some("1") && uses("P2P/") {
        out.push("asked NCCL_P2P_DISABLE=1, NCCL still connected channels via P2P".into());
    }
    if p.get("NCCL_SHM_DISABLE") == Some("1") && uses("SHM/") {
        out.push("asked NCCL_SHM_DISABLE=1, NCCL still connected channels via SHM".into());
    }
    out
}

/// What to try instead when NCCL refused a point.
pub(crate) fn hint(p: &Point, reason: &str, warnings: &[String]) -> Option<String> {
    // NCCL's own words, and the cost model's (a `--backend model` sweep refuses the same point)
    let says_no_algo = |s: &str| {
        s.contains("no algorithm/protocol available") || s.contains("allows no algorithm")
    };
    let no_algo = warnings.iter().any(|w| says_no_algo(w)) || says_no_algo(reason);
    let global_tree = p
        .get("NCCL_ALGO")
        .is_some_and(|v| !v.contains(':') && v.to_ascii_lowercase().contains("tree"));
    let invalid_usage = reason.contains("InvalidUsage") || reason.contains("invalid usage");
    if global_tree && (no_algo || invalid_usage) {
        return Some(
            "a global NCCL_ALGO=Tree applies to every collective, and Tree has no all-gather (NCCL >= 2.24 no longer falls back to Ring); use the per-function form: --set 'NCCL_ALGO=ring;allreduce:tree'".into(),
        );
    }
    if no_algo {
        return Some(
            "NCCL has no algorithm/protocol for some collective under this setting; restrict it to one function with NCCL's per-function form, e.g. --set 'NCCL_PROTO=simple;allreduce:ll128'".into(),
        );
    }
    None
}

/// What the fake NCCL of `--debug-mode` ([`super::mock`]) chooses under a point's NCCL_*
/// settings: NCCL_PROTO, NCCL_ALGO (a global Tree fails the all-gather), NCCL_P2P_DISABLE and
/// NCCL_SHM_DISABLE, the ones [`mismatches`] checks the real NCCL against.
pub(super) struct FakeChoices {
    /// The protocol, upper case (`LL` unless a plain NCCL_PROTO says otherwise).
    pub(super) proto: String,
    /// The all-reduce's algorithm: `TREE` or `RING`.
    pub(super) ar_algo: &'static str,
    /// A global NCCL_ALGO=Tree: NCCL >= 2.24 has no all-gather for it, so the point fails.
    pub(super) global_tree: bool,
    pub(super) transport: &'static str,
}

impl FakeChoices {
    pub(super) fn of(env: &BTreeMap<String, String>, threads: bool) -> FakeChoices {
        let get = |k: &str| env.get(k).map(String::as_str);
        fn simple(v: Option<&str>) -> Option<&str> {
            v.filter(|v| !v.contains([';', ',', ':', '^']))
        }
        let proto = simple(get("NCCL_PROTO"))
            .map(|v| v.to_ascii_uppercase())
            .unwrap_or_else(|| "LL".into());
        let global_tree = simple(get("NCCL_ALGO")).is_some_and(|v| v.eq_ignore_ascii_case("tree"));
        let per_fn_tree =
            get("NCCL_ALGO").is_some_and(|v| v.to_ascii_lowercase().contains("allreduce:tree"));
        let ar_algo = if global_tree || per_fn_tree {
            "TREE"
        } else {
            "RING"
        };
        let (transport, proto) = match (get("NCCL_P2P_DISABLE"), get("NCCL_SHM_DISABLE")) {
            (Some("1"), Some("1")) => ("NET/Socket/0", "SIMPLE".to_string()),
            (Some("1"), _) => ("SHM/direct/direct", proto),
            _ if threads => ("P2P/direct pointer", proto),
            _ => ("P2P/CUMEM", proto),
        };
        FakeChoices {
            proto,
            ar_algo,
            global_tree,
            transport,
        }
    }

    /// How much slower than the defaults these choices run (FAKE).
    pub(super) fn factor(&self) -> f64 {
        let proto = match self.proto.as_str() {
            "LL128" => 1.15,
            "SIMPLE" => 1.8,
            _ => 1.0,
        };
        let algo = if self.ar_algo == "TREE" { 1.1 } else { 1.0 };
        let transport = match self.transport {
            "SHM/direct/direct" => 2.0,
            "NET/Socket/0" => 5.0,
            _ => 1.0,
        };
        proto * algo * transport
    }
}
