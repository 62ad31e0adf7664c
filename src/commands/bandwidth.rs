//! `bandwidth`'s measurement: the device-to-device copy bandwidth and the weight-streaming
//! kernels' achieved bandwidth and flop rate at each token count, measured in the same run on
//! each GPU (the ceiling the compute of a verify step is held to), the roofline the tensor-core
//! kernel is held to (the read bandwidth and the tensor-core peak, both measured here), and single
//! streaming operations of verify-step sizes. The flags live in `cli/bandwidth.rs`; this module
//! takes a plain request.

use std::path::PathBuf;

use serde::Serialize;

use crate::comm::kernels::{Kernels, Pool, StreamKernel, CUDA_CORE_MAX_TOKENS};
use crate::comm::{self, Buffer, Gpu};
use crate::units::human_bytes;

/// What to measure.
#[derive(Debug, Clone)]
pub(crate) struct BandwidthRequest {
    /// Bytes per pass (rounded down to a power of two for the streaming pool).
    pub(crate) bytes: u64,
    /// Device ordinals to measure (`None`: all).
    pub(crate) devices: Option<Vec<usize>>,
    /// Timed passes per measurement (the best is kept, the median shown beside it).
    pub(crate) iters: u32,
    /// Token counts to stream at (each on every kernel that takes it).
    pub(crate) tokens: Vec<usize>,
    /// Sizes of single streaming operations to time (3 tokens).
    pub(crate) op_sizes: Vec<u64>,
    /// Where to write the results as JSON.
    pub(crate) export_json: Option<PathBuf>,
    /// What stdout gets: the table as each GPU is measured, or (json) at the end what
    /// `--export-json` writes.
    pub(crate) format: crate::output::Format,
}

/// One GPU's figures (GB/s = 1e9 bytes per second, TFLOP/s = 1e12 flops per second): the
/// payload of a `bandwidth` record is a list of these.
#[derive(Debug, Clone, Serialize)]
pub struct Bandwidth {
    pub device: usize,
    pub name: String,
    pub bytes: u64,
    pub l2_bytes: u64,
    /// cuMemcpyDtoD, counting bytes read plus bytes written.
    pub copy_rw_gbps: f64,
    /// cuMemcpyDtoD, counting bytes read only.
    pub copy_read_gbps: f64,
    /// The kernel the replay streams with at each token count (bytes read, best pass).
    pub stream_gbps: Vec<(usize, f64)>,
    /// Every streaming kernel at every token count it takes.
    pub kernels: Vec<KernelRate>,
    /// What the tensor-core kernel is held to; absent on a GPU without bf16 tensor cores.
    pub roofline: Option<Roofline>,
    /// Single streaming operations of 3 tokens: (bytes, median us, GB/s).
    pub per_op: Vec<(u64, f64, f64)>,
}

/// One streaming kernel at one token count: passes over the whole pool.
#[derive(Debug, Clone, Serialize)]
pub struct KernelRate {
    /// "cuda_cores" (`stream_weights_T`) or "tensor_cores" (`stream_mma_MW`).
    pub kernel: &'static str,
    pub tokens: usize,
    /// Weights read per second, best pass.
    pub gbps: f64,
    /// The same, median pass.
    pub gbps_median: f64,
    /// Flops per second of the best pass: 2 per bf16 weight per token, T per byte.
    pub tflops: f64,
    /// `gbps` over the copy's read + write bandwidth, %.
    pub pct_copy_rw: f64,
    /// `gbps` over the copy's read bandwidth, %.
    pub pct_copy_read: f64,
    /// Tensor cores: the roofline at this token count, min(T x read, peak), TFLOP/s.
    pub roofline_tflops: Option<f64>,
    /// Tensor cores: `tflops` over `roofline_tflops`, %.
    pub pct_roofline: Option<f64>,
    /// Tensor cores: the smaller term of the roofline at this token count, "memory" or
    /// "compute".
    pub bound: Option<&'static str>,
    /// The SM clock as the best pass ended (`sm_clock`: cycles over the global timer), MHz;
    /// a card at its power limit holds it under the clock `mma_peak` had. The global timer is
    /// not the clock's own reference (on an H100 rated 1980 MHz it read 1932-2085 MHz after
    /// memory-bound passes, results/h100x1/clock-25e808d): the table shows it as a share of
    /// `mma_peak`'s, measured the same way.
    pub sm_mhz: Option<f64>,
    /// The SM clock over every timed pass, median, MHz.
    pub sm_mhz_median: Option<f64>,
    /// Tensor cores, compute-bound: `tflops` over the compute term scaled to the clock of the
    /// best pass (peak x `sm_mhz` / `tensor_peak_mhz`), %: what is left once the clock the card
    /// gave the pass is taken out.
    pub pct_roofline_at_clock: Option<f64>,
}

