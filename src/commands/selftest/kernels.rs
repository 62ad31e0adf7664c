//! The checks on one GPU: the streaming kernel against a CPU reference (plain and with
//! programmatic dependent launch), the P2P all-reduce protocol on virtual ranks, the rated
//! clocks and `--cpu-affinity auto`.

use super::Check;
use crate::comm;

/// The streaming kernel's result against a CPU reference (small sizes, exact inputs), as a
/// plain launch and, where the GPU has it, with programmatic dependent launch.
pub(super) fn streaming_kernel(device: usize) -> Check {
    let r = (|| -> anyhow::Result<String> {
        let gpu = comm::Gpu::open(device)?;
        let k = comm::kernels::Kernels::load(&gpu)?;
        let pool = comm::kernels::Pool::new(&gpu, 1 << 24)?;
        let pdl = streaming_pdl(&gpu, &pool, &k)?;
        let mut worst = 0f64;
        for (tokens, start, nvec) in [
            (1usize, 0u64, 1u64),
            (3, 5, 1000),
            (4, 1000, 300_000),
            (16, 77, 1 << 20),
        ] {
            let (act, a) = activations(&gpu, tokens)?;
            let partial = gpu.alloc(k.partial_bytes())?;
            k.stream(&gpu, &pool, start, nvec, &a, tokens, &partial)?;
            gpu.sync()?;
            let blocks = k.blocks_for(nvec, tokens) as usize;
            let got = comm::kernels::sum_partials(
                &gpu.download(&partial, partial.len())?,
                blocks,
                tokens,
            );
            let want = comm::kernels::reference(pool.vecs(), start, nvec, &act, tokens);
            worst = worst.max(relative_error(&got, &want));
        }
        if worst > 1e-4 {
            anyhow::bail!("relative error {worst:.2e} against the CPU reference");
        }
        Ok(format!(
            "max relative error {worst:.1e} (fp32 accumulation order); {pdl}"
        ))
    })();
    Check::of("streaming kernel vs CPU reference", "-", r)
}

/// The largest relative error of the GPU's sums against the CPU reference's (relative to at
/// least 1).
fn relative_error(got: &[f64], want: &[f64]) -> f64 {
    got.iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs() / w.abs().max(1.0))
        .fold(0.0, f64::max)
}

/// `tokens` activation rows of small exact values, on the host and uploaded.
fn activations(gpu: &comm::Gpu, tokens: usize) -> anyhow::Result<(Vec<f32>, comm::Buffer)> {
    let act: Vec<f32> = (0..tokens * 8)
        .map(|i| 0.25 * ((i % 5) as f32 + 1.0))
        .collect();
    let bytes: Vec<u8> = act.iter().flat_map(|x| x.to_le_bytes()).collect();
    let a = gpu.alloc(bytes.len())?;
    gpu.upload(&a, &bytes)?;
    Ok((act, a))
}

/// The PDL streaming kernels (`--pdl`): back-to-back launches into one partial-sum buffer, eager
/// and replayed from a CUDA graph; the buffer must hold the last launch's sums, which holds
/// only if each launch waited for the one before it to finish before writing.
fn streaming_pdl(
    gpu: &comm::Gpu,
    pool: &comm::kernels::Pool,
    plain: &comm::kernels::Kernels,
) -> anyhow::Result<String> {
    use comm::kernels::{reference, sum_partials};
    let (major, minor) = gpu.compute_capability()?;
    if major < 9 {
        return Ok(format!(
            "programmatic dependent launch not checked (compute capability {major}.{minor}, needs 9.0)"
        ));
    }
    let k = plain.with_pdl(gpu)?;
    let tokens = 3usize;
    let (act, a) = activations(gpu, tokens)?;
    let partial = gpu.alloc(k.partial_bytes())?;
    // Same block count for every launch, so that each writes every block's slot.
    let nvec = 1u64 << 20;
    let blocks = k.blocks_for(nvec, tokens) as usize;
    let launches: Vec<u64> = (0..6u64).map(|i| 1000 * i + 7).collect();
    let want = reference(pool.vecs(), *launches.last().unwrap(), nvec, &act, tokens);
    let mut worst = 0f64;
    let mut check = |label: &str| -> anyhow::Result<()> {
        let got = sum_partials(&gpu.download(&partial, partial.len())?, blocks, tokens);
        let e = relative_error(&got, &want);
        if e > 1e-4 {
            anyhow::bail!(
                "programmatic dependent launch ({label}): relative error {e:.2e} against the last launch's CPU reference"
            );
        }
        worst = worst.max(e);
        Ok(())
    };
    gpu.fill(&partial, 0)?;
    for &s in &launches {
        k.stream(gpu, pool, s, nvec, &a, tokens, &partial)?;
    }
    gpu.sync()?;
    check("eager")?;
    let graph = gpu.capture(|| {
        for &s in &launches {
            k.stream(gpu, pool, s, nvec, &a, tokens, &partial)?;
        }
        Ok(())
    })?;
    gpu.fill(&partial, 0)?;
    gpu.sync()?;
    graph.launch()?;
    gpu.sync()?;
    check("CUDA graph")?;
    Ok(format!(
        "programmatic dependent launch: {} back-to-back launches, eager and from a graph, max relative error {worst:.1e}",
        launches.len()
    ))
}

