//! Exact-result checks: each rank's input is small integers, chosen so that every collective's
//! output is known exactly in bf16, f16 and f32 whatever order the reduction adds in, and any
//! differing element counts as wrong.
//!
//! Why it is exact for every rank count (up to 1024 and beyond) and every dtype: on `n` ranks
//! element `i` of a send buffer is non-zero on at most [`ACTIVE`] = 16 ranks (those with
//! `(rank + i + index) % d == 0`, `d = ceil(n / 16)`, `index` the collective's, see below),
//! where it is the integer `rank / d + 1 + offset(i, op)`, with `offset` in 0..=6, so at most
//! 16 + 6. So every value is a non-negative integer and the values summed into one output element total at most `(1 + ... + 16) + 16 x 6 = 232`.
//! Any partial sum NCCL may form (any subset of ranks, in any grouping: ring segments, tree
//! subtrees, a switch's reduction) is then a non-negative integer of at most 232; bf16 holds
//! every integer up to 256 (8 significant bits), f16 up to 2048, f32 up to 2^24. Every addition
//! is therefore exact, whether done in the element type or in a wider one and rounded, and the
//! result equals the exact sum, which the check computes in f32 (also exact).
//!
//! Up to 16 ranks `d` is 1: every rank contributes to every element, with the same values as
//! before the sparse layout existed. Beyond, each rank contributes to one element in `d`, so a
//! buffer of at least `d` elements checks every rank's data; the offsets move with `op` (the
//! collective's salt), so that one op's output landing in another's buffer is caught.
//!
//! No period, and every slot apart at every element: a salt `op` is a collective's index
//! `op / SLOTS` and its buffer slot `op % SLOTS` ([`salt`]), and
//! `offset(i, op) = (i + digit_k(index) + slot) % 7` with `k = i % 7`, `digit_k` the k-th base-7
//! digit of the index for k < 6 and 0 for k = 6. The ranks that feed element `i` depend on the
//! index only (`(rank + i + index) % d == 0`), not on the slot. So:
//! - the slots of one collective (one index, slots 0, 1, 2) get different values in every
//!   element a rank feeds: the offsets differ by the slot difference, 1 or 2 mod 7. A rank that
//!   reads or writes the buffers of another slot, one or two launches old, sees a different
//!   value in every element, whatever the dtype and the vector width;
//! - two collectives (indices below 7^6 = 117,649) differ in some digit `k`, so every element
//!   `i` with `i % 7 == k` that a rank feeds under both holds different values: two collectives
//!   of one schedule never get the same inputs, however far apart (the former `(i + op) % 7`
//!   repeated every 7 collectives);
//! - two salts of different slots also differ at every element with `i % 7 == 6` (digit 0 for
//!   every index), so no slot of one collective equals a slot of another.
//!
//! A test checks the slots for every index and element offset, and every slot of every
//! collective of every schedule `plan` builds up to 1024 ranks, on every rank's expected output.
use half::{bf16, f16};

use crate::model::collective::ElementSource;
use crate::model::{CollectiveKind, DType};

/// Most ranks whose inputs one output element sums.
pub(crate) const ACTIVE: usize = 16;

/// The stride `d` of the layout on `nranks` ranks: rank `r` contributes to element `i` when
/// `(r + i + op) % d == 0`.
pub(crate) fn stride(nranks: usize) -> usize {
    // `nranks.div_ceil(ACTIVE).max(1)` written out: the host check computes this for every
    // element it checks, where two calls cost more than the arithmetic in a test build
    if nranks <= ACTIVE {
        1
    } else {
        (nranks - 1) / ACTIVE + 1
    }
}

/// Indices (a schedule's operations, a `collective` run's cases) whose inputs all differ: the
/// base-7 digits 0..6 of the index are the value offsets (see the module doc).
pub(crate) const SALTED_INDICES: usize = 7usize.pow(6);

