//! The result record of a finished run: the ranks' samples combined per configuration, the
//! provenance (the workers' reports, the driver, the host's noise sources), the verify record
//! and the per-collective pass as a Chrome trace.

use crate::comm;
use crate::launch::job::{Job, RankResult};
use crate::measure::Summary;
use std::collections::BTreeMap;

use crate::record::{
    Body, Mode, Part, Provenance, RankTime, Record, RecordedWorkload, Source, StreamRate,
    VerifyResult, VerifyRun,
};

/// Per configuration: each sample's time over the ranks as `rank_time` says (the slowest
/// rank, or their mean), and the wrong elements of all ranks.
pub(crate) fn combine(
    results: &[RankResult],
    configs: usize,
    rank_time: RankTime,
) -> anyhow::Result<Vec<(Summary, u64)>> {
    let mut out = vec![];
    for c in 0..configs {
        let len = results
            .iter()
            .map(|r| r.samples.get(c).map_or(0, Vec::len))
            .min()
            .unwrap_or(0);
        let per_sample: Vec<f64> = (0..len)
            .filter_map(|i| {
                let ranks: Vec<f64> = results.iter().map(|r| r.samples[c][i]).collect();
                rank_time.reduce(&ranks)
            })
            .collect();
        let s = Summary::from_samples(&per_sample)
            .ok_or_else(|| anyhow::anyhow!("configuration {c} produced no timing samples"))?;
        let wrong = results
            .iter()
            .map(|r| r.wrong.get(c).copied().unwrap_or(0))
            .sum();
        out.push((s, wrong));
    }
    Ok(out)
}

/// States `rank_time` in the record: its field, and a note the header prints.
pub(super) fn state_rank_time(p: &mut Provenance, rank_time: RankTime) {
    p.rank_time = Some(rank_time);
    p.notes.push(format!("rank time: {}", rank_time.describe()));
}

/// Provenance of a run on GPUs, from the parent and what every worker reported.
pub(crate) fn provenance(launcher: &str, started: String, results: &[RankResult]) -> Provenance {
    let mut p = worker_provenance(launcher, started, results);
    p.driver_version = comm::device::driver_version()
        .or_else(comm::device::driver_cuda_version)
        .map(|v| match comm::device::driver_cuda_version() {
            Some(c) if !v.contains(&c) => format!("{v} (CUDA {c})"),
            _ => v,
        });
    p.nccl_version = p.nccl_version.or_else(comm::nccl::version);
    p.nccl_library = p
        .nccl_library
        .or_else(|| comm::libs::loaded_path("libnccl"));
    p
}

/// The part of [`provenance`] that comes from the workers' reports alone (no driver query).
fn worker_provenance(launcher: &str, started: String, results: &[RankResult]) -> Provenance {
    let mut p = Provenance::here("nccl", started);
    p.launcher = Some(launcher.into());
    p.gpus = results.iter().filter_map(|r| r.gpu.clone()).collect();
    p.nccl_version = results.first().and_then(|r| r.nccl_version.clone());
    p.nccl_library = results.first().and_then(|r| r.nccl_library.clone());
    p.worker_nccl = results.iter().map(RankResult::nccl).collect();
    p.workers = results.iter().map(RankResult::worker).collect();
    let init: Vec<String> = results.iter().map(|r| format!("{:.2}", r.init_s)).collect();
    p.notes
        .push(format!("NCCL init per rank (s): {}", init.join(", ")));
    p.notes.extend(host_notes(
        results,
        crate::launch::affinity::governors(std::path::Path::new("/")),
    ));
    p
}

