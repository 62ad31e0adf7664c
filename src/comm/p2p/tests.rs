//! Tests of the P2P code that need no GPU: names, partitions, layout agreement with the kernel
//! source, handles, exchanges, and a CPU model of the signalling protocol.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::kernels::{PeersArg, ALLREDUCE_SRC};
use super::peer::Handle;
use super::*;

/// Vectors `[lo, hi)` of partition `p` of `parts` that block `b` of `g` handles (the kernel's
/// `block_range`, mirrored for the tests that prove every vector is handled exactly once).
fn block_range(nvec: u64, parts: u64, p: u64, b: u64, g: u64) -> (u64, u64) {
    let per = nvec.div_ceil(parts);
    let plo = p * per;
    let phi = (plo + per).min(nvec);
    let chunk = per.div_ceil(g);
    let lo = plo + b * chunk;
    let hi = (lo + chunk).min(phi);
    (lo.min(hi), hi)
}

#[test]
fn impl_names_and_lists() {
    for i in Impl::ALL {
        assert_eq!(i.name().parse::<Impl>().unwrap(), i);
    }
    assert_eq!("One-Shot".parse::<Impl>().unwrap(), Impl::OneShot);
    assert_eq!(
        Impl::parse_list("nccl, twoshot,oneshot,nccl").unwrap(),
        vec![Impl::Nccl, Impl::TwoShot, Impl::OneShot]
    );
    let e = Impl::parse_list("nccl,threeshot").unwrap_err();
    assert_eq!(crate::error::exit_code(&e), 2);
    let msg = e.to_string();
    assert!(msg.contains("--impl") && msg.contains("threeshot"), "{msg}");
    assert!(msg.contains("nccl, oneshot, twoshot"), "{msg}");
    assert_eq!(
        crate::error::exit_code(&Impl::parse_list(" , ").unwrap_err()),
        2
    );
    assert!(!Impl::Nccl.is_p2p() && Impl::OneShot.is_p2p());
    // records spell them as the flag does
    assert_eq!(
        serde_json::to_string(&Impl::TwoShot).unwrap(),
        "\"twoshot\""
    );
    assert_eq!(
        serde_json::from_str::<Impl>("\"oneshot\"").unwrap(),
        Impl::OneShot
    );
}

/// `#define NAME value` of the kernel source.
fn define(name: &str) -> u64 {
    let line = ALLREDUCE_SRC
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(name) && l.starts_with("#define"))
        .unwrap_or_else(|| panic!("no #define {name} in allreduce.cu"));
    let v = line.split_whitespace().nth(2).unwrap();
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h.trim_end_matches('u'), 16).unwrap(),
        None => v.trim_end_matches('u').parse().unwrap(),
    }
}

#[test]
fn layout_agrees_with_the_kernel_source() {
    assert_eq!(define("MAXR"), MAX_RANKS as u64);
    assert_eq!(define("MAXB"), MAX_BLOCKS as u64);
    assert_eq!(define("THREADS"), THREADS as u64);
    assert_eq!(define("ROUNDS"), ROUNDS as u64);
    assert_eq!(define("FLAGS_OFF"), FLAGS_OFF as u64);
    assert_eq!(define("EPOCHS_OFF"), EPOCHS_OFF as u64);
    assert_eq!(define("ERRORS_OFF"), ERRORS_OFF as u64);
    assert_eq!(define("PROBES_OFF"), PROBES_OFF as u64);
    assert_eq!(define("DATA_OFF"), DATA_OFF as u64);
    assert_eq!(define("PROBE_WORDS"), PROBE_WORDS as u64);
    // the poller is a thread of its own, outside the waiters (threads 0..MAXR) and inside the
    // barrier's block of 64 threads
    assert!(define("POLLER") >= MAX_RANKS as u64 && define("POLLER") < 64);
    // flags and epochs are 64 bits wide: no wrap rule needed
    assert!(ALLREDUCE_SRC.contains("st.release.sys.global.u64"));
    assert!(ALLREDUCE_SRC.contains("ld.acquire.sys.global.u64"));
    assert!(ALLREDUCE_SRC.contains("while (ld_acquire_sys(slot) < epoch)"));
    assert_eq!(define("ERR_TIMEOUT"), ERR_TIMEOUT as u64);
    assert_eq!(define("ERR_STOPPED"), ERR_STOPPED as u64);
    assert_eq!(ERR_STOPPED & ERR_TIMEOUT, 0);
    // struct Peers: 8 bases, capacity, timeout, rank, nranks, the stop word's address
    assert_eq!(std::mem::size_of::<PeersArg>(), 8 * 8 + 8 + 8 + 4 * 2 + 8);
    assert_eq!(std::mem::offset_of!(PeersArg, stop), 88);
    assert!(ALLREDUCE_SRC.contains("    u32 nranks;\n    u64 stop;"));
    assert!(ALLREDUCE_SRC.contains("u64 base[MAXR];"));
    // never NVLink multicast: no multimem instruction, no multicast object
    assert!(!ALLREDUCE_SRC.contains("multimem."));
    for f in [include_str!("peer.rs"), include_str!("kernels.rs")] {
        assert!(!f.contains(&["cuMulti", "cast"].concat()));
    }
}

