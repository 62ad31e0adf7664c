// Weight streaming on the tensor cores: the compute between two collectives of a verify step at
// many tokens per forward (up to PARTIAL_STRIDE = 512).
//
// The CUDA-core kernel of stream.cu does 8 x T fused multiply-adds per 16-byte load: past about
// 16 tokens the CUDA cores, not the memory, set its time. Here every 16-byte weight load is two
// B fragments of the bf16 tensor-core instruction
//     mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32   (D[16x8] += A[16x16] B[16x8])
// whose A operand holds 16 tokens' activations (rows = tokens, k = 16 activation lanes) and whose
// B operand holds 128 weights (16 k x 8 columns): 2 x T flops per 2-byte weight, as a GEMM of
// those weights against T tokens does. The accumulators D sum over every weight tile a warp
// sees; at the end the 8 weight columns are summed, so that each block writes one partial sum per
// token, as stream.cu does (the sum over all weights of weight x activation). Nothing is skipped:
// every weight byte is read once from device memory and multiplied with every token.
//
// Data flow per block (THREADS = 256 threads, 8 warps):
// - weights: a ring of DEPTH = 3 stages of STAGE_VECS 16-byte vectors in dynamic shared memory
//   (the host asks for DEPTH x STAGE_VECS x 16 bytes at launch): 32 KB stages (64 tiles of 32
//   vectors, a 96 KB ring) on compute capability 9.0 to 11.x, whose SMs have 228 KB; 16 KB
//   stages (48 KB) elsewhere (100 KB an SM on 8.6, 8.9 and 12.x). Filled by cp.async (16 bytes
//   per thread per copy, STAGE_VECS / 256 copies per thread per stage, the global reads
//   coalesced: 512 consecutive bytes per warp), DEPTH - 1 stages in flight while one is
//   computed. Block b streams stages b, b + gridDim.x, ... of the operation (a persistent
//   grid). The pool is a power of two in vectors and indices wrap with a mask, as in stream.cu;
//   vectors past the operation's end are zero-filled by the copy (no read).
// - activations: each warp builds the A fragments of its tokens once, from `act` (tokens x 8
//   floats, converted to bf16), and keeps them in registers for the whole launch: token n's
//   activation at k is act[n * 8 + k % 8]. They are never re-read per weight tile.
// - tokens: ceil(T / 16) tiles of 16 tokens (rows of A). MW, the template argument, is the token
//   tiles of a block (stream_mma_MW, MW = 1..16): every warp of the block takes all of them,
//   against its own share of each stage's weight tiles (TILES / 8 of them, four a turn above
//   MW = 8, two up to it, each tile's vector read one tile ahead). Up to 16 tiles one block
//   group takes them all (MW = tiles); 17 to 32 tiles, two groups of MW = ceil(tiles / 2), as
//   two blocks side by side on the same stages (device memory serves a stage once, L2 the second
//   block's copy). The host's rule is mma_groups / mma_width in src/comm/kernels/mod.rs.
// - each thread reads back only the 16-byte vectors it copied itself (thread t copies vectors
//   t + 256 v of a stage, which are lane t % 32 of tiles t / 32 + 8 v, the tiles its warp
//   computes): no block barrier in the loop.
// - why these sizes, measured on an H100 at 512 tokens (scripts/h100x1-53.sh; the counts are
//   in results/h100x1/stream-mma-21cee22/ncu*.txt): with 16 KB stages in static shared memory
//   and 3 blocks of stream_mma_8 an SM, a warp issued 2.0 instructions per MMA (mma_peak: 1.2),
//   about 150 of them per stage in the copies' 64-bit index arithmetic and 12 per two tiles in
//   the loop, and the tensor pipe was 81% active even from L2. The copies now work out the
//   stage's place once and the loop walks one index; 32 KB stages halve the per-stage work per
//   weight byte; and MW = 16 (one block an SM, 180 registers, 32 MMAs per shared-memory load)
//   needs no barrier. Measured with stream_mma_16's two groups at 512 tokens as warps of one
//   block (a barrier per stage, results/h100x1/stream-mma-21cee22): 1.5 instructions per MMA,
//   the tensor pipe 88% active, 79%-90% of mma_peak from device memory; as two blocks
//   (stream-mma-c392c16): 1.8 instructions per MMA (each block copies for its own tokens), the
//   pipe 90% active, 82%-86% at 512 tokens and 90%-92% at 256. There the other token counts
//   above 128 still ran on stream_mma_5..8 in two or four groups of warps behind a barrier per
//   stage, 62%-87% of mma_peak (mid-*.txt); they now have MW = 9..15, as 256 and 512 have 16.
//   With the whole-stage copies from one base address (load_stage): 1.44 instructions per MMA
//   at 512 tokens, the pipe 93.5% active (stream-mma-85e60da/run-2/ncu.txt).
//
// Which weight meets which activation lane (the host's reference, src/comm/kernels/pool.rs,
// uses the same rule): the B fragment of lane l of the warp holds k = 2 (l % 4) + {0, 1} in its
// first register and k + 8 in its second (PTX ISA, mma.m16n8k16 fragments); the operation's
// vector i lands in lane i % 32, its 16 bytes are the two fragments (words 0-1 and 2-3), so its
// bf16 element j (0..7) is multiplied with activation lane k % 8 = 2 (i % 4) + j % 2.
//
// Registers: stream_mma_1..8 ask __launch_bounds__ for 2 blocks per SM (at most 128 per
// thread), stream_mma_9..16 for one (stream_mma_16's 64 accumulators and 64 activation words
// need about 180). Shared memory: the ring (reused for the block's reduction at the end), two
// rings an SM on 9.0 to 11.x, one above MW = 8 and, by the occupancy query, what fits elsewhere.
//
// stream_mma_pdl_MW is the same for programmatic dependent launch, in the order of stream.cu:
// launch_dependents, the first DEPTH - 1 stages' copies (weights depend on no earlier kernel),
// then griddepcontrol.wait before the activations are read and the partial sums written.
//
// mma_peak: the same instruction with its operands in registers only (8 token tiles x 2
// fragments x 2 vectors per loop: 32 independent-accumulator MMAs per warp per iteration, the
// mix stream_mma_8 issues per two weight vectors), so that `bandwidth` states the tensor-core
// peak of this instruction measured on the GPU at hand.
//
// Compiled at run time by NVRTC for the device's architecture; the bodies need compute
// capability 8.0 (bf16 mma.sync, cp.async) and compile to nothing below it, where the host
// never launches them.