/// The provenance notes on what makes timings noisy at the source: each rank's CPU affinity,
/// the CPU frequency governor and the GPUs' rated clocks (or that they are not available).
pub(crate) fn host_notes(results: &[RankResult], governor: Option<String>) -> Vec<String> {
    let aff: Vec<String> = results
        .iter()
        .map(|r| match &r.affinity {
            Some(f) => format!(
                "rank {}: {} ({})",
                r.rank,
                f.cpus.as_deref().unwrap_or("inherited"),
                f.note
            ),
            None => format!("rank {}: not reported", r.rank),
        })
        .collect();
    let clocks: Vec<String> = results
        .iter()
        .map(|r| match r.clocks_khz {
            Some((sm, mem)) => format!("rank {}: {} / {}", r.rank, sm / 1000, mem / 1000),
            None => format!("rank {}: not available", r.rank),
        })
        .collect();
    vec![
        format!("CPU affinity per rank: {}", aff.join("; ")),
        format!(
            "CPU frequency governor: {}",
            governor.unwrap_or_else(|| "not available (no cpufreq in sysfs)".into())
        ),
        format!(
            "GPU rated clocks per rank, SM / memory MHz (driver attributes CLOCK_RATE / MEMORY_CLOCK_RATE): {}",
            clocks.join("; ")
        ),
    ]
}

/// The provenance note of a replay with `--pdl`.
const PDL_NOTE: &str = "compute launches: programmatic dependent launch (--pdl): each streaming kernel lets the next be scheduled as its blocks retire and issues its first weight loads before it waits for the kernel before it; after a collective (which never triggers early) it starts as a plain launch";

/// Writes the per-collective pass of the first run that has one (eager before graph) as a
/// Chrome trace.
pub(crate) fn export_trace(
    job: &Job,
    results: &[RankResult],
    path: &std::path::Path,
) -> anyhow::Result<()> {
    let Job::Verify { schedule, runs, .. } = job else {
        anyhow::bail!("not a verify job");
    };
    let Some(c) = (0..runs.len()).find(|&c| {
        results
            .iter()
            .all(|r| r.passes.get(c).is_some_and(|p| !p.is_empty()))
    }) else {
        crate::usage_bail!(
            "--export-trace '{}': no run timed collectives per rank (mode compute, or one GPU); add --mode comm or full",
            path.display()
        );
    };
    let per_rank: Vec<_> = results.iter().map(|r| r.passes[c].clone()).collect();
    let tracks = crate::launch::timeline::chrome_tracks(&per_rank, schedule, runs[c].0);
    crate::trace::chrome::write_file(&tracks, results.len(), path)
}

/// The verify record of a finished verify job, with the provenance from `provenance` (called
/// once, after the checks: [`provenance`] on a run's GPUs).
pub(crate) fn verify_record(
    job: &Job,
    results: &[RankResult],
    rank_time: RankTime,
    provenance: impl FnOnce() -> Provenance,
) -> anyhow::Result<Record> {
    let Job::Verify {
        schedule,
        runs,
        iters,
        warmup,
        host_gaps,
        pdl,
        ..
    } = job
    else {
        anyhow::bail!("not a verify job");
    };
    let combined = combine(results, runs.len(), rank_time)?;
    let ncoll = schedule.n_collectives().max(1) as f64;
    let weights = schedule.weight_bytes_by_kind();
    let total_w = schedule.streamed_bytes().max(1) as f64;
    let vruns = runs
        .iter()
        .zip(combined)
        .enumerate()
        .map(|(c, (&(graph, mode), (s, wrong)))| {
            // Compute time per op kind, apportioned by the bytes each kind streams (the
            // kernels are memory-bound); the collectives are timed as a whole.
            let breakdown = if mode == Mode::Compute {
                weights
                    .iter()
                    .map(|(k, b)| Part {
                        name: format!("{} (by bytes)", k.name()),
                        us: s.median_us * *b as f64 / total_w,
                        count: schedule
                            .ops
                            .iter()
                            .filter(|o| matches!(o, crate::model::Op::Compute { kind, .. } if kind == k))
                            .count() as u64,
                    })
                    .collect()
            } else {
                vec![]
            };
            VerifyRun {
                graph,
                mode,
                per_collective_us: s.median_us / ncoll,
                per_verify: s,
                breakdown,
                wrong,
                iterations: *iters,
                warmup: *warmup,
                in_collective: {
                    let per_rank: Vec<_> = results
                        .iter()
                        .map(|r| r.passes.get(c).cloned().unwrap_or_default())
                        .collect();
                    crate::launch::timeline::attribute_pass(
                        &per_rank,
                        format!(
                            "measured in a separate pass after the headline timing (events around each collective{}); {}",
                            if graph { ", event-record nodes inside the graph" } else { "" },
                            crate::launch::timeline::ALIGNMENT
                        ),
                    )
                },
            }
        })
        .collect();
    let stream_gbps = results
        .iter()
        .filter_map(|r| r.stream_gbps)
        .reduce(f64::min);
    let mut notes = vec![];
    if !host_gaps.is_none() {
        notes.push(host_gaps.describe());
        if runs.iter().any(|r| r.0) {
            notes.push(
                "graph replay: no host gaps (a CUDA graph launches every kernel from the device)"
                    .into(),
            );
        }
    }
    let fixed = results
        .iter()
        .filter_map(|r| r.stream_fixed_us)
        .reduce(f64::max);
    let rates = slowest_rates(results);
    if !rates.is_empty() {
        notes.push(rates_note(&rates));
    } else if let (Some(bw), Some(fx)) = (stream_gbps, fixed) {
        use crate::launch::job::{plan_steps, stream_launches, FIXED_COST_LAUNCHES};
        let nops = stream_launches(&plan_steps(schedule, 0)).0;
        notes.push(format!(
            "compute prediction with a fixed cost per launch: {} B / {bw:.0} GB/s + {nops} streaming launches x {fx:.2} us ({FIXED_COST_LAUNCHES} back-to-back launches of the mean size against one launch of their bytes, same run) = {:.1} us",
            schedule.streamed_bytes(),
            schedule.streamed_bytes() as f64 / (bw * 1e3) + nops as f64 * fx
        ));
    }
    let body = VerifyResult {
        stream_gbps,
        predicted_compute_us: if rates.is_empty() {
            stream_gbps.map(|g| schedule.streamed_bytes() as f64 / (g * 1e3))
        } else {
            Some(rates.iter().map(StreamRate::predicted_us).sum())
        },
        stream_rates: rates,
        ..VerifyResult::of(RecordedWorkload::of(schedule), vruns)
    };
    Ok(measured(provenance(), rank_time, notes, *pdl, body))
}

