//! The CUDA kernels of `kernels/`, compiled at run time by NVRTC for the device's architecture:
//! the weight-streaming kernels that stand in for a rank's compute between collectives (on the
//! CUDA cores up to [`CUDA_CORE_MAX_TOKENS`] tokens, on the tensor cores up to
//! [`MAX_STREAM_TOKENS`]), the tensor-core peak kernel `bandwidth` states its roofline with, and
//! the tiny kernel of the launch-overhead emulation. The weight pool and the host's reference of a
//! streaming pass are in [`pool`].

use cudarc::driver::{CudaFunction, CudaModule, LaunchConfig, PushKernelArg};
use std::sync::Arc;

use crate::comm::compile::{STREAM_MMA_SRC, STREAM_SRC};
use crate::comm::device::{Buffer, Gpu};
use crate::error::usage;

mod pool;
pub(crate) use pool::{reference, sum_partials, Pool};

/// The most tokens one streaming launch handles (the tensor-core kernel's bound): a request for
/// more cannot be replayed. `request` checks use it to refuse before any GPU work.
pub const MAX_STREAM_TOKENS: usize = 512;
/// Floats per block of the partial-sum buffer (PARTIAL_STRIDE in both kernel files).
pub(crate) const PARTIAL_STRIDE: usize = MAX_STREAM_TOKENS;
/// The most tokens of the CUDA-core kernel `stream_weights_T` (MAXT in `kernels/stream.cu`).
pub(crate) const CUDA_CORE_MAX_TOKENS: usize = 16;
/// Up to this many tokens a streaming launch runs on the CUDA cores, above it on the tensor
/// cores (where the GPU has bf16 tensor cores, compute capability 8.0 and newer). Measured on an
/// H100 (3 runs of `bandwidth --tokens 1,2,3,4,6,8,10,12,14,16 --op-sizes 1M`, best passes, GB/s),
/// the CUDA-core kernel was ahead at 6, 8 and 10 tokens by less than 1% but in every run, its
/// range above the tensor cores' (T=8: 3082 against 3047-3062; T=10: 3074-3075 against
/// 3049-3064), and behind from 12 (2901-2904 against 3048-3054; 2605-2612 against 3047-3057 at
/// 16): its 8 x T multiply-adds per 16-byte load reach the CUDA cores' rate between 10 and 12
/// tokens. 11 was not measured; it goes to the tensor cores, whose rate does not depend on the
/// count below the knee. `bandwidth` times both kernels at 1-16 tokens: the measurement decides.
pub(crate) const CUDA_CORE_AUTO_TOKENS: usize = 10;
/// Threads per block of every streaming kernel (THREADS in both sources).
const THREADS: u32 = 256;
/// 16-byte vectors per stage of `stream_mma` (STAGE_VECS) on compute capability `major`.x: 32 KB
/// on 9.0 to 11.x, whose SMs hold two rings of three such stages, 16 KB elsewhere.
fn stage_vecs(major: i32) -> u64 {
    if (9..12).contains(&major) {
        2048
    } else {
        1024
    }
}
/// Stages in the ring of `stream_mma` (DEPTH).
const DEPTH: u64 = 3;
/// The token tiles of the `stream_mma_MW` variants (MW).
const MMA_WIDTHS: [usize; 16] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
/// Flops of one mma.sync m16n8k16: 2 x 16 x 8 x 16.
const MMA_FLOPS: u64 = 4096;
/// MMAs per warp per iteration of `mma_peak`.
const PEAK_MMAS_PER_ITER: u64 = 32;

/// Which streaming kernel a launch runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamKernel {
    /// `stream_weights_T` (`kernels/stream.cu`): fp32 fused multiply-adds, 1..=16 tokens.
    CudaCores,
    /// `stream_mma_MW` (`kernels/stream_mma.cu`): bf16 mma.sync, 1..=512 tokens.
    TensorCores,
}

impl StreamKernel {
    /// "CUDA cores", "tensor cores".
    pub(crate) fn label(self) -> &'static str {
        match self {
            StreamKernel::CudaCores => "CUDA cores",
            StreamKernel::TensorCores => "tensor cores",
        }
    }

    /// The JSON name: "cuda_cores", "tensor_cores".
    pub(crate) fn key(self) -> &'static str {
        match self {
            StreamKernel::CudaCores => "cuda_cores",
            StreamKernel::TensorCores => "tensor_cores",
        }
    }

    /// The most tokens the kernel takes.
    pub(crate) fn max_tokens(self) -> usize {
        match self {
            StreamKernel::CudaCores => CUDA_CORE_MAX_TOKENS,
            StreamKernel::TensorCores => MAX_STREAM_TOKENS,
        }
    }
}

/// Token groups of `stream_mma` at `tokens` tokens, each of `mma_width` tiles of 16 and each
/// streamed by its own blocks: one up to 16 tiles, two up to 32 (the rule of
/// `kernels/stream_mma.cu`).
pub(crate) fn mma_groups(tokens: usize) -> usize {
    tokens.div_ceil(16).div_ceil(16).max(1)
}

