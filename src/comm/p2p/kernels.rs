//! The P2P all-reduce kernels of kernels/allreduce.cu on one GPU: compiled by NVRTC once per
//! architecture and process, loaded per context, launched on a rank's stream.

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaFunction, DeviceRepr, LaunchConfig, PushKernelArg};

use super::{Impl, MAX_RANKS, THREADS};
pub use crate::comm::compile::ALLREDUCE_SRC;
use crate::comm::device::Gpu;
use crate::model::DType;

/// `struct Peers` of the kernel source, passed by value to every launch.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PeersArg {
    pub base: [u64; MAX_RANKS],
    pub capacity: u64,
    pub timeout_ns: u64,
    pub rank: u32,
    pub nranks: u32,
    /// Device address of the connection's stop word (pinned host memory mapped into the
    /// device; see `StopWord` in peer.rs), 0 for none.
    pub stop: u64,
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
    /// Blocks of THREADS threads one SM runs at once (the smaller of the two kernels').
    pub blocks_per_sm: u32,
    pub sms: u32,
}

fn dtype_index(d: DType) -> usize {
    match d {
        DType::Bf16 => 0,
        DType::F16 => 1,
        DType::F32 => 2,
    }
}

impl P2pKernels {
    pub fn load(gpu: &Gpu) -> anyhow::Result<P2pKernels> {
        let ctx = gpu.context();
        let (major, minor) = gpu.compute_capability()?;
        let arch = crate::comm::compile::arch(major, minor)?;
        let ptx = crate::comm::compile::ptx("allreduce.cu", ALLREDUCE_SRC, arch)?;
        let module = ctx.load_module(ptx).map_err(|e| {
            anyhow::anyhow!(
                "GPU {}: loading kernels/allreduce.cu compiled for {arch} (the driver's JIT refused the PTX: {e:?}); `verifybench env` shows the NVRTC chosen and the driver",
                gpu.ordinal
            )
        })?;
        let f = |name: &str| {
            module
                .load_function(name)
                .map_err(|e| anyhow::anyhow!("kernel {name} missing: {e:?}"))
        };
        let oneshot = [f("oneshot_bf16")?, f("oneshot_f16")?, f("oneshot_f32")?];
        let twoshot = [f("twoshot_bf16")?, f("twoshot_f16")?, f("twoshot_f32")?];
        let mut blocks_per_sm = u32::MAX;
        for k in oneshot.iter().chain(&twoshot) {
            let b = k
                .occupancy_max_active_blocks_per_multiprocessor(THREADS, 0, None)
                .map_err(|e| anyhow::anyhow!("GPU {}: occupancy query: {e:?}", gpu.ordinal))?;
            blocks_per_sm = blocks_per_sm.min(b);
        }
        let sms = ctx
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )
            .map_err(|e| anyhow::anyhow!("GPU {}: SM count: {e:?}", gpu.ordinal))?
            as u32;
        Ok(P2pKernels {
            oneshot,
            twoshot,
            barrier: f("p2p_barrier")?,
            blocks_per_sm,
            sms,
        })
    }

    /// Enqueues one call of `imp` over `grid` blocks.
    #[allow(clippy::too_many_arguments)]
    pub fn launch(
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
        let mut b = gpu.cuda_stream().launch_builder(f);
        b.arg(arg).arg(&input).arg(&output).arg(&count);
        // SAFETY: the arguments match `NAME(Peers a, const char* in, char* out, u64 count)`;
        // every base in `arg` is a live workspace of `capacity` staging bytes mapped into this
        // context (the caller, P2pAllReduce, owns the mappings); input and output hold `count`
        // elements on this device (checked by the caller); grid <= MAXB (asserted).
        unsafe { b.launch(cfg) }
            .map_err(|e| anyhow::anyhow!("GPU {}: launching {imp}: {e:?}", gpu.ordinal))?;
        Ok(())
    }

    /// Enqueues the barrier kernel (one block).
    pub fn barrier(&self, gpu: &Gpu, arg: &PeersArg) -> anyhow::Result<()> {
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = gpu.cuda_stream().launch_builder(&self.barrier);
        b.arg(arg);
        // SAFETY: p2p_barrier(Peers a) takes exactly this argument; it touches only flag, epoch
        // and error words of the live workspaces in `arg`; 32 threads cover MAXR peers.
        unsafe { b.launch(cfg) }
            .map_err(|e| anyhow::anyhow!("GPU {}: launching p2p_barrier: {e:?}", gpu.ordinal))?;
        Ok(())
    }
}
