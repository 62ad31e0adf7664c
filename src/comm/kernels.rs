//! The CUDA kernels of `kernels/`, compiled at run time by NVRTC for the device's architecture.

use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};

use super::compile::STREAM_SRC;
use super::device::{Buffer, Gpu};

/// Threads per block of `stream_weights` (THREADS in the source).
const THREADS: u32 = 256;
/// Most tokens `stream_weights` handles (MAXT in the source).
pub(crate) const MAXT: usize = 16;

/// NVRTC's version, e.g. "13.0" (also loads the library).
pub(crate) fn nvrtc_version() -> Option<String> {
    if !super::libs::nvrtc_present() {
        return None;
    }
    let (mut a, mut b) = (0, 0);
    // SAFETY: two valid out-pointers.
    let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut a, &mut b) };
    (r == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS).then(|| format!("{a}.{b}"))
}

/// The compiled kernels on one GPU.
#[derive(Clone)]
pub(crate) struct Kernels {
    /// stream_weights_T for T = 1..=MAXT (index T - 1).
    stream: Vec<CudaFunction>,
    /// stream_weights_pdl_T, the same for programmatic dependent launch.
    stream_pdl: Vec<CudaFunction>,
    tiny: CudaFunction,
    sms: u32,
    /// Blocks of THREADS threads one SM holds at once, per token count (index T - 1) and
    /// launch kind (plain, PDL), from the driver's occupancy query. A grid launches whole waves
    /// of them covering the SM's `threads_per_sm` ([`per_sm_grid`]).
    resident_per_sm: Vec<[u32; 2]>,
    /// The device's threads per SM (2048 on an H200, 1536 on compute capability 8.6, 8.9, 12.0).
    threads_per_sm: u32,
    /// Launch the streaming kernels with programmatic dependent launch (see `kernels/stream.cu`).
    pdl: bool,
}

impl Kernels {
    /// Compiles `kernels/stream.cu` for `gpu`'s architecture and loads it; streaming launches
    /// are plain launches.
    pub fn load(gpu: &Gpu) -> anyhow::Result<Kernels> {
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
        super::compile::check_pdl(
            super::compile::arch(major, minor)?,
            &format!("GPU {} (compute capability {major}.{minor})", gpu.ordinal()),
        )?;
        Ok(Kernels {
            pdl: true,
            ..self.clone()
        })
    }

