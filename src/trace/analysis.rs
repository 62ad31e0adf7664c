//! All ranks together: the k-th collective of each communicator matched across ranks and split
//! into transfer and waiting ([`crate::measure::attribution`]), the step summarised (median and
//! spread over the steps the trace holds), and the diagnosis a user can act on. Every figure is
//! measured from the trace; the wording says so.

use std::collections::HashMap;

use serde::Serialize;

use super::extract::{describe_period, Collective, RankTrace, SizeFrom, StepMode};
use super::nccl_log::LogSummary;
use super::reader::RankSource;
use crate::measure::attribution::{
    aggregate, attribute, Aggregate, Attribution, RankTiming, Spread, Straggler,
};

/// One file that was not analysed, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Skipped {
    pub(crate) file: String,
    pub(crate) reason: String,
}

/// One rank, summed up.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankSummary {
    pub(crate) rank: usize,
    pub(crate) file: String,
    pub(crate) rank_source: RankSource,
    pub collectives: usize,
    pub(crate) steps: usize,
    pub(crate) gpu_busy_us: f64,
    pub(crate) gpu_idle_us: f64,
    /// Median step time of this rank.
    pub(crate) step_median_us: Option<f64>,
    /// Median over steps of this rank's collective in-kernel time.
    pub(crate) in_kernel_median_us: Option<f64>,
    /// Median over steps of this rank's waiting (needs two ranks or more).
    pub(crate) waiting_median_us: Option<f64>,
    /// Collectives in which this rank started last.
    pub times_last: usize,
    /// Median host time between the end of one collective's launch and the next launch.
    pub(crate) host_gap_median_us: Option<f64>,
    /// The traced process's OS pid(s), from its CPU events.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) host_pids: Vec<u32>,
    /// Its host, from a `<host>_<pid>.<time>.pt.trace.json` file name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) host: Option<String>,
    /// The NCCL log's process matched to it by pid (`host:pid`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) log_process: Option<String>,
}

/// The step, median and spread over the steps in the trace (mean over ranks per step).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepSummary {
    pub steps: usize,
    pub(crate) collectives_per_step: usize,
    /// `123 all_reduce + 1 all_gather`, for the text; the JSON carries the same as numbers
    /// (the analysis's `sequence`, each op with its `per_step` count).
    #[serde(skip)]
    pub(crate) pattern: String,
    pub step_us: Spread,
    /// Collective kernels' time (in-kernel, what a profiler shows).
    pub(crate) collectives_us: Spread,
    /// The part of it that is the transfer (the last rank's kernel), when two ranks or more.
    pub(crate) transfer_us: Option<Spread>,
    /// The part of it spent waiting for the last rank.
    pub(crate) waiting_us: Option<Spread>,
    /// Waiting as a share of the collectives' in-kernel time, over every step.
    pub(crate) waiting_share: Option<Spread>,
    pub(crate) compute_us: Spread,
    pub(crate) idle_us: Spread,
    pub(crate) eager_steps: usize,
    pub(crate) graph_steps: usize,
    pub(crate) unknown_mode_steps: usize,
    /// The step whose time is the median, whole: its parts add up (medians of parts do not).
    pub(crate) typical: TypicalStep,
}

/// One step's figures (mean over ranks), chosen as the step of median duration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct TypicalStep {
    /// Index among the steps.
    pub(crate) index: usize,
    pub(crate) step_us: f64,
    /// Mean over ranks of the collectives' in-kernel time (= transfer + waiting when split).
    pub(crate) collectives_us: f64,
    pub(crate) transfer_us: Option<f64>,
    pub(crate) waiting_us: Option<f64>,
    pub(crate) compute_us: f64,
    pub(crate) idle_us: f64,
}

impl StepSummary {
    pub(crate) fn mode_words(&self) -> String {
        match (self.eager_steps, self.graph_steps) {
            (e, 0) if e > 0 => StepMode::Eager.words().into(),
            (0, g) if g > 0 => StepMode::Graph.words().into(),
            (0, 0) => StepMode::Unknown.words().into(),
            (e, g) => format!("{e} steps eager, {g} from a CUDA graph"),
        }
    }
}

