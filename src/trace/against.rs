//! The trace as a workload: one step's collective sequence as a verifybench schedule file
//! (`trace --export-schedule`), and its difference from the config-derived schedule
//! (`trace --against-plan`), which checks `plan` against what a real server ran.
//!
//! A trace has no weights, so the exported schedule holds the collectives only (no compute
//! ops); its host gaps are aligned with those collectives: the host time between the end of
//! one collective's launch and the start of the next (which includes the server's own compute
//! launches in between), median over the steps. With the traces of every rank of the group,
//! each rank's own gaps are written too (`host_gaps_per_rank_us`), so that a replay keeps the
//! skew between the ranks, and with it the waiting that skew causes.

use super::analysis::Analysis;
use super::extract::{Collective, RankTrace, SizeFrom};
use super::names::{schedule_dtype, schedule_kind};
use crate::error::usage;
use crate::evidence::checks::{TracedGroup, TracedStep};
use crate::measure::attribution::Spread;
use crate::model::schedule_file::ScheduleFile;
use crate::model::{CollectiveKind, DType, Op, Phase, Routing, Schedule};

pub(crate) use super::plan_diff::{DiffRow, PlanDiff};

/// The first rank's collectives of its median-length step (the first complete step).
fn one_step(a: &Analysis) -> anyhow::Result<(&[Collective], usize)> {
    let r = a
        .rank_traces
        .first()
        .ok_or_else(|| usage("no rank to take a step from"))?;
    if r.unknown_collective_kernels > r.collectives.len() {
        return Err(usage(format!(
            "'{}': {} kernels look like collectives but are neither NCCL's nor known custom kernels, against {} known collectives: a schedule of the known ones would be partial, so none is exported",
            r.file,
            r.unknown_collective_kernels,
            r.collectives.len()
        )));
    }
    let s = r
        .steps
        .first()
        .ok_or_else(|| usage(format!("'{}': no complete step found to export", r.file)))?;
    Ok((&r.collectives[s.first..s.end], s.first))
}

/// The schedule's `count` (NCCL's count, see [`crate::model::collective`]) of a collective
/// whose `record_param_comms` gave `elements` (`In msg nelems`: the input tensor's elements)
/// on a group of `group` ranks. PyTorch's all-to-all input holds one block per rank, so its
/// per-peer count is `elements / group`; every other op's count is its input's.
pub(crate) fn schedule_count(
    kind: CollectiveKind,
    elements: u64,
    group: Option<u64>,
) -> Result<u64, String> {
    if kind != CollectiveKind::AllToAll {
        return Ok(elements);
    }
    match group {
        Some(g) if g >= 1 && elements % g == 0 => Ok(elements / g),
        Some(g) if g >= 1 => Err(format!(
            "an all-to-all of {elements} elements does not split into {g} equal blocks (an uneven all_to_all_single cannot be replayed)"
        )),
        _ => Err(
            "an all-to-all whose group size the trace does not give (its per-peer count is unknown)"
                .into(),
        ),
    }
}

/// Positions as a person reads a list: `0, 3 and 5`, at most 12 of them (`... and 40 more`).
pub(crate) fn positions(p: &[usize]) -> String {
    let shown: Vec<String> = p.iter().take(12).map(|i| i.to_string()).collect();
    match (p.len(), shown.split_last()) {
        (0, _) | (_, None) => String::new(),
        (1, _) => shown[0].clone(),
        (n, _) if n > 12 => format!("{} and {} more", shown.join(", "), n - 12),
        (_, Some((last, rest))) => format!("{} and {last}", rest.join(", ")),
    }
}