/// The roofline of the tensor-core kernel, every term measured in the same run.
#[derive(Debug, Clone, Serialize)]
pub struct Roofline {
    /// The memory term: the CUDA-core kernel at 1 token over the whole pool (a read with one
    /// multiply-add per weight), GB/s, best pass.
    pub read_gbps: f64,
    /// The compute term: `mma_peak` (mma.sync m16n8k16 bf16 with f32 accumulation, the
    /// instruction `stream_mma` issues, operands in registers), best launch, TFLOP/s.
    pub tensor_peak_tflops: f64,
    /// The same, median launch.
    pub tensor_peak_median_tflops: f64,
    /// The SM clock as `mma_peak`'s best launch ended, MHz.
    pub tensor_peak_mhz: Option<f64>,
    /// `stream_mma` at `l2_tokens` tokens on a pool that fits the L2 (memory not the limit),
    /// best pass, TFLOP/s: the kernel's own ceiling beside the instruction's.
    pub l2_tflops: f64,
    pub l2_tokens: usize,
    pub l2_pool_bytes: u64,
    /// Where the two terms cross: peak / read bandwidth (tokens; flops per byte = T).
    pub knee_tokens: f64,
}

/// Best and median of a measurement's timed passes, us, and the SM clock as they ended, MHz
/// (the best pass's and the median), where it was read.
#[derive(Debug, Clone, Copy)]
struct Timing {
    best_us: f64,
    median_us: f64,
    best_mhz: Option<f64>,
    median_mhz: Option<f64>,
}

/// `iters` timed runs of `f` (events around each) after one untimed; with `clock`, the SM
/// clock read after each (outside the events).
fn time_us(
    gpu: &Gpu,
    iters: u32,
    clock: Option<(&Kernels, &Buffer)>,
    mut f: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<Timing> {
    let (a, b) = (gpu.event()?, gpu.event()?);
    f()?; // warm-up
    gpu.sync()?;
    let (mut t, mut mhz) = (vec![], vec![]);
    for _ in 0..iters.max(1) {
        gpu.record(&a)?;
        f()?;
        gpu.record(&b)?;
        if let Some((k, out)) = clock {
            mhz.push(k.sm_clock_mhz(gpu, out)?);
        }
        gpu.sync()?;
        t.push(a.elapsed_us(&b)?);
    }
    let best = (0..t.len()).fold(0, |i, j| if t[j] < t[i] { j } else { i });
    Ok(Timing {
        best_us: t[best],
        median_us: crate::measure::Summary::from_samples(&t).map_or(t[best], |s| s.median_us),
        best_mhz: mhz.get(best).copied(),
        median_mhz: (!mhz.is_empty()).then(|| crate::measure::stats::median(&mhz)),
    })
}

/// `tokens` activation rows of varied values (as [`Pool::new`]'s weights: timing data).
fn activations(gpu: &Gpu, tokens: usize) -> anyhow::Result<Buffer> {
    let act: Vec<u8> = (0..tokens * 8)
        .flat_map(|i| (0.5f32 + ((i * 37) % 23) as f32 / 16.0).to_le_bytes())
        .collect();
    let a = gpu.alloc(act.len())?;
    gpu.upload(&a, &act)?;
    Ok(a)
}

/// What one GPU's kernels are timed with.
struct Bench<'a> {
    gpu: &'a Gpu,
    kernels: &'a Kernels,
    pool: &'a Pool,
    partial: Buffer,
    /// `sm_clock`'s output.
    clock: Buffer,
    iters: u32,
}

