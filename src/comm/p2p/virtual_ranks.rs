//! The P2P protocol proven on one GPU: N "virtual ranks", each with its own workspace and
//! stream on the same device, run the real kernels concurrently. Peer reads are then local
//! memory reads, so nothing here measures a link; what it proves is the protocol: signalling,
//! reuse of the buffers across many calls (epochs, eager and CUDA graph, one-shot and two-shot
//! interleaved), exact sums for bf16, f16 and f32 from 8 B to 4 MiB (element tails, unaligned
//! and in-place buffers), and that a rank that never launches is named within the timeout
//! instead of hanging the others.
//!
//! Residency: a waiting block spins until its peers' blocks signal, so all N grids must be on
//! the GPU at once. The grid cap is chosen so that N x cap blocks fit one block per SM
//! ([`super::kernels::resident_blocks`]: on one H200, 8 ranks x 24 blocks stalled although the
//! occupancy query allows 4 per SM); connecting refuses grids that do not. The checks enqueue
//! breadth-first: one step (a kernel, a copy, a graph replay) for every virtual rank before the
//! next step of any, so even where two streams share one hardware queue, nothing a kernel waits
//! for is queued behind an operation that waits for that kernel. The timings use one host
//! thread per rank, each on a stream of its own, as real ranks do, but in lockstep (a host
//! barrier before each call): free-running threads timed out now and then on one H200 (with
//! grids of 8 ranks x 32 blocks, before the cap of one block per SM; not run free since), so
//! the eager figure includes a host barrier per call. The graph timing
//! replays one 100-call graph per rank.

use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use super::peer::{copy_raw, download_raw, upload_raw};
use super::{Impl, P2pAllReduce, P2pConfig, SignalTimeout, Workspace};
use crate::comm::device::{Buffer, Gpu};
use crate::measure::pattern;
use crate::model::{CollectiveKind, DType};

/// One named check with its verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Check {
    pub(crate) name: String,
    pub(crate) pass: bool,
    pub(crate) detail: String,
}

/// Per-call time of one implementation on N virtual ranks of one GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct VirtualTiming {
    pub(crate) nranks: usize,
    pub(crate) imp: Impl,
    pub(crate) dtype: DType,
    pub(crate) bytes: usize,
    pub(crate) blocks: u32,
    /// Calls enqueued one by one, one host thread per virtual rank in lockstep (a host barrier
    /// before each call; the slowest rank), us per call.
    pub(crate) eager_us: f64,
    /// Calls replayed from one CUDA graph per virtual rank, us per call.
    pub(crate) graph_us: f64,
}

impl std::fmt::Display for VirtualTiming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "virtual ranks on one GPU: not a P2P measurement: {} {} B {}, {} ranks x {} blocks: eager {:.1} us, graph {:.1} us per call",
            self.imp,
            crate::units::grouped(self.bytes as u64),
            self.dtype.name(),
            self.nranks,
            self.blocks,
            self.eager_us,
            self.graph_us
        )
    }
}

/// Message sizes of the exactness checks, bytes (tails: 24 and 4100 are not multiples of 16).
const SIZES: [usize; 6] = [8, 24, 4100, 43008, 1 << 20, 4 << 20];
/// Elements of the reuse checks: the 43,008 B verify all-reduce plus a 3-element tail.
const REUSE_COUNT: usize = 21507;
/// Eager calls and graph replays of the reuse checks.
const REUSE_CALLS: usize = 60;
const REUSE_REPLAYS: usize = 30;
/// Timeout of the fault checks: short, since a rank is absent on purpose.
const FAULT_TIMEOUT: Duration = Duration::from_millis(200);

/// N ranks connected in this process: virtual ranks of one GPU, or one rank per GPU (the
/// stress test on several GPUs). Connecting checks that the grids fit the GPUs together.
pub(super) struct Group {
    // first: the connections drop (and free their workspaces) before the streams go
    pub(super) ars: Vec<P2pAllReduce>,
    pub(super) gpus: Vec<Gpu>,
}