/// Buffer slots of every collective a run checks: launch `j` of a collective runs on slot
/// `j % SLOTS`, each slot with its own send and receive buffers and its own inputs (salt
/// [`salt`]), as nccl-tests moves its buffer offsets every iteration "to catch race conditions"
/// (`startColl`: `shift = totalnbytes * (iter % steps)`, NVIDIA/nccl-tests `src/common.cu`).
/// Data that lands in, or is read from, the buffers of another launch then differs from what
/// this launch expects and counts as wrong, in every element.
///
/// Why 3 and not 2: a stale pointer to the previous launch's buffers (a graph or a registration
/// that kept an old address, NCCL's exchanged peer pointers, the two-shot kernel's one result
/// buffer) is one launch old, which any count from 2 on catches. But the P2P kernels' staging is
/// double-buffered by epoch parity (`kernels/allreduce.cu`): a rank that reads a peer's staging
/// before the peer copied this call's input in reads the input of the launch two before, which
/// with 2 slots ran on the same slot with the same values and would pass. 3 slots divide
/// neither 1 nor 2: data one or two launches old always comes from another slot.
pub(crate) const SLOTS: usize = 3;

/// Salts below this are pairwise different inputs (every index below [`SALTED_INDICES`], every
/// slot).
pub(crate) const DISTINCT_SALTS: usize = SALTED_INDICES * SLOTS;

/// The salt of slot `slot` of the collective at `index` (its operation's index in the schedule,
/// or its case's in a `collective` run): distinct for every (index, slot) with `index` below
/// [`SALTED_INDICES`] and `slot` below [`SLOTS`], and the slots of one index apart at every
/// element (see the module doc).
pub(crate) fn salt(index: usize, slot: usize) -> usize {
    assert!(slot < SLOTS);
    index * SLOTS + slot
}

/// Refuses `indices` operations whose salts would not all be distinct (see [`salt`]).
pub(crate) fn check_salted(indices: usize) -> anyhow::Result<()> {
    if indices > SALTED_INDICES {
        return Err(crate::error::usage(format!(
            "the exact check gives distinct inputs to at most {SALTED_INDICES} operations of one \
             schedule ({SLOTS} buffer slots each), and this one has {indices}: replay a shorter \
             schedule (a schedule file with fewer operations)"
        )));
    }
    Ok(())
}

/// The k-th base-7 digit of `index` for k < 6; 0 for k = 6 (the position the slot alone sets).
fn digit(index: usize, k: usize) -> usize {
    const POW7: [usize; 6] = [1, 7, 49, 343, 2401, 16807];
    if k >= 6 {
        return 0;
    }
    (index / POW7[k]) % 7
}

/// The value offset of element `i` under salt `op`: in 0..=6, `(i + digit + slot) % 7` with
/// the `(i % 7)`-th base-7 digit of the salt's index and its slot.
fn offset(i: usize, op: usize) -> usize {
    let (index, slot) = (op / SLOTS, op % SLOTS);
    (i + digit(index, i % 7) + slot) % 7
}

/// Input value of element `i` on `rank` of `nranks` for the collective with salt `op` (its
/// index in the schedule and its slot, [`salt`]).
pub(crate) fn input_value(rank: usize, i: usize, op: usize, nranks: usize) -> f32 {
    let d = stride(nranks);
    if (rank + i + op / SLOTS) % d != 0 {
        return 0.0;
    }
    ((rank / d + 1) + offset(i, op)) as f32
}

/// The exact sum over all `nranks` ranks of send element `i`. The ranks that contribute are
/// `first, first + d, ..` below `nranks` (`first < d`): `k` of them (at most [`ACTIVE`]), the
/// j-th giving `j + 1 + offset(i, op)`, so the sum is `k (k + 1) / 2 + k offset`, an integer
/// below 2^24 that f32 holds exactly, whatever order the values were added in (the host check
/// computes this for every element it checks).
pub(crate) fn sum_value(i: usize, op: usize, nranks: usize) -> f32 {
    let d = stride(nranks);
    let first = (d - (i + op / SLOTS) % d) % d;
    let k = (nranks - first).div_ceil(d);
    (k * (k + 1) / 2 + k * offset(i, op)) as f32
}

