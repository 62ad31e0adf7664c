//! Where the P2P access check ([`super::access`]) and the residency check meet the GPU: the
//! probe of one ordered pair (kernels/allreduce.cu `p2p_probe`, bounded on the device and by a
//! host deadline), run by the launcher over every pair before ranks start ([`check_access`]) and
//! by each rank at connect through its own mappings ([`check_peers`]).

use std::path::Path;
use std::time::{Duration, Instant};

use cudarc::driver::sys::CUdeviceptr;

use super::access::{self, AccessCache, PairCheck, Probe, PROBE_BOUND_MS, PROBE_DEADLINE_MS};
use super::kernels::P2pKernels;
use super::mem::{download_raw, enable_peer, process_nonce, DeviceMem};
use super::{sysfs, Build, MAX_RANKS, PROBES_OFF, PROBE_SLOT, PROBE_WORDS};
use crate::comm::device::Gpu;
use crate::error::usage;

/// Word `i` of a probe with `token` (kernels/allreduce.cu `probe_word`, in the same wrapping
/// 32-bit arithmetic).
pub(crate) fn probe_word(token: u32, i: u32) -> u32 {
    token.wrapping_mul(2_654_435_761) ^ i.wrapping_mul(0x9e37_79b9) ^ (i << 24)
}

/// A token for the probe of `from` -> `to`: never 0 (the target's flag starts at 0), different
/// per process and pair.
fn token(from: usize, to: usize) -> u32 {
    let n = process_nonce();
    ((n ^ (n >> 32)) as u32 ^ (from as u32) << 8 ^ to as u32) | 1
}

/// The outcome from what the kernel left (`out`: wrong words, 1 or 2) and the target's memory
/// as the host read it (`mem`: the flag word, then PROBE_WORDS words).
pub(crate) fn classify(out: [u32; 2], mem: &[u32], token: u32) -> Probe {
    let in_memory = (0..PROBE_WORDS as u32)
        .filter(|&i| mem.get(1 + i as usize) != Some(&probe_word(token, i)))
        .count() as u32
        + u32::from(mem.first() != Some(&token));
    match out {
        [0, 1] if in_memory == 0 => Probe::Ok,
        [wrong, 1] => Probe::Wrong {
            through_mapping: wrong,
            in_memory,
        },
        [_, 2] => Probe::NoFlag,
        [_, other] => Probe::Failed {
            error: format!("the probe kernel left status {other} (1 or 2 expected)"),
        },
    }
}

