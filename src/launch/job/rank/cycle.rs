//! `verify --phase cycle` on one rank: the cycle's forwards loaded together (the decode step,
//! each distinct draft forward, the verify; one compute sized for the largest, each forward
//! streaming with its own token count), then per (graph, mode) run four configurations, each
//! timed and checked exactly: the plain decode step, the k draft forwards, the verify, and the
//! cycle (the draft forwards, then the verify).
//!
//! Graph replay captures as the engines do, each part in graphs of its own launched in order:
//! the first draft forward (SGLang's draft extend over the verified tokens,
//! `EAGLEDraftExtendCudaGraphRunner`), the other k-1 draft steps in one graph (SGLang's
//! `EAGLEDraftCudaGraphRunner`: one graph for the whole draft loop), the verify (the target's
//! graph). vLLM replays one graph per draft forward: k-2 more graph launches per cycle than
//! this. Eager replay launches every kernel and collective from the host, in order.

use super::*;
use crate::launch::job::{CycleConfig, CycleJob, CYCLE_CONFIGS};
use crate::model::cycle::draft_groups;

/// Loads the cycle of `job` (`c` beside its verify) and times its configurations into
/// `result`.
pub(super) fn run_cycle(
    rank: &Rank,
    job: &Job,
    c: &CycleJob,
    result: &mut RankResult,
    progress: &mut impl FnMut(usize),
) -> anyhow::Result<()> {
    let Job::Verify {
        schedule: verify,
        runs,
        iters,
        warmup,
        launches_per_layer,
        host_gaps,
        ..
    } = job
    else {
        unreachable!("a verify job");
    };
    let drafts = draft_groups(&c.draft);
    let all: Vec<&Schedule> = std::iter::once(&c.decode)
        .chain(drafts.iter().map(|d| d.0))
        .chain(std::iter::once(verify))
        .collect();
    check_memory(&rank.gpu, &all, rank.setup.nranks, rank.comm.is_some())?;
    let colls: Vec<Vec<Coll>> = all
        .iter()
        .map(|s| schedule_colls(rank, s))
        .collect::<anyhow::Result<_>>()?;
    let planned: Vec<(Vec<Step>, Vec<usize>)> = all
        .iter()
        .map(|s| plan_steps_of_ops(s, *launches_per_layer))
        .collect();
    let most = all.iter().map(|s| s.tokens).max().unwrap_or(1);
    let verify_steps = &planned.last().expect("the verify").0;
    let compute = load_compute(rank, job, most, verify_steps, result)?;
    let loaded: Vec<LoadedVerify> = all
        .iter()
        .zip(planned)
        .zip(&colls)
        .map(|((s, (steps, step_of_op)), cl)| LoadedVerify {
            rank,
            schedule: s,
            zeros: vec![0.0; steps.len()],
            steps,
            step_of_op,
            colls: cl,
            compute: compute.as_ref(),
            host_gaps,
            iters: *iters,
            warmup: *warmup,
            timing_pass: 0,
        })
        .collect();
    let last = loaded.len() - 1;
    let draft: Vec<(&LoadedVerify, u64)> = loaded[1..last]
        .iter()
        .zip(drafts.iter().map(|d| d.1))
        .collect();
    let mut cycle = draft.clone();
    cycle.push((&loaded[last], 1));
    for &(graph, mode) in runs {
        for cfg in CYCLE_CONFIGS {
            let seq: &[(&LoadedVerify, u64)] = match cfg {
                CycleConfig::Decode => &[(&loaded[0], 1)],
                CycleConfig::Draft => &draft,
                CycleConfig::Verify => &[(&loaded[last], 1)],
                CycleConfig::Cycle => &cycle,
            };
            let (samples, checked) = time_sequence(rank, seq, graph, mode)?;
            rank.async_error()?;
            push_config(result, samples, checked, vec![]);
            progress(result.samples.len());
        }
    }
    Ok(())
}

/// Times `seq` (each forward replayed as many times in a row as it says) in `mode`, from
/// graphs (one per forward group and buffer slot, launched in order) or eagerly, then checks
/// every collective's slots exactly.
fn time_sequence(
    rank: &Rank,
    seq: &[(&LoadedVerify, u64)],
    graph: bool,
    mode: Mode,
) -> anyhow::Result<(Vec<f64>, Checked)> {
    let runs: Vec<(VerifyRun, u64)> = seq
        .iter()
        .map(|&(v, n)| {
            let r = VerifyRun {
                v,
                graph,
                mode,
                imp: Impl::Nccl,
                launches: vec![],
            };
            (r, n)
        })
        .collect();
    let colls: Vec<&[Coll]> = seq.iter().map(|(v, _)| v.colls).collect();
    let (iters, warmup) = (seq[0].0.iters, seq[0].0.warmup);
    let done = warmup + iters;
    let samples = if graph {
        // graph g of each group replays its forwards on buffer slot g
        let gs: Vec<Vec<Graph>> = runs
            .iter()
            .map(|(r, n)| {
                capture_slots(&rank.gpu, |g| {
                    for _ in 0..*n {
                        r.replay(&r.v.zeros, None, g)?;
                    }
                    Ok(())
                })
            })
            .collect::<anyhow::Result<_>>()?;
        let launch = |it: u64| -> anyhow::Result<()> {
            for g in &gs {
                g[slots::graph_of(it)].launch()?;
            }
            Ok(())
        };
        let s = rank.time(iters, warmup, launch)?;
        rank.run_check(&colls, done, launch)?;
        s
    } else {
        let body = |it: u64| -> anyhow::Result<()> {
            for (r, n) in &runs {
                for _ in 0..*n {
                    r.replay(&r.v.zeros, None, slots::slot(it))?;
                }
            }
            Ok(())
        };
        let s = rank.time(iters, warmup, body)?;
        rank.run_check(&colls, done, body)?;
        s
    };
    let mut checked = Checked::default();
    if mode != Mode::Compute {
        for c in colls {
            checked += check_wrong(c, &rank.gpu, rank.setup.rank, rank.setup.nranks)?;
        }
    }
    Ok((samples, checked))
}
