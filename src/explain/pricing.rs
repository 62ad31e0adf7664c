//! What the cost model says about the verify's collectives: the transfer with NCCL's default
//! choice, with the model's best NCCL setting, and with the one-shot custom all-reduce
//! ([`crate::costmodel::custom`]). Every figure here is modeled.

use serde::Serialize;

use crate::costmodel::custom;
use crate::costmodel::predict::{self, Force};
use crate::costmodel::profile::{Algo, Proto};
use crate::costmodel::{fit, group_sizes, nccl_size, ModelSettings};
use crate::model::{CollectiveKind, Op, Schedule};
use crate::record::Impl;
use crate::request::Launcher;

/// The model's prices for one schedule on `nranks` ranks (device times, us).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Pricing {
    /// The profile's name (and file).
    pub(crate) profile: String,
    pub(crate) nranks: usize,
    /// Device time of each collective of the schedule, in order, NCCL's default choice.
    pub(crate) per_collective_us: Vec<f64>,
    /// Their sum: the transfer of one verify.
    pub(crate) transfer_us: f64,
    /// NCCL's choice for the most frequent all-reduce (`Ring/LL`).
    pub(crate) choice: String,
    /// The fastest forced setting the model knows (`NCCL_PROTO=LL NCCL_ALGO=Ring`) and its
    /// transfer; the default choice when nothing is faster.
    pub(crate) best_setting: String,
    pub(crate) best_transfer_us: f64,
    /// Transfer with every all-reduce run by the one-shot P2P kernel (the all-gather stays on
    /// NCCL), or why it cannot run here. JSON: `{"transfer_us": US}` or `{"unavailable": WHY}`.
    #[serde(rename = "oneshot", serialize_with = "oneshot_json")]
    pub(crate) oneshot_transfer_us: Result<f64, String>,
    /// The weight streaming of the compute ops at the profile's HBM bandwidth (no launches);
    /// `None` when the schedule has no compute (a trace export).
    pub(crate) compute_us: Option<f64>,
    /// The gap between two kernel nodes of a CUDA graph.
    pub(crate) launch_graph_us: f64,
    /// The link between the GPUs (`nvlink`, `pcie`, `shm`).
    pub(crate) link_kind: String,
    /// Where the profile is a fit: the settings left out of the best-setting search because the
    /// fit held their parameters at its base's values, and the sizes of the verify outside the
    /// fitted range (lines for the notes; empty for a built-in profile).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) held: Vec<String>,
    /// Where the profile is a fit that did not pin down the P2P terms: the line the one-shot
    /// rows carry (they are priced from the base's values).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) oneshot_held: Option<String>,
}

fn oneshot_json<S: serde::Serializer>(v: &Result<f64, String>, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(1))?;
    match v {
        Ok(us) => m.serialize_entry("transfer_us", us)?,
        Err(why) => m.serialize_entry("unavailable", why)?,
    }
    m.end()
}

impl Pricing {
    /// Mean device time of one collective of the schedule.
    pub(crate) fn per_collective_mean_us(&self) -> f64 {
        self.transfer_us / self.per_collective_us.len().max(1) as f64
    }

    /// The modeled one-shot all-reduce alone, us per collective: the one-shot transfer less
    /// the all-gather (the last op), over the all-reduces.
    pub(crate) fn oneshot_per_all_reduce_us(&self) -> Option<f64> {
        let n_ar = self.per_collective_us.len().saturating_sub(1).max(1) as f64;
        let all_gather = self.per_collective_us.last().copied().unwrap_or(0.0);
        self.oneshot_transfer_us
            .as_ref()
            .ok()
            .map(|t| (t - all_gather) / n_ar)
    }

    /// The model's forward from a CUDA graph: transfer + compute + one graph node gap per
    /// collective (`None` without compute in the schedule).
    pub(crate) fn graph_forward_us(&self) -> Option<f64> {
        self.compute_us.map(|c| {
            self.transfer_us + c + self.per_collective_us.len() as f64 * self.launch_graph_us
        })
    }