/// The P2P all-reduce protocol on 2, 4 and 8 virtual ranks of one GPU (`comm::p2p`), and the
/// one-shot's per-call time there (43,008 B bf16), returned as lines that say what it is: not a
/// P2P measurement.
pub(super) fn p2p_virtual_ranks(device: usize, checks: &mut Vec<Check>) -> Vec<String> {
    let ranks = [2, 4, 8];
    let failed = |name: &str, e: anyhow::Error| Check::of(name, "virtual", Err(e));
    match comm::p2p::virtual_rank_checks(device, &ranks) {
        Ok(v) => checks.extend(
            v.into_iter()
                .map(|c| Check::new(c.name, "virtual", c.pass, c.detail)),
        ),
        Err(e) => checks.push(failed("p2p virtual ranks", e)),
    }
    match comm::p2p::virtual_rank_timings(device, &ranks, comm::p2p::Impl::OneShot, 21504) {
        Ok(t) => t.iter().map(ToString::to_string).collect(),
        Err(e) => {
            checks.push(failed("p2p virtual ranks: one-shot timing", e));
            vec![]
        }
    }
}

/// The GPU's rated clocks are read through the driver (both positive), and `--cpu-affinity
/// auto` resolves for this GPU and, when sysfs names its NUMA node, pins a thread to exactly
/// those CPUs (checked in /proc/thread-self/status).
pub(super) fn clocks_and_affinity(device: usize) -> Check {
    use crate::launch::affinity::{self, CpuAffinity};
    let r = (|| -> anyhow::Result<String> {
        let (sm, mem) = comm::device::clocks_khz(device)?;
        if sm <= 0 || mem <= 0 {
            anyhow::bail!("rated clocks SM {sm} kHz, memory {mem} kHz: not positive");
        }
        let bus = comm::device::info(device)?.pci_bus_id;
        let root = std::path::Path::new("/");
        let f = affinity::resolve(&CpuAffinity::Auto, root, Some(&bus));
        let pinned = match f.cpus.as_deref() {
            None => format!("auto left the affinity alone: {}", f.note),
            Some(list) => {
                let want = affinity::parse_cpulist(list).map_err(anyhow::Error::msg)?;
                let w = want.clone();
                let got = std::thread::spawn(move || {
                    affinity::apply(&w).map(|_| affinity::allowed_cpus(std::path::Path::new("/")))
                })
                .join()
                .map_err(|_| anyhow::anyhow!("the pinning thread panicked"))??;
                if got.as_ref() != Some(&want) {
                    anyhow::bail!("pinned to {list}, the thread may run on {got:?}");
                }
                format!("pinned a thread to {list} ({})", f.note)
            }
        };
        Ok(format!(
            "SM {} MHz, memory {} MHz; {pinned}",
            sm / 1000,
            mem / 1000
        ))
    })();
    Check::of("GPU clocks and CPU affinity", "-", r)
}
