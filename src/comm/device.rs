//! One rank's GPU: context, stream, device buffers, events, CUDA-graph capture. Every
//! function that hands a buffer to CUDA checks that it lives on this GPU and is large enough.

use std::cell::RefCell;
use std::sync::Arc;

use cudarc::driver::sys::{self as cu, CUdeviceptr};
use cudarc::driver::{CudaContext, CudaEvent, CudaGraph, CudaSlice, CudaStream, DevicePtr};

use crate::record::GpuInfo;

/// A CUDA driver failure with the device it happened on.
#[derive(Debug, Clone)]
pub struct CudaFailure {
    pub(crate) device: usize,
    pub(crate) what: String,
}

impl std::fmt::Display for CudaFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GPU {}: {}", self.device, self.what)
    }
}

impl std::error::Error for CudaFailure {}

fn fail<E: std::fmt::Debug>(device: usize, what: &str) -> impl FnOnce(E) -> CudaFailure + '_ {
    move |e| CudaFailure {
        device,
        what: format!("{what}: {e:?}"),
    }
}

pub(super) fn check(device: usize, what: &str, r: cu::CUresult) -> Result<(), CudaFailure> {
    match r {
        cu::CUresult::CUDA_SUCCESS => Ok(()),
        r => Err(fail(device, what)(r)),
    }
}

/// A device buffer of raw bytes on one GPU. Only comm/ sees its address: everything that uses
/// it goes through a function here, which checks the sizes and the GPU. The memory is freed in
/// stream order (cudarc frees on the stream it was allocated on), and a captured graph that uses
/// it keeps it alive, so neither a pending operation nor a graph replay can outlive it.
pub struct Buffer {
    slice: Arc<CudaSlice<u8>>,
    ptr: CUdeviceptr,
    device: usize,
}

impl Buffer {
    /// Size in bytes.
    pub(crate) fn len(&self) -> usize {
        self.slice.len()
    }
    /// The GPU it lives on.
    pub(crate) fn device(&self) -> usize {
        self.device
    }
    pub(super) fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }
}

/// A timing event, with the ordinal of the GPU it was created on (for errors).
pub(crate) struct Event(CudaEvent, usize);

impl Event {
    /// Microseconds between `self` and a later event `end` (both completed).
    pub(crate) fn elapsed_us(&self, end: &Event) -> Result<f64, CudaFailure> {
        self.0
            .elapsed_ms(&end.0)
            .map(|ms| ms as f64 * 1e3)
            .map_err(fail(self.1, "cuEventElapsedTime"))
    }
}

/// What a captured graph uses and must keep alive: buffers, communicators.
pub(super) type Keep = Box<dyn std::any::Any>;

/// A captured CUDA graph, replayable on its stream. It holds everything its nodes use (the
/// buffers and communicators enqueued during the capture), so that no replay touches memory or
/// a communicator that was freed.
pub struct Graph {
    graph: CudaGraph,
    _keep: Vec<Keep>,
    /// The ordinal of the GPU it was captured on (for errors).
    device: usize,
}

impl Graph {
    pub fn launch(&self) -> Result<(), CudaFailure> {
        self.graph
            .launch()
            .map_err(fail(self.device, "cuGraphLaunch"))
    }
}

/// One GPU with its context and the one stream all of a rank's work goes to, in order (the
/// stream every enqueue of comm/ takes). Not `Send`: a rank's GPU stays in the rank's thread,
/// as its communicator and graphs must.
pub struct Gpu {
    pub(super) ordinal: usize,
    pub(super) ctx: Arc<CudaContext>,
    pub(super) stream: Arc<CudaStream>,
    /// While a capture runs: what its graph will use.
    capturing: RefCell<Option<Vec<Keep>>>,
}

