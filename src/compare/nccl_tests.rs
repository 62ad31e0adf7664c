//! nccl-tests beside verifybench: a reader of nccl-tests' text output (`all_reduce_perf` and
//! friends, version 2.19) and the ratio verifybench / nccl-tests per size and launch mode
//! (`verifybench compare --nccl-tests FILE COLLECTIVE.json`).
//!
//! nccl-tests' table, as its `util.cu` writes it: a header line
//! `# nThread 1 nGpus 2 minBytes 8192 maxBytes 1048576 step: 2(factor) warmup iters: 1 iters: 20
//! agg iters: 1 validation: 1 graph: 20 unalign: 0`, then one row per size:
//! `size count type redop root` followed by two groups `time algbw busbw #wrong`, out-of-place
//! then in-place (`#wrong` is `N/A` without `-c 1`). Times are microseconds per operation, the
//! mean over the timed iterations (`-n`), averaged over ranks. With `-G N` (N >= 1) every
//! timed operation is a CUDA-graph replay, both groups included: one run of nccl-tests gives
//! one launch mode, so eager and graph need two runs (`-G 0` and `-G 20`).
//!
//! verifybench's `collective` reports the median per operation; the ratio compares that median
//! to nccl-tests' out-of-place mean (the verify step's all-reduces are out of place).
//!
//! Ranks: nccl-tests averages each rank's time over the ranks (`-a 1`, its default: `Allreduce`
//! with `average` in NVIDIA/nccl-tests `src/common.cu`); verifybench takes per sample the
//! slowest rank unless the record was made with `--rank-time mean`. [`rank_line`] says which
//! reduction each side used, and whether they are the same.

use std::fmt::Write as _;

use serde::Serialize;

pub(crate) use crate::nccl_tests::{parse, NcclTestsRun};
use crate::record::{CollectiveResult, RankTime};

/// One size and launch mode side by side.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct SideBySide {
    pub(crate) size_bytes: u64,
    pub(crate) graph: bool,
    /// verifybench's median per operation, us.
    pub(crate) verifybench_us: f64,
    /// nccl-tests' out-of-place mean per operation, us.
    pub(crate) nccl_tests_us: f64,
    /// verifybench / nccl-tests.
    pub(crate) ratio: f64,
}

/// The sizes both measured, per launch mode of each nccl-tests run.
pub(crate) fn side_by_side(vb: &CollectiveResult, runs: &[NcclTestsRun]) -> Vec<SideBySide> {
    let mut out = vec![];
    for run in runs {
        for nt in &run.rows {
            let Some(row) = vb.rows.iter().find(|r| r.size_bytes == nt.size_bytes) else {
                continue;
            };
            let t = if run.graph() { &row.graph } else { &row.eager };
            if let Some(t) = t {
                out.push(SideBySide {
                    size_bytes: nt.size_bytes,
                    graph: run.graph(),
                    verifybench_us: t.time_us,
                    nccl_tests_us: nt.oop_us,
                    ratio: t.time_us / nt.oop_us,
                });
            }
        }
    }
    out.sort_by_key(|x| (x.graph, x.size_bytes));
    out
}

/// The side-by-side table.
pub(crate) fn render(rows: &[SideBySide]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# verifybench collective (median per op) / nccl-tests (out-of-place mean per op)"
    );
    let _ = writeln!(
        o,
        "{:>10}  {:>5}  {:>14}  {:>14}  {:>7}",
        "size_B", "mode", "verifybench_us", "nccl_tests_us", "ratio"
    );
    for r in rows {
        let _ = writeln!(
            o,
            "{:>10}  {:>5}  {:>14.2}  {:>14.2}  {:>7.3}",
            r.size_bytes,
            if r.graph { "graph" } else { "eager" },
            r.verifybench_us,
            r.nccl_tests_us,
            r.ratio
        );
    }
    o
}