/// A measured verify record: `p` with the rank time, `notes`, then the PDL note where it ran.
fn measured(
    mut p: Provenance,
    rank_time: RankTime,
    notes: Vec<String>,
    pdl: bool,
    body: VerifyResult,
) -> Record {
    state_rank_time(&mut p, rank_time);
    p.notes.extend(notes);
    if pdl {
        p.notes.push(PDL_NOTE.into());
    }
    Record::new(Source::Measured, p, Body::Verify(body))
}

/// The record of a finished cycle job (`verify --phase cycle`): per run, the cycle's samples
/// (the draft forwards, then the verify) as the record's run, and the plain decode step, the
/// draft forwards and the verify as its parts, each per sample over the ranks as `rank_time`
/// says; the provenance from `provenance` as [`verify_record`]'s.
pub(crate) fn cycle_record(
    job: &Job,
    cycle: &crate::model::cycle::Cycle,
    results: &[RankResult],
    rank_time: RankTime,
    provenance: impl FnOnce() -> Provenance,
) -> anyhow::Result<Record> {
    use crate::launch::job::{CycleConfig, CYCLE_CONFIGS};
    use crate::record::{CyclePart, PartRun};
    let Job::Verify {
        runs,
        iters,
        warmup,
        pdl,
        cycle: Some(_),
        ..
    } = job
    else {
        anyhow::bail!("not a cycle job");
    };
    let combined = combine(results, runs.len() * CYCLE_CONFIGS.len(), rank_time)?;
    let draft_colls: u64 = cycle.draft.iter().map(|d| d.n_collectives()).sum();
    let colls = |cfg| match cfg {
        CycleConfig::Decode => cycle.decode.n_collectives(),
        CycleConfig::Draft => draft_colls,
        CycleConfig::Verify => cycle.verify.n_collectives(),
        CycleConfig::Cycle => draft_colls + cycle.verify.n_collectives(),
    };
    let (mut vruns, mut parts) = (vec![], vec![]);
    for (i, &(graph, mode)) in runs.iter().enumerate() {
        for (k, cfg) in CYCLE_CONFIGS.into_iter().enumerate() {
            let (s, wrong) = combined[i * CYCLE_CONFIGS.len() + k].clone();
            let ncoll = colls(cfg).max(1) as f64;
            let run = VerifyRun {
                graph,
                mode,
                per_collective_us: if mode == Mode::Compute {
                    0.0
                } else {
                    s.median_us / ncoll
                },
                per_verify: s,
                breakdown: vec![],
                wrong,
                iterations: *iters,
                warmup: *warmup,
                in_collective: None,
            };
            let part = match cfg {
                CycleConfig::Decode => CyclePart::Decode,
                CycleConfig::Draft => CyclePart::Draft,
                CycleConfig::Verify => CyclePart::Verify,
                CycleConfig::Cycle => {
                    vruns.push(run);
                    continue;
                }
            };
            parts.push(PartRun { part, run });
        }
    }
    let mut notes = vec![format!(
        "cycle: each sample replays the {} draft forward{} then the verify; graph replay captures the first draft forward, the next ones together, and the verify in graphs of their own (as SGLang captures its draft extend, its draft loop and the target), launched in order; the plain decode step and each part are timed alone beside it",
        cycle.draft.len(),
        if cycle.draft.len() == 1 { "" } else { "s" }
    )];
    notes.extend(cycle.drafter_notes.iter().map(|n| format!("drafter: {n}")));
    let body = VerifyResult {
        stream_gbps: results
            .iter()
            .filter_map(|r| r.stream_gbps)
            .reduce(f64::min),
        parts,
        ..VerifyResult::of(RecordedWorkload::of_cycle(cycle), vruns)
    };
    Ok(measured(provenance(), rank_time, notes, *pdl, body))
}