/// Encodes values in `dtype`.
pub(crate) fn encode(dtype: DType, values: impl Iterator<Item = f32>) -> Vec<u8> {
    let mut out = Vec::new();
    for v in values {
        match dtype {
            DType::Bf16 => out.extend_from_slice(&bf16::from_f32(v).to_le_bytes()),
            DType::F16 => out.extend_from_slice(&f16::from_f32(v).to_le_bytes()),
            DType::F32 => out.extend_from_slice(&v.to_le_bytes()),
        }
    }
    out
}

/// Decodes one element.
pub(crate) fn decode(dtype: DType, bytes: &[u8]) -> f32 {
    match dtype {
        DType::Bf16 => bf16::from_le_bytes([bytes[0], bytes[1]]).to_f32(),
        DType::F16 => f16::from_le_bytes([bytes[0], bytes[1]]).to_f32(),
        DType::F32 => f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
    }
}

/// The send buffer of `rank`, encoded.
pub fn send_bytes(
    kind: CollectiveKind,
    dtype: DType,
    count: usize,
    nranks: usize,
    rank: usize,
    op: usize,
) -> Vec<u8> {
    let n = kind.ops().send_elems(count, nranks);
    encode(dtype, (0..n).map(|i| input_value(rank, i, op, nranks)))
}

/// Expected value of receive element `i` on `rank`.
pub(crate) fn expected(
    kind: CollectiveKind,
    count: usize,
    nranks: usize,
    rank: usize,
    i: usize,
    op: usize,
) -> f32 {
    match kind.ops().source(count, nranks, rank, i) {
        ElementSource::Sum { elem } => sum_value(elem, op, nranks),
        ElementSource::Copy { rank, elem } => input_value(rank, elem, op, nranks),
    }
}

