//! Which parameters a set of points can tell apart: the free ones the fit moves, the held ones
//! (with the reason), and the note for a profile used at rank counts it was not fitted on.

use std::collections::BTreeSet;

use super::points::Point;
use crate::costmodel::predict;
use crate::costmodel::profile::{Algo, Profile, Proto};
use crate::request::Launcher;

/// A parameter the fit may move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    IntraBw,
    LlMax,
    /// The fitted LL rate ([`super::profile::LlFit`]).
    LlFit,
    NetBw,
    Base(Algo, Proto),
    IntraHop(Algo, Proto),
    NetHop(Algo, Proto),
    LaunchEager(Launcher),
}

impl Param {
    pub fn name(self) -> String {
        let ap = |a: Algo, p: Proto| format!("{}.{}", a.name().to_lowercase(), p.name());
        match self {
            Param::IntraBw => "intra.bw_gbps".into(),
            Param::LlMax => "ll_max_gbps".into(),
            Param::LlFit => "ll_fitted.gbps".into(),
            Param::NetBw => "inter.bw_gbps".into(),
            Param::Base(a, p) => format!("base_lat_us.{}", ap(a, p)),
            Param::IntraHop(a, p) => format!("intra.hop_lat_us.{}", ap(a, p)),
            Param::NetHop(a, p) => format!("inter.hop_lat_us.{}", ap(a, p)),
            Param::LaunchEager(l) => format!("launch_eager_us.{}", l.name()),
        }
    }

    fn slot(self, p: &mut Profile) -> &mut f64 {
        match self {
            Param::IntraBw => &mut p.intra.bw_gbps,
            Param::LlMax => &mut p.ll_max_gbps,
            Param::LlFit => {
                &mut p
                    .ll_fitted
                    .as_mut()
                    .expect("LL fit params need ll_fitted")
                    .gbps
            }
            Param::NetBw => &mut p.inter.as_mut().expect("net params need a network").bw_gbps,
            Param::Base(a, pr) => p.base_lat_us.get_mut(a, pr),
            Param::IntraHop(a, pr) => p.intra.hop_lat_us.get_mut(a, pr),
            Param::NetHop(a, pr) => p
                .inter
                .as_mut()
                .expect("net params need a network")
                .hop_lat_us
                .get_mut(a, pr),
            Param::LaunchEager(l) => p.launch_eager_us.get_mut(l),
        }
    }

    pub fn get(self, p: &Profile) -> f64 {
        let mut q = p.clone();
        *self.slot(&mut q)
    }

    pub fn set(self, p: &mut Profile, v: f64) {
        *self.slot(p) = v;
    }
}

/// The parameters `points` can tell apart, judged at the `base` profile's choices.
pub fn free_params(base: &Profile, points: &[Point]) -> anyhow::Result<Vec<Param>> {
    let mut set: Vec<Param> = vec![];
    let add = |set: &mut Vec<Param>, p: Param| {
        if !set.contains(&p) {
            set.push(p);
        }
    };
    let u = usage_of(base, points)?;
    let any_graph = points.iter().any(|p| p.graph);
    for pt in points {
        if !pt.graph && any_graph {
            add(&mut set, Param::LaunchEager(pt.launcher));
        }
    }
    if u.ll_capped {
        add(&mut set, Param::LlMax);
    }
    if u.intra_bw {
        add(&mut set, Param::IntraBw);
    }
    if !u.net.is_empty() {
        add(&mut set, Param::NetBw);
    }
    for (&(a, pr), s) in &u.steps {
        add(&mut set, Param::Base(a, pr));
        if s.len() >= 2 {
            add(&mut set, Param::IntraHop(a, pr));
        }
    }
    for (&(a, pr), ns) in &u.net {
        if ns.len() >= 2 {
            add(&mut set, Param::NetHop(a, pr));
        }
    }
    // A stable order, whatever the order of the points.
    set.sort_by_key(|p| p.name());
    Ok(set)
}

/// What the points use at the `base` profile's choices.
pub(super) struct Usage {
    /// Step counts per (algorithm, protocol) used (one per rank count and collective).
    steps: std::collections::BTreeMap<(Algo, Proto), BTreeSet<usize>>,
    /// Rank counts per (algorithm, protocol) used across nodes.
    net: std::collections::BTreeMap<(Algo, Proto), BTreeSet<usize>>,
    ll_capped: bool,
    intra_bw: bool,
}

