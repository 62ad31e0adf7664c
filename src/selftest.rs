//! The checks of `verifybench selftest` and what the GPU-level ones do. The command (in
//! `cli/selftest.rs`) runs every check through the launchers and prints the table; the checks
//! that drive a GPU directly, without ranks, live here.

use crate::comm;

/// One line of the selftest table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Check {
    pub name: String,
    pub launcher: String,
    pub pass: bool,
    pub detail: String,
}

/// The streaming kernel's result against a CPU reference (small sizes, exact inputs).
pub fn streaming_kernel(device: usize) -> Check {
    let r = (|| -> anyhow::Result<String> {
        let gpu = comm::Gpu::open(device)?;
        let k = comm::kernels::Kernels::load(&gpu)?;
        let pool = comm::kernels::Pool::new(&gpu, 1 << 24)?;
        let mut worst = 0f64;
        for (tokens, start, nvec) in [
            (1usize, 0u64, 1u64),
            (3, 5, 1000),
            (4, 1000, 300_000),
            (16, 77, 1 << 20),
        ] {
            let act: Vec<f32> = (0..tokens * 8)
                .map(|i| 0.25 * ((i % 5) as f32 + 1.0))
                .collect();
            let bytes: Vec<u8> = act.iter().flat_map(|x| x.to_le_bytes()).collect();
            let a = gpu.alloc(bytes.len())?;
            gpu.upload(&a, &bytes)?;
            let partial = gpu.alloc(k.partial_bytes())?;
            k.stream(&gpu, &pool, start, nvec, &a, tokens, &partial)?;
            gpu.sync()?;
            let blocks = k.blocks_for(nvec) as usize;
            let got = comm::kernels::sum_partials(
                &gpu.download(&partial, partial.len())?,
                blocks,
                tokens,
            );
            let want = comm::kernels::reference(pool.vecs(), start, nvec, &act, tokens);
            for (g, w) in got.iter().zip(&want) {
                worst = worst.max((g - w).abs() / w.abs().max(1.0));
            }
        }
        if worst > 1e-4 {
            anyhow::bail!("relative error {worst:.2e} against the CPU reference");
        }
        Ok(format!(
            "max relative error {worst:.1e} (fp32 accumulation order)"
        ))
    })();
    Check {
        name: "streaming kernel vs CPU reference".into(),
        launcher: "-".into(),
        pass: r.is_ok(),
        detail: r.unwrap_or_else(|e| format!("{e:#}")),
    }
}

/// The GPU's rated clocks are read through the driver (both positive), and `--cpu-affinity
/// auto` resolves for this GPU and, when sysfs names its NUMA node, pins a thread to exactly
/// those CPUs (checked in /proc/thread-self/status).
pub fn clocks_and_affinity(device: usize) -> Check {
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
    Check {
        name: "GPU clocks and CPU affinity".into(),
        launcher: "-".into(),
        pass: r.is_ok(),
        detail: r.unwrap_or_else(|e| format!("{e:#}")),
    }
}
