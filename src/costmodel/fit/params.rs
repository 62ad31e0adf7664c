//! Which parameters a set of points can tell apart: the free ones the fit moves, the held ones
//! (with the reason), and the note for a profile used at rank counts it was not fitted on.

use std::collections::BTreeSet;

use super::points::Point;
use crate::costmodel::predict;
use crate::costmodel::profile::{Algo, Profile, Proto};
pub(crate) use crate::costmodel::scope::{FitScope, HeldParam};
use crate::request::Launcher;

/// A parameter the fit may move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Param {
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
    pub(crate) fn name(self) -> String {
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

    pub(crate) fn get(self, p: &Profile) -> f64 {
        let mut q = p.clone();
        *self.slot(&mut q)
    }

    pub(crate) fn set(self, p: &mut Profile, v: f64) {
        *self.slot(p) = v;
    }

    /// Whether the parameter can move the model's time of `pt` under `p`: false only where a
    /// measured switch ([`Profile::observed_proto`]) fixes Ring and the protocol of every term
    /// whatever the parameters and the time never reads it (a latency of another protocol or
    /// algorithm, an LL rate for Simple, the link bandwidth for LL on one node whose bus
    /// bytes all lie within the fitted LL range: `(bytes - fast) / bw` is then 0 whatever bw,
    /// [`predict::device_us`]; the range's end is no parameter).
    pub(super) fn moves(self, p: &Profile, pt: &Point) -> bool {
        let fixed = |t: &super::Term| {
            p.observed_proto(t.op, t.size, pt.n)
                .filter(|_| pt.force.is_empty())
        };
        let within_ll_fit = |t: &super::Term| {
            let bytes = t.op.ops().ring_bytes(t.size as f64, pt.n);
            predict::nodes(p, pt.n).0 == 1
                && p.ll_fitted.is_some_and(|f| bytes <= f.up_to_bus_bytes)
        };
        pt.terms.iter().any(|t| match (self, fixed(t)) {
            (_, None) => true,
            (Param::Base(a, pr) | Param::IntraHop(a, pr) | Param::NetHop(a, pr), Some(x)) => {
                a == Algo::Ring && pr == x
            }
            (Param::LlFit | Param::LlMax, Some(x)) => x == Proto::Ll,
            (Param::IntraBw, Some(Proto::Ll)) => !within_ll_fit(t),
            _ => true,
        })
    }
}

