// P2P all-reduce (sum) without NCCL: one-shot and two-shot, bf16, f16 and f32.
//
// Every rank owns one workspace (see the layout below) that its peers can address: through peer
// access between the contexts of one process, or through CUDA IPC between processes. A call:
//
// - one-shot: copy the input into the rank's own staging buffer, signal every peer, wait for
//   every peer's signal, read the staging buffers of all ranks and sum them (n-1 peer reads).
// - two-shot: copy in and signal as above; then rank r sums partition r of every rank's staging
//   (reduce-scatter) into its own result buffer, signals again, waits, and reads partition p from
//   rank p's result buffer (all-gather).
//
// Signals: per-block flag slots in the RECEIVER's workspace (polling stays local), written by the
// sender with st.release.sys after a __syncthreads that orders the block's data writes, and read
// with ld.acquire.sys by one thread per peer before a __syncthreads that orders the block's data
// reads. The flag value is the call's epoch: a 64-bit counter in the workspace that every call
// increments on the device (kernel arguments are frozen inside a CUDA graph, so the count cannot
// be an argument). A slot holds the latest epoch its sender reached, so a wait passes on
// "flag >= epoch". 64 bits never wrap (2^64 calls at one per microsecond take 584,000 years), so
// the comparison needs no wrap rule; the staging half is the epoch's parity.
//
// Why nothing is overwritten while a peer still reads it:
// - staging is double-buffered by epoch parity. A rank writes the half of call e+2 only after
//   the waits of call e+1, which see every peer's call-e+1 signal; a peer sends those only from
//   its kernel e+1, which starts after its kernel e (every read of call e) has finished.
// - the result buffer (two-shot) is written after the first wait of a call, which sees every
//   peer's signal of that call, so every peer's previous kernel (its gather reads) has finished.
// - the block that reads a region of a peer's staging or result buffer has the same index as
//   the block that wrote it there: the partition depends only on (count, dtype, ranks, grid),
//   never on the alignment of the caller's pointers, so it is the same on every rank.
//
// Epochs stay in lock-step over grids of different sizes: block b of a grid of G blocks sets the
// counters of blocks b, b+G, b+2G, ... (all MAXB of them per call), and only block b writes
// counter b in a call, so no block races another.
//
// A wait is bounded by %globaltimer: after timeout_ns (half the run's --timeout) the waiting thread
// records which rank never signalled in the workspace's error words (first failure wins) and the
// kernel returns. A workspace with an error is sticky: later calls return at once, so nothing
// hangs behind a dead peer; the host reads the error words after synchronising.
//
// The host can end every wait sooner: `stop` points at a word of pinned host memory mapped into
// the device (0: none). When the run fails elsewhere (another rank's error, the run's deadline)
// the host writes 1 there. One thread per block (POLLER, outside the waiting warp) reads it, and
// the error words, every POLL_NS of elapsed time (%globaltimer) while the block waits, never on a
// call's fast path (a read of host memory costs a PCIe round trip, and a wait shorter than
// POLL_NS reads nothing); it records ERR_STOPPED in the error words (unless an error is there
// already) and ends the block's waits, and later calls return at once. So a rank whose peer will
// never signal leaves its kernels within microseconds of the host's word, not after timeout_ns,
// and its workspace can be freed once every rank has left.
//
// Test-only builds (never in a run's kernels): P2P_SELFTEST adds the stress test's support
// kernels (comm/p2p/stress.rs); P2P_JITTER pauses a rank now and then between a wait and its
// reads (`jitter`), the same protocol with wider races; P2P_FAULT=1 releases the copy-in flag
// before the copy-in, P2P_FAULT=2 uses one staging half for every call: the negative controls
// the stress test must catch (with the pauses).
//
// No NVLink multicast (multimem / NVLS) anywhere: plain loads and stores through peer mappings.
// No headers: NVRTC compiles this without the CUDA include folder (conversions in inline PTX).

