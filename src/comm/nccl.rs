//! NCCL communicator and collectives over comm/'s own buffers and GPU stream.
//!
//! Every unsafe call to NCCL lives in this file, each with the reason it is sound; the public
//! functions check what NCCL cannot (buffer sizes from the collective's table, which GPU each
//! buffer lives on), so that callers carry no obligation.

use std::cell::Cell;
use std::ffi::CStr;
use std::fmt;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::nccl::sys;

use super::device::{Buffer, Gpu};

use crate::model::{CollectiveKind, DType};

/// An NCCL failure with NCCL's own message and the rank it happened on.
#[derive(Debug, Clone, PartialEq)]
pub struct NcclFailure {
    pub(crate) rank: usize,
    pub(crate) call: &'static str,
    pub(crate) code: i32,
    pub(crate) message: String,
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
pub(crate) fn version() -> Option<String> {
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
    Ok(id.internal.map(|i| i as u8))
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
/// it, so that it is destroyed only once nothing can launch work on it. Null once aborted:
/// every later call fails instead of touching a freed communicator.
struct Raw {
    comm: Cell<sys::ncclComm_t>,
    /// A call failed: drop aborts (which never blocks on peers) instead of destroying.
    failed: Cell<bool>,
}

impl Raw {
    /// The live handle, or the error that says it was aborted.
    fn live(&self, rank: usize, call: &'static str) -> Result<sys::ncclComm_t, NcclFailure> {
        let c = self.comm.get();
        if c.is_null() {
            return Err(NcclFailure {
                rank,
                call,
                code: sys::ncclResult_t::ncclInvalidUsage as i32,
                message: "the communicator was aborted after an earlier failure".into(),
            });
        }
        Ok(c)
    }

    /// Aborts the communicator now (`ncclCommAbort`: its kernels stop and it never waits for
    /// peers), once; later calls fail and the drop does nothing more.
    fn abort_now(&self) {
        self.failed.set(true);
        let c = self.comm.replace(std::ptr::null_mut());
        if !c.is_null() {
            // SAFETY: c is a live communicator created by ncclCommInitRank; the handle was taken
            // out of the cell above, so nothing uses it after this call, which frees it. The
            // result is ignored: the communicator is gone either way.
            unsafe {
                let _ = sys::ncclCommAbort(c);
            }
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        if self.failed.get() {
            self.abort_now();
            return;
        }
        let c = self.comm.replace(std::ptr::null_mut());
        if c.is_null() {
            return;
        }
        // SAFETY: c is a live communicator created by ncclCommInitRank and dropped once (the
        // last owner drops it) after every call on it succeeded. Errors at teardown are ignored:
        // there is nothing left to do with them.
        unsafe {
            let _ = sys::ncclCommDestroy(c);
        }
    }
}

/// See [`Communicator::abort_guard`].
pub(crate) struct AbortGuard {
    raw: Option<Rc<Raw>>,
    /// P2P connections of the same rank: their waits are stopped right after the abort.
    p2p: Vec<super::p2p::P2pAllReduce>,
}

impl AbortGuard {
    /// A guard over P2P connections only (a rank without a communicator).
    pub(crate) fn without_communicator() -> AbortGuard {
        AbortGuard {
            raw: None,
            p2p: vec![],
        }
    }

    /// Covers `ar` too: an error out of the rank stops its kernels' waits
    /// ([`super::p2p::P2pAllReduce::stop`]) right after the communicator's abort.
    pub(crate) fn cover(&mut self, ar: &super::p2p::P2pAllReduce) {
        self.p2p.push(ar.clone());
    }

    /// The work ended well: the communicator is destroyed normally, the P2P connections are
    /// left as they are.
    pub(crate) fn disarm(mut self) {
        self.raw = None;
        self.p2p.clear();
    }
}

impl Drop for AbortGuard {
    fn drop(&mut self) {
        let abort = self.raw.as_ref().map(|r| move || r.abort_now());
        let stops: Vec<_> = self.p2p.iter().map(|a| move || a.stop()).collect();
        abort_in_order(abort, stops);
    }
}

/// What an error out of a rank does, in this order: abort its communicator first (its NCCL
/// kernels stop; `ncclCommAbort` never waits for peers), then stop its P2P kernels' waits. Its
/// memory is freed after both, when the rank's values drop (a P2P workspace of a threads run
/// later still: its exchange keeps it until every rank thread has left). Returns the order in
/// which the steps ran, for the test.
fn abort_in_order(abort: Option<impl FnOnce()>, stops: Vec<impl FnOnce()>) -> Vec<&'static str> {
    let mut order = vec![];
    if let Some(a) = abort {
        a();
        order.push("ncclCommAbort");
    }
    for s in stops {
        s();
        order.push("P2P stop");
    }
    order
}

/// The run's stop flag and one rank's `--timeout` deadline, which every wait of the rank polls
/// (see [`wait_stream`]). Clones share both. The stop flag is the run's: in a threads run one
/// for all rank threads, raised by the launcher when any rank fails or the run passes its
/// deadline; in a worker process its own (the parent ends the other workers). The deadline is
/// the rank's last progress plus the timeout, as the launcher counts it.
#[derive(Debug, Clone)]
pub(crate) struct Watch {
    stop: Arc<AtomicBool>,
    timeout: Option<Duration>,
    origin: Instant,
    /// Nanoseconds from `origin` to the last progress.
    last_ns: Arc<AtomicU64>,
}

impl Default for Watch {
    /// No deadline and a stop flag of its own (nothing else raises it).
    fn default() -> Self {
        Watch::new(None)
    }
}

impl Watch {
    /// A run whose ranks must make progress every `timeout` (none: no deadline); the deadline
    /// counts from now.
    pub(crate) fn new(timeout: Option<Duration>) -> Watch {
        Watch {
            stop: Arc::new(AtomicBool::new(false)),
            timeout,
            origin: Instant::now(),
            last_ns: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The same run's stop flag with a deadline of its own, counting from now: one per rank.
    pub(crate) fn for_rank(&self) -> Watch {
        let w = Watch {
            last_ns: Arc::new(AtomicU64::new(0)),
            ..self.clone()
        };
        w.progress();
        w
    }

    /// Ends the run: every wait that polls this flag returns [`Stopped`].
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// The rank made progress: its deadline moves to now plus the timeout.
    pub(crate) fn progress(&self) {
        let ns = self.origin.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        self.last_ns.store(ns, Ordering::SeqCst);
    }

    pub(crate) fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// The rank's deadline: its last progress plus the timeout (none without a timeout).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        let last = self.origin + Duration::from_nanos(self.last_ns.load(Ordering::SeqCst));
        self.timeout.map(|t| last + t)
    }

    /// Whether `now` is past the deadline.
    pub(crate) fn past_deadline(&self, now: Instant) -> bool {
        self.deadline().is_some_and(|d| now >= d)
    }
}

/// A rank's wait ended because the run is aborting (another rank failed, or the launcher's
/// deadline passed): not this rank's own failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stopped {
    pub(crate) rank: usize,
}

/// What every [`Stopped`] says (a worker's error travels as text: the launcher finds it).
pub(crate) const STOPPED_TEXT: &str = "stopped waiting: the run is aborting";
/// What every [`NoProgress`] says.
pub(crate) const NO_PROGRESS_TEXT: &str = "no progress by the --timeout deadline";

impl fmt::Display for Stopped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rank {}: {STOPPED_TEXT} (another rank failed or the run passed its deadline)",
            self.rank
        )
    }
}