/// The parameters `points` can tell apart, judged at the `base` profile's choices.
pub(crate) fn free_params(base: &Profile, points: &[Point]) -> anyhow::Result<Vec<Param>> {
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
#[derive(Default)]
pub(super) struct Usage {
    /// Step counts per (algorithm, protocol) used (one per rank count and collective).
    steps: std::collections::BTreeMap<(Algo, Proto), BTreeSet<usize>>,
    /// Rank counts per (algorithm, protocol) used across nodes.
    net: std::collections::BTreeMap<(Algo, Proto), BTreeSet<usize>>,
    ll_capped: bool,
    intra_bw: bool,
}

pub(super) fn usage_of(base: &Profile, points: &[Point]) -> anyhow::Result<Usage> {
    let mut u = Usage::default();
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

pub(super) fn list(v: &BTreeSet<usize>) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The parameters the points touch but cannot pin down, held at their `base` values, with
/// the reason for each (`fitted`: the parameters actually fitted, which are never listed).
pub(crate) fn held_params(
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
pub(crate) fn extrapolation_note(p: &Profile, nranks: usize) -> Option<String> {
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

/// The scope of a fit from `base` that moved `fitted` and held `held`, on `points`.
pub(crate) fn scope_of(
    base: &str,
    fitted: &[Param],
    held: &[HeldParam],
    points: &[Point],
) -> FitScope {
    let sizes = || points.iter().flat_map(|p| p.terms.iter().map(|t| t.size));
    FitScope {
        base: base.into(),
        fitted: fitted.iter().map(|p| p.name()).collect(),
        held: held.to_vec(),
        bytes: [sizes().min().unwrap_or(0), sizes().max().unwrap_or(0)],
    }
}

/// What a recommendation rests on, for the code that makes one (`explain`'s what-if rows):
/// - an NCCL setting (`NCCL_ALGO`/`NCCL_PROTO`, a rank count) is priced with the (algorithm,
///   protocol) pairs it compares, [`Profile::unfitted_for_nccl`] of each;
/// - a custom P2P all-reduce (one-shot, two-shot) with `p2p.*`, [`Profile::unfitted_for_p2p`];
/// - a row without a collective choice (CUDA graph, host gaps) with the launch costs, which no
///   fit on eager tables pins down apart from the base latency.
///
/// A fit on nccl-tests tables pins Ring/LL and Ring/Simple down only; Tree, LL128 and the P2P
/// terms stay at the base profile's values.
impl Profile {
    /// Whether a fit moved the parameter `name`; false on profiles no fit wrote.
    pub(crate) fn is_fitted(&self, name: &str) -> bool {
        self.fit_scope
            .as_ref()
            .is_some_and(|s| s.fitted.iter().any(|f| f == name))
    }

    /// The parameters a fit held at its base's values, with the reason (empty: no fit).
    #[cfg(test)]
    pub(crate) fn held_params(&self) -> &[HeldParam] {
        self.fit_scope.as_ref().map_or(&[], |s| &s.held)
    }

    /// Of the parameters that price (algorithm `a`, protocol `pr`) within a node, those a fit
    /// did not pin down: the latency (base or per-hop: at one rank count one absorbs the other,
    /// so either fitted pins the sum) and the bandwidth. Empty on profiles no fit wrote.
    pub(crate) fn unfitted_for_nccl(&self, a: Algo, pr: Proto) -> Vec<String> {
        if self.fit_scope.is_none() {
            return vec![];
        }
        let (base, hop) = (Param::Base(a, pr).name(), Param::IntraHop(a, pr).name());
        let mut out = vec![];
        if !self.is_fitted(&base) && !self.is_fitted(&hop) {
            out.extend([base, hop]);
        }
        let bw = match pr {
            Proto::Ll if self.ll_fitted.is_some() => vec![Param::LlFit],
            Proto::Ll => vec![Param::LlMax, Param::IntraBw],
            _ => vec![Param::IntraBw],
        };
        if !bw.iter().any(|p| self.is_fitted(&p.name())) {
            out.extend(bw.iter().map(|p| p.name()));
        }
        out
    }

    /// The P2P terms a fit did not pin down (the custom all-reduces' signal round and read
    /// bandwidth); empty on profiles no fit wrote.
    pub(crate) fn unfitted_for_p2p(&self) -> Vec<String> {
        if self.fit_scope.is_none() {
            return vec![];
        }
        ["p2p.signal_us", "p2p.read_gbps"]
            .into_iter()
            .filter(|n| !self.is_fitted(n))
            .map(String::from)
            .collect()
    }

    /// The line a row priced from `unfitted` prints: `None` where every parameter was fitted.
    pub(crate) fn held_note(&self, row: &str, unfitted: &[String]) -> Option<String> {
        let s = self.fit_scope.as_ref().filter(|_| !unfitted.is_empty())?;
        Some(format!(
            "{row}: modeled from parameters profile '{}' held at {}'s values, not fitted: {}",
            self.name,
            s.base,
            unfitted.join(", ")
        ))
    }
}

/// A note for modeled results at nccl-tests sizes `sizes` from a fitted profile, where any lies
/// outside the sizes the fit saw; `None` where all lie within (or no fit recorded its sizes).
pub(crate) fn range_note(p: &Profile, sizes: &[u64]) -> Option<String> {
    let [lo, hi] = p.fit_scope.as_ref()?.bytes;
    let out: BTreeSet<u64> = sizes
        .iter()
        .copied()
        .filter(|s| !(lo..=hi).contains(s))
        .collect();
    if out.is_empty() {
        return None;
    }
    Some(format!(
        "outside the fitted range: profile '{}' was fitted on sizes {lo}-{hi} B; at {} B it extrapolates",
        p.name,
        out.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}