/// One step of the trace as schedule ops (collectives only), and the positions whose size was
/// `assume_size` (`--assume-size BYTES`: the bytes of each input tensor of unknown size).
/// Collectives of unknown size without it refuse the export, all of them named by position.
pub(crate) fn schedule_ops(
    a: &Analysis,
    assume_size: Option<u64>,
) -> anyhow::Result<(Vec<Op>, Vec<usize>)> {
    let (colls, _) = one_step(a)?;
    let world = a.world_size.map(|w| w as u64);
    let unknown: Vec<usize> = colls
        .iter()
        .enumerate()
        .filter(|(_, c)| c.elements.is_none() || c.size_from == SizeFrom::Unknown)
        .map(|(i, _)| i)
        .collect();
    if !unknown.is_empty() && assume_size.is_none() {
        let ops: Vec<&str> = unknown
            .iter()
            .take(12)
            .map(|&i| colls[i].op.as_str())
            .collect();
        return Err(usage(format!(
            "{} of the {} collectives of the step have no known size (positions {}: {}{}); give --nccl-log (the run's NCCL COLL log) or --assume-size BYTES (the bytes of each one's input) so that the schedule can carry sizes",
            unknown.len(),
            colls.len(),
            positions(&unknown),
            ops.join(", "),
            if unknown.len() > 12 { ", ..." } else { "" }
        )));
    }
    let ops = colls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let kind = schedule_kind(&c.op).ok_or_else(|| {
                let why = if c.op == "send_recv" {
                    " (a point-to-point send/recv whose peers the trace does not give; PyTorch's all_to_all is exported when its record_param_comms names it)"
                } else {
                    ""
                };
                usage(format!(
                    "collective {i} of the step is a {}, which verifybench schedules cannot replay{why} (all_reduce, all_gather, reduce_scatter, broadcast, all_to_all)",
                    c.op
                ))
            })?;
            let dtype = c.dtype.as_deref().and_then(schedule_dtype).ok_or_else(|| {
                usage(format!(
                    "collective {i} of the step has dtype {}, which verifybench schedules cannot replay (bf16, f16, f32)",
                    c.dtype.as_deref().unwrap_or("unknown")
                ))
            })?;
            let elements = match (c.elements, c.size_from, assume_size) {
                (Some(n), s, _) if s != SizeFrom::Unknown => n,
                (_, _, Some(b)) if b > 0 && b % dtype.size() == 0 => b / dtype.size(),
                (_, _, b) => {
                    return Err(usage(format!(
                        "collective {i} of the step ({}, {}): --assume-size {} B is not a whole number of {} B elements",
                        c.op,
                        dtype.name(),
                        b.unwrap_or(0),
                        dtype.size()
                    )))
                }
            };
            let count = schedule_count(kind, elements, c.group_size.or(world))
                .map_err(|m| usage(format!("collective {i} of the step ({}): {m}", c.op)))?;
            Ok(Op::Collective {
                kind,
                dtype,
                count,
                bytes_per_rank: count * dtype.size(),
                site: "trace".into(),
                layer: None,
            })
        })
        .collect::<anyhow::Result<Vec<Op>>>()?;
    Ok((ops, unknown))
}

/// One rank's host gap before each of the `len` collectives of a step, median over its steps of
/// that length; `None` when it has no such step.
fn rank_gaps(r: &RankTrace, len: usize) -> Option<Vec<f64>> {
    let steps: Vec<_> = r.steps.iter().filter(|s| s.end - s.first == len).collect();
    if steps.is_empty() {
        return None;
    }
    Some(
        (0..len)
            .map(|j| {
                let v: Vec<f64> = steps.iter().map(|s| r.host_gaps_us[s.first + j]).collect();
                Spread::of(&v).map(|s| s.median).unwrap_or(0.0)
            })
            .collect(),
    )
}

/// Every rank's own gaps, indexed by rank, when the traces are those of ranks 0..tp-1 of one
/// group (tp >= 2), each once and each with a step of `len` collectives; else why not.
fn per_rank_gaps(a: &Analysis, len: usize, tp: u64) -> Result<Vec<Vec<f64>>, String> {
    let n = a.rank_traces.len();
    if n < 2 {
        return Err("one rank's trace".into());
    }
    let mut by_rank: Vec<&RankTrace> = a.rank_traces.iter().collect();
    by_rank.sort_by_key(|r| r.rank);
    if tp != n as u64 || by_rank.iter().enumerate().any(|(i, r)| r.rank != i) {
        return Err(format!(
            "the traces are of ranks {:?}, not of every rank 0..{} of the group",
            by_rank.iter().map(|r| r.rank).collect::<Vec<_>>(),
            tp.saturating_sub(1)
        ));
    }
    by_rank
        .iter()
        .map(|r| {
            rank_gaps(r, len)
                .ok_or_else(|| format!("rank {} has no step of {len} collectives", r.rank))
        })
        .collect()
}

