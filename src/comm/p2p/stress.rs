//! The stress test of the P2P all-reduces, part of `selftest`: N ranks in this process (virtual
//! ranks of one GPU, or one rank per GPU) run thousands of calls meant to break the protocol,
//! and every output is checked on the device.
//!
//! What it varies, per call, the same on every rank ([`plan`]): one-shot, two-shot or the
//! barrier, interleaved at random; the size, a different one every call (8 B to 1 MiB,
//! log-uniform, whole elements of bf16, f16 or f32, element tails included); aligned, unaligned
//! or in-place buffers; and before each call a random delay per rank on the device (none, up to
//! 20 us, or 200 us now and then, past the poller's interval), so that ranks arrive skewed and
//! race ahead of each other. Calls run in batches of [`BATCH`], each call of a batch on buffers
//! of its own: the batch's inputs are filled first, its calls follow back to back (a rank that
//! finished call j starts call j + 1 at once, while a slow peer may still read call j's data),
//! and its outputs are checked last. Eager (enqueued call by call, breadth-first over the ranks)
//! and from CUDA graphs (one graph of [`GRAPH_CALLS`] calls per rank, replayed).
//!
//! Checked on the device: a fill kernel writes each rank's input (measure/pattern.rs, for a salt
//! that advances with every call, also across graph replays: the salt counter lives on the
//! device) and poisons the output; a check kernel compares every element with the exact sum and
//! counts the wrong ones into a device counter, read once at the end, beside the number of
//! elements checked (which must equal the plan's). Stale data one or two calls old differs at
//! every element when it is of the same collective index, at one in seven otherwise.
//!
//! The grid: the ranks' grids wait for each other, so they must all run at once; the cap is
//! one block per SM over all ranks ([`super::kernels::resident_blocks`]). With the occupancy
//! query's 4 per SM, 8 virtual ranks x 32 blocks on one H200 stalled ("rank 5 never signalled
//! rank 0 ... rank 5 had entered 991 calls: its kernel of call 992 never started"), eager and
//! graph, whatever the host did; 8 x 16 and 8 x 17 did not (results/h200x1/issue40b/).
//!
//! The host's side: it keeps at most [`AHEAD`] batches in flight (eager: after each [`AHEAD`]
//! batches; graphs: after each replay of every rank's graph) and then waits for every rank by
//! asking each stream in turn whether it is done ([`Group::wait_all`]). Neither mended the stall
//! above (the diagnostics below showed it the same without them), but they keep a host wait
//! from holding one stream while the others' launches sit. Every configuration runs on the real
//! kernels and again on the real kernels with read-phase pauses (`Build::Jitter`: now and then
//! a rank pauses up to 16 us between a wait and its reads, so its peers race into their next
//! call while it still reads; without the pauses one staging half for every call went
//! uncaught).
//!
//! Diagnostics (VERIFYBENCH_STRESS, comma-separated; not for runs): `ahead=N` batches in flight
//! (0: the whole plan at once), `wait=sync` waits on each rank's stream in turn instead,
//! `ranks=N` only N virtual ranks, `blocks=N` a smaller grid cap, `timeout=S` the bound of every
//! wait in seconds.
//!
//! Negative controls: the same test on builds of the kernels with a bug and the pauses
//! (`Build::EarlyFlag`: the copy-in flag released before the copy-in; `Build::OneHalf`: one
//! staging half for every call), on every rank set. The stress test must catch each by the wrong elements it counts; a
//! run that fails instead (a wait that ran out) proves nothing about the check, so a control is
//! caught only by wrong data, and one it passes or only fails means the test has no teeth, and
//! that fails the selftest.

use std::time::{Duration, Instant};

use cudarc::driver::sys::CUdeviceptr;

use super::kernels::StressKernels;
use super::virtual_ranks::{config_for, Check, Group};
use super::{Build, Impl, P2pConfig};
use crate::comm::device::Buffer;
use crate::model::DType;

