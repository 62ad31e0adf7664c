//! The checks on one GPU: the streaming kernels' exact sums against the host's reference
//! (plain and with programmatic dependent launch), the P2P all-reduce protocol on virtual ranks, the rated
//! clocks and `--cpu-affinity auto`.

use super::Check;
use crate::comm;

/// The exact checks of the streaming kernels, one line per kernel: per-token sums of integer
/// weights and activations (exact in f32) against the host's [`comm::kernels::reference`], every
/// token of every launch compared for equality, as plain launches and, where the GPU has it,
/// with programmatic dependent launch.
pub(super) fn streaming_kernels(device: usize) -> Vec<Check> {
    use comm::kernels::StreamKernel::{CudaCores, TensorCores};
    let name =
        |k: comm::kernels::StreamKernel| format!("streaming kernel, {}: exact sums", k.label());
    let setup = || -> anyhow::Result<_> {
        let gpu = comm::Gpu::open(device)?;
        let k = comm::kernels::Kernels::load(&gpu)?;
        let pool = comm::kernels::Pool::exact(&gpu, 1 << 24)?;
        Ok((gpu, k, pool))
    };
    let (gpu, k, pool) = match setup() {
        Ok(x) => x,
        Err(e) => return vec![Check::of(name(CudaCores), "-", Err(e))],
    };
    let wrap = pool.vecs() - 100;
    // (tokens, first vector, vectors): sizes from one vector to the whole pool, starts that
    // are not multiples of anything, and the pool's wrap
    let cuda: &[(usize, u64, u64)] = &[
        (1, 0, 1),
        (3, 5, 1000),
        (4, 1000, 300_000),
        (9, wrap, 4096),
        (16, 77, 1 << 20),
    ];
    let tensor: &[(usize, u64, u64)] = &[
        (1, 0, 1),
        (16, 7, 31),
        (17, 5, 1000),
        (32, 1000, 300_000),
        (64, 77, 1 << 20),
        (128, 3, 12_345),
        (256, 11, 100_001),
        (512, 0, 1 << 20),
        (3, 1, 513),
        (33, 9, 511),
        (100, wrap, 4096),
        (129, 1, 65_537),
        (255, 2, 7),
        (300, 13, 999_999),
        (511, 0, 512),
    ];
    let mut out = vec![Check::of(
        name(CudaCores),
        "-",
        exact_cases(&gpu, &k, &pool, CudaCores, cuda),
    )];
    if k.has_tensor_cores() {
        out.push(Check::of(
            name(TensorCores),
            "-",
            exact_cases(&gpu, &k, &pool, TensorCores, tensor),
        ));
    }
    out
}

/// Runs every case on `kernel`, each into a poisoned partial-sum buffer, and compares every
/// token's sum for equality; then the PDL check. The line names the cases.
fn exact_cases(
    gpu: &comm::Gpu,
    k: &comm::kernels::Kernels,
    pool: &comm::kernels::Pool,
    kernel: comm::kernels::StreamKernel,
    cases: &[(usize, u64, u64)],
) -> anyhow::Result<String> {
    let partial = gpu.alloc(k.partial_bytes())?;
    for &(tokens, start, nvec) in cases {
        let (act, a) = activations(gpu, tokens)?;
        let blocks = k.blocks_on(kernel, nvec, tokens) as usize;
        exact_bound(kernel, nvec, blocks)?;
        gpu.fill(&partial, 0xff)?;
        k.stream_on(kernel, gpu, pool, start, nvec, &a, tokens, &partial)?;
        gpu.sync()?;
        let bytes = gpu.download(&partial, partial.len())?;
        let got = comm::kernels::sum_partials(&bytes, blocks, tokens);
        let want = comm::kernels::reference(kernel, pool.vecs(), start, nvec, &act, tokens);
        compare(&got, &want)
            .map_err(|e| anyhow::anyhow!("{tokens} tokens, {nvec} vectors from {start}: {e}"))?;
    }
    let pdl = streaming_pdl(gpu, pool, k, kernel)?;
    let tokens: Vec<String> = cases.iter().map(|c| c.0.to_string()).collect();
    Ok(format!(
        "{} launches, every token's sum exact (T = {}; 1 to {} vectors, unaligned starts, the pool's wrap); {pdl}",
        cases.len(),
        tokens.join(", "),
        cases.iter().map(|c| c.2).max().unwrap_or(0)
    ))
}

