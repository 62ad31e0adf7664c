//! Host cost of reading NCCL's logs: a probe log of a large sweep point (many ranks, many
//! collectives) must parse in a blink next to the seconds a point takes to run, and a long
//! COLL log's eager-or-graph judgement must take one pass over its calls, not a comparison of
//! every pair of steps.
//!
//! Run: `cargo bench --bench ncclog`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use verifybench::sweep::ncclog::NcclLog;
use verifybench::trace::nccl_log::{judge, LogCall, LogMode};

const SAMPLES: [&str; 4] = [
    include_str!("../tests/data/nccl-2.28.3-h200x2-procs-default.log"),
    include_str!("../tests/data/nccl-2.28.3-h200x2-procs-ll128-tree.log"),
    include_str!("../tests/data/nccl-2.28.3-h200x2-procs-net.log"),
    include_str!("../tests/data/nccl-info-2.28.9.log"),
];

fn big_log() -> String {
    // About 10 MB: the real lines of the samples, repeated.
    let one: String = SAMPLES.concat();
    one.repeat((10 << 20) / one.len() + 1)
}

fn bench(c: &mut Criterion) {
    let text = big_log();
    let mut g = c.benchmark_group("ncclog");
    g.throughput(Throughput::Bytes(text.len() as u64));
    g.sample_size(10);
    g.bench_function("parse_10MB", |b| {
        b.iter(|| {
            let log = NcclLog::parse(std::hint::black_box(&text));
            assert!(!log.choices.is_empty());
            log
        })
    });
    // 20,000 eager steps of 3 all-reduces and an all-gather, the batch size going 1..=7 in
    // turn (the unit test `varying_eager_steps_are_judged_in_one_pass`'s log)
    let call = |op: &str, count: u64| LogCall {
        host: "h".into(),
        pid: 7,
        device: Some(0),
        op: op.into(),
        op_count: 0,
        count,
        dtype: Some("bf16".into()),
        datatype: 9,
        comm: "0xa".into(),
        nranks: 2,
        stream: "0x1".into(),
    };
    let mut calls = Vec::new();
    for i in 0..20_000u64 {
        let bs = 1 + i % 7;
        for _ in 0..3 {
            calls.push(call("all_reduce", bs * 7168));
        }
        calls.push(call("all_gather", bs * 8));
    }
    let refs: Vec<&LogCall> = calls.iter().collect();
    g.throughput(Throughput::Elements(refs.len() as u64));
    g.bench_function("judge_80000_calls", |b| {
        b.iter(|| {
            let (m, _) = judge(std::hint::black_box(&refs));
            assert_eq!(m, LogMode::Eager);
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
