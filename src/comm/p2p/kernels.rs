//! The P2P all-reduce kernels of kernels/allreduce.cu on one GPU: compiled by NVRTC once per
//! architecture and process, loaded per context, launched on a rank's stream.

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaFunction, DeviceRepr, LaunchConfig, PushKernelArg};

use super::{Build, Impl, MAX_RANKS, THREADS};
pub(crate) use crate::comm::compile::ALLREDUCE_SRC;
use crate::comm::device::Gpu;
use crate::model::DType;

/// `struct Peers` of the kernel source, passed by value to every launch.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PeersArg {
    pub(crate) base: [u64; MAX_RANKS],
    pub(crate) capacity: u64,
    pub(crate) timeout_ns: u64,
    pub(crate) rank: u32,
    pub(crate) nranks: u32,
    /// Device address of the connection's stop word (pinned host memory mapped into the
    /// device; see `StopWord` in peer.rs), 0 for none.
    pub(crate) stop: u64,
}

// SAFETY: PeersArg is repr(C), Copy, and its layout is the kernel's `struct Peers` (8 x u64,
// 2 x u64, 2 x u32, 1 x u64: 96 bytes, checked by a test). Its addresses are device addresses
// (the stop word's is a device mapping of pinned host memory), valid while the connection
// that made it lives.
unsafe impl DeviceRepr for PeersArg {}

/// The loaded kernels on one context, and how many blocks of them an SM holds at once.
pub(crate) struct P2pKernels {
    /// bf16, f16, f32
    oneshot: [CudaFunction; 3],
    twoshot: [CudaFunction; 3],
    barrier: CudaFunction,
    probe: CudaFunction,
    /// Blocks of THREADS threads one SM runs at once (the smaller of the two kernels').
    pub(crate) blocks_per_sm: u32,
    pub(crate) sms: u32,
}

/// Threads of the barrier's one block: the waiters (one per peer) and the poller (POLLER).
const BARRIER_THREADS: u32 = 64;
const _: () = assert!(BARRIER_THREADS as usize > MAX_RANKS && BARRIER_THREADS <= THREADS);

/// Blocks of waiting grids that start for sure when several grids wait for each other: one
/// per SM (the SMs cut to `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` percent where that is set: an MPS
/// client gets only that share; the control daemon's own limit is not visible here), whatever
/// the occupancy query allows (`blocks_per_sm`, which must be at least one). Measured on one
/// H200 (132 SMs, 4 blocks of these kernels per SM by the query): 8 virtual ranks x 24 or 32
/// blocks stalled (a rank's next kernel never started while its peers spun), 8 x 16 and 8 x 17
/// ran 10,000 calls clean (results/h200x1/issue40b/); so the query's 528 is not what the
/// scheduler gives grids of several streams that spin, and one block per SM is the bound kept.
pub(crate) fn resident_blocks(blocks_per_sm: u32, sms: u32, mps_percent: Option<&str>) -> u32 {
    let pct = mps_percent
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|p| *p > 0.0 && *p < 100.0);
    let sms = match pct {
        Some(p) => ((sms as f64 * p / 100.0).floor() as u32).max(1),
        None => sms,
    };
    blocks_per_sm.min(1) * sms
}

fn dtype_index(d: DType) -> usize {
    match d {
        DType::Bf16 => 0,
        DType::F16 => 1,
        DType::F32 => 2,
    }
}

/// kernels/allreduce.cu compiled with `defines` for `gpu`'s architecture and loaded in its
/// context, as a loader of its functions by name; `refused(arch, error)` says what a module
/// the driver refuses to load is.
fn load_module(
    gpu: &Gpu,
    defines: &'static [&'static str],
    refused: impl FnOnce(&str, String) -> String,
) -> anyhow::Result<impl Fn(&str) -> anyhow::Result<CudaFunction>> {
    let (major, minor) = gpu.compute_capability()?;
    let arch = crate::comm::compile::arch(major, minor)?;
    let ptx = crate::comm::compile::ptx_with("allreduce.cu", ALLREDUCE_SRC, arch, defines)?;
    let module = gpu
        .ctx
        .load_module(ptx)
        .map_err(|e| anyhow::anyhow!("{}", refused(arch, format!("{e:?}"))))?;
    Ok(move |name: &str| {
        module
            .load_function(name)
            .map_err(|e| anyhow::anyhow!("kernel {name} missing: {e:?}"))
    })
}