#define PARTIAL_STRIDE 512
#define THREADS 256
#define WARPS (THREADS / 32)
#if __CUDA_ARCH__ >= 900 && __CUDA_ARCH__ < 1200
#define STAGE_VECS 2048
#else
#define STAGE_VECS 1024
#endif
#define TILES (STAGE_VECS / 32)
#define DEPTH 3

#if __CUDA_ARCH__ >= 800

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, unsigned bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// D += A B, A = {a[0], a[1], a[2], a[3]} (the activations at k and k + 8 are the same lane
// k % 8: a[2] = a[0], a[3] = a[1], held as four registers so that the instruction's register
// quad is built once per launch, not before every MMA).
__device__ __forceinline__ void mma(float* d, const unsigned (&a)[4], unsigned b0, unsigned b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// float to bf16, round to nearest even (finite inputs), as the lower half of a word
__device__ __forceinline__ unsigned bf16_bits(float f)
{
    unsigned u = __float_as_uint(f);
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi)
{
    return bf16_bits(lo) | (bf16_bits(hi) << 16);
}

// The 16-byte vectors this thread copies of the stage that starts at vector `first` of the
// operation into ring slot `slot` (shared-memory address): vectors threadIdx.x + v x THREADS,
// v = 0..STAGE_VECS / THREADS - 1, of the stage. A whole stage that does not wrap around the
// pool's end (nearly all of them) is copied from one base address at fixed offsets. The others
// (the operation's last stage, the one across the wrap) take the general path: the stage's place
// in the pool and how many of its vectors the operation still has worked out once, then per
// vector a 32-bit test and the masked address (per stage these were about 150 instructions of a
// warp's 256 MMAs at 512 tokens with the index, the bound and the wrap in 64 bits per vector,
// measured in the SASS of stream_mma_8; with the general path for every stage, stream_mma_16
// issued 1.8 instructions per MMA at 512 tokens, results/h100x1/clock-25e808d/ncu.txt).
__device__ __forceinline__ void load_stage(unsigned slot, const uint4* __restrict__ pool,
                                           unsigned long long mask, unsigned long long start,
                                           unsigned long long nvec, unsigned long long first)
{
    const unsigned long long left = nvec - first;
    const unsigned long long at = (start + first) & mask;
    if (left >= STAGE_VECS && at + (STAGE_VECS - 1) <= mask) {
        // the common case: a whole stage, contiguous in the pool (no wrap inside it). One base
        // address per thread, the vectors at fixed offsets from it (one cp.async each, with no
        // test or address arithmetic per vector)
        const uint4* src = pool + at + threadIdx.x;
        const unsigned dst = slot + threadIdx.x * 16;
#pragma unroll
        for (int v = 0; v < STAGE_VECS / THREADS; ++v)
            cp_async16(dst + v * THREADS * 16, src + v * THREADS, 16u);
        return;
    }
    const unsigned long long base = start + first + threadIdx.x;
    const unsigned have = left < STAGE_VECS ? (unsigned)left : STAGE_VECS;
#pragma unroll
    for (int v = 0; v < STAGE_VECS / THREADS; ++v) {
        const unsigned q = threadIdx.x + v * THREADS;
        const bool in = q < have;
        const uint4* src = in ? &pool[(base + v * THREADS) & mask] : pool;
        cp_async16(slot + q * 16, src, in ? 16u : 0u);
    }
}

// The 2 x MW MMAs of one 16-byte weight vector: its two B fragments against each token tile.
// Every tile of the group is multiplied, also those past the last token (their activations are
// zero, so they add nothing): the second group of an odd tile count (19 tiles at 300 tokens: 10
// and 9) does the first group's work, no more, and no MMA waits behind a test of its tile.
template <int MW>
__device__ __forceinline__ void mma_vec(float (&acc)[MW][4], const unsigned (&a)[MW][4],
                                        const uint4& w)
{
#pragma unroll
    for (int m = 0; m < MW; ++m) mma(acc[m], a[m], w.x, w.y);
#pragma unroll
    for (int m = 0; m < MW; ++m) mma(acc[m], a[m], w.z, w.w);
}

// One stage's share of a warp: tiles first, first + step, ... of the TILES (TILES / step of
// them, 4 or 8: a multiple of four), two per turn up to MW = 8, four above. Each tile's vector is read from shared memory one tile ahead, into the other register
// of a double buffer, so that 2 x MW MMAs stand between a shared-memory load and its first use
// and no warp waits on one; on the stage's last tile the look-ahead reads that tile again (no
// read past the slot). The loop walks one index and stops at the end of the warp's tiles: its
// own instructions were 12 per two tiles with the tile index and its bound kept separately.
// Four a turn above MW = 8 (half the loop's instructions per MMA again; results/h100x1/ holds
// the runs before and after); the narrower variants keep two, their registers being capped at
// 128 for two blocks an SM.
template <int MW>
__device__ __forceinline__ void compute_stage(const uint4* s, int first, int step, int lane,
                                              const unsigned (&a)[MW][4],
                                              float (&acc)[MW][4])
{
    const int d = step * 32;
    int i = first * 32 + lane;
    const int stop = i + TILES * 32;
    uint4 w0 = s[i];
    if (MW > 8) {
#pragma unroll 1
        for (;;) {
            uint4 w1 = s[i + d];
            mma_vec<MW>(acc, a, w0);
            w0 = s[i + 2 * d];
            mma_vec<MW>(acc, a, w1);
            w1 = s[i + 3 * d];
            mma_vec<MW>(acc, a, w0);
            i += 4 * d;
            w0 = s[min(i, stop - d)];
            mma_vec<MW>(acc, a, w1);
            if (i == stop) break;
        }
    } else {
#pragma unroll 1
        for (;;) {
            const uint4 w1 = s[i + d];
            mma_vec<MW>(acc, a, w0);
            i += 2 * d;
            w0 = s[min(i, stop - d)];
            mma_vec<MW>(acc, a, w1);
            if (i == stop) break;
        }
    }
}

template <int MW, bool PDL>
__device__ __forceinline__ void mma_body(const uint4* __restrict__ pool, unsigned long long mask,
                                         unsigned long long start, unsigned long long nvec,
                                         const float* __restrict__ act, float* __restrict__ partial,
                                         unsigned long long tokens)
{
    extern __shared__ __align__(16) uint4 ring_dyn[]; // DEPTH x STAGE_VECS, sized at launch
    uint4(*ring)[STAGE_VECS] = reinterpret_cast<uint4(*)[STAGE_VECS]>(ring_dyn);
    const unsigned ring_s = (unsigned)__cvta_generic_to_shared(&ring[0][0]);
    const unsigned long long stages = (nvec + STAGE_VECS - 1) / STAGE_VECS;
    const int tiles = (int)((tokens + 15) / 16);
    // the token groups of MW tiles (two at most: 17 to 32 tiles): block b takes group
    // b % groups and the stages b / groups, b / groups + gridDim.x / groups, ... (the host
    // launches a multiple of `groups` blocks), so that blocks groups x s .. groups x s + groups
    // - 1 stream the same stages side by side; device memory serves a stage once, L2 the other
    // group's copy
    const int groups = (tiles + MW - 1) / MW;
    const int group = (int)(blockIdx.x % groups);
    const unsigned long long first = blockIdx.x / groups, stride = gridDim.x / groups;
    // the block's stages: first, first + stride, ... (fewer than 2^32 of them: a stage is 16 KB
    // or more)
    const unsigned mine = first < stages ? (unsigned)((stages - first + stride - 1) / stride) : 0;
#if __CUDA_ARCH__ >= 900
    if (PDL) asm volatile("griddepcontrol.launch_dependents;");
#endif
#pragma unroll
    for (int p = 0; p < DEPTH - 1; ++p) {
        if (p < mine)
            load_stage(ring_s + p * STAGE_VECS * 16, pool, mask, start, nvec,
                       (first + p * stride) * STAGE_VECS);
        cp_commit();
    }
#if __CUDA_ARCH__ >= 900
    if (PDL) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int tile0 = group * MW;

    // this warp's tokens as A fragments: rows g and g + 8 of each of its token tiles, lanes
    // 2t and 2t + 1 (k and k + 8 share them)
    unsigned a[MW][4];
    float acc[MW][4];
    // 0 (tokens <= PARTIAL_STRIDE), unknown to the compiler: the halves k + 8 of the A quads are
    // then registers of their own, not copies the compiler may rebuild before every MMA
    const unsigned opaque_zero = (unsigned)(tokens >> 32);
#pragma unroll
    for (int m = 0; m < MW; ++m) {
        const unsigned long long n0 = (unsigned long long)(tile0 + m) * 16 + g, n1 = n0 + 8;
        const float x00 = n0 < tokens ? act[n0 * 8 + 2 * t] : 0.f;
        const float x01 = n0 < tokens ? act[n0 * 8 + 2 * t + 1] : 0.f;
        const float x10 = n1 < tokens ? act[n1 * 8 + 2 * t] : 0.f;
        const float x11 = n1 < tokens ? act[n1 * 8 + 2 * t + 1] : 0.f;
        a[m][0] = pack_bf16(x00, x01);
        a[m][1] = pack_bf16(x10, x11);
        a[m][2] = a[m][0] | opaque_zero;
        a[m][3] = a[m][1] | opaque_zero;
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[m][c] = 0.f;
    }

    // the ring's slot read this turn, and the first vector of the stage copied this turn
    unsigned slot = 0;
    for (unsigned it = 0; it < mine; ++it) {
        cp_wait<DEPTH - 2>();
        const unsigned fill = slot == 0 ? DEPTH - 1 : slot - 1;
        if (it + DEPTH - 1 < mine)
            load_stage(ring_s + fill * STAGE_VECS * 16, pool, mask, start, nvec,
                       (first + (unsigned long long)(it + DEPTH - 1) * stride) * STAGE_VECS);
        cp_commit();
        const uint4* s = ring[slot];
        slot = slot == DEPTH - 1 ? 0 : slot + 1;
        compute_stage<MW>(s, warp, WARPS, lane, a, acc);
    }
    cp_wait<0>();
    __syncthreads();

    // per token: the 8 weight columns (2 per lane, 4 lanes) summed, then the block's warps
    float* red = reinterpret_cast<float*>(&ring[0][0]); // [WARPS][MW * 16]
#pragma unroll
    for (int m = 0; m < MW; ++m) {
        float s0 = acc[m][0] + acc[m][1], s1 = acc[m][2] + acc[m][3];
        s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
        s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
        s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
        s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
        if (t == 0) {
            red[warp * MW * 16 + m * 16 + g] = s0;
            red[warp * MW * 16 + m * 16 + g + 8] = s1;
        }
    }
    __syncthreads();
    for (unsigned n = threadIdx.x; n < tokens; n += THREADS) {
        // a block writes 0 for the tokens of the other block's group
        const int local = (int)n - tile0 * 16;
        float sum = 0.f;
        if (local >= 0 && local < MW * 16)
            for (int w = 0; w < WARPS; ++w) sum += red[w * MW * 16 + local];
        partial[(unsigned long long)blockIdx.x * PARTIAL_STRIDE + n] = sum;
    }
}

#else // below compute capability 8.0: no bf16 mma.sync or cp.async; the host never launches these

template <int MW, bool PDL>
__device__ __forceinline__ void mma_body(const uint4*, unsigned long long, unsigned long long,
                                         unsigned long long, const float*, float*,
                                         unsigned long long)
{
}

#endif

// act: tokens x 8 floats; partial: PARTIAL_STRIDE floats per block, the first `tokens` written.
// BLOCKS: the blocks per SM the register budget is cut for (see "Registers" above).
#define MMA_KERNEL(MW, BLOCKS)                                                                   \
    extern "C" __global__ void __launch_bounds__(THREADS, BLOCKS)                                \
    stream_mma_##MW(const uint4* __restrict__ pool, unsigned long long mask,                     \
                    unsigned long long start, unsigned long long nvec,                           \
                    const float* __restrict__ act, float* __restrict__ partial,                  \
                    unsigned long long tokens)                                                   \
    {                                                                                            \
        mma_body<MW, false>(pool, mask, start, nvec, act, partial, tokens);                      \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(THREADS, BLOCKS)                                \
    stream_mma_pdl_##MW(const uint4* __restrict__ pool, unsigned long long mask,                 \
                        unsigned long long start, unsigned long long nvec,                       \
                        const float* __restrict__ act, float* __restrict__ partial,              \
                        unsigned long long tokens)                                               \
    {                                                                                            \
        mma_body<MW, true>(pool, mask, start, nvec, act, partial, tokens);                       \
    }