#define MAXR 8          // most ranks
#define MAXB 64         // most blocks per call (flag slots per round)
#define THREADS 512     // threads per block
#define ROUNDS 3        // flag rounds: 0 copy-in, 1 two-shot all-gather, 2 barrier
#define POLLER 32       // the thread of a block that polls the stop word (lane 0 of warp 1)
#define POLL_NS 20000   // how often it polls while the block waits, ns of %globaltimer
#define PROBE_WORDS 63  // data words of one access probe (after its flag word)

// Workspace layout (bytes from the base). FLAGS: u64 [ROUNDS][MAXB][MAXR]; EPOCHS: u64 [MAXB];
// ERRORS: u32 [6] (code, epoch bits 0-31, block, epoch bits 32-63, and on a timeout the calls the
// silent peer's block had entered, bits 0-31 and 32-63); PROBES: [MAXR] slots of 64
// u32 (a flag and PROBE_WORDS words), slot s written by rank s's access check at connect; DATA:
// two staging halves of `capacity` bytes; RESULT: one buffer of `capacity` bytes (two-shot's
// reduced partitions).
#define FLAGS_OFF 0
#define EPOCHS_OFF 12288
#define ERRORS_OFF 12800
#define PROBES_OFF 13312
#define DATA_OFF 16384

#ifndef P2P_FAULT
#define P2P_FAULT 0     // 0: the real kernels (see the top of this file for the others)
#endif

#define ERR_TIMEOUT 0x80000000u
#define ERR_STOPPED 0x40000000u

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;

// What every call of a rank needs: the workspaces of all ranks as this rank addresses them.
struct Peers {
    u64 base[MAXR];
    u64 capacity;    // bytes of one staging half (a multiple of 256)
    u64 timeout_ns;  // bound of every wait
    u32 rank;
    u32 nranks;
    u64 stop;        // device address of the host's stop word (pinned, mapped), 0 for none
};

// ---- memory-model primitives ------------------------------------------------------------------

