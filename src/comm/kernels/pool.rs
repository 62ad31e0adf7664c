//! The weight pool the streaming kernels read, what it holds, and the host's reference of a
//! streaming pass: which weight each kernel multiplies with which activation lane, and the
//! per-token sums it must produce.

use super::{StreamKernel, PARTIAL_STRIDE};
use crate::comm::{Buffer, Gpu};

/// Elements of the pattern a pool repeats (one upload chunk: 2 MiB of bf16).
const PERIOD: u64 = 1 << 20;

/// What a pool holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fill {
    /// bf16 of varied bits (sign, four binades, every mantissa bit), as trained weights are:
    /// what the replay and `bandwidth` time (the tensor cores draw less power on regular data;
    /// a matrix product on zeros has been seen to run 13% faster than on random data).
    Timing,
    /// small integers 1..=7 ([`Pool::exact_weight`]), so that every f32 sum of the checks is exact.
    Exact,
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

    /// Allocates `bytes` (rounded down to a power of two) of weights of varied bits, for timing.
    pub(crate) fn new(gpu: &Gpu, bytes: u64) -> anyhow::Result<Pool> {
        Pool::with(gpu, bytes, Fill::Timing)
    }

    /// Allocates `bytes` (rounded down to a power of two) of the small integers of
    /// [`Pool::exact_weight`], for the exact checks against [`reference`].
    pub(crate) fn exact(gpu: &Gpu, bytes: u64) -> anyhow::Result<Pool> {
        Pool::with(gpu, bytes, Fill::Exact)
    }

    fn with(gpu: &Gpu, bytes: u64, fill: Fill) -> anyhow::Result<Pool> {
        let v = (bytes / 16).max(1);
        let vecs = 1u64 << (63 - v.leading_zeros());
        let buf = gpu.alloc((vecs * 16) as usize)?;
        let chunk: Vec<u8> = (0..PERIOD)
            .flat_map(|e| match fill {
                Fill::Timing => timing_bits(e).to_le_bytes(),
                Fill::Exact => half::bf16::from_f32(Pool::exact_weight(e)).to_le_bytes(),
            })
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

    /// The bf16 weight at element `e` of a pool made by [`Pool::exact`]: 1..=7, varying within
    /// a vector and from one vector to the next (vector v holds `(j + 11v) % 7 + 1 = (j + 4v) % 7 + 1`
    /// at element j, within a period of 2^20 elements), so that a vector read twice or in the wrong place
    /// changes the sums.
    pub(crate) fn exact_weight(e: u64) -> f32 {
        let e = e % PERIOD;
        ((e + 3 * (e / 8)) % 7 + 1) as f32
    }
}

/// The bits of the timing pool's element `e`: a xorshift of `e`, kept to a finite bf16 of
/// magnitude in [1/8, 2) (exponent 124..=127, any sign and mantissa).
fn timing_bits(e: u64) -> u16 {
    let mut x = (e as u32).wrapping_mul(0x9e37_79b9) ^ 0x5bd1_e995;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    let sign = (x >> 31) as u16;
    let exp = 124 + ((x >> 7) & 3) as u16;
    let mant = (x & 0x7f) as u16;
    (sign << 15) | (exp << 7) | mant
}

/// The activation lane (0..8) that `kernel` multiplies element `j` (0..8) of the operation's
/// vector `i` (counted from the operation's start) with: lane j on the CUDA cores; on the tensor
/// cores k % 8 of the mma B fragment the element lands in, `2 (i % 4) + j % 2`
/// (`kernels/stream_mma.cu` explains it).
pub(crate) fn lane_of(kernel: StreamKernel, i: u64, j: u64) -> usize {
    match kernel {
        StreamKernel::CudaCores => j as usize,
        StreamKernel::TensorCores => (2 * (i % 4) + j % 2) as usize,
    }
}

/// The exact per-token sums of one streaming pass of `kernel` over `nvec` vectors of an
/// [`Pool::exact`] pool of `pool_vecs` vectors from vector `start` (wrapping), against `tokens`
/// activation rows `act` (tokens x 8): the sum over every weight of weight x the activation of
/// its lane ([`lane_of`]). The weights are first summed per lane (exact in f64: integers), so
/// that the cost is that of one pass over the weights whatever the token count.
pub(crate) fn reference(
    kernel: StreamKernel,
    pool_vecs: u64,
    start: u64,
    nvec: u64,
    act: &[f32],
    tokens: usize,
) -> Vec<f64> {
    let mut lane = [0f64; 8];
    let mask = pool_vecs - 1;
    for i in 0..nvec {
        let v = (start + i) & mask;
        for j in 0..8u64 {
            lane[lane_of(kernel, i, j)] += Pool::exact_weight(v * 8 + j) as f64;
        }
    }
    (0..tokens)
        .map(|t| (0..8).map(|c| lane[c] * act[t * 8 + c] as f64).sum())
        .collect()
}