impl std::error::Error for Stopped {}

/// A rank's wait passed the rank's `--timeout` deadline with its stream still busy.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NoProgress {
    pub(crate) rank: usize,
    pub(crate) timeout: Duration,
}

impl fmt::Display for NoProgress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rank {}: {NO_PROGRESS_TEXT} ({} s)",
            self.rank,
            seconds(self.timeout)
        )
    }
}

impl std::error::Error for NoProgress {}

/// Seconds as a user gave them: "10", "2.5".
pub(crate) fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s:.1}")
    }
}

/// The ranks whose slot is still empty, as "0, 1" (a wait that ran out names them).
pub(crate) fn missing<T>(slots: &[Option<T>]) -> String {
    let ranks: Vec<String> = (0..slots.len())
        .filter(|&r| slots[r].is_none())
        .map(|r| r.to_string())
        .collect();
    ranks.join(", ")
}

/// What one poll of a wait comes to.
#[derive(Debug, Clone, PartialEq)]
enum Poll {
    /// The stream's work has finished.
    Done,
    /// Poll again.
    Pending,
    /// NCCL reported an asynchronous error.
    Nccl(NcclFailure),
    Stopped,
    PastDeadline,
}

/// The verdict of one poll from what it saw. NCCL's own error wins (its text is what the user
/// must see), then the run's stop (the rank leaves at once even if its stream is idle), then a
/// finished stream, then the deadline: a stream that finished just past it lost nothing.
fn poll_verdict(done: bool, nccl: Option<NcclFailure>, stopped: bool, past_deadline: bool) -> Poll {
    match (nccl, stopped, done, past_deadline) {
        (Some(e), ..) => Poll::Nccl(e),
        (None, true, ..) => Poll::Stopped,
        (None, false, true, _) => Poll::Done,
        (None, false, false, true) => Poll::PastDeadline,
        (None, false, false, false) => Poll::Pending,
    }
}

