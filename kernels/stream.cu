// Weight streaming: the compute between two collectives of a verify step.
//
// With a few tokens a layer is memory-bound: every rank reads its shard of the weights once and
// multiplies it with T token activations. This kernel reads `nvec` 16-byte vectors of "weights"
// (8 bf16 each) from a pool, multiply-accumulates them against T activation rows (a GEMV-like
// reduction, so the loads cannot be optimised away) and writes one partial sum per block and
// token. The pool is a power of two in vectors; indices wrap with a mask, so an operation can
// stream more bytes than the pool holds and consecutive operations start where the last ended:
// repeated replays read from device memory, not from L2.
//
// Past a handful of tokens the 8 x T multiply-adds per load, not the memory, set this kernel's
// time; stream_mma.cu streams the same weights on the tensor cores (the host picks the kernel by
// token count; both write one partial sum per block and token, in the same layout).
//
// Compiled at run time by NVRTC for the device's architecture.
//
// stream_weights_pdl_T is the same pass for programmatic dependent launch (PDL, compute
// capability 9.0 and newer), as an engine that enables PDL launches its GEMMs: the kernel lets
// the next launch's blocks be scheduled as its own retire (griddepcontrol.launch_dependents),
// issues its first weight loads, which depend on no earlier kernel, and only then waits for the
// previous kernel to finish (griddepcontrol.wait) before it reads the activations that kernel
// wrote. The host launches it with the programmatic-stream-serialization attribute; without that
// attribute, or after a kernel that never triggers (an NCCL collective), it runs as a plain launch.

#define MAXT 16
#define THREADS 256
// floats per block in `partial` (the most tokens of any streaming kernel, stream_mma.cu's too)
#define PARTIAL_STRIDE 512

__device__ __forceinline__ float lo_bf16(unsigned int u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float hi_bf16(unsigned int u) { return __uint_as_float(u & 0xffff0000u); }

// The body for a fixed token count T: the activations live in registers, so the inner loop is
// 8 x T fused multiply-adds per 16-byte load with no per-token branch.
// Eight bf16 weights of one 16-byte load, multiply-accumulated against T activation rows.
template <int T>
__device__ __forceinline__ void fma_vec(const uint4& v, const float* a, float* acc)
{
    float w[8] = {lo_bf16(v.x), hi_bf16(v.x), lo_bf16(v.y), hi_bf16(v.y),
                  lo_bf16(v.z), hi_bf16(v.z), lo_bf16(v.w), hi_bf16(v.w)};
#pragma unroll
    for (int t = 0; t < T; ++t)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[t] = fmaf(w[j], a[t * 8 + j], acc[t]);
}

template <int T, bool PDL>
__device__ __forceinline__ void stream_body(const uint4* __restrict__ pool, unsigned long long mask,
                                            unsigned long long start, unsigned long long nvec,
                                            const float* __restrict__ act, float* __restrict__ partial)
{
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
#if __CUDA_ARCH__ >= 900
    if (PDL) asm volatile("griddepcontrol.launch_dependents;");
#endif
    // The weights depend on no earlier kernel: the first four loads are issued before the
    // activations are read (with PDL, before the wait for the kernel that wrote them). Both
    // variants share this order, so that they differ in the launch alone.
    uint4 first[4];
    const bool prefetched = i + 3 * stride < nvec;
    if (prefetched) {
#pragma unroll
        for (int k = 0; k < 4; ++k) first[k] = __ldcs(&pool[(start + i + k * stride) & mask]);
    }
#if __CUDA_ARCH__ >= 900
    if (PDL) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    float a[T * 8];
#pragma unroll
    for (int k = 0; k < T * 8; ++k) a[k] = act[k];
    float acc[T];
#pragma unroll
    for (int t = 0; t < T; ++t) acc[t] = 0.f;
    if (prefetched) {
#pragma unroll
        for (int k = 0; k < 4; ++k) fma_vec<T>(first[k], a, acc);
        i += 4 * stride;
    }

    // four independent 16-byte loads in flight per thread
    for (; i + 3 * stride < nvec; i += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) v[k] = __ldcs(&pool[(start + i + k * stride) & mask]);
#pragma unroll
        for (int k = 0; k < 4; ++k) fma_vec<T>(v[k], a, acc);
    }
    // The last, partial round (i + 3 * stride >= nvec here): up to three loads per thread, all
    // issued before any is used, so the tail costs one memory round trip, not one per load.
    {
        uint4 v[3];
#pragma unroll
        for (int k = 0; k < 3; ++k)
            if (i + k * stride < nvec) v[k] = __ldcs(&pool[(start + i + k * stride) & mask]);
#pragma unroll
        for (int k = 0; k < 3; ++k)
            if (i + k * stride < nvec) fma_vec<T>(v[k], a, acc);
    }

    // block reduction per token: warp shuffles, then one value per warp in shared memory
    __shared__ float red[THREADS / 32][T];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int t = 0; t < T; ++t) {
        float x = acc[t];
        for (int o = 16; o > 0; o >>= 1) x += __shfl_down_sync(0xffffffffu, x, o);
        if (lane == 0) red[warp][t] = x;
    }
    __syncthreads();
    if (threadIdx.x < T) {
        float s = 0.f;
        for (int w = 0; w < THREADS / 32; ++w) s += red[w][threadIdx.x];
        partial[blockIdx.x * PARTIAL_STRIDE + threadIdx.x] = s;
    }
}