/// One row of the step's collective sequence, grouped like `plan`'s table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeqGroup {
    pub op: String,
    pub(crate) dtype: Option<String>,
    pub(crate) elements: Option<u64>,
    pub(crate) bytes: Option<u64>,
    pub(crate) group_size: Option<u64>,
    pub(crate) per_step: usize,
    pub(crate) size_from: SizeFrom,
    pub(crate) algo: Option<String>,
    pub(crate) proto: Option<String>,
    /// `nccl` or the custom kernel that ran it.
    pub(crate) implementation: String,
}

/// Attribution over the whole trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceAttribution {
    /// Collectives matched on every rank.
    pub matched: usize,
    /// Ranks in the order of `Aggregate`'s vectors.
    pub(crate) ranks: Vec<usize>,
    pub total: Aggregate,
    /// The straggler with its real rank number.
    pub straggler: Option<Straggler>,
    /// Matched collectives in which one rank's kernel ended before another rank's began:
    /// impossible for one collective on one clock (clocks apart, or a wrong match).
    pub impossible_overlaps: usize,
}

/// The whole analysis (the `result` of the JSON record).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    pub(crate) files: Vec<String>,
    pub(crate) skipped: Vec<Skipped>,
    pub world_size: Option<usize>,
    pub ranks: Vec<RankSummary>,
    /// Whether start times are comparable across ranks (one host).
    pub(crate) same_clock: bool,
    pub step_rule: String,
    /// The engine's step marker that cut the steps (no `ProfilerStep#` span), when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) step_marker: Option<super::extract::StepMarkerUsed>,
    pub step: Option<StepSummary>,
    pub sequence: Vec<SeqGroup>,
    pub attribution: Option<TraceAttribution>,
    pub diagnosis: Vec<String>,
    pub notes: Vec<String>,
    pub(crate) nccl_log: Option<LogSummary>,
    /// Known traps ([`super::traps`], the table `explain` checks) that this trace's own
    /// evidence proves.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) traps: Vec<TrapFound>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) against_plan: Option<super::plan_diff::PlanDiff>,
    #[serde(skip)]
    pub rank_traces: Vec<RankTrace>,
}

/// A known trap found in a trace: one row of the table ([`super::traps`]) with the evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct TrapFound {
    pub(crate) id: String,
    pub(crate) name: String,
    /// The evidence, from this trace.
    pub(crate) detail: String,
    /// Where the trap's rule comes from.
    pub(crate) source: String,
}

/// Formats microseconds as ms (or us below 1 ms).
pub(crate) fn ms(us: f64) -> String {
    if us.abs() >= 10_000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else if us.abs() >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.1} us")
    }
}

/// The identity of each collective across ranks: (communicator, c10d's sequence number) when
/// the trace has it (the same on every rank, even if the profiles start at different
/// collectives), else (communicator, position among that communicator's collectives).
fn keys<'a>(r: &'a RankTrace, comms: &mut HashMap<&'a str, u32>) -> Vec<(u32, u64)> {
    let mut ord: HashMap<u32, u64> = HashMap::new();
    let use_seq = r.collectives.iter().all(|c| c.seq.is_some());
    r.collectives
        .iter()
        .map(|c| {
            let n = comms.len() as u32;
            let id = *comms.entry(c.comm.as_str()).or_insert(n);
            let k = ord.entry(id).or_insert(0);
            *k += 1;
            match (use_seq, c.seq) {
                (true, Some(q)) => (id, q as u64),
                _ => (id, *k - 1),
            }
        })
        .collect()
}