impl Gpu {
    /// Opens device `ordinal`, binds it to the calling thread (NCCL uses the current device) and
    /// creates a capturable (non-default) stream.
    pub fn open(ordinal: usize) -> Result<Gpu, CudaFailure> {
        let ctx = CudaContext::new(ordinal).map_err(fail(ordinal, "creating the CUDA context"))?;
        // SAFETY: with event tracking on, cudarc records and waits events around every buffer
        // use once a context has several streams, which breaks stream capture. All work of a
        // rank goes to its one stream, in order, so no cross-stream tracking is needed.
        unsafe { ctx.disable_event_tracking() };
        ctx.bind_to_thread()
            .map_err(fail(ordinal, "binding the context to the thread"))?;
        let stream = ctx
            .new_stream()
            .map_err(fail(ordinal, "creating a stream"))?;
        Ok(Gpu {
            ordinal,
            ctx,
            stream,
            capturing: RefCell::new(None),
        })
    }

    /// Compute capability (major, minor).
    pub(crate) fn compute_capability(&self) -> Result<(i32, i32), CudaFailure> {
        self.ctx
            .compute_capability()
            .map_err(fail(self.ordinal, "reading the compute capability"))
    }

    /// The device ordinal.
    pub(crate) fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Binds this GPU's context to the calling thread.
    pub(super) fn bind(&self) -> Result<(), CudaFailure> {
        self.ctx
            .bind_to_thread()
            .map_err(fail(self.ordinal, "binding the context"))
    }

    pub(crate) fn info(&self) -> GpuInfo {
        info(self.ordinal).unwrap_or(GpuInfo {
            index: self.ordinal,
            name: self.ctx.name().unwrap_or_default(),
            pci_bus_id: String::new(),
            memory_bytes: self.ctx.total_mem().unwrap_or(0) as u64,
        })
    }

    /// Free and total device memory in bytes.
    pub(crate) fn mem_info(&self) -> Result<(usize, usize), CudaFailure> {
        self.ctx
            .mem_get_info()
            .map_err(fail(self.ordinal, "cuMemGetInfo"))
    }

