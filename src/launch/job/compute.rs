//! The compute a rank replays between collectives: the streaming kernels over a weight pool,
//! their read bandwidth and per-launch cost, and the memory check before a replay.

use crate::comm::kernels::{Kernels, Pool};
use crate::comm::{Buffer, Gpu};
use crate::model::Op;
use crate::model::Schedule;

/// Refuses schedules whose collective buffers (`with_colls`: send and receive buffers of
/// every buffer slot, [`super::slots::SLOTS`] per collective) plus the compute pool do not fit
/// (a cycle's forwards are loaded together).
pub(super) fn check_memory(
    gpu: &Gpu,
    schedules: &[&Schedule],
    n: usize,
    with_colls: bool,
) -> anyhow::Result<()> {
    let mut need: u64 = 0;
    let ops = schedules.iter().flat_map(|s| s.ops.iter());
    for op in ops.filter(|_| with_colls) {
        if let Op::Collective {
            kind, dtype, count, ..
        } = op
        {
            let c = *count as usize;
            need += ((kind.ops().send_elems(c, n) + kind.ops().recv_elems(c, n))
                * dtype.size() as usize
                * super::slots::SLOTS) as u64;
        }
    }
    need += POOL_BYTES;
    let (free, total) = gpu.mem_info()?;
    if need > free as u64 {
        return Err(crate::error::usage(format!(
            "the replay needs {} of GPU memory on GPU {} (collective buffers, {} slots each, + {} weight pool), but only {} of {} is free",
            crate::units::human_bytes(need),
            gpu.ordinal(),
            super::slots::SLOTS,
            crate::units::human_bytes(POOL_BYTES),
            crate::units::human_bytes(free as u64),
            crate::units::human_bytes(total as u64)
        )));
    }
    Ok(())
}

/// Back-to-back launches the per-launch cost is measured from ([`Compute::measure_fixed_us`]).
pub(crate) const FIXED_COST_LAUNCHES: u64 = 32;

/// Size of the weight pool the streaming kernel reads (many times any GPU's L2).
pub(crate) const POOL_BYTES: u64 = 1 << 31;

/// What compute needs on a rank.
pub(super) struct Compute {
    pub(super) kernels: Kernels,
    pub(super) pool: Pool,
    pub(super) act: Buffer,
    pub(super) partial: Buffer,
    pub(super) tokens: usize,
}

impl Compute {
    pub(super) fn new(gpu: &Gpu, tokens: usize, pdl: bool) -> anyhow::Result<Compute> {
        if tokens > crate::comm::MAX_STREAM_TOKENS {
            crate::usage_bail!(
                "--tokens {tokens}: the streaming kernels handle at most {} tokens",
                crate::comm::MAX_STREAM_TOKENS
            );
        }
        // A schedule exported from a trace does not know its tokens (0) and holds no weight
        // streaming; the launches that stand in for the kernels between its collectives
        // (`--launches-per-layer`) and the bandwidth measure stream as for one token.
        let tokens = tokens.max(1);
        let kernels = Kernels::load_with(gpu, pdl)?;
        let pool = Pool::new(gpu, POOL_BYTES)?;
        let actv: Vec<u8> = (0..tokens * 8)
            .flat_map(|i| (0.25f32 * ((i % 5) as f32 + 1.0)).to_le_bytes())
            .collect();
        let act = gpu.alloc(actv.len())?;
        gpu.upload(&act, &actv)?;
        let partial = gpu.alloc(kernels.partial_bytes())?;
        Ok(Compute {
            kernels,
            pool,
            act,
            partial,
            tokens,
        })
    }

    /// The cost of one streaming launch beyond its bytes, us: `K` back-to-back launches of
    /// `nvec` vectors each (the schedule's mean launch) against one launch of `K x nvec`, each
    /// timed with events around the whole train, best of five:
    /// `(t_train - t_one) / (K - 1)`, at least 0. It holds the start-up, the drain and the gap
    /// between two launches that follow each other on the stream, as the replay's do (with
    /// `--pdl`, the PDL launches).
    pub(super) fn measure_fixed_us(
        &self,
        gpu: &Gpu,
        nvec: u64,
        tokens: usize,
    ) -> anyhow::Result<f64> {
        const K: u64 = FIXED_COST_LAUNCHES;
        let nvec = nvec.clamp(1, self.pool.vecs() / K);
        let train = self.best_us(gpu, 5, K, nvec, tokens)?;
        let one = self.best_us(gpu, 5, 1, K * nvec, tokens)?;
        Ok(((train - one) / (K - 1) as f64).max(0.0))
    }

    /// Weights read per second by one pass over the whole pool at `tokens` tokens (best of
    /// three), GB/s: the read bandwidth where the kernel is memory-bound, its flop rate / tokens
    /// where it is compute-bound.
    pub(super) fn measure_gbps(&self, gpu: &Gpu, tokens: usize) -> anyhow::Result<f64> {
        let best = self.best_us(gpu, 3, 1, self.pool.vecs(), tokens)?;
        Ok((self.pool.vecs() * 16) as f64 / (best * 1e3))
    }

    /// The fastest of `passes` timings (events around the whole train), us, of `launches`
    /// back-to-back streaming launches of `each` vectors at `tokens` tokens, each launch
    /// starting where the previous one ended in the pool.
    fn best_us(
        &self,
        gpu: &Gpu,
        passes: usize,
        launches: u64,
        each: u64,
        tokens: usize,
    ) -> anyhow::Result<f64> {
        let (a, b) = (gpu.event()?, gpu.event()?);
        let mut best = f64::MAX;
        for _ in 0..passes {
            gpu.record(&a)?;
            for i in 0..launches {
                self.kernels.stream(
                    gpu,
                    &self.pool,
                    i * each,
                    each,
                    &self.act,
                    tokens,
                    &self.partial,
                )?;
            }
            gpu.record(&b)?;
            gpu.sync()?;
            best = best.min(a.elapsed_us(&b)?);
        }
        Ok(best)
    }
}
