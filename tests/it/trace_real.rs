//! `verifybench trace` on public traces that real jobs wrote (tests/data/traces/hta/ and
//! tests/data/traces/param-dlrm-8ranks/, see tests/data/traces/README.md for their sources and
//! licences). The expected values were computed independently of verifybench, by this Python
//! script over the same files (json + gzip only):
//!
//! ```python
//! import gzip, json, glob, collections, statistics
//! def by_span(d):
//!     ev = d['traceEvents']
//!     spans = sorted([e for e in ev if e.get('cat') == 'user_annotation'
//!                     and e['name'].startswith('ProfilerStep#')], key=lambda e: e['ts'])
//!     rt = {e['args']['correlation']: e for e in ev
//!           if e.get('cat') == 'cuda_runtime' and 'correlation' in e.get('args', {})}
//!     ks = sorted([e for e in ev if e.get('cat') == 'kernel'
//!                  and e['name'].startswith('nccl')], key=lambda e: e['ts'])
//!     # a kernel belongs to the span its launch (the correlated runtime call) falls in
//!     return [(s['name'], s['dur'], [k for k in ks
//!              if s['ts'] <= rt[k['args']['correlation']]['ts'] < s['ts'] + s['dur']])]
//!             for s in spans]
//! ```
//! HTA: spans #2..#6 of 345770, 365256, 346097, 344269, 336328 us, 404 NCCL all-reduce
//! kernels each (median 345770 us). PARAM: one span `ProfilerStep#10` per rank, 8 kernels
//! (5 SendRecv, 3 AllReduce); rank 0's span 14455 us; over the 8 collectives (the k-th kernel
//! of each rank), the rank that starts last is 7 five times, 5 twice, 4 once; the median of
//! (latest start - earliest start) is 559.0 us.

use std::path::PathBuf;

use predicates::prelude::*;
use verifybench::trace::{analyse, TraceRequest};

use crate::common;

fn data(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/traces")
        .join(p)
}

#[test]
fn hta_steps_are_the_five_profiler_step_spans() {
    let a = analyse(&TraceRequest::new(vec![data(
        "hta/df_index_resolver.json.gz",
    )]))
    .unwrap();
    assert!(a.step_rule.contains("ProfilerStep#"), "{}", a.step_rule);
    let r = &a.rank_traces[0];
    assert_eq!(r.rank, 1);
    assert_eq!(a.world_size, Some(2));
    assert_eq!(r.collectives.len(), 2020);
    let per: Vec<usize> = r.steps.iter().map(|s| s.end - s.first).collect();
    assert_eq!(per, [404; 5]);
    let durs: Vec<f64> = r.steps.iter().map(|s| s.dur_us).collect();
    assert_eq!(durs, [345770.0, 365256.0, 346097.0, 344269.0, 336328.0]);
    let st = a.step.as_ref().unwrap();
    assert_eq!(st.steps, 5);
    assert_eq!(st.step_us.median, 345770.0);
    assert!(a.sequence.iter().all(|g| g.op == "all_reduce"));
}

#[test]
fn hta_step_label_glob_selects_the_same_spans() {
    let mut req = TraceRequest::new(vec![data("hta/df_index_resolver.json.gz")]);
    req.step_label = Some("ProfilerStep#*".into());
    let a = analyse(&req).unwrap();
    let per: Vec<usize> = a.rank_traces[0]
        .steps
        .iter()
        .map(|s| s.end - s.first)
        .collect();
    // A label's step runs from its first collective to its last (not the span): only the
    // counts are compared.
    assert_eq!(per, [404; 5]);
    assert!(
        a.step_rule.contains("'ProfilerStep#*' (5 found)"),
        "{}",
        a.step_rule
    );
}

#[test]
fn param_dlrm_eight_ranks_one_step_and_the_straggler() {
    let a = analyse(&TraceRequest::new(vec![data("param-dlrm-8ranks")])).unwrap();
    assert_eq!(a.ranks.len(), 8);
    assert_eq!(a.world_size, Some(8));
    for r in &a.rank_traces {
        assert_eq!(r.steps.len(), 1, "rank {}", r.rank);
        assert_eq!(r.collectives.len(), 8, "rank {}", r.rank);
        let sr = r.collectives.iter().filter(|c| c.op == "send_recv").count();
        let ar = r
            .collectives
            .iter()
            .filter(|c| c.op == "all_reduce")
            .count();
        assert_eq!((sr, ar), (5, 3), "rank {}", r.rank);
    }
    assert_eq!(a.rank_traces[0].steps[0].dur_us, 14455.0);
    let t = a.attribution.as_ref().unwrap();
    assert_eq!(t.matched, 8);
    let st = t.straggler.as_ref().unwrap();
    assert_eq!(st.rank, 7);
    assert!((st.share - 5.0 / 8.0).abs() < 1e-9, "{}", st.share);
    let last: Vec<usize> = a.ranks.iter().map(|r| r.times_last).collect();
    assert_eq!(last, [0, 0, 0, 0, 1, 2, 0, 5]);
}

#[test]
fn cli_says_which_method_found_the_steps() {
    common::vb()
        .arg("trace")
        .arg(data("param-dlrm-8ranks"))
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "steps: the trace's ProfilerStep# spans (1 found)",
        ))
        .stdout(predicate::str::contains("median start skew 559.0 us"));
}