/// Fails unless every f32 partial sum of a launch stays an integer below 2^24 (exact): at most
/// the block's share of the weights x 7 x 4 (the largest weight and activation).
fn exact_bound(
    kernel: comm::kernels::StreamKernel,
    nvec: u64,
    blocks: usize,
) -> anyhow::Result<()> {
    let per_block = match kernel {
        // grid-stride over vectors, one per thread per step
        comm::kernels::StreamKernel::CudaCores => nvec.div_ceil(blocks as u64 * 256) * 256,
        // stages of 512 vectors, block b taking b, b + blocks, ...
        comm::kernels::StreamKernel::TensorCores => {
            nvec.div_ceil(512).div_ceil(blocks as u64) * 512
        }
    };
    let most = per_block * 8 * 7 * 4;
    if most >= 1 << 24 {
        anyhow::bail!(
            "a case of {nvec} vectors on {blocks} blocks could sum to {most}: not exact in f32"
        );
    }
    Ok(())
}

/// Every token's sum equal to the reference, or the first that differs and how many do.
fn compare(got: &[f64], want: &[f64]) -> anyhow::Result<()> {
    let wrong: Vec<usize> = (0..want.len()).filter(|&t| got[t] != want[t]).collect();
    if let Some(&t) = wrong.first() {
        anyhow::bail!(
            "token {t} summed {} where the reference has {} (off by {:.3e} of it; {} of {} tokens wrong)",
            got[t],
            want[t],
            (got[t] - want[t]) / want[t].abs().max(1.0),
            wrong.len(),
            want.len()
        );
    }
    Ok(())
}

/// `tokens` activation rows of small integers (1..=4, varying with token and lane), on the host
/// and uploaded.
fn activations(gpu: &comm::Gpu, tokens: usize) -> anyhow::Result<(Vec<f32>, comm::Buffer)> {
    let act: Vec<f32> = (0..tokens * 8)
        .map(|i| (1 + (i * 7 + i / 8) % 4) as f32)
        .collect();
    let bytes: Vec<u8> = act.iter().flat_map(|x| x.to_le_bytes()).collect();
    let a = gpu.alloc(bytes.len())?;
    gpu.upload(&a, &bytes)?;
    Ok((act, a))
}

/// The PDL streaming kernels (`--pdl`): back-to-back launches of `kernel` into one partial-sum
/// buffer, eager and replayed from a CUDA graph; the buffer must hold the last launch's sums,
/// which holds only if each launch waited for the one before it to finish before writing.
fn streaming_pdl(
    gpu: &comm::Gpu,
    pool: &comm::kernels::Pool,
    plain: &comm::kernels::Kernels,
    kernel: comm::kernels::StreamKernel,
) -> anyhow::Result<String> {
    use comm::kernels::{reference, sum_partials};
    let (major, minor) = gpu.compute_capability()?;
    if major < 9 {
        return Ok(format!(
            "programmatic dependent launch not checked (compute capability {major}.{minor}, needs 9.0)"
        ));
    }
    let k = plain.with_pdl(gpu)?;
    let tokens = match kernel {
        comm::kernels::StreamKernel::CudaCores => 3,
        comm::kernels::StreamKernel::TensorCores => 100,
    };
    let (act, a) = activations(gpu, tokens)?;
    let partial = gpu.alloc(k.partial_bytes())?;
    // Same block count for every launch, so that each writes every block's slot.
    let nvec = 1u64 << 20;
    let blocks = k.blocks_on(kernel, nvec, tokens) as usize;
    let launches: Vec<u64> = (0..6u64).map(|i| 1000 * i + 7).collect();
    let last = *launches.last().unwrap();
    let want = reference(kernel, pool.vecs(), last, nvec, &act, tokens);
    let check = |label: &str| -> anyhow::Result<()> {
        let got = sum_partials(&gpu.download(&partial, partial.len())?, blocks, tokens);
        compare(&got, &want).map_err(|e| {
            anyhow::anyhow!("programmatic dependent launch ({label}), against the last launch: {e}")
        })
    };
    gpu.fill(&partial, 0xff)?;
    for &s in &launches {
        k.stream_on(kernel, gpu, pool, s, nvec, &a, tokens, &partial)?;
    }
    gpu.sync()?;
    check("eager")?;
    let graph = gpu.capture(|| {
        for &s in &launches {
            k.stream_on(kernel, gpu, pool, s, nvec, &a, tokens, &partial)?;
        }
        Ok(())
    })?;
    gpu.fill(&partial, 0xff)?;
    gpu.sync()?;
    graph.launch()?;
    gpu.sync()?;
    check("CUDA graph")?;
    Ok(format!(
        "programmatic dependent launch ({tokens} tokens): {} back-to-back launches, eager and from a graph, exact",
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