/// Matches collectives across ranks: for each collective of the first rank, its index on every
/// rank (None where a rank lacks it).
fn matches(ranks: &[RankTrace]) -> Vec<Vec<Option<usize>>> {
    let mut comms: HashMap<&str, u32> = HashMap::new();
    let first = keys(&ranks[0], &mut comms);
    let maps: Vec<HashMap<(u32, u64), usize>> = ranks
        .iter()
        .map(|r| {
            keys(r, &mut comms)
                .into_iter()
                .enumerate()
                .map(|(i, k)| (k, i))
                .collect()
        })
        .collect();
    first
        .into_iter()
        .map(|k| maps.iter().map(|m| m.get(&k).copied()).collect())
        .collect()
}

fn timing(c: &Collective) -> Option<RankTiming> {
    Some(RankTiming {
        start_us: c.gpu_start_us?,
        dur_us: c.gpu_dur_us?,
    })
}

/// Analyses ranks sorted by rank. Errors (usage) when the traces cannot be of one run.
pub(crate) fn analyse(
    mut ranks: Vec<RankTrace>,
    sources: &[RankSource],
    skipped: Vec<Skipped>,
    multi_host: bool,
    log: Option<LogSummary>,
) -> anyhow::Result<Analysis> {
    let mut order: Vec<usize> = (0..ranks.len()).collect();
    order.sort_by_key(|&i| ranks[i].rank);
    let sources: Vec<RankSource> = order.iter().map(|&i| sources[i]).collect();
    ranks = order.into_iter().map(|i| ranks[i].clone()).collect();
    let mut notes = rank_notes(&ranks);
    let world_size = one_run(&ranks)?;
    if let Some(w) = world_size {
        if ranks.len() < w && w > 1 {
            notes.push(format!(
                "{} of {w} ranks' traces given: transfer and waiting are split among those only",
                ranks.len()
            ));
        }
    }

    // Attribution.
    let n = ranks.len();
    let all_timed = ranks.iter().all(|r| r.gpu_timed);
    let mut same_clock = !multi_host;
    let (per_coll, attribution) = if n >= 2 && all_timed {
        attribute_ranks(&ranks, &mut same_clock, &mut notes)
    } else {
        (Vec::new(), None)
    };
    if !same_clock {
        notes.push("ranks on different hosts: start skew and the last rank are unknown; transfer and waiting come from durations".into());
    }

    let r0 = &ranks[0];
    let step = step_summary(&ranks, &per_coll, attribution.is_some());
    let sequence = sequence_of(r0);
    let summaries = rank_summaries(&ranks, &sources, &per_coll, attribution.as_ref());
    let mut a = Analysis {
        files: ranks.iter().map(|r| r.file.clone()).collect(),
        skipped,
        world_size,
        ranks: summaries,
        same_clock,
        step_rule: r0.step_rule.clone(),
        step_marker: r0.step_marker.clone(),
        step,
        sequence,
        attribution,
        diagnosis: Vec::new(),
        notes,
        nccl_log: log,
        traps: Vec::new(),
        against_plan: None,
        rank_traces: ranks,
    };
    a.diagnosis = diagnose(&a);
    Ok(a)
}

/// Every rank's own notes, each prefixed with its rank, a note that ends like an earlier one
/// once.
fn rank_notes(ranks: &[RankTrace]) -> Vec<String> {
    let mut notes: Vec<String> = Vec::new();
    for r in ranks {
        for n in &r.notes {
            let line = format!("rank {}: {n}", r.rank);
            if !notes.iter().any(|x| x.ends_with(n.as_str())) {
                notes.push(line);
            }
        }
    }
    notes
}

