//! The 64-byte block classification under the event scan: which bytes of a block are quotes,
//! backslashes, brackets, braces and the first letters the decision looks for, as bit masks
//! (SSE2 vector compares on x86-64, word operations elsewhere), and the stops read off them.

/// The positions in `b` of every `"`, `\\`, `{`, `[`, `}` and `]`, in order: each 64-byte block
/// is classified at once ([`classify`]) into a bit mask whose set bits are then read off one by
/// one (the scanner jumps from one to the next).
pub(super) struct Stops<'a> {
    b: &'a [u8],
    /// Offset of the block `mask` describes.
    base: usize,
    mask: u64,
}

impl<'a> Stops<'a> {
    pub(super) fn new(b: &'a [u8]) -> Self {
        Stops {
            b,
            base: 0,
            mask: block_mask(b),
        }
    }
}

impl Iterator for Stops<'_> {
    type Item = usize;

    #[inline(always)]
    fn next(&mut self) -> Option<usize> {
        while self.mask == 0 {
            self.base += 64;
            if self.base >= self.b.len() {
                return None;
            }
            self.mask = block_mask(&self.b[self.base..]);
        }
        let p = self.base + self.mask.trailing_zeros() as usize;
        self.mask &= self.mask - 1;
        Some(p)
    }
}

/// Bit `k` set when byte `k` of the first 64 of `b` (fewer at its end) is `"`, `\\`, a bracket
/// or a brace.
#[inline(always)]
fn block_mask(b: &[u8]) -> u64 {
    let m = classify(b, 0);
    m.quote | m.backslash | m.open | m.close
}

/// The masks of one 64-byte block (bit `k` for byte `k`; bytes past the buffer's end match
/// nothing).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Masks {
    pub(super) quote: u64,
    pub(super) backslash: u64,
    /// `{` and `[`.
    pub(super) open: u64,
    /// `}` and `]`.
    pub(super) close: u64,
    /// The first letters of the strings the decision looks at: `c`/`C` (`cat`, `Collective
    /// name`), `r`/`R` (`record_param_comms`) and the step label's first byte.
    pub(super) first: u64,
}

/// The 64 bytes at the start of `b`: `b` itself, or near its end a copy in `tail`, zero-padded
/// (zero bytes match nothing the masks look for).
#[inline(always)]
pub(super) fn block64<'a>(b: &'a [u8], tail: &'a mut [u8; 64]) -> &'a [u8] {
    match b.get(..64) {
        Some(blk) => blk,
        None => {
            tail[..b.len()].copy_from_slice(b);
            tail
        }
    }
}

/// [`Masks`] of the block at the start of `b`, sixteen bytes per vector compare (SSE2, part of
/// every x86-64 CPU).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn classify(b: &[u8], label0: u8) -> Masks {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
    };
    /// Sixteen copies of `c`, made at compile time: a test build calls every intrinsic, so
    /// `_mm_set1_epi8` in the loop cost a sixth of the block's time there.
    const fn splat(c: u8) -> __m128i {
        // SAFETY: __m128i is 16 plain bytes.
        unsafe { std::mem::transmute::<[u8; 16], __m128i>([c; 16]) }
    }
    const CASE: __m128i = splat(0x20);
    const QUOTE: __m128i = splat(b'"');
    const BACKSLASH: __m128i = splat(b'\\');
    const OPEN: __m128i = splat(b'{');
    const CLOSE: __m128i = splat(b'}');
    const C: __m128i = splat(b'c');
    const R: __m128i = splat(b'r');
    let mut tail = [0u8; 64];
    let blk = block64(b, &mut tail);
    let mut m = Masks::default();
    // SAFETY: these intrinsics need SSE2 only, which every x86-64 target has enabled; each
    // load reads 16 bytes at an offset of at most 48 into `blk`, which holds 64.
    unsafe {
        let label = _mm_set1_epi8(label0 as i8);
        for k in 0..4 {
            let v = _mm_loadu_si128(blk.as_ptr().add(16 * k).cast::<__m128i>());
            // `{`/`[`, `}`/`]`, `c`/`C` and `r`/`R` differ only in bit 5 (0x20).
            let lower = _mm_or_si128(v, CASE);
            let sh = 16 * k;
            m.quote |= (_mm_movemask_epi8(_mm_cmpeq_epi8(v, QUOTE)) as u16 as u64) << sh;
            m.backslash |= (_mm_movemask_epi8(_mm_cmpeq_epi8(v, BACKSLASH)) as u16 as u64) << sh;
            m.open |= (_mm_movemask_epi8(_mm_cmpeq_epi8(lower, OPEN)) as u16 as u64) << sh;
            m.close |= (_mm_movemask_epi8(_mm_cmpeq_epi8(lower, CLOSE)) as u16 as u64) << sh;
            let first = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(lower, C), _mm_cmpeq_epi8(lower, R)),
                _mm_cmpeq_epi8(v, label),
            );
            m.first |= (_mm_movemask_epi8(first) as u16 as u64) << sh;
        }
    }
    m
}

/// [`Masks`] of the block at the start of `b`, eight bytes per word operation (where SSE2 is
/// not there; on x86-64 the reference of a test).
#[cfg(not(target_arch = "x86_64"))]
pub(super) use classify_words as classify;

#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
#[inline(always)]
pub(super) fn classify_words(b: &[u8], label0: u8) -> Masks {
    const L: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const ONES: u64 = 0x0101_0101_0101_0101;
    // The eight bytes' "equal to c" bits (exact: no borrow between bytes), gathered into one.
    let eq = |x: u64, c: u8| {
        let x = x ^ (ONES * c as u64);
        let z = !((x & L).wrapping_add(L) | x | L);
        (z >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56
    };
    let mut tail = [0u8; 64];
    let blk = block64(b, &mut tail);
    let mut m = Masks::default();
    for (k, w) in blk.chunks_exact(8).enumerate() {
        let w = u64::from_le_bytes(w.try_into().expect("eight bytes"));
        let lower = w | (ONES * 0x20);
        let sh = 8 * k;
        m.quote |= eq(w, b'"') << sh;
        m.backslash |= eq(w, b'\\') << sh;
        m.open |= eq(lower, b'{') << sh;
        m.close |= eq(lower, b'}') << sh;
        m.first |= (eq(lower, b'c') | eq(lower, b'r') | eq(w, label0)) << sh;
    }
    m
}

/// Bit `k` of the result is the parity of the bits `0..=k` of `x`.
#[inline(always)]
pub(super) fn prefix_xor(mut x: u64) -> u64 {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    x
}