/// The token tiles of a group, MW of the `stream_mma_MW` launched for `tokens` tokens.
pub(crate) fn mma_width(tokens: usize) -> usize {
    tokens.div_ceil(16).div_ceil(mma_groups(tokens)).max(1)
}

/// NVRTC's version, e.g. "13.0" (also loads the library).
pub(crate) fn nvrtc_version() -> Option<String> {
    if !crate::comm::libs::nvrtc_present() {
        return None;
    }
    let (mut a, mut b) = (0, 0);
    // SAFETY: two valid out-pointers.
    let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut a, &mut b) };
    (r == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS).then(|| format!("{a}.{b}"))
}

/// One kernel family: its variants (by token count or token tiles), plain and for programmatic
/// dependent launch, with the occupancy query's resident blocks per SM of each.
#[derive(Clone)]
struct Family {
    /// Each variant's token count or token tiles, in order.
    ids: Vec<usize>,
    /// Dynamic shared memory of every launch, bytes.
    shared: u32,
    /// The plain variants' names.
    names: Vec<String>,
    plain: Vec<CudaFunction>,
    pdl: Vec<CudaFunction>,
    /// Resident blocks per SM, per variant and launch kind (plain, PDL).
    resident: Vec<[u32; 2]>,
}

/// The compiled kernels on one GPU.
#[derive(Clone)]
pub(crate) struct Kernels {
    /// stream_weights_T for T = 1..=CUDA_CORE_MAX_TOKENS (index T - 1).
    cuda: Family,
    /// stream_mma_MW for MW in MMA_WIDTHS; `None` below compute capability 8.0 (no bf16
    /// mma.sync).
    tensor: Option<Family>,
    /// mma_peak and its resident blocks per SM.
    peak: Option<(CudaFunction, u32)>,
    tiny: CudaFunction,
    /// `sm_clock`: the SM clock as a pass ends.
    clock: CudaFunction,
    sms: u32,
    /// 16-byte vectors per stage of `stream_mma` on this GPU ([`stage_vecs`]).
    stage_vecs: u64,
    /// The device's threads per SM (2048 on an H200, 1536 on compute capability 8.6, 8.9, 12.0).
    threads_per_sm: u32,
    /// Launch the streaming kernels with programmatic dependent launch (see `kernels/stream.cu`).
    pdl: bool,
}

impl Kernels {
    /// Compiles `kernels/stream.cu` (and `kernels/stream_mma.cu` where the GPU has bf16 tensor
    /// cores) for `gpu`'s architecture and loads them; streaming launches are plain launches.
    pub(crate) fn load(gpu: &Gpu) -> anyhow::Result<Kernels> {
        Kernels::load_with(gpu, false)
    }

    /// As [`Kernels::load`]; with `pdl`, every streaming launch uses programmatic dependent
    /// launch, which needs compute capability 9.0 or newer (a usage error otherwise).
    pub(crate) fn load_with(gpu: &Gpu, pdl: bool) -> anyhow::Result<Kernels> {
        let k = Kernels::compile(gpu)?;
        if pdl {
            k.with_pdl(gpu)
        } else {
            Ok(k)
        }
    }

    /// The same kernels (no second compile), their streaming launches using programmatic
    /// dependent launch; a usage error below compute capability 9.0.
    pub(crate) fn with_pdl(&self, gpu: &Gpu) -> anyhow::Result<Kernels> {
        let (major, minor) = gpu.compute_capability()?;
        crate::comm::compile::check_pdl(
            crate::comm::compile::arch(major, minor)?,
            &format!("GPU {} (compute capability {major}.{minor})", gpu.ordinal()),
        )?;
        Ok(Kernels {
            pdl: true,
            ..self.clone()
        })
    }