/// The ranks' world size (when a trace says it), or a usage error when the traces cannot be of
/// one run: different world sizes, a rank outside the world, different numbers of steps.
fn one_run(ranks: &[RankTrace]) -> anyhow::Result<Option<usize>> {
    let ws: Vec<(usize, &str)> = ranks
        .iter()
        .filter_map(|r| r.world_size.map(|w| (w, r.file.as_str())))
        .collect();
    if let Some(bad) = ws.iter().find(|x| x.0 != ws[0].0) {
        crate::usage_bail!(
            "'{}' has world size {} but '{}' has {}: traces of different runs; give the traces of one run",
            bad.1, bad.0, ws[0].1, ws[0].0
        );
    }
    let world_size = ws.first().map(|x| x.0);
    if let Some(w) = world_size {
        if let Some(r) = ranks.iter().find(|r| r.rank >= w) {
            crate::usage_bail!("'{}': rank {} is outside world size {w}", r.file, r.rank);
        }
    }
    if ranks.len() > 1 {
        let n0 = ranks[0].steps.len();
        if let Some(r) = ranks.iter().find(|r| r.steps.len() != n0) {
            crate::usage_bail!(
                "'{}' holds {} steps but '{}' holds {}: traces of different runs (or profiled over different windows); profile all ranks together",
                r.file,
                r.steps.len(),
                ranks[0].file,
                n0
            );
        }
    }
    Ok(world_size)
}

/// Each collective of the first rank matched on every rank and its time split into transfer
/// and waiting (None where a rank lacks it), with the total. Clocks found to be apart clear
/// `same_clock`; what looks wrong is added to `notes`.
fn attribute_ranks(
    ranks: &[RankTrace],
    same_clock: &mut bool,
    notes: &mut Vec<String>,
) -> (Vec<Option<Attribution>>, Option<TraceAttribution>) {
    let n = ranks.len();
    let m = matches(ranks);
    let timings: Vec<Option<Vec<RankTiming>>> = m
        .iter()
        .map(|idx| {
            idx.iter()
                .enumerate()
                .map(|(r, i)| i.and_then(|i| timing(&ranks[r].collectives[i])))
                .collect()
        })
        .collect();
    // Clocks far apart cannot be one host's.
    let skews: Vec<f64> = timings
        .iter()
        .flatten()
        .map(|t| last_start(t) - t.iter().map(|x| x.start_us).fold(f64::INFINITY, f64::min))
        .collect();
    if *same_clock && Spread::of(&skews).is_some_and(|s| s.median > 1e6) {
        *same_clock = false;
        notes.push("the ranks' clocks differ by more than a second: treated as different hosts (durations only, skew unknown)".into());
    }
    let impossible_overlaps = if *same_clock {
        timings
            .iter()
            .flatten()
            .filter(|t| {
                let first_end = t
                    .iter()
                    .map(|x| x.start_us + x.dur_us)
                    .fold(f64::INFINITY, f64::min);
                first_end < last_start(t)
            })
            .count()
    } else {
        0
    };
    if impossible_overlaps > 0 {
        notes.push(format!(
            "{impossible_overlaps} of {} matched collectives have one rank's kernel ending before another rank's starts, which one collective on one clock cannot do: the ranks' clocks differ (give --multi-host) or the collectives are matched wrongly; start skew and the last rank are not to be trusted",
            timings.iter().flatten().count()
        ));
    }
    let per: Vec<Option<Attribution>> = timings
        .iter()
        .map(|t| t.as_ref().map(|t| attribute(t, *same_clock)))
        .collect();
    let got: Vec<Attribution> = per.iter().flatten().cloned().collect();
    let total = aggregate(&got, n);
    let straggler = total.straggler.clone().map(|mut s| {
        s.rank = ranks[s.rank].rank;
        s
    });
    let unmatched = per.len() - got.len();
    if unmatched > 0 {
        notes.push(format!(
            "{unmatched} collectives of rank {} have no counterpart on every rank",
            ranks[0].rank
        ));
    }
    (
        per,
        Some(TraceAttribution {
            matched: got.len(),
            ranks: ranks.iter().map(|r| r.rank).collect(),
            total,
            straggler,
            impossible_overlaps,
        }),
    )
}

/// The latest start of one collective's kernels over the ranks.
fn last_start(t: &[RankTiming]) -> f64 {
    t.iter()
        .map(|x| x.start_us)
        .fold(f64::NEG_INFINITY, f64::max)
}

