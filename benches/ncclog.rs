//! Host cost of parsing NCCL's INFO log: a probe log of a large sweep point (many ranks, many
//! collectives) must parse in a blink next to the seconds a point takes to run.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use verifybench::sweep::ncclog::NcclLog;

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
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