    fn compile(gpu: &Gpu) -> anyhow::Result<Kernels> {
        // the function attributes set below take the context current on this thread
        gpu.bind()?;
        let (major, minor) = gpu.compute_capability()?;
        let arch = crate::comm::compile::arch(major, minor)?;
        let attr = |a, what: &str| -> anyhow::Result<u32> {
            Ok(gpu
                .ctx
                .attribute(a)
                .map_err(|e| anyhow::anyhow!("GPU {}: {what}: {e:?}", gpu.ordinal))?
                as u32)
        };
        use cudarc::driver::sys::CUdevice_attribute as A;
        let sms = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "SM count")?;
        let threads_per_sm = attr(
            A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
            "threads per SM",
        )?;
        let module = load_module(gpu, "stream.cu", STREAM_SRC, arch)?;
        let tokens: Vec<usize> = (1..=CUDA_CORE_MAX_TOKENS).collect();
        let cuda = family(gpu, &module, sms, &tokens, None, |pdl, t| {
            format!("stream_weights_{}{t}", if pdl { "pdl_" } else { "" })
        })?;
        let stage_vecs = stage_vecs(major);
        let (tensor, peak) = if major >= 8 {
            let m = load_module(gpu, "stream_mma.cu", STREAM_MMA_SRC, arch)?;
            let ring = (DEPTH * stage_vecs * 16) as u32;
            let f = family(gpu, &m, sms, &MMA_WIDTHS, Some(ring), |pdl, w| {
                format!("stream_mma_{}{w}", if pdl { "pdl_" } else { "" })
            })?;
            let p = function(&m, "mma_peak")?;
            let resident = occupancy(gpu, &p, "mma_peak", sms, 0)?;
            (Some(f), Some((p, resident)))
        } else {
            (None, None)
        };
        Ok(Kernels {
            cuda,
            tensor,
            peak,
            tiny: function(&module, "tiny")?,
            clock: function(&module, "sm_clock")?,
            sms,
            stage_vecs,
            threads_per_sm,
            pdl: false,
        })
    }

    /// Whether the GPU has the tensor-core kernels (compute capability 8.0 and newer).
    pub(crate) fn has_tensor_cores(&self) -> bool {
        self.tensor.is_some()
    }

    /// The kernel a launch of `tokens` tokens runs on ([`CUDA_CORE_AUTO_TOKENS`]).
    pub(crate) fn kernel_for(&self, tokens: usize) -> StreamKernel {
        if tokens <= CUDA_CORE_AUTO_TOKENS || self.tensor.is_none() {
            StreamKernel::CudaCores
        } else {
            StreamKernel::TensorCores
        }
    }

    /// Blocks of a launch of `kernel`: on the CUDA cores whole waves that fill every SM's
    /// threads (SMs x [`per_sm_grid`] of the occupancy query); on the tensor cores one wave of
    /// resident blocks (each loops over its stages). Never more than the work needs.
    pub(crate) fn blocks_on(&self, kernel: StreamKernel, nvec: u64, tokens: usize) -> u32 {
        match kernel {
            StreamKernel::CudaCores => grid_for(nvec, self.sms, self.per_sm(tokens)),
            StreamKernel::TensorCores => {
                // the token groups in blocks: whole groups of them, each block of a group on
                // every (blocks / groups)-th stage
                let stages = nvec.div_ceil(self.stage_vecs).max(1);
                let wave = self.sms as u64 * self.resident_mma(tokens) as u64;
                let per = mma_groups(tokens.clamp(1, MAX_STREAM_TOKENS)) as u64;
                (stages.min(wave / per).max(1) * per) as u32
            }
        }
    }

    /// Blocks per SM of a CUDA-core grid of `tokens` tokens: whole waves of the resident
    /// blocks that cover the SM's threads ([`per_sm_grid`]).
    fn per_sm(&self, tokens: usize) -> u32 {
        per_sm_grid(self.resident(tokens), self.threads_per_sm, THREADS)
    }

    /// The occupancy query's resident blocks per SM of the CUDA-core kernel for `tokens`.
    fn resident(&self, tokens: usize) -> u32 {
        self.cuda.resident[tokens.clamp(1, CUDA_CORE_MAX_TOKENS) - 1][self.pdl as usize]
    }

    /// The occupancy query's resident blocks per SM of the tensor-core kernel for `tokens`.
    fn resident_mma(&self, tokens: usize) -> u32 {
        self.tensor.as_ref().map_or(1, |f| {
            f.resident[f.index(mma_width(tokens.clamp(1, MAX_STREAM_TOKENS)))][self.pdl as usize]
        })
    }

    /// The largest grid of any streaming kernel.
    pub(crate) fn resident_blocks(&self) -> u32 {
        let cuda = self
            .cuda
            .resident
            .iter()
            .flatten()
            .map(|&b| per_sm_grid(b, self.threads_per_sm, THREADS))
            .max()
            .unwrap_or(1);
        let tensor = self
            .tensor
            .iter()
            .flat_map(|f| f.resident.iter().flatten())
            .copied()
            .max()
            .unwrap_or(1);
        self.sms * cuda.max(tensor)
    }

    /// "T=1 1056 blocks (8 per SM x 132 SMs), ..., T=8 1056 blocks (2 waves of 4 per SM x 132
    /// SMs)" for the token counts given, on `kernel`.
    pub(crate) fn grid_summary(&self, kernel: StreamKernel, tokens: &[usize]) -> String {
        tokens
            .iter()
            .map(|&t| {
                let (per_sm, resident) = match kernel {
                    StreamKernel::CudaCores => (self.per_sm(t), self.resident(t)),
                    StreamKernel::TensorCores => (self.resident_mma(t), self.resident_mma(t)),
                };
                let how = if per_sm == resident {
                    format!("{per_sm} per SM")
                } else {
                    format!("{} waves of {resident} per SM", per_sm / resident)
                };
                format!(
                    "T={t} {} blocks ({how} x {} SMs)",
                    self.sms * per_sm,
                    self.sms
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// What the driver compiled the tensor-core kernels to: per `stream_mma_MW` and `mma_peak`
    /// its registers per thread, local memory (spills) and resident blocks per SM, e.g.
    /// "stream_mma_8 86 regs 0 B local 2/SM". Empty without tensor cores.
    pub(crate) fn tensor_resources(&self) -> String {
        let (Some(f), Some((p, pr))) = (&self.tensor, &self.peak) else {
            return String::new();
        };
        let one = |name: &str, k: &CudaFunction, resident: u32| {
            format!(
                "{name} {} regs {} B local {resident}/SM",
                k.num_regs().unwrap_or(-1),
                k.local_size_bytes().unwrap_or(-1)
            )
        };
        let mut v: Vec<String> = (0..f.plain.len())
            .map(|i| one(&f.names[i], &f.plain[i], f.resident[i][0]))
            .collect();
        v.push(one("mma_peak", p, *pr));
        v.join(", ")
    }

    /// Enqueues a streaming pass over `nvec` 16-byte vectors of `pool` starting at vector
    /// `start` (wrapping), against `tokens` activation rows in `act` (tokens x 8 floats),
    /// writing per-block partial sums to `partial` (blocks x [`PARTIAL_STRIDE`] floats), on the
    /// kernel [`Kernels::kernel_for`] picks.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn stream(
        &self,
        gpu: &Gpu,
        pool: &Pool,
        start: u64,
        nvec: u64,
        act: &Buffer,
        tokens: usize,
        partial: &Buffer,
    ) -> anyhow::Result<()> {
        let kernel = self.kernel_for(tokens);
        self.stream_on(kernel, gpu, pool, start, nvec, act, tokens, partial)
    }

    /// [`Kernels::stream`] on the kernel named.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn stream_on(
        &self,
        kernel: StreamKernel,
        gpu: &Gpu,
        pool: &Pool,
        start: u64,
        nvec: u64,
        act: &Buffer,
        tokens: usize,
        partial: &Buffer,
    ) -> anyhow::Result<()> {
        if nvec == 0 {
            return Ok(());
        }
        self.check_tokens(kernel, gpu, tokens)?;
        let blocks = self.blocks_on(kernel, nvec, tokens);
        gpu.check_buffer(
            pool.buffer(),
            "stream_weights (pool)",
            0,
            (pool.vecs() * 16) as usize,
        )?;
        gpu.check_buffer(act, "stream_weights (activations)", 0, tokens * 8 * 4)?;
        gpu.check_buffer(
            partial,
            "stream_weights (partial sums)",
            0,
            blocks as usize * PARTIAL_STRIDE * 4,
        )?;
        for b in [pool.buffer(), act, partial] {
            gpu.keep_buffer(b);
        }
        let (pp, ap, outp) = (pool.buffer().ptr(), act.ptr(), partial.ptr());
        let mask = pool.vecs() - 1;
        match kernel {
            StreamKernel::CudaCores => {
                let f = pick(&self.cuda, tokens, self.pdl);
                let mut args = [pp, mask, start, nvec, ap, outp];
                self.launch(gpu, f, "stream_weights", blocks, 0, &mut args)
            }
            StreamKernel::TensorCores => {
                let fam = self.tensor.as_ref().expect("checked by check_tokens");
                let f = pick(fam, mma_width(tokens), self.pdl);
                let mut args = [pp, mask, start, nvec, ap, outp, tokens as u64];
                self.launch(gpu, f, "stream_mma", blocks, fam.shared, &mut args)
            }
        }
    }

    /// A usage error unless `kernel` exists on this GPU and takes `tokens` tokens.
    fn check_tokens(&self, kernel: StreamKernel, gpu: &Gpu, tokens: usize) -> anyhow::Result<()> {
        if kernel == StreamKernel::TensorCores && self.tensor.is_none() {
            return Err(usage(format!(
                "GPU {}: the tensor-core streaming kernel needs compute capability 8.0 (bf16 mma.sync); this GPU streams at most {CUDA_CORE_MAX_TOKENS} tokens, on the CUDA cores",
                gpu.ordinal
            )));
        }
        if tokens == 0 || tokens > kernel.max_tokens() {
            return Err(usage(format!(
                "GPU {}: the streaming kernel on the {} takes 1..={} tokens, not {tokens}",
                gpu.ordinal,
                kernel.label(),
                kernel.max_tokens()
            )));
        }
        Ok(())
    }

    /// Launches `f` on `blocks` blocks of THREADS threads with `shared` bytes of dynamic shared
    /// memory and `args` (its parameters in order, each a 64-bit value), through programmatic
    /// dependent launch when the kernels are loaded for it. The caller checked every buffer the
    /// arguments address.
    fn launch(
        &self,
        gpu: &Gpu,
        f: &CudaFunction,
        what: &str,
        blocks: u32,
        shared: u32,
        args: &mut [u64],
    ) -> anyhow::Result<()> {
        if self.pdl {
            return launch_pdl(gpu, f, what, blocks, shared, args);
        }
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: shared,
        };
        let mut b = gpu.stream.launch_builder(f);
        for a in args.iter() {
            b.arg(a);
        }
        // SAFETY: `args` match the kernel's signature: stream_weights_T takes (pointer, u64
        // mask, u64 start, u64 count, pointer, pointer), stream_mma_MW the same and a u64 token
        // count (device pointers are 64-bit addresses); every index is masked into the pool (a
        // power of two of vectors); act holds tokens*8 floats and partial blocks*PARTIAL_STRIDE
        // floats, all on this GPU (checked by the caller); the buffers are freed in stream order
        // after the launch or kept by the graph being captured.
        unsafe { b.launch(cfg) }
            .map_err(|e| anyhow::anyhow!("GPU {}: launching {what}: {e:?}", gpu.ordinal))?;
        Ok(())
    }

    /// Enqueues `mma_peak` over one wave of resident blocks, `iters` iterations per warp, with
    /// its operands from the start of `src` and one float per thread to `out` (at least
    /// [`Kernels::peak_out_bytes`]). Returns the flops the launch does; `None` without tensor
    /// cores.
    pub(crate) fn mma_peak(
        &self,
        gpu: &Gpu,
        src: &Pool,
        iters: u64,
        out: &Buffer,
    ) -> anyhow::Result<Option<u64>> {
        let Some((f, resident)) = &self.peak else {
            return Ok(None);
        };
        let blocks = self.sms * resident;
        gpu.check_buffer(src.buffer(), "mma_peak (operands)", 0, 64 * 16)?;
        gpu.check_buffer(out, "mma_peak (out)", 0, self.peak_out_bytes())?;
        gpu.keep_buffer(src.buffer());
        gpu.keep_buffer(out);
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let (sp, op) = (src.buffer().ptr(), out.ptr());
        let mut b = gpu.stream.launch_builder(f);
        b.arg(&sp).arg(&iters).arg(&op);
        // SAFETY: mma_peak(const uint4*, unsigned long long, float*) reads the first 64 16-byte
        // vectors of src and writes one float per thread of the grid to out, both on this GPU
        // and large enough (checked); both outlive the launch as above.
        unsafe { b.launch(cfg) }
            .map_err(|e| anyhow::anyhow!("GPU {}: launching mma_peak: {e:?}", gpu.ordinal))?;
        let warps = blocks as u64 * (THREADS / 32) as u64;
        Ok(Some(warps * iters * PEAK_MMAS_PER_ITER * MMA_FLOPS))
    }

    /// Size of the output buffer of [`Kernels::mma_peak`].
    pub(crate) fn peak_out_bytes(&self) -> usize {
        let resident = self.peak.as_ref().map_or(1, |p| p.1);
        (self.sms * resident * THREADS) as usize * 4
    }

    /// Enqueues one tiny kernel (launch-overhead emulation) writing into `scratch`.
    pub(crate) fn tiny(&self, gpu: &Gpu, scratch: &Buffer) -> anyhow::Result<()> {
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (32, 1, 1),
            shared_mem_bytes: 0,
        };
        gpu.check_buffer(scratch, "tiny (scratch)", 0, 4)?;
        gpu.keep_buffer(scratch);
        let p = scratch.ptr();
        let mut b = gpu.stream.launch_builder(&self.tiny);
        b.arg(&p);
        // SAFETY: tiny(float*) touches p[0] only; scratch holds at least 4 bytes on this GPU
        // (checked) and outlives the launch as above.
        unsafe { b.launch(cfg) }
            .map_err(|e| anyhow::anyhow!("GPU {}: launching tiny: {e:?}", gpu.ordinal))?;
        Ok(())
    }

    /// Bytes of the output buffer of [`Kernels::sm_clock_mhz`].
    pub(crate) const CLOCK_OUT_BYTES: usize = 16;

    /// The SM clock, MHz, as the work already enqueued on `gpu`'s stream ends: `sm_clock` counts
    /// SM cycles over `SM_CLOCK_WINDOW_NS` of the global timer (from one of its steps to
    /// another), then this waits for it. `out`: [`Kernels::CLOCK_OUT_BYTES`] on this GPU.
    pub(crate) fn sm_clock_mhz(&self, gpu: &Gpu, out: &Buffer) -> anyhow::Result<f64> {
        const SM_CLOCK_WINDOW_NS: u64 = 100_000;
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (32, 1, 1),
            shared_mem_bytes: 0,
        };
        gpu.check_buffer(out, "sm_clock (out)", 0, Self::CLOCK_OUT_BYTES)?;
        let p = out.ptr();
        let mut b = gpu.stream.launch_builder(&self.clock);
        b.arg(&SM_CLOCK_WINDOW_NS);
        b.arg(&p);
        // SAFETY: sm_clock(unsigned long long, unsigned long long*) writes out[0..2], 16 bytes, which
        // `out` holds on this GPU (checked); the sync below ends the launch while `out` lives.
        unsafe { b.launch(cfg) }
            .map_err(|e| anyhow::anyhow!("GPU {}: launching sm_clock: {e:?}", gpu.ordinal))?;
        gpu.sync()?;
        let raw = gpu.download(out, Self::CLOCK_OUT_BYTES)?;
        let word = |i: usize| u64::from_le_bytes(raw[8 * i..8 * i + 8].try_into().unwrap());
        let (cycles, ns) = (word(0), word(1));
        anyhow::ensure!(
            ns >= SM_CLOCK_WINDOW_NS && cycles > 0,
            "GPU {}: sm_clock counted {cycles} cycles in {ns} ns",
            gpu.ordinal
        );
        Ok(cycles as f64 * 1e3 / ns as f64)
    }

    /// Size of the partial-sum buffer a launch may need.
    pub(crate) fn partial_bytes(&self) -> usize {
        self.resident_blocks() as usize * PARTIAL_STRIDE * 4
    }
}