    fn compile(gpu: &Gpu) -> anyhow::Result<Kernels> {
        let (major, minor) = gpu.compute_capability()?;
        let arch = super::compile::arch(major, minor)?;
        let ptx = super::compile::ptx("stream.cu", STREAM_SRC, arch)?;
        let module = gpu.ctx.load_module(ptx).map_err(|e| {
            anyhow::anyhow!(
                "GPU {}: loading kernels/stream.cu compiled for {arch} (the driver's JIT refused the PTX: {e:?}); `verifybench env` shows the NVRTC chosen and the driver",
                gpu.ordinal
            )
        })?;
        let f = |name: &str| {
            module
                .load_function(name)
                .map_err(|e| anyhow::anyhow!("kernel {name} missing: {e:?}"))
        };
        let sms = gpu
            .ctx
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )
            .map_err(|e| anyhow::anyhow!("GPU {}: SM count: {e:?}", gpu.ordinal))?
            as u32;
        let threads_per_sm = gpu
            .ctx
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
            )
            .map_err(|e| anyhow::anyhow!("GPU {}: threads per SM: {e:?}", gpu.ordinal))?
            as u32;
        let stream: Vec<CudaFunction> = (1..=MAXT)
            .map(|t| f(&format!("stream_weights_{t}")))
            .collect::<anyhow::Result<_>>()?;
        let stream_pdl: Vec<CudaFunction> = (1..=MAXT)
            .map(|t| f(&format!("stream_weights_pdl_{t}")))
            .collect::<anyhow::Result<_>>()?;
        let occ = |k: &CudaFunction| -> anyhow::Result<u32> {
            let b = k
                .occupancy_max_active_blocks_per_multiprocessor(THREADS, 0, None)
                .map_err(|e| anyhow::anyhow!("GPU {}: occupancy query: {e:?}", gpu.ordinal))?;
            if b == 0 || sms == 0 {
                anyhow::bail!(
                    "GPU {}: the driver says {sms} SMs of {b} resident streaming blocks each",
                    gpu.ordinal
                );
            }
            Ok(b)
        };
        let resident_per_sm = stream
            .iter()
            .zip(&stream_pdl)
            .map(|(a, b)| Ok([occ(a)?, occ(b)?]))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Kernels {
            stream,
            stream_pdl,
            tiny: f("tiny")?,
            sms,
            resident_per_sm,
            threads_per_sm,
            pdl: false,
        })
    }

    /// Blocks of a streaming launch of `tokens` tokens over `nvec` vectors: whole waves that
    /// fill every SM's threads (SMs x [`per_sm_grid`] of the occupancy query), no more than the
    /// work needs.
    pub(crate) fn blocks_for(&self, nvec: u64, tokens: usize) -> u32 {
        grid_for(nvec, self.sms, self.per_sm(tokens))
    }

    /// Blocks per SM of a streaming grid of `tokens` tokens: whole waves of the resident
    /// blocks that cover the SM's threads ([`per_sm_grid`]).
    fn per_sm(&self, tokens: usize) -> u32 {
        per_sm_grid(self.resident(tokens), self.threads_per_sm, THREADS)
    }

    /// The occupancy query's resident blocks per SM of the kernel launched for `tokens`.
    fn resident(&self, tokens: usize) -> u32 {
        self.resident_per_sm[tokens.clamp(1, MAXT) - 1][self.pdl as usize]
    }

    /// The largest grid of any streaming kernel: SMs x blocks per SM.
    pub(crate) fn resident_blocks(&self) -> u32 {
        let most = self
            .resident_per_sm
            .iter()
            .flatten()
            .map(|&b| per_sm_grid(b, self.threads_per_sm, THREADS))
            .max()
            .unwrap_or(1);
        self.sms * most
    }

    /// "T=1 1056 blocks (8 per SM x 132 SMs), ..., T=8 1056 blocks (2 waves of 4 per SM x 132
    /// SMs)" for the token counts given.
    pub(crate) fn grid_summary(&self, tokens: &[usize]) -> String {
        tokens
            .iter()
            .map(|&t| {
                let per_sm = self.per_sm(t);
                let resident = self.resident(t);
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

    /// Enqueues a streaming pass over `nvec` 16-byte vectors of `pool` starting at vector
    /// `start` (wrapping), against `tokens` activation rows in `act`, writing per-block partial
    /// sums to `partial` (blocks x MAXT floats).
    #[allow(clippy::too_many_arguments)]
    pub fn stream(
        &self,
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
        if tokens == 0 || tokens > MAXT {
            anyhow::bail!(
                "GPU {}: the streaming kernel takes 1..={MAXT} tokens, not {tokens}",
                gpu.ordinal
            );
        }
        let blocks = self.blocks_for(nvec, tokens);
        gpu.check_buffer(
            &pool.buf,
            "stream_weights (pool)",
            0,
            (pool.vecs * 16) as usize,
        )?;
        gpu.check_buffer(act, "stream_weights (activations)", 0, tokens * 8 * 4)?;
        gpu.check_buffer(
            partial,
            "stream_weights (partial sums)",
            0,
            blocks as usize * MAXT * 4,
        )?;
        for b in [&pool.buf, act, partial] {
            gpu.keep_buffer(b);
        }
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let (pp, ap, outp) = (pool.buf.ptr(), act.ptr(), partial.ptr());
        let mask = pool.vecs - 1;
        if self.pdl {
            return self.stream_pdl(gpu, blocks, tokens, [pp, mask, start, nvec, ap, outp]);
        }
        let mut b = gpu.stream.launch_builder(&self.stream[tokens - 1]);
        b.arg(&pp)
            .arg(&mask)
            .arg(&start)
            .arg(&nvec)
            .arg(&ap)
            .arg(&outp);
        // SAFETY: the argument list matches stream_weights_T's signature (pointers passed as
        // 64-bit device addresses, u64 mask/start/count); every index is masked into the pool
        // (a power of two of vectors); act holds tokens*8 floats and partial blocks*MAXT floats,
        // all on this GPU (checked); the buffers are freed in stream order after the launch or
        // kept by the graph being captured.
        unsafe { b.launch(cfg) }
            .map_err(|e| anyhow::anyhow!("GPU {}: launching stream_weights: {e:?}", gpu.ordinal))?;
        Ok(())
    }

    /// The launch of [`Kernels::stream`] with programmatic dependent launch: `cuLaunchKernelEx`
    /// with the programmatic-stream-serialization attribute (cudarc's builder takes no launch
    /// attributes). `args` are stream_weights_pdl_T's six arguments in order, checked by the
    /// caller.
    fn stream_pdl(
        &self,
        gpu: &Gpu,
        blocks: u32,
        tokens: usize,
        mut args: [u64; 6],
    ) -> anyhow::Result<()> {
        use cudarc::driver::sys;
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
            sharedMemBytes: 0,
            hStream: gpu.stream.cu_stream(),
            attrs: &mut attr,
            numAttrs: 1,
        };
        // No allocation: this is on the eager replay's launch path.
        let mut params = args
            .each_mut()
            .map(|a| a as *mut u64 as *mut std::ffi::c_void);
        // SAFETY: `params` points at six u64 values that live across the call, matching
        // stream_weights_pdl_T's (pointer, u64, u64, u64, pointer, pointer) signature (device
        // pointers are 64-bit addresses); the caller checked every buffer's size and device as
        // for `stream`; `cfg` and `attr` outlive the call, which copies them; the function
        // belongs to this GPU's context, bound above.
        let r = unsafe {
            sys::cuLaunchKernelEx(
                &cfg,
                self.stream_pdl[tokens - 1].cu_function(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        super::device::check(
            gpu.ordinal,
            "launching stream_weights_pdl (cuLaunchKernelEx)",
            r,
        )?;
        Ok(())
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

    /// Size of the partial-sum buffer a launch may need.
    pub(crate) fn partial_bytes(&self) -> usize {
        self.resident_blocks() as usize * MAXT * 4
    }
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

/// The weight pool the streaming kernel reads: a power of two in 16-byte vectors, several times
/// the L2 size, so that streaming it reads device memory.
pub(crate) struct Pool {
    buf: Buffer,
    vecs: u64,
}

impl Pool {
    /// Size in 16-byte vectors (a power of two).
    pub(crate) fn vecs(&self) -> u64 {
        self.vecs
    }

    /// The pool's device buffer (`vecs x 16` bytes).
    pub(crate) fn buffer(&self) -> &Buffer {
        &self.buf
    }

    /// Allocates `bytes` (rounded down to a power of two) and fills it with bf16 values of
    /// small integers (so that CPU references are exact to check).
    pub fn new(gpu: &Gpu, bytes: u64) -> anyhow::Result<Pool> {
        let v = (bytes / 16).max(1);
        let vecs = 1u64 << (63 - v.leading_zeros());
        let buf = gpu.alloc((vecs * 16) as usize)?;
        // A repeating pattern of bf16 integers 1..=8, uploaded in chunks.
        let chunk: Vec<u8> = (0..(1usize << 20))
            .flat_map(|i| half::bf16::from_f32(((i % 8) + 1) as f32).to_le_bytes())
            .collect();
        let total = (vecs * 16) as usize;
        let mut off = 0;
        while off < total {
            let n = chunk.len().min(total - off);
            gpu.upload_at(&buf, off, &chunk[..n])?;
            off += n;
        }
        Ok(Pool { buf, vecs })
    }

    /// The bf16 weight at element index `e` of the pool (the pattern written by [`Pool::new`]).
    pub fn weight(e: u64) -> f32 {
        ((e % (1 << 20)) % 8 + 1) as f32
    }
}

/// CPU reference of one streaming pass: sum over the vectors of weight x activation, per token.
pub fn reference(pool_vecs: u64, start: u64, nvec: u64, act: &[f32], tokens: usize) -> Vec<f64> {
    let mut out = vec![0f64; tokens];
    let mask = pool_vecs - 1;
    for i in 0..nvec {
        let v = (start + i) & mask;
        for j in 0..8u64 {
            let w = Pool::weight(v * 8 + j) as f64;
            for (t, o) in out.iter_mut().enumerate() {
                *o += w * act[t * 8 + j as usize] as f64;
            }
        }
    }
    out
}

/// Sums the per-block partials of a launch over `blocks` blocks.
pub(crate) fn sum_partials(bytes: &[u8], blocks: usize, tokens: usize) -> Vec<f64> {
    let f = |i: usize| f32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap()) as f64;
    (0..tokens)
        .map(|t| (0..blocks).map(|b| f(b * MAXT + t)).sum())
        .collect()
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
    fn reference_of_one_vector() {
        // vector 0 holds weights 1..=8; activations all 1 for token 0, 2 for token 1
        let mut act = vec![1.0f32; 8];
        act.extend(vec![2.0f32; 8]);
        let r = reference(1 << 10, 0, 1, &act, 2);
        assert_eq!(r, vec![36.0, 72.0]);
    }

    #[test]
    fn sum_of_partials() {
        let mut bytes = vec![0u8; 2 * MAXT * 4];
        bytes[0..4].copy_from_slice(&1.5f32.to_le_bytes());
        bytes[MAXT * 4..MAXT * 4 + 4].copy_from_slice(&2.0f32.to_le_bytes());
        assert_eq!(sum_partials(&bytes, 2, 1), vec![3.5]);
    }
}