    /// Size of the L2 cache in bytes (0 when the driver does not say).
    pub(crate) fn l2_bytes(&self) -> u64 {
        self.ctx
            .attribute(cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
            .unwrap_or(0)
            .max(0) as u64
    }

    /// A zero-filled device buffer of `bytes` bytes (at least one).
    pub fn alloc(&self, bytes: usize) -> Result<Buffer, CudaFailure> {
        if self.capturing.borrow().is_some() {
            // An allocation inside a capture would become graph-owned memory, valid only while
            // the graph runs.
            return Err(CudaFailure {
                device: self.ordinal,
                what: "cuMemAlloc: no allocation during a graph capture".into(),
            });
        }
        let slice = self
            .stream
            .alloc_zeros::<u8>(bytes.max(1))
            .map_err(fail(self.ordinal, "cuMemAlloc"))?;
        let ptr = {
            let (ptr, _sync) = slice.device_ptr(&self.stream);
            ptr
        };
        Ok(Buffer {
            slice: Arc::new(slice),
            ptr,
            device: self.ordinal,
        })
    }

    /// Fails unless `buf` lives on this GPU and holds `bytes` bytes from `off` (the check every
    /// function that hands a buffer to CUDA or NCCL makes first).
    pub(super) fn check_buffer(
        &self,
        buf: &Buffer,
        what: &str,
        off: usize,
        bytes: usize,
    ) -> Result<(), CudaFailure> {
        if buf.device != self.ordinal {
            return Err(CudaFailure {
                device: self.ordinal,
                what: format!("{what}: the buffer lives on GPU {}", buf.device),
            });
        }
        if off.checked_add(bytes).is_none_or(|end| end > buf.len()) {
            return Err(CudaFailure {
                device: self.ordinal,
                what: format!(
                    "{what}: {bytes} B at offset {off} do not fit a buffer of {} B",
                    buf.len()
                ),
            });
        }
        Ok(())
    }

    /// Inside a capture, keeps `buf` alive as long as the graph.
    pub(super) fn keep_buffer(&self, buf: &Buffer) {
        self.keep(|| Box::new(buf.slice.clone()));
    }

    /// Inside a capture, keeps what `k` makes alive as long as the graph. Outside one it does
    /// nothing and costs nothing (eager enqueues are timed).
    pub(super) fn keep(&self, k: impl FnOnce() -> Keep) {
        if let Some(v) = self.capturing.borrow_mut().as_mut() {
            v.push(k());
        }
    }

    /// Copies `data` into the start of `buf` and waits for the copy.
    pub fn upload(&self, buf: &Buffer, data: &[u8]) -> Result<(), CudaFailure> {
        self.upload_at(buf, 0, data)
    }

    /// Copies `data` into `buf` at byte offset `off` and waits for the copy.
    pub(crate) fn upload_at(
        &self,
        buf: &Buffer,
        off: usize,
        data: &[u8],
    ) -> Result<(), CudaFailure> {
        self.check_buffer(buf, "upload", off, data.len())?;
        // SAFETY: the destination range lies inside a live allocation on this GPU (checked) and
        // the source is a host slice of exactly that length, which outlives the copy: the
        // stream is synchronised before returning. Ordered on the rank's stream after any work
        // already enqueued on the buffer.
        let r = unsafe {
            cu::cuMemcpyHtoDAsync_v2(
                buf.ptr + off as u64,
                data.as_ptr() as *const _,
                data.len(),
                self.stream.cu_stream(),
            )
        };
        check(self.ordinal, "cuMemcpyHtoDAsync", r)?;
        self.sync()
    }

    /// Enqueues a device-to-device copy of `bytes` from `src` to `dst`.
    pub(crate) fn copy(&self, dst: &Buffer, src: &Buffer, bytes: usize) -> Result<(), CudaFailure> {
        self.check_buffer(dst, "copy (destination)", 0, bytes)?;
        self.check_buffer(src, "copy (source)", 0, bytes)?;
        self.keep_buffer(dst);
        self.keep_buffer(src);
        // SAFETY: both ranges lie inside live allocations on this GPU (checked); the copy is
        // ordered on this rank's stream, and the buffers are freed in stream order after it (or
        // kept by the graph being captured).
        let r =
            unsafe { cu::cuMemcpyDtoDAsync_v2(dst.ptr, src.ptr, bytes, self.stream.cu_stream()) };
        check(self.ordinal, "cuMemcpyDtoDAsync", r)
    }

    /// Copies the first `len` bytes of `buf` to the host (synchronous).
    pub(crate) fn download(&self, buf: &Buffer, len: usize) -> Result<Vec<u8>, CudaFailure> {
        self.check_buffer(buf, "download", 0, len)?;
        let view = buf.slice.slice(0..len);
        self.stream
            .clone_dtoh(&view)
            .map_err(fail(self.ordinal, "cuMemcpyDtoH"))
    }

    /// Fills `buf` with `byte` on the stream (0xFF poisons bf16/f16/f32 as NaN).
    pub(crate) fn fill(&self, buf: &Buffer, byte: u8) -> Result<(), CudaFailure> {
        self.check_buffer(buf, "fill", 0, buf.len())?;
        self.keep_buffer(buf);
        // SAFETY: the pointer and length describe a live allocation on this GPU; the memset is
        // ordered on this rank's stream like every other use of the buffer.
        let r = unsafe { cu::cuMemsetD8Async(buf.ptr, byte, buf.len(), self.stream.cu_stream()) };
        check(self.ordinal, "cuMemsetD8Async", r)
    }

    /// Whether all work enqueued on the stream has finished (`cuStreamQuery`), without waiting.
    pub(crate) fn done(&self) -> Result<bool, CudaFailure> {
        // SAFETY: the stream belongs to this GPU's live context; cuStreamQuery only reads it.
        let r = unsafe { cu::cuStreamQuery(self.stream.cu_stream()) };
        if r == cu::CUresult::CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        check(self.ordinal, "cuStreamQuery", r).map(|_| true)
    }

    pub fn sync(&self) -> Result<(), CudaFailure> {
        self.stream
            .synchronize()
            .map_err(fail(self.ordinal, "cuStreamSynchronize"))
    }

    /// A timing event (created once, recorded many times).
    pub(crate) fn event(&self) -> Result<Event, CudaFailure> {
        self.ctx
            .new_event(Some(cu::CUevent_flags::CU_EVENT_DEFAULT))
            .map(|e| Event(e, self.ordinal))
            .map_err(fail(self.ordinal, "cuEventCreate"))
    }

    /// Records `ev` on the stream.
    pub(crate) fn record(&self, ev: &Event) -> Result<(), CudaFailure> {
        ev.0.record(&self.stream)
            .map_err(fail(self.ordinal, "cuEventRecord"))
    }

    /// Records `ev` as a timestamp: on the stream as [`Gpu::record`] outside a capture; inside
    /// a capture as an event-record node of the graph (`CU_EVENT_RECORD_EXTERNAL`), so that
    /// every replay of the graph records it again, where a plain record would only order work.
    pub(crate) fn record_timestamp(&self, ev: &Event) -> Result<(), CudaFailure> {
        if self.capturing.borrow().is_none() {
            return self.record(ev);
        }
        // SAFETY: the event and the stream are live handles of this GPU's context (the event
        // lives as long as the caller keeps it; a graph that records it must be replayed only
        // while the event lives, which the job guarantees by keeping both together).
        let r = unsafe {
            cu::cuEventRecordWithFlags(
                ev.0.cu_event(),
                self.stream.cu_stream(),
                cu::CUevent_record_flags_enum::CU_EVENT_RECORD_EXTERNAL as std::ffi::c_uint,
            )
        };
        check(
            self.ordinal,
            "cuEventRecordWithFlags(CU_EVENT_RECORD_EXTERNAL)",
            r,
        )
    }

    /// Captures everything `body` enqueues on the stream into a graph (thread-local capture
    /// mode: one thread per GPU). Nothing inside may allocate, free, synchronize or copy to
    /// the host: CUDA refuses those during a capture and the capture fails with its error.
    pub fn capture<F>(&self, body: F) -> anyhow::Result<Graph>
    where
        F: FnOnce() -> anyhow::Result<()>,
    {
        if self.capturing.borrow().is_some() {
            anyhow::bail!("GPU {}: a capture is already running", self.ordinal);
        }
        self.stream
            .begin_capture(cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(fail(self.ordinal, "cuStreamBeginCapture"))?;
        *self.capturing.borrow_mut() = Some(vec![]);
        let res = body();
        let keep = self.capturing.borrow_mut().take().unwrap_or_default();
        let graph = self
            .stream
            .end_capture(cu::CUgraphInstantiate_flags(0))
            .map_err(fail(self.ordinal, "cuStreamEndCapture/cuGraphInstantiate"));
        res?;
        let g = graph?.ok_or_else(|| CudaFailure {
            device: self.ordinal,
            what: "stream capture produced no graph".into(),
        })?;
        g.upload().map_err(fail(self.ordinal, "cuGraphUpload"))?;
        Ok(Graph {
            graph: g,
            _keep: keep,
            device: self.ordinal,
        })
    }
}

/// The driver's handle of device `ordinal` (`cuInit`, then `cuDeviceGet`): the queries below
/// read a device without creating a context.
pub(super) fn device_handle(ordinal: usize) -> Result<cu::CUdevice, CudaFailure> {
    cudarc::driver::result::init().map_err(fail(ordinal, "cuInit"))?;
    cudarc::driver::result::device::get(ordinal as i32).map_err(fail(ordinal, "cuDeviceGet"))
}

/// The integer attribute `a` of device `ordinal` (`what` names it in an error).
fn attribute(ordinal: usize, a: cu::CUdevice_attribute, what: &str) -> Result<i32, CudaFailure> {
    let dev = device_handle(ordinal)?;
    // SAFETY: dev is a device handle just returned by cuDeviceGet; cuDeviceGetAttribute only
    // writes one integer, which get_attribute owns.
    unsafe { cudarc::driver::result::device::get_attribute(dev, a) }.map_err(fail(ordinal, what))
}

/// Peak SM and memory clocks of device `ordinal`, kHz: the driver attributes
/// CU_DEVICE_ATTRIBUTE_CLOCK_RATE and CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE (the rated
/// maxima, not the clocks of the moment).
pub(crate) fn clocks_khz(ordinal: usize) -> Result<(i32, i32), CudaFailure> {
    use cudarc::driver::sys::CUdevice_attribute as A;
    Ok((
        attribute(
            ordinal,
            A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE,
            "cuDeviceGetAttribute(CLOCK_RATE)",
        )?,
        attribute(
            ordinal,
            A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE,
            "cuDeviceGetAttribute(MEMORY_CLOCK_RATE)",
        )?,
    ))
}

/// Compute capability of device `ordinal` without creating a context.
pub(crate) fn compute_capability(ordinal: usize) -> Result<(i32, i32), CudaFailure> {
    use cudarc::driver::sys::CUdevice_attribute as A;
    let attr = |a| attribute(ordinal, a, "cuDeviceGetAttribute");
    Ok((
        attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
    ))
}

/// Name, PCI bus id and memory of device `ordinal`, without creating a context.
pub(crate) fn info(ordinal: usize) -> Result<GpuInfo, CudaFailure> {
    let dev = device_handle(ordinal)?;
    let name =
        cudarc::driver::result::device::get_name(dev).map_err(fail(ordinal, "cuDeviceGetName"))?;
    // SAFETY: dev is a valid device handle; total_mem only reads it.
    let mem = unsafe { cudarc::driver::result::device::total_mem(dev) }
        .map_err(fail(ordinal, "cuDeviceTotalMem"))?;
    let mut buf = [0 as std::ffi::c_char; 32];
    // SAFETY: the buffer holds 32 bytes, as the length argument says; NCCL/CUDA bus ids are 13.
    let r = unsafe { cu::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, dev) };
    check(ordinal, "cuDeviceGetPCIBusId", r)?;
    // SAFETY: cuDeviceGetPCIBusId wrote a NUL-terminated string into buf.
    let bus = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    Ok(GpuInfo {
        index: ordinal,
        name,
        pci_bus_id: bus,
        memory_bytes: mem as u64,
    })
}

/// The UUID of device `ordinal` as `nvidia-smi -L` prints it (`GPU-8c7b2f4e-...`), without
/// creating a context: what stays the same when the device's ordinal or PCI slot changes.
pub(crate) fn uuid(ordinal: usize) -> Result<String, CudaFailure> {
    let dev = device_handle(ordinal)?;
    let id =
        cudarc::driver::result::device::get_uuid(dev).map_err(fail(ordinal, "cuDeviceGetUuid"))?;
    Ok(uuid_text(&id.bytes.map(|b| b as u8)))
}

/// `GPU-` and the 16 bytes as 8-4-4-4-12 lower-case hex digits.
pub(crate) fn uuid_text(b: &[u8; 16]) -> String {
    let hex =
        |r: std::ops::Range<usize>| -> String { b[r].iter().map(|x| format!("{x:02x}")).collect() };
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    )
}