impl Family {
    /// The position of the variant for `id` (a token count or token tiles).
    fn index(&self, id: usize) -> usize {
        self.ids
            .iter()
            .position(|&i| i == id)
            .unwrap_or_else(|| panic!("no kernel variant {id} of {:?}", self.ids))
    }
}

/// The variant of `f` for `id` (a token count or token tiles), plain or PDL.
fn pick(f: &Family, id: usize, pdl: bool) -> &CudaFunction {
    let v = if pdl { &f.pdl } else { &f.plain };
    &v[f.index(id)]
}

/// Compiles `src` for `arch` (once per process) and loads it on `gpu`.
fn load_module(
    gpu: &Gpu,
    file: &'static str,
    src: &str,
    arch: &'static str,
) -> anyhow::Result<Arc<CudaModule>> {
    let ptx = crate::comm::compile::ptx(file, src, arch)?;
    gpu.ctx.load_module(ptx).map_err(|e| {
        anyhow::anyhow!(
            "GPU {}: loading kernels/{file} compiled for {arch} (the driver's JIT refused the PTX: {e:?}); `verifybench env` shows the NVRTC chosen and the driver",
            gpu.ordinal
        )
    })
}

fn function(module: &Arc<CudaModule>, name: &str) -> anyhow::Result<CudaFunction> {
    module
        .load_function(name)
        .map_err(|e| anyhow::anyhow!("kernel {name} missing: {e:?}"))
}