impl P2pKernels {
    pub(crate) fn load(gpu: &Gpu, build: Build) -> anyhow::Result<P2pKernels> {
        let f = load_module(gpu, build.defines(), |arch, e| {
            format!(
                "GPU {}: loading kernels/allreduce.cu compiled for {arch} (the driver's JIT refused the PTX: {e}); `verifybench env` shows the NVRTC chosen and the driver",
                gpu.ordinal
            )
        })?;
        let oneshot = [f("oneshot_bf16")?, f("oneshot_f16")?, f("oneshot_f32")?];
        let twoshot = [f("twoshot_bf16")?, f("twoshot_f16")?, f("twoshot_f32")?];
        let mut blocks_per_sm = u32::MAX;
        for k in oneshot.iter().chain(&twoshot) {
            let b = k
                .occupancy_max_active_blocks_per_multiprocessor(THREADS, 0, None)
                .map_err(|e| anyhow::anyhow!("GPU {}: occupancy query: {e:?}", gpu.ordinal))?;
            blocks_per_sm = blocks_per_sm.min(b);
        }
        let sms = gpu
            .ctx
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )
            .map_err(|e| anyhow::anyhow!("GPU {}: SM count: {e:?}", gpu.ordinal))?
            as u32;
        Ok(P2pKernels {
            oneshot,
            twoshot,
            barrier: f("p2p_barrier")?,
            probe: f("p2p_probe")?,
            blocks_per_sm,
            sms,
        })
    }

    /// Blocks of these kernels this GPU holds at once ([`resident_blocks`]).
    pub(crate) fn resident(&self) -> u32 {
        let mps = std::env::var("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE").ok();
        resident_blocks(self.blocks_per_sm, self.sms, mps.as_deref())
    }

    /// Enqueues one call of `imp` over `grid` blocks.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch(
        &self,
        gpu: &Gpu,
        imp: Impl,
        dtype: DType,
        arg: &PeersArg,
        input: CUdeviceptr,
        output: CUdeviceptr,
        count: u64,
        grid: u32,
    ) -> anyhow::Result<()> {
        let f = match imp {
            Impl::OneShot => &self.oneshot[dtype_index(dtype)],
            Impl::TwoShot => &self.twoshot[dtype_index(dtype)],
            Impl::Nccl => anyhow::bail!("nccl is not a P2P kernel"),
        };
        assert!(
            (1..=super::MAX_BLOCKS).contains(&grid),
            "grid of {grid} blocks"
        );
        let cfg = LaunchConfig {
            grid_dim: (grid, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = gpu.stream.launch_builder(f);
        b.arg(arg).arg(&input).arg(&output).arg(&count);
        // SAFETY: the arguments match `NAME(Peers a, const char* in, char* out, u64 count)`;
        // every base in `arg` is a live workspace of `capacity` staging bytes mapped into this
        // context (the caller, P2pAllReduce, owns the mappings); input and output hold `count`
        // elements on this device (checked by the caller); grid <= MAXB (asserted), and the
        // grids of the ranks sharing this GPU are resident together (checked at connect).
        unsafe { b.launch(cfg) }
            .map_err(|e| anyhow::anyhow!("GPU {}: launching {imp}: {e:?}", gpu.ordinal))?;
        Ok(())
    }

    /// Enqueues the barrier kernel (one block).
    pub(crate) fn barrier(&self, gpu: &Gpu, arg: &PeersArg) -> anyhow::Result<()> {
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (BARRIER_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = gpu.stream.launch_builder(&self.barrier);
        b.arg(arg);
        // SAFETY: p2p_barrier(Peers a) takes exactly this argument; it touches only flag, epoch
        // and error words of the live workspaces in `arg`; 64 threads cover MAXR waiters and
        // the poller (thread 32).
        unsafe { b.launch(cfg) }
            .map_err(|e| anyhow::anyhow!("GPU {}: launching p2p_barrier: {e:?}", gpu.ordinal))?;
        Ok(())
    }

    /// Enqueues the access probe (one block of 64 threads): writes through `peer` (a mapping
    /// of another GPU's memory, PROBE_WORDS + 1 words), reads back, and leaves two words in
    /// `out` (this GPU's memory): wrong words, 1 (flag seen) or 2 (never seen).
    pub(crate) fn probe(
        &self,
        gpu: &Gpu,
        peer: CUdeviceptr,
        out: CUdeviceptr,
        token: u32,
        bound: std::time::Duration,
    ) -> anyhow::Result<()> {
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (64, 1, 1),
            shared_mem_bytes: 0,
        };
        let bound_ns = bound.as_nanos() as u64;
        let mut b = gpu.stream.launch_builder(&self.probe);
        b.arg(&peer).arg(&out).arg(&token).arg(&bound_ns);
        // SAFETY: the arguments match `p2p_probe(u64 peer, u32* out, u32 token, u64
        // timeout_ns)`; the caller passes `peer`, PROBE_SLOT bytes of a live peer allocation
        // mapped into this context, and `out`, 8 bytes of a live allocation of this context.
        unsafe { b.launch(cfg) }
            .map_err(|e| anyhow::anyhow!("GPU {}: launching p2p_probe: {e:?}", gpu.ordinal))?;
        Ok(())
    }
}

/// The stress test's support kernels (kernels/allreduce.cu built with `P2P_SELFTEST`, see
/// `stress.rs`): inputs filled and outputs checked on the device, per-rank delays, and the salt
/// counter that moves the inputs from one CUDA graph replay to the next.
pub(crate) struct StressKernels {
    /// bf16, f16, f32
    fill: [CudaFunction; 3],
    check: [CudaFunction; 3],
    delay: CudaFunction,
    advance: CudaFunction,
}

/// Threads per block of the fill and check kernels, and the most blocks they use.
const STRESS_THREADS: u32 = 256;
const STRESS_BLOCKS: u64 = 64;

impl StressKernels {
    pub(crate) fn load(gpu: &Gpu) -> anyhow::Result<StressKernels> {
        let f = load_module(gpu, &["P2P_SELFTEST"], |_, e| {
            format!(
                "GPU {}: loading the stress test's kernels: {e}",
                gpu.ordinal
            )
        })?;
        Ok(StressKernels {
            fill: [
                f("stress_fill_bf16")?,
                f("stress_fill_f16")?,
                f("stress_fill_f32")?,
            ],
            check: [
                f("stress_check_bf16")?,
                f("stress_check_f16")?,
                f("stress_check_f32")?,
            ],
            delay: f("stress_delay")?,
            advance: f("stress_advance")?,
        })
    }

    fn grid(count: u64) -> LaunchConfig {
        let blocks = count
            .div_ceil(STRESS_THREADS as u64 * 4)
            .clamp(1, STRESS_BLOCKS) as u32;
        LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (STRESS_THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    fn one_thread() -> LaunchConfig {
        LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (1, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// Enqueues the fill of `count` elements of rank `rank`'s input of salt `ctr[0] + j` at
    /// `input`, and the poisoning of `output` when it is another buffer.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn fill(
        &self,
        gpu: &Gpu,
        dtype: DType,
        input: CUdeviceptr,
        output: CUdeviceptr,
        count: u64,
        rank: u32,
        ctr: CUdeviceptr,
        j: u32,
    ) -> anyhow::Result<()> {
        let mut b = gpu.stream.launch_builder(&self.fill[dtype_index(dtype)]);
        b.arg(&input)
            .arg(&output)
            .arg(&count)
            .arg(&rank)
            .arg(&ctr)
            .arg(&j);
        // SAFETY: the arguments match `stress_fill_NAME(char* in, char* out, u64 count, u32
        // rank, const u64* ctr, u32 j)`; the caller passes `count` elements of `dtype` at
        // `input` and `output` and one u64 at `ctr`, all live allocations of this context.
        unsafe { b.launch(Self::grid(count)) }
            .map_err(|e| anyhow::anyhow!("GPU {}: launching stress_fill: {e:?}", gpu.ordinal))?;
        Ok(())
    }

    /// Enqueues the check of `count` elements at `output` against the exact sum over `nranks`
    /// ranks of salt `ctr[0] + j`, counting into `counts` (5 u64: wrong, checked, first wrong
    /// call's salt + 1, its element, its bits).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn check(
        &self,
        gpu: &Gpu,
        dtype: DType,
        output: CUdeviceptr,
        count: u64,
        nranks: u32,
        ctr: CUdeviceptr,
        j: u32,
        counts: CUdeviceptr,
    ) -> anyhow::Result<()> {
        let mut b = gpu.stream.launch_builder(&self.check[dtype_index(dtype)]);
        b.arg(&output)
            .arg(&count)
            .arg(&nranks)
            .arg(&ctr)
            .arg(&j)
            .arg(&counts);
        // SAFETY: the arguments match `stress_check_NAME(const char* out, u64 count, u32
        // nranks, const u64* ctr, u32 j, u64* counts)`; the caller passes `count` elements of
        // `dtype` at `output`, one u64 at `ctr` and five at `counts`, live in this context.
        unsafe { b.launch(Self::grid(count)) }
            .map_err(|e| anyhow::anyhow!("GPU {}: launching stress_check: {e:?}", gpu.ordinal))?;
        Ok(())
    }

    /// Enqueues a delay of about `ns` nanoseconds on the rank's stream.
    pub(crate) fn delay(&self, gpu: &Gpu, ns: u64) -> anyhow::Result<()> {
        let mut b = gpu.stream.launch_builder(&self.delay);
        b.arg(&ns);
        // SAFETY: `stress_delay(u64 ns)` takes this one argument and touches no memory.
        unsafe { b.launch(Self::one_thread()) }
            .map_err(|e| anyhow::anyhow!("GPU {}: launching stress_delay: {e:?}", gpu.ordinal))?;
        Ok(())
    }

    /// Enqueues `ctr[0] += calls`.
    pub(crate) fn advance(&self, gpu: &Gpu, ctr: CUdeviceptr, calls: u32) -> anyhow::Result<()> {
        let mut b = gpu.stream.launch_builder(&self.advance);
        b.arg(&ctr).arg(&calls);
        // SAFETY: `stress_advance(u64* ctr, u32 calls)`; `ctr` is one live u64 of this context.
        unsafe { b.launch(Self::one_thread()) }
            .map_err(|e| anyhow::anyhow!("GPU {}: launching stress_advance: {e:?}", gpu.ordinal))?;
        Ok(())
    }
}
