//! NCCL communicator and collectives on raw device pointers.
//!
//! Every unsafe call to NCCL lives in this file, each with the reason it is sound. Above this
//! module everything is safe Rust.

use std::ffi::CStr;
use std::fmt;

use cudarc::driver::sys::CUdeviceptr;
use cudarc::nccl::sys;

use crate::model::{CollectiveKind, DType};

/// An NCCL failure with NCCL's own message and the rank it happened on.
#[derive(Debug, Clone)]
pub struct NcclFailure {
    pub rank: usize,
    pub call: &'static str,
    pub code: i32,
    pub message: String,
}

impl fmt::Display for NcclFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rank {}: {} failed: {} (ncclResult {})",
            self.rank, self.call, self.message, self.code
        )
    }
}

impl std::error::Error for NcclFailure {}

fn error_string(r: sys::ncclResult_t) -> String {
    // SAFETY: ncclGetErrorString returns a pointer to a static NUL-terminated string for every
    // ncclResult_t value; it is never freed.
    unsafe {
        let p = sys::ncclGetErrorString(r);
        if p.is_null() {
            format!("{r:?}")
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}

fn check(rank: usize, call: &'static str, r: sys::ncclResult_t) -> Result<(), NcclFailure> {
    match r {
        sys::ncclResult_t::ncclSuccess | sys::ncclResult_t::ncclInProgress => Ok(()),
        other => Err(NcclFailure {
            rank,
            call,
            code: other as i32,
            message: error_string(other),
        }),
    }
}

/// NCCL's version as "major.minor.patch".
pub fn version() -> Option<String> {
    let mut v: std::ffi::c_int = 0;
    // SAFETY: ncclGetVersion writes one int through a valid pointer.
    let r = unsafe { sys::ncclGetVersion(&mut v) };
    if r != sys::ncclResult_t::ncclSuccess {
        return None;
    }
    let v = v as i64;
    // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
    Some(format!("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100))
}

/// A 128-byte NCCL unique id, as bytes (what travels between processes).
pub type UniqueId = [u8; 128];

/// Creates a unique id. The calling process hosts NCCL's bootstrap root until the
/// communicators are created, so it must stay alive until then.
pub fn unique_id() -> Result<UniqueId, NcclFailure> {
    let mut id = sys::ncclUniqueId { internal: [0; 128] };
    // SAFETY: ncclGetUniqueId fills the 128-byte struct we own.
    check(0, "ncclGetUniqueId", unsafe {
        sys::ncclGetUniqueId(&mut id)
    })?;
    let mut out = [0u8; 128];
    for (o, i) in out.iter_mut().zip(id.internal.iter()) {
        *o = *i as u8;
    }
    Ok(out)
}

fn nccl_dtype(d: DType) -> sys::ncclDataType_t {
    match d {
        DType::Bf16 => sys::ncclDataType_t::ncclBfloat16,
        DType::F16 => sys::ncclDataType_t::ncclFloat16,
        DType::F32 => sys::ncclDataType_t::ncclFloat32,
    }
}

/// One rank's communicator. Destroyed on drop; aborted instead when a failure was seen.
pub struct Communicator {
    raw: sys::ncclComm_t,
    pub rank: usize,
    pub nranks: usize,
    failed: bool,
}

impl Communicator {
    /// Joins the communicator of `nranks` ranks identified by `id`. Blocks until every rank has
    /// joined. The device current on the calling thread is the rank's device.
    pub fn init(id: &UniqueId, rank: usize, nranks: usize) -> Result<Self, NcclFailure> {
        let mut internal = [0 as std::ffi::c_char; 128];
        for (o, i) in internal.iter_mut().zip(id.iter()) {
            *o = *i as std::ffi::c_char;
        }
        let uid = sys::ncclUniqueId { internal };
        let mut raw: sys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: raw is a valid out-pointer; uid is passed by value; rank < nranks is checked by
        // NCCL, which returns an error rather than misbehaving.
        let r = unsafe { sys::ncclCommInitRank(&mut raw, nranks as i32, uid, rank as i32) };
        check(rank, "ncclCommInitRank", r)?;
        Ok(Communicator {
            raw,
            rank,
            nranks,
            failed: false,
        })
    }

    /// Enqueues one collective on `stream`. `count` is the element count NCCL takes: the
    /// all-reduce's count, the all-gather's send count, the reduce-scatter's receive count.
    ///
    /// # Safety
    /// `send` and `recv` must be device allocations on this rank's device, large enough for
    /// the collective (`count` elements for send of all-reduce/all-gather, `count * nranks` for
    /// the receive of all-gather and the send of reduce-scatter), alive until the stream
    /// has executed the operation; `stream` must be a stream of this rank's context.
    pub unsafe fn enqueue(
        &mut self,
        kind: CollectiveKind,
        dtype: DType,
        send: CUdeviceptr,
        recv: CUdeviceptr,
        count: usize,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<(), NcclFailure> {
        let dt = nccl_dtype(dtype);
        let s = stream as sys::cudaStream_t;
        let (call, r) = match kind {
            CollectiveKind::AllReduce => (
                "ncclAllReduce",
                sys::ncclAllReduce(
                    send as *const _,
                    recv as *mut _,
                    count,
                    dt,
                    sys::ncclRedOp_t::ncclSum,
                    self.raw,
                    s,
                ),
            ),
            CollectiveKind::AllGather => (
                "ncclAllGather",
                sys::ncclAllGather(send as *const _, recv as *mut _, count, dt, self.raw, s),
            ),
            CollectiveKind::ReduceScatter => (
                "ncclReduceScatter",
                sys::ncclReduceScatter(
                    send as *const _,
                    recv as *mut _,
                    count,
                    dt,
                    sys::ncclRedOp_t::ncclSum,
                    self.raw,
                    s,
                ),
            ),
        };
        let res = check(self.rank, call, r);
        if res.is_err() {
            self.failed = true;
        }
        res
    }

    /// NCCL's asynchronous error state (network failures, a peer that died).
    pub fn async_error(&self) -> Result<(), NcclFailure> {
        let mut e = sys::ncclResult_t::ncclSuccess;
        // SAFETY: raw is a live communicator; e is a valid out-pointer.
        let r = unsafe { sys::ncclCommGetAsyncError(self.raw, &mut e) };
        check(self.rank, "ncclCommGetAsyncError", r)?;
        check(self.rank, "a collective (asynchronous error)", e)
    }

    /// Marks the communicator as failed so that drop aborts instead of destroying it.
    pub fn mark_failed(&mut self) {
        self.failed = true;
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        if self.raw.is_null() {
            return;
        }
        // SAFETY: raw is a live communicator created by ncclCommInitRank and dropped once. After a
        // failure, abort (which never blocks on peers) instead of destroy. Errors at teardown
        // are ignored: there is nothing left to do with them.
        unsafe {
            if self.failed {
                let _ = sys::ncclCommAbort(self.raw);
            } else {
                let _ = sys::ncclCommDestroy(self.raw);
            }
        }
        self.raw = std::ptr::null_mut();
    }
}