__device__ __forceinline__ void st_release_sys(u64* p, u64 v)
{
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ u64 ld_acquire_sys(const u64* p)
{
    u64 v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void st_release_sys32(u32* p, u32 v)
{
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ u32 ld_acquire_sys32(const u32* p)
{
    u32 v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ u32 ld_volatile(const u32* p)
{
    u32 v;
    asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ u64 ld_volatile64(const u64* p)
{
    u64 v;
    asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

// Sleeps about `ns` nanoseconds (sm_70 and newer): the poller's pause between clock reads.
__device__ __forceinline__ void sleep_ns(u32 ns)
{
    asm volatile("nanosleep.u32 %0;" ::"r"(ns));
}

__device__ __forceinline__ u64 globaltimer()
{
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Whether the host raised the stop word (see the top of this file).
__device__ __forceinline__ bool host_stopped(const Peers& a)
{
    return a.stop != 0ull && ld_acquire_sys32((const u32*)a.stop) != 0u;
}

// Records `kind` (ERR_TIMEOUT, ERR_STOPPED) for `round` and `peer` in the error words, unless an
// error is there already (the first failure wins).
__device__ __forceinline__ void record_error(u32* err, u32 kind, int round, u32 peer, u64 epoch, u64 seen)
{
    if (atomicCAS(err, 0u, kind | ((u32)round << 8) | peer) == 0u) {
        err[1] = (u32)epoch;
        err[2] = blockIdx.x;
        err[3] = (u32)(epoch >> 32);
        err[4] = (u32)seen;
        err[5] = (u32)(seen >> 32);
        __threadfence_system();
    }
}

// ---- element types (accumulation in f32) ------------------------------------------------------

__device__ __forceinline__ float bf16_to_f(u32 h) { return __uint_as_float(h << 16); }

__device__ __forceinline__ u32 f_to_bf16(float f)
{
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                // round to nearest even
    return u >> 16;
}

__device__ __forceinline__ float f16_to_f(u32 h)
{
    float f;
    u16 x = (u16)h;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
    return f;
}

__device__ __forceinline__ u32 f_to_f16(float f)
{
    u16 x;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(x) : "f"(f));
    return (u32)x;
}

// One element type: size, 16-byte vector <-> 8 or 4 floats, one element <-> float.
struct Bf16 {
    enum { SIZE = 2, PER = 8 };
    __device__ static void add(float* acc, uint4 v)
    {
        u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            acc[2 * k] += bf16_to_f(w[k] & 0xffffu);
            acc[2 * k + 1] += bf16_to_f(w[k] >> 16);
        }
    }
    __device__ static uint4 pack(const float* acc)
    {
        u32 w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) w[k] = f_to_bf16(acc[2 * k]) | (f_to_bf16(acc[2 * k + 1]) << 16);
        return make_uint4(w[0], w[1], w[2], w[3]);
    }
    __device__ static float one(u32 bits) { return bf16_to_f(bits); }
    __device__ static u32 bits(float f) { return f_to_bf16(f); }
};

struct F16 {
    enum { SIZE = 2, PER = 8 };
    __device__ static void add(float* acc, uint4 v)
    {
        u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            acc[2 * k] += f16_to_f(w[k] & 0xffffu);
            acc[2 * k + 1] += f16_to_f(w[k] >> 16);
        }
    }
    __device__ static uint4 pack(const float* acc)
    {
        u32 w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) w[k] = f_to_f16(acc[2 * k]) | (f_to_f16(acc[2 * k + 1]) << 16);
        return make_uint4(w[0], w[1], w[2], w[3]);
    }
    __device__ static float one(u32 bits) { return f16_to_f(bits); }
    __device__ static u32 bits(float f) { return f_to_f16(f); }
};

struct F32 {
    enum { SIZE = 4, PER = 4 };
    __device__ static void add(float* acc, uint4 v)
    {
        acc[0] += __uint_as_float(v.x);
        acc[1] += __uint_as_float(v.y);
        acc[2] += __uint_as_float(v.z);
        acc[3] += __uint_as_float(v.w);
    }
    __device__ static uint4 pack(const float* acc)
    {
        return make_uint4(__float_as_uint(acc[0]), __float_as_uint(acc[1]), __float_as_uint(acc[2]),
                          __float_as_uint(acc[3]));
    }
    __device__ static float one(u32 bits) { return __uint_as_float(bits); }
    __device__ static u32 bits(float f) { return __float_as_uint(f); }
};

// ---- caller buffers: 16-byte vectors when the pointer allows, elements otherwise --------------

template <int SIZE>
__device__ __forceinline__ uint4 load_vec(const char* p, u64 i, bool aligned)
{
    if (aligned) return ((const uint4*)p)[i];
    const char* q = p + i * 16;
    if (SIZE == 4) {
        const u32* e = (const u32*)q;
        return make_uint4(e[0], e[1], e[2], e[3]);
    }
    const u16* e = (const u16*)q;
    return make_uint4(e[0] | ((u32)e[1] << 16), e[2] | ((u32)e[3] << 16), e[4] | ((u32)e[5] << 16),
                      e[6] | ((u32)e[7] << 16));
}

template <int SIZE>
__device__ __forceinline__ void store_vec(char* p, u64 i, uint4 v, bool aligned)
{
    if (aligned) {
        ((uint4*)p)[i] = v;
        return;
    }
    char* q = p + i * 16;
    if (SIZE == 4) {
        u32* e = (u32*)q;
        e[0] = v.x; e[1] = v.y; e[2] = v.z; e[3] = v.w;
        return;
    }
    u16* e = (u16*)q;
    u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        e[2 * k] = (u16)(w[k] & 0xffffu);
        e[2 * k + 1] = (u16)(w[k] >> 16);
    }
}

template <int SIZE>
__device__ __forceinline__ u32 load_elem(const char* p, u64 i)
{
    return SIZE == 4 ? ((const u32*)p)[i] : (u32)((const u16*)p)[i];
}

template <int SIZE>
__device__ __forceinline__ u32 load_elem_cg(const char* p, u64 i)
{
    return SIZE == 4 ? __ldcg((const u32*)p + i) : (u32)__ldcg((const u16*)p + i);
}

template <int SIZE>
__device__ __forceinline__ void store_elem(char* p, u64 i, u32 bits)
{
    if (SIZE == 4) ((u32*)p)[i] = bits;
    else ((u16*)p)[i] = (u16)bits;
}

// ---- workspace access -------------------------------------------------------------------------

__device__ __forceinline__ u64* flag_slot(u64 base, int round, int block, int src)
{
    return (u64*)(base + FLAGS_OFF) + ((round * MAXB + block) * MAXR + src);
}

__device__ __forceinline__ char* staging(const Peers& a, int rank, u64 epoch)
{
#if P2P_FAULT == 2
    epoch = 0;  // negative control: one staging half for every call
#endif
    return (char*)(a.base[rank] + DATA_OFF + (epoch & 1ull) * a.capacity);
}

__device__ __forceinline__ char* result(const Peers& a, int rank)
{
    return (char*)(a.base[rank] + DATA_OFF + 2 * a.capacity);
}

// Start of a call: this block's epoch (all counters advance in lock-step) and whether the
// workspace already holds an error (then every thread returns false).
__device__ __forceinline__ bool begin(const Peers& a, u64* epoch_out)
{
    __shared__ u64 s_epoch;
    __shared__ int s_dead;
    u64 mine = a.base[a.rank];
    if (threadIdx.x == 0) {
        u64* ep = (u64*)(mine + EPOCHS_OFF);
        u64 e = ld_volatile64(ep + blockIdx.x) + 1ull;
        for (u32 j = blockIdx.x; j < MAXB; j += gridDim.x) ep[j] = e;
        s_epoch = e;
        s_dead = ld_volatile((u32*)(mine + ERRORS_OFF)) != 0u;
    }
    __syncthreads();
    *epoch_out = s_epoch;
    return !s_dead;
}

// The poller of `exchange` (thread POLLER): while any waiter of the block still waits, every
// POLL_NS of elapsed time it reads the workspace's error words (another block gave up already)
// and the host's stop word (the run failed elsewhere: ERR_STOPPED recorded), and ends the
// block's waits through `fail`. It reads only shared memory and the clock until the first
// POLL_NS have passed, and never sleeps before then: the block's closing __syncthreads waits for
// it, so on a call's fast path it must leave as soon as the last waiter has.
__device__ void poll_stop(const Peers& a, u32* err, int round, u64 epoch, int* left, int* fail)
{
    const u64 start = globaltimer();
    u64 next = start + POLL_NS;
    while (*(volatile int*)left > 0) {
        const u64 now = globaltimer();
        if (now - start > POLL_NS) sleep_ns(500);  // a slow wait: leave the issue slots to others
        if (now < next) continue;
        next = now + POLL_NS;
        if (ld_volatile(err) != 0u) {
            *(volatile int*)fail = 1;
        } else if (host_stopped(a)) {
            record_error(err, ERR_STOPPED, round, 0xffu, epoch, 0ull);
            *(volatile int*)fail = 1;
        }
    }
}

// Signal every peer for (round, this block, epoch): one thread per peer.
__device__ __forceinline__ void signal(const Peers& a, int round, u64 epoch)
{
    const int t = threadIdx.x;
    if (t < (int)a.nranks && t != (int)a.rank)
        st_release_sys(flag_slot(a.base[t], round, blockIdx.x, (int)a.rank), epoch);
}

#if P2P_FAULT != 0 || defined(P2P_JITTER)
// Test builds only (the stress test's, never a run's): after a wait, on about one call in four
// per rank and round, every block of the rank pauses up to 16 us before its reads, the same
// pause in every block (a hash of epoch, rank and round). A peer that is done with the call
// races into its next one while this rank still reads: the window a buffer reused too early
// (P2P_FAULT=2) needs to show wrong data.
__device__ __forceinline__ void jitter(const Peers& a, int round, u64 epoch)
{
    u64 h = epoch * 0x9e3779b97f4a7c15ull ^ (u64)(a.rank + 1u) * 0xbf58476d1ce4e5b9ull ^ (u64)round;
    h ^= h >> 31;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 29;
    if ((h & 3ull) != 0ull) return;
    const u64 ns = (h >> 8) % 16000ull, t0 = globaltimer();
    while (globaltimer() - t0 < ns) {
    }
}
#endif

// Signal every peer for (round, this block, epoch), then wait for every peer's signal. Returns
// false (in every thread) when a wait timed out, another block already recorded an error, or the
// host raised the stop word. Needs at least POLLER + 1 threads per block.
__device__ bool exchange(const Peers& a, int round, u64 epoch)
{
    __shared__ int s_fail;
    __shared__ int s_left;  // waiters still waiting
    const int t = threadIdx.x;
    const int n = (int)a.nranks, me = (int)a.rank;
    u64 mine = a.base[me];
    u32* err = (u32*)(mine + ERRORS_OFF);
    if (t == 0) {
        s_fail = 0;
        s_left = n - 1;
    }
    __syncthreads();  // every data write of this block precedes the releases below
    signal(a, round, epoch);
    if (t < n && t != me) {
        const u64* slot = flag_slot(mine, round, blockIdx.x, t);
        const u64 t0 = globaltimer();
        while (ld_acquire_sys(slot) < epoch) {
            if (*(volatile int*)&s_fail) break;
            if (globaltimer() - t0 > a.timeout_ns) {
                // what the silent peer had reached: the calls its block of this index had
                // entered (read through the mapping): fewer than `epoch` means its kernel of
                // this call never started, as many means it waits inside the call too
                u64 seen = ld_volatile64((const u64*)(a.base[t] + EPOCHS_OFF) + blockIdx.x);
                record_error(err, ERR_TIMEOUT, round, (u32)t, epoch, seen);
                *(volatile int*)&s_fail = 1;
                break;
            }
        }
        atomicSub(&s_left, 1);
    } else if (t == POLLER) {
        poll_stop(a, err, round, epoch, &s_left, &s_fail);
    }
    __syncthreads();  // the acquires above precede every data read of this block
#if P2P_FAULT != 0 || defined(P2P_JITTER)
    if (s_fail == 0) jitter(a, round, epoch);
#endif
    return s_fail == 0;
}

// ---- the partition every rank computes alike ---------------------------------------------------

struct Range {
    u64 lo, hi;
};

__device__ __forceinline__ u64 div_up(u64 a, u64 b) { return (a + b - 1) / b; }

// Vectors [lo, hi) of partition p (of `parts`) that block b (of G) handles, over nvec vectors.
__device__ __forceinline__ Range block_range(u64 nvec, u32 parts, u32 p, u32 b, u32 G)
{
    u64 per = div_up(nvec, parts);
    u64 plo = (u64)p * per, phi = plo + per < nvec ? plo + per : nvec;
    u64 chunk = div_up(per, G);
    u64 lo = plo + (u64)b * chunk, hi = lo + chunk;
    if (hi > phi) hi = phi;
    if (lo > hi) lo = hi;
    Range r = {lo, hi};
    return r;
}

// Sums vector i over the staging buffers of ranks 0..n-1, in that order.
template <class D>
__device__ __forceinline__ uint4 sum_vec(const Peers& a, u64 epoch, u64 i)
{
    float acc[D::PER];
#pragma unroll
    for (int k = 0; k < D::PER; ++k) acc[k] = 0.f;
    for (u32 p = 0; p < a.nranks; ++p) D::add(acc, __ldcg((const uint4*)staging(a, p, epoch) + i));
    return D::pack(acc);
}

// The element tail (count not a multiple of the vector) is copied in by the last block and
// summed one-shot style by the same block on every rank.
template <class D>
__device__ __forceinline__ void tail_in(const Peers& a, u64 epoch, const char* in, u64 first, u64 count)
{
    if (blockIdx.x != gridDim.x - 1) return;
    char* st = staging(a, a.rank, epoch);
    for (u64 i = first + threadIdx.x; i < count; i += blockDim.x)
        store_elem<D::SIZE>(st, i, load_elem<D::SIZE>(in, i));
}

template <class D>
__device__ __forceinline__ void tail_sum(const Peers& a, u64 epoch, char* out, u64 first, u64 count)
{
    if (blockIdx.x != gridDim.x - 1) return;
    for (u64 i = first + threadIdx.x; i < count; i += blockDim.x) {
        float acc = 0.f;
        for (u32 p = 0; p < a.nranks; ++p) acc += D::one(load_elem_cg<D::SIZE>(staging(a, p, epoch), i));
        store_elem<D::SIZE>(out, i, D::bits(acc));
    }
}

// ---- the implementations ----------------------------------------------------------------------

template <class D>
__device__ void oneshot(const Peers& a, const char* in, char* out, u64 count)
{
    u64 epoch;
    if (!begin(a, &epoch)) return;
#if P2P_FAULT == 1
    signal(a, 0, epoch);  // negative control: the copy-in flag released before the copy-in
#endif
    const bool aligned = (((u64)in | (u64)out) & 15u) == 0;
    const u64 nvec = count / D::PER, first_tail = nvec * D::PER;
    Range r = block_range(nvec, 1, 0, blockIdx.x, gridDim.x);
    uint4* st = (uint4*)staging(a, a.rank, epoch);
    for (u64 i = r.lo + threadIdx.x; i < r.hi; i += blockDim.x) st[i] = load_vec<D::SIZE>(in, i, aligned);
    tail_in<D>(a, epoch, in, first_tail, count);
    if (!exchange(a, 0, epoch)) return;
    for (u64 i = r.lo + threadIdx.x; i < r.hi; i += blockDim.x)
        store_vec<D::SIZE>(out, i, sum_vec<D>(a, epoch, i), aligned);
    tail_sum<D>(a, epoch, out, first_tail, count);
}

template <class D>
__device__ void twoshot(const Peers& a, const char* in, char* out, u64 count)
{
    u64 epoch;
    if (!begin(a, &epoch)) return;
#if P2P_FAULT == 1
    signal(a, 0, epoch);  // negative control: the copy-in flag released before the copy-in
#endif
    const bool aligned = (((u64)in | (u64)out) & 15u) == 0;
    const u64 nvec = count / D::PER, first_tail = nvec * D::PER;
    const u32 n = a.nranks, me = a.rank;
    uint4* st = (uint4*)staging(a, me, epoch);
    // copy in this block's chunk of every partition
    for (u32 p = 0; p < n; ++p) {
        Range r = block_range(nvec, n, p, blockIdx.x, gridDim.x);
        for (u64 i = r.lo + threadIdx.x; i < r.hi; i += blockDim.x) st[i] = load_vec<D::SIZE>(in, i, aligned);
    }
    tail_in<D>(a, epoch, in, first_tail, count);
    if (!exchange(a, 0, epoch)) return;
    // reduce-scatter: this rank's partition, from every rank's staging, into its result buffer
    Range mine = block_range(nvec, n, me, blockIdx.x, gridDim.x);
    uint4* res = (uint4*)result(a, me);
    for (u64 i = mine.lo + threadIdx.x; i < mine.hi; i += blockDim.x) {
        uint4 v = sum_vec<D>(a, epoch, i);
        res[i] = v;
        store_vec<D::SIZE>(out, i, v, aligned);
    }
    tail_sum<D>(a, epoch, out, first_tail, count);
    if (!exchange(a, 1, epoch)) return;
    // all-gather: partition p from rank p's result buffer
    for (u32 p = 0; p < n; ++p) {
        if (p == me) continue;
        Range r = block_range(nvec, n, p, blockIdx.x, gridDim.x);
        const uint4* src = (const uint4*)result(a, p);
        for (u64 i = r.lo + threadIdx.x; i < r.hi; i += blockDim.x)
            store_vec<D::SIZE>(out, i, __ldcg(src + i), aligned);
    }
}

#define ENTRY(NAME, IMPL, TYPE)                                                                   \
    extern "C" __global__ void __launch_bounds__(THREADS)                                        \
    NAME(Peers a, const char* in, char* out, u64 count)                                          \
    {                                                                                            \
        IMPL<TYPE>(a, in, out, count);                                                           \
    }
ENTRY(oneshot_bf16, oneshot, Bf16)
ENTRY(oneshot_f16, oneshot, F16)
ENTRY(oneshot_f32, oneshot, F32)
ENTRY(twoshot_bf16, twoshot, Bf16)
ENTRY(twoshot_f16, twoshot, F16)
ENTRY(twoshot_f32, twoshot, F32)

// Every rank waits until every other rank has reached the same call (one block of 64 threads,
// no data): the end-of-job barrier before a workspace is freed, and a start line for timing.
extern "C" __global__ void __launch_bounds__(THREADS) p2p_barrier(Peers a)
{
    u64 epoch;
    if (!begin(a, &epoch)) return;
    exchange(a, 2, epoch);
}

// ---- the access check of one ordered pair (comm/p2p/access.rs) -------------------------------

__device__ __forceinline__ u32 probe_word(u32 token, u32 i)
{
    return (token * 2654435761u) ^ (i * 0x9e3779b9u) ^ (i << 24);
}

// One block of 64 threads. Writes PROBE_WORDS words through this GPU's mapping of a peer's
// memory at `peer` (a flag word, then the words), releases the flag (`token`, never 0) after
// them, waits at most timeout_ns to read the flag back through the mapping, then reads the words
// back. out[0]: words that read back wrong; out[1]: 1 when the flag read back, 2 when it never
// did (the write or the read was dropped). Where the platform drops or redirects peer traffic
// (IOMMU translation, ACS redirect) the driver still reports peer access; this is what sees it.
extern "C" __global__ void __launch_bounds__(THREADS) p2p_probe(u64 peer, u32* out, u32 token, u64 timeout_ns)
{
    __shared__ u32 s_wrong;
    __shared__ int s_seen;
    u32* flag = (u32*)peer;
    u32* data = flag + 1;
    const u32 t = threadIdx.x;
    if (t == 0) {
        s_wrong = 0;
        s_seen = 0;
    }
    for (u32 i = t; i < PROBE_WORDS; i += blockDim.x) data[i] = probe_word(token, i);
    __syncthreads();  // every data write precedes the release below
    if (t == 0) {
        st_release_sys32(flag, token);
        const u64 t0 = globaltimer();
        while (true) {
            if (ld_acquire_sys32(flag) == token) {
                s_seen = 1;
                break;
            }
            if (globaltimer() - t0 > timeout_ns) break;
        }
    }
    __syncthreads();
    if (s_seen) {
        u32 wrong = 0;
        for (u32 i = t; i < PROBE_WORDS; i += blockDim.x) wrong += ld_volatile(data + i) != probe_word(token, i);
        if (wrong) atomicAdd(&s_wrong, wrong);
    }
    __syncthreads();
    if (t == 0) {
        out[0] = s_wrong;
        out[1] = s_seen ? 1u : 2u;
        __threadfence_system();
    }
}

#ifdef P2P_SELFTEST
// ---- the stress test's support kernels (comm/p2p/stress.rs), compiled only for selftest ------
//
// Each virtual rank's stream runs batches of calls: a fill per call (its input of salt
// ctr[0] + j, its output poisoned), per call a delay then the all-reduce (or the barrier), a
// check per call that counts the elements differing from the exact sum into device counters,
// then ctr[0] += calls. The salt lives on the device, so a CUDA graph's replays get new inputs.

#define PATTERN_SLOTS 3  // measure/pattern.rs SLOTS

// measure/pattern.rs `offset(i, op)`: (i + the (i % 7)-th base-7 digit of the index (0 at
// position 6) + the slot) % 7, for the salt op = index * PATTERN_SLOTS + slot.
__device__ __forceinline__ u32 pattern_offset(u64 i, u64 op)
{
    const u64 index = op / PATTERN_SLOTS, slot = op % PATTERN_SLOTS;
    const u32 k = (u32)(i % 7ull);
    u64 digit = 0;
    if (k < 6) {
        u64 p = 1;
        for (u32 j = 0; j < k; ++j) p *= 7ull;
        digit = (index / p) % 7ull;
    }
    return (u32)((i + digit + slot) % 7ull);
}

// Rank `rank`'s input of salt ctr[0] + j (measure/pattern.rs up to 16 ranks: rank + 1 + the
// offset) into `in`; `out`, when it is another buffer, poisoned (NaN in every dtype), so that an
// element the all-reduce never writes counts as wrong.
template <class D>
__device__ void stress_fill_t(char* in, char* out, u64 count, u32 rank, const u64* ctr, u32 j)
{
    const u64 op = ld_volatile64(ctr) + j;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        store_elem<D::SIZE>(in, i, D::bits((float)(rank + 1u + pattern_offset(i, op))));
        if (out != in) store_elem<D::SIZE>(out, i, 0xffffffffu);
    }
}