    /// Best NCCL setting / default, as a ratio of transfers (1 when the default is the best).
    pub(crate) fn best_ratio(&self) -> f64 {
        self.best_transfer_us / self.transfer_us
    }
}

/// The kind and bytes per rank of every collective of `s`, in order.
fn collectives(s: &Schedule) -> impl Iterator<Item = (CollectiveKind, u64)> + '_ {
    s.ops.iter().filter_map(|op| match op {
        Op::Collective {
            kind,
            bytes_per_rank,
            ..
        } => Some((*kind, *bytes_per_rank)),
        Op::Compute { .. } => None,
    })
}

/// Transfer of every collective of `s` under `force` (us each). A schedule repeats a few
/// collectives (every layer's all-reduce alike), each priced once.
fn transfers(
    p: &crate::costmodel::Profile,
    s: &Schedule,
    n: usize,
    force: &Force,
) -> anyhow::Result<Vec<f64>> {
    let mut priced: Vec<((CollectiveKind, u64), f64)> = vec![];
    collectives(s)
        .map(|(kind, bytes)| {
            let key = (kind, nccl_size(kind, bytes, n));
            if let Some((_, us)) = priced.iter().find(|(k, _)| *k == key) {
                return Ok(*us);
            }
            let us = predict::choose(p, kind, key.1, n, force)?.2;
            priced.push((key, us));
            Ok(us)
        })
        .collect()
}

