//! Device memory and peer access for the P2P all-reduces, at the driver: allocations released in
//! their context, peer access between contexts, raw copies by device address, and the nonce that
//! tells this process apart. `peer.rs` (workspaces, connections) and `probe.rs` (the access
//! check) build on these.
//!
//! Every unsafe driver call of the P2P code lives in this file, `peer.rs` or `kernels.rs`, each
//! with the reason it is sound.

use std::sync::Arc;

use cudarc::driver::sys::{self as cu, CUdeviceptr};
use cudarc::driver::CudaContext;

use super::P2pUnavailable;
use crate::comm::device::{check, device_handle, Gpu};

/// Device memory this rank holds through the driver, released in its context on drop: its
/// own workspace from `cuMemAlloc` (not a stream-ordered pool: only such memory can be shared
/// over CUDA IPC and reached through context peer access), freed; or a peer's workspace opened
/// from its CUDA IPC handle, closed.
pub(super) struct DeviceMem {
    pub(super) ptr: CUdeviceptr,
    pub(super) ctx: Arc<CudaContext>,
    pub(super) from: Origin,
}

/// Which driver call gave a [`DeviceMem`] its pointer (and so which one releases it).
pub(super) enum Origin {
    /// `cuMemAlloc`: freed with `cuMemFree`.
    Alloc,
    /// `cuIpcOpenMemHandle`: closed with `cuIpcCloseMemHandle`.
    IpcOpen,
}

impl DeviceMem {
    pub(super) fn new(gpu: &Gpu, bytes: usize) -> anyhow::Result<DeviceMem> {
        gpu.bind()?;
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: ptr is a valid out-pointer; the rank's context is current on this thread.
        let r = unsafe { cu::cuMemAlloc_v2(&mut ptr, bytes) };
        check(gpu.ordinal, "cuMemAlloc of the P2P workspace", r)?;
        Ok(DeviceMem {
            ptr,
            ctx: gpu.ctx.clone(),
            from: Origin::Alloc,
        })
    }

    /// [`DeviceMem::new`] with its first `zero` bytes zeroed before it returns (a workspace's
    /// control words, the access probe's whole target); `what` names the zeroing in an error.
    pub(super) fn zeroed(
        gpu: &Gpu,
        bytes: usize,
        zero: usize,
        what: &str,
    ) -> anyhow::Result<DeviceMem> {
        let m = DeviceMem::new(gpu, bytes)?;
        // SAFETY: [ptr, ptr + min(zero, bytes)) lies inside the allocation just made, in the
        // context bound by new; the memset runs on the legacy stream and the context
        // synchronisation waits for it.
        let r = unsafe { cu::cuMemsetD8_v2(m.ptr, 0, zero.min(bytes)) };
        check(gpu.ordinal, what, r)?;
        gpu.ctx
            .synchronize()
            .map_err(|e| anyhow::anyhow!("GPU {}: cuCtxSynchronize: {e:?}", gpu.ordinal))?;
        Ok(m)
    }
}

impl Drop for DeviceMem {
    fn drop(&mut self) {
        // SAFETY: ptr came from the call `from` names, in ctx, and is released once by its
        // counterpart; the owner (P2pAllReduce) documents that every rank must be past its last
        // call before a workspace or a mapping drops. Errors at teardown are ignored: there is
        // nothing left to do with them.
        unsafe {
            let _ = self.ctx.bind_to_thread();
            let _ = match self.from {
                Origin::Alloc => cu::cuMemFree_v2(self.ptr),
                Origin::IpcOpen => cu::cuIpcCloseMemHandle(self.ptr),
            };
        }
    }
}

/// A retained primary context of a peer device: peer access to it lasts as long as it lives.
pub(super) struct PeerCtx {
    pub(super) dev: cu::CUdevice,
}

impl Drop for PeerCtx {
    fn drop(&mut self) {
        // SAFETY: the primary context of dev was retained once by enable_peer and is released
        // once here.
        unsafe {
            let _ = cu::cuDevicePrimaryCtxRelease_v2(self.dev);
        }
    }
}

/// A random number fixed for this process (the standard library's randomly keyed hasher over
/// the PID and the clock).
pub(crate) fn process_nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static NONCE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NONCE.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        h.finish()
    })
}

/// Lets `gpu`'s context address every allocation of `peer`'s primary context.
pub(super) fn enable_peer(gpu: &Gpu, peer: usize) -> anyhow::Result<PeerCtx> {
    let dev = device_handle(peer)?;
    let mut pctx: cu::CUcontext = std::ptr::null_mut();
    // SAFETY: pctx is a valid out-pointer and dev a valid device; the retain is released by
    // PeerCtx's drop.
    let r = unsafe { cu::cuDevicePrimaryCtxRetain(&mut pctx, dev) };
    check(gpu.ordinal, &format!("retaining GPU {peer}'s context"), r)?;
    let keep = PeerCtx { dev };
    gpu.bind()?;
    // SAFETY: pctx is a live context (retained above); the current context is this rank's.
    let r = unsafe { cu::cuCtxEnablePeerAccess(pctx, 0) };
    match r {
        cu::CUresult::CUDA_SUCCESS | cu::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {
            Ok(keep)
        }
        other => Err(P2pUnavailable::new(format!(
            "GPU {} cannot access GPU {peer}: cuCtxEnablePeerAccess failed ({other:?}; P2P disabled or across sockets without P2P)",
            gpu.ordinal
        ))
        .into()),
    }
}

/// Copies `data` to device address `dst` of `gpu` on its stream and waits.
pub(super) fn upload_raw(gpu: &Gpu, dst: CUdeviceptr, data: &[u8]) -> anyhow::Result<()> {
    gpu.bind()?;
    // SAFETY: the caller passes a destination range of `data.len()` bytes inside a live
    // allocation of this context; the copy is ordered on the rank's stream and waited for before
    // `data` can go away.
    let r = unsafe {
        cu::cuMemcpyHtoDAsync_v2(
            dst,
            data.as_ptr() as *const _,
            data.len(),
            gpu.stream.cu_stream(),
        )
    };
    check(gpu.ordinal, "cuMemcpyHtoDAsync", r)?;
    gpu.sync()?;
    Ok(())
}

/// Copies `len` bytes from device address `src` of `gpu` after its stream's work.
pub(super) fn download_raw(gpu: &Gpu, src: CUdeviceptr, len: usize) -> anyhow::Result<Vec<u8>> {
    let mut out = vec![0u8; len];
    gpu.bind()?;
    // SAFETY: the caller passes a source range of `len` bytes inside a live allocation of this
    // context; out holds len bytes; the stream is synchronised before the vector is read.
    let r = unsafe {
        cu::cuMemcpyDtoHAsync_v2(out.as_mut_ptr() as *mut _, src, len, gpu.stream.cu_stream())
    };
    check(gpu.ordinal, "cuMemcpyDtoHAsync", r)?;
    gpu.sync()?;
    Ok(out)
}

/// Enqueues a device copy of `bytes` from `src` to `dst` (both on `gpu`) on its stream.
pub(super) fn copy_raw(
    gpu: &Gpu,
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
) -> anyhow::Result<()> {
    // SAFETY: the caller passes two ranges of `bytes` inside live allocations of this context;
    // the copy is ordered on the rank's stream.
    let r = unsafe { cu::cuMemcpyDtoDAsync_v2(dst, src, bytes, gpu.stream.cu_stream()) };
    Ok(check(gpu.ordinal, "cuMemcpyDtoDAsync", r)?)
}
