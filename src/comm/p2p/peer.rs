//! Peer memory for the P2P all-reduces: this rank's workspace, the handle bytes that name it to
//! the other ranks, peer access between the contexts of one process, CUDA IPC between
//! processes, and the exchanges that carry the handles.
//!
//! Every unsafe driver call of the P2P code lives in this file, `mem.rs` or `kernels.rs`, each
//! with the reason it is sound.

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use cudarc::driver::sys::{self as cu, CUdeviceptr};
use cudarc::driver::CudaContext;

use super::kernels::{P2pKernels, PeersArg};
pub(super) use super::mem::{copy_raw, download_raw, upload_raw};
use super::mem::{enable_peer, process_nonce, DeviceMem, Origin, PeerCtx};
use super::probe::{check_peers, check_resident};
use super::{
    supports, Impl, P2pConfig, SignalTimeout, DATA_OFF, ERRORS_OFF, ERROR_WORDS, ERR_STOPPED,
    MAX_RANKS,
};
use crate::comm::device::{check, device_handle, Buffer, Gpu};
use crate::error::usage;
use crate::model::DType;

/// One word of pinned host memory mapped into the device: the host's way to end every P2P wait
/// of a connection at once (kernels/allreduce.cu reads it every 64 spins). Raised when the run
/// fails elsewhere, so that a rank whose peer will never signal leaves its kernels within
/// microseconds instead of after the signal timeout. Host memory, not device memory: raising it
/// is a plain store that needs no CUDA call, no stream and no working context.
struct StopWord {
    host: *mut u32,
    dev: CUdeviceptr,
    /// The context it was allocated in (bound again to free it).
    ctx: Arc<CudaContext>,
}

// SAFETY: the word is pinned host memory owned by this value until its drop; the host touches
// it only through `AtomicU32` (raise, read), so sharing and sending it between threads is sound.
unsafe impl Send for StopWord {}
unsafe impl Sync for StopWord {}

impl StopWord {
    fn new(gpu: &Gpu) -> anyhow::Result<StopWord> {
        gpu.bind()?;
        let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
        let flags = cu::CU_MEMHOSTALLOC_PORTABLE | cu::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: host is a valid out-pointer for 4 bytes of pinned memory, freed by Drop.
        let r = unsafe { cu::cuMemHostAlloc(&mut host, 4, flags) };
        check(gpu.ordinal, "cuMemHostAlloc of the P2P stop word", r)?;
        // owned from here: an error below frees it
        let word = StopWord {
            host: host.cast(),
            dev: 0,
            ctx: gpu.ctx.clone(),
        };
        // SAFETY: host points at 4 bytes of pinned memory just allocated, 4-byte aligned (pinned
        // allocations are page-aligned); nothing else knows the word yet.
        unsafe { AtomicU32::from_ptr(word.host).store(0, Ordering::SeqCst) };
        let mut word = word;
        // SAFETY: dev is a valid out-pointer; host is a DEVICEMAP allocation of this process.
        let r = unsafe { cu::cuMemHostGetDevicePointer_v2(&mut word.dev, host, 0) };
        check(gpu.ordinal, "mapping the P2P stop word", r)?;
        Ok(word)
    }

    fn word(&self) -> &AtomicU32 {
        // SAFETY: host points at a live, aligned u32 of pinned memory for as long as self lives,
        // and every host access goes through this atomic.
        unsafe { AtomicU32::from_ptr(self.host) }
    }

    fn raise(&self) {
        self.word().store(1, Ordering::SeqCst);
    }
}

impl Drop for StopWord {
    fn drop(&mut self) {
        // SAFETY: host came from cuMemHostAlloc and is freed once; the owner (Connected) drops
        // only once no kernel that reads the word can still run. Errors at teardown are ignored.
        unsafe {
            let _ = self.ctx.bind_to_thread();
            let _ = cu::cuMemFreeHost(self.host.cast());
        }
    }
}

/// Why the P2P implementations cannot run on these GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct P2pUnavailable {
    pub(crate) reason: String,
}

impl P2pUnavailable {
    pub(crate) fn new(reason: String) -> P2pUnavailable {
        P2pUnavailable { reason }
    }