/// Steps: per step k, the mean over ranks; transfer and waiting per step when the collectives
/// were `attributed` (`per_coll`). None without steps.
fn step_summary(
    ranks: &[RankTrace],
    per_coll: &[Option<Attribution>],
    attributed: bool,
) -> Option<StepSummary> {
    let n = ranks.len();
    let r0 = &ranks[0];
    let nsteps = r0.steps.len();
    if nsteps == 0 {
        return None;
    }
    // per step, the mean over ranks of `f`
    let mean_over = |f: fn(&super::extract::Step) -> f64| -> Vec<f64> {
        (0..nsteps)
            .map(|k| ranks.iter().map(|r| f(&r.steps[k])).sum::<f64>() / n as f64)
            .collect()
    };
    let dur = mean_over(|s| s.dur_us);
    let coll = mean_over(|s| s.collectives_us);
    let comp = mean_over(|s| s.compute_us);
    let idle = mean_over(|s| s.idle_us);
    let (mut tr, mut wa, mut ik) = (Vec::new(), Vec::new(), Vec::new());
    if attributed {
        for s in &r0.steps {
            let items: Vec<Attribution> =
                per_coll[s.first..s.end].iter().flatten().cloned().collect();
            let g = aggregate(&items, n);
            tr.push(g.transfer_us);
            wa.push(g.mean_waiting_us());
            ik.push(g.mean_in_kernel_us());
        }
    }
    let med = Spread::of(&dur).expect("steps").median;
    let k = (0..nsteps)
        .min_by(|&a, &b| (dur[a] - med).abs().total_cmp(&(dur[b] - med).abs()))
        .expect("steps");
    let typical = TypicalStep {
        index: k,
        step_us: dur[k],
        collectives_us: ik.get(k).copied().unwrap_or(coll[k]),
        transfer_us: tr.get(k).copied(),
        waiting_us: wa.get(k).copied(),
        compute_us: comp[k],
        idle_us: idle[k],
    };
    let count = |m: StepMode| r0.steps.iter().filter(|s| s.mode == m).count();
    let one = &r0.collectives[r0.steps[0].first..r0.steps[0].end];
    Some(StepSummary {
        steps: nsteps,
        collectives_per_step: r0.period.unwrap_or(one.len()),
        pattern: describe_period(one),
        step_us: Spread::of(&dur).expect("steps"),
        collectives_us: Spread::of(&coll).expect("steps"),
        transfer_us: Spread::of(&tr),
        waiting_us: Spread::of(&wa),
        waiting_share: Spread::of(
            &wa.iter()
                .zip(&ik)
                .filter(|(_, k)| **k > 0.0)
                .map(|(w, k)| w / k)
                .collect::<Vec<f64>>(),
        ),
        compute_us: Spread::of(&comp).expect("steps"),
        idle_us: Spread::of(&idle).expect("steps"),
        eager_steps: count(StepMode::Eager),
        graph_steps: count(StepMode::Graph),
        unknown_mode_steps: count(StepMode::Unknown),
        typical,
    })
}

/// Each rank's summary; its waiting per step from the collectives' attribution, when there is
/// one.
fn rank_summaries(
    ranks: &[RankTrace],
    sources: &[RankSource],
    per_coll: &[Option<Attribution>],
    attribution: Option<&TraceAttribution>,
) -> Vec<RankSummary> {
    let r0 = &ranks[0];
    ranks
        .iter()
        .enumerate()
        .map(|(pos, r)| {
            let st: Vec<f64> = r.steps.iter().map(|s| s.dur_us).collect();
            let ik: Vec<f64> = r.steps.iter().map(|s| s.collectives_us).collect();
            let wa: Vec<f64> = if attribution.is_some() {
                r0.steps
                    .iter()
                    .map(|s| {
                        per_coll[s.first..s.end]
                            .iter()
                            .flatten()
                            .map(|a| a.waiting_us[pos])
                            .sum()
                    })
                    .collect()
            } else {
                Vec::new()
            };
            RankSummary {
                rank: r.rank,
                file: r.file.clone(),
                rank_source: sources[pos],
                collectives: r.collectives.len(),
                steps: r.steps.len(),
                gpu_busy_us: r.gpu_busy_us,
                gpu_idle_us: r.gpu_idle_us,
                step_median_us: Spread::of(&st).map(|s| s.median),
                in_kernel_median_us: Spread::of(&ik).map(|s| s.median),
                waiting_median_us: Spread::of(&wa).map(|s| s.median),
                host_gap_median_us: Spread::of(r.host_gaps_us.get(1..).unwrap_or(&[]))
                    .map(|s| s.median),
                host_pids: r.host_pids.clone(),
                host: r.host.clone(),
                log_process: r.log_process.clone(),
                times_last: attribution.map(|a| a.total.last_counts[pos]).unwrap_or(0),
            }
        })
        .collect()
}