impl Bench<'_> {
    /// One pass of `kernel` at `tokens` tokens over `laps` x the pool (from vector 0), timed.
    fn pass(
        &self,
        kernel: StreamKernel,
        tokens: usize,
        pool: &Pool,
        laps: u64,
    ) -> anyhow::Result<Timing> {
        let a = activations(self.gpu, tokens)?;
        let nvec = pool.vecs() * laps;
        let clock = Some((self.kernels, &self.clock));
        time_us(self.gpu, self.iters, clock, || {
            self.kernels
                .stream_on(kernel, self.gpu, pool, 0, nvec, &a, tokens, &self.partial)
        })
    }

    /// `mma_peak` timed: a short launch sizes the loop to about 10 ms, then the timed ones.
    /// Returns (best, median) TFLOP/s and the timing's clocks.
    fn peak(&self) -> anyhow::Result<Option<(f64, f64, Timing)>> {
        let out = self.gpu.alloc(self.kernels.peak_out_bytes())?;
        let (a, b) = (self.gpu.event()?, self.gpu.event()?);
        // the first launch loads the kernel; the second, timed, sizes the loop
        if self
            .kernels
            .mma_peak(self.gpu, self.pool, 16, &out)?
            .is_none()
        {
            return Ok(None);
        }
        let probe_iters = 256u64;
        self.gpu.record(&a)?;
        self.kernels
            .mma_peak(self.gpu, self.pool, probe_iters, &out)?;
        self.gpu.record(&b)?;
        self.gpu.sync()?;
        let probe_us = a.elapsed_us(&b)?.max(1.0);
        let iters = ((10_000.0 / probe_us) * probe_iters as f64).clamp(256.0, 1e7) as u64;
        let mut flops = 0;
        let clock = Some((self.kernels, &self.clock));
        let t = time_us(self.gpu, self.iters, clock, || {
            flops = self
                .kernels
                .mma_peak(self.gpu, self.pool, iters, &out)?
                .unwrap_or(0);
            Ok(())
        })?;
        let tf = |us: f64| flops as f64 / (us * 1e6);
        Ok(Some((tf(t.best_us), tf(t.median_us), t)))
    }
}

/// Measures one GPU: the copy, the streaming kernels at `tokens`, the roofline's terms and the
/// single operations.
pub(crate) fn measure(
    device: usize,
    bytes: u64,
    iters: u32,
    tokens: &[usize],
    op_sizes: &[u64],
) -> anyhow::Result<Bandwidth> {
    let gpu = Gpu::open(device)?;
    let l2 = gpu.l2_bytes();
    let (free, _) = gpu.mem_info()?;
    if 2 * bytes + (64 << 20) > free as u64 {
        crate::usage_bail!(
            "--bytes {} needs {} free on GPU {device}, {} is free",
            human_bytes(bytes),
            human_bytes(2 * bytes),
            human_bytes(free as u64)
        );
    }
    let kernels = Kernels::load(&gpu)?;
    let pool = Pool::new(&gpu, bytes)?;
    let n = pool.vecs() * 16;
    let copy = {
        let dst = gpu.alloc(n as usize)?;
        time_us(&gpu, iters, None, || {
            Ok(gpu.copy(&dst, pool.buffer(), n as usize)?)
        })?
    };
    let (copy_rw, copy_read) = (
        2.0 * n as f64 / (copy.best_us * 1e3),
        n as f64 / (copy.best_us * 1e3),
    );
    let bench = Bench {
        gpu: &gpu,
        kernels: &kernels,
        pool: &pool,
        partial: gpu.alloc(kernels.partial_bytes())?,
        clock: gpu.alloc(Kernels::CLOCK_OUT_BYTES)?,
        iters,
    };
    note_grids(device, &kernels, tokens);
    let gbps = |t: &Timing| (n as f64 / (t.best_us * 1e3), n as f64 / (t.median_us * 1e3));
    let read = gbps(&bench.pass(StreamKernel::CudaCores, 1, &pool, 1)?).0;
    let roofline = roofline(&bench, l2, read, tokens)?;
    let mut rates = vec![];
    for &t in tokens {
        for kernel in [StreamKernel::CudaCores, StreamKernel::TensorCores] {
            let takes = match kernel {
                StreamKernel::CudaCores => t <= CUDA_CORE_MAX_TOKENS,
                StreamKernel::TensorCores => kernels.has_tensor_cores(),
            };
            if !takes {
                continue;
            }
            let timing = bench.pass(kernel, t, &pool, 1)?;
            let copy = (copy_rw, copy_read);
            let r = rate(kernel, t, gbps(&timing), copy, roofline.as_ref());
            rates.push(r.at_clock(&timing, roofline.as_ref()));
        }
    }
    let stream_gbps = tokens
        .iter()
        .filter_map(|&t| {
            let k = kernels.kernel_for(t).key();
            rates
                .iter()
                .find(|r| r.tokens == t && r.kernel == k)
                .map(|r| (t, r.gbps))
        })
        .collect();
    Ok(Bandwidth {
        per_op: single_ops(&bench, op_sizes)?,
        device,
        name: gpu.info().name,
        bytes: n,
        l2_bytes: l2,
        copy_rw_gbps: copy_rw,
        copy_read_gbps: copy_read,
        stream_gbps,
        kernels: rates,
        roofline,
    })
}