/// Calls of one configuration.
pub(crate) const CALLS: usize = 10_000;
/// Calls per batch (each on buffers of its own).
pub(crate) const BATCH: usize = 4;
/// Calls one CUDA graph holds; it is replayed `CALLS / GRAPH_CALLS` times.
pub(crate) const GRAPH_CALLS: usize = 400;
/// Batches the host enqueues (eager) before it waits for every rank's stream (see the module
/// doc).
const AHEAD: usize = 2;
/// Smallest and largest message, bytes.
pub(crate) const MIN_BYTES: usize = 8;
pub(crate) const MAX_BYTES: usize = 1 << 20;
/// The longest short delay and the long one, ns.
pub(crate) const SHORT_DELAY_NS: u32 = 20_000;
pub(crate) const LONG_DELAY_NS: u32 = 200_000;
/// Bound of every wait: far beyond any delay, so only a bug runs into it.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of slack after each buffer (the unaligned layout's offsets).
const SLACK: usize = 64;
/// The plan's seed (fixed: a failure repeats).
const SEED: u64 = 0x5eed_0040_2026_0001;
// The device check sums every rank's input into every element: measure/pattern.rs's dense
// layout, which holds up to ACTIVE ranks. And every call's salt is distinct (the salt counter
// counts calls).
const _: () = assert!(super::MAX_RANKS <= crate::measure::pattern::ACTIVE);
const _: () =
    assert!(CALLS.div_ceil(GRAPH_CALLS) * GRAPH_CALLS <= crate::measure::pattern::DISTINCT_SALTS);

/// What a call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    AllReduce(Impl),
    Barrier,
}

/// Where a call's input and output lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    Aligned,
    /// Input one element past the buffer's start, output three.
    Unaligned,
    /// The output is the input buffer.
    InPlace,
}

/// One call of the plan, the same on every rank but its delay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Call {
    pub(crate) op: Op,
    pub(crate) dtype: DType,
    /// Elements (a barrier carries one it does not use).
    pub(crate) count: usize,
    pub(crate) layout: Layout,
    /// Per rank, the delay before the call on the device, ns.
    pub(crate) delay_ns: Vec<u32>,
}

/// xorshift64*: a small generator with a fixed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The calls of one configuration on `nranks` ranks (see the module doc): 10% barriers, the
/// rest one-shot and two-shot alike; sizes log-uniform in [MIN_BYTES, MAX_BYTES], never the same
/// bytes as the previous all-reduce; 70% aligned, 15% unaligned, 15% in place; per rank half the
/// calls without delay, one in a hundred with the long one, the rest uniform below the short one.
pub(crate) fn plan(calls: usize, nranks: usize, seed: u64) -> Vec<Call> {
    let mut rng = Rng(seed | 1);
    let mut out = Vec::with_capacity(calls);
    let mut last_bytes = 0usize;
    for _ in 0..calls {
        let op = match rng.below(10) {
            0 => Op::Barrier,
            1..=4 => Op::AllReduce(Impl::OneShot),
            _ => Op::AllReduce(Impl::TwoShot),
        };
        let dtype = [DType::Bf16, DType::F16, DType::F32][rng.below(3) as usize];
        let size = dtype.size() as usize;
        let (lo, hi) = (MIN_BYTES.div_ceil(size), MAX_BYTES / size);
        let bytes = MIN_BYTES as f64 * ((MAX_BYTES / MIN_BYTES) as f64).powf(rng.unit());
        let mut count = ((bytes as usize) / size).clamp(lo, hi);
        if count * size == last_bytes {
            count = if count < hi { count + 1 } else { count - 1 };
        }
        if matches!(op, Op::AllReduce(_)) {
            last_bytes = count * size;
        }
        let layout = match rng.below(20) {
            0..=2 => Layout::Unaligned,
            3..=5 => Layout::InPlace,
            _ => Layout::Aligned,
        };
        let delay_ns = (0..nranks)
            .map(|_| match rng.below(100) {
                0 => LONG_DELAY_NS,
                1..=49 => 0,
                _ => rng.below(SHORT_DELAY_NS as u64) as u32,
            })
            .collect();
        out.push(Call {
            op,
            dtype,
            count,
            layout,
            delay_ns,
        });
    }
    out
}

