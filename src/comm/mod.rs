//! The only module that touches cudarc: library discovery and loading, devices, the NCCL
//! communicator, collectives, CUDA-graph capture and replay, event timing, NVRTC kernels.
//!
//! cudarc's own discipline (sys -> result -> safe) continues here: unsafe code stays in
//! `device.rs`, `nccl.rs`, `kernels/`, `libs.rs` and `p2p/`, each block with the reason it is sound,
//! and the public surface is safe functions over comm/'s own types. [`Buffer`] hides its device
//! address; [`Gpu`] is one GPU with the one stream all of a rank's work goes to (every enqueue
//! takes it); [`Communicator`]'s collectives check each buffer's size against the collective's
//! table and that every buffer lives on the communicator's GPU; a [`Graph`] keeps alive the
//! buffers and communicator its nodes use. Callers above comm/ carry no unsafe obligation.
//!
//! The cudarc facts this rests on (see `Gpu::open` and `Gpu::capture`): event tracking is
//! disabled right after the context is created (it would break stream capture), the context is
//! bound to the rank's thread before NCCL joins, work goes to a non-default stream (the default
//! one cannot be captured), and captures run in thread-local mode, one thread per GPU.
//!
//! Outside comm/ the only unsafe code is process-level, each block with its SAFETY comment:
//! - `main.rs`: SIGPIPE back to its default action before any thread exists, so that
//!   `plan | head` ends quietly;
//! - `launch/run/processes.rs`: a `pre_exec` that calls `prctl(PR_SET_PDEATHSIG)`, so that a
//!   worker dies with its parent instead of waiting forever inside NCCL;
//! - `sweep/signal.rs`: the Ctrl-C handler (`sigaction`; the handler only stores an atomic);
//! - `sweep/runner.rs`: `kill` of the process group a sweep child leads.

pub(crate) mod compile;
pub(crate) mod device;
pub(crate) mod elf;
pub(crate) mod kernels;
pub mod libs;
pub mod nccl;
pub(crate) mod p2p;
pub(crate) mod requirements;

pub(crate) use device::Event;
pub use device::{Buffer, Gpu, Graph};
pub use kernels::MAX_STREAM_TOKENS;
pub use nccl::{Communicator, UniqueId};

/// Number of CUDA devices, or 0 when the driver library is missing or fails to initialise.
pub fn device_count() -> usize {
    if !libs::cuda_present() {
        return 0;
    }
    cudarc::driver::CudaContext::device_count()
        .map(|n| n.max(0) as usize)
        .unwrap_or(0)
}