/// The header line that says how each side combined its ranks: `rank_time` from the collective
/// record (`None`: a record from before `--rank-time`, which took the slowest rank), against
/// nccl-tests' mean over ranks.
pub(crate) fn rank_line(rank_time: Option<RankTime>, nranks: usize) -> String {
    if nranks <= 1 {
        return "# ranks: 1 rank: the slowest rank and the mean over ranks are the same time\n"
            .into();
    }
    match rank_time.unwrap_or_default() {
        RankTime::Mean => "# ranks: the same reduction on both sides, per sample the mean over ranks (verifybench --rank-time mean, nccl-tests -a 1)\n".into(),
        RankTime::Max => "# ranks: NOT the same reduction: verifybench per sample the slowest rank (--rank-time max), nccl-tests the mean over ranks (-a 1, its default); the ratio includes the spread between ranks: record the collective with --rank-time mean to compare like with like\n".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{CollTiming, CollectiveRow};

    /// The layout of nccl-tests 2.19's util.cu (header, two column groups, footer), with
    /// numbers written for this test (bf16 all-reduce on 2 GPUs, graph mode).
    const SAMPLE: &str = "\
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 2 minBytes 8192 maxBytes 1048576 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 20 unalign: 0
#
# Using devices
#  Rank  0 Group  0 Pid  12345 on    host1 device  0 [0000:18:00] NVIDIA H200
#  Rank  1 Group  0 Pid  12345 on    host1 device  1 [0000:2a:00] NVIDIA H200
#
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong 
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         
        8192          4096  bfloat16     sum      -1     6.51    1.26    1.26       0     6.42    1.28    1.28       0
       16384          8192  bfloat16     sum      -1     6.60    2.48    2.48       0     6.55    2.50    2.50       0
       43008         21504  bfloat16     sum      -1     7.10    6.06    6.06       0     7.02    6.13    6.13       0
     1048576        524288  bfloat16     sum      -1    18.40   56.99   56.99       0    18.10   57.93   57.93       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 16.7 
#
# Collective test concluded: all_reduce_perf
";

    #[test]
    fn reads_the_table_of_nccl_tests_2_19() {
        let r = parse(SAMPLE).unwrap();
        assert_eq!(r.graph_launches, 20);
        assert!(r.graph());
        assert_eq!(r.ngpus, Some(2));
        assert_eq!(r.rows.len(), 4);
        let row = &r.rows[2];
        assert_eq!((row.size_bytes, row.count), (43008, 21504));
        assert_eq!(
            (row.dtype.as_str(), row.redop.as_str()),
            ("bfloat16", "sum")
        );
        assert_eq!((row.oop_us, row.ip_us), (7.10, 7.02));
        assert_eq!(row.oop_busbw_gbps, 6.06);
        assert_eq!(row.oop_wrong, Some(0.0));
        // Without -c 1 the #wrong columns read N/A; -G 0 is eager.
        let eager = SAMPLE
            .replace("graph: 20", "graph: 0")
            .replace("       0     ", "     N/A     ")
            .replace("       0\n", "     N/A\n");
        let e = parse(&eager).unwrap();
        assert!(!e.graph());
        assert_eq!(e.rows[0].oop_wrong, None);
        assert_eq!(e.rows[0].ip_wrong, None);
    }

    #[test]
    fn malformed_output_is_refused_with_the_line() {
        assert!(parse("hello\n").unwrap_err().contains("no '# nThread"));
        let cut = SAMPLE.replace("    6.42    1.28    1.28       0", "");
        let e = parse(&cut).unwrap_err();
        assert!(e.starts_with("line 11: a size row has 9 columns"), "{e}");
        let mixed = format!("{SAMPLE}{}", SAMPLE.replace("graph: 20", "graph: 0"));
        assert!(parse(&mixed).unwrap_err().contains("separate files"));
        let two = format!("{SAMPLE}{SAMPLE}");
        assert_eq!(parse(&two).unwrap().rows.len(), 8);
        let bad = SAMPLE.replace("18.40", "fast");
        assert!(parse(&bad)
            .unwrap_err()
            .contains("time 'fast' is not a number"));
    }

    fn timing(us: f64) -> Option<CollTiming> {
        Some(CollTiming {
            time_us: us,
            summary: crate::measure::Summary::from_samples(&[us]).unwrap(),
            algbw_gbps: 0.0,
            busbw_gbps: 0.0,
            wrong: 0,
        })
    }

    #[test]
    fn ratios_pair_sizes_and_launch_modes() {
        let vb = CollectiveResult {
            op: crate::model::CollectiveKind::AllReduce,
            dtype: crate::model::DType::Bf16,
            nranks: 2,
            rows: [(8192u64, 9.0, 7.0), (43008, 10.0, 7.81), (65536, 11.0, 8.0)]
                .into_iter()
                .map(|(s, e, g)| CollectiveRow {
                    size_bytes: s,
                    count: s / 2,
                    eager: timing(e),
                    graph: timing(g),
                    p2p: vec![],
                })
                .collect(),
        };
        let graph = parse(SAMPLE).unwrap();
        let eager = parse(&SAMPLE.replace("graph: 20", "graph: 0")).unwrap();
        let rows = side_by_side(&vb, &[graph, eager]);
        // Sizes in both: 8192 and 43008 (16384 and 1 MiB only in nccl-tests, 65536 only here).
        assert_eq!(rows.len(), 4);
        let at = |s: u64, g: bool| {
            rows.iter()
                .find(|r| r.size_bytes == s && r.graph == g)
                .unwrap()
        };
        assert!((at(43008, true).ratio - 7.81 / 7.10).abs() < 1e-12);
        assert!((at(8192, false).ratio - 9.0 / 6.51).abs() < 1e-12);
        assert!(!rows[0].graph, "eager first");
        let t = render(&rows);
        assert!(
            t.contains("     43008  graph            7.81            7.10    1.100"),
            "{t}"
        );
    }

    #[test]
    fn the_rank_reduction_of_each_side_is_said() {
        // a record from before --rank-time took the slowest rank: not nccl-tests' mean
        for rt in [None, Some(RankTime::Max)] {
            let l = rank_line(rt, 2);
            assert!(l.starts_with("# ranks: NOT the same reduction"), "{l}");
            assert!(l.contains("--rank-time mean"), "{l}");
        }
        let l = rank_line(Some(RankTime::Mean), 8);
        assert!(l.starts_with("# ranks: the same reduction"), "{l}");
        assert!(l.contains("-a 1"), "{l}");
        // one rank: max and mean are the same number, whatever the flag said
        assert!(rank_line(None, 1).contains("1 rank"));
        assert_eq!(
            rank_line(Some(RankTime::Max), 1),
            rank_line(Some(RankTime::Mean), 1)
        );
    }
}