/// The streaming rates per token count over the ranks: the slowest rank's rate and largest
/// fixed cost at each count (the launches and bytes are the schedule's, the same on every rank).
fn slowest_rates(results: &[RankResult]) -> Vec<StreamRate> {
    let mut by: BTreeMap<u64, StreamRate> = BTreeMap::new();
    for r in results.iter().flat_map(|r| &r.stream_rates) {
        by.entry(r.tokens)
            .and_modify(|m| {
                m.gbps = m.gbps.min(r.gbps);
                m.fixed_us = m.fixed_us.max(r.fixed_us);
            })
            .or_insert(*r);
    }
    by.into_values().collect()
}

/// The note of the compute prediction: per token count, bytes / rate (and the flop rate it is)
/// + launches x fixed cost, and the sum.
fn rates_note(rates: &[StreamRate]) -> String {
    use crate::launch::job::FIXED_COST_LAUNCHES;
    let parts: Vec<String> = rates
        .iter()
        .map(|r| {
            format!(
                "T={}: {} B / {:.0} GB/s ({:.1} TFLOP/s) + {} x {:.2} us",
                r.tokens,
                r.bytes,
                r.gbps,
                r.gbps * r.tokens as f64 / 1e3,
                r.launches,
                r.fixed_us
            )
        })
        .collect();
    let total: f64 = rates.iter().map(StreamRate::predicted_us).sum();
    format!(
        "compute prediction, bytes / rate + launches x fixed cost at each token count the replay streams with (the dense ops at the forward's tokens, each group of routed experts at its own; the rate of one launch over the whole pool, the fixed cost from {FIXED_COST_LAUNCHES} back-to-back launches of the count's mean size against one launch of their bytes, same run): {} = {total:.1} us",
        parts.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{presets, Phase, ScheduleOptions};
    use std::collections::BTreeMap;

    fn rank(rank: usize, samples: Vec<Vec<f64>>, wrong: Vec<u64>) -> RankResult {
        RankResult {
            rank,
            pid: 100 + rank as u32,
            device: rank,
            gpu: None,
            nccl_env: BTreeMap::from([("NCCL_PROTO".to_string(), "LL".to_string())]),
            nccl_version: Some("2.28.3".into()),
            nccl_library: Some("/lib/libnccl.so.2".into()),
            samples,
            wrong,
            checked: vec![],
            init_s: 0.5 + rank as f64,
            stream_gbps: None,
            stream_fixed_us: None,
            stream_rates: vec![],
            passes: vec![],
            affinity: None,
            clocks_khz: None,
        }
    }

    #[test]
    fn host_notes_name_affinity_governor_and_clocks_per_rank() {
        let mut a = rank(0, vec![], vec![]);
        a.affinity = Some(crate::launch::affinity::AffinityFacts {
            requested: "auto".into(),
            cpus: Some("0-31".into()),
            numa_node: Some(0),
            note: "the CPUs of NUMA node 0, the node of GPU 0000:19:00.0".into(),
        });
        a.clocks_khz = Some((1_980_000, 3_201_000));
        let b = rank(1, vec![], vec![]);
        let n = host_notes(&[a, b], Some("performance x 64".into()));
        assert_eq!(
            n[0],
            "CPU affinity per rank: rank 0: 0-31 (the CPUs of NUMA node 0, the node of GPU 0000:19:00.0); rank 1: not reported"
        );
        assert_eq!(n[1], "CPU frequency governor: performance x 64");
        assert!(
            n[2].ends_with("rank 0: 1980 / 3201; rank 1: not available"),
            "{}",
            n[2]
        );
        assert!(host_notes(&[], None)[1].contains("not available"));
    }

    #[test]
    fn combine_takes_the_slowest_rank_per_sample_and_sums_wrong_elements() {
        let r = [
            rank(0, vec![vec![10.0, 30.0, 20.0], vec![5.0]], vec![0, 2]),
            rank(1, vec![vec![12.0, 25.0, 21.0, 99.0], vec![6.0]], vec![1, 0]),
        ];
        let c = combine(&r, 2, RankTime::Max).unwrap();
        assert_eq!(c.len(), 2);
        // per sample the maximum over ranks: 12, 30, 21 (rank 1's extra sample has no pair)
        assert_eq!(c[0].0.n, 3);
        assert_eq!(c[0].0.median_us, 21.0);
        assert_eq!(c[0].0.max_us, 30.0);
        assert_eq!(c[0].1, 1);
        assert_eq!(c[1].0.median_us, 6.0);
        assert_eq!(c[1].1, 2);
        // a configuration without samples is an error, not a zero
        assert!(combine(&r, 3, RankTime::Max).is_err());
        // --rank-time mean: per sample (10+12)/2 = 11, (30+25)/2 = 27.5, (20+21)/2 = 20.5;
        // median 20.5, max 27.5; the second configuration (5+6)/2 = 5.5; wrong still summed
        let m = combine(&r, 2, RankTime::Mean).unwrap();
        assert_eq!(m[0].0.n, 3);
        assert_eq!(m[0].0.median_us, 20.5);
        assert_eq!(m[0].0.max_us, 27.5);
        assert_eq!(m[0].0.min_us, 11.0);
        assert_eq!(m[1].0.median_us, 5.5);
        assert_eq!((m[0].1, m[1].1), (1, 2));
    }

    #[test]
    fn the_rank_time_is_stated_in_the_record_and_its_header_note() {
        let mut p = Provenance::here("nccl", crate::util::now_utc());
        state_rank_time(&mut p, RankTime::Mean);
        assert_eq!(p.rank_time, Some(RankTime::Mean));
        assert_eq!(
            p.notes,
            ["rank time: per sample the mean over ranks, as nccl-tests -a 1 (--rank-time mean)"]
        );
        let back: Provenance = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(back.rank_time, Some(RankTime::Mean));
        assert!("median"
            .parse::<RankTime>()
            .unwrap_err()
            .contains("give max"));
    }

    #[test]
    fn verify_record_labels_measured_numbers_per_run() {
        let schedule = crate::model::build(
            &presets::preset("kimi-k2.5").unwrap(),
            &ScheduleOptions {
                tp: 2,
                ..Default::default()
            },
            Phase::Verify,
        )
        .unwrap();
        let job = Job::Verify {
            schedule: schedule.clone(),
            runs: vec![(false, Mode::Comm), (true, Mode::Comm)],
            iters: 3,
            warmup: 1,
            launches_per_layer: 0,
            run_impls: vec![],
            host_gaps: Default::default(),
            timing_pass: 0,
            pdl: false,
            cycle: None,
        };
        let r = [
            rank(
                0,
                vec![vec![1240.0; 3], vec![620.0, 640.0, 630.0]],
                vec![0, 0],
            ),
            rank(
                1,
                vec![vec![1000.0; 3], vec![700.0, 600.0, 610.0]],
                vec![0, 3],
            ),
        ];
        let rec = verify_record(&job, &r, RankTime::Max, || {
            worker_provenance("processes", crate::util::now_utc(), &r)
        })
        .unwrap();
        assert_eq!(rec.source, Source::Measured);
        assert_eq!(rec.provenance.backend, "nccl");
        assert_eq!(rec.provenance.launcher.as_deref(), Some("processes"));
        assert_eq!(rec.provenance.workers.len(), 2);
        assert_eq!(rec.provenance.workers[1].pid, 101);
        assert!(rec
            .provenance
            .notes
            .iter()
            .any(|n| n == "NCCL init per rank (s): 0.50, 1.50"));
        let Body::Verify(v) = &rec.body else {
            panic!("a verify record")
        };
        assert_eq!(v.workload, RecordedWorkload::of(&schedule));
        assert_eq!(v.runs.len(), 2);
        assert!(!v.runs[0].graph && v.runs[1].graph);
        assert_eq!(v.runs[0].per_verify.median_us, 1240.0);
        assert_eq!(v.runs[0].per_collective_us, 1240.0 / 124.0);
        // graph: per sample max(620, 700), max(640, 600), max(630, 610) -> median 640
        assert_eq!(v.runs[1].per_verify.median_us, 640.0);
        assert_eq!(v.runs[1].wrong, 3);
        assert_eq!((v.runs[1].iterations, v.runs[1].warmup), (3, 1));
        assert_eq!(rec.provenance.nccl_version.as_deref(), Some("2.28.3"));
        assert!(verify_record(&Job::Env, &r, RankTime::Max, || panic!(
            "no provenance for a wrong job"
        ))
        .is_err());
    }

    #[test]
    fn the_compute_prediction_sums_bytes_over_rate_and_launches_per_token_count() {
        // two ranks measured the kernel at 1 token (routed experts) and 32 (dense ops); the
        // slowest rank's rate and largest fixed cost count at each:
        //   T=1:  6,000,000,000 B / 3000 GB/s = 2000 us + 60 x 3.0 us  = 2180 us
        //   T=32: 1,200,000,000 B / 2400 GB/s =  500 us + 123 x 5.0 us = 1115 us
        // sum 3295 us; the T=32 rate is 2400 x 32 / 1000 = 76.8 TFLOP/s
        let schedule = crate::model::build(
            &presets::preset("kimi-k2.5").unwrap(),
            &ScheduleOptions {
                tp: 8,
                tokens: 32,
                ..Default::default()
            },
            Phase::Verify,
        )
        .unwrap();
        let job = Job::Verify {
            schedule,
            runs: vec![(true, Mode::Compute)],
            iters: 1,
            warmup: 0,
            launches_per_layer: 0,
            run_impls: vec![],
            host_gaps: Default::default(),
            timing_pass: 0,
            pdl: false,
            cycle: None,
        };
        let rate = |tokens, gbps, fixed_us, launches, bytes| StreamRate {
            tokens,
            gbps,
            fixed_us,
            launches,
            bytes,
        };
        let mut a = rank(0, vec![vec![3400.0]], vec![0]);
        a.stream_gbps = Some(2450.0);
        a.stream_rates = vec![
            rate(1, 3050.0, 3.0, 60, 6_000_000_000),
            rate(32, 2450.0, 5.0, 123, 1_200_000_000),
        ];
        let mut b = rank(1, vec![vec![3300.0]], vec![0]);
        b.stream_gbps = Some(2400.0);
        b.stream_rates = vec![
            rate(1, 3000.0, 2.5, 60, 6_000_000_000),
            rate(32, 2400.0, 4.0, 123, 1_200_000_000),
        ];
        let r = [a, b];
        let rec = verify_record(&job, &r, RankTime::Max, || {
            worker_provenance("processes", crate::util::now_utc(), &r)
        })
        .unwrap();
        let Body::Verify(v) = &rec.body else {
            panic!("a verify record")
        };
        assert!((v.predicted_compute_us.unwrap() - 3295.0).abs() < 1e-6);
        assert_eq!(v.stream_rates.len(), 2);
        assert_eq!(v.stream_rates[1], rate(32, 2400.0, 5.0, 123, 1_200_000_000));
        let note = rec
            .provenance
            .notes
            .iter()
            .find(|n| n.starts_with("compute prediction, bytes / rate"))
            .unwrap();
        assert!(
            note.contains("T=1: 6000000000 B / 3000 GB/s (3.0 TFLOP/s) + 60 x 3.00 us; T=32: 1200000000 B / 2400 GB/s (76.8 TFLOP/s) + 123 x 5.00 us = 3295.0 us"),
            "{note}"
        );
    }

    #[test]
    fn a_cycle_records_its_run_and_parts_in_the_order_the_ranks_timed_them() {
        use crate::model::cycle::{build, CycleSpec};
        let spec = CycleSpec {
            draft_steps: 3,
            ..Default::default()
        };
        let cycle = build(
            &presets::preset("kimi-k2.5").unwrap(),
            &ScheduleOptions::default(),
            &spec,
        )
        .unwrap();
        let job = Job::Verify {
            schedule: cycle.verify.clone(),
            runs: vec![(false, Mode::Full), (true, Mode::Full)],
            iters: 2,
            warmup: 1,
            launches_per_layer: 0,
            run_impls: vec![],
            host_gaps: Default::default(),
            timing_pass: 0,
            pdl: false,
            cycle: Some(Box::new(crate::launch::job::CycleJob {
                decode: cycle.decode.clone(),
                draft: cycle.draft.clone(),
            })),
        };
        assert_eq!(job.configs(), 8);
        // per run: decode, draft, verify, cycle; one rank, two samples each
        let samples: Vec<Vec<f64>> = [10.0, 2.0, 15.0, 17.5, 9.0, 1.5, 13.0, 14.8]
            .iter()
            .map(|&x| vec![x, x])
            .collect();
        let r = [rank(0, samples, vec![0, 0, 0, 0, 0, 1, 0, 0])];
        let rec = cycle_record(&job, &cycle, &r, RankTime::Max, || {
            worker_provenance("processes", crate::util::now_utc(), &r)
        })
        .unwrap();
        let Body::Verify(v) = &rec.body else {
            panic!("a verify record")
        };
        assert_eq!(v.workload.phase, Phase::Cycle);
        let runs: Vec<(bool, f64)> = v
            .runs
            .iter()
            .map(|r| (r.graph, r.per_verify.median_us))
            .collect();
        assert_eq!(runs, [(false, 17.5), (true, 14.8)]);
        let parts: Vec<(crate::record::CyclePart, f64, u64)> = v
            .parts
            .iter()
            .map(|p| (p.part, p.run.per_verify.median_us, p.run.wrong))
            .collect();
        use crate::record::CyclePart::*;
        assert_eq!(
            parts,
            [
                (Decode, 10.0, 0),
                (Draft, 2.0, 0),
                (Verify, 15.0, 0),
                (Decode, 9.0, 0),
                (Draft, 1.5, 1),
                (Verify, 13.0, 0)
            ]
        );
        // the cycle's collectives: 3 draft forwards of 4 and the verify's 124
        assert!((v.runs[0].per_collective_us - 17.5 / 136.0).abs() < 1e-12);
    }

    #[test]
    fn a_trace_export_needs_a_verify_job_with_a_pass_on_every_rank() {
        let p = std::path::Path::new("unwritten.json");
        let r = [rank(0, vec![vec![1.0]], vec![0])];
        assert!(export_trace(&Job::Env, &r, p).is_err());
        let job = Job::Verify {
            schedule: crate::model::build(
                &presets::preset("kimi-k2.5").unwrap(),
                &ScheduleOptions::default(),
                Phase::Verify,
            )
            .unwrap(),
            runs: vec![(false, Mode::Compute)],
            iters: 1,
            warmup: 0,
            launches_per_layer: 0,
            run_impls: vec![],
            host_gaps: Default::default(),
            timing_pass: 0,
            pdl: false,
            cycle: None,
        };
        let e = export_trace(&job, &r, p).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(
            e.to_string().contains("no run timed collectives per rank"),
            "{e}"
        );
        assert!(!p.exists());
    }
}
