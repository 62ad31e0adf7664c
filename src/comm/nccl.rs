//! NCCL communicator and collectives over comm/'s own buffers and GPU stream.
//!
//! Every unsafe call to NCCL lives in this file, each with the reason it is sound; the public
//! functions check what NCCL cannot (buffer sizes from the collective's table, which GPU each
//! buffer lives on), so that callers carry no obligation.

use std::cell::Cell;
use std::ffi::CStr;
use std::fmt;
use std::rc::Rc;

use cudarc::nccl::sys;

use super::device::{Buffer, Gpu};

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
    version_number().map(|v| format!("{}.{}.{}", v.major, v.minor, v.patch))
}

/// NCCL's version as a number (also loads the library).
pub(crate) fn version_number() -> Option<super::requirements::Version> {
    let mut v: std::ffi::c_int = 0;
    // SAFETY: ncclGetVersion writes one int through a valid pointer.
    let r = unsafe { sys::ncclGetVersion(&mut v) };
    if r != sys::ncclResult_t::ncclSuccess {
        return None;
    }
    // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
    Some(super::requirements::Version::from_nccl_int(v))
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

/// Which rank, of how many, on which GPU.
#[derive(Debug, Clone, Copy)]
struct Place {
    rank: usize,
    nranks: usize,
    device: usize,
}

/// Fails unless buffers of `send` and `recv` (bytes, GPU) can hold what `kind` reads and writes
/// for NCCL count `count` at `at`: the sizes come from the collective's table, every element
/// count of which is at most `count x nranks` (checked first, so that no product overflows).
fn check_buffers(
    at: Place,
    kind: CollectiveKind,
    count: usize,
    dtype: DType,
    send: (usize, usize),
    recv: (usize, usize),
) -> anyhow::Result<()> {
    let ops = kind.ops();
    let esz = dtype.size() as usize;
    if count
        .checked_mul(at.nranks)
        .and_then(|e| e.checked_mul(esz))
        .is_none()
    {
        anyhow::bail!(
            "rank {}: {} of count {count} {} on {} ranks: the buffers would exceed the address space",
            at.rank,
            ops.nccl_call(),
            dtype.name(),
            at.nranks
        );
    }
    for ((len, device), elems, which) in [
        (send, ops.send_elems(count, at.nranks), "send"),
        (recv, ops.recv_elems(count, at.nranks), "receive"),
    ] {
        let bytes = elems * esz;
        if bytes > len || device != at.device {
            anyhow::bail!(
                "rank {}: {} of count {count} {} on {} ranks needs a {which} buffer of {bytes} B on GPU {}; the one given holds {len} B on GPU {device}",
                at.rank,
                ops.nccl_call(),
                dtype.name(),
                at.nranks,
                at.device,
            );
        }
    }
    Ok(())
}

/// The NCCL handle, shared by the communicator and every graph that captured a collective on
/// it, so that it is destroyed only once nothing can launch work on it.
struct Raw {
    comm: sys::ncclComm_t,
    /// A call failed: drop aborts (which never blocks on peers) instead of destroying.
    failed: Cell<bool>,
}

impl Drop for Raw {
    fn drop(&mut self) {
        if self.comm.is_null() {
            return;
        }
        // SAFETY: comm is a live communicator created by ncclCommInitRank and dropped once (the
        // last owner drops it). After a failure, abort (which never blocks on peers) instead of
        // destroy. Errors at teardown are ignored: there is nothing left to do with them.
        unsafe {
            if self.failed.get() {
                let _ = sys::ncclCommAbort(self.comm);
            } else {
                let _ = sys::ncclCommDestroy(self.comm);
            }
        }
        self.comm = std::ptr::null_mut();
    }
}

/// See [`Communicator::abort_guard`].
pub(crate) struct AbortGuard {
    raw: Option<Rc<Raw>>,
}

impl AbortGuard {
    /// The work ended well: the communicator is destroyed normally.
    pub(crate) fn disarm(mut self) {
        self.raw = None;
    }
}

impl Drop for AbortGuard {
    fn drop(&mut self) {
        if let Some(r) = &self.raw {
            r.failed.set(true);
        }
    }
}

/// One rank's communicator, on one GPU. Destroyed on drop (once no captured graph uses it);
/// aborted instead when a call failed.
pub struct Communicator {
    raw: Rc<Raw>,
    rank: usize,
    nranks: usize,
    device: usize,
}

impl Communicator {
    /// Joins the communicator of `nranks` ranks identified by `id` as rank `rank` on `gpu`
    /// (bound to the calling thread first: NCCL uses the thread's current device). Blocks
    /// until every rank has joined.
    pub fn init(gpu: &Gpu, id: &UniqueId, rank: usize, nranks: usize) -> anyhow::Result<Self> {
        gpu.bind()?;
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
            raw: Rc::new(Raw {
                comm: raw,
                failed: Cell::new(false),
            }),
            rank,
            nranks,
            device: gpu.ordinal(),
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn nranks(&self) -> usize {
        self.nranks
    }

    /// Enqueues a sum all-reduce of `count` elements from `send` into `recv` on `gpu`'s stream.
    pub fn all_reduce(
        &self,
        send: &Buffer,
        recv: &Buffer,
        count: usize,
        dtype: DType,
        gpu: &Gpu,
    ) -> anyhow::Result<()> {
        self.collective(CollectiveKind::AllReduce, send, recv, count, dtype, gpu)
    }

    /// Enqueues one collective on `gpu`'s stream. `count` is the element count NCCL takes (see
    /// [`crate::model::collective::CollectiveOps`]); the buffers' sizes come from the
    /// collective's table and are checked, as is that `gpu`, `send` and `recv` are this rank's
    /// GPU. Inside a capture the graph keeps the buffers and the communicator alive.
    pub fn collective(
        &self,
        kind: CollectiveKind,
        send: &Buffer,
        recv: &Buffer,
        count: usize,
        dtype: DType,
        gpu: &Gpu,
    ) -> anyhow::Result<()> {
        let ops = kind.ops();
        if gpu.ordinal() != self.device {
            anyhow::bail!(
                "rank {}: {} on GPU {}, but the communicator is on GPU {}",
                self.rank,
                ops.nccl_call(),
                gpu.ordinal(),
                self.device
            );
        }
        let at = Place {
            rank: self.rank,
            nranks: self.nranks,
            device: self.device,
        };
        check_buffers(
            at,
            kind,
            count,
            dtype,
            (send.len(), send.device()),
            (recv.len(), recv.device()),
        )?;
        gpu.keep_buffer(send);
        gpu.keep_buffer(recv);
        gpu.keep(|| Box::new(self.raw.clone()));
        let dt = nccl_dtype(dtype);
        let s = gpu.stream.cu_stream() as sys::cudaStream_t;
        let (sp, rp, c) = (send.ptr() as *const _, recv.ptr() as *mut _, self.raw.comm);
        // SAFETY: send and recv are live allocations on this communicator's GPU holding at least
        // the elements this collective reads and writes for `count` on `nranks` ranks (checked
        // above against the collective's table); they are freed in stream order after the
        // operation, or kept alive by the graph being captured. The stream belongs to the same
        // GPU's context and the communicator is live (a captured graph holds it too).
        let r = unsafe {
            match kind {
                CollectiveKind::AllReduce => {
                    sys::ncclAllReduce(sp, rp, count, dt, sys::ncclRedOp_t::ncclSum, c, s)
                }
                CollectiveKind::AllGather => sys::ncclAllGather(sp, rp, count, dt, c, s),
                CollectiveKind::ReduceScatter => {
                    sys::ncclReduceScatter(sp, rp, count, dt, sys::ncclRedOp_t::ncclSum, c, s)
                }
                CollectiveKind::Broadcast => {
                    let root = crate::model::collective::broadcast::ROOT as i32;
                    sys::ncclBroadcast(sp, rp, count, dt, root, c, s)
                }
                // As PyTorch's `all_to_all_single` (ProcessGroupNCCL) and nccl-tests'
                // `src/alltoall.cu` issue it: inside one group, block p (`count` elements) of
                // send to rank p and block p of recv from rank p, for every p (itself
                // included); NCCL fuses the group into one SendRecv kernel. The group is always
                // closed, so that a failed call leaves no open group; the first failure counts.
                // The block offsets stay inside the buffers (p < nranks, checked sizes above).
                CollectiveKind::AllToAll => {
                    let ok = sys::ncclResult_t::ncclSuccess;
                    let first = |a: sys::ncclResult_t, b| if a != ok { a } else { b };
                    let block = count * dtype.size() as usize;
                    let mut r = sys::ncclGroupStart();
                    if r == ok {
                        for p in 0..self.nranks {
                            let off = p * block;
                            let (sb, rb) = (sp.cast::<u8>().add(off), rp.cast::<u8>().add(off));
                            let peer = p as i32;
                            r = first(r, sys::ncclSend(sb.cast(), count, dt, peer, c, s));
                            r = first(r, sys::ncclRecv(rb.cast(), count, dt, peer, c, s));
                        }
                        r = first(r, sys::ncclGroupEnd());
                    }
                    r
                }
            }
        };
        let res = check(self.rank, ops.nccl_call(), r);
        if res.is_err() {
            self.raw.failed.set(true);
        }
        Ok(res?)
    }

    /// NCCL's asynchronous error state (network failures, a peer that died).
    pub(crate) fn async_error(&self) -> Result<(), NcclFailure> {
        let mut e = sys::ncclResult_t::ncclSuccess;
        // SAFETY: comm is a live communicator; e is a valid out-pointer.
        let r = unsafe { sys::ncclCommGetAsyncError(self.raw.comm, &mut e) };
        let res = check(self.rank, "ncclCommGetAsyncError", r)
            .and_then(|_| check(self.rank, "a collective (asynchronous error)", e));
        if res.is_err() {
            // a broken communicator is aborted at drop, never destroyed (which waits for
            // outstanding work that will not finish)
            self.raw.failed.set(true);
        }
        res
    }

    /// A guard that, unless disarmed, marks the communicator failed when dropped, so that its
    /// drop aborts it (`ncclCommAbort`, which does not wait for peers) instead of destroying
    /// it. A rank holds one while it works: every error out of it aborts.
    pub(crate) fn abort_guard(&self) -> AbortGuard {
        AbortGuard {
            raw: Some(self.raw.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AT: Place = Place {
        rank: 1,
        nranks: 8,
        device: 1,
    };

    #[test]
    fn buffers_of_the_tables_sizes_fit() {
        // all-gather of 100 bf16 per rank on 8 ranks: 200 B in, 1600 B out
        let ag = CollectiveKind::AllGather;
        check_buffers(AT, ag, 100, DType::Bf16, (200, 1), (1600, 1)).unwrap();
        // reduce-scatter of 100 f32 out: 3200 B in, 400 B out
        let rs = CollectiveKind::ReduceScatter;
        check_buffers(AT, rs, 100, DType::F32, (3200, 1), (400, 1)).unwrap();
        let ar = CollectiveKind::AllReduce;
        check_buffers(AT, ar, 100, DType::F16, (200, 1), (200, 1)).unwrap();
        // broadcast of 100 bf16: 200 B each side; all-to-all of 100 bf16 per peer on 8 ranks:
        // 1600 B each side, and one byte less is refused
        let bc = CollectiveKind::Broadcast;
        check_buffers(AT, bc, 100, DType::Bf16, (200, 1), (200, 1)).unwrap();
        let a2a = CollectiveKind::AllToAll;
        check_buffers(AT, a2a, 100, DType::Bf16, (1600, 1), (1600, 1)).unwrap();
        check_buffers(AT, a2a, 100, DType::Bf16, (1600, 1), (1599, 1)).unwrap_err();
    }

    #[test]
    fn a_buffer_one_byte_short_is_refused_naming_the_sizes() {
        let ag = CollectiveKind::AllGather;
        let e = check_buffers(AT, ag, 100, DType::Bf16, (200, 1), (1599, 1)).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("ncclAllGather")
                && msg.contains("receive buffer of 1600 B")
                && msg.contains("holds 1599 B"),
            "{msg}"
        );
        let rs = CollectiveKind::ReduceScatter;
        let e = check_buffers(AT, rs, 100, DType::F32, (3199, 1), (400, 1)).unwrap_err();
        assert!(e.to_string().contains("send buffer of 3200 B"), "{e}");
    }

    #[test]
    fn a_buffer_on_another_gpu_is_refused() {
        let ar = CollectiveKind::AllReduce;
        let e = check_buffers(AT, ar, 10, DType::F32, (40, 1), (40, 0)).unwrap_err();
        assert!(e.to_string().contains("on GPU 0"), "{e}");
    }

    #[test]
    fn a_count_whose_bytes_overflow_is_refused_before_any_product_wraps() {
        let rs = CollectiveKind::ReduceScatter;
        let huge = usize::MAX / 4;
        let e =
            check_buffers(AT, rs, huge, DType::Bf16, (usize::MAX, 1), (usize::MAX, 1)).unwrap_err();
        assert!(e.to_string().contains("address space"), "{e}");
    }
}