/// The schedule file of one step without `--assume-size` (the tests' export).
#[cfg(test)]
pub(crate) fn schedule_file(a: &Analysis, tokens: u64) -> anyhow::Result<ScheduleFile> {
    schedule_file_assuming(a, tokens, None).map(|(f, _)| f)
}

/// The schedule file of one step: collectives, per-op host gaps (median over steps), origin.
/// `tokens`: the tokens per forward when known (the trace does not say; 0 = unknown).
/// `assume_size`: `--assume-size BYTES` for the collectives of unknown size; the positions (in
/// the step) it was taken for are returned, and the origin names them too.
pub(crate) fn schedule_file_assuming(
    a: &Analysis,
    tokens: u64,
    assume_size: Option<u64>,
) -> anyhow::Result<(ScheduleFile, Vec<usize>)> {
    let (ops, assumed) = schedule_ops(a, assume_size)?;
    let r = &a.rank_traces[0];
    let len = ops.len();
    let gaps = rank_gaps(r, len).unwrap_or_else(|| vec![0.0; len]);
    let dtype = ops
        .iter()
        .find_map(|o| match o {
            Op::Collective {
                kind: CollectiveKind::AllReduce,
                dtype,
                ..
            } => Some(*dtype),
            _ => None,
        })
        .unwrap_or(DType::Bf16);
    let tp = r
        .collectives
        .iter()
        .find_map(|c| c.group_size)
        .or(a.world_size.map(|w| w as u64))
        .unwrap_or(1);
    let per_rank = per_rank_gaps(a, len, tp);
    let file = crate::evidence::short_name(std::path::Path::new(&r.file));
    Ok((ScheduleFile {
        schedule: Schedule {
            model: format!("trace:{file}"),
            phase: Phase::Verify,
            tp,
            tokens,
            dtype,
            routing: Routing::Uniform,
            experts_per_layer: 0.0,
            ops,
            config_reading: None,
            facts: Default::default(),
        },
        host_gaps_us: Some(gaps),
        origin: Some(format!(
            "collectives of one step of rank {} in {file} ({} steps in the trace); compute ops left out (a trace has no weight sizes); host gaps: median over the steps of the host time between consecutive collective launches; {}{}",
            r.rank,
            r.steps.len(),
            match &per_rank {
                Ok(v) => format!("each of the {} ranks' own gaps in host_gaps_per_rank_us (replayed per rank, so the skew between ranks comes back; the GPU compute between collectives is not in the schedule, so a replay's waiting also takes in the compute time the trace's early ranks spent before each collective)", v.len()),
                Err(why) => format!("no per-rank gaps ({why}): every rank replays these"),
            },
            match (assumed.is_empty(), assume_size) {
                (false, Some(b)) => format!(
                    "; sizes ASSUMED (--assume-size {b} B, not in the trace) at positions {}",
                    positions(&assumed)
                ),
                _ => String::new(),
            }
        )),
        host_gaps_per_rank_us: per_rank.ok(),
    }, assumed))
}

/// [`schedule_file_assuming`] with the tp the user gives (`trace --tp N`): it must equal the trace's
/// group size when that is above 1; a one-rank trace (group size 1, e.g. a TP-N schedule's
/// per-rank sizes replayed on one GPU) takes it, and its origin says so.
pub(crate) fn schedule_file_at_tp(
    a: &Analysis,
    tokens: u64,
    tp: Option<u64>,
    assume_size: Option<u64>,
) -> anyhow::Result<(ScheduleFile, Vec<usize>)> {
    let (mut f, assumed) = schedule_file_assuming(a, tokens, assume_size)?;
    let Some(tp) = tp else {
        return Ok((f, assumed));
    };
    if f.schedule.tp > 1 && f.schedule.tp != tp {
        return Err(usage(format!(
            "--tp {tp} but the trace's collectives have group size {}: drop --tp (the exported schedule takes the trace's)",
            f.schedule.tp
        )));
    }
    if f.schedule.tp != tp {
        f.schedule.tp = tp;
        if let Some(o) = &mut f.origin {
            o.push_str(&format!(
                "; tp {tp} from --tp (the trace ran its collectives on one rank)"
            ));
        }
    }
    Ok((f, assumed))
}