/// The occupancy query's resident blocks of THREADS threads per SM of `k` with `shared` bytes of
/// dynamic shared memory (at least one).
fn occupancy(
    gpu: &Gpu,
    k: &CudaFunction,
    name: &str,
    sms: u32,
    shared: u32,
) -> anyhow::Result<u32> {
    let b = k
        .occupancy_max_active_blocks_per_multiprocessor(THREADS, shared as usize, None)
        .map_err(|e| anyhow::anyhow!("GPU {}: occupancy query: {e:?}", gpu.ordinal))?;
    if b == 0 || sms == 0 {
        anyhow::bail!(
            "GPU {}: the driver says {sms} SMs of {b} resident blocks of {name} each",
            gpu.ordinal
        );
    }
    Ok(b)
}

/// The variants `ids` of a kernel family, `name(pdl, id)` each, with their occupancy. With
/// `shared` (the dynamic shared memory of every launch, bytes), each is allowed that much and asks
/// for the largest shared-memory carveout before the query, so that the blocks the query counts
/// (the persistent grid of `stream_mma`) fit at run time.
fn family(
    gpu: &Gpu,
    module: &Arc<CudaModule>,
    sms: u32,
    ids: &[usize],
    shared: Option<u32>,
    name: impl Fn(bool, usize) -> String,
) -> anyhow::Result<Family> {
    use cudarc::driver::sys::CUfunction_attribute as FA;
    let names: Vec<[String; 2]> = ids
        .iter()
        .map(|&i| [name(false, i), name(true, i)])
        .collect();
    let mut plain = vec![];
    let mut pdl = vec![];
    let mut resident = vec![];
    for pair in &names {
        let mut r = [0u32; 2];
        for (kind, nm) in pair.iter().enumerate() {
            let k = function(module, nm)?;
            if let Some(bytes) = shared {
                let set = |a, v: i32, what: &str| {
                    k.set_attribute(a, v)
                        .map_err(|e| anyhow::anyhow!("GPU {}: {nm}: {what}: {e:?}", gpu.ordinal))
                };
                set(
                    FA::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    bytes as i32,
                    "dynamic shared memory",
                )?;
                set(
                    FA::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                    100,
                    "carveout",
                )?;
            }
            r[kind] = occupancy(gpu, &k, nm, sms, shared.unwrap_or(0))?;
            if kind == 0 {
                plain.push(k)
            } else {
                pdl.push(k)
            }
        }
        resident.push(r);
    }
    Ok(Family {
        ids: ids.to_vec(),
        shared: shared.unwrap_or(0),
        names: names.into_iter().map(|[p, _]| p).collect(),
        plain,
        pdl,
        resident,
    })
}