/// The grids and what the driver compiled the tensor-core kernels to, as a note.
fn note_grids(device: usize, kernels: &Kernels, tokens: &[usize]) {
    let small: Vec<usize> = tokens
        .iter()
        .copied()
        .filter(|&t| t <= CUDA_CORE_MAX_TOKENS)
        .collect();
    crate::note!(
        "GPU {device}: streaming grids from the occupancy query: CUDA cores {}",
        kernels.grid_summary(StreamKernel::CudaCores, &small)
    );
    if kernels.has_tensor_cores() {
        crate::note!(
            "GPU {device}: tensor cores {}; compiled: {}",
            kernels.grid_summary(StreamKernel::TensorCores, tokens),
            kernels.tensor_resources()
        );
    }
}

/// The roofline's terms: `read` (GB/s), `mma_peak`, and `stream_mma` at the largest of
/// `tokens` on an L2-resident pool (a quarter of the L2, at least 1 MiB) streamed as many bytes
/// as the main pool holds.
fn roofline(b: &Bench, l2: u64, read: f64, tokens: &[usize]) -> anyhow::Result<Option<Roofline>> {
    let Some((peak, peak_median, peak_timing)) = b.peak()? else {
        return Ok(None);
    };
    let l2_tokens = tokens.iter().copied().max().unwrap_or(1);
    let small = Pool::new(b.gpu, (l2 / 4).max(1 << 20))?;
    let laps = (b.pool.vecs() / small.vecs()).max(1);
    let t = b.pass(StreamKernel::TensorCores, l2_tokens, &small, laps)?;
    let bytes = (small.vecs() * laps * 16) as f64;
    Ok(Some(Roofline {
        read_gbps: read,
        tensor_peak_tflops: peak,
        tensor_peak_median_tflops: peak_median,
        tensor_peak_mhz: peak_timing.best_mhz,
        l2_tflops: bytes * l2_tokens as f64 / (t.best_us * 1e6),
        l2_tokens,
        l2_pool_bytes: small.vecs() * 16,
        knee_tokens: peak * 1e3 / read,
    }))
}

/// One kernel's figures at `tokens` tokens, (best, median) GB/s, against the copy (read +
/// write, read) and the roofline.
fn rate(
    kernel: StreamKernel,
    tokens: usize,
    (gbps, median): (f64, f64),
    (copy_rw, copy_read): (f64, f64),
    roofline: Option<&Roofline>,
) -> KernelRate {
    let tflops = gbps * tokens as f64 / 1e3;
    let roof = roofline
        .filter(|_| kernel == StreamKernel::TensorCores)
        .map(|r| {
            let memory = tokens as f64 * r.read_gbps / 1e3;
            let bound = if memory < r.tensor_peak_tflops {
                "memory"
            } else {
                "compute"
            };
            (memory.min(r.tensor_peak_tflops), bound)
        });
    KernelRate {
        kernel: kernel.key(),
        tokens,
        gbps,
        gbps_median: median,
        tflops,
        pct_copy_rw: 100.0 * gbps / copy_rw,
        pct_copy_read: 100.0 * gbps / copy_read,
        roofline_tflops: roof.map(|r| r.0),
        pct_roofline: roof.map(|r| 100.0 * tflops / r.0),
        bound: roof.map(|r| r.1),
        sm_mhz: None,
        sm_mhz_median: None,
        pct_roofline_at_clock: None,
    }
}