/// The steps of one batch on one rank, in stream order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Fills,
    Delay(usize),
    Call(usize),
    Checks,
    Advance,
}

fn steps(batch: usize) -> Vec<Step> {
    let mut v = vec![Step::Fills];
    for j in 0..batch {
        v.push(Step::Delay(j));
        v.push(Step::Call(j));
    }
    v.push(Step::Checks);
    v.push(Step::Advance);
    v
}

/// One rank's buffers: an input and an output per call of a batch, the salt counter, and the
/// check's counts (wrong, checked, first wrong call's salt + 1, its element, its bits).
struct RankBufs {
    ins: Vec<Buffer>,
    outs: Vec<Buffer>,
    ctr: Buffer,
    counts: Buffer,
}

/// The group under test and what each rank needs.
struct Bench {
    g: Group,
    k: Vec<StressKernels>,
    b: Vec<RankBufs>,
}

impl Bench {
    fn open(devices: &[usize], build: Build, knobs: &Knobs) -> anyhow::Result<Bench> {
        let n = devices.len();
        let same = devices.iter().all(|&d| d == devices[0]);
        let cap = if same {
            config_for(devices[0], n)?.max_blocks
        } else {
            P2pConfig::default().max_blocks
        };
        let cfg = P2pConfig {
            capacity: MAX_BYTES,
            timeout: knobs.timeout,
            build,
            max_blocks: knobs.blocks.map_or(cap, |b| b.min(cap)),
        };
        let g = Group::open_on(devices, cfg)?;
        let mut k = vec![];
        let mut b = vec![];
        for gpu in &g.gpus {
            k.push(StressKernels::load(gpu)?);
            let alloc = |bytes| gpu.alloc(bytes).map_err(anyhow::Error::from);
            let batch = || -> anyhow::Result<Vec<Buffer>> {
                (0..BATCH).map(|_| alloc(MAX_BYTES + SLACK)).collect()
            };
            b.push(RankBufs {
                ins: batch()?,
                outs: batch()?,
                ctr: alloc(8)?,
                counts: alloc(5 * 8)?,
            });
        }
        Ok(Bench { g, k, b })
    }

    /// Input and output of call `j` (of its batch) on rank `r`.
    fn ptrs(&self, r: usize, j: usize, c: &Call) -> (CUdeviceptr, CUdeviceptr) {
        let (i, o) = (self.b[r].ins[j].ptr(), self.b[r].outs[j].ptr());
        let size = c.dtype.size();
        match c.layout {
            Layout::Aligned => (i, o),
            Layout::Unaligned => (i + size, o + 3 * size),
            Layout::InPlace => (i, i),
        }
    }

    /// Enqueues `step` of `batch` on rank `r`'s stream.
    fn enqueue(&self, r: usize, batch: &[Call], step: Step) -> anyhow::Result<()> {
        let (gpu, k, b) = (&self.g.gpus[r], &self.k[r], &self.b[r]);
        let n = self.g.n() as u32;
        match step {
            Step::Fills | Step::Checks => {
                for (j, c) in batch.iter().enumerate() {
                    if c.op == Op::Barrier {
                        continue;
                    }
                    let (i, o) = self.ptrs(r, j, c);
                    let count = c.count as u64;
                    if step == Step::Fills {
                        k.fill(gpu, c.dtype, i, o, count, r as u32, b.ctr.ptr(), j as u32)?;
                    } else {
                        k.check(
                            gpu,
                            c.dtype,
                            o,
                            count,
                            n,
                            b.ctr.ptr(),
                            j as u32,
                            b.counts.ptr(),
                        )?;
                    }
                }
            }
            Step::Delay(j) => {
                let ns = batch[j].delay_ns[r];
                if ns > 0 {
                    k.delay(gpu, ns as u64)?;
                }
            }
            Step::Call(j) => {
                let c = &batch[j];
                match c.op {
                    Op::AllReduce(imp) => {
                        let (i, o) = self.ptrs(r, j, c);
                        self.g.ars[r].enqueue_raw(gpu, imp, i, o, c.count, c.dtype)?;
                    }
                    Op::Barrier => self.g.ars[r].barrier(gpu)?,
                }
            }
            Step::Advance => k.advance(gpu, b.ctr.ptr(), batch.len() as u32)?,
        }
        Ok(())
    }

