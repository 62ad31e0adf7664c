//! Parsing and analysing profiler traces (`verifybench trace`), on SYNTHETIC traces of the
//! shape of a PyTorch profile (cpu ops, runtime launches, kernels with collective arguments,
//! flow events) made by `tests/support/synth.rs`.
//!
//! The criterion part times one gzipped 2-rank trace (Kimi-K2.5 verify steps). The large case
//! (8 ranks of ~200 MB gzip each) is too big for criterion's repetitions: set
//! `VERIFYBENCH_TRACE_BIG=DIR` to generate it in DIR once (kept for later runs) and time one
//! full analysis of it; see benches/README.md for the figure. `VERIFYBENCH_TRACE_BIG_PASS=inflate`
//! (decompression into a sink) or `scan` (decompression and the event scanner, kept events
//! counted, not parsed) time the reader's first stages on the same files instead.

use std::path::PathBuf;
use std::time::Instant;

use criterion::{Criterion, Throughput};
use verifybench::trace::{analyse, TraceRequest};
use verifybench::trace::{prefilter, reader};

// Synthetic traces, shared with the tests; not every helper is called here.
#[allow(dead_code)]
#[path = "../tests/support/synth.rs"]
mod synth;
use synth::SynthSpec;

/// A server-like mix per verify step: 124 collectives, 20 compute kernels before each (2,480),
/// each with its cpu op, runtime launch, flow arrows and 4 `python_function` events.
/// `VERIFYBENCH_TRACE_MIX=collectives` gives the earlier, collective-heavy mix (1 compute
/// kernel per collective, 3 filler cpu ops, no Python events).
fn spec(ranks: usize, steps: usize) -> SynthSpec {
    let heavy = std::env::var("VERIFYBENCH_TRACE_MIX").is_ok_and(|m| m == "collectives");
    SynthSpec {
        ranks,
        steps,
        late_rank: Some((1, 80.0)),
        filler_cpu_ops: if heavy { 3 } else { 1 },
        kernels_per_collective: if heavy { 1 } else { 20 },
        python_functions: if heavy { 0 } else { 4 },
        ..Default::default()
    }
}

fn small(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let paths = synth::write_dir(&spec(2, 20), dir.path(), true).unwrap();
    let bytes: u64 = paths
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    let mut g = c.benchmark_group("trace");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(bytes));
    g.bench_function(
        "analyse 2 ranks x 20 server-like verify steps (gzip)",
        |b| b.iter(|| analyse(&TraceRequest::new(vec![dir.path().to_path_buf()])).unwrap()),
    );
    g.finish();
}

/// The 8 x ~200 MB case, once.
fn big() {
    let Ok(dir) = std::env::var("VERIFYBENCH_TRACE_BIG") else {
        return;
    };
    let dir = PathBuf::from(dir);
    // Steps for ~200 MB of gzip per rank, from a small calibration run (unless given).
    let per_rank_mb: f64 = std::env::var("VERIFYBENCH_TRACE_BIG_MB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200.0);
    let ranks: usize = std::env::var("VERIFYBENCH_TRACE_BIG_RANKS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let steps: usize = std::env::var("VERIFYBENCH_TRACE_BIG_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let t = tempfile::tempdir().unwrap();
            let p = synth::write_dir(&spec(ranks, 4), t.path(), true).unwrap();
            let per_step = std::fs::metadata(&p[0]).unwrap().len() as f64 / 4.0;
            (per_rank_mb * 1e6 / per_step).ceil() as usize
        });
    if !dir.join(format!("rank-{}.json.gz", ranks - 1)).exists() {
        std::fs::create_dir_all(&dir).unwrap();
        let t = Instant::now();
        synth::write_dir(&spec(ranks, steps), &dir, true).unwrap();
        eprintln!(
            "generated {ranks} ranks x {steps} steps in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    let sizes: Vec<u64> = (0..ranks)
        .map(|r| {
            std::fs::metadata(dir.join(format!("rank-{r}.json.gz")))
                .unwrap()
                .len()
        })
        .collect();
    let total: u64 = sizes.iter().sum();
    // VERIFYBENCH_TRACE_BIG_PASS=inflate or scan: only the first stages of the reader, ranks
    // in parallel as the analysis reads them, to show where the time goes.
    if let Ok(pass) = std::env::var("VERIFYBENCH_TRACE_BIG_PASS") {
        use rayon::prelude::*;
        use std::io::Read;
        let t = Instant::now();
        let (json, kept): (u64, u64) = (0..ranks)
            .into_par_iter()
            .map(|r| {
                let mut gz =
                    reader::open_trace(&dir.join(format!("rank-{r}.json.gz")), true).unwrap();
                match pass.as_str() {
                    "inflate" => {
                        let mut buf = vec![0u8; 1 << 20];
                        let mut n = 0u64;
                        loop {
                            match gz.read(&mut buf).unwrap() {
                                0 => break (n, 0),
                                k => n += k as u64,
                            }
                        }
                    }
                    "scan" => {
                        let (mut n, mut kept) = (0u64, 0u64);
                        prefilter::scan(gz, None, false, |ev, _| {
                            n += ev.len() as u64;
                            kept += 1;
                            true
                        })
                        .expect("the scanner reads the synthetic trace");
                        (n, kept)
                    }
                    other => panic!("VERIFYBENCH_TRACE_BIG_PASS={other}: inflate or scan"),
                }
            })
            .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        println!(
            "trace/big {pass}: {ranks} ranks, {:.0} MB gzip in all: {:.1} s ({} MB {}, {kept} events kept)",
            total as f64 / 1e6,
            t.elapsed().as_secs_f64(),
            json / 1_000_000,
            if pass == "inflate" {
                "of JSON"
            } else {
                "of kept events"
            }
        );
        return;
    }
    let t = Instant::now();
    let a = analyse(&TraceRequest::new(vec![dir.clone()])).unwrap();
    let s = t.elapsed().as_secs_f64();
    println!(
        "trace/big: {ranks} ranks, {:.0} MB gzip in all ({:.0} MB per rank), {} steps, {} collectives per rank: {s:.1} s ({:.0} MB/s of gzip)",
        total as f64 / 1e6,
        total as f64 / 1e6 / ranks as f64,
        a.step.as_ref().map(|x| x.steps).unwrap_or(0),
        a.ranks[0].collectives,
        total as f64 / 1e6 / s
    );
}

fn main() {
    big();
    if std::env::var("VERIFYBENCH_TRACE_BIG_ONLY").is_err() {
        let mut c = Criterion::default().configure_from_args();
        small(&mut c);
        c.final_summary();
    }
}