impl Group {
    fn open(ordinal: usize, n: usize, cfg: P2pConfig) -> anyhow::Result<Group> {
        Group::open_on(&vec![ordinal; n], cfg)
    }

    /// Rank r on `devices[r]`.
    pub(super) fn open_on(devices: &[usize], cfg: P2pConfig) -> anyhow::Result<Group> {
        let n = devices.len();
        let gpus: Vec<Gpu> = devices
            .iter()
            .map(|&d| Gpu::open(d))
            .collect::<Result<_, _>>()?;
        let ws: Vec<Workspace> = gpus
            .iter()
            .enumerate()
            .map(|(r, g)| Workspace::new(g, r, n, cfg))
            .collect::<anyhow::Result<_>>()?;
        let handles: Vec<Vec<u8>> = ws.iter().map(Workspace::export).collect();
        let ars: Vec<P2pAllReduce> = ws
            .into_iter()
            .zip(&gpus)
            .map(|(w, g)| w.connect(g, &handles))
            .collect::<anyhow::Result<_>>()?;
        Ok(Group { ars, gpus })
    }

    pub(super) fn n(&self) -> usize {
        self.ars.len()
    }

    fn alloc(&self, bytes: usize) -> anyhow::Result<Vec<Buffer>> {
        self.gpus
            .iter()
            .map(|g| g.alloc(bytes).map_err(anyhow::Error::from))
            .collect()
    }