    /// Every rank's counts after its stream finished: (wrong, checked, first wrong call's salt
    /// + 1, its element, its bits). Fails first with a wait that timed out.
    fn counts(&self) -> anyhow::Result<Vec<[u64; 5]>> {
        self.g.check()?;
        let mut out = vec![];
        for (gpu, b) in self.g.gpus.iter().zip(&self.b) {
            let bytes = gpu.download(&b.counts, 40)?;
            let mut c = [0u64; 5];
            for (k, w) in bytes.chunks(8).enumerate() {
                c[k] = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            }
            out.push(c);
        }
        Ok(out)
    }
}

/// What one run of the stress test saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// Wrong elements over all ranks.
    pub(crate) wrong: u64,
    /// Ranks whose checked count differs from the plan's.
    pub(crate) short: Vec<usize>,
    /// The first wrong element a rank saw: (rank, salt, element, bits).
    pub(crate) first: Option<(usize, u64, u64, u64)>,
    pub(crate) calls: usize,
    /// Elements each rank checked, as the plan says.
    pub(crate) elements: u64,
}

impl Outcome {
    fn clean(&self) -> bool {
        self.wrong == 0 && self.short.is_empty()
    }
}

/// Elements the plan's all-reduces check per rank.
pub(crate) fn planned_elements(calls: &[Call]) -> u64 {
    calls
        .iter()
        .filter(|c| c.op != Op::Barrier)
        .map(|c| c.count as u64)
        .sum()
}

/// Judges the ranks' counts against the plan's element count.
pub(crate) fn judge(counts: &[[u64; 5]], elements: u64, calls: usize) -> Outcome {
    let mut o = Outcome {
        wrong: 0,
        short: vec![],
        first: None,
        calls,
        elements,
    };
    for (r, c) in counts.iter().enumerate() {
        o.wrong += c[0];
        if c[1] != elements {
            o.short.push(r);
        }
        if c[2] != 0 && o.first.is_none() {
            o.first = Some((r, c[2] - 1, c[3], c[4]));
        }
    }
    o
}

/// The diagnostics of VERIFYBENCH_STRESS (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Knobs {
    /// Batches in flight; `None`: no bound.
    pub(crate) ahead: Option<usize>,
    /// Wait on each rank's stream in turn (`wait=sync`).
    pub(crate) sync: bool,
    pub(crate) ranks: Option<usize>,
    pub(crate) blocks: Option<u32>,
    /// Bound of every wait, seconds (`timeout=S`; [`TIMEOUT`] otherwise).
    pub(crate) timeout: Duration,
}

impl Knobs {
    /// Parses `spec` ("ahead=0,wait=sync,ranks=8,blocks=8"); a key or value it does not know
    /// is an error, so a misspelled diagnostic never runs the default silently.
    pub(crate) fn parse(spec: &str) -> anyhow::Result<Knobs> {
        let mut k = Knobs {
            ahead: Some(AHEAD),
            sync: false,
            ranks: None,
            blocks: None,
            timeout: TIMEOUT,
        };
        for item in spec.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (key, v) = item.split_once('=').unwrap_or((item, ""));
            let num = || -> anyhow::Result<usize> {
                v.parse()
                    .map_err(|_| anyhow::anyhow!("VERIFYBENCH_STRESS: {key}={v} is not a count"))
            };
            match key {
                "ahead" => k.ahead = Some(num()?).filter(|&n| n > 0),
                "wait" if v == "sync" => k.sync = true,
                "ranks" => k.ranks = Some(num()?).filter(|n| (2..=super::MAX_RANKS).contains(n)),
                "blocks" => k.blocks = Some(num()? as u32).filter(|&n| n > 0),
                "timeout" => k.timeout = Duration::from_secs(num()?.max(1) as u64),
                _ => anyhow::bail!(
                    "VERIFYBENCH_STRESS: {item:?} is not one of ahead=N, wait=sync, ranks=2..8, blocks=N, timeout=S"
                ),
            }
        }
        Ok(k)
    }

    fn from_env() -> anyhow::Result<Knobs> {
        Knobs::parse(&std::env::var("VERIFYBENCH_STRESS").unwrap_or_default())
    }
}