// One kernel per token count, stream_weights_1 .. stream_weights_16 and their _pdl_ twins, so
// that each gets the registers its own T needs (one kernel switching over T would be compiled
// for the largest).
// act: tokens x 8 floats (one activation per weight lane and token); partial: one sum per block
// and token (PARTIAL_STRIDE floats per block, the first T written).
#define STREAM_KERNEL(T)                                                                         \
    extern "C" __global__ void __launch_bounds__(THREADS)                                        \
    stream_weights_##T(const uint4* __restrict__ pool, unsigned long long mask,                  \
                       unsigned long long start, unsigned long long nvec,                        \
                       const float* __restrict__ act, float* __restrict__ partial)               \
    {                                                                                            \
        stream_body<T, false>(pool, mask, start, nvec, act, partial);                            \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(THREADS)                                        \
    stream_weights_pdl_##T(const uint4* __restrict__ pool, unsigned long long mask,              \
                           unsigned long long start, unsigned long long nvec,                    \
                           const float* __restrict__ act, float* __restrict__ partial)           \
    {                                                                                            \
        stream_body<T, true>(pool, mask, start, nvec, act, partial);                             \
    }
STREAM_KERNEL(1) STREAM_KERNEL(2) STREAM_KERNEL(3) STREAM_KERNEL(4)
STREAM_KERNEL(5) STREAM_KERNEL(6) STREAM_KERNEL(7) STREAM_KERNEL(8)
STREAM_KERNEL(9) STREAM_KERNEL(10) STREAM_KERNEL(11) STREAM_KERNEL(12)
STREAM_KERNEL(13) STREAM_KERNEL(14) STREAM_KERNEL(15) STREAM_KERNEL(16)

// One tiny kernel: what a real layer's many small kernels (norms, rotary, router, quantization)
// cost in launches. Eager mode pays its launch; a CUDA graph replays it almost for free.
extern "C" __global__ void tiny(float* p)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) p[0] += 1.0f;
}

// The clock the SMs run at now: one thread counts clock64() cycles over at least `window_ns`
// of %globaltimer. The timer moves in steps (of up to microseconds), so both ends are taken
// just after a step: the count is then off by a loop's few cycles, not by a step. `bandwidth`
// launches it after each timed pass (the same stream, so it runs as the pass ends): a card at
// its power limit holds the SM clock under its maximum, and a compute-bound figure moves with it.
__device__ __forceinline__ unsigned long long global_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

extern "C" __global__ void sm_clock(unsigned long long window_ns, unsigned long long* out)
{
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    unsigned long long t0 = global_ns(), t;
    do { t = global_ns(); } while (t == t0);
    long long c0 = clock64(), c;
    t0 = t;
    do {
        t = global_ns();
        c = clock64();
    } while (t - t0 < window_ns);
    out[0] = (unsigned long long)(c - c0);
    out[1] = t - t0;
}