impl KernelRate {
    /// The row with the SM clock of its timing and, compute-bound, its share of the compute
    /// term scaled to that clock.
    fn at_clock(self, t: &Timing, roofline: Option<&Roofline>) -> KernelRate {
        let scaled = match (
            self.bound,
            roofline.and_then(|r| Some((r, r.tensor_peak_mhz?))),
        ) {
            (Some("compute"), Some((r, peak_mhz))) => t
                .best_mhz
                .map(|mhz| 100.0 * self.tflops / (r.tensor_peak_tflops * mhz / peak_mhz)),
            _ => None,
        };
        KernelRate {
            sm_mhz: t.best_mhz,
            sm_mhz_median: t.median_mhz,
            pct_roofline_at_clock: scaled,
            ..self
        }
    }
}

/// Single operations of 3 tokens at rotating offsets (so that small ones do not hit L2 from the
/// last): median of 35 after 5 untimed, as (bytes, us, GB/s).
fn single_ops(b: &Bench, op_sizes: &[u64]) -> anyhow::Result<Vec<(u64, f64, f64)>> {
    let tokens = 3usize;
    let a = activations(b.gpu, tokens)?;
    let (e0, e1) = (b.gpu.event()?, b.gpu.event()?);
    let mut per_op = vec![];
    for &sz in op_sizes {
        let nvec = (sz / 16).max(1).min(b.pool.vecs());
        let mut t = vec![];
        for k in 0..40u64 {
            let start = (k * (nvec + 4096)) & (b.pool.vecs() - 1);
            b.gpu.record(&e0)?;
            b.kernels
                .stream(b.gpu, b.pool, start, nvec, &a, tokens, &b.partial)?;
            b.gpu.record(&e1)?;
            b.gpu.sync()?;
            if k >= 5 {
                t.push(e0.elapsed_us(&e1)?);
            }
        }
        let med = crate::measure::Summary::from_samples(&t).map_or(0.0, |s| s.median_us);
        per_op.push((nvec * 16, med, (nvec * 16) as f64 / (med * 1e3)));
    }
    Ok(per_op)
}

/// Measures every requested GPU, prints each GPU's table as it goes (or, with `--format json`,
/// the export at the end), and writes the JSON export if asked. Returns the exit code.
pub(crate) fn run(a: &BandwidthRequest) -> anyhow::Result<i32> {
    let started = crate::util::now_utc();
    crate::util::Files::new()
        .output("--export-json", a.export_json.as_deref())
        .check()?;
    if let Some(&t) = a
        .tokens
        .iter()
        .find(|&&t| t == 0 || t > comm::MAX_STREAM_TOKENS)
    {
        crate::usage_bail!(
            "--tokens {t}: the streaming kernels take 1 to {} tokens",
            comm::MAX_STREAM_TOKENS
        );
    }
    if !comm::libs::cuda_present() || comm::device_count() == 0 {
        crate::usage_bail!("no GPU found: bandwidth measures a GPU's memory and needs one");
    }
    comm::libs::prepare(None)?;
    let devices = a
        .devices
        .clone()
        .unwrap_or_else(|| (0..comm::device_count()).collect());
    let table = !a.format.is_json();
    if table {
        println!(
            "# verifybench bandwidth (measured; best of {} passes, median beside; GB/s = 1e9 B/s; 2 flops per bf16 weight per token)",
            a.iters
        );
    }
    let mut all = vec![];
    for &d in &devices {
        let b = measure(d, a.bytes, a.iters, &a.tokens, &a.op_sizes)?;
        if table {
            print!("{}", render(&b));
        }
        all.push(b);
    }
    let prov = crate::machine::provenance("cuda", started, &devices);
    let rec = crate::record::Record::other(
        crate::record::Source::Measured,
        prov,
        crate::record::kinds::BANDWIDTH,
        &all,
    )?;
    crate::output::write_and_print(&rec.to_json_pretty(), a.export_json.as_deref(), !table)?;
    Ok(0)
}