#[test]
fn every_vector_is_handled_exactly_once() {
    for nvec in [0u64, 1, 2, 7, 8, 63, 64, 65, 1000, 2688, 4099] {
        for parts in [1u64, 2, 3, 4, 8] {
            for g in [1u64, 2, 3, 5, 32, 64] {
                let mut seen = vec![0u8; nvec as usize];
                for p in 0..parts {
                    let per = nvec.div_ceil(parts);
                    for b in 0..g {
                        let (lo, hi) = block_range(nvec, parts, p, b, g);
                        assert!(lo <= hi && hi <= nvec);
                        // inside partition p
                        assert!(lo >= (p * per).min(nvec) && hi <= ((p + 1) * per).min(nvec));
                        for i in lo..hi {
                            seen[i as usize] += 1;
                        }
                    }
                }
                assert!(
                    seen.iter().all(|&x| x == 1),
                    "nvec {nvec} parts {parts} g {g}"
                );
            }
        }
    }
}

#[test]
fn grids_are_small_and_the_same_for_every_rank() {
    // 43,008 B bf16 = 2,688 vectors: one-shot 3 blocks of 1,024 vectors; two-shot on 8 ranks
    // 336 vectors per partition, one block
    assert_eq!(blocks(Impl::OneShot, 21504, DType::Bf16, 8, 32), 3);
    assert_eq!(blocks(Impl::TwoShot, 21504, DType::Bf16, 8, 32), 1);
    assert_eq!(blocks(Impl::TwoShot, 21504, DType::Bf16, 2, 32), 2);
    assert_eq!(blocks(Impl::OneShot, 1, DType::F32, 2, 32), 1);
    assert_eq!(blocks(Impl::OneShot, 2 << 20, DType::Bf16, 2, 32), 32);
    assert_eq!(
        blocks(Impl::OneShot, 2 << 20, DType::Bf16, 2, 500),
        MAX_BLOCKS
    );
    assert_eq!(blocks(Impl::OneShot, 2 << 20, DType::Bf16, 2, 0), 1);
}

#[test]
fn sizes_an_implementation_refuses() {
    let cfg = P2pConfig::default();
    assert!(supports(Impl::OneShot, 1, DType::Bf16, 2, &cfg).is_ok());
    assert!(supports(Impl::TwoShot, 21507, DType::F16, 8, &cfg).is_ok());
    assert!(supports(Impl::TwoShot, 2 << 20, DType::Bf16, 8, &cfg).is_ok());
    let e = supports(Impl::OneShot, (2 << 20) + 1, DType::Bf16, 2, &cfg).unwrap_err();
    assert!(e.contains("4194304 B"), "{e}");
    assert!(supports(Impl::OneShot, 8, DType::F32, 9, &cfg).is_err());
    assert!(supports(Impl::OneShot, 8, DType::F32, 1, &cfg).is_err());
    assert!(supports(Impl::Nccl, 8, DType::F32, 2, &cfg).is_err());
    assert_eq!(cfg.workspace_bytes(), DATA_OFF + 3 * (4 << 20));
    let bad = P2pConfig {
        max_blocks: 65,
        ..cfg
    };
    assert_eq!(crate::error::exit_code(&bad.validate().unwrap_err()), 2);
}