    /// The line to print when `imps` are skipped for this reason, e.g. "GPU 0 cannot access
    /// GPU 1 (P2P disabled or across sockets without P2P): oneshot, twoshot skipped".
    pub(crate) fn skipped(&self, imps: &[Impl]) -> String {
        let names: Vec<&str> = imps
            .iter()
            .filter(|i| i.is_p2p())
            .map(|i| i.name())
            .collect();
        format!("{}: {} skipped", self.reason, names.join(", "))
    }
}

impl std::fmt::Display for P2pUnavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for P2pUnavailable {}

fn no_access(a: usize, b: usize) -> P2pUnavailable {
    P2pUnavailable::new(format!(
        "GPU {a} cannot access GPU {b} (P2P disabled or across sockets without P2P)"
    ))
}

/// `NCCL_P2P_DISABLE=1` in the environment: the custom kernels would use the very path NCCL was
/// told not to, so they refuse too rather than compare unlike things.
fn p2p_disabled_by_env() -> Option<P2pUnavailable> {
    p2p_disabled(std::env::var("NCCL_P2P_DISABLE").ok())
}

/// [`p2p_disabled_by_env`] for a given value of `NCCL_P2P_DISABLE`.
pub(super) fn p2p_disabled(value: Option<String>) -> Option<P2pUnavailable> {
    let v = value?;
    let on = matches!(v.trim(), "1" | "true" | "TRUE" | "yes");
    on.then(|| {
        P2pUnavailable::new(format!(
            "NCCL_P2P_DISABLE={v} is set: the P2P all-reduces use the peer-to-peer path it disables (unset it to run them)"
        ))
    })
}

/// Whether every pair of `devices` can reach each other's memory (the same device twice, as
/// with virtual ranks, needs no peer access). Call it before starting ranks to decide which
/// implementations to skip; `connect` checks the same again.
pub(crate) fn check_topology(devices: &[usize]) -> Result<(), P2pUnavailable> {
    if !(2..=MAX_RANKS).contains(&devices.len()) {
        return Err(P2pUnavailable::new(format!(
            "the P2P all-reduces run on 2 to {MAX_RANKS} ranks (got {})",
            devices.len()
        )));
    }
    let distinct = devices.iter().any(|&d| d != devices[0]);
    if distinct {
        if let Some(e) = p2p_disabled_by_env() {
            return Err(e);
        }
    }
    for &a in devices {
        for &b in devices {
            if a == b {
                continue;
            }
            match crate::comm::device::can_access_peer(a, b) {
                Ok(true) => {}
                Ok(false) => return Err(no_access(a, b)),
                Err(e) => {
                    return Err(P2pUnavailable::new(format!(
                        "asking whether GPU {a} can access GPU {b}: {e}"
                    )))
                }
            }
        }
    }
    Ok(())
}

/// What one rank publishes about its workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Handle {
    pub(crate) host: u64,
    pub(crate) pid: u32,
    /// A random number of the publishing process ([`process_nonce`]): beside the PID it tells
    /// two processes apart whose PIDs are equal in different PID namespaces (containers).
    pub(crate) nonce: u64,
    pub(crate) device: u32,
    pub(crate) rank: u32,
    pub(crate) nranks: u32,
    pub(crate) capacity: u64,
    pub(crate) max_blocks: u32,
    pub(crate) timeout_ns: u64,
    pub(crate) ptr: u64,
    /// The CUDA IPC handle, when the driver gave one.
    pub(crate) ipc: Option<[u8; 64]>,
}

const MAGIC: &[u8; 8] = b"VBP2P002";
const HANDLE_BYTES: usize = 8 + 8 + 4 * 5 + 8 + 8 + 8 + 4 + 64 + 8;