/// One GPU's lines: the copy, the roofline's terms, a row per kernel and token count, the
/// single operations.
fn render(b: &Bandwidth) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "GPU {} {}: pool {}, L2 {}",
        b.device,
        b.name,
        human_bytes(b.bytes),
        human_bytes(b.l2_bytes)
    );
    let _ = writeln!(
        s,
        "  copy (cuMemcpyDtoD): {:.0} GB/s read + write, {:.0} GB/s read",
        b.copy_rw_gbps, b.copy_read_gbps
    );
    if let Some(r) = &b.roofline {
        let _ = writeln!(
            s,
            "  read bandwidth: {:.0} GB/s (CUDA cores at 1 token: one multiply-add per weight read)",
            r.read_gbps
        );
        let _ = writeln!(
            s,
            "  tensor-core peak: {:.1} TFLOP/s (mma_peak: mma.sync m16n8k16 bf16, f32 accumulation, operands in registers; median {:.1}); stream_mma at {} tokens on an L2-resident {} pool: {:.1} TFLOP/s",
            r.tensor_peak_tflops,
            r.tensor_peak_median_tflops,
            r.l2_tokens,
            human_bytes(r.l2_pool_bytes),
            r.l2_tflops
        );
        let _ = writeln!(
            s,
            "  roofline: min(T x {:.0} GB/s, {:.1} TFLOP/s), knee at {:.0} tokens (memory-bound below, compute-bound above)",
            r.read_gbps, r.tensor_peak_tflops, r.knee_tokens
        );
        if r.tensor_peak_mhz.is_some() {
            let _ = writeln!(
                s,
                "  clock: the SM clock as the row's best pass ended against mma_peak's (sm_clock: SM cycles over the global timer; below 100%: the card held the pass's clock down, e.g. at its power limit); % at clock: a compute-bound row against the compute term at that clock"
            );
        }
    }
    let peak_mhz = b.roofline.as_ref().and_then(|r| r.tensor_peak_mhz);
    let clock = |k: &KernelRate| Some(100.0 * k.sm_mhz? / peak_mhz?);
    let _ = writeln!(
        s,
        "  {:>6}  {:<12} {:>7} {:>7} {:>10} {:>9} {:>9} {:>10}  {:<7} {:>5} {:>10}",
        "tokens",
        "kernel",
        "GB/s",
        "median",
        "% copy r+w",
        "TFLOP/s",
        "roofline",
        "% roofline",
        "bound",
        "clock",
        "% at clock"
    );
    for k in &b.kernels {
        let opt = |x: Option<f64>, prec: usize, suffix: &str| {
            x.map_or("-".to_string(), |v| format!("{v:.prec$}{suffix}"))
        };
        let label = if k.kernel == StreamKernel::CudaCores.key() {
            StreamKernel::CudaCores.label()
        } else {
            StreamKernel::TensorCores.label()
        };
        let _ = writeln!(
            s,
            "  {:>6}  {:<12} {:>7.0} {:>7.0} {:>9.0}% {:>9.1} {:>9} {:>10}  {:<7} {:>5} {:>10}",
            k.tokens,
            label,
            k.gbps,
            k.gbps_median,
            k.pct_copy_rw,
            k.tflops,
            opt(k.roofline_tflops, 1, ""),
            opt(k.pct_roofline, 0, "%"),
            k.bound.unwrap_or("-"),
            opt(clock(k), 0, "%"),
            opt(k.pct_roofline_at_clock, 0, "%")
        );
    }
    let ops: Vec<String> = b
        .per_op
        .iter()
        .map(|(bytes, us, g)| format!("{}: {us:.1} us ({g:.0} GB/s)", human_bytes(*bytes)))
        .collect();
    let _ = writeln!(s, "  single operations, 3 tokens: {}", ops.join(", "));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roof() -> Roofline {
        Roofline {
            read_gbps: 4000.0,
            tensor_peak_tflops: 600.0,
            tensor_peak_median_tflops: 590.0,
            tensor_peak_mhz: Some(1980.0),
            l2_tflops: 560.0,
            l2_tokens: 512,
            l2_pool_bytes: 16 << 20,
            knee_tokens: 150.0,
        }
    }

    #[test]
    fn rows_are_held_to_the_smaller_term_of_the_roofline() {
        // 64 tokens at 3800 GB/s: 3800 x 64 / 1000 = 243.2 TFLOP/s; memory term 64 x 4000 / 1000
        // = 256 TFLOP/s < 600: memory-bound, 243.2 / 256 = 95%; copy 4000 r+w, 2000 read
        let r = rate(
            StreamKernel::TensorCores,
            64,
            (3800.0, 3700.0),
            (4000.0, 2000.0),
            Some(&roof()),
        );
        assert_eq!(r.kernel, "tensor_cores");
        assert!((r.tflops - 243.2).abs() < 1e-9);
        assert_eq!(r.roofline_tflops, Some(256.0));
        assert!((r.pct_roofline.unwrap() - 95.0).abs() < 1e-9);
        assert_eq!(r.bound, Some("memory"));
        assert!((r.pct_copy_rw - 95.0).abs() < 1e-9);
        assert!((r.pct_copy_read - 190.0).abs() < 1e-9);
        // 512 tokens at 1100 GB/s: 563.2 TFLOP/s; memory term 2048 > 600: compute-bound,
        // 563.2 / 600 = 93.87%
        let r = rate(
            StreamKernel::TensorCores,
            512,
            (1100.0, 1090.0),
            (4000.0, 2000.0),
            Some(&roof()),
        );
        assert_eq!(r.roofline_tflops, Some(600.0));
        assert_eq!(r.bound, Some("compute"));
        assert!((r.pct_roofline.unwrap() - 563.2 / 6.0).abs() < 1e-9);
        // the CUDA cores are not held to the tensor-core roofline
        let r = rate(
            StreamKernel::CudaCores,
            4,
            (4400.0, 4390.0),
            (4000.0, 2000.0),
            Some(&roof()),
        );
        assert_eq!((r.roofline_tflops, r.bound), (None, None));
        assert!((r.tflops - 17.6).abs() < 1e-9);
    }

    /// The tensor-core row at `tokens` tokens and `gbps` (median 10 GB/s less) against a copy of
    /// 4000 GB/s read + write, 2000 read, held to `roof`.
    fn tensor(tokens: usize, gbps: f64, roof: &Roofline) -> KernelRate {
        let g = (gbps, gbps - 10.0);
        rate(
            StreamKernel::TensorCores,
            tokens,
            g,
            (4000.0, 2000.0),
            Some(roof),
        )
    }

    fn clocked(best_mhz: f64) -> Timing {
        Timing {
            best_us: 1.0,
            median_us: 1.0,
            best_mhz: Some(best_mhz),
            median_mhz: Some(1900.0),
        }
    }

    #[test]
    fn a_compute_bound_row_is_also_read_at_the_clock_its_pass_had() {
        // 512 tokens at 1100 GB/s: 563.2 TFLOP/s against mma_peak's 600 at 1980 MHz; the pass
        // ended at 1881 MHz (0.95 x 1980): 600 x 1881 / 1980 = 570, 563.2 / 570 = 98.807%
        let r = tensor(512, 1100.0, &roof()).at_clock(&clocked(1881.0), Some(&roof()));
        assert_eq!((r.sm_mhz, r.sm_mhz_median), (Some(1881.0), Some(1900.0)));
        assert!((r.pct_roofline_at_clock.unwrap() - 563.2 / 5.7).abs() < 1e-9);
        assert!((r.pct_roofline.unwrap() - 563.2 / 6.0).abs() < 1e-9);
        // memory-bound (64 tokens): the clock is shown, the memory term is not scaled by it
        let r = tensor(64, 3800.0, &roof()).at_clock(&clocked(1881.0), Some(&roof()));
        assert_eq!((r.sm_mhz, r.pct_roofline_at_clock), (Some(1881.0), None));
        // no clock for mma_peak: nothing to scale to
        let unclocked = Roofline {
            tensor_peak_mhz: None,
            ..roof()
        };
        let r = tensor(512, 1100.0, &unclocked).at_clock(&clocked(1881.0), Some(&unclocked));
        assert_eq!(r.pct_roofline_at_clock, None);
    }

    #[test]
    fn the_table_states_the_roofline_and_labels_each_row() {
        let b = Bandwidth {
            device: 0,
            name: "GPU".into(),
            bytes: 1 << 31,
            l2_bytes: 50 << 20,
            copy_rw_gbps: 4000.0,
            copy_read_gbps: 2000.0,
            stream_gbps: vec![(512, 1100.0)],
            kernels: vec![tensor(512, 1100.0, &roof()).at_clock(&clocked(1881.0), Some(&roof()))],
            roofline: Some(roof()),
            per_op: vec![],
        };
        let s = render(&b);
        assert!(
            s.contains("roofline: min(T x 4000 GB/s, 600.0 TFLOP/s), knee at 150 tokens"),
            "{s}"
        );
        assert!(s.contains("  clock: the SM clock as the row's best pass ended against mma_peak's"));
        // the pass ended at 1881 MHz against mma_peak's 1980: 95% of its clock
        let row = s.lines().find(|l| l.contains("tensor cores")).unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "512", "tensor", "cores", "1100", "1090", "28%", "563.2", "600.0", "94%",
                "compute", "95%", "99%"
            ]
        );
    }
}