#[test]
fn handles_round_trip_and_foreign_bytes_are_refused() {
    let h = Handle {
        host: 0x1234_5678_9abc_def0,
        pid: 4242,
        device: 3,
        rank: 2,
        nranks: 8,
        capacity: 4 << 20,
        max_blocks: 32,
        timeout_ns: 10_000_000_000,
        ptr: 0x7f00_0000_0000,
        ipc: Some([7; 64]),
        nonce: 0xfeed_beef_0000_0001,
    };
    let b = h.encode();
    assert_eq!(Handle::decode(&b).unwrap(), h);
    assert_eq!(from_hex(&to_hex(&b)).unwrap(), b);
    let none = Handle {
        ipc: None,
        ..h.clone()
    };
    assert_eq!(Handle::decode(&none.encode()).unwrap().ipc, None);
    let mut bad = b.clone();
    bad[0] = b'X';
    assert!(Handle::decode(&bad).is_err());
    assert!(Handle::decode(&b[..100]).is_err());
    assert!(from_hex("abc").is_err() && from_hex("zz").is_err());
}

#[test]
fn a_timeout_names_the_silent_rank_and_the_gpus() {
    // rank 3 had entered 16 calls when rank 0 gave up waiting in call 17
    let words = [ERR_TIMEOUT | (1 << 8) | 3, 17, 2, 0, 16, 0];
    let t = SignalTimeout::decode(words, 0, &[4, 5, 6, 7], Duration::from_millis(200)).unwrap();
    assert_eq!(
        (t.silent, t.round, t.call, t.block, t.entered),
        (3, 1, 17, 2, 16)
    );
    // the epoch's high bits travel in the fourth word, the peer's in the sixth: call 2^32 + 5,
    // the peer in it too
    let high = [ERR_TIMEOUT | 1, 5, 0, 1, 5, 1];
    let t2 = SignalTimeout::decode(high, 0, &[0, 1], Duration::from_secs(1)).unwrap();
    assert_eq!((t2.call, t2.entered), ((1u64 << 32) + 5, (1u64 << 32) + 5));
    let s = t.to_string();
    assert!(
        s.starts_with("rank 3 never signalled rank 0 within 200 ms (GPU 4 <- GPU 7;"),
        "{s}"
    );
    assert!(s.contains("all-gather") && s.contains("call 17"), "{s}");
    // a peer behind: its kernel never started; a peer in the call: it waited too
    assert!(
        s.contains("rank 3 had entered 16 calls: its kernel of call 17 never started"),
        "{s}"
    );
    assert!(
        t2.to_string()
            .ends_with("rank 1 was in call 4294967301 itself: it waited too"),
        "{t2}"
    );
    assert_eq!(
        SignalTimeout::decode([0; 6], 0, &[0, 1], Duration::from_secs(1)),
        None
    );
    // a wait the host stopped is not a timeout: no rank is named as silent
    let stopped = [ERR_STOPPED | (2 << 8) | 1, 5, 0, 0, 0, 0];
    assert_eq!(
        SignalTimeout::decode(stopped, 0, &[0, 1], Duration::from_secs(1)),
        None
    );
}

#[test]
fn unavailable_names_what_is_skipped() {
    let u = peer::P2pUnavailable {
        reason: "GPU 0 cannot access GPU 1 (P2P disabled or across sockets without P2P)".into(),
    };
    assert_eq!(
        u.skipped(&[Impl::Nccl, Impl::OneShot]),
        "GPU 0 cannot access GPU 1 (P2P disabled or across sockets without P2P): oneshot skipped"
    );
    let off = peer::p2p_disabled(Some("1".into())).unwrap();
    assert!(off.reason.starts_with("NCCL_P2P_DISABLE=1 is set"), "{off}");
    assert!(peer::p2p_disabled(Some("0".into())).is_none());
    assert!(peer::p2p_disabled(None).is_none());
    assert!(check_topology(&[0]).is_err());
    assert!(check_topology(&[0; 9]).is_err());
}