impl Handle {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(HANDLE_BYTES);
        v.extend_from_slice(MAGIC);
        v.extend_from_slice(&self.host.to_le_bytes());
        for x in [
            self.pid,
            self.device,
            self.rank,
            self.nranks,
            self.max_blocks,
        ] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v.extend_from_slice(&self.capacity.to_le_bytes());
        v.extend_from_slice(&self.timeout_ns.to_le_bytes());
        v.extend_from_slice(&self.ptr.to_le_bytes());
        v.extend_from_slice(&(self.ipc.is_some() as u32).to_le_bytes());
        v.extend_from_slice(&self.ipc.unwrap_or([0; 64]));
        v.extend_from_slice(&self.nonce.to_le_bytes());
        v
    }

    pub(crate) fn decode(b: &[u8]) -> anyhow::Result<Handle> {
        if b.len() != HANDLE_BYTES || &b[..8] != MAGIC {
            anyhow::bail!(
                "not a P2P workspace handle of this verifybench ({} bytes)",
                b.len()
            );
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        let has_ipc = u32_at(60) != 0;
        let mut ipc = [0u8; 64];
        ipc.copy_from_slice(&b[64..128]);
        Ok(Handle {
            host: u64_at(8),
            pid: u32_at(16),
            device: u32_at(20),
            rank: u32_at(24),
            nranks: u32_at(28),
            max_blocks: u32_at(32),
            capacity: u64_at(36),
            timeout_ns: u64_at(44),
            ptr: u64_at(52),
            ipc: has_ipc.then_some(ipc),
            nonce: u64_at(128),
        })
    }

    /// Whether the handle was published by this very process: the same PID and the same nonce
    /// (a PID alone repeats across PID namespaces).
    fn same_process(&self, other: &Handle) -> bool {
        self.pid == other.pid && self.nonce == other.nonce
    }
}