pub(super) fn usage_of(base: &Profile, points: &[Point]) -> anyhow::Result<Usage> {
    let mut u = Usage {
        steps: Default::default(),
        net: Default::default(),
        ll_capped: false,
        intra_bw: false,
    };
    for pt in points {
        let multi = base.inter.is_some() && base.gpus_per_node.is_some_and(|g| pt.n > g);
        for t in &pt.terms {
            let (a, pr, _) = predict::choose(base, t.op, t.size, pt.n, &pt.force)?;
            let capped = pr == Proto::Ll
                && base.ll_max_gbps < base.intra.bw_gbps * pr.efficiency()
                && !multi;
            if capped {
                u.ll_capped = true;
            } else {
                u.intra_bw = true;
            }
            if multi {
                u.net.entry((a, pr)).or_default().insert(pt.n);
            }
            u.steps.entry((a, pr)).or_default().insert(match a {
                Algo::Ring => predict::ring_steps(t.op, pt.n, 1).0,
                Algo::Tree => pt.n,
            });
        }
    }
    Ok(u)
}

/// A parameter the fit left at the starting profile's value, and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HeldParam {
    pub name: String,
    pub value: f64,
    pub reason: String,
}

pub(super) fn list(v: &BTreeSet<usize>) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The parameters the points touch but cannot pin down, held at their `base` values, with
/// the reason for each (`fitted`: the parameters actually fitted, which are never listed).
pub fn held_params(
    base: &Profile,
    points: &[Point],
    fitted: &[Param],
) -> anyhow::Result<Vec<HeldParam>> {
    let u = usage_of(base, points)?;
    let counts: BTreeSet<usize> = points.iter().map(|p| p.n).collect();
    let mut out = vec![];
    let mut hold = |p: Param, reason: String| {
        if !fitted.contains(&p) && !out.iter().any(|h: &HeldParam| h.name == p.name()) {
            out.push(HeldParam {
                name: p.name(),
                value: p.get(base),
                reason,
            });
        }
    };
    for (&(a, pr), s) in &u.steps {
        if s.len() < 2 {
            hold(
                Param::IntraHop(a, pr),
                format!(
                    "held at its table value: the data has one rank count for {} {} (n = {}), where base latency and per-hop latency move every point alike, so the base latency absorbs both; measure at several rank counts to fit it",
                    a.name(),
                    pr.name(),
                    list(&counts)
                ),
            );
        }
    }
    for (&(a, pr), ns) in &u.net {
        if ns.len() < 2 {
            hold(
                Param::NetHop(a, pr),
                format!(
                    "held at its table value: one multi-node rank count for {} {} (n = {}), indistinguishable from the base latency",
                    a.name(),
                    pr.name(),
                    list(ns)
                ),
            );
        }
    }
    if !points.iter().any(|p| p.graph) {
        for l in points.iter().map(|p| p.launcher) {
            hold(
                Param::LaunchEager(l),
                "held: without graph points the eager launch cost cannot be told from the base latency".into(),
            );
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.push(HeldParam {
        name: "launch_graph_us".into(),
        value: base.launch_graph_us,
        reason: "never fitted: in graph replay it is indistinguishable from the base latency"
            .into(),
    });
    Ok(out)
}

/// A note for modeled results at `nranks` ranks from a profile fitted at other rank counts;
/// `None` for built-in profiles and for rank counts the fit saw.
pub fn extrapolation_note(p: &Profile, nranks: usize) -> Option<String> {
    let counts = p.fitted_rank_counts.as_ref()?;
    if counts.contains(&nranks) {
        return None;
    }
    let set: BTreeSet<usize> = counts.iter().copied().collect();
    Some(format!(
        "profile '{}' was fitted on measurements at {} ranks only: at {nranks} ranks it extrapolates{}",
        p.name,
        list(&set),
        if set.len() < 2 {
            " (with one rank count one of each protocol's base and per-hop latencies was held at NCCL's table value, as the fit's held lines say, so the change with the rank count is NCCL's, not measured)"
        } else {
            ""
        }
    ))
}