// Counts the elements of `out` that differ from the exact sum over `nranks` ranks of salt
// ctr[0] + j: counts[0] += wrong elements, counts[1] += count (elements checked); the first wrong
// element any check saw: counts[2] = its salt + 1, counts[3] = its index, counts[4] = its bits.
template <class D>
__device__ void stress_check_t(const char* out, u64 count, u32 nranks, const u64* ctr, u32 j, u64* counts)
{
    __shared__ u32 s_wrong;
    if (threadIdx.x == 0) s_wrong = 0;
    __syncthreads();
    const u64 op = ld_volatile64(ctr) + j;
    const u32 base = nranks * (nranks + 1u) / 2u;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u32 wrong = 0;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        const u32 bits = load_elem<D::SIZE>(out, i);
        const float want = (float)(base + nranks * pattern_offset(i, op));
        if (!(D::one(bits) == want)) {
            ++wrong;
            if (atomicCAS(&counts[2], 0ull, op + 1ull) == 0ull) {
                counts[3] = i;
                counts[4] = bits;
            }
        }
    }
    if (wrong) atomicAdd(&s_wrong, wrong);
    __syncthreads();
    if (threadIdx.x == 0) {
        if (s_wrong) atomicAdd(&counts[0], (u64)s_wrong);
        if (blockIdx.x == 0) atomicAdd(&counts[1], count);
    }
}

#define STRESS(TYPE, NAME)                                                                       \
    extern "C" __global__ void __launch_bounds__(THREADS)                                        \
    stress_fill_##NAME(char* in, char* out, u64 count, u32 rank, const u64* ctr, u32 j)          \
    {                                                                                            \
        stress_fill_t<TYPE>(in, out, count, rank, ctr, j);                                       \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(THREADS)                                        \
    stress_check_##NAME(const char* out, u64 count, u32 nranks, const u64* ctr, u32 j, u64* counts) \
    {                                                                                            \
        stress_check_t<TYPE>(out, count, nranks, ctr, j, counts);                                \
    }
STRESS(Bf16, bf16)
STRESS(F16, f16)
STRESS(F32, f32)

// Spins about `ns` nanoseconds (launch one thread): a rank's random delay before a call.
extern "C" __global__ void stress_delay(u64 ns)
{
    const u64 t0 = globaltimer();
    while (globaltimer() - t0 < ns) sleep_ns(100);
}

// ctr[0] += calls (launch one thread): the salts of the next batch.
extern "C" __global__ void stress_advance(u64* ctr, u32 calls)
{
    ctr[0] += calls;
}
#endif  // P2P_SELFTEST