    /// Waits until every rank's stream is done, asking each in turn (`cuStreamQuery`) rather
    /// than waiting on one: ranks of one GPU share its context, and a wait on one stream
    /// leaves the launches of the others where they are, so a peer that rank waits for may
    /// never start. Returns after `limit` even if some stream is still busy.
    pub(super) fn wait_all(&self, limit: Duration) -> anyhow::Result<()> {
        let t0 = Instant::now();
        loop {
            let mut busy = false;
            for g in &self.gpus {
                busy |= !g.done()?;
            }
            if !busy || t0.elapsed() > limit {
                return Ok(());
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    /// Synchronises every rank and returns the first recorded timeout as an error, followed by
    /// every other rank's failed wait: who waited for whom, and how far each silent rank got,
    /// so that the rank that stopped first can be read off.
    pub(super) fn check(&self) -> anyhow::Result<()> {
        let (mut waits, mut other) = (Vec::<SignalTimeout>::new(), None);
        for (a, g) in self.ars.iter().zip(&self.gpus) {
            if let Err(e) = a.check(g) {
                match e.downcast::<SignalTimeout>() {
                    Ok(t) => waits.push(t),
                    Err(e) => other = other.or(Some(e)),
                }
            }
        }
        match (waits.len(), other) {
            (0, None) => Ok(()),
            (0, Some(e)) => Err(e),
            (1, _) => Err(waits.remove(0).into()),
            _ => {
                let rest: Vec<String> = waits[1..].iter().map(|t| t.to_string()).collect();
                anyhow::bail!("{}; and {}", waits[0], rest.join("; "))
            }
        }
    }
}

/// The grid cap for `n` virtual ranks on `ordinal`: every rank's largest grid resident at once.
pub(super) fn config_for(ordinal: usize, n: usize) -> anyhow::Result<P2pConfig> {
    let gpu = Gpu::open(ordinal)?;
    let k = super::kernels::P2pKernels::load(&gpu, super::Build::Real)?;
    let resident = k.resident();
    let cap = (resident / n as u32).min(32);
    if cap == 0 {
        anyhow::bail!(
            "GPU {ordinal} starts {resident} waiting blocks of {} threads for sure (one per SM): too few for {n} virtual ranks",
            super::THREADS
        );
    }
    Ok(P2pConfig {
        max_blocks: cap,
        ..P2pConfig::default()
    })
}

/// Runs every virtual-rank check for each N of `ranks` (2..=8) on GPU `gpu`. An error means the
/// checks could not start (no NVRTC, no GPU); a failed check is a `Check` with `pass: false`.
pub(crate) fn virtual_rank_checks(gpu: usize, ranks: &[usize]) -> anyhow::Result<Vec<Check>> {
    let mut out = vec![];
    for &n in ranks {
        let cfg = config_for(gpu, n)?;
        let group = Group::open(gpu, n, cfg);
        for imp in [Impl::OneShot, Impl::TwoShot] {
            let name = format!("p2p {n} virtual ranks: {imp} exact");
            out.push(verdict(
                name,
                group
                    .as_ref()
                    .map_err(clone_err)
                    .and_then(|g| exact(g, imp)),
            ));
        }
        let name = format!("p2p {n} virtual ranks: reuse, eager");
        out.push(verdict(
            name,
            group.as_ref().map_err(clone_err).and_then(reuse_eager),
        ));
        let name = format!("p2p {n} virtual ranks: reuse, graph");
        out.push(verdict(
            name,
            group.as_ref().map_err(clone_err).and_then(reuse_graph),
        ));
        drop(group);
        for imp in [Impl::OneShot, Impl::TwoShot] {
            let name = format!("p2p {n} virtual ranks: {imp}, rank {} absent", n - 1);
            let cfg = P2pConfig {
                timeout: FAULT_TIMEOUT,
                ..cfg
            };
            out.push(verdict(name, fault(gpu, n, cfg, imp)));
        }
    }
    Ok(out)
}

fn clone_err(e: &anyhow::Error) -> anyhow::Error {
    anyhow::anyhow!("{e:#}")
}

fn verdict(name: String, r: anyhow::Result<String>) -> Check {
    match r {
        Ok(detail) => Check {
            name,
            pass: true,
            detail,
        },
        Err(e) => Check::failed(name, &e),
    }
}

impl Check {
    /// A check that could not run or failed with `e` (its whole chain the detail).
    pub(super) fn failed(name: String, e: &anyhow::Error) -> Check {
        Check {
            name,
            pass: false,
            detail: format!("{e:#}"),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    Aligned,
    Unaligned,
    InPlace,
}

/// Every dtype x size x layout once: inputs of the exact pattern, outputs poisoned with NaN,
/// every element of every rank's output compared with the exact sum.
fn exact(g: &Group, imp: Impl) -> anyhow::Result<String> {
    let n = g.n();
    let cap = g.ars[0].config().staging_bytes();
    let ins = g.alloc(cap + 64)?;
    let outs = g.alloc(cap + 64)?;
    let (mut cases, mut elems) = (0usize, 0u64);
    for dtype in [DType::Bf16, DType::F16, DType::F32] {
        let size = dtype.size() as usize;
        for bytes in SIZES {
            let count = bytes / size;
            let layouts: &[Layout] = if bytes < (1 << 20) {
                &[Layout::Aligned, Layout::Unaligned, Layout::InPlace]
            } else {
                &[Layout::Aligned]
            };
            for &layout in layouts {
                exact_case(g, (&ins, &outs), imp, dtype, count, cases, layout)?;
                cases += 1;
                elems += (count * n) as u64;
            }
        }
    }
    Ok(format!(
        "{cases} cases (bf16/f16/f32, 8 B to 4 MiB, tails, unaligned, in place), {elems} elements exact, up to {} blocks",
        g.ars[0].blocks(imp, cap / 2, DType::Bf16)
    ))
}

/// One call of `imp` on `count` elements of `dtype` in `layout`, inputs of the exact pattern
/// with `salt` in `bufs.0`, outputs (poisoned first) in `bufs.1` (each large enough, with 64
/// bytes to spare for the unaligned layout): an error naming the rank and the count of wrong
/// elements unless every element of every rank's output is the exact sum.
fn exact_case(
    g: &Group,
    bufs: (&[Buffer], &[Buffer]),
    imp: Impl,
    dtype: DType,
    count: usize,
    salt: usize,
    layout: Layout,
) -> anyhow::Result<()> {
    let (ins, outs) = bufs;
    let n = g.n();
    let size = dtype.size() as usize;
    let (in_off, out_off) = match layout {
        Layout::Aligned | Layout::InPlace => (0u64, 0u64),
        Layout::Unaligned => (size as u64, 3 * size as u64),
    };
    let mut ptrs = vec![];
    for r in 0..n {
        let inp = ins[r].ptr() + in_off;
        let outp = if layout == Layout::InPlace {
            inp
        } else {
            outs[r].ptr() + out_off
        };
        let data = pattern::send_bytes(CollectiveKind::AllReduce, dtype, count, n, r, salt);
        upload_raw(&g.gpus[r], inp, &data)?;
        if layout != Layout::InPlace {
            g.gpus[r].fill(&outs[r], 0xFF)?;
        }
        ptrs.push((inp, outp));
    }
    for (r, &(inp, outp)) in ptrs.iter().enumerate() {
        g.ars[r].enqueue_raw(&g.gpus[r], imp, inp, outp, count, dtype)?;
    }
    g.check()?;
    for (r, &(_, outp)) in ptrs.iter().enumerate() {
        let got = download_raw(&g.gpus[r], outp, count * size)?;
        let wrong = pattern::count_wrong(CollectiveKind::AllReduce, dtype, count, n, r, salt, &got);
        if wrong > 0 {
            anyhow::bail!(
                "{wrong} of {count} elements wrong on rank {r}: {} {} B{}",
                dtype.name(),
                count * size,
                match layout {
                    Layout::Aligned => "",
                    Layout::Unaligned => ", unaligned buffers",
                    Layout::InPlace => ", in place",
                }
            );
        }
    }
    Ok(())
}

/// Three inputs per rank (salts 0, 1, 2) of `REUSE_COUNT` bf16 elements.
fn reuse_inputs(g: &Group) -> anyhow::Result<Vec<Vec<Buffer>>> {
    let n = g.n();
    let bytes = REUSE_COUNT * 2;
    let mut v = vec![];
    for r in 0..n {
        let mut per = vec![];
        for salt in 0..3 {
            let b = g.gpus[r].alloc(bytes)?;
            let data = pattern::send_bytes(
                CollectiveKind::AllReduce,
                DType::Bf16,
                REUSE_COUNT,
                n,
                r,
                salt,
            );
            upload_raw(&g.gpus[r], b.ptr(), &data)?;
            per.push(b);
        }
        v.push(per);
    }
    Ok(v)
}

/// Wrong elements in `calls` consecutive results of rank `r` stored in `hist`, result c
/// expected from input salt c % 3.
fn wrong_in_history(
    g: &Group,
    r: usize,
    hist: &Buffer,
    calls: usize,
) -> anyhow::Result<Vec<(usize, u64)>> {
    let bytes = REUSE_COUNT * 2;
    let all = download_raw(&g.gpus[r], hist.ptr(), calls * bytes)?;
    Ok((0..calls)
        .map(|c| {
            let w = pattern::count_wrong(
                CollectiveKind::AllReduce,
                DType::Bf16,
                REUSE_COUNT,
                g.n(),
                r,
                c % 3,
                &all[c * bytes..(c + 1) * bytes],
            );
            (c, w)
        })
        .filter(|(_, w)| *w > 0)
        .collect())
}

/// Eager calls alternating one-shot and two-shot on rotating inputs; every call's output is
/// copied aside and checked, so a call that read a peer's previous data is caught.
fn reuse_eager(g: &Group) -> anyhow::Result<String> {
    let n = g.n();
    let bytes = REUSE_COUNT * 2;
    let inputs = reuse_inputs(g)?;
    let outs = g.alloc(bytes)?;
    let hist = g.alloc(REUSE_CALLS * bytes)?;
    for c in 0..REUSE_CALLS {
        let imp = if c % 2 == 0 {
            Impl::OneShot
        } else {
            Impl::TwoShot
        };
        for r in 0..n {
            g.ars[r].enqueue(
                &g.gpus[r],
                imp,
                &inputs[r][c % 3],
                &outs[r],
                REUSE_COUNT,
                DType::Bf16,
            )?;
        }
        for r in 0..n {
            copy_raw(
                &g.gpus[r],
                hist[r].ptr() + (c * bytes) as u64,
                outs[r].ptr(),
                bytes,
            )?;
        }
    }
    g.check()?;
    for (r, h) in hist.iter().enumerate() {
        let bad = wrong_in_history(g, r, h, REUSE_CALLS)?;
        if let Some((c, w)) = bad.first() {
            anyhow::bail!(
                "rank {r}: {} of {REUSE_CALLS} calls wrong, first call {c} ({w} elements)",
                bad.len()
            );
        }
    }
    Ok(format!(
        "{REUSE_CALLS} calls, one-shot/two-shot alternating, 3 inputs rotating, every output exact"
    ))
}

/// Two CUDA graphs per rank (a one-shot call, a two-shot call, on one input buffer), replayed
/// with the input changed before each replay: the frozen kernel arguments reuse the workspace
/// and the epochs advance on the device.
fn reuse_graph(g: &Group) -> anyhow::Result<String> {
    let n = g.n();
    let bytes = REUSE_COUNT * 2;
    let inputs = reuse_inputs(g)?;
    let cur = g.alloc(bytes)?;
    let out_a = g.alloc(bytes)?;
    let out_b = g.alloc(bytes)?;
    let hist_a = g.alloc(REUSE_REPLAYS * bytes)?;
    let hist_b = g.alloc(REUSE_REPLAYS * bytes)?;
    let (mut one, mut two) = (vec![], vec![]);
    for r in 0..n {
        let (gpu, ar) = (&g.gpus[r], &g.ars[r]);
        one.push(gpu.capture(|| {
            ar.enqueue(
                gpu,
                Impl::OneShot,
                &cur[r],
                &out_a[r],
                REUSE_COUNT,
                DType::Bf16,
            )
        })?);
        two.push(gpu.capture(|| {
            ar.enqueue(
                gpu,
                Impl::TwoShot,
                &cur[r],
                &out_b[r],
                REUSE_COUNT,
                DType::Bf16,
            )
        })?);
    }
    for c in 0..REUSE_REPLAYS {
        for r in 0..n {
            copy_raw(&g.gpus[r], cur[r].ptr(), inputs[r][c % 3].ptr(), bytes)?;
        }
        for graph in &one {
            graph.launch()?;
        }
        for graph in &two {
            graph.launch()?;
        }
        let at = (c * bytes) as u64;
        for r in 0..n {
            copy_raw(&g.gpus[r], hist_a[r].ptr() + at, out_a[r].ptr(), bytes)?;
            copy_raw(&g.gpus[r], hist_b[r].ptr() + at, out_b[r].ptr(), bytes)?;
        }
    }
    g.check()?;
    for r in 0..n {
        for (what, h) in [("one-shot", &hist_a[r]), ("two-shot", &hist_b[r])] {
            let bad = wrong_in_history(g, r, h, REUSE_REPLAYS)?;
            if let Some((c, w)) = bad.first() {
                anyhow::bail!(
                    "rank {r}, {what}: {} of {REUSE_REPLAYS} replays wrong, first replay {c} ({w} elements)",
                    bad.len()
                );
            }
        }
    }
    Ok(format!(
        "{REUSE_REPLAYS} replays of a one-shot and a two-shot graph, input changed between replays, every output exact"
    ))
}

/// Rank n-1 never launches: every other rank must name it within the timeout, and the next
/// call on the failed workspace must return at once.
fn fault(gpu: usize, n: usize, cfg: P2pConfig, imp: Impl) -> anyhow::Result<String> {
    let g = Group::open(gpu, n, cfg)?;
    let silent = n - 1;
    let count = 21504;
    let ins = g.alloc(count * 2)?;
    let outs = g.alloc(count * 2)?;
    let t0 = Instant::now();
    for r in 0..silent {
        g.ars[r].enqueue(&g.gpus[r], imp, &ins[r], &outs[r], count, DType::Bf16)?;
    }
    let mut first = None;
    for r in 0..silent {
        match g.ars[r].fault(&g.gpus[r])? {
            Some(t) if t.silent == silent => {
                first.get_or_insert(t);
            }
            Some(t) => anyhow::bail!("rank {r} named the wrong rank: {t}"),
            None => anyhow::bail!("rank {r} finished although rank {silent} never launched"),
        }
    }
    let took = t0.elapsed();
    let t1 = Instant::now();
    g.ars[0].enqueue(&g.gpus[0], imp, &ins[0], &outs[0], count, DType::Bf16)?;
    let still = g.ars[0].fault(&g.gpus[0])?;
    let again = t1.elapsed();
    let limit = cfg.timeout + Duration::from_secs(2);
    if took > limit {
        anyhow::bail!(
            "the waiting ranks took {:.2} s (limit {:.1} s)",
            took.as_secs_f64(),
            limit.as_secs_f64()
        );
    }
    if still.is_none() || again > cfg.timeout / 2 {
        anyhow::bail!(
            "the call after the failure ran {:.1} ms and {} the error",
            again.as_secs_f64() * 1e3,
            if still.is_some() { "kept" } else { "lost" }
        );
    }
    let first = first.expect("at least one waiting rank");
    Ok(format!(
        "{} ({silent} of {silent} ranks named it in {:.2} s; next call returned in {:.1} ms)",
        first,
        took.as_secs_f64(),
        again.as_secs_f64() * 1e3
    ))
}

/// Times `imp` on `count` bf16 elements per call for each N of `ranks`: eager (one host thread
/// per virtual rank) and CUDA graph. Virtual ranks share one GPU's memory, so these numbers
/// say what the kernel and its signalling cost there, not what a link costs.
pub(crate) fn virtual_rank_timings(
    gpu: usize,
    ranks: &[usize],
    imp: Impl,
    count: usize,
) -> anyhow::Result<Vec<VirtualTiming>> {
    let mut out = vec![];
    for &n in ranks {
        let cfg = config_for(gpu, n)?;
        let g = Group::open(gpu, n, cfg)?;
        out.push(time_group(&g, gpu, imp, count, DType::Bf16)?);
    }
    Ok(out)
}

/// One shape's exact check and, when it passed, its timing on virtual ranks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ShapeOnVirtualRanks {
    pub(crate) imp: Impl,
    pub(crate) count: usize,
    pub(crate) exact: Check,
    /// `None` when the exact check failed (nothing wrong is timed).
    pub(crate) timing: Option<VirtualTiming>,
}

/// Each of `imps` at each element count of `counts` (of `dtype`) on `n` virtual ranks of GPU
/// `gpu`, one group for all: the exact check of one call first (inputs of the exact pattern,
/// outputs poisoned, every element of every rank compared with the exact sum), then, only when
/// it passed, the eager and graph timing of [`virtual_rank_timings`]. Not a P2P measurement:
/// the peers' memory is this GPU's.
pub(crate) fn virtual_rank_shapes(
    gpu: usize,
    n: usize,
    imps: &[Impl],
    counts: &[usize],
    dtype: DType,
) -> anyhow::Result<Vec<ShapeOnVirtualRanks>> {
    let cfg = config_for(gpu, n)?;
    let g = Group::open(gpu, n, cfg)?;
    let largest = counts.iter().copied().max().unwrap_or(1) * dtype.size() as usize;
    let ins = g.alloc(largest + 64)?;
    let outs = g.alloc(largest + 64)?;
    let mut out = vec![];
    for (i, &count) in counts.iter().enumerate() {
        for &imp in imps {
            let name = format!(
                "p2p {n} virtual ranks: {imp} exact, {} B {}",
                crate::units::grouped((count * dtype.size() as usize) as u64),
                dtype.name()
            );
            let checked = exact_case(&g, (&ins, &outs), imp, dtype, count, i, Layout::Aligned)
                .map(|()| format!("{count} elements x {n} ranks exact"));
            let exact = verdict(name, checked);
            let timing = if exact.pass {
                Some(time_group(&g, gpu, imp, count, dtype)?)
            } else {
                None
            };
            out.push(ShapeOnVirtualRanks {
                imp,
                count,
                exact,
                timing,
            });
        }
    }
    Ok(out)
}

/// The eager and graph timing of `imp` on `count` elements of `dtype` per call on the open
/// group `g` of virtual ranks of GPU `gpu`.
fn time_group(
    g: &Group,
    gpu: usize,
    imp: Impl,
    count: usize,
    dtype: DType,
) -> anyhow::Result<VirtualTiming> {
    const EAGER: usize = 200;
    const GRAPH: usize = 100;
    let n = g.n();
    let bytes = count * dtype.size() as usize;
    let ins = g.alloc(bytes)?;
    let outs = g.alloc(bytes)?;
    let call = |r: usize| g.ars[r].enqueue(&g.gpus[r], imp, &ins[r], &outs[r], count, dtype);
    for _ in 0..20 {
        for r in 0..n {
            call(r)?;
        }
    }
    g.check()?;
    let eager = time_eager(g, gpu, imp, (&ins, &outs), count, dtype, EAGER)
        .with_context(|| format!("{n} virtual ranks, eager timing"))?;
    g.check()
        .with_context(|| format!("{n} virtual ranks, eager timing"))?;
    let mut graphs = vec![];
    for r in 0..n {
        graphs.push(g.gpus[r].capture(|| {
            for _ in 0..GRAPH {
                call(r)?;
            }
            Ok(())
        })?);
    }
    for gr in &graphs {
        gr.launch()?; // warm-up replay, every rank before any timed one
    }
    let mut events = vec![];
    for (r, gr) in graphs.iter().enumerate() {
        let gpu = &g.gpus[r];
        let (a, b) = (gpu.event()?, gpu.event()?);
        gpu.record(&a)?;
        gr.launch()?;
        gpu.record(&b)?;
        events.push((a, b));
    }
    g.check()
        .with_context(|| format!("{n} virtual ranks, graph timing"))?;
    let mut graph_us = 0f64;
    for (a, b) in &events {
        graph_us = graph_us.max(a.elapsed_us(b)? / GRAPH as f64);
    }
    Ok(VirtualTiming {
        nranks: n,
        imp,
        dtype,
        bytes,
        blocks: g.ars[0].blocks(imp, count, dtype),
        eager_us: eager.iter().cloned().fold(0.0, f64::max),
        graph_us,
    })
}

/// `calls` eager calls of `imp` per virtual rank, one host thread per rank in lockstep: each
/// rank's us per call.
fn time_eager(
    g: &Group,
    gpu: usize,
    imp: Impl,
    bufs: (&[Buffer], &[Buffer]),
    count: usize,
    dtype: DType,
    calls: usize,
) -> anyhow::Result<Vec<f64>> {
    let n = g.n();
    let barrier = std::sync::Barrier::new(n);
    // A `Gpu` stays in its thread: each timing thread opens its own handle on the same
    // device (the same primary context, so the connection's kernels and mappings are valid
    // there) with its own stream; the warm-up has finished on the group's streams.
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let (barrier, ar, input, output) = (&barrier, &g.ars[r], &bufs.0[r], &bufs.1[r]);
                s.spawn(move || -> anyhow::Result<f64> {
                    let setup = || -> anyhow::Result<_> {
                        let gpu = Gpu::open(gpu)?;
                        let events = (gpu.event()?, gpu.event()?);
                        Ok((gpu, events))
                    };
                    let setup = setup();
                    // Every thread reaches every barrier, even one that failed: the others
                    // would wait for it forever.
                    barrier.wait();
                    let (gpu, (a, b)) = match setup {
                        Ok(x) => x,
                        Err(e) => {
                            for _ in 0..calls {
                                barrier.wait();
                            }
                            return Err(e);
                        }
                    };
                    let mut failed = gpu.record(&a).err().map(anyhow::Error::from);
                    for _ in 0..calls {
                        // Lockstep: call k of every rank is enqueued before call k + 1 of
                        // any, so that where two of these fresh streams share a hardware
                        // queue no kernel sits behind a peer's next call that waits for it.
                        barrier.wait();
                        if failed.is_none() {
                            failed = ar.enqueue(&gpu, imp, input, output, count, dtype).err();
                        }
                    }
                    if let Some(e) = failed {
                        return Err(e);
                    }
                    gpu.record(&b)?;
                    gpu.sync()?;
                    Ok(a.elapsed_us(&b)? / calls as f64)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("timing thread panicked")))
            })
            .collect::<anyhow::Result<Vec<f64>>>()
    })
}
