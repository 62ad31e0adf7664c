//! Host-side costs of the tool itself, on any machine (no GPU): building a schedule and a
//! speculative cycle (and pricing it), summarising 10^5 timing samples, and serialising a
//! result record. These bound the tool's own overhead
//! between measurements; none of them sits inside a timed region.
//!
//! Other host-side benches live in their own files, each its own `[[bench]]` target in
//! Cargo.toml with `harness = false`:
//! - NCCL log parsing of a large log (the sweep's parser): `benches/ncclog.rs`.
//! - GPU enqueue costs (one all-reduce, one graph launch, with `iter_custom`):
//!   `benches/gpu.rs`, which prints a notice and measures nothing when no GPU is present.
//!
//! Run: `cargo bench --bench host` (about 10 s); `cargo bench --no-run` only builds.

use std::time::Duration;

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion};

use verifybench::measure::Summary;
use verifybench::model::{self, presets, Phase, ScheduleOptions};
use verifybench::record::{
    Body, Mode, Provenance, Record, RecordedWorkload, Source, VerifyResult, VerifyRun,
};
use verifybench::util::now_utc;

fn kimi_tp8() -> (model::ModelShape, ScheduleOptions) {
    let shape = presets::preset("kimi-k2.5").expect("kimi-k2.5 preset");
    let opt = ScheduleOptions {
        tp: 8,
        tokens: 3,
        ..Default::default()
    };
    (shape, opt)
}

/// 10^5 timing-like samples (us) from a fixed linear congruential sequence, a few far ones.
fn samples(n: usize) -> Vec<f64> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    (0..n)
        .map(|i| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            if i % 997 == 0 {
                900.0 + 400.0 * u
            } else {
                500.0 + 20.0 * u
            }
        })
        .collect()
}

fn verify_record() -> Record {
    let (shape, opt) = kimi_tp8();
    let s = model::build(&shape, &opt, Phase::Verify).expect("schedule");
    let sm = Summary::from_samples(&samples(1000)).expect("summary");
    let run = |graph| VerifyRun {
        graph,
        mode: Mode::Comm,
        per_collective_us: sm.median_us / s.n_collectives() as f64,
        per_verify: sm.clone(),
        breakdown: vec![],
        wrong: 0,
        iterations: 1000,
        warmup: 20,
        in_collective: None,
    };
    Record::new(
        Source::Measured,
        Provenance::here("nccl", now_utc()),
        Body::Verify(VerifyResult::of(
            RecordedWorkload::of(&s),
            vec![run(false), run(true)],
        )),
    )
}

fn schedule(c: &mut Criterion) {
    let (shape, opt) = kimi_tp8();
    let mut g = c.benchmark_group("schedule");
    g.bench_function("build kimi-k2.5 TP8 verify", |b| {
        b.iter(|| model::build(black_box(&shape), black_box(&opt), Phase::Verify).unwrap())
    });
    let s = model::build(&shape, &opt, Phase::Verify).unwrap();
    g.bench_function("hash kimi-k2.5 TP8 verify", |b| {
        b.iter(|| black_box(&s).hash())
    });
    g.finish();
}

/// The speculative cycle `plan --phase cycle` builds and `explain` prices: Kimi-K2.5 TP8 with
/// an EAGLE-3 head, k = 3, 64 requests of 32,768 tokens of context (the decode, 3 draft
/// forwards and the verify of 256 tokens, every KV read), built once, then priced by the cost
/// model eager and graph.
fn cycle(c: &mut Criterion) {
    use verifybench::costmodel::{cycle as price, ModelSettings};
    use verifybench::model::cycle::{build, CycleSpec};
    use verifybench::record::Mode;
    use verifybench::request::Launcher;
    let (shape, opt) = kimi_tp8();
    let opt = ScheduleOptions {
        concurrency: 64,
        context: 32_768,
        ..opt
    };
    let spec = CycleSpec {
        draft_steps: 3,
        ..Default::default()
    };
    let mut g = c.benchmark_group("cycle");
    g.bench_function("build kimi-k2.5 TP8 EAGLE-3 k=3 C=64 context 32768", |b| {
        b.iter(|| build(black_box(&shape), black_box(&opt), black_box(&spec)).unwrap())
    });
    let cy = build(&shape, &opt, &spec).unwrap();
    let m = ModelSettings::default();
    let runs = [(false, Mode::Full), (true, Mode::Full)];
    g.bench_function("price kimi-k2.5 TP8 EAGLE-3 k=3 C=64 (eager, graph)", |b| {
        b.iter(|| price::verify_cycle(black_box(&cy), 8, &runs, Launcher::Processes, &m).unwrap())
    });
    g.finish();
}

fn statistics(c: &mut Criterion) {
    let data = samples(100_000);
    let mut g = c.benchmark_group("statistics");
    g.sample_size(20);
    g.bench_function("Summary::from_samples 10^5", |b| {
        b.iter(|| Summary::from_samples(black_box(&data)).unwrap())
    });
    g.finish();
}

fn record_json(c: &mut Criterion) {
    let r = verify_record();
    let text = r.to_json_pretty();
    let mut g = c.benchmark_group("record");
    g.bench_function("verify record to JSON", |b| {
        b.iter(|| black_box(&r).to_json_pretty())
    });
    g.bench_function("verify record from JSON", |b| {
        b.iter_batched(
            || text.clone(),
            |t| serde_json::from_str::<Record>(&t).unwrap(),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
}

criterion_group! {
    name = host;
    config = config();
    targets = schedule, cycle, statistics, record_json
}
criterion_main!(host);