/// Number of elements of `recv` (encoded) that differ from the expected output.
pub(crate) fn count_wrong(
    kind: CollectiveKind,
    dtype: DType,
    count: usize,
    nranks: usize,
    rank: usize,
    op: usize,
    recv: &[u8],
) -> u64 {
    let sz = dtype.size() as usize;
    let n = kind.ops().recv_elems(count, nranks);
    (0..n)
        .filter(|&i| {
            let got = decode(dtype, &recv[i * sz..(i + 1) * sz]);
            got != expected(kind, count, nranks, rank, i, op)
        })
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Simulates the collective on the host from every rank's send buffer.
    fn simulate(
        kind: CollectiveKind,
        dtype: DType,
        count: usize,
        n: usize,
        op: usize,
    ) -> Vec<Vec<u8>> {
        let sends: Vec<Vec<f32>> = (0..n)
            .map(|r| {
                (0..kind.ops().send_elems(count, n))
                    .map(|i| input_value(r, i, op, n))
                    .collect()
            })
            .collect();
        (0..n)
            .map(|rank| {
                let vals: Vec<f32> = match kind {
                    CollectiveKind::AllReduce => (0..count)
                        .map(|i| sends.iter().map(|s| s[i]).sum())
                        .collect(),
                    CollectiveKind::AllGather => {
                        sends.iter().flat_map(|s| s.iter().copied()).collect()
                    }
                    CollectiveKind::ReduceScatter => (0..count)
                        .map(|i| sends.iter().map(|s| s[rank * count + i]).sum())
                        .collect(),
                    CollectiveKind::Broadcast => sends[0].clone(),
                    // block p of the output: what rank p put in its block `rank`
                    CollectiveKind::AllToAll => sends
                        .iter()
                        .flat_map(|s| s[rank * count..(rank + 1) * count].iter().copied())
                        .collect(),
                };
                encode(dtype, vals.into_iter())
            })
            .collect()
    }

    #[test]
    fn simulated_collectives_have_no_wrong_elements_up_to_8_ranks() {
        for kind in CollectiveKind::ALL {
            for dtype in [DType::Bf16, DType::F16, DType::F32] {
                for n in [2, 3, 8] {
                    let out = simulate(kind, dtype, 64, n, 5);
                    for (rank, recv) in out.iter().enumerate() {
                        assert_eq!(
                            count_wrong(kind, dtype, 64, n, rank, 5, recv),
                            0,
                            "{kind:?} {dtype:?} {n}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_wrong_or_stale_buffer_is_caught() {
        let mut out = simulate(CollectiveKind::AllReduce, DType::Bf16, 64, 2, 0);
        out[1][10] ^= 0x40;
        assert_eq!(
            count_wrong(CollectiveKind::AllReduce, DType::Bf16, 64, 2, 1, 0, &out[1]),
            1
        );
        // a NaN-poisoned (never written) buffer is all wrong
        let poisoned = vec![0xFFu8; 128];
        assert_eq!(
            count_wrong(
                CollectiveKind::AllReduce,
                DType::Bf16,
                64,
                2,
                0,
                0,
                &poisoned
            ),
            64
        );
        // another op's output in this op's buffer is wrong
        let other = simulate(CollectiveKind::AllReduce, DType::Bf16, 64, 2, 1);
        assert!(
            count_wrong(
                CollectiveKind::AllReduce,
                DType::Bf16,
                64,
                2,
                0,
                0,
                &other[0]
            ) > 0
        );
    }

    #[test]
    fn up_to_16_ranks_every_rank_feeds_every_element() {
        // d = 1: the dense values (rank + 1) + offset. Salt 3 is index 1, slot 0: base-7
        // digits 1,0,0,0,0,0 (and 0 at position 6), so element i gets (i + 1) % 7 where
        // i % 7 == 0 and i % 7 elsewhere. Salt 5 is index 1, slot 2: 2 more everywhere.
        for n in 2..=16 {
            assert_eq!(stride(n), 1);
            for r in 0..n {
                for i in 0..21 {
                    let digit = if i % 7 == 0 { 1 } else { 0 };
                    assert_eq!(input_value(r, i, 3, n), ((r + 1) + (i + digit) % 7) as f32);
                    assert_eq!(
                        input_value(r, i, 5, n),
                        ((r + 1) + (i + digit + 2) % 7) as f32
                    );
                }
            }
        }
        // 8 ranks: the largest sum 36 + 8 * 6 = 84 (salt 0: offset i % 7, 6 at i = 6)
        assert_eq!(sum_value(6, 0, 8), 84.0);
        assert_eq!(stride(17), 2);
        assert_eq!(stride(1024), 64);
    }

    /// The three slots of every collective index (all 117,649) differ at every element, on
    /// every rank and in the exact sum: the offset repeats every 7 elements (asserted over a
    /// 1 MiB bf16 message, the largest the P2P stress test sends), so the 7 positions of one
    /// period stand for every element of every size.
    #[test]
    fn the_three_slots_of_every_index_differ_at_every_element() {
        // the period: element i and i + 7 get the same value under any salt
        for op in [0, 1, 2, 3 * 1234 + 1, DISTINCT_SALTS - 1] {
            for i in 0..(1usize << 19) {
                assert_eq!(offset(i, op), offset(i % 7, op), "op {op} i {i}");
            }
        }
        let mut checked = 0u64;
        for index in 0..SALTED_INDICES {
            for i in 0..7 {
                let off: Vec<usize> = (0..SLOTS).map(|s| offset(i, salt(index, s))).collect();
                for (a, b) in [(0, 1), (1, 2), (0, 2)] {
                    // offsets differ by the slot difference, mod 7
                    assert_eq!((off[b] + 7 - off[a]) % 7, b - a, "index {index} i {i}");
                    checked += 1;
                }
            }
            // on ranks 0 and 7 of 8 (every rank feeds every element) and in the sums
            if index % 97 == 0 || index + 1 == SALTED_INDICES {
                for i in 0..7 {
                    for (a, b) in [(0, 1), (1, 2), (0, 2)] {
                        let (x, y) = (salt(index, a), salt(index, b));
                        for r in [0, 7] {
                            assert_ne!(input_value(r, i, x, 8), input_value(r, i, y, 8));
                        }
                        assert_ne!(sum_value(i, x, 8), sum_value(i, y, 8));
                    }
                }
            }
        }
        assert_eq!(checked, 117_649 * 7 * 3);
        // beyond 16 ranks the slots feed the same elements, with different values
        for n in [17, 100, 1024] {
            for i in 0..2 * stride(n) {
                let v: Vec<f32> = (0..SLOTS)
                    .map(|s| input_value(5, i, salt(9, s), n))
                    .collect();
                let fed = v[0] != 0.0;
                assert!(v.iter().all(|&x| (x != 0.0) == fed), "n {n} i {i}");
                if fed {
                    assert!(v[0] != v[1] && v[1] != v[2] && v[0] != v[2], "n {n} i {i}");
                }
                let e: Vec<f32> = (0..SLOTS).map(|s| sum_value(i, salt(9, s), n)).collect();
                assert!(e[0] != e[1] && e[1] != e[2] && e[0] != e[2], "n {n} i {i}");
            }
        }
    }

    /// `x` rounded to `dtype` (round to nearest even, as the device's conversions do).
    fn round(dtype: DType, x: f32) -> f32 {
        match dtype {
            DType::Bf16 => bf16::from_f32(x).to_f32(),
            DType::F16 => f16::from_f32(x).to_f32(),
            DType::F32 => x,
        }
    }

    /// Adds `vals` one after another as a device does in `dtype`: each partial sum rounded to
    /// the element type.
    fn add_in(dtype: DType, vals: impl Iterator<Item = f32>) -> f32 {
        vals.fold(0.0f32, |acc, v| round(dtype, acc + round(dtype, v)))
    }

    /// Pairwise (tree) sum, each partial rounded to `dtype`.
    fn tree_in(dtype: DType, vals: &[f32]) -> f32 {
        let mut v: Vec<f32> = vals.iter().map(|&x| round(dtype, x)).collect();
        while v.len() > 1 {
            v = v
                .chunks(2)
                .map(|c| round(dtype, c.iter().sum::<f32>()))
                .collect();
        }
        v.first().copied().unwrap_or(0.0)
    }

    /// The proof in the module comment, checked for every rank count up to 1024: every value a
    /// non-negative integer exactly representable in bf16, and the values summed into any one
    /// element totalling at most 256, so that every subset of them (every partial sum of any
    /// summation order) is an integer bf16, f16 and f32 hold exactly.
    #[test]
    fn every_partial_sum_is_representable_up_to_1024_ranks() {
        for n in 2..=1024usize {
            let d = stride(n);
            // the d residues of (i + index) are every layout an element can have; 42 elements
            // cover the value offsets (7 positions of the digits, every residue mod 7)
            // salts with non-zero high digits too: index 6 * 7^5 + 7 * 3 + 2 = 100,865, slot 2
            for op in [n % 5, salt(6 * 7usize.pow(5) + 23, 2)] {
                for i in 0..d.max(42) {
                    let (mut nonzero, mut total) = (0, 0.0f32);
                    for r in 0..n {
                        let v = input_value(r, i, op, n);
                        assert!(v >= 0.0 && v.fract() == 0.0 && v <= 256.0);
                        nonzero += (v != 0.0) as usize;
                        total += v;
                    }
                    assert!((1..=ACTIVE).contains(&nonzero), "n {n} i {i}: {nonzero}");
                    assert!(total <= 256.0, "n {n} i {i}: total {total}");
                    assert_eq!(sum_value(i, op, n), total, "n {n} i {i}");
                }
            }
        }
    }

    /// The reduction computed in each dtype's own rounding, in ring orders starting at several
    /// ranks, in reverse, in a shuffled order and as a tree, equals the expected value exactly,
    /// for every rank count from 2 to 1024. (Adding a zero changes no partial sum, so each
    /// order, and the tree, is followed through the ranks that contribute.)
    #[test]
    fn reductions_in_the_dtypes_own_rounding_are_exact_up_to_1024_ranks() {
        let mut seed = 0x9e3779b97f4a7c15u64;
        for n in 2..=1024usize {
            let d = stride(n);
            let op = n % 11;
            let mut shuffled: Vec<usize> = (0..n).collect();
            for k in (1..n).rev() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                shuffled.swap(k, (seed % (k as u64 + 1)) as usize);
            }
            let reverse: Vec<usize> = (0..n).rev().collect();
            let ring_mid: Vec<usize> = (0..n).map(|k| (k + n / 2) % n).collect();
            let ring_last: Vec<usize> = (0..n).map(|k| (k + n - 1) % n).collect();
            // position of each rank in each order
            let orders: Vec<Vec<usize>> = [&shuffled, &reverse, &ring_mid, &ring_last]
                .iter()
                .map(|o| {
                    let mut pos = vec![0; n];
                    for (p, &r) in o.iter().enumerate() {
                        pos[r] = p;
                    }
                    pos
                })
                .collect();
            // one element per layout (residue of i + index)
            for i in 0..d {
                // the ranks the module comment says contribute: (r + i + index) % d == 0
                let index = op / SLOTS;
                let contributing: Vec<usize> = ((d - (i + index) % d) % d..n).step_by(d).collect();
                assert!(contributing
                    .iter()
                    .all(|&r| input_value(r, i, op, n) != 0.0));
                let want = sum_value(i, op, n);
                // the contributions in each order (the same in every dtype)
                let ordered: Vec<Vec<f32>> = orders
                    .iter()
                    .map(|pos| {
                        let mut rs = contributing.clone();
                        rs.sort_by_key(|&r| pos[r]);
                        rs.iter().map(|&r| input_value(r, i, op, n)).collect()
                    })
                    .collect();
                let vals: Vec<f32> = contributing
                    .iter()
                    .map(|&r| input_value(r, i, op, n))
                    .collect();
                for dtype in [DType::Bf16, DType::F16, DType::F32] {
                    for o in &ordered {
                        let got = add_in(dtype, o.iter().copied());
                        assert_eq!(got, want, "{dtype:?} n {n} i {i}");
                    }
                    assert_eq!(tree_in(dtype, &vals), want, "{dtype:?} n {n} i {i} tree");
                }
            }
        }
    }

    /// The whole check (send buffers as encoded, receive buffers, count_wrong) at rank counts
    /// that broke the dense layout in bf16, with the reductions summed in each dtype's own
    /// rounding in ring order.
    #[test]
    fn no_wrong_elements_at_18_to_1024_ranks_in_every_dtype() {
        for n in [18, 64, 100, 256, 1000, 1024] {
            let count = 2 * stride(n) + 3;
            for dtype in [DType::Bf16, DType::F16, DType::F32] {
                // a sum depends on the element alone here (the ranks' inputs, in one order):
                // each is added up once, whichever kind and rank receives it
                let mut sums = std::collections::HashMap::new();
                for kind in CollectiveKind::ALL {
                    let ops = kind.ops();
                    for rank in [0, n / 2, n - 1] {
                        // what this rank sends is the pattern, exactly
                        let sent: Vec<f32> = send_bytes(kind, dtype, count, n, rank, 4)
                            .chunks(dtype.size() as usize)
                            .map(|c| decode(dtype, c))
                            .collect();
                        assert_eq!(sent.len(), ops.send_elems(count, n));
                        for (i, v) in sent.iter().enumerate() {
                            assert_eq!(*v, input_value(rank, i, 4, n));
                        }
                        let sent_by =
                            |r: usize, elem: usize| round(dtype, input_value(r, elem, 4, n));
                        let vals = (0..ops.recv_elems(count, n)).map(|i| {
                            match ops.source(count, n, rank, i) {
                                ElementSource::Sum { elem } => {
                                    *sums.entry(elem).or_insert_with(|| {
                                        add_in(dtype, (0..n).map(|k| sent_by((k + 1) % n, elem)))
                                    })
                                }
                                ElementSource::Copy { rank: r, elem } => sent_by(r, elem),
                            }
                        });
                        let recv = encode(dtype, vals);
                        assert_eq!(
                            count_wrong(kind, dtype, count, n, rank, 4, &recv),
                            0,
                            "{kind:?} {dtype:?} {n} ranks, rank {rank}"
                        );
                    }
                }
            }
        }
    }

    /// The written-out stride, digits and sum (fast in a test build) are the forms they
    /// replaced: `div_ceil(16).max(1)`, `7^k` by `pow`, the f32 sum of `input_value` over the
    /// ranks `first, first + d, ..` below n, bit for bit.
    #[test]
    fn the_written_out_arithmetic_is_the_library_forms() {
        for n in 0..=4096usize {
            assert_eq!(stride(n), n.div_ceil(ACTIVE).max(1), "{n}");
        }
        for index in (0..SALTED_INDICES).step_by(97).chain([SALTED_INDICES - 1]) {
            for k in 0..6 {
                assert_eq!(digit(index, k), (index / 7usize.pow(k as u32)) % 7);
            }
        }
        for n in [
            1, 2, 7, 16, 17, 18, 31, 32, 33, 100, 257, 1000, 1023, 1024, 4096,
        ] {
            let d = stride(n);
            for op in [0, 1, 2, 3, 50, 3 * 12_345 + 1, 3 * 117_648 + 2] {
                for i in 0..(3 * d + 14) {
                    let first = (d - (i + op / SLOTS) % d) % d;
                    let old: f32 = (first..n)
                        .step_by(d)
                        .map(|r| input_value(r, i, op, n))
                        .sum();
                    assert_eq!(sum_value(i, op, n).to_bits(), old.to_bits(), "{n} {op} {i}");
                }
            }
        }
    }

    /// What the dense layout got wrong: at 18 ranks its largest bf16 sum (279) rounds, so the
    /// check the tests above pass would have failed (this keeps the tests honest).
    #[test]
    fn the_dense_layout_was_not_exact_in_bf16_at_18_ranks() {
        let dense: f32 = (0..18).map(|r| ((r + 1) + 6) as f32).sum();
        assert_eq!(dense, 279.0);
        assert_ne!(
            decode(DType::Bf16, &encode(DType::Bf16, [dense].into_iter())),
            dense
        );
        assert!(sum_value(6, 0, 18) <= 256.0);
    }

    /// Salts 7 apart (the former period) and salts differing only in a high base-7 digit get
    /// different inputs on every rank.
    #[test]
    fn salts_seven_apart_and_far_apart_get_different_inputs() {
        for n in [2, 8, 16] {
            for (a, b) in [(0, 7), (3, 10), (1, 1 + 7usize.pow(5)), (5, 5 + 49 * 3)] {
                for r in 0..n {
                    let differ =
                        (0..12).any(|i| input_value(r, i, a, n) != input_value(r, i, b, n));
                    assert!(differ, "n {n} rank {r}: salts {a} and {b}");
                }
            }
        }
    }

    /// The expected output of every rank differs between every two (collective, slot) pairs of
    /// one kind and size in every schedule `plan` builds (every preset, every phase, TP
    /// 1..=1024 where the model allows it, verify of 1 and 8 tokens; the first and last rank),
    /// in every dtype: a collective reading or writing another's buffers, or another slot's of
    /// its own, leaves wrong elements on every rank. Salts are [`salt`] of the op's index and
    /// the slot, as the runs use them.
    ///
    /// Each output is keyed by its first 64 elements encoded in the dtype; outputs with equal
    /// keys are compared whole, so the prefix only makes the test fast, never weaker.
    #[test]
    fn every_slot_of_every_collective_of_every_schedule_gets_distinct_inputs() {
        use crate::model::build;
        use crate::model::schedule::{validate, ScheduleOptions};
        use crate::model::{Op, Phase};
        use std::collections::{BTreeMap, HashMap};
        let dtypes = [DType::Bf16, DType::F16, DType::F32];
        let (mut schedules, mut pairs, mut whole) = (0, 0u64, 0u64);
        for name in crate::model::presets::PRESETS {
            let shape = crate::model::presets::preset(name).unwrap();
            for tp in (0..=10).map(|k| 1u64 << k) {
                for (phase, tokens) in [
                    (Phase::Verify, 1),
                    (Phase::Verify, 8),
                    (Phase::Decode, 1),
                    (Phase::Draft, 1),
                ] {
                    let opt = ScheduleOptions {
                        tp,
                        tokens,
                        ..Default::default()
                    };
                    if validate(&shape, &opt).is_err() {
                        continue;
                    }
                    let Ok(s) = build(&shape, &opt, phase) else {
                        continue;
                    };
                    schedules += 1;
                    let n = tp as usize;
                    check_salted(s.ops.len()).unwrap();
                    // the salts of every slot of every collective, grouped by kind and size
                    let mut groups: BTreeMap<(CollectiveKind, usize), Vec<usize>> = BTreeMap::new();
                    for (i, op) in s.ops.iter().enumerate() {
                        if let Op::Collective { kind, count, .. } = op {
                            let g = groups.entry((*kind, *count as usize)).or_default();
                            g.extend((0..SLOTS).map(|slot| salt(i, slot)));
                        }
                    }
                    let mut ranks = vec![0, n - 1];
                    ranks.dedup();
                    for ((kind, count), salts) in &groups {
                        assert!(salts.iter().all(|&x| x < DISTINCT_SALTS));
                        pairs += (salts.len() * (salts.len() - 1) / 2) as u64;
                        let len = kind.ops().recv_elems(*count, n);
                        let out = |r: usize, x: usize, upto: usize| -> Vec<f32> {
                            (0..upto)
                                .map(|i| expected(*kind, *count, n, r, i, x))
                                .collect()
                        };
                        for &r in &ranks {
                            let mut seen: HashMap<Vec<u8>, usize> = HashMap::new();
                            for &x in salts {
                                let head = out(r, x, len.min(64));
                                for (d, dt) in dtypes.iter().enumerate() {
                                    let mut key = encode(*dt, head.iter().copied());
                                    key.push(d as u8);
                                    let Some(&y) = seen.get(&key) else {
                                        seen.insert(key, x);
                                        continue;
                                    };
                                    whole += 1;
                                    assert_ne!(
                                        encode(*dt, out(r, x, len).into_iter()),
                                        encode(*dt, out(r, y, len).into_iter()),
                                        "{name} tp {tp} {phase:?} {dt:?}: salts {x} and {y} expect the same on rank {r}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
        // the loops really covered schedules with many repeated collectives
        assert!(
            schedules >= 20 && pairs > 90_000,
            "{schedules} schedules, {pairs} pairs ({whole} compared whole)"
        );
    }

    /// The slot salts: distinct over every (index, slot) up to the limit, all below
    /// DISTINCT_SALTS, and one index past the limit refused.
    #[test]
    fn slot_salts_are_distinct_up_to_the_limit_and_refused_beyond() {
        let mut seen = vec![false; DISTINCT_SALTS];
        for index in 0..SALTED_INDICES {
            for slot in 0..SLOTS {
                let x = salt(index, slot);
                assert!(x < DISTINCT_SALTS, "index {index} slot {slot}: {x}");
                assert!(!seen[x], "salt {x} given twice");
                seen[x] = true;
            }
        }
        // 7^6 indices, 3 slots each
        assert_eq!(SALTED_INDICES, 117_649);
        assert_eq!(DISTINCT_SALTS, 352_947);
        assert!(check_salted(117_649).is_ok());
        let e = check_salted(117_650).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(format!("{e}").contains("117650"), "{e}");
        // two slots of one collective get different inputs on every rank
        for n in [2, 8, 1024] {
            for r in [0, n - 1] {
                for (a, b) in [(0, 1), (1, 2), (0, 2)] {
                    let differ = (0..64 * stride(n)).any(|i| {
                        input_value(r, i, salt(5, a), n) != input_value(r, i, salt(5, b), n)
                    });
                    assert!(differ, "n {n} rank {r}: slots {a} and {b}");
                }
            }
        }
    }

    #[test]
    fn at_1024_ranks_every_rank_is_checked_by_a_buffer_of_stride_elements() {
        let n = 1024;
        let d = stride(n);
        for op in [0, 7] {
            let mut fed = vec![false; n];
            for i in 0..d {
                for (r, f) in fed.iter_mut().enumerate() {
                    *f |= input_value(r, i, op, n) != 0.0;
                }
            }
            assert!(fed.iter().all(|&f| f), "op {op}");
        }
        // a different salt changes the values of most elements
        let differ = (0..256)
            .filter(|&i| (0..n).any(|r| input_value(r, i, 0, n) != input_value(r, i, 1, n)))
            .count();
        assert_eq!(differ, 256);
    }
}