/// Runs one configuration: `devices` (rank r on `devices[r]`), the kernels of `build`, eager or
/// from graphs.
fn run(devices: &[usize], build: Build, graph: bool, knobs: &Knobs) -> anyhow::Result<Outcome> {
    let ahead = knobs.ahead;
    let drain = |bench: &Bench| -> anyhow::Result<()> {
        if knobs.sync {
            for gpu in &bench.g.gpus {
                gpu.sync()?;
            }
            return Ok(());
        }
        bench.g.wait_all(2 * knobs.timeout)
    };
    let bench = Bench::open(devices, build, knobs)?;
    let n = devices.len();
    let (elements, calls) = if graph {
        let calls = plan(GRAPH_CALLS, n, SEED);
        let replays = CALLS.div_ceil(GRAPH_CALLS);
        let mut graphs = vec![];
        for r in 0..n {
            let gpu = &bench.g.gpus[r];
            graphs.push(gpu.capture(|| {
                for batch in calls.chunks(BATCH) {
                    for step in steps(batch.len()) {
                        bench.enqueue(r, batch, step)?;
                    }
                }
                Ok(())
            })?);
        }
        for _ in 0..replays {
            for gr in &graphs {
                gr.launch()?;
            }
            if ahead.is_some() {
                drain(&bench)?;
            }
        }
        (
            planned_elements(&calls) * replays as u64,
            GRAPH_CALLS * replays,
        )
    } else {
        let calls = plan(CALLS, n, SEED);
        for (i, batch) in calls.chunks(BATCH).enumerate() {
            for step in steps(batch.len()) {
                for r in 0..n {
                    bench.enqueue(r, batch, step)?;
                }
            }
            if ahead.is_some_and(|a| (i + 1) % a == 0) {
                drain(&bench)?;
            }
        }
        (planned_elements(&calls), CALLS)
    };
    drain(&bench)?;
    Ok(judge(&bench.counts()?, elements, calls))
}

fn name_of(devices: &[usize]) -> String {
    if devices.iter().all(|&d| d == devices[0]) {
        format!("{} virtual ranks", devices.len())
    } else {
        format!("GPUs {devices:?}")
    }
}

/// The stress checks for `devices` (see the module doc): one rank per GPU where they are
/// distinct, else 2, 4 and 8 virtual ranks of the one GPU; eager and graph, on the real kernels
/// and with read-phase pauses; then the negative controls on every rank set ([`control`]).
pub(crate) fn stress_checks(devices: &[usize]) -> Vec<Check> {
    let knobs = match Knobs::from_env() {
        Ok(k) => k,
        Err(e) => return vec![Check::failed("p2p stress".into(), &e)],
    };
    let distinct = {
        let mut d = devices.to_vec();
        d.sort_unstable();
        d.dedup();
        d
    };
    let sets: Vec<Vec<usize>> = if distinct.len() >= 2 {
        vec![devices.to_vec()]
    } else {
        let ranks = knobs.ranks.map_or(vec![2, 4, 8], |n| vec![n]);
        ranks.iter().map(|&n| vec![devices[0]; n]).collect()
    };
    let mut out = vec![];
    for set in &sets {
        for build in [Build::Real, Build::Jitter] {
            for graph in [false, true] {
                let name = format!(
                    "p2p stress, {}: {}{}",
                    name_of(set),
                    if graph { "graph" } else { "eager" },
                    if build == Build::Jitter {
                        ", read-phase pauses"
                    } else {
                        ""
                    }
                );
                let t0 = Instant::now();
                let r = run(set, build, graph, &knobs);
                let took = t0.elapsed().as_secs_f64();
                out.push(progress(match r {
                    Ok(o) => Check {
                        name,
                        pass: o.clean(),
                        detail: real_detail(&o, took),
                    },
                    Err(e) => Check::failed(name, &e),
                }));
            }
        }
    }
    for set in &sets {
        for build in [Build::EarlyFlag, Build::OneHalf] {
            out.push(progress(control(set, build, &knobs)));
        }
    }
    out
}