/// Whether poll number `polls` (from 1) asks NCCL for its asynchronous error and looks at the
/// clock: every 64th, since a stream query alone is cheap and NCCL's error state costs a call.
fn slow_check(polls: u64) -> bool {
    polls % 64 == 0
}

/// How long to pause after poll `polls`: a yield for the first 4096 (a short collective ends
/// within them), then 50 us sleeps, so that a long wait costs no core.
fn pause(polls: u64) -> Option<Duration> {
    (polls > 4096).then(|| Duration::from_micros(50))
}

/// Waits for `gpu`'s stream as nccl-tests' `testStreamSynchronize` does (`cudaStreamQuery`,
/// and between queries `ncclCommGetAsyncError`), and besides polls `watch`: the run's stop flag
/// and the rank's `--timeout` deadline. Returns when the stream's work has finished; fails with
/// NCCL's own error ([`NcclFailure`], which marks the communicator failed), [`Stopped`] or
/// [`NoProgress`]. Never blocks in the driver, so a rank thread always gets back to its caller,
/// whose abort guard then aborts the communicator and stops the P2P kernels.
pub(crate) fn wait_stream(
    gpu: &Gpu,
    comm: Option<&Communicator>,
    watch: &Watch,
    rank: usize,
) -> anyhow::Result<()> {
    let mut polls = 0u64;
    loop {
        let done = gpu.done()?;
        polls += 1;
        let slow = slow_check(polls) && !done;
        let nccl = match comm {
            Some(c) if slow => c.async_error().err(),
            _ => None,
        };
        let past = slow && watch.past_deadline(Instant::now());
        match poll_verdict(done, nccl, watch.stopped(), past) {
            Poll::Done => return Ok(()),
            Poll::Nccl(e) => return Err(e.into()),
            Poll::Stopped => return Err(Stopped { rank }.into()),
            Poll::PastDeadline => {
                return Err(NoProgress {
                    rank,
                    timeout: watch.timeout().unwrap_or_default(),
                }
                .into())
            }
            Poll::Pending => match pause(polls) {
                Some(d) => std::thread::sleep(d),
                None => std::thread::yield_now(),
            },
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
        let uid = sys::ncclUniqueId {
            internal: id.map(|i| i as std::ffi::c_char),
        };
        let mut raw: sys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: raw is a valid out-pointer; uid is passed by value; rank < nranks is checked by
        // NCCL, which returns an error rather than misbehaving.
        let r = unsafe { sys::ncclCommInitRank(&mut raw, nranks as i32, uid, rank as i32) };
        check(rank, "ncclCommInitRank", r)?;
        Ok(Communicator {
            raw: Rc::new(Raw {
                comm: Cell::new(raw),
                failed: Cell::new(false),
            }),
            rank,
            nranks,
            device: gpu.ordinal(),
        })
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
    pub(crate) fn collective(
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
        let c = self.raw.live(self.rank, ops.nccl_call())?;
        let (sp, rp) = (send.ptr() as *const _, recv.ptr() as *mut _);
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
        let c = self.raw.live(self.rank, "ncclCommGetAsyncError")?;
        let mut e = sys::ncclResult_t::ncclSuccess;
        // SAFETY: c is a live communicator (not aborted: checked above); e is a valid
        // out-pointer.
        let r = unsafe { sys::ncclCommGetAsyncError(c, &mut e) };
        let res = check(self.rank, "ncclCommGetAsyncError", r)
            .and_then(|_| check(self.rank, "a collective (asynchronous error)", e));
        if res.is_err() {
            // a broken communicator is aborted at drop, never destroyed (which waits for
            // outstanding work that will not finish)
            self.raw.failed.set(true);
        }
        res
    }

    /// A guard that, unless disarmed, aborts the communicator when dropped (`ncclCommAbort`
    /// at once, which stops its kernels and does not wait for peers; never `ncclCommDestroy`),
    /// then stops the waits of the P2P connections it covers. A rank holds one while it works,
    /// declared after everything else it holds, so that on every error out of it the guard
    /// drops first: abort, stop, then free.
    pub(crate) fn abort_guard(&self) -> AbortGuard {
        AbortGuard {
            raw: Some(self.raw.clone()),
            p2p: vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure() -> NcclFailure {
        NcclFailure {
            rank: 1,
            call: "a collective (asynchronous error)",
            code: 6,
            message: "remote process exited or there was a network error".into(),
        }
    }

    #[test]
    fn nccls_error_wins_then_the_stop_then_a_finished_stream_then_the_deadline() {
        // every combination of (done, nccl error, stopped, past deadline), the expected verdict
        // written out by the rule
        for done in [false, true] {
            for err in [false, true] {
                for stopped in [false, true] {
                    for past in [false, true] {
                        let want = if err {
                            Poll::Nccl(failure())
                        } else if stopped {
                            Poll::Stopped
                        } else if done {
                            Poll::Done
                        } else if past {
                            Poll::PastDeadline
                        } else {
                            Poll::Pending
                        };
                        let got = poll_verdict(done, err.then(failure), stopped, past);
                        assert_eq!(
                            got, want,
                            "done {done} err {err} stopped {stopped} past {past}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn polls_ask_nccl_every_64th_and_sleep_after_4096() {
        let slow: Vec<u64> = (1..=200).filter(|&p| slow_check(p)).collect();
        assert_eq!(slow, [64, 128, 192]);
        assert_eq!(pause(4096), None);
        assert_eq!(pause(4097), Some(Duration::from_micros(50)));
    }

    #[test]
    fn the_deadline_is_the_last_progress_plus_the_timeout() {
        let run = Watch::new(Some(Duration::from_secs(2)));
        let w = run.for_rank();
        // progress 5 s after the origin: the deadline is 7 s after it
        w.last_ns.store(5_000_000_000, Ordering::SeqCst);
        let seven = w.origin + Duration::from_secs(7);
        assert_eq!(w.deadline(), Some(seven));
        assert!(!w.past_deadline(seven - Duration::from_millis(1)));
        assert!(w.past_deadline(seven));
        // the run's watch keeps its own deadline; the stop flag is shared both ways
        assert_eq!(run.last_ns.load(Ordering::SeqCst), 0);
        assert!(!run.stopped());
        w.stop();
        assert!(run.stopped() && run.for_rank().stopped());
        // no timeout: never past
        let none = Watch::default();
        assert_eq!(none.deadline(), None);
        assert!(!none.past_deadline(Instant::now() + Duration::from_secs(1 << 30)));
        // progress moves it forward from now
        let p = Watch::new(Some(Duration::from_secs(1)));
        let before = Instant::now();
        p.progress();
        assert!(p.deadline().unwrap() >= before + Duration::from_secs(1));
    }

    #[test]
    fn the_errors_of_a_wait_say_what_happened() {
        let e = NoProgress {
            rank: 3,
            timeout: Duration::from_secs(10),
        };
        assert_eq!(
            e.to_string(),
            "rank 3: no progress by the --timeout deadline (10 s)"
        );
        assert!(e.to_string().contains(NO_PROGRESS_TEXT));
        assert_eq!(seconds(Duration::from_millis(2500)), "2.5");
        let s = Stopped { rank: 0 }.to_string();
        assert!(
            s.starts_with("rank 0: stopped waiting: the run is aborting"),
            "{s}"
        );
        assert!(s.contains(STOPPED_TEXT));
    }

    #[test]
    fn an_error_aborts_the_communicator_before_it_stops_the_p2p_waits() {
        let log = std::cell::RefCell::new(vec![]);
        let stop = |k: usize| {
            let log = &log;
            move || log.borrow_mut().push(format!("stop {k}"))
        };
        let order = abort_in_order(
            Some(|| log.borrow_mut().push("abort".to_string())),
            vec![stop(0), stop(1)],
        );
        assert_eq!(*log.borrow(), ["abort", "stop 0", "stop 1"]);
        assert_eq!(order, ["ncclCommAbort", "P2P stop", "P2P stop"]);
        // a rank without a communicator only stops its P2P waits
        let none: Option<fn()> = None;
        assert_eq!(abort_in_order(none, vec![|| ()]), ["P2P stop"]);
    }

    #[test]
    fn an_aborted_communicator_refuses_every_later_call() {
        // a null handle is what abort_now leaves behind; neither its drop nor live() calls NCCL
        let raw = Raw {
            comm: Cell::new(std::ptr::null_mut()),
            failed: Cell::new(true),
        };
        let e = raw.live(2, "ncclAllReduce").unwrap_err();
        assert_eq!((e.rank, e.call), (2, "ncclAllReduce"));
        assert!(
            e.to_string().contains("aborted after an earlier failure"),
            "{e}"
        );
        raw.abort_now();
        assert!(raw.comm.get().is_null());
    }

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