/// Probes one pair: `gpu`'s kernel writes through `peer` (PROBE_SLOT bytes of another GPU's
/// memory, mapped into `gpu`'s context) and reads back; then `reader` (a GPU whose context
/// addresses `peer`) reads the memory. A kernel past the host deadline is left running and its
/// buffer leaked: freeing memory a running kernel writes is never safe.
fn probe_into(gpu: &Gpu, kernels: &P2pKernels, peer: CUdeviceptr, reader: &Gpu, tok: u32) -> Probe {
    let run = || -> anyhow::Result<Probe> {
        let out = gpu.alloc(8)?;
        let bound = Duration::from_millis(PROBE_BOUND_MS);
        kernels.probe(gpu, peer, out.ptr(), tok, bound)?;
        let deadline = Instant::now() + Duration::from_millis(PROBE_DEADLINE_MS);
        while !gpu.done()? {
            if Instant::now() >= deadline {
                std::mem::forget(out);
                return Ok(Probe::Hung);
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        let o = gpu.download(&out, 8)?;
        let word = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes"));
        let mem: Vec<u32> = download_raw(reader, peer, (PROBE_WORDS + 1) * 4)?
            .chunks(4)
            .map(word)
            .collect();
        Ok(classify([word(&o[0..4]), word(&o[4..8])], &mem, tok))
    };
    run().unwrap_or_else(|e| Probe::Failed {
        error: format!("{e:#}"),
    })
}

/// The PCI bus id of GPU `d` as sysfs writes it ("gpu<d>" where the driver does not say).
fn bus(d: usize) -> String {
    crate::comm::device::info(d)
        .map(|i| sysfs::normalize_bus(&i.pci_bus_id))
        .ok()
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| format!("gpu{d}"))
}

/// The platform facts of `buses` with this process's NCCL variables.
fn platform(buses: &[String]) -> sysfs::Platform {
    let disable = std::env::var("NCCL_P2P_DISABLE").ok();
    let level = std::env::var("NCCL_P2P_LEVEL").ok();
    sysfs::platform(Path::new("/"), buses, disable.as_deref(), level.as_deref())
}

/// The refusal of `checks`, as a usage error (exit 2), if a pair failed.
fn refuse(checks: &[PairCheck], buses: &[String], cache: &AccessCache) -> anyhow::Result<()> {
    if checks.iter().all(|c| c.probe.ok()) {
        return Ok(());
    }
    match access::refusal(checks, &platform(buses), buses, cache.path()) {
        Some(msg) => Err(usage(msg)),
        None => Ok(()),
    }
}

/// The access check of every ordered pair of the distinct GPUs of `devices`, before any rank
/// starts: from this boot's cache, or probed now in this process (a buffer on the target GPU,
/// peer access from the writer, the probe kernel). A failed pair refuses the P2P all-reduces
/// with a usage error (exit 2) naming it and its likely causes. Virtual ranks (one GPU) need
/// no check. Returns every pair's outcome and the notes to print (pairs probed now, a cache
/// that could not be written).
pub(crate) fn check_access(devices: &[usize]) -> anyhow::Result<(Vec<PairCheck>, Vec<String>)> {
    let mut distinct = devices.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() < 2 {
        return Ok((vec![], vec![]));
    }
    let gpus: Vec<(usize, String)> = distinct.iter().map(|&d| (d, bus(d))).collect();
    let mut cache = AccessCache::here();
    // GPUs opened on demand (only when the cache misses), with the writer's kernels
    let mut opened: Vec<(usize, Gpu, Option<P2pKernels>)> = vec![];
    let mut leak = false;
    let (checks, note) = access::check_pairs(&gpus, &mut cache, |a, b| {
        let mut step = || -> anyhow::Result<Probe> {
            for d in [a, b] {
                if !opened.iter().any(|o| o.0 == d) {
                    opened.push((d, Gpu::open(d)?, None));
                }
            }
            let ia = opened.iter().position(|o| o.0 == a).expect("opened");
            if opened[ia].2.is_none() {
                let k = P2pKernels::load(&opened[ia].1, Build::Real)?;
                opened[ia].2 = Some(k);
            }
            let ib = opened.iter().position(|o| o.0 == b).expect("opened");
            let what = "zeroing the P2P probe target";
            let target = DeviceMem::zeroed(&opened[ib].1, PROBE_SLOT, PROBE_SLOT, what)?;
            let (ga, ka) = (&opened[ia].1, opened[ia].2.as_ref().expect("loaded"));
            let _peer = enable_peer(ga, b)?;
            let p = probe_into(ga, ka, target.ptr, &opened[ib].1, token(a, b));
            if p == Probe::Hung {
                // the kernel still writes the target: neither it nor the contexts may go
                std::mem::forget(target);
                leak = true;
            }
            ga.sync().ok();
            Ok(p)
        };
        step().unwrap_or_else(|e| Probe::Failed {
            error: format!("{e:#}"),
        })
    });
    if leak {
        std::mem::forget(opened);
    }
    let mut notes: Vec<String> = note.into_iter().collect();
    let probed = checks.iter().filter(|c| !c.cached).count();
    if probed > 0 {
        notes.push(format!(
            "P2P access checked for {probed} ordered GPU pairs (kept for this boot in '{}')",
            cache.path().display()
        ));
    }
    let buses: Vec<String> = gpus.into_iter().map(|g| g.1).collect();
    refuse(&checks, &buses, &cache)?;
    Ok((checks, notes))
}

/// The access check at connect: every peer on another GPU, from this boot's cache or probed now
/// through this rank's own mapping of the peer's workspace (its probe slot there, which only
/// this rank writes). A pair that fails refuses the connection (a usage error naming it).
/// `devices[r]` is rank r's GPU, `bases[r]` its workspace as this rank addresses it.
pub(super) fn check_peers(
    gpu: &Gpu,
    kernels: &P2pKernels,
    me: usize,
    devices: &[usize],
    bases: &[u64; MAX_RANKS],
) -> anyhow::Result<()> {
    let mine = devices[me];
    let mut peers: Vec<(usize, usize)> = vec![]; // (device, a rank on it)
    for (r, &d) in devices.iter().enumerate() {
        if d != mine && !peers.iter().any(|p| p.0 == d) {
            peers.push((d, r));
        }
    }
    if peers.is_empty() {
        return Ok(());
    }
    let my_bus = bus(mine);
    let mut cache = AccessCache::here();
    let (mut checks, mut new) = (vec![], vec![]);
    for (d, r) in peers {
        let to_bus = bus(d);
        let (probe, cached) = match cache.get(&my_bus, &to_bus) {
            Some(p) => (p.clone(), true),
            None => {
                let slot = bases[r] + (PROBES_OFF + me * PROBE_SLOT) as u64;
                let p = probe_into(gpu, kernels, slot, gpu, token(mine, d));
                new.push((my_bus.clone(), to_bus.clone(), p.clone()));
                (p, false)
            }
        };
        checks.push(PairCheck {
            from: mine,
            to: d,
            from_bus: my_bus.clone(),
            to_bus,
            probe,
            cached,
        });
    }
    // a cache that cannot be written costs a probe at the next connect, nothing else (the
    // launcher's check, which runs first, says so)
    let _ = cache.record(&new);
    let mut buses = vec![my_bus];
    buses.extend(checks.iter().map(|c| c.to_bus.clone()));
    refuse(&checks, &buses, &cache)
}

/// Every rank's largest grid on one GPU resident at once: a waiting block spins until its peers'
/// blocks signal, so the grids of the ranks sharing a GPU (virtual ranks; one otherwise) must
/// all fit it, one block per SM ([`super::kernels::resident_blocks`]; under MPS, the client's
/// share of the SMs), or a block waits for one that cannot start until it leaves. `here`: the
/// ranks on `device`.
pub(super) fn check_resident(
    kernels: &P2pKernels,
    here: u32,
    device: usize,
    max_blocks: u32,
) -> anyhow::Result<()> {
    let mps = std::env::var_os("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE").is_some();
    let fit = Residency {
        ranks: here,
        max_blocks,
        resident: kernels.resident(),
        blocks_per_sm: kernels.blocks_per_sm,
        sms: kernels.sms,
        mps,
    };
    fit.check(device).map_err(usage)
}

/// What the residency check compares.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Residency {
    /// Ranks on the GPU.
    pub(crate) ranks: u32,
    pub(crate) max_blocks: u32,
    /// Blocks the GPU holds at once ([`super::kernels::resident_blocks`]).
    pub(crate) resident: u32,
    pub(crate) blocks_per_sm: u32,
    pub(crate) sms: u32,
    /// `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` is set.
    pub(crate) mps: bool,
}

