//! Custom all-reduces over peer memory, beside NCCL: one-shot and two-shot (kernels/allreduce.cu).
//!
//! Why: for the verify step's small all-reduces (8 B to a few MB) NCCL's ring pays a latency per
//! hop; a one-shot all-reduce pays one signal round and n-1 peer reads. Running both in the same
//! harness shows how far NCCL is from what the links allow.
//!
//! How a rank gets one ([`Workspace`] -> handle bytes -> [`P2pAllReduce`]):
//! 1. `Workspace::new` allocates this rank's peer-visible workspace (flags, epoch counters, error
//!    words, staging) with `cuMemAlloc` (pool allocations can be neither shared over CUDA IPC
//!    nor reached through `cuCtxEnablePeerAccess`) and zeroes its control words.
//! 2. `Workspace::export` gives bytes (hex with [`to_hex`]) that name it to the peers: its device
//!    pointer for ranks of the same process, a CUDA IPC handle for other processes.
//! 3. The bytes of all ranks are exchanged: [`InProcessExchange`] between threads,
//!    [`file_exchange`] through a job folder between processes, or any channel the caller has.
//! 4. `Workspace::connect` enables peer access (threads), opens the IPC handles with lazy peer
//!    access (processes), or uses the pointers as they are (virtual ranks on one GPU).
//!
//! Then [`P2pAllReduce::enqueue`] runs one all-reduce on the rank's stream: one kernel launch,
//! no allocation, no synchronisation, no host copy, so it can be captured in a CUDA graph; the
//! workspace is reused by every call (epochs on the device). After synchronising, the host asks
//! [`P2pAllReduce::check`] whether a wait timed out, and which rank never signalled.
//!
//! Never NVLink multicast: no NVLS, no `cuMulticast*`, only loads and stores through peer
//! mappings. Where two GPUs cannot reach each other, [`check_topology`] and `connect` say which
//! pair; nothing falls back silently.
//!
//! Before any of it, [`access`] checks every ordered pair of GPUs for real (a write, a flag
//! and a read back through the mapping, cached per boot) and refuses a pair the platform drops,
//! naming the likely cause that [`sysfs`] reads (IOMMU mode, ACS redirect, the driver's P2P
//! override).
//!
//! [`virtual_ranks`] proves the protocol on one GPU (N workspaces, N streams, resident grids), and
//! [`stress`] tries to break it there (random skew, sizes, interleaving; negative controls).

pub(crate) mod access;
pub(crate) mod kernels;
mod mem;
pub(crate) mod peer;
mod probe;
pub(crate) mod stress;
pub(crate) mod sysfs;
pub(crate) mod virtual_ranks;

use std::fmt;
use std::time::Duration;

use crate::model::DType;

pub(crate) use crate::record::vocab::Impl;
pub(crate) use peer::{
    check_topology, file_exchange, InProcessExchange, P2pAllReduce, P2pUnavailable, Workspace,
};
pub(crate) use probe::check_access;
pub(crate) use virtual_ranks::virtual_rank_shapes;
pub(crate) use virtual_ranks::{virtual_rank_checks, virtual_rank_timings};

/// The bus-bandwidth factor of `op` over `n` ranks on `imp`: busbw = algbw x factor, where the
/// factor is the bytes each rank moves over its links per byte of the message (nccl-tests'
/// definition, `all_reduce.cu` `AllReduceGetBw`, in NVIDIA/nccl-tests `src/all_reduce.cu`).
/// - NCCL's all-reduce (ring): a reduce-scatter then an all-gather, each moving (n-1) chunks of
///   S/n per rank: 2 (n-1) S / n, factor 2 (n-1) / n.
/// - One-shot: every rank reads the whole message of each of the n-1 other ranks and reduces
///   locally, so (n-1) S comes in per rank: factor n-1.
/// - Two-shot: a reduce-scatter (each rank reads its chunk of S/n from the n-1 others) then an
///   all-gather (each reads the n-1 other reduced chunks of S/n): 2 (n-1) S / n, factor
///   2 (n-1) / n, the ring's.
///
/// The P2P kernels run only all-reduces; other collectives keep NCCL's factor.
pub(crate) fn bus_factor(imp: Impl, op: crate::model::CollectiveKind, n: usize) -> f64 {
    match (imp, op) {
        (Impl::OneShot, crate::model::CollectiveKind::AllReduce) => n.saturating_sub(1) as f64,
        _ => op.bus_factor(n),
    }
}

