//! Exact-result checks: each rank's input is small integers (exact in bf16, f16 and f32), so
//! every collective's output is known exactly and any differing element counts as wrong.

use half::{bf16, f16};

use crate::model::collective::Source;
use crate::model::{CollectiveKind, DType};

/// Input value of element `i` on `rank` for the collective with salt `op` (its index in the
/// schedule, so that one op's output landing in another's buffer is caught).
pub fn input_value(rank: usize, i: usize, op: usize) -> f32 {
    ((rank + 1) + (i + op) % 7) as f32
}

/// Encodes values in `dtype`.
pub fn encode(dtype: DType, values: impl Iterator<Item = f32>) -> Vec<u8> {
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
pub fn decode(dtype: DType, bytes: &[u8]) -> f32 {
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
    encode(dtype, (0..n).map(|i| input_value(rank, i, op)))
}

/// Expected value of receive element `i` on `rank`.
pub fn expected(
    kind: CollectiveKind,
    count: usize,
    nranks: usize,
    rank: usize,
    i: usize,
    op: usize,
) -> f32 {
    match kind.ops().source(count, nranks, rank, i) {
        Source::Sum { elem } => (0..nranks).map(|r| input_value(r, elem, op)).sum(),
        Source::Copy { rank, elem } => input_value(rank, elem, op),
    }
}

/// Number of elements of `recv` (encoded) that differ from the expected output.
pub fn count_wrong(
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
                    .map(|i| input_value(r, i, op))
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
                };
                encode(dtype, vals.into_iter())
            })
            .collect()
    }

    #[test]
    fn simulated_collectives_have_no_wrong_elements_up_to_8_ranks() {
        for kind in [
            CollectiveKind::AllReduce,
            CollectiveKind::AllGather,
            CollectiveKind::ReduceScatter,
        ] {
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
    fn bf16_is_exact_for_the_largest_sum() {
        // 8 ranks: max sum 36 + 8 * 6 = 84, well inside bf16's exact integers (<= 256)
        let v = (0..8).map(|r| input_value(r, 6, 0)).sum::<f32>();
        assert_eq!(v, 84.0);
        assert_eq!(
            decode(DType::Bf16, &encode(DType::Bf16, [v].into_iter())),
            84.0
        );
    }
}