impl Residency {
    pub(crate) fn check(&self, device: usize) -> Result<(), String> {
        let need = self.ranks * self.max_blocks;
        if need <= self.resident {
            return Ok(());
        }
        let (cut, raise) = if self.mps {
            (
                ", cut to CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                ", or raise CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
            )
        } else {
            ("", "")
        };
        Err(format!(
            "P2P all-reduce: {} rank(s) on GPU {device} x {} blocks = {need} blocks, but GPU {device} starts {} waiting blocks for sure (one per SM of {}{cut}; {} per SM by the occupancy query, which grids of several streams that wait for each other do not get): a waiting block would spin while a peer's block cannot start. Run fewer ranks per GPU{raise}",
            self.ranks, self.max_blocks, self.resident, self.sms, self.blocks_per_sm
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words the kernel writes: kernels/allreduce.cu's formula, written out for token 1
    /// and 3 by hand.
    #[test]
    fn probe_words_follow_the_kernels_formula() {
        // token 1: 2654435761 ^ (i * 0x9e3779b9) ^ (i << 24)
        assert_eq!(probe_word(1, 0), 2_654_435_761);
        // i = 1: 0x9e3779b1 ^ 0x9e3779b9 ^ 0x01000000 = 0x00000008 ^ 0x01000000
        assert_eq!(probe_word(1, 1), 0x0100_0008);
        // token 3: 3 * 2654435761 = 7963307283 = 2^32 + 3668339987 -> 3668339987 (32 bits)
        assert_eq!(probe_word(3, 0), 3_668_339_987);
        // the CUDA source holds the same formula
        let src = super::super::kernels::ALLREDUCE_SRC;
        assert!(src.contains("return (token * 2654435761u) ^ (i * 0x9e3779b9u) ^ (i << 24);"));
        assert!(token(0, 1) & 1 == 1 && token(3, 2) != 0);
    }

    /// One block per SM: an H200's 132 SMs take 8 virtual ranks x 16 blocks = 128, not
    /// 8 x 32 = 256 (although the occupancy query says 4 per SM); under MPS at 25% the client
    /// gets floor(132 x 0.25) = 33 SMs, so 33 blocks.
    #[test]
    fn grids_must_be_resident_together() {
        use super::super::kernels::resident_blocks;
        assert_eq!(resident_blocks(4, 132, None), 132);
        assert_eq!(resident_blocks(4, 132, Some("25")), 33);
        assert_eq!(resident_blocks(4, 132, Some("100")), 132);
        assert_eq!(resident_blocks(4, 132, Some("x")), 132);
        // floor(132 x 0.001) = 0, at least one SM
        assert_eq!(resident_blocks(4, 132, Some("0.1")), 1);
        // a kernel that fits no block on an SM: nothing is resident
        assert_eq!(resident_blocks(0, 132, None), 0);
        let mut r = Residency {
            ranks: 8,
            max_blocks: 16,
            resident: 132,
            blocks_per_sm: 4,
            sms: 132,
            mps: false,
        };
        assert_eq!(r.check(0), Ok(()));
        r.max_blocks = 32;
        let e = r.check(3).unwrap_err();
        assert!(
            e.starts_with("P2P all-reduce: 8 rank(s) on GPU 3 x 32 blocks = 256 blocks, but GPU 3 starts 132 waiting blocks for sure (one per SM of 132;"),
            "{e}"
        );
        assert!(!e.contains("CUDA_MPS"), "{e}");
        r.resident = 33;
        r.mps = true;
        r.ranks = 2;
        let e = r.check(3).unwrap_err();
        assert!(
            e.contains("= 64 blocks") && e.contains("raise CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
            "{e}"
        );
        // exactly full still fits: 4 x 33 = 132
        r.resident = 132;
        r.ranks = 4;
        r.max_blocks = 33;
        assert_eq!(r.check(0), Ok(()));
    }

    #[test]
    fn a_probe_is_judged_by_the_kernel_and_by_the_peers_memory() {
        let tok = 0x1234_5679;
        let good: Vec<u32> = std::iter::once(tok)
            .chain((0..PROBE_WORDS as u32).map(|i| probe_word(tok, i)))
            .collect();
        assert_eq!(classify([0, 1], &good, tok), Probe::Ok);
        // the writer read everything back, but two words never reached the peer's memory
        let mut lost = good.clone();
        lost[5] = 0;
        lost[60] = 0;
        assert_eq!(
            classify([0, 1], &lost, tok),
            Probe::Wrong {
                through_mapping: 0,
                in_memory: 2
            }
        );
        // reads back wrong through the mapping
        assert_eq!(
            classify([3, 1], &good, tok),
            Probe::Wrong {
                through_mapping: 3,
                in_memory: 0
            }
        );
        // the flag never came back: dropped, whatever the memory holds
        assert_eq!(classify([0, 2], &vec![0; 64], tok), Probe::NoFlag);
        // a kernel that never wrote its status
        assert!(matches!(classify([0, 0], &good, tok), Probe::Failed { .. }));
        // a memory read that came back short counts the missing words as wrong
        assert_eq!(
            classify([0, 1], &good[..10], tok),
            Probe::Wrong {
                through_mapping: 0,
                in_memory: PROBE_WORDS as u32 - 9
            }
        );
    }
}