/// Prices `s` on `nranks` ranks (2 or more, as `explain`'s rank rule allows) with the settings `m`
/// (profile, forced protocol/algorithm).
pub(crate) fn price(s: &Schedule, nranks: usize, m: &ModelSettings) -> anyhow::Result<Pricing> {
    let (p, label) = m.resolve()?;
    let force = m.force()?;
    let per = transfers(&p, s, nranks, &force)?;
    if per.is_empty() {
        crate::usage_bail!("the schedule has no collective: nothing to explain");
    }
    let transfer: f64 = per.iter().sum();
    let groups = s.collective_groups();
    let main = groups
        .iter()
        .filter(|g| g.kind == CollectiveKind::AllReduce)
        .max_by_key(|g| g.n)
        .or(groups.first())
        .expect("a collective");
    let size = nccl_size(main.kind, main.bytes_per_rank, nranks);
    let t = predict::op_time(
        &p,
        main.kind,
        size,
        nranks,
        true,
        Launcher::Processes,
        &force,
    )?;
    let choice = format!("{}/{}", t.algo.name(), t.proto.name());
    // The model's best setting: every protocol and algorithm NCCL has, forced in turn, but
    // none whose parameters a fit held at its base's values (that would recommend the base).
    let (mut best_setting, mut best) = (format!("NCCL's default ({choice})"), transfer);
    let mut held_settings = vec![];
    for proto in Proto::ALL {
        for algo in Algo::ALL {
            if !p.unfitted_for_nccl(algo, proto).is_empty() {
                held_settings.push(format!("{}/{}", algo.name(), proto.name()));
                continue;
            }
            // The logits all-gather runs Ring only: force the algorithm on the all-reduce.
            let algo_list = format!("allreduce:{}", algo.name());
            let f = Force::parse(Some(proto.name()), Some(&algo_list))?;
            let Ok(v) = transfers(&p, s, nranks, &f) else {
                continue;
            };
            let sum: f64 = v.iter().sum();
            if sum < best * (1.0 - 1e-3) {
                best = sum;
                best_setting = format!("NCCL_PROTO={} NCCL_ALGO='{algo_list}'", proto.name());
            }
        }
    }
    let mut held = vec![];
    if !held_settings.is_empty() {
        held.push(format!(
            "best NCCL setting: chosen among the settings profile '{}' fitted; not considered, their parameters held at {}'s values: {}",
            p.name,
            p.fit_scope.as_ref().map_or("the base", |f| f.base.as_str()),
            held_settings.join(", ")
        ));
    }
    held.extend(fit::range_note(&p, &group_sizes(&groups, nranks)));
    let oneshot_held = p.held_note("one-shot rows", &p.unfitted_for_p2p());
    let oneshot = match custom::unavailable_reason(&p) {
        Some(why) => Err(why),
        None => {
            // Each all-reduce by the one-shot kernel, the rest as NCCL prices them; where a
            // size cannot run one-shot, the last such refusal.
            let each: Vec<anyhow::Result<f64>> = collectives(s)
                .zip(&per)
                .map(|((kind, bytes), &nccl)| match kind {
                    CollectiveKind::AllReduce => {
                        custom::device_us(&p, Impl::OneShot, bytes, nranks)
                    }
                    _ => Ok(nccl),
                })
                .collect();
            match each.iter().rev().find_map(|r| r.as_ref().err()) {
                Some(e) => Err(e.to_string()),
                None => Ok(each.iter().flatten().sum()),
            }
        }
    };
    let compute: f64 = s
        .ops
        .iter()
        .filter_map(|o| match o {
            Op::Compute { weight_bytes, .. } => Some(*weight_bytes as f64 / (p.hbm_gbps * 1e3)),
            _ => None,
        })
        .sum();
    let has_compute = s.ops.iter().any(|o| matches!(o, Op::Compute { .. }));
    Ok(Pricing {
        profile: label,
        nranks,
        per_collective_us: per,
        transfer_us: transfer,
        choice,
        best_setting,
        best_transfer_us: best,
        oneshot_transfer_us: oneshot,
        compute_us: has_compute.then_some(compute),
        launch_graph_us: p.launch_graph_us,
        link_kind: p.intra.kind.clone(),
        held,
        oneshot_held,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Workload;

    fn kimi(tp: u64) -> Schedule {
        Workload {
            tp: Some(tp),
            ..Default::default()
        }
        .schedule(tp)
        .unwrap()
    }

    #[test]
    fn transfer_is_the_sum_of_the_model_device_times() {
        let s = kimi(8);
        let m = ModelSettings::default();
        let pr = price(&s, 8, &m).unwrap();
        assert_eq!(pr.per_collective_us.len(), s.n_collectives() as usize);
        // Independently: the model's device time of one 43,008 B all-reduce on 8 ranks times
        // the all-reduces, plus the all-gather's.
        let (p, _) = m.resolve().unwrap();
        let f = Force::default();
        let ar = predict::choose(&p, CollectiveKind::AllReduce, 43008, 8, &f)
            .unwrap()
            .2;
        let groups = s.collective_groups();
        let ag = groups
            .iter()
            .find(|g| g.kind == CollectiveKind::AllGather)
            .unwrap();
        let ag_us = predict::choose(
            &p,
            CollectiveKind::AllGather,
            nccl_size(CollectiveKind::AllGather, ag.bytes_per_rank, 8),
            8,
            &f,
        )
        .unwrap()
        .2;
        let want = 123.0 * ar + ag_us;
        assert!(
            (pr.transfer_us - want).abs() < 1e-6,
            "{} vs {want}",
            pr.transfer_us
        );
        // The best setting is never slower than the default.
        assert!(pr.best_transfer_us <= pr.transfer_us + 1e-9);
        // One-shot on pcie-gen5: the signal round + 7 x 43,008 B at the read bandwidth per
        // all-reduce (6.3213 us and 26.440 GB/s, the fit of the public S10 table).
        let one = 6.3213 + 7.0 * 43008.0 / 26.440e3;
        let want = 123.0 * one + ag_us;
        let got = *pr.oneshot_transfer_us.as_ref().unwrap();
        assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        assert!(pr.compute_us.unwrap() > 0.0);
    }

    #[test]
    fn one_shot_is_unavailable_without_peer_access() {
        let s = kimi(8);
        let m = ModelSettings {
            link: "pcie-gen5-no-p2p".into(),
            ..Default::default()
        };
        let pr = price(&s, 8, &m).unwrap();
        assert!(pr.oneshot_transfer_us.is_err());
    }
}
