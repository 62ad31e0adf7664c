//! The only module that touches cudarc: library discovery and loading, devices, the NCCL
//! communicator, collectives, CUDA-graph capture and replay, event timing, NVRTC kernels.
//!
//! Unsafe code stays in `nccl.rs` and `device.rs` (and `kernels.rs`), each block with the reason
//! it is sound; everything above this module is safe Rust.

pub mod compile;
pub mod device;
pub mod kernels;
pub mod libs;
pub mod nccl;
pub mod p2p;

pub use device::{Buffer, CudaFailure, Event, Gpu, Graph};
pub use nccl::{Communicator, NcclFailure, UniqueId};

/// Number of CUDA devices, or 0 when the driver library is missing or fails to initialise.
pub fn device_count() -> usize {
    if !libs::cuda_present() {
        return 0;
    }
    cudarc::driver::CudaContext::device_count()
        .map(|n| n.max(0) as usize)
        .unwrap_or(0)
}