/// Says `c` on stderr as it comes (the whole test takes a minute or more), and returns it.
fn progress(c: Check) -> Check {
    crate::note!(
        "{}: {} ({})",
        c.name,
        if c.pass { "pass" } else { "FAIL" },
        c.detail
    );
    c
}

/// A negative control on `set`: eager, then from graphs where eager found nothing. Caught only
/// by wrong elements; a run that failed (a wait that ran out) says nothing about the check.
fn control(set: &[usize], build: Build, knobs: &Knobs) -> Check {
    let name = format!(
        "p2p stress negative control, {}: {}",
        name_of(set),
        build.describe()
    );
    let mut seen = vec![];
    for graph in [false, true] {
        let mode = if graph { "graph" } else { "eager" };
        match run(set, build, graph, knobs) {
            Ok(o) if o.clean() => seen.push(format!("{mode}: passed")),
            Ok(o) => {
                return Check {
                    name,
                    pass: true,
                    detail: format!("caught ({}{mode}: {})", prefix(&seen), wrong_detail(&o)),
                }
            }
            Err(e) => seen.push(format!("{mode}: the run failed before its check: {e:#}")),
        }
    }
    Check {
        name,
        pass: false,
        detail: format!(
            "NOT caught by a wrong element ({}): the stress test has no teeth",
            seen.join("; ")
        ),
    }
}

fn prefix(seen: &[String]) -> String {
    seen.iter().map(|s| format!("{s}; ")).collect()
}

fn wrong_detail(o: &Outcome) -> String {
    let mut s = format!("{} wrong elements", crate::units::grouped(o.wrong));
    if let Some((r, salt, i, bits)) = o.first {
        s.push_str(&format!(
            ", first on rank {r} in call salt {salt}, element {i} (bits {bits:#x})"
        ));
    }
    if !o.short.is_empty() {
        s.push_str(&format!(
            "; ranks {:?} checked another number of elements than the plan's {}",
            o.short, o.elements
        ));
    }
    s
}