/// FNV-1a of the host name: ranks of one host only share pointers or IPC handles.
fn host_id() -> u64 {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    name.trim().bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, c| {
        (h ^ c as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// This rank's workspace before the ranks are connected.
pub(crate) struct Workspace {
    mem: DeviceMem,
    rank: usize,
    nranks: usize,
    device: usize,
    cfg: P2pConfig,
}

impl Workspace {
    /// Allocates and zeroes the workspace of `rank` of `nranks` on `gpu`. The control words are
    /// zero before this returns, so a peer that learns the address can signal at once.
    pub(crate) fn new(
        gpu: &Gpu,
        rank: usize,
        nranks: usize,
        cfg: P2pConfig,
    ) -> anyhow::Result<Workspace> {
        cfg.validate()?;
        if !(2..=MAX_RANKS).contains(&nranks) || rank >= nranks {
            crate::usage_bail!(
                "the P2P all-reduces run on 2 to {MAX_RANKS} ranks (rank {rank} of {nranks})"
            );
        }
        let what = "zeroing the P2P workspace";
        let mem = DeviceMem::zeroed(gpu, cfg.workspace_bytes(), DATA_OFF, what)?;
        Ok(Workspace {
            mem,
            rank,
            nranks,
            device: gpu.ordinal,
            cfg,
        })
    }

    /// The bytes that name this workspace to the other ranks (see [`super::to_hex`]).
    pub(crate) fn export(&self) -> Vec<u8> {
        let mut h = cu::CUipcMemHandle_st { reserved: [0; 64] };
        // SAFETY: h is a valid out-pointer; mem.ptr is the base of a cuMemAlloc allocation.
        let r = unsafe {
            let _ = self.mem.ctx.bind_to_thread();
            cu::cuIpcGetMemHandle(&mut h, self.mem.ptr)
        };
        let ipc = (r == cu::CUresult::CUDA_SUCCESS).then(|| h.reserved.map(|c| c as u8));
        Handle {
            host: host_id(),
            pid: std::process::id(),
            nonce: process_nonce(),
            device: self.device as u32,
            rank: self.rank as u32,
            nranks: self.nranks as u32,
            capacity: self.cfg.staging_bytes() as u64,
            max_blocks: self.cfg.max_blocks,
            timeout_ns: self.cfg.timeout.as_nanos() as u64,
            ptr: self.mem.ptr,
            ipc,
        }
        .encode()
    }

    /// Connects to the peers from every rank's handle bytes (`all[r]` from rank r, this rank's
    /// own included) and loads the kernels. Same process: peer access between the contexts (or
    /// nothing, on one device); another process: CUDA IPC with lazy peer access.
    pub(crate) fn connect(self, gpu: &Gpu, all: &[Vec<u8>]) -> anyhow::Result<P2pAllReduce> {
        if all.len() != self.nranks {
            anyhow::bail!(
                "P2P connect: {} handles for {} ranks",
                all.len(),
                self.nranks
            );
        }
        let handles: Vec<Handle> = all
            .iter()
            .enumerate()
            .map(|(r, b)| Handle::decode(b).map_err(|e| anyhow::anyhow!("rank {r}'s handle: {e}")))
            .collect::<anyhow::Result<_>>()?;
        let me = &handles[self.rank];
        for (r, h) in handles.iter().enumerate() {
            if h.rank as usize != r
                || h.nranks as usize != self.nranks
                || h.capacity != me.capacity
                || h.max_blocks != me.max_blocks
                || h.timeout_ns != me.timeout_ns
            {
                anyhow::bail!(
                    "P2P connect: rank {r}'s handle disagrees (rank {} of {}, {} B, {} blocks, timeout {} ns; this rank: {} of {}, {} B, {} blocks, {} ns)",
                    h.rank, h.nranks, h.capacity, h.max_blocks, h.timeout_ns,
                    me.rank, me.nranks, me.capacity, me.max_blocks, me.timeout_ns
                );
            }
        }
        let devices: Vec<usize> = handles.iter().map(|h| h.device as usize).collect();
        gpu.bind()?;
        let mut bases = [0u64; MAX_RANKS];
        let mut ipc = vec![];
        let mut peer_ctx = vec![];
        for (r, h) in handles.iter().enumerate() {
            if r == self.rank {
                bases[r] = self.mem.ptr;
                continue;
            }
            let peer_dev = h.device as usize;
            if h.host != me.host {
                return Err(P2pUnavailable::new(format!(
                    "rank {r} runs on another host: the P2P all-reduces need every rank on one machine"
                ))
                .into());
            }
            if peer_dev != self.device {
                if let Some(e) = p2p_disabled_by_env() {
                    return Err(e.into());
                }
                if !crate::comm::device::can_access_peer(self.device, peer_dev)? {
                    return Err(no_access(self.device, peer_dev).into());
                }
            }
            if h.same_process(me) {
                if peer_dev != self.device {
                    let dev = device_handle(peer_dev)?;
                    if !peer_ctx.iter().any(|p: &PeerCtx| p.dev == dev) {
                        peer_ctx.push(enable_peer(gpu, peer_dev)?);
                    }
                }
                bases[r] = h.ptr;
            } else {
                let Some(handle) = h.ipc else {
                    return Err(P2pUnavailable::new(format!(
                        "rank {r} (GPU {peer_dev}) could not export a CUDA IPC handle for its workspace"
                    ))
                    .into());
                };
                let m = open_ipc(gpu, handle, self.device, peer_dev)?;
                bases[r] = m.ptr;
                ipc.push(m);
            }
        }
        let kernels = P2pKernels::load(gpu, self.cfg.build)?;
        let here = handles
            .iter()
            .filter(|h| h.device == me.device && h.host == me.host)
            .count() as u32;
        check_resident(&kernels, here, self.device, self.cfg.max_blocks)?;
        check_peers(gpu, &kernels, self.rank, &devices, &bases)?;
        let stop = StopWord::new(gpu)?;
        let arg = PeersArg {
            base: bases,
            capacity: me.capacity,
            timeout_ns: me.timeout_ns,
            rank: self.rank as u32,
            nranks: self.nranks as u32,
            stop: stop.dev,
        };
        Ok(P2pAllReduce(Arc::new(Connected {
            kernels,
            arg,
            devices,
            stop,
            _ipc: ipc,
            _peer_ctx: peer_ctx,
            ws: self,
        })))
    }
}

fn open_ipc(gpu: &Gpu, handle: [u8; 64], me: usize, peer: usize) -> anyhow::Result<DeviceMem> {
    let h = cu::CUipcMemHandle_st {
        reserved: handle.map(|b| b as std::ffi::c_char),
    };
    let mut ptr: CUdeviceptr = 0;
    gpu.bind()?;
    // SAFETY: ptr is a valid out-pointer; h is a handle another process made with
    // cuIpcGetMemHandle (the driver rejects anything else); the mapping is closed on drop.
    let r = unsafe {
        cu::cuIpcOpenMemHandle_v2(
            &mut ptr,
            h,
            cu::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32,
        )
    };
    if r != cu::CUresult::CUDA_SUCCESS {
        return Err(P2pUnavailable::new(format!(
            "GPU {me} cannot open GPU {peer}'s workspace over CUDA IPC ({r:?}; P2P disabled or across sockets without P2P)"
        ))
        .into());
    }
    Ok(DeviceMem {
        ptr,
        ctx: gpu.ctx.clone(),
        from: Origin::IpcOpen,
    })
}

/// One rank's connected P2P all-reduce. Drop it only once every rank is past its last call
/// (synchronise, then a barrier: [`P2pAllReduce::barrier`] or the harness's own), since peers
/// read this rank's staging and write its flags until they finish. A CUDA graph that captured
/// one of its calls keeps the connection (workspace, mappings, kernels) alive as long as it.
/// When a run fails instead, [`P2pAllReduce::stop`] ends every wait of its kernels, and the
/// ranks of one process leave their connections to [`InProcessExchange::keep`], which frees
/// them only once every rank thread has left.
#[derive(Clone)]
pub(crate) struct P2pAllReduce(Arc<Connected>);

/// What a connected rank holds; shared with the graphs that captured its calls.
pub(crate) struct Connected {
    kernels: P2pKernels,
    arg: PeersArg,
    devices: Vec<usize>,
    stop: StopWord,
    _ipc: Vec<DeviceMem>,
    _peer_ctx: Vec<PeerCtx>,
    // last: the peers' mappings close before this rank's own memory is freed
    ws: Workspace,
}

impl std::ops::Deref for P2pAllReduce {
    type Target = Connected;
    fn deref(&self) -> &Connected {
        &self.0
    }
}

impl P2pAllReduce {
    pub(crate) fn config(&self) -> &P2pConfig {
        &self.ws.cfg
    }

    /// Blocks a call of `imp` on `count` elements uses.
    pub(crate) fn blocks(&self, imp: Impl, count: usize, dtype: DType) -> u32 {
        super::blocks(imp, count, dtype, self.ws.nranks, self.ws.cfg.max_blocks)
    }

    /// Enqueues one all-reduce (sum) of `count` elements from `input` into `output` (they may
    /// be the same buffer) on `gpu`'s stream. One kernel launch: no allocation, no
    /// synchronisation, no host copy, so it may be captured in a CUDA graph and replayed. Every
    /// rank must make the same sequence of calls (implementation, count, dtype).
    pub(crate) fn enqueue(
        &self,
        gpu: &Gpu,
        imp: Impl,
        input: &Buffer,
        output: &Buffer,
        count: usize,
        dtype: DType,
    ) -> anyhow::Result<()> {
        let bytes = count * dtype.size() as usize;
        if input.len() < bytes || output.len() < bytes {
            anyhow::bail!(
                "{imp}: {bytes} B all-reduce on buffers of {} B (input) and {} B (output)",
                input.len(),
                output.len()
            );
        }
        // static names: no allocation in the eager enqueue path (its host time is timed)
        gpu.check_buffer(input, "P2P all-reduce (input)", 0, bytes)?;
        gpu.check_buffer(output, "P2P all-reduce (output)", 0, bytes)?;
        gpu.keep_buffer(input);
        gpu.keep_buffer(output);
        self.enqueue_raw(gpu, imp, input.ptr(), output.ptr(), count, dtype)
    }

    /// [`P2pAllReduce::enqueue`] on raw pointers of this rank's device, for the virtual-rank
    /// checks (unaligned and in-place buffers); the caller guarantees `count` elements fit.
    pub(super) fn enqueue_raw(
        &self,
        gpu: &Gpu,
        imp: Impl,
        input: CUdeviceptr,
        output: CUdeviceptr,
        count: usize,
        dtype: DType,
    ) -> anyhow::Result<()> {
        if gpu.ordinal != self.ws.device {
            anyhow::bail!(
                "rank {}'s P2P all-reduce lives on GPU {}, not GPU {}",
                self.ws.rank,
                self.ws.device,
                gpu.ordinal
            );
        }
        supports(imp, count, dtype, self.ws.nranks, &self.ws.cfg).map_err(usage)?;
        if count == 0 {
            return Ok(());
        }
        let grid = self.blocks(imp, count, dtype);
        gpu.keep(|| Box::new(self.0.clone()));
        self.kernels.launch(
            gpu,
            imp,
            dtype,
            &self.arg,
            input,
            output,
            count as u64,
            grid,
        )
    }

    /// Enqueues a barrier: every rank waits until every other rank has reached it.
    pub(crate) fn barrier(&self, gpu: &Gpu) -> anyhow::Result<()> {
        self.kernels.barrier(gpu, &self.arg)
    }

    /// Ends every wait of this connection's kernels, now and in later calls (they return at
    /// once): the run failed elsewhere and no peer may signal again. A store into pinned host
    /// memory: safe from any thread, whatever state the GPU is in.
    pub(crate) fn stop(&self) {
        self.stop.raise();
    }

    /// Synchronises the stream and reads the error words: the wait that timed out, if any. Not
    /// inside a capture.
    pub(crate) fn fault(&self, gpu: &Gpu) -> anyhow::Result<Option<SignalTimeout>> {
        Ok(self.decode(self.error_words(gpu)?))
    }

    fn decode(&self, words: [u32; ERROR_WORDS]) -> Option<SignalTimeout> {
        SignalTimeout::decode(words, self.ws.rank, &self.devices, self.ws.cfg.timeout)
    }

    /// Synchronises the stream and reads the error words.
    fn error_words(&self, gpu: &Gpu) -> anyhow::Result<[u32; ERROR_WORDS]> {
        gpu.sync()?;
        let mut words = [0u32; ERROR_WORDS];
        gpu.bind()?;
        // SAFETY: the ERROR_WORDS words at ERRORS_OFF lie inside this rank's workspace; the
        // stream has finished every kernel that writes them (synchronised above); words holds
        // as many bytes as are copied.
        let r = unsafe {
            cu::cuMemcpyDtoH_v2(
                words.as_mut_ptr() as *mut _,
                self.ws.mem.ptr + ERRORS_OFF as u64,
                std::mem::size_of_val(&words),
            )
        };
        check(gpu.ordinal, "reading the P2P error words", r)?;
        Ok(words)
    }

    /// [`P2pAllReduce::fault`] as an error; a connection whose waits the host stopped fails
    /// too, saying so.
    pub(crate) fn check(&self, gpu: &Gpu) -> anyhow::Result<()> {
        let words = self.error_words(gpu)?;
        if let Some(t) = self.decode(words) {
            return Err(t.into());
        }
        if words[0] & ERR_STOPPED != 0 {
            anyhow::bail!(
                "rank {}: its P2P all-reduce was stopped by the host (call {}): the run is aborting",
                self.ws.rank,
                words[1]
            );
        }
        Ok(())
    }
}

/// Carries the handle bytes between the ranks of one process (threads launcher), and keeps
/// every rank's connection alive for as long as it lives: a rank thread that fails drops its
/// own handle, but its workspace, which its peers' kernels may still write into, is freed only
/// when the last holder of the exchange drops it, i.e. once every rank thread has left (the
/// launcher holds one and drops it after joining them; a thread it could not join holds one
/// until it ends).
pub(crate) struct InProcessExchange {
    slots: Mutex<Vec<Option<Vec<u8>>>>,
    cv: Condvar,
    kept: Mutex<Vec<P2pAllReduce>>,
    /// [`InProcessExchange::stop_all`] was called: connections kept later are stopped at once.
    stopped: std::sync::atomic::AtomicBool,
}

impl InProcessExchange {
    pub(crate) fn new(nranks: usize) -> Arc<InProcessExchange> {
        Arc::new(InProcessExchange {
            slots: Mutex::new(vec![None; nranks]),
            cv: Condvar::new(),
            kept: Mutex::new(vec![]),
            stopped: Default::default(),
        })
    }

    /// Keeps `ar` (a rank's connection) alive as long as this exchange; a stop already raised
    /// on the others is raised on it too.
    pub(crate) fn keep(&self, ar: &P2pAllReduce) {
        let mut k = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if self.stopped.load(Ordering::SeqCst) {
            ar.stop();
        }
        k.push(ar.clone());
    }

    /// Stops every kept connection's waits ([`P2pAllReduce::stop`]): the run failed.
    pub(crate) fn stop_all(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        for ar in self.kept.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            ar.stop();
        }
    }

    /// How many connections are kept.
    pub(crate) fn kept(&self) -> usize {
        self.kept.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Publishes `mine` as rank `rank`'s and waits (at most `timeout`) for every other rank's.
    pub(crate) fn exchange(
        &self,
        rank: usize,
        mine: Vec<u8>,
        timeout: Duration,
    ) -> anyhow::Result<Vec<Vec<u8>>> {
        let deadline = Instant::now() + timeout;
        let mut s = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        s[rank] = Some(mine);
        self.cv.notify_all();
        loop {
            if s.iter().all(Option::is_some) {
                return Ok(s.iter().map(|x| x.clone().unwrap_or_default()).collect());
            }
            let now = Instant::now();
            if now >= deadline {
                anyhow::bail!(
                    "rank {rank}: rank(s) {} published no P2P handle within {:.0} s",
                    crate::comm::nccl::missing(&s),
                    timeout.as_secs_f64()
                );
            }
            s = self
                .cv
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// Exchanges handle bytes through files in `dir` (a folder every rank of the job sees): rank r
/// writes `p2p-<token>-rank<r>.hex` (temp and rename, so a reader never sees half a file) and
/// waits, at most `timeout`, for every other rank's. `token` tells jobs sharing a folder apart.
pub(crate) fn file_exchange(
    dir: &Path,
    token: &str,
    rank: usize,
    nranks: usize,
    mine: &[u8],
    timeout: Duration,
) -> anyhow::Result<Vec<Vec<u8>>> {
    if token.is_empty() || !token.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        anyhow::bail!("P2P exchange token '{token}' must be letters, digits and '-'");
    }
    let path = |r: usize| dir.join(format!("p2p-{token}-rank{r}.hex"));
    crate::util::write_file(&path(rank), super::to_hex(mine).as_bytes())?;
    let deadline = Instant::now() + timeout;
    let mut got: Vec<Option<Vec<u8>>> = vec![None; nranks];
    got[rank] = Some(mine.to_vec());
    loop {
        for (r, slot) in got.iter_mut().enumerate() {
            if slot.is_none() && path(r).exists() {
                // written by temp and rename: a file that exists is whole
                let what = format!("rank {r}'s P2P handle file");
                let bytes =
                    crate::util::read::read(&path(r), &what, crate::util::read::P2P_HANDLES)?;
                let text = String::from_utf8_lossy(&bytes);
                *slot = Some(
                    super::from_hex(&text)
                        .map_err(|e| anyhow::anyhow!("{}: {e}", path(r).display()))?,
                );
            }
        }
        if got.iter().all(Option::is_some) {
            return Ok(got.into_iter().map(Option::unwrap_or_default).collect());
        }
        if Instant::now() >= deadline {
            anyhow::bail!(
                "rank {rank}: rank(s) {} wrote no P2P handle into '{}' within {:.0} s",
                crate::comm::nccl::missing(&got),
                dir.display(),
                timeout.as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    //! The pure parts beside the driver calls: the handle's byte layout, the host id, the
    //! refusals and their messages, and the file exchange's names and errors. (Round trips of
    //! the handle and both exchanges with several ranks are in `p2p/tests.rs`.)
    use super::*;

    fn handle(ipc: Option<[u8; 64]>) -> Handle {
        Handle {
            host: 0x0102_0304_0506_0708,
            pid: 0x1111_1111,
            device: 0x2222_2222,
            rank: 0x3333_3333,
            nranks: 0x4444_4444,
            capacity: 0x5555_5555_5555_5555,
            max_blocks: 0x6666_6666,
            timeout_ns: 0x7777_7777_7777_7777,
            ptr: 0x8888_8888_8888_8888,
            ipc,
            nonce: 0x9999_9999_9999_9999,
        }
    }

    #[test]
    fn a_handle_is_136_bytes_at_fixed_little_endian_offsets() {
        // magic 8 + host 8 + pid, device, rank, nranks, max_blocks 5 x 4 + capacity, timeout,
        // ptr 3 x 8 + the IPC flag 4 + the IPC handle 64 + the process nonce 8 = 136.
        assert_eq!(HANDLE_BYTES, 136);
        let mut ipc = [0u8; 64];
        for (i, b) in ipc.iter_mut().enumerate() {
            *b = i as u8 + 1;
        }
        let b = handle(Some(ipc)).encode();
        assert_eq!(b.len(), 136);
        assert_eq!(&b[0..8], b"VBP2P002");
        assert_eq!(b[8..16], [8, 7, 6, 5, 4, 3, 2, 1]);
        for (off, byte) in [(16, 0x11), (20, 0x22), (24, 0x33), (28, 0x44), (32, 0x66)] {
            assert_eq!(b[off..off + 4], [byte; 4], "u32 at {off}");
        }
        for (off, byte) in [(36, 0x55), (44, 0x77), (52, 0x88)] {
            assert_eq!(b[off..off + 8], [byte; 8], "u64 at {off}");
        }
        assert_eq!(b[60..64], [1, 0, 0, 0]);
        assert_eq!(b[64..128], ipc);
        assert_eq!(b[128..136], [0x99; 8]);
        // Without an IPC handle: the flag is 0 and the 64 bytes are zeros.
        let none = handle(None).encode();
        assert_eq!(none[60..64], [0; 4]);
        assert!(none[64..128].iter().all(|&x| x == 0));
    }

    /// Two processes with the same PID (PID namespaces) are told apart by the nonce; this
    /// process's handles share both.
    #[test]
    fn the_same_process_needs_the_same_pid_and_nonce() {
        let a = handle(None);
        assert!(a.same_process(&a.clone()));
        let other_ns = Handle {
            nonce: 1,
            ..a.clone()
        };
        assert!(!a.same_process(&other_ns));
        let other_pid = Handle {
            pid: 2,
            ..a.clone()
        };
        assert!(!a.same_process(&other_pid));
        // the nonce is fixed for this process
        assert_eq!(process_nonce(), process_nonce());
    }

    #[test]
    fn decoding_reads_the_flag_and_refuses_other_lengths_and_magic() {
        let mut b = handle(None).encode();
        // Bytes after a zero flag are not a handle.
        b[64] = 9;
        assert_eq!(Handle::decode(&b).unwrap().ipc, None);
        // Any non-zero flag says an IPC handle follows.
        b[63] = 0x80;
        let mut want = [0u8; 64];
        want[0] = 9;
        assert_eq!(Handle::decode(&b).unwrap().ipc, Some(want));
        let mut long = b.clone();
        long.push(0);
        let e = Handle::decode(&long).unwrap_err().to_string();
        assert_eq!(
            e,
            "not a P2P workspace handle of this verifybench (137 bytes)"
        );
        // a handle of the format before the nonce (magic ...001) is refused
        let mut other = b.clone();
        other[7] = b'1';
        assert!(Handle::decode(&other)
            .unwrap_err()
            .to_string()
            .contains("(136 bytes)"));
    }

    /// FNV-1a, 64 bits, written out from its definition.
    fn fnv1a(s: &str) -> u64 {
        let mut h: u64 = 14_695_981_039_346_656_037;
        for c in s.bytes() {
            h ^= u64::from(c);
            h = h.wrapping_mul(1_099_511_628_211);
        }
        h
    }

    #[test]
    fn the_host_id_is_fnv1a_of_the_host_name() {
        // The published FNV-1a 64-bit test vectors.
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a("foobar"), 0x8594_4171_f739_67e8);
        let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        assert_eq!(host_id(), fnv1a(name.trim()));
        assert_eq!(host_id(), host_id());
    }

    #[test]
    fn the_refusals_say_why() {
        for on in ["1", "true", "TRUE", "yes", " 1\n"] {
            assert!(p2p_disabled(Some(on.into())).is_some(), "{on:?}");
        }
        for off in ["0", "", "false", "no", "2"] {
            assert!(p2p_disabled(Some(off.into())).is_none(), "{off:?}");
        }
        assert_eq!(
            p2p_disabled(Some("yes".into())).unwrap().to_string(),
            "NCCL_P2P_DISABLE=yes is set: the P2P all-reduces use the peer-to-peer path it \
             disables (unset it to run them)"
        );
        assert_eq!(
            no_access(2, 5).reason,
            "GPU 2 cannot access GPU 5 (P2P disabled or across sockets without P2P)"
        );
        assert_eq!(
            check_topology(&[0]).unwrap_err().reason,
            "the P2P all-reduces run on 2 to 8 ranks (got 1)"
        );
        // Virtual ranks on one device ask the driver nothing, so this holds without a GPU.
        assert_eq!(check_topology(&[3, 3, 3]), Ok(()));
    }

    #[test]
    fn the_file_exchange_writes_hex_under_the_job_token_and_names_a_bad_file() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        // Rank 1's file is already there, and is not hex.
        std::fs::write(dir.join("p2p-job-7-rank1.hex"), "zz").unwrap();
        let e = file_exchange(dir, "job-7", 0, 2, &[0xab, 0x01], Duration::from_secs(5))
            .unwrap_err()
            .to_string();
        assert!(e.contains("p2p-job-7-rank1.hex"), "{e}");
        assert!(e.contains("not hex (2 characters)"), "{e}");
        assert_eq!(
            std::fs::read_to_string(dir.join("p2p-job-7-rank0.hex")).unwrap(),
            "ab01"
        );
        for token in ["", "a b", "x/y", "job_1"] {
            let e = file_exchange(dir, token, 0, 2, &[1], Duration::from_millis(1))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("must be letters, digits and '-'"),
                "{token:?}: {e}"
            );
        }
    }
}
