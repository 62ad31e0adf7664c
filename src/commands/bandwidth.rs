//! `bandwidth`'s measurement: the device-to-device copy bandwidth and the weight-streaming
//! kernel's achieved bandwidth, measured in the same run on each GPU (the ceiling the compute of
//! a verify step is held to), and single streaming operations of verify-step sizes. The flags
//! live in `cli/bandwidth.rs`; this module takes a plain request.

use std::path::PathBuf;

use serde::Serialize;

use crate::comm::kernels::{Kernels, Pool};
use crate::comm::{self, Gpu};
use crate::units::human_bytes;

/// What to measure.
#[derive(Debug, Clone)]
pub struct BandwidthRequest {
    /// Bytes per pass (rounded down to a power of two for the streaming pool).
    pub bytes: u64,
    /// Device ordinals to measure (`None`: all).
    pub devices: Option<Vec<usize>>,
    /// Timed passes per measurement (the best is kept).
    pub iters: u32,
    /// Sizes of single streaming operations to time (3 tokens).
    pub op_sizes: Vec<u64>,
    /// Where to write the results as JSON.
    pub export_json: Option<PathBuf>,
    /// What stdout gets: the table as each GPU is measured, or (json) at the end what
    /// `--export-json` writes.
    pub format: crate::output::Format,
}

/// One GPU's figures (GB/s = 1e9 bytes per second): the payload of a `bandwidth` record is a
/// list of these.
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
    /// The streaming kernel (bytes read), per token count.
    pub stream_gbps: Vec<(usize, f64)>,
    /// Single streaming operations of 3 tokens: (bytes, median us, GB/s).
    pub per_op: Vec<(u64, f64, f64)>,
}

fn best_us(
    gpu: &Gpu,
    iters: u32,
    mut f: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    let (a, b) = (gpu.event()?, gpu.event()?);
    f()?; // warm-up
    gpu.sync()?;
    let mut best = f64::MAX;
    for _ in 0..iters.max(1) {
        gpu.record(&a)?;
        f()?;
        gpu.record(&b)?;
        gpu.sync()?;
        best = best.min(a.elapsed_us(&b)?);
    }
    Ok(best)
}

pub fn measure(
    device: usize,
    bytes: u64,
    iters: u32,
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
    let dst = gpu.alloc(n as usize)?;
    let copy = best_us(&gpu, iters, || {
        Ok(gpu.copy(&dst, pool.buffer(), n as usize)?)
    })?;
    let partial = gpu.alloc(kernels.partial_bytes())?;
    crate::note!(
        "GPU {device}: streaming grid from the occupancy query and threads per SM: {}",
        kernels.grid_summary(&[1, 3, 4, 8])
    );
    let mut stream = vec![];
    for tokens in [1usize, 3, 4, 8] {
        let act: Vec<u8> = (0..tokens * 8)
            .flat_map(|i| (0.5f32 + i as f32).to_le_bytes())
            .collect();
        let a = gpu.alloc(act.len())?;
        gpu.upload(&a, &act)?;
        let t = best_us(&gpu, iters, || {
            kernels.stream(&gpu, &pool, 0, pool.vecs(), &a, tokens, &partial)
        })?;
        stream.push((tokens, n as f64 / (t * 1e3)));
    }
    // single operations at rotating offsets (so that small ones do not hit L2 from the last)
    let mut per_op = vec![];
    {
        let tokens = 3usize;
        let act: Vec<u8> = (0..tokens * 8)
            .flat_map(|i| (0.5f32 + i as f32).to_le_bytes())
            .collect();
        let a = gpu.alloc(act.len())?;
        gpu.upload(&a, &act)?;
        let (e0, e1) = (gpu.event()?, gpu.event()?);
        for &sz in op_sizes {
            let nvec = (sz / 16).max(1).min(pool.vecs());
            let mut t = vec![];
            for k in 0..40u64 {
                let start = (k * (nvec + 4096)) & (pool.vecs() - 1);
                gpu.record(&e0)?;
                kernels.stream(&gpu, &pool, start, nvec, &a, tokens, &partial)?;
                gpu.record(&e1)?;
                gpu.sync()?;
                if k >= 5 {
                    t.push(e0.elapsed_us(&e1)?);
                }
            }
            let med = crate::measure::Summary::from_samples(&t).map_or(0.0, |s| s.median_us);
            per_op.push((nvec * 16, med, (nvec * 16) as f64 / (med * 1e3)));
        }
    }
    Ok(Bandwidth {
        per_op,
        device,
        name: gpu.info().name,
        bytes: n,
        l2_bytes: l2,
        copy_rw_gbps: 2.0 * n as f64 / (copy * 1e3),
        copy_read_gbps: n as f64 / (copy * 1e3),
        stream_gbps: stream,
    })
}

/// Measures every requested GPU, prints one table row per GPU as it goes (or, with
/// `--format json`, the export at the end), and writes the JSON export if asked. Returns the
/// exit code.
pub fn run(a: &BandwidthRequest) -> anyhow::Result<i32> {
    let started = crate::util::now_utc();
    if let Some(p) = &a.export_json {
        crate::util::check_outputs(&[("--export-json", p)], &[])?;
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
            "# verifybench bandwidth (measured; best of {} passes; GB/s = 1e9 B/s)",
            a.iters
        );
        println!(
            "  {:>3} {:<14} {:>10} {:>8} {:>13} {:>14}  streaming kernel, bytes read (tokens: GB/s, % of copy read+write)",
            "gpu", "name", "bytes", "L2", "copy r+w", "copy read"
        );
    }
    let mut all = vec![];
    for &d in &devices {
        let b = measure(d, a.bytes, a.iters, &a.op_sizes)?;
        if table {
            print_row(&b);
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

/// One GPU's table row and the line of its single operations.
fn print_row(b: &Bandwidth) {
    let s: Vec<String> = b
        .stream_gbps
        .iter()
        .map(|(t, g)| format!("T={t}: {g:.0} ({:.0}%)", 100.0 * g / b.copy_rw_gbps))
        .collect();
    println!(
        "  {:>3} {:<14} {:>10} {:>8} {:>8.0} GB/s {:>9.0} GB/s  {}",
        b.device,
        b.name,
        human_bytes(b.bytes),
        human_bytes(b.l2_bytes),
        b.copy_rw_gbps,
        b.copy_read_gbps,
        s.join(", ")
    );
    let ops: Vec<String> = b
        .per_op
        .iter()
        .map(|(bytes, us, g)| format!("{}: {us:.1} us ({g:.0} GB/s)", human_bytes(*bytes)))
        .collect();
    println!("      single operations, 3 tokens: {}", ops.join(", "));
}