fn real_detail(o: &Outcome, took: f64) -> String {
    if !o.clean() {
        return wrong_detail(o);
    }
    format!(
        "{} calls (one-shot, two-shot, barrier interleaved; 8 B to 1 MiB, a new size every call; skew to {} us), {} elements per rank exact, checked on the device, {took:.1} s",
        crate::units::grouped(o.calls as u64),
        LONG_DELAY_NS / 1000,
        crate::units::grouped(o.elements)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_varies_every_call_and_covers_everything() {
        let p = plan(CALLS, 8, SEED);
        assert_eq!(p.len(), 10_000);
        // the same plan for the same seed (every rank, every run)
        assert_eq!(p, plan(CALLS, 8, SEED));
        let ars: Vec<&Call> = p.iter().filter(|c| c.op != Op::Barrier).collect();
        // a new size every all-reduce, always within 8 B ..= 1 MiB in whole elements
        for w in ars.windows(2) {
            let b = |c: &Call| c.count * c.dtype.size() as usize;
            assert_ne!(b(w[0]), b(w[1]));
        }
        for c in &p {
            let bytes = c.count * c.dtype.size() as usize;
            assert!((MIN_BYTES..=MAX_BYTES).contains(&bytes), "{bytes}");
            assert_eq!(c.delay_ns.len(), 8);
        }
        let count = |f: &dyn Fn(&Call) -> bool| p.iter().filter(|c| f(c)).count();
        let one = count(&|c| c.op == Op::AllReduce(Impl::OneShot));
        let two = count(&|c| c.op == Op::AllReduce(Impl::TwoShot));
        let bar = count(&|c| c.op == Op::Barrier);
        // 10% / 40% / 50% of 10,000, give or take
        assert!((800..1200).contains(&bar), "{bar}");
        assert!((3600..4400).contains(&one), "{one}");
        assert!((4600..5400).contains(&two), "{two}");
        // interleaved: every kind follows every kind
        for a in [
            Op::Barrier,
            Op::AllReduce(Impl::OneShot),
            Op::AllReduce(Impl::TwoShot),
        ] {
            for b in [
                Op::Barrier,
                Op::AllReduce(Impl::OneShot),
                Op::AllReduce(Impl::TwoShot),
            ] {
                assert!(
                    p.windows(2).any(|w| w[0].op == a && w[1].op == b),
                    "{a:?} -> {b:?}"
                );
            }
        }
        for d in [DType::Bf16, DType::F16, DType::F32] {
            assert!(count(&|c| c.dtype == d) > 3000, "{d:?}");
        }
        for l in [Layout::Aligned, Layout::Unaligned, Layout::InPlace] {
            assert!(count(&|c| c.layout == l) > 1000, "{l:?}");
        }
        // sizes across the whole range: tiny, verify-sized and near 1 MiB, and element tails
        let bytes: Vec<usize> = ars
            .iter()
            .map(|c| c.count * c.dtype.size() as usize)
            .collect();
        assert!(bytes.iter().any(|&b| b <= 16));
        assert!(bytes.iter().any(|&b| (32_768..65_536).contains(&b)));
        assert!(bytes.iter().any(|&b| b >= 900_000));
        assert!(bytes.iter().filter(|&&b| b % 16 != 0).count() > 1000);
        // skew: per rank no delay about half the time, the long one now and then, and ranks
        // that differ within a call
        let delays: Vec<u32> = p.iter().flat_map(|c| c.delay_ns.iter().copied()).collect();
        let zero = delays.iter().filter(|&&d| d == 0).count();
        assert!((36_000..44_000).contains(&zero), "{zero} of 80,000");
        assert!(delays.iter().filter(|&&d| d == LONG_DELAY_NS).count() > 400);
        assert!(delays
            .iter()
            .all(|&d| d < SHORT_DELAY_NS || d == LONG_DELAY_NS));
        assert!(
            p.iter()
                .filter(|c| c.delay_ns.iter().any(|&d| d != c.delay_ns[0]))
                .count()
                > 9000
        );
        // the graph's plan is the first GRAPH_CALLS calls of the same sequence, and the calls of
        // both modes stay within the salts that are all distinct
        assert_eq!(plan(GRAPH_CALLS, 8, SEED)[..], p[..GRAPH_CALLS]);
        assert!(GRAPH_CALLS * CALLS.div_ceil(GRAPH_CALLS) >= CALLS);
    }

    #[test]
    fn the_diagnostic_knobs_parse_or_refuse() {
        let none = Knobs::parse("").unwrap();
        assert_eq!(
            (none.ahead, none.sync, none.ranks, none.blocks),
            (Some(AHEAD), false, None, None)
        );
        let k = Knobs::parse("ahead=0, wait=sync,ranks=8,blocks=8").unwrap();
        assert_eq!(
            (k.ahead, k.sync, k.ranks, k.blocks),
            (None, true, Some(8), Some(8))
        );
        assert_eq!(Knobs::parse("ahead=5").unwrap().ahead, Some(5));
        assert_eq!(
            Knobs::parse("timeout=2").unwrap().timeout,
            Duration::from_secs(2)
        );
        assert_eq!(Knobs::parse("").unwrap().timeout, TIMEOUT);
        // a misspelled key, a value that is not a count, an unknown wait: refused, naming it
        for bad in ["ahaed=1", "ahead=x", "wait=poll", "blocks=-1"] {
            let e = Knobs::parse(bad).unwrap_err().to_string();
            assert!(e.starts_with("VERIFYBENCH_STRESS: "), "{bad}: {e}");
        }
        // ranks outside 2..=8 fall back to every set
        assert_eq!(Knobs::parse("ranks=9").unwrap().ranks, None);
    }

    #[test]
    fn a_batch_fills_first_runs_its_calls_with_their_delays_and_checks_last() {
        assert_eq!(
            steps(2),
            [
                Step::Fills,
                Step::Delay(0),
                Step::Call(0),
                Step::Delay(1),
                Step::Call(1),
                Step::Checks,
                Step::Advance
            ]
        );
    }

    #[test]
    fn the_counts_are_judged_against_the_plan() {
        let calls = vec![
            Call {
                op: Op::AllReduce(Impl::OneShot),
                dtype: DType::Bf16,
                count: 100,
                layout: Layout::Aligned,
                delay_ns: vec![0, 0],
            },
            Call {
                op: Op::Barrier,
                dtype: DType::F32,
                count: 7,
                layout: Layout::Aligned,
                delay_ns: vec![0, 0],
            },
            Call {
                op: Op::AllReduce(Impl::TwoShot),
                dtype: DType::F32,
                count: 30,
                layout: Layout::InPlace,
                delay_ns: vec![0, 0],
            },
        ];
        // 100 + 30: the barrier checks nothing
        assert_eq!(planned_elements(&calls), 130);
        let ok = judge(&[[0, 130, 0, 0, 0], [0, 130, 0, 0, 0]], 130, 3);
        assert!(ok.clean());
        // a rank whose check ran over fewer elements is not clean even with no wrong element
        let short = judge(&[[0, 130, 0, 0, 0], [0, 100, 0, 0, 0]], 130, 3);
        assert!(!short.clean() && short.short == [1]);
        // wrong elements: summed, the first one named (salt stored + 1)
        let bad = judge(&[[0, 130, 0, 0, 0], [5, 130, 8, 17, 0xffff]], 130, 3);
        assert_eq!((bad.wrong, bad.first), (5, Some((1, 7, 17, 0xffff))));
        assert!(
            wrong_detail(&bad).contains("first on rank 1 in call salt 7, element 17 (bits 0xffff)")
        );
    }

    /// The fill and check kernels compute measure/pattern.rs's values: the same slot count, the
    /// same offset formula, and the dense sum (every rank feeds every element up to 16 ranks).
    #[test]
    fn the_device_pattern_is_measure_patterns() {
        let src = super::super::kernels::ALLREDUCE_SRC;
        let line = src
            .lines()
            .find(|l| l.starts_with("#define PATTERN_SLOTS"))
            .unwrap();
        let slots: usize = line.split_whitespace().nth(2).unwrap().parse().unwrap();
        assert_eq!(slots, crate::measure::pattern::SLOTS);
        assert!(src.contains("return (u32)((i + digit + slot) % 7ull);"));
        assert!(src.contains("D::bits((float)(rank + 1u + pattern_offset(i, op)))"));
        assert!(src.contains("(float)(base + nranks * pattern_offset(i, op))"));
        // the host's values for 8 ranks at salt 5: rank r gives r + 1 + offset, the sum
        // 36 + 8 x offset; pattern.rs agrees element by element
        use crate::measure::pattern::{input_value, sum_value};
        for i in 0..50 {
            let off = input_value(0, i, 5, 8) - 1.0;
            for r in 0..8 {
                assert_eq!(input_value(r, i, 5, 8), (r + 1) as f32 + off);
            }
            assert_eq!(sum_value(i, 5, 8), 36.0 + 8.0 * off);
        }
    }
}