/// Sums the per-block partials of a launch over `blocks` blocks (PARTIAL_STRIDE floats each).
pub(crate) fn sum_partials(bytes: &[u8], blocks: usize, tokens: usize) -> Vec<f64> {
    let f = |i: usize| f32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap()) as f64;
    (0..tokens)
        .map(|t| (0..blocks).map(|b| f(b * PARTIAL_STRIDE + t)).sum())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_weights_vary_within_and_across_vectors() {
        // element e = 8v + j holds (e + 3v) % 7 + 1 = (j + 11v) % 7 + 1: vector 0 is
        // 1 2 3 4 5 6 7 1, vector 1 (j + 11) % 7 + 1 = (j + 4) % 7 + 1: 5 6 7 1 2 3 4 5
        let v = |v: u64| {
            (0..8)
                .map(|j| Pool::exact_weight(v * 8 + j))
                .collect::<Vec<_>>()
        };
        assert_eq!(v(0), [1., 2., 3., 4., 5., 6., 7., 1.]);
        assert_eq!(v(1), [5., 6., 7., 1., 2., 3., 4., 5.]);
        // periodic in 2^20 elements (the upload chunk)
        assert_eq!(Pool::exact_weight(PERIOD + 9), Pool::exact_weight(9));
    }

    #[test]
    fn timing_weights_are_finite_and_varied() {
        let mut signs = [0; 2];
        let mut exps = std::collections::BTreeSet::new();
        let mut mant_bits = 0u16;
        for e in 0..4096 {
            let b = timing_bits(e);
            let x = half::bf16::from_bits(b).to_f32();
            assert!(x.is_finite() && (0.125..2.0).contains(&x.abs()), "{e}: {x}");
            signs[(b >> 15) as usize] += 1;
            exps.insert((b >> 7) & 0xff);
            mant_bits |= b & 0x7f;
        }
        assert!(signs[0] > 1500 && signs[1] > 1500, "{signs:?}");
        assert_eq!(exps.len(), 4);
        assert_eq!(mant_bits, 0x7f);
    }

    #[test]
    fn reference_of_one_vector() {
        // vector 0 holds 1 2 3 4 5 6 7 1 (sum 29). CUDA cores: token 0 all ones -> 29, token 1
        // all twos -> 58. Tensor cores, i = 0: lane 2*0 + j%2, so the odd-j weights 2+4+6+1 = 13
        // meet lane 1 and the even-j ones 1+3+5+7 = 16 lane 0; with lane c holding c + 1:
        // 16 x 1 + 13 x 2 = 42.
        let mut act = vec![1.0f32; 8];
        act.extend(vec![2.0f32; 8]);
        let r = reference(StreamKernel::CudaCores, 1 << 10, 0, 1, &act, 2);
        assert_eq!(r, vec![29.0, 58.0]);
        let lanes: Vec<f32> = (1..=8).map(|c| c as f32).collect();
        let r = reference(StreamKernel::TensorCores, 1 << 10, 0, 1, &lanes, 1);
        assert_eq!(r, vec![42.0]);
        // the op's vector i = 3 of a pool read from start 1021 of 1024 is pool vector 0 (wrap):
        // lanes 6 and 7 -> 16 x 7 + 13 x 8 = 216 (vectors 1021..1023 add to other lanes)
        let r = reference(StreamKernel::TensorCores, 1 << 10, 1021, 4, &lanes, 1);
        let first3: f64 = (0..3u64)
            .flat_map(|i| (0..8).map(move |j| (i, j)))
            .map(|(i, j)| {
                let w = Pool::exact_weight((1021 + i) * 8 + j) as f64;
                w * lanes[lane_of(StreamKernel::TensorCores, i, j)] as f64
            })
            .sum();
        assert_eq!(r, vec![first3 + 216.0]);
    }

    #[test]
    fn sum_of_partials() {
        let mut bytes = vec![0u8; 2 * PARTIAL_STRIDE * 4];
        bytes[0..4].copy_from_slice(&1.5f32.to_le_bytes());
        bytes[PARTIAL_STRIDE * 4..PARTIAL_STRIDE * 4 + 4].copy_from_slice(&2.0f32.to_le_bytes());
        assert_eq!(sum_partials(&bytes, 2, 1), vec![3.5]);
    }

    /// The tensor-core kernel's data flow, emulated from the PTX ISA's fragment tables of
    /// mma.m16n8k16 (bf16): per block its stages, per stage its tiles of 32 vectors, per warp
    /// its token group. Each lane's registers are filled as `stream_mma.cu` fills them, the A
    /// (16 x 16) and B (16 x 8) matrices rebuilt from the lanes by the tables' row and column
    /// rules, D += A B, then the sum over D's columns per token. It must give [`reference`]'s
    /// sums, whose rule (`lane_of`) was worked out by hand from the same tables.
    fn emulate_mma(
        stage_vecs: u64,
        pool_vecs: u64,
        start: u64,
        nvec: u64,
        act: &[f32],
        tokens: usize,
        grid: u64,
    ) -> Vec<f64> {
        let mask = pool_vecs - 1;
        let tiles = tokens.div_ceil(16);
        let groups = super::super::mma_groups(tokens);
        let mw = super::super::mma_width(tokens);
        let x = |n: usize, k: usize| {
            if n < tokens {
                act[n * 8 + k % 8] as f64
            } else {
                0.0
            }
        };
        let mut out = vec![0f64; tokens];
        let stages = nvec.div_ceil(stage_vecs);
        // the groups are blocks: block b takes group b % groups, every (grid / groups)-th stage
        // from b / groups
        let per = groups as u64;
        assert_eq!(grid % per, 0, "the host launches whole groups of blocks");
        for b in 0..grid {
            let mut s = b / per;
            while s < stages {
                for tile in 0..stage_vecs / 32 {
                    // B from the 32 lanes' 16-byte vectors: words 0-1 one fragment, 2-3 another;
                    // fragment element r of lane l: k = 2 (l % 4) + (r & 1) + 8 (r >= 2), n = l / 4
                    let mut bm = [[[0f64; 8]; 16]; 2];
                    for l in 0..32u64 {
                        let i = s * stage_vecs + tile * 32 + l;
                        for j in 0..8u64 {
                            let w = if i < nvec {
                                Pool::exact_weight(((start + i) & mask) * 8 + j) as f64
                            } else {
                                0.0
                            };
                            let (frag, r) = ((j / 4) as usize, j % 4);
                            let k = 2 * (l % 4) + (r & 1) + if r >= 2 { 8 } else { 0 };
                            bm[frag][k as usize][(l / 4) as usize] = w;
                        }
                    }
                    for group in (0..groups).filter(|&g| per == 1 || g as u64 == b % per) {
                        for m in 0..mw {
                            let tile_m = group * mw + m;
                            if tile_m >= tiles {
                                continue;
                            }
                            // A from the lanes: registers {a0 a1, a2 a3, a4 a5, a6 a7} hold
                            // (row g, k 2t+0/1), (row g+8, same), (row g, k 2t+8/9), (row g+8,
                            // same); the kernel passes {r0, r1, r0, r1} with r0 = x(n0, 2t..),
                            // r1 = x(n1, 2t..)
                            let mut am = [[0f64; 16]; 16];
                            for l in 0..32usize {
                                let (g, t) = (l / 4, l % 4);
                                let n0 = tile_m * 16 + g;
                                let regs = [
                                    [x(n0, 2 * t), x(n0, 2 * t + 1)],
                                    [x(n0 + 8, 2 * t), x(n0 + 8, 2 * t + 1)],
                                ];
                                for e in 0..8usize {
                                    let row = g + if (e / 2) % 2 == 1 { 8 } else { 0 };
                                    let col = 2 * t + (e & 1) + if e >= 4 { 8 } else { 0 };
                                    am[row][col] = regs[(e / 2) % 2][e & 1];
                                }
                            }
                            for bf in &bm {
                                for (row, a_row) in am.iter().enumerate() {
                                    let n = tile_m * 16 + row;
                                    let d: f64 = (0..8)
                                        .map(|c| (0..16).map(|k| a_row[k] * bf[k][c]).sum::<f64>())
                                        .sum();
                                    if n < tokens {
                                        out[n] += d;
                                    }
                                }
                            }
                        }
                    }
                }
                s += grid / per;
            }
        }
        out
    }

    #[test]
    fn the_tensor_core_lane_rule_matches_the_fragment_tables() {
        // integer activations that differ per token and lane
        let act: Vec<f32> = (0..512 * 8)
            .map(|i| (1 + (i * 7 + i / 8) % 5) as f32)
            .collect();
        for (tokens, start, nvec, grid) in [
            (1usize, 0u64, 1u64, 1u64),
            (5, 3, 31, 1),
            (16, 1000, 700, 2),
            (17, 7, 1100, 3),
            (33, 4090, 2000, 2),
            (40, 0, 1024, 2),
            // one group of 10 token tiles; two groups of 10 and 9 tiles
            (150, 5, 600, 2),
            (300, 4000, 520, 2),
            // stream_mma_15 in one group, stream_mma_16 in two, stream_mma_16 in one, several
            // stages per block, the pool's wrap
            (240, 9, 2100, 3),
            (496, 4000, 5000, 2),
            (256, 9, 2100, 3),
            (512, 4000, 5000, 2),
            // two groups of blocks, two blocks each
            (500, 77, 5000, 4),
        ] {
            let want = reference(StreamKernel::TensorCores, 4096, start, nvec, &act, tokens);
            // the stages of compute capability 9.0 to 11.x (2048 vectors) and the others' (1024)
            for stage_vecs in [1024, 2048] {
                let got = emulate_mma(stage_vecs, 4096, start, nvec, &act, tokens, grid);
                assert_eq!(
                    got, want,
                    "T={tokens} start={start} nvec={nvec} {stage_vecs}"
                );
            }
        }
    }
}
