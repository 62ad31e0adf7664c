//! Parsing and analysing profiler traces (`verifybench trace`), on SYNTHETIC traces of the
//! shape of a PyTorch profile (cpu ops, runtime launches, kernels with collective arguments,
//! flow events) made by `verifybench::trace::synth`.
//!
//! The criterion part times one gzipped 2-rank trace (Kimi-K2.5 verify steps). The large case
//! (8 ranks of ~200 MB gzip each) is too big for criterion's repetitions: set
//! `VERIFYBENCH_TRACE_BIG=DIR` to generate it in DIR once (kept for later runs) and time one
//! full analysis of it; see benches/README.md for the figure.

use std::path::PathBuf;
use std::time::Instant;

use criterion::{Criterion, Throughput};
use verifybench::trace::synth::{self, SynthSpec};
use verifybench::trace::{analyse, TraceRequest};

fn spec(ranks: usize, steps: usize) -> SynthSpec {
    SynthSpec {
        ranks,
        steps,
        late_rank: Some((1, 80.0)),
        filler_cpu_ops: 3,
        ..Default::default()
    }
}

fn small(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let paths = synth::write_dir(&spec(2, 200), dir.path(), true).unwrap();
    let bytes: u64 = paths
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    let mut g = c.benchmark_group("trace");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(bytes));
    g.bench_function("analyse 2 ranks x 200 Kimi verify steps (gzip)", |b| {
        b.iter(|| analyse(&TraceRequest::new(vec![dir.path().to_path_buf()])).unwrap())
    });
    g.finish();
}

/// The 8 x ~200 MB case, once.
fn big() {
    let Ok(dir) = std::env::var("VERIFYBENCH_TRACE_BIG") else {
        return;
    };
    let dir = PathBuf::from(dir);
    // Steps for ~200 MB of gzip per rank, from a small calibration run (unless given).
    let steps: usize = std::env::var("VERIFYBENCH_TRACE_BIG_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let t = tempfile::tempdir().unwrap();
            let p = synth::write_dir(&spec(8, 20), t.path(), true).unwrap();
            let per_step = std::fs::metadata(&p[0]).unwrap().len() as f64 / 20.0;
            (200e6 / per_step).ceil() as usize
        });
    if !dir.join("rank-7.json.gz").exists() {
        std::fs::create_dir_all(&dir).unwrap();
        let t = Instant::now();
        synth::write_dir(&spec(8, steps), &dir, true).unwrap();
        eprintln!(
            "generated 8 ranks x {steps} steps in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    let sizes: Vec<u64> = (0..8)
        .map(|r| {
            std::fs::metadata(dir.join(format!("rank-{r}.json.gz")))
                .unwrap()
                .len()
        })
        .collect();
    let t = Instant::now();
    let a = analyse(&TraceRequest::new(vec![dir.clone()])).unwrap();
    let s = t.elapsed().as_secs_f64();
    let total: u64 = sizes.iter().sum();
    println!(
        "trace/big: 8 ranks, {:.0} MB gzip in all ({:.0} MB per rank), {} steps, {} collectives per rank: {s:.1} s ({:.0} MB/s of gzip)",
        total as f64 / 1e6,
        total as f64 / 8e6,
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