#[test]
fn in_process_exchange_gives_everyone_all_and_names_the_missing() {
    let ex = InProcessExchange::new(3);
    let got: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3)
            .map(|r| {
                let ex = ex.clone();
                s.spawn(move || {
                    ex.exchange(r, vec![r as u8; 4], Duration::from_secs(5))
                        .unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for g in &got {
        assert_eq!(g, &vec![vec![0u8; 4], vec![1; 4], vec![2; 4]]);
    }
    let lone = InProcessExchange::new(3);
    let e = lone
        .exchange(1, vec![1], Duration::from_millis(50))
        .unwrap_err()
        .to_string();
    assert!(e.contains("rank(s) 0, 2"), "{e}");
}

#[test]
fn file_exchange_through_a_job_folder() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let got: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|r| {
                s.spawn(move || {
                    file_exchange(dir, "job-1", r, 2, &[r as u8, 9], Duration::from_secs(5))
                        .unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(got[0], vec![vec![0u8, 9], vec![1, 9]]);
    assert_eq!(got[0], got[1]);
    // another job's files in the same folder are not this job's
    let e = file_exchange(dir, "job-2", 0, 2, &[1], Duration::from_millis(50))
        .unwrap_err()
        .to_string();
    assert!(e.contains("rank(s) 1") && e.contains("within"), "{e}");
    assert!(file_exchange(dir, "../x", 0, 2, &[1], Duration::from_millis(1)).is_err());
}

// ---- a CPU model of the kernel's protocol -----------------------------------------------------
//
// Ranks are threads, a call's blocks are threads joined at the end of the call (the stream
// order between kernels), flags are 64-bit Release stores and Acquire loads, data are Relaxed. The
// model follows allreduce.cu step by step (lock-step epochs, staging halves by epoch parity,
// result buffer, the same block_range), with integer sums so any stale or torn read shows, and
// random pauses so that ranks run ahead of each other and calls of different grids interleave.

const SIM_MAXB: usize = 4;

struct SimRank {
    flags: Vec<AtomicU64>,
    epochs: Vec<AtomicU64>,
    staging: Vec<AtomicU32>,
    result: Vec<AtomicU32>,
}

fn slot(round: usize, b: usize, src: usize) -> usize {
    (round * SIM_MAXB + b) * MAX_RANKS + src
}

fn pause(seed: &mut u64) {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    match *seed % 8 {
        0 => std::thread::sleep(Duration::from_micros(*seed % 200)),
        1 | 2 => std::thread::yield_now(),
        _ => {}
    }
}

fn input(rank: usize, call: usize, i: u64) -> u32 {
    (rank as u32 + 1) * 1_000_000 + call as u32 * 1000 + i as u32
}

#[allow(clippy::too_many_arguments)]
fn sim_block(
    ranks: &[SimRank],
    me: usize,
    imp: Impl,
    nvec: u64,
    cap: usize,
    call: usize,
    b: usize,
    g: usize,
    out: &[AtomicU32],
    seed: &mut u64,
) {
    let n = ranks.len();
    let mine = &ranks[me];
    let e = mine.epochs[b].load(Ordering::Relaxed) + 1;
    for j in (b..SIM_MAXB).step_by(g) {
        mine.epochs[j].store(e, Ordering::Relaxed);
    }
    let half = (e as usize & 1) * cap;
    let exchange = |round: usize, seed: &mut u64| {
        for (p, peer) in ranks.iter().enumerate() {
            if p != me {
                peer.flags[slot(round, b, me)].store(e, Ordering::Release);
            }
        }
        for p in (0..n).filter(|&p| p != me) {
            let t0 = std::time::Instant::now();
            while mine.flags[slot(round, b, p)].load(Ordering::Acquire) < e {
                // a limit that only catches a peer that never comes
                assert!(
                    t0.elapsed() < Duration::from_secs(300),
                    "rank {me} waits forever for {p}"
                );
                pause(seed);
            }
        }
    };
    let parts = if imp == Impl::TwoShot { n as u64 } else { 1 };
    for p in 0..parts {
        let (lo, hi) = block_range(nvec, parts, p, b as u64, g as u64);
        for i in lo..hi {
            mine.staging[half + i as usize].store(input(me, call, i), Ordering::Relaxed);
            pause(seed);
        }
    }
    exchange(0, seed);
    let sum = |i: u64, seed: &mut u64| {
        let mut s = 0u32;
        for r in ranks {
            s = s.wrapping_add(r.staging[half + i as usize].load(Ordering::Relaxed));
            pause(seed);
        }
        s
    };
    if imp == Impl::OneShot {
        let (lo, hi) = block_range(nvec, 1, 0, b as u64, g as u64);
        for i in lo..hi {
            out[i as usize].store(sum(i, seed), Ordering::Relaxed);
        }
        return;
    }
    let (lo, hi) = block_range(nvec, parts, me as u64, b as u64, g as u64);
    for i in lo..hi {
        let v = sum(i, seed);
        mine.result[i as usize].store(v, Ordering::Relaxed);
        out[i as usize].store(v, Ordering::Relaxed);
    }
    exchange(1, seed);
    for p in (0..n).filter(|&p| p != me) {
        let (lo, hi) = block_range(nvec, parts, p as u64, b as u64, g as u64);
        for i in lo..hi {
            out[i as usize].store(
                ranks[p].result[i as usize].load(Ordering::Relaxed),
                Ordering::Relaxed,
            );
            pause(seed);
        }
    }
}

#[test]
fn protocol_model_never_reads_stale_or_overwritten_data() {
    let cap = 64usize;
    for n in [2usize, 3, 4] {
        let ranks: Vec<SimRank> = (0..n)
            .map(|_| SimRank {
                flags: (0..ROUNDS * SIM_MAXB * MAX_RANKS)
                    .map(|_| AtomicU64::new(0))
                    .collect(),
                epochs: (0..SIM_MAXB).map(|_| AtomicU64::new(0)).collect(),
                staging: (0..2 * cap).map(|_| AtomicU32::new(0)).collect(),
                result: (0..cap).map(|_| AtomicU32::new(0)).collect(),
            })
            .collect();
        let ranks = Arc::new(ranks);
        // the same call sequence on every rank: implementation, length and grid vary
        let calls: Vec<(Impl, u64, usize)> = (0..40)
            .map(|c| {
                let imp = if c % 3 == 1 {
                    Impl::TwoShot
                } else {
                    Impl::OneShot
                };
                let nvec = [64u64, 5, 33, 1, 48][c % 5];
                (imp, nvec, 1 + (c * 7) % SIM_MAXB)
            })
            .collect();
        std::thread::scope(|s| {
            for me in 0..n {
                let (ranks, calls) = (ranks.clone(), &calls);
                s.spawn(move || {
                    let out: Vec<AtomicU32> = (0..cap).map(|_| AtomicU32::new(0)).collect();
                    for (call, &(imp, nvec, g)) in calls.iter().enumerate() {
                        std::thread::scope(|blocks| {
                            for b in 0..g {
                                let (ranks, out) = (&ranks, &out);
                                blocks.spawn(move || {
                                    let mut seed = 0x9e37_79b9_7f4a_7c15u64
                                        ^ ((me * 131 + call * 7 + b) as u64 + 1);
                                    sim_block(ranks, me, imp, nvec, cap, call, b, g, out, &mut seed)
                                });
                            }
                        });
                        for i in 0..nvec {
                            let want = (0..n).fold(0u32, |s, r| s.wrapping_add(input(r, call, i)));
                            assert_eq!(
                                out[i as usize].load(Ordering::Relaxed),
                                want,
                                "n {n} rank {me} call {call} ({imp}) element {i}"
                            );
                        }
                    }
                });
            }
        });
    }
}

#[test]
fn each_all_reduce_carries_its_own_bus_factor() {
    use crate::model::CollectiveKind::{AllGather, AllReduce};
    // 8 ranks, a 43,008 B message (the verify step's all-reduce) in 10 us: algbw 4.3008 GB/s.
    let (n, bytes, us) = (8usize, 43_008.0f64, 10.0f64);
    let alg = bytes / (us * 1e3);
    // one-shot: each rank reads the 7 other ranks' whole messages: 7 x 43,008 B in 10 us
    let one = alg * bus_factor(Impl::OneShot, AllReduce, n);
    assert!((one - 7.0 * 43_008.0 / 10e3).abs() < 1e-9, "{one}");
    // two-shot and NCCL's ring: 2 x 7/8 of the message per rank: 75,264 B in 10 us
    for imp in [Impl::TwoShot, Impl::Nccl] {
        let bus = alg * bus_factor(imp, AllReduce, n);
        assert!((bus - 75_264.0 / 10e3).abs() < 1e-9, "{imp}: {bus}");
    }
    // two ranks: one-shot reads the one peer's message (1), the ring 2 x 1/2 (also 1)
    assert_eq!(bus_factor(Impl::OneShot, AllReduce, 2), 1.0);
    assert_eq!(bus_factor(Impl::TwoShot, AllReduce, 2), 1.0);
    // one rank moves nothing over a link
    assert_eq!(bus_factor(Impl::OneShot, AllReduce, 1), 0.0);
    // collectives the P2P kernels do not run keep NCCL's factor: all-gather 7/8
    assert_eq!(bus_factor(Impl::OneShot, AllGather, n), 7.0 / 8.0);
}