/// Most ranks (MAXR in kernels/allreduce.cu).
pub(crate) const MAX_RANKS: usize = 8;
/// Most blocks of one call (MAXB).
pub(crate) const MAX_BLOCKS: u32 = 64;
/// Threads per block (THREADS).
pub(crate) const THREADS: u32 = 512;
/// Flag rounds (ROUNDS): copy-in, two-shot all-gather, barrier.
pub(crate) const ROUNDS: usize = 3;
/// Workspace offsets (FLAGS_OFF, EPOCHS_OFF, ERRORS_OFF, PROBES_OFF, DATA_OFF).
pub(crate) const FLAGS_OFF: usize = 0;
pub(crate) const EPOCHS_OFF: usize = 12288;
pub(crate) const ERRORS_OFF: usize = 12800;
/// u32 words at ERRORS_OFF: code, epoch low, block, epoch high, the silent peer's calls low, high.
pub(crate) const ERROR_WORDS: usize = 6;
pub(crate) const PROBES_OFF: usize = 13312;
pub(crate) const DATA_OFF: usize = 16384;
/// Bytes of one rank's access-probe slot in a peer's workspace (a flag word and PROBE_WORDS).
pub(crate) const PROBE_SLOT: usize = 256;
/// Data words of one access probe (PROBE_WORDS).
pub(crate) const PROBE_WORDS: usize = 63;
/// Set in the first error word when a wait timed out (ERR_TIMEOUT).
pub(crate) const ERR_TIMEOUT: u32 = 0x8000_0000;
/// Set in the first error word when the host's stop word ended a wait (ERR_STOPPED).
pub(crate) const ERR_STOPPED: u32 = 0x4000_0000;
// The workspace regions do not overlap: 64-bit flags, then 64-bit epochs, then 4 error words,
// then a probe slot per rank, then data (checked when compiling).
const _: () = assert!(FLAGS_OFF + ROUNDS * MAX_BLOCKS as usize * MAX_RANKS * 8 <= EPOCHS_OFF);
const _: () = assert!(EPOCHS_OFF + MAX_BLOCKS as usize * 8 <= ERRORS_OFF);
const _: () = assert!(ERRORS_OFF + 4 * ERROR_WORDS <= PROBES_OFF);
const _: () = assert!((PROBE_WORDS + 1) * 4 <= PROBE_SLOT);
const _: () = assert!(PROBES_OFF + MAX_RANKS * PROBE_SLOT <= DATA_OFF && DATA_OFF % 256 == 0);

/// Vectors each thread handles per call before a grid gets another block.
const VECTORS_PER_THREAD: u64 = 2;

/// Which build of kernels/allreduce.cu a connection runs: the real kernels, or (the stress
/// test's negative controls, selftest only) a build with a bug the stress test must catch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Build {
    #[default]
    Real,
    /// The real protocol with a rank pausing now and then between a wait and its reads
    /// (`P2P_JITTER`): the stress test's wider races.
    Jitter,
    /// The copy-in flag released before the copy-in (`P2P_FAULT=1`, with the pauses).
    EarlyFlag,
    /// One staging half for every call (`P2P_FAULT=2`, with the pauses).
    OneHalf,
}

impl Build {
    /// The preprocessor defines NVRTC compiles this build with (one of
    /// [`crate::comm::compile::TEST_BUILDS`] for the negative controls).
    pub(crate) fn defines(self) -> &'static [&'static str] {
        match self {
            Build::Real => &[],
            Build::Jitter => &["P2P_JITTER"],
            Build::EarlyFlag => &["P2P_FAULT=1"],
            Build::OneHalf => &["P2P_FAULT=2"],
        }
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            Build::Real => "the real kernels",
            Build::Jitter => "the real kernels with read-phase pauses",
            Build::EarlyFlag => "flag released before the copy-in",
            Build::OneHalf => "one staging half only",
        }
    }
}

/// Settings every rank of one group must share (they are checked at connect).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct P2pConfig {
    /// Largest message in bytes (the size of one staging half).
    pub(crate) capacity: usize,
    /// Most blocks of one call (at most [`MAX_BLOCKS`]).
    pub(crate) max_blocks: u32,
    /// Bound of every wait for a peer's signal: half a run's `--timeout`.
    pub(crate) timeout: Duration,
    /// The kernels' build: [`Build::Real`] but in the stress test (pauses, negative controls).
    pub(crate) build: Build,
}

impl Default for P2pConfig {
    fn default() -> Self {
        P2pConfig {
            capacity: 4 << 20,
            max_blocks: 32,
            timeout: Duration::from_secs(10),
            build: Build::Real,
        }
    }
}

impl P2pConfig {
    /// The staging size as the kernel sees it: `capacity` rounded up to 256 bytes.
    pub(crate) fn staging_bytes(&self) -> usize {
        self.capacity.max(1).div_ceil(256) * 256
    }

    /// Bytes of one workspace: control words, two staging halves, one result buffer.
    pub(crate) fn workspace_bytes(&self) -> usize {
        DATA_OFF + 3 * self.staging_bytes()
    }

    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        if self.max_blocks == 0 || self.max_blocks > MAX_BLOCKS {
            crate::usage_bail!(
                "P2P all-reduce: max_blocks {} is outside 1..={MAX_BLOCKS}",
                self.max_blocks
            );
        }
        if self.timeout.is_zero() {
            crate::usage_bail!("P2P all-reduce: the signal timeout must be positive");
        }
        Ok(())
    }
}