MMA_KERNEL(1, 2) MMA_KERNEL(2, 2) MMA_KERNEL(3, 2) MMA_KERNEL(4, 2)
MMA_KERNEL(5, 2) MMA_KERNEL(6, 2) MMA_KERNEL(7, 2) MMA_KERNEL(8, 2) MMA_KERNEL(9, 1)
MMA_KERNEL(10, 1) MMA_KERNEL(11, 1) MMA_KERNEL(12, 1) MMA_KERNEL(13, 1) MMA_KERNEL(14, 1)
MMA_KERNEL(15, 1) MMA_KERNEL(16, 1)

// src: at least 64 16-byte vectors (the weights and activations used as operands); out: one
// float per thread, so that nothing is optimised away.
extern "C" __global__ void __launch_bounds__(THREADS, 2)
mma_peak(const uint4* __restrict__ src, unsigned long long iters, float* __restrict__ out)
{
#if __CUDA_ARCH__ >= 800
    const int lane = threadIdx.x & 31;
    const uint4 w0 = src[lane], w1 = src[32 + lane];
    unsigned a[8][4];
    float acc[8][4];
#pragma unroll
    for (int m = 0; m < 8; ++m) {
        const unsigned* p = reinterpret_cast<const unsigned*>(&src[(m * 4 + lane) % 64]);
        a[m][0] = p[m % 4];
        a[m][1] = p[(m + 1) % 4];
        a[m][2] = a[m][0];
        a[m][3] = a[m][1];
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[m][c] = 0.f;
    }
    for (unsigned long long i = 0; i < iters; ++i) {
#pragma unroll
        for (int m = 0; m < 8; ++m) mma(acc[m], a[m], w0.x, w0.y);
#pragma unroll
        for (int m = 0; m < 8; ++m) mma(acc[m], a[m], w0.z, w0.w);
#pragma unroll
        for (int m = 0; m < 8; ++m) mma(acc[m], a[m], w1.x, w1.y);
#pragma unroll
        for (int m = 0; m < 8; ++m) mma(acc[m], a[m], w1.z, w1.w);
    }
    float s = 0.f;
#pragma unroll
    for (int m = 0; m < 8; ++m)
#pragma unroll
        for (int c = 0; c < 4; ++c) s += acc[m][c];
    out[(unsigned long long)blockIdx.x * THREADS + threadIdx.x] = s;
#endif
}