/// Whether device `a` can access device `b`'s memory directly (P2P).
pub(crate) fn can_access_peer(a: usize, b: usize) -> Result<bool, CudaFailure> {
    let (da, db) = (device_handle(a)?, device_handle(b)?);
    let mut v = 0;
    // SAFETY: v is a valid out-pointer; da and db are valid device handles.
    let r = unsafe { cu::cuDeviceCanAccessPeer(&mut v, da, db) };
    check(a, "cuDeviceCanAccessPeer", r)?;
    Ok(v != 0)
}

/// The CUDA version the driver supports, e.g. "13.0".
pub(crate) fn driver_cuda_version() -> Option<String> {
    let mut v = 0;
    // SAFETY: v is a valid out-pointer.
    let r = unsafe { cu::cuDriverGetVersion(&mut v) };
    (r == cu::CUresult::CUDA_SUCCESS).then(|| format!("{}.{}", v / 1000, (v % 1000) / 10))
}

/// The kernel driver's version line (e.g. "580.159.04"), where Linux exposes it.
pub(crate) fn driver_version() -> Option<String> {
    let s = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    let line = s.lines().next()?;
    // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Tue ..."
    line.split_whitespace()
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    #[test]
    fn uuid_reads_as_nvidia_smi_prints_it() {
        // nvidia-smi -L: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00112233-4455-6677-8899-aabbccddeeff)"
        let b: [u8; 16] = std::array::from_fn(|i| (i as u8) * 0x11);
        assert_eq!(
            super::uuid_text(&b),
            "GPU-00112233-4455-6677-8899-aabbccddeeff"
        );
    }
}