/// Why an implementation refuses a message, or `Ok` when it runs it. Both custom kernels take
/// any element count from 1 up to the staging capacity: counts that are not a multiple of the
/// 16-byte vector end in an element tail, two-shot's partitions are the vectors split as evenly
/// as possible (the last one shorter or empty), and unaligned buffers are read element-wise.
pub(crate) fn supports(
    imp: Impl,
    count: usize,
    dtype: DType,
    nranks: usize,
    cfg: &P2pConfig,
) -> Result<(), String> {
    if !imp.is_p2p() {
        return Err(format!("{imp} is not a P2P implementation"));
    }
    if !(2..=MAX_RANKS).contains(&nranks) {
        return Err(format!(
            "{imp} runs on 2 to {MAX_RANKS} ranks (got {nranks})"
        ));
    }
    let bytes = count * dtype.size() as usize;
    if bytes > cfg.staging_bytes() {
        return Err(format!(
            "{imp}: {bytes} B is more than the P2P staging capacity of {} B",
            cfg.staging_bytes()
        ));
    }
    Ok(())
}

/// Elements of `dtype` in one 16-byte vector.
pub(crate) fn per_vector(dtype: DType) -> u64 {
    16 / dtype.size()
}

/// Blocks of one call: one per 1024 vectors (16 KiB) of the work one block's partition holds,
/// at least one, at most `max_blocks`. Every rank computes the same number (it decides which
/// flag slots and staging regions a block uses), from values every rank shares.
pub(crate) fn blocks(imp: Impl, count: usize, dtype: DType, nranks: usize, max_blocks: u32) -> u32 {
    let nvec = count as u64 / per_vector(dtype);
    let units = match imp {
        Impl::TwoShot => nvec.div_ceil(nranks.max(1) as u64),
        _ => nvec,
    };
    let want = units.div_ceil(THREADS as u64 * VECTORS_PER_THREAD).max(1);
    want.min(max_blocks.clamp(1, MAX_BLOCKS) as u64) as u32
}

/// A wait that ran out: rank `silent` never signalled rank `rank`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SignalTimeout {
    pub(crate) rank: usize,
    pub(crate) silent: usize,
    /// Device of the waiting rank and of the silent one.
    pub(crate) gpu: usize,
    pub(crate) silent_gpu: usize,
    /// Flag round (0 copy-in, 1 two-shot all-gather, 2 barrier).
    pub(crate) round: u32,
    /// The call's epoch (1 for the first call of a workspace).
    pub(crate) call: u64,
    pub(crate) block: u32,
    pub(crate) timeout: Duration,
    /// Calls the silent rank's block of this index had entered when the wait ran out: fewer
    /// than `call` means its kernel of this call never started; as many, it waited in it too.
    pub(crate) entered: u64,
}

impl SignalTimeout {
    /// Decodes the error words a kernel wrote, or `None` when they hold no error.
    pub(crate) fn decode(
        words: [u32; ERROR_WORDS],
        rank: usize,
        devices: &[usize],
        timeout: Duration,
    ) -> Option<SignalTimeout> {
        let code = words[0];
        if code & ERR_TIMEOUT == 0 {
            return None;
        }
        let silent = (code & 0xff) as usize;
        Some(SignalTimeout {
            rank,
            silent,
            gpu: devices.get(rank).copied().unwrap_or(usize::MAX),
            silent_gpu: devices.get(silent).copied().unwrap_or(usize::MAX),
            round: (code >> 8) & 0xff,
            call: words[1] as u64 | (words[3] as u64) << 32,
            block: words[2],
            timeout,
            entered: words[4] as u64 | (words[5] as u64) << 32,
        })
    }

    fn phase(&self) -> &'static str {
        match self.round {
            0 => "copy-in signal",
            1 => "two-shot all-gather signal",
            _ => "barrier",
        }
    }
}

impl fmt::Display for SignalTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rank {} never signalled rank {} within {:.0} ms (GPU {} <- GPU {}; {}, call {}, block {})",
            self.silent,
            self.rank,
            self.timeout.as_secs_f64() * 1e3,
            self.gpu,
            self.silent_gpu,
            self.phase(),
            self.call,
            self.block
        )?;
        if self.entered < self.call {
            write!(
                f,
                "; rank {} had entered {} calls: its kernel of call {} never started (its launch was queued behind work that waits, or the GPU never scheduled it), not a lost signal",
                self.silent, self.entered, self.call
            )
        } else {
            write!(
                f,
                "; rank {} was in call {} itself: it waited too",
                self.silent, self.entered
            )
        }
    }
}

impl std::error::Error for SignalTimeout {}

/// Lower-case hex of `bytes` (P2P handles travel as text over the worker channel and in files,
/// NCCL ids on a worker's command line).
pub(crate) fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of [`to_hex`]'s text.
pub(crate) fn from_hex(s: &str) -> anyhow::Result<Vec<u8>> {
    let s = s.trim();
    if s.len() % 2 != 0 || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        anyhow::bail!("P2P handle is not hex ({} characters)", s.len());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(anyhow::Error::from))
        .collect()
}

#[cfg(test)]
mod tests;