/// The launch of a streaming kernel with programmatic dependent launch: `cuLaunchKernelEx` with
/// the programmatic-stream-serialization attribute (cudarc's builder takes no launch
/// attributes). `args` are the kernel's parameters in order, checked by the caller.
fn launch_pdl(
    gpu: &Gpu,
    f: &CudaFunction,
    what: &str,
    blocks: u32,
    shared: u32,
    args: &mut [u64],
) -> anyhow::Result<()> {
    use cudarc::driver::sys;
    // No allocation: this is on the eager replay's launch path.
    let mut params = [std::ptr::null_mut::<std::ffi::c_void>(); 8];
    if args.len() > params.len() {
        anyhow::bail!(
            "{what}: {} parameters, at most {}",
            args.len(),
            params.len()
        );
    }
    for (p, a) in params.iter_mut().zip(args.iter_mut()) {
        *p = a as *mut u64 as *mut std::ffi::c_void;
    }
    gpu.bind()?;
    // SAFETY: a zeroed attribute value is a valid bit pattern of the plain-data union; the
    // field set is the one the attribute id names.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let cfg = sys::CUlaunchConfig {
        gridDimX: blocks,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: THREADS,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: shared,
        hStream: gpu.stream.cu_stream(),
        attrs: &mut attr,
        numAttrs: 1,
    };
    // SAFETY: `params` points at the caller's u64 values, which live across the call, one per
    // parameter of the kernel (stream_weights_pdl_T: pointer, u64, u64, u64, pointer, pointer;
    // stream_mma_pdl_MW: the same and a u64; device pointers are 64-bit addresses); the caller
    // checked every buffer's size and device as for a plain launch; `cfg` and `attr` outlive the
    // call, which copies them; the function belongs to this GPU's context, bound above.
    let r = unsafe {
        sys::cuLaunchKernelEx(
            &cfg,
            f.cu_function(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    crate::comm::device::check(
        gpu.ordinal,
        &format!("launching {what} with PDL (cuLaunchKernelEx)"),
        r,
    )?;
    Ok(())
}

/// Blocks per SM of a streaming grid: whole waves of the `resident` blocks the occupancy query
/// lets one SM hold at once, enough waves that the grid offers every one of the SM's
/// `threads_per_sm` threads a block (`ceil(threads_per_sm / threads / resident)` waves). Where
/// the query allows the SM's full thread count (8 blocks of 256 on a 2048-thread SM, 6 on a
/// 1536-thread one) this is one wave; where registers hold fewer (4 of 256 on a 2048-thread SM)
/// the grid keeps the thread count's blocks in 2 waves: measured on an H200 at 8 tokens, one wave
/// of 4 per SM streamed 4421-4432 GB/s against 4417-4448 for 2 waves, lower in 3 of 4 pairs
/// (results/h200x1/bandwidth-ab-aaacb07-c25d825/summary.txt).
pub(crate) fn per_sm_grid(resident: u32, threads_per_sm: u32, threads: u32) -> u32 {
    let resident = resident.max(1);
    let fill = threads_per_sm.div_ceil(threads.max(1)).max(1);
    resident * fill.div_ceil(resident)
}

/// Blocks of a grid-stride launch over `nvec` vectors (one per thread per step): at most
/// `sms x blocks_per_sm` blocks, no more than the work needs, at least one.
pub(crate) fn grid_for(nvec: u64, sms: u32, blocks_per_sm: u32) -> u32 {
    let need = nvec.div_ceil(THREADS as u64).max(1);
    need.min(sms as u64 * blocks_per_sm as u64).max(1) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_are_whole_waves_that_cover_the_sms_threads() {
        // H200, 2048 threads per SM, blocks of 256: 2048 / 256 = 8 blocks fill an SM
        assert_eq!(per_sm_grid(8, 2048, 256), 8);
        // a variant whose registers allow 4 at once: 8 / 4 = 2 waves of 4
        assert_eq!(per_sm_grid(4, 2048, 256), 8);
        // sm_120, 1536 threads per SM: 1536 / 256 = 6 in one wave
        assert_eq!(per_sm_grid(6, 1536, 256), 6);
        // 4 resident there: 6 / 4 = 1.5, so 2 whole waves = 8 (never a partial wave)
        assert_eq!(per_sm_grid(4, 1536, 256), 8);
        // 5 resident: 6 / 5 -> 2 waves of 5 = 10
        assert_eq!(per_sm_grid(5, 1536, 256), 10);
        // a query above the thread count (cannot happen; kept as is): one wave
        assert_eq!(per_sm_grid(16, 2048, 256), 16);
    }

    #[test]
    fn grids_are_one_resident_wave_of_the_occupancy_query() {
        // H200: 132 SMs x 8 blocks of 256 threads (2048 threads per SM) = 1056 blocks
        assert_eq!(grid_for(1 << 30, 132, 8), 1056);
        // RTX PRO 6000 (sm_120): 188 SMs x 6 blocks (1536 threads per SM) = 1128, where the
        // former constant of 8 per SM gave 1504 blocks = 1.33 waves
        assert_eq!(grid_for(1 << 30, 188, 6), 1128);
        // small work: 1000 vectors need ceil(1000 / 256) = 4 blocks
        assert_eq!(grid_for(1000, 132, 8), 4);
        assert_eq!(grid_for(0, 132, 8), 1);
    }

    #[test]
    fn every_token_count_has_a_tensor_core_variant_that_covers_it() {
        // the rule of stream_mma.cu: one group of ceil(T / 16) tiles up to 16 of them, two
        // groups of half (rounded up) up to 32
        assert_eq!((mma_groups(16), mma_width(16)), (1, 1));
        assert_eq!((mma_groups(17), mma_width(17)), (1, 2));
        assert_eq!((mma_groups(128), mma_width(128)), (1, 8));
        assert_eq!((mma_groups(129), mma_width(129)), (1, 9));
        assert_eq!((mma_groups(256), mma_width(256)), (1, 16));
        // 272 tokens: 17 tiles in 2 groups of 9 (9 + 8)
        assert_eq!((mma_groups(257), mma_width(257)), (2, 9));
        assert_eq!((mma_groups(272), mma_width(272)), (2, 9));
        // 300 tokens: 19 tiles, 10 + 9
        assert_eq!((mma_groups(300), mma_width(300)), (2, 10));
        assert_eq!((mma_groups(512), mma_width(512)), (2, 16));
        for t in 1..=MAX_STREAM_TOKENS {
            let (g, w) = (mma_groups(t), mma_width(t));
            assert!(MMA_WIDTHS.contains(&w), "T={t}: MW {w}");
            assert!(g * w * 16 >= t, "T={t}: {g} groups x {w} tiles");
            // every group but the last has its full MW tiles, the last at least one
            assert!((g - 1) * w * 16 < t, "T={t}: an empty group");
            // the kernel's own count of the groups
            assert_eq!(g, t.div_ceil(16).div_ceil(w), "T={t}");
            // the wide variants (one block an SM) only past 8 tiles
            assert_eq!(w > 8, t > 128, "T={t}");
        }
    }

    #[test]
    fn the_kernel_sources_agree_with_the_constants() {
        let define = |src: &str, name: &str| -> usize {
            let line = src
                .lines()
                .find(|l| l.starts_with(&format!("#define {name} ")))
                .unwrap_or_else(|| panic!("no #define {name}"));
            line.split_whitespace().nth(2).unwrap().parse().unwrap()
        };
        for src in [STREAM_SRC, STREAM_MMA_SRC] {
            assert_eq!(define(src, "PARTIAL_STRIDE"), PARTIAL_STRIDE);
            assert_eq!(define(src, "THREADS"), THREADS as usize);
        }
        assert_eq!(define(STREAM_SRC, "MAXT"), CUDA_CORE_MAX_TOKENS);
        // STAGE_VECS: first defined for compute capability 9.0 to 11.x, then for the others
        let stages: Vec<usize> = STREAM_MMA_SRC
            .lines()
            .filter(|l| l.starts_with("#define STAGE_VECS "))
            .map(|l| l.split_whitespace().nth(2).unwrap().parse().unwrap())
            .collect();
        assert_eq!(stages, vec![stage_vecs(9) as usize, stage_vecs(8) as usize]);
        assert_eq!(
            (stage_vecs(10), stage_vecs(11), stage_vecs(12)),
            (2048, 2048, 1024)
        );
        assert_eq!(define(STREAM_MMA_SRC, "DEPTH"), DEPTH as usize);
        for major in [8, 9] {
            // each warp takes an even count of a stage's 32-vector tiles (its loop takes two a
            // turn): TILES / (8 warps / groups) for 1, 2 and 4 groups
            let tiles = stage_vecs(major) as usize / 32;
            for groups in [1, 2, 4] {
                assert_eq!(tiles % (8 / groups), 0);
                assert_eq!((tiles / (8 / groups)) % 2, 0, "{groups} groups");
                // stream_mma_9..16 (one warp group) take four a turn
                if groups == 1 {
                    assert_eq!((tiles / 8) % 4, 0, "MW 9..16");
                }
            }
        }
        // one stream_mma_MW (and its PDL twin) per width, each with the blocks per SM its
        // register budget is cut for; that many rings fit the shared memory of an SM of compute
        // capability 9.0 (228 KB, 1 KB of it reserved per block)
        let ring = (DEPTH * stage_vecs(9) * 16) as usize;
        for w in MMA_WIDTHS {
            let head = format!("MMA_KERNEL({w}, ");
            let at = STREAM_MMA_SRC
                .find(&head)
                .unwrap_or_else(|| panic!("MW {w}"));
            let rest = &STREAM_MMA_SRC[at + head.len()..];
            let blocks: usize = rest[..rest.find(')').unwrap()].parse().unwrap();
            assert!((1..=2).contains(&blocks), "MW {w}: {blocks} blocks");
            assert!(
                blocks * (ring + 1024) <= 228 * 1024,
                "MW {w}: {blocks} rings"
            );
        }
        assert_eq!(
            STREAM_MMA_SRC.matches("MMA_KERNEL(").count(),
            MMA_WIDTHS.len() + 1
        );
    }
}
