//! The only module that touches cudarc: library discovery and loading, devices, the NCCL
//! communicator, collectives, CUDA-graph capture and replay, event timing, NVRTC kernels.

/// Number of CUDA devices, or 0 when the driver library is missing or fails to initialise.
pub fn device_count() -> usize {
    // SAFETY: is_culib_present only tries to dlopen the driver library by name.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return 0;
    }
    cudarc::driver::CudaContext::device_count()
        .map(|n| n.max(0) as usize)
        .unwrap_or(0)
}