/// The first complete step's collectives, grouped in order of first appearance.
fn sequence_of(r: &RankTrace) -> Vec<SeqGroup> {
    let one: &[Collective] = match r.steps.first() {
        Some(s) => &r.collectives[s.first..s.end],
        None => &r.collectives,
    };
    let mut g: Vec<SeqGroup> = Vec::new();
    for c in one {
        match g.iter_mut().find(|x| {
            x.op == c.op
                && x.dtype == c.dtype
                && x.elements == c.elements
                && x.group_size == c.group_size
                && x.implementation == c.implementation
        }) {
            Some(x) => x.per_step += 1,
            None => g.push(SeqGroup {
                op: c.op.clone(),
                dtype: c.dtype.clone(),
                elements: c.elements,
                bytes: c.bytes,
                group_size: c.group_size,
                per_step: 1,
                size_from: c.size_from,
                algo: c.algo.clone(),
                proto: c.proto.clone(),
                implementation: c.implementation.clone(),
            }),
        }
    }
    g
}

/// The sentences of the diagnosis.
pub(crate) fn diagnose(a: &Analysis) -> Vec<String> {
    let mut d = Vec::new();
    let Some(s) = &a.step else {
        d.push("No complete step found in the trace: nothing to diagnose per step.".into());
        return d;
    };
    let straggler = a.attribution.as_ref().and_then(|t| t.straggler.clone());
    let ty = &s.typical;
    let mut head = format!(
        "Median step (step {} of {}, measured from the trace): step {}; collectives {} in-kernel",
        ty.index + 1,
        s.steps,
        ms(ty.step_us),
        ms(ty.collectives_us)
    );
    if let (Some(t), Some(w)) = (ty.transfer_us, ty.waiting_us) {
        head += &format!(" = {} transfer + {} waiting", ms(t), ms(w));
    }
    head += &format!(
        "; compute kernels {}; GPU idle {}; {}",
        ms(ty.compute_us),
        ms(ty.idle_us),
        s.mode_words()
    );
    if let Some(st) = &straggler {
        head += &format!(
            "; rank {} last in {:.0}% of collectives (by {} median)",
            st.rank,
            100.0 * st.share,
            ms(st.median_lag_us)
        );
    }
    head.push('.');
    d.push(head);
    let eager = s.eager_steps > 0 && s.graph_steps == 0;
    match (ty.transfer_us, ty.waiting_us) {
        (Some(t), Some(w)) => {
            let share = if ty.collectives_us > 0.0 {
                w / ty.collectives_us
            } else {
                0.0
            };
            d.push(format!(
                "NCCL settings can change at most the transfer share ({} of {}).",
                ms(t),
                ms(ty.step_us)
            ));
            // Judged over every step, and never against the skew figures printed above: the
            // ranks arrive together only when no step waits for half its collective time and
            // the median skew is below the median transfer per collective.
            let (med, max) = s
                .waiting_share
                .as_ref()
                .map_or((share, share), |x| (x.median, x.max));
            let att = a.attribution.as_ref();
            let per_transfer = att
                .map(|t| t.total.transfer_us / t.matched.max(1) as f64)
                .unwrap_or(0.0);
            let skewed = att
                .and_then(|t| t.total.median_skew_us)
                .is_some_and(|k| k > per_transfer);
            let training = a.rank_traces.iter().any(|r| r.training.is_some());
            if a.attribution
                .as_ref()
                .is_some_and(|t| t.impossible_overlaps > 0)
            {
                d.push("Some matched kernels cannot overlap as they do on one clock (see the notes): the waiting and skew figures are not reliable until the clocks or the matching are fixed.".into());
            }
            if s.steps > 1 && (max >= 0.5) != (med >= 0.5) {
                d.push(format!(
                    "The waiting share varies over the steps: median {:.0}%, up to {:.0}% of the collectives' time.",
                    100.0 * med,
                    100.0 * max
                ));
            }
            let share = med.max(share);
            if (share >= 0.5 || skewed) && eager && training {
                d.push("The waiting comes from ranks launching at different times: this is a training job (backward/optimizer kernels), so look at what the late rank's host does before its collectives (data loading, host syncs, uneven work per rank); CUDA graphs (torch.compile mode=\"reduce-overhead\") also remove launch drift.".into());
            } else if (share >= 0.5 || skewed) && eager {
                d.push("The waiting comes from ranks launching at different times: run the verify from a CUDA graph (SGLang: check that the verify batch size is among the captured sizes; the decode log's `cuda graph: False` means it ran eagerly).".into());
            } else if share >= 0.5 || skewed {
                let who = straggler
                    .as_ref()
                    .map(|st| format!("rank {} starts late", st.rank))
                    .unwrap_or_else(|| "the ranks start at different times".into());
                d.push(format!(
                    "The waiting comes from ranks arriving at different times ({who}) even though the steps run from a CUDA graph: look at what that rank's host does before it launches the step."
                ));
            } else {
                d.push("The ranks arrive nearly together: the collectives' time is mostly transfer, which NCCL's protocol, algorithm and channel settings and the link decide (`verifybench sweep` measures them on this machine).".into());
            }
        }
        _ => {
            if a.ranks.len() == 1 {
                d.push("One rank's trace: its in-kernel time cannot be split into transfer and waiting; give the traces of every rank of the same run.".into());
            } else {
                d.push("Collectives were not timed on the GPU on every rank, so transfer and waiting cannot be split.".into());
            }
            if eager {
                d.push("The steps ran eagerly: if the ranks drift, each collective waits for the slowest; a CUDA graph removes that.".into());
            }
        }
    }
    if let Some(r) = a.rank_traces.first() {
        if r.unknown_collective_kernels > r.collectives.len() {
            d.push(format!(
                "Most collective-looking kernels ({} against {} known collectives on rank {}) are neither NCCL's nor in the table of custom kernels: the sequence above is partial, and no schedule is exported from it.",
                r.unknown_collective_kernels,
                r.collectives.len(),
                r.rank
            ));
        }
    }
    if a.sequence.iter().any(|g| g.size_from == SizeFrom::Unknown) {
        d.push("Some collective sizes are unknown (the trace has no record_param_comms arguments for them); give NCCL's log (--nccl-log, NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL) for sizes.".into());
    }
    if let (Some(log), Some(s)) = (&a.nccl_log, &a.step) {
        // rank 0's own process when the log holds it (matched by pid), else the mean
        let per_proc = match a.rank_traces.first().and_then(|r| r.log_own.as_ref()) {
            Some(own) => own.calls_of("all_reduce") as f64,
            None => log.calls_per_process("all_reduce"),
        };
        let in_trace = a
            .rank_traces
            .first()
            .map(|r| {
                r.collectives
                    .iter()
                    .filter(|c| c.op == "all_reduce")
                    .count() as f64
            })
            .unwrap_or(0.0);
        if in_trace > 0.0 && per_proc < 0.5 * in_trace && s.graph_steps > 0 {
            d.push(format!("The NCCL log has {per_proc:.0} all-reduce calls per process against {in_trace:.0} kernels in the trace: NCCL logged them once, at CUDA graph capture."));
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ms_formatting() {
        assert_eq!(ms(30_100.0), "30.1 ms");
        assert_eq!(ms(2_900.0), "2.90 ms");
        assert_eq!(ms(24.0), "24.0 us");
    }
}