/// The trace as a message names it: the folder of its files when they share one
/// (`tests/data/traces/param-dlrm-8ranks (8 files)`), else the files.
fn trace_name(files: &[String]) -> String {
    let parent = |f: &String| std::path::Path::new(f).parent().map(|p| p.to_path_buf());
    match files.first().and_then(parent) {
        Some(dir) if files.len() > 1 && files.iter().all(|f| parent(f).as_ref() == Some(&dir)) => {
            format!("{} ({} files)", dir.display(), files.len())
        }
        _ => files.join(", "),
    }
}

/// One step of the trace as the evidence checks read it ([`crate::evidence::checks`]): the
/// first complete step's collectives grouped by kind and size ([`Analysis::sequence`]), sizes
/// only where the trace gives them, and the kernel that says the job trained, if any.
pub(crate) fn traced_step(a: &Analysis) -> TracedStep {
    TracedStep {
        name: trace_name(&a.files),
        groups: a
            .sequence
            .iter()
            .map(|g| TracedGroup {
                op: g.op.clone(),
                per_step: g.per_step,
                bytes: g.bytes.filter(|_| g.size_from != SizeFrom::Unknown),
                group_size: g.group_size,
            })
            .collect(),
        training: a.rank_traces.iter().find_map(|r| r.training.clone()),
        world_size: a.world_size,
    }
}

fn key(o: &Op) -> Option<(String, String, u64)> {
    match o {
        Op::Collective {
            kind,
            dtype,
            bytes_per_rank,
            ..
        } => Some((kind.name().into(), dtype.name().into(), *bytes_per_rank)),
        _ => None,
    }
}

fn trace_key(c: &Collective) -> (String, String, u64) {
    (
        c.op.clone(),
        c.dtype.clone().unwrap_or_else(|| "?".into()),
        c.bytes.unwrap_or(0),
    )
}

/// Diffs one step of the trace against `plan` (counts, sizes, order).
pub(crate) fn against_plan(a: &Analysis, plan: &Schedule) -> anyhow::Result<PlanDiff> {
    let (colls, _) = one_step(a)?;
    let p: Vec<(String, String, u64)> = plan.ops.iter().filter_map(key).collect();
    let t: Vec<(String, String, u64)> = colls.iter().map(trace_key).collect();
    let mut rows: Vec<DiffRow> = Vec::new();
    for (k, side) in p.iter().map(|k| (k, 0)).chain(t.iter().map(|k| (k, 1))) {
        let row = match rows
            .iter_mut()
            .find(|r| r.op == k.0 && r.dtype == k.1 && r.bytes_per_rank == k.2)
        {
            Some(r) => r,
            None => {
                rows.push(DiffRow {
                    op: k.0.clone(),
                    dtype: k.1.clone(),
                    bytes_per_rank: k.2,
                    plan: 0,
                    trace: 0,
                });
                rows.last_mut().expect("pushed")
            }
        };
        if side == 0 {
            row.plan += 1;
        } else {
            row.trace += 1;
        }
    }
    let fmt = |k: &(String, String, u64)| format!("{} {} {} B", k.0, k.1, k.2);
    let first_difference = (0..p.len().max(t.len())).find_map(|i| match (p.get(i), t.get(i)) {
        (Some(x), Some(y)) if x == y => None,
        (x, y) => Some((
            i,
            x.map(fmt).unwrap_or_else(|| "(end)".into()),
            y.map(fmt).unwrap_or_else(|| "(end)".into()),
        )),
    });
    Ok(PlanDiff {
        plan: format!(
            "{} TP={} T={} {:?}",
            plan.model, plan.tp, plan.tokens, plan.phase
        )
        .to_lowercase(),
        plan_collectives: p.len(),
        trace_collectives: t.len(),
        same: first_difference.is_none(),
        first_difference,
        rows,
    })
}
