//! Host cost of the two things a verify replay enqueues per collective: one NCCL all-reduce of
//! the verify step's 43,008 B (eager launch), and one CUDA-graph launch holding one such
//! all-reduce. Measured with `iter_custom` on rank 0 while a second thread drives rank 1 through
//! the same number of operations; only the enqueue calls are timed (the GPU work is waited for
//! outside the timed region, every 256 operations so the launch queue never fills).
//!
//! Needs two GPUs: on a machine with fewer it prints a notice and measures nothing.
//! Run: `cargo bench --bench gpu`.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use criterion::Criterion;

use verifybench::comm::{self, Communicator, Gpu};
use verifybench::measure::pattern;
use verifybench::model::{CollectiveKind, DType};

const COUNT: usize = 21504; // 43,008 B of bf16
const CHUNK: u64 = 256;

enum Cmd {
    Eager(u64),
    Graph(u64),
    Stop,
}

struct Rank {
    gpu: Gpu,
    comm: Communicator,
    send: comm::Buffer,
    recv: comm::Buffer,
}

impl Rank {
    fn new(device: usize, rank: usize, id: &comm::UniqueId) -> Rank {
        let gpu = Gpu::open(device).expect("open GPU");
        let comm = Communicator::init(&gpu, id, rank, 2).expect("NCCL init");
        let data = pattern::send_bytes(CollectiveKind::AllReduce, DType::Bf16, COUNT, 2, rank, 0);
        let send = gpu.alloc(data.len()).expect("alloc");
        gpu.upload(&send, &data).expect("upload");
        let recv = gpu.alloc(data.len()).expect("alloc");
        Rank {
            gpu,
            comm,
            send,
            recv,
        }
    }

    fn all_reduce(&self) {
        self.comm
            .all_reduce(&self.send, &self.recv, COUNT, DType::Bf16, &self.gpu)
            .expect("all-reduce");
    }

    fn graph(&self) -> comm::Graph {
        for _ in 0..3 {
            self.all_reduce();
        }
        self.gpu.sync().expect("sync");
        self.gpu
            .capture(|| {
                self.comm
                    .all_reduce(&self.send, &self.recv, COUNT, DType::Bf16, &self.gpu)
            })
            .expect("capture")
    }

    /// Runs `n` operations in chunks; returns the host time spent enqueuing them.
    fn run(&self, n: u64, graph: Option<&comm::Graph>) -> Duration {
        let mut spent = Duration::ZERO;
        let mut left = n;
        while left > 0 {
            let k = left.min(CHUNK);
            let t = Instant::now();
            for _ in 0..k {
                match graph {
                    Some(g) => g.launch().expect("graph launch"),
                    None => self.all_reduce(),
                }
            }
            spent += t.elapsed();
            self.gpu.sync().expect("sync");
            left -= k;
        }
        spent
    }
}

fn main() {
    let n = comm::device_count();
    if n < 2 {
        eprintln!("benches/gpu: {n} GPU(s) found, 2 needed: skipped, nothing measured");
        return;
    }
    comm::libs::prepare(None).expect("NCCL");
    let id = comm::nccl::unique_id().expect("NCCL id");
    let (tx, rx) = mpsc::channel::<Cmd>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let peer = std::thread::spawn(move || {
        let r = Rank::new(1, 1, &id);
        let g = r.graph();
        while let Ok(cmd) = rx.recv() {
            match cmd {
                Cmd::Eager(k) => {
                    r.run(k, None);
                }
                Cmd::Graph(k) => {
                    r.run(k, Some(&g));
                }
                Cmd::Stop => break,
            }
            done_tx.send(()).expect("done");
        }
    });
    let r0 = Rank::new(0, 0, &id);
    let g0 = r0.graph();
    let mut c = Criterion::default()
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .configure_from_args();
    c.bench_function("host enqueue: ncclAllReduce 43008 B bf16, 2 ranks", |b| {
        b.iter_custom(|iters| {
            tx.send(Cmd::Eager(iters)).expect("peer");
            let t = r0.run(iters, None);
            done_rx.recv().expect("peer done");
            t
        })
    });
    c.bench_function(
        "host enqueue: cuGraphLaunch of one all-reduce, 2 ranks",
        |b| {
            b.iter_custom(|iters| {
                tx.send(Cmd::Graph(iters)).expect("peer");
                let t = r0.run(iters, Some(&g0));
                done_rx.recv().expect("peer done");
                t
            })
        },
    );
    tx.send(Cmd::Stop).expect("stop");
    peer.join().expect("peer thread");
    c.final_summary();
}
