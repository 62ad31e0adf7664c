//! Streaming reader of Kineto / Chrome traces (`.json`, `.json.gz`).
//!
//! A real 8-rank profile is gigabytes of JSON, so nothing here holds the document or a
//! `serde_json::Value` of it: a visitor walks the top-level object, and `traceEvents` is walked
//! one event at a time into [`RawEvent`], which names only the fields the analysis needs (every
//! other field and argument is skipped unread by serde as `IgnoredAny`). Each event is then
//! kept, in a compact form, only if the analysis uses it: GPU kernels, copies and sets; the
//! runtime calls that launch work; `record_param_comms` CPU ops; spans of a named step label.
//!
//! [`read_trace`] puts [`super::prefilter`] in front: the events that may matter reach the
//! direct parser of [`super::event`] one slice each (and serde where that parser leaves one to
//! it), the others are never tokenized. Where that scanner gives up (anything
//! unusual, any error), the file is read again by the plain streaming reader ([`read_from`]),
//! which is the reference: a test checks that both give the same result.

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::kernels;
use super::limits::{self, Expanded, TraceLimits};
use super::names::is_nccl_kernel;
use super::prefilter;
pub(crate) use super::raw::{Lenient, RawArgs, RawEvent, Text};
use crate::evidence::regex_once;

/// `distributedInfo` of a Kineto trace.
#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct DistributedInfo {
    pub(crate) rank: Option<Lenient>,
    pub(crate) world_size: Option<Lenient>,
}

/// The collective arguments Kineto copies from `record_param_comms` (normalised later).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CommArgs {
    pub(crate) collective_name: Option<String>,
    pub(crate) in_nelems: Option<u64>,
    pub(crate) group_size: Option<u64>,
    pub(crate) dtype: Option<String>,
    pub(crate) pg_name: Option<String>,
    pub(crate) seq: Option<i64>,
}

impl CommArgs {
    fn from_raw(a: &RawArgs) -> Option<CommArgs> {
        let c = CommArgs {
            collective_name: a.collective_name.clone(),
            in_nelems: whole(&a.in_nelems),
            group_size: whole(&a.group_size),
            dtype: a.dtype.as_ref().map(Lenient::as_string),
            pg_name: a.pg_name.as_ref().map(Lenient::as_string),
            seq: int(&a.seq),
        };
        // c10d records the wait on a collective's work as a `record_param_comms` named
        // `wait`: not a collective of its own.
        c.collective_name
            .as_deref()
            .is_some_and(|n| n != "wait")
            .then_some(c)
    }
}

/// A count an argument gives (`In msg nelems`, `Group size`): its number, truncated.
fn whole(x: &Option<Lenient>) -> Option<u64> {
    x.as_ref().and_then(Lenient::as_f64).map(|x| x as u64)
}

/// An integer field (an id, a rank, a pid): its number, truncated.
fn int(x: &Option<Lenient>) -> Option<i64> {
    x.as_ref().and_then(Lenient::as_i64)
}

/// What a GPU-side event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GpuKind {
    /// A kernel NCCL launched.
    Nccl,
    /// A custom communication kernel: its index in [`super::kernels::KERNELS`].
    Custom(u16),
    /// A kernel whose name says it communicates but that neither NCCL nor the table knows.
    CommLike,
    /// Any other kernel.
    Kernel,
    Memcpy,
    Memset,
}

/// One event on a GPU stream.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GpuEvent {
    pub(crate) ts: f64,
    pub(crate) dur: f64,
    pub(crate) kind: GpuKind,
    /// Index into [`TraceData::names`].
    pub(crate) name: u32,
    pub(crate) correlation: Option<i64>,
    pub(crate) external_id: Option<i64>,
    /// Collective arguments Kineto put on the kernel itself (recent PyTorch).
    pub(crate) comm: Option<Box<CommArgs>>,
    /// `args.rank` of a multi-rank trace.
    pub(crate) rank: Option<u32>,
}

impl GpuKind {
    /// A collective's own kernel (NCCL's or a custom one).
    pub(crate) fn is_collective(self) -> bool {
        matches!(self, GpuKind::Nccl | GpuKind::Custom(_))
    }
}

/// A CPU op that launches a custom collective ([`super::kernels::OPS`]), with the size its
/// first input gives.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CpuOp {
    pub(crate) ts: f64,
    pub(crate) dur: f64,
    pub(crate) external_id: Option<i64>,
    pub(crate) op: &'static str,
    /// Elements of the first input (the product of its `Input Dims`).
    pub(crate) elements: Option<u64>,
    pub(crate) dtype: Option<&'static str>,
    pub(crate) rank: Option<u32>,
}

/// What a host-side runtime call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LaunchKind {
    /// `cudaLaunchKernel` and friends, `cuLaunchKernel`.
    Kernel,
    /// `cudaGraphLaunch`.
    Graph,
    /// Asynchronous copies and sets.
    Copy,
}

/// A runtime call that puts work on a GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RuntimeEvent {
    pub(crate) ts: f64,
    pub(crate) dur: f64,
    pub(crate) kind: LaunchKind,
    pub(crate) correlation: Option<i64>,
    pub(crate) rank: Option<u32>,
}

/// A `record_param_comms` CPU op: the collective as c10d issued it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CommOp {
    pub(crate) ts: f64,
    pub(crate) dur: f64,
    pub(crate) external_id: Option<i64>,
    pub(crate) args: CommArgs,
    pub(crate) rank: Option<u32>,
}

/// A span of the user's step label (`record_function`), host time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Span {
    pub(crate) ts: f64,
    pub(crate) dur: f64,
    pub(crate) rank: Option<u32>,
}

/// Where the rank came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RankSource {
    DistributedInfo,
    FileName,
    /// Neither said: the position among the files given.
    Order,
}

/// What one trace file holds, reduced to what the analysis needs.
#[derive(Debug, Clone, Default)]
pub(crate) struct TraceData {
    pub(crate) path: PathBuf,
    pub(crate) rank: Option<usize>,
    pub(crate) world_size: Option<usize>,
    pub(crate) rank_from_info: bool,
    pub(crate) gpu: Vec<GpuEvent>,
    pub(crate) runtime: Vec<RuntimeEvent>,
    pub(crate) comms: Vec<CommOp>,
    pub(crate) labels: Vec<Span>,
    /// CPU ops of custom collectives (read only when [`ReadOptions::custom_ops`]).
    pub(crate) cpu_ops: Vec<CpuOp>,
    /// `ProfilerStep#N` spans (what `torch.profiler` with a schedule writes around each
    /// step), read when no step label is given; host-side only (not `gpu_user_annotation`).
    pub(crate) profiler_steps: Vec<Span>,
    /// Spans of the engines' step markers ([`super::names::STEP_MARKERS`], by index), read
    /// when no step label is given: the steps of a trace without `ProfilerStep#` spans.
    pub(crate) engine_steps: Vec<(usize, Span)>,
    /// The OS process ids of the host side: the `pid` Kineto writes on every CPU event, read
    /// from the runtime calls (`cuda_runtime`, `cuda_driver`: the CPU side of every launch);
    /// GPU events carry the device index as their pid and are not read. Empty for a trace
    /// whose events carry `args.rank` (verifybench's own, one track per rank, not a process).
    pub(crate) host_pids: Vec<u32>,
    /// The host, where the file name gives it with one of [`Self::host_pids`]
    /// ([`host_from_file_name`]); set by [`read_trace`].
    pub(crate) host: Option<String>,
    /// Interned GPU event names.
    pub(crate) names: Vec<String>,
    /// Events read in all (kept or not).
    pub(crate) events_seen: u64,
    /// Whether the document had a `traceEvents` array (or was a bare event array).
    pub(crate) had_events: bool,
}

/// What to keep besides the fixed set.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReadOptions {
    /// A `record_function` / annotation name whose spans mark steps: a name, or a pattern
    /// where `*` stands for any text (`ProfilerStep#*`).
    pub(crate) step_label: Option<String>,
    /// Keep the CPU ops of custom collectives with their input shapes (a second, plain read
    /// of a trace whose custom kernels need sizes).
    pub(crate) custom_ops: bool,
}

/// The name `torch.profiler` gives each step's span, followed by the step number.
pub(crate) const PROFILER_STEP: &str = "ProfilerStep#";

impl ReadOptions {
    /// The text every kept span name begins with, for the scanner: the label up to its first
    /// `*`, else [`PROFILER_STEP`].
    pub(crate) fn label_prefix(&self) -> &str {
        match &self.step_label {
            Some(l) => l.split('*').next().unwrap_or(""),
            None => PROFILER_STEP,
        }
    }
}

/// Whether `name` matches `pattern`, where each `*` stands for any text (none included).
pub(crate) fn label_matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, mid)) = parts.split_last() else {
        return rest.is_empty();
    };
    for p in mid {
        match rest.find(p) {
            Some(i) => rest = &rest[i + p.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

struct Sink<'a> {
    data: &'a mut TraceData,
    opts: &'a ReadOptions,
    intern: HashMap<String, u32>,
    /// The kind of each interned kernel name (decided once per name).
    kinds: Vec<GpuKind>,
    /// The limits of the events kept ([`TraceLimits::kept`], and per byte of gzip read so far,
    /// `gzip`, for a gzip file); past them nothing more is kept and `over` says which.
    limits: TraceLimits,
    gzip: Option<Rc<Cell<u64>>>,
    over: Option<String>,
}

/// What a kernel's name makes it.
fn kernel_kind(name: &str) -> GpuKind {
    if is_nccl_kernel(name) {
        GpuKind::Nccl
    } else if let Some((i, _)) = kernels::custom_kernel(name) {
        GpuKind::Custom(i)
    } else if kernels::looks_like_collective(name) {
        GpuKind::CommLike
    } else {
        GpuKind::Kernel
    }
}

/// The elements and dtype of a CPU op's first input.
fn first_input(a: &RawArgs) -> (Option<u64>, Option<&'static str>) {
    let dims = a.input_dims.and_then(|d| d.0);
    let dtype = a
        .input_type
        .as_ref()
        .and_then(|t| t.0.as_deref())
        .and_then(kernels::input_type_dtype);
    (dims, dtype)
}

impl<'a> Sink<'a> {
    fn new(
        data: &'a mut TraceData,
        opts: &'a ReadOptions,
        limits: TraceLimits,
        gzip: Option<Rc<Cell<u64>>>,
    ) -> Self {
        Sink {
            data,
            opts,
            intern: HashMap::new(),
            kinds: Vec::new(),
            limits,
            gzip,
            over: None,
        }
    }

    /// The events kept so far.
    fn kept(&self) -> u64 {
        let d = &self.data;
        (d.gpu.len()
            + d.runtime.len()
            + d.comms.len()
            + d.labels.len()
            + d.cpu_ops.len()
            + d.profiler_steps.len()
            + d.engine_steps.len()) as u64
    }

    fn name_id(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.intern.get(name) {
            return i;
        }
        let i = self.data.names.len() as u32;
        self.data.names.push(name.to_string());
        self.intern.insert(name.to_string(), i);
        self.kinds.push(kernel_kind(name));
        i
    }

    /// Keeps what the analysis uses of `e`; past the limits of the events kept, sets `over`
    /// and keeps nothing more.
    fn push(&mut self, e: &RawEvent) {
        if self.over.is_some() {
            return;
        }
        self.keep(e);
        let (kept, l) = (self.kept(), &self.limits);
        if kept > l.kept {
            self.over = Some(l.kept_words());
        } else if let Some(c) = &self.gzip {
            if kept > c.get() / l.gzip_per_kept + l.kept_slack {
                self.over = Some(l.kept_gzip_words(kept, c.get()));
            }
        }
    }

    fn keep(&mut self, e: &RawEvent) {
        self.data.events_seen += 1;
        if e.ph.as_ref().map(Text::as_str) != Some("X") {
            return;
        }
        let (Some(ts), Some(name)) = (e.ts.as_ref().and_then(Lenient::as_f64), &e.name) else {
            return;
        };
        let name = name.as_str();
        let dur = e.dur.as_ref().and_then(Lenient::as_f64).unwrap_or(0.0);
        let no_args;
        let args = match &e.args {
            Some(a) => a,
            None => {
                no_args = RawArgs::default();
                &no_args
            }
        };
        let corr = int(&args.correlation);
        let ext = int(&args.external_id);
        let cat = e.cat.as_ref().map(Text::as_str).unwrap_or("");
        let rank = int(&args.rank).map(|r| r as u32);
        match cat {
            "kernel" | "gpu_memcpy" | "gpu_memset" | "Kernel" | "Memcpy" | "Memset" => {
                let comm = CommArgs::from_raw(args).map(Box::new);
                let name = self.name_id(name);
                let kind = match cat {
                    "gpu_memcpy" | "Memcpy" => GpuKind::Memcpy,
                    "gpu_memset" | "Memset" => GpuKind::Memset,
                    _ => self.kinds[name as usize],
                };
                self.data.gpu.push(GpuEvent {
                    ts,
                    dur,
                    kind,
                    name,
                    correlation: corr,
                    external_id: ext,
                    comm,
                    rank,
                });
            }
            "cuda_runtime" | "cuda_driver" | "Runtime" | "Driver" => {
                // The process that launched: every runtime call is kept by the scanner too,
                // so both readers see the same pids.
                if let (None, Some(pid)) = (rank, int(&e.pid)) {
                    if let Ok(pid) = u32::try_from(pid) {
                        if pid > 0 && !self.data.host_pids.contains(&pid) {
                            self.data.host_pids.push(pid);
                        }
                    }
                }
                let kind = if name.contains("GraphLaunch") {
                    LaunchKind::Graph
                } else if name.contains("LaunchKernel") || name.contains("LaunchCooperative") {
                    LaunchKind::Kernel
                } else if name.contains("Memcpy") || name.contains("Memset") {
                    LaunchKind::Copy
                } else {
                    return;
                };
                self.data.runtime.push(RuntimeEvent {
                    ts,
                    dur,
                    kind,
                    correlation: corr,
                    rank,
                });
            }
            // The GPU-side copy of an annotation repeats its host span: the host one counts.
            "gpu_user_annotation" => {}
            _ => {
                match self.opts.step_label.as_deref() {
                    Some(l) if label_matches(l, name) => {
                        self.data.labels.push(Span { ts, dur, rank })
                    }
                    None if name.starts_with(PROFILER_STEP) => {
                        self.data.profiler_steps.push(Span { ts, dur, rank })
                    }
                    None => {
                        if let Some(i) = super::names::step_marker(name) {
                            self.data.engine_steps.push((i, Span { ts, dur, rank }))
                        }
                    }
                    _ => {}
                }
                if self.opts.custom_ops {
                    if let Some(o) = kernels::custom_op(name) {
                        let (elements, dtype) = first_input(args);
                        self.data.cpu_ops.push(CpuOp {
                            ts,
                            dur,
                            external_id: ext,
                            op: o.op,
                            elements,
                            dtype,
                            rank,
                        });
                    }
                }
                if name == "record_param_comms" || args.collective_name.is_some() {
                    if let Some(c) = CommArgs::from_raw(args) {
                        self.data.comms.push(CommOp {
                            ts,
                            dur,
                            external_id: ext,
                            args: c,
                            rank,
                        });
                    }
                }
            }
        }
    }
}

struct EventsSeed<'a, 'b>(&'a mut Sink<'b>);

impl<'de> DeserializeSeed<'de> for EventsSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EventsSeed<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of trace events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.data.had_events = true;
        while let Some(e) = seq.next_element::<RawEvent>()? {
            self.0.push(&e);
            if self.0.over.is_some() {
                // the reader names the limit (`read_whole`)
                return Err(serde::de::Error::custom("past the events kept"));
            }
        }
        Ok(())
    }
}

struct TopVisitor<'a, 'b>(&'a mut Sink<'b>);

impl<'de> Visitor<'de> for TopVisitor<'_, '_> {
    type Value = Option<DistributedInfo>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Chrome trace (an object with traceEvents, or an array of events)")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut info = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "traceEvents" => map.next_value_seed(EventsSeed(self.0))?,
                "distributedInfo" => info = map.next_value::<Option<DistributedInfo>>()?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(info)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        EventsSeed(self.0).visit_seq(seq)?;
        Ok(None)
    }
}

/// The rank a file name states: SGLang `<time>-TP-<rank>.trace.json.gz`, `rank-<n>`,
/// `rank<n>`, `rank_<n>`.
pub(crate) fn rank_from_file_name(path: &Path) -> Option<usize> {
    let name = path.file_name()?.to_str()?.to_ascii_lowercase();
    let re = regex_once!(r"(?:-tp-|rank[-_]?)(\d+)");
    re.captures_iter(&name)
        .last()
        .and_then(|c| c[1].parse().ok())
}

/// The host and pid `torch.profiler.tensorboard_trace_handler` names its files with by default:
/// `<hostname>_<pid>.<time>.pt.trace.json[.gz]` (pytorch/pytorch torch/profiler/profiler.py:
/// `worker_name = f"{socket.gethostname()}_{os.getpid()}"`). The host is kept only when that pid
/// is one of the trace's own (`pids`), so that a name such as `worker0_step_12.<time>...` gives
/// nothing.
pub(crate) fn host_from_file_name(path: &Path, pids: &[u32]) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    let re = regex_once!(r"^(.+)_(\d+)\.\d+\.pt\.trace\.json(?:\.gz)?$");
    let c = re.captures(name)?;
    let pid: u32 = c[2].parse().ok()?;
    pids.contains(&pid).then(|| c[1].to_string())
}

/// Whether a path looks like a trace (`.json` or `.json.gz`, the `.pt.trace.json` of
/// torch.profiler included).
pub(crate) fn is_trace_name(path: &Path) -> bool {
    [".json", ".json.gz"].iter().any(|e| ends_with(path, e))
}

/// Whether a path's file name ends with `ext` (any case).
fn ends_with(path: &Path, ext: &str) -> bool {
    let n = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    n.to_ascii_lowercase().ends_with(ext)
}

/// Whether a path looks like a log (`.log`, `.txt`, `.out`, `.err`).
pub(crate) fn is_log_name(path: &Path) -> bool {
    [".log", ".txt", ".out", ".err"]
        .iter()
        .any(|e| ends_with(path, e))
}

/// Whether a file is gzip-compressed, by its magic bytes (not its name).
pub(crate) fn is_gzip(path: &Path) -> anyhow::Result<bool> {
    let (mut f, _) = crate::util::read::open(path, "trace")?;
    let mut magic = [0u8; 2];
    let n = read_up_to(&mut f, &mut magic)
        .map_err(|e| anyhow::anyhow!("'{}': cannot read: {e}", path.display()))?;
    Ok(n == 2 && magic == [0x1f, 0x8b])
}

fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Whether a file holds JSON (a trace) rather than a log, by the content of its first 4 KiB,
/// decompressed ([`crate::util::looks_like_json`]: a launcher's `[rank0]:` before every log
/// line is not a JSON array).
/// An empty file (or one that decompresses to nothing) is an error that says so.
pub(crate) fn looks_like_json(path: &Path) -> anyhow::Result<bool> {
    let gz = is_gzip(path)?;
    let mut r = open_trace(path, gz)?;
    let mut buf = [0u8; 4096];
    let n = read_up_to(&mut r, &mut buf).map_err(|e| {
        let m = e.to_string();
        let what = gzip_problem(&m).unwrap_or("cannot be read");
        anyhow::anyhow!("'{}': {what}: {m}", path.display())
    })?;
    if buf[..n].iter().all(u8::is_ascii_whitespace) {
        let what = match (gz, n) {
            (true, _) => "a gzip file that holds nothing",
            (false, 0) => "empty (0 bytes)",
            (false, _) => "blank (white space only)",
        };
        anyhow::bail!(
            "'{}' is {what}: give a profiler trace (.json or .json.gz) or an NCCL COLL log",
            path.display()
        );
    }
    Ok(crate::util::looks_like_json(&buf[..n]))
}

/// What a gzip reader's error says of the file, in words: cut short, or not gzip at all.
fn gzip_problem(m: &str) -> Option<&'static str> {
    if m.contains("deflate") || m.contains("unexpected end") || m.contains("UnexpectedEof") {
        Some("a truncated gzip file (its compressed stream ends early: cut short, or copied while being written)")
    } else if m.contains("invalid gzip") || m.contains("corrupt") {
        Some("not a readable gzip file")
    } else {
        None
    }
}

/// A trace file's decompressed bytes (`gz`: gzip, read through a 1 MiB buffer), refused past
/// [`limits::LIMITS`] (a regular file only); the error is one line naming the file.
pub fn open_trace(path: &Path, gz: bool) -> anyhow::Result<Box<dyn Read>> {
    Ok(Box::new(open_limited(path, gz, &limits::LIMITS)?))
}

/// [`open_trace`] under `l`: a plain file larger than its total is refused before it is read,
/// a stream that grows past it or a gzip stream that expands past its ratio when it does.
fn open_limited(path: &Path, gz: bool, l: &TraceLimits) -> anyhow::Result<Expanded> {
    let (f, len) = crate::util::read::open(path, "trace")?;
    if !gz && len > l.total {
        anyhow::bail!("'{}': {}", path.display(), l.total_words());
    }
    let compressed = gz.then(|| Rc::new(Cell::new(0)));
    // The gzip bytes are counted as the decoder takes them (32 KiB at a time from the 1 MiB
    // buffer), not as the buffer reads ahead: a small file counts its bytes as they expand.
    let inner: Box<dyn Read> = match &compressed {
        Some(c) => Box::new(flate2::read::MultiGzDecoder::new(limits::Counted {
            inner: BufReader::with_capacity(1 << 20, f),
            bytes: c.clone(),
        })),
        None => Box::new(f),
    };
    Ok(Expanded::new(inner, compressed, *l))
}

/// Reads one trace file: one [`TraceData`] per rank it holds (Kineto writes one rank per file;
/// verifybench's own multi-rank traces carry `args.rank`). Errors are one line naming the
/// file (the caller decides whether they are fatal).
pub(crate) fn read_trace(path: &Path, opts: &ReadOptions) -> anyhow::Result<Vec<TraceData>> {
    read_trace_limited(path, opts, &limits::LIMITS)
}

/// [`read_trace`] under the limits `l` (small ones in tests, through the same code).
pub(crate) fn read_trace_limited(
    path: &Path,
    opts: &ReadOptions,
    l: &TraceLimits,
) -> anyhow::Result<Vec<TraceData>> {
    let gz = is_gzip(path)?;
    // The plain reader holds whole strings (serde's buffer): it reads through the check of
    // their length.
    let plain = |opts: &ReadOptions| {
        let r = open_limited(path, gz, l)?;
        let gzip = r.compressed.clone();
        let r = BufReader::with_capacity(1 << 16, limits::Strings::new(r, l.string));
        read_whole(
            serde_json::Deserializer::from_reader(r),
            path,
            opts,
            l,
            gzip,
        )
    };
    let mut r = open_limited(path, gz, l)?;
    let gzip = r.compressed.clone();
    let t = match read_fast_limited(&mut r, path, opts, l, gzip)? {
        Some(t) => t,
        // A limit passed as the scanner read: said now, not read again.
        None if r.passed.is_some() => {
            anyhow::bail!("'{}': {}", path.display(), r.passed.unwrap_or_default())
        }
        // The scanner gave up: the plain reader reads it (and names what is wrong, if anything).
        None => plain(opts)?,
    };
    // Custom collective kernels take their sizes from the CPU ops that launch them, which the
    // scanner skips: such a trace is read once more, whole, keeping those ops. (The engines'
    // step markers, which cut a trace without `ProfilerStep#` spans, the scanner keeps.)
    let custom = !opts.custom_ops && t.gpu.iter().any(|g| matches!(g.kind, GpuKind::Custom(_)));
    let t = if custom {
        let again = ReadOptions {
            custom_ops: opts.custom_ops || custom,
            ..opts.clone()
        };
        plain(&again)?
    } else {
        t
    };
    let mut ts = split_by_rank(t);
    for t in &mut ts {
        t.host = host_from_file_name(&t.path, &t.host_pids);
    }
    Ok(ts)
}

/// The same as [`read_from`] through [`prefilter::scan`]: only the events that may matter are
/// deserialized, each from its own slice; `None` where the scanner gave up or anything failed,
/// and the caller must read the document with [`read_from`] (which then gives the result, or
/// the error message, of the reference reader).
#[cfg(test)]
pub(crate) fn read_fast<R: Read>(r: R, path: &Path, opts: &ReadOptions) -> Option<TraceData> {
    read_fast_limited(r, path, opts, &limits::LIMITS, None)
        .ok()
        .flatten()
}

/// [`read_fast`] under the limits `l` (`gzip`: the bytes of gzip read so far, for a gzip file):
/// it gives up on an event longer than the longest string and on a string that long outside
/// the events (for the plain reader to name it), and refuses past the events kept.
fn read_fast_limited<R: Read>(
    r: R,
    path: &Path,
    opts: &ReadOptions,
    l: &TraceLimits,
    gzip: Option<Rc<Cell<u64>>>,
) -> anyhow::Result<Option<TraceData>> {
    let mut data = TraceData {
        path: path.to_path_buf(),
        ..Default::default()
    };
    let mut sink = Sink::new(&mut data, opts, *l, gzip);
    let sk = prefilter::scan_limited(
        r,
        Some(opts.label_prefix()),
        // without a step label, the engines' step markers (`Sink` reads them then)
        opts.step_label.is_none(),
        l.string as usize,
        // One UTF-8 check of the whole event (fast on ASCII) instead of one per string: on a
        // `&str` serde does not check again. Most events are then read by the direct parser,
        // which gives what serde gives or leaves the event to serde; bytes that are not UTF-8
        // go to `from_slice` as before.
        |ev, plain| {
            let s = std::str::from_utf8(ev);
            if let Ok(s) = s {
                if super::event::parse_then(s, plain, |e| sink.push(e)).is_some() {
                    return sink.over.is_none();
                }
            }
            let Ok(e) = s.map_or_else(
                |_| serde_json::from_slice(ev),
                serde_json::from_str::<RawEvent>,
            ) else {
                return false;
            };
            sink.push(&e);
            sink.over.is_none()
        },
    );
    if let Some(over) = sink.over.take() {
        anyhow::bail!("'{}': {over}", path.display());
    }
    let Some(sk) = sk else {
        return Ok(None);
    };
    if limits::holds_longer_string(&sk.doc, l.string) {
        return Ok(None);
    }
    // The document outside the event array, with `"traceEvents":[]`.
    let mut de = serde_json::Deserializer::from_slice(&sk.doc);
    let Ok(info) = de
        .deserialize_any(TopVisitor(&mut sink))
        .and_then(|i| de.end().map(|_| i))
    else {
        return Ok(None);
    };
    data.events_seen += sk.dropped;
    Ok(finish(data, info, path).ok())
}

/// Splits a trace whose events carry `args.rank` into one trace per rank.
pub(crate) fn split_by_rank(t: TraceData) -> Vec<TraceData> {
    let mut ranks: Vec<u32> = t
        .gpu
        .iter()
        .filter_map(|g| g.rank)
        .chain(t.runtime.iter().filter_map(|r| r.rank))
        .collect();
    ranks.sort_unstable();
    ranks.dedup();
    if ranks.len() <= 1 {
        let mut t = t;
        if let (Some(&r), false) = (ranks.first(), t.rank_from_info) {
            t.rank = Some(r as usize);
            t.rank_from_info = true;
        }
        return vec![t];
    }
    ranks
        .iter()
        .map(|&r| TraceData {
            path: t.path.clone(),
            rank: Some(r as usize),
            world_size: t.world_size,
            rank_from_info: true,
            gpu: of_rank(&t.gpu, |g| g.rank, r, false),
            runtime: of_rank(&t.runtime, |x| x.rank, r, false),
            comms: of_rank(&t.comms, |x| x.rank, r, false),
            labels: of_rank(&t.labels, |x| x.rank, r, true),
            cpu_ops: of_rank(&t.cpu_ops, |x| x.rank, r, true),
            profiler_steps: of_rank(&t.profiler_steps, |x| x.rank, r, true),
            engine_steps: of_rank(&t.engine_steps, |x| x.1.rank, r, true),
            // a track per rank, not an OS process
            host_pids: Vec::new(),
            host: None,
            names: t.names.clone(),
            events_seen: t.events_seen,
            had_events: true,
        })
        .collect()
}

/// The items of rank `r`: those that carry it, and with `shared` those that carry no rank.
fn of_rank<T: Clone>(v: &[T], rank: impl Fn(&T) -> Option<u32>, r: u32, shared: bool) -> Vec<T> {
    v.iter()
        .filter(|x| rank(x).map_or(shared, |y| y == r))
        .cloned()
        .collect()
}

/// Reads a trace from any reader (`path` only names it in messages and in the result).
#[cfg(test)]
pub(crate) fn read_from<R: Read>(
    r: R,
    path: &Path,
    opts: &ReadOptions,
) -> anyhow::Result<TraceData> {
    let r = limits::Strings::new(r, limits::LIMITS.string);
    let de = serde_json::Deserializer::from_reader(r);
    read_whole(de, path, opts, &limits::LIMITS, None)
}

/// [`read_from`] of a document in memory (the same reading, from a slice).
#[cfg(test)]
pub(crate) fn read_slice(b: &[u8], path: &Path, opts: &ReadOptions) -> anyhow::Result<TraceData> {
    read_whole(
        serde_json::Deserializer::from_slice(b),
        path,
        opts,
        &limits::LIMITS,
        None,
    )
}

/// The whole document deserialized event by event into a [`TraceData`], keeping events
/// within the limits `l` (`gzip`: the bytes of gzip read so far, for a gzip file).
fn read_whole<'de, R: serde_json::de::Read<'de>>(
    mut de: serde_json::Deserializer<R>,
    path: &Path,
    opts: &ReadOptions,
    l: &TraceLimits,
    gzip: Option<Rc<Cell<u64>>>,
) -> anyhow::Result<TraceData> {
    let mut data = TraceData {
        path: path.to_path_buf(),
        ..Default::default()
    };
    let mut sink = Sink::new(&mut data, opts, *l, gzip);
    let info = de
        .deserialize_any(TopVisitor(&mut sink))
        .and_then(|i| de.end().map(|_| i));
    if let Some(over) = sink.over.take() {
        anyhow::bail!("'{}': {over}", path.display());
    }
    let info = info.map_err(|e| describe_json_error(path, e))?;
    finish(data, info, path)
}

/// The rank and world size of a document read whole.
fn finish(
    mut data: TraceData,
    info: Option<DistributedInfo>,
    path: &Path,
) -> anyhow::Result<TraceData> {
    if !data.had_events {
        anyhow::bail!(
            "'{}': not a Chrome/Kineto trace (no traceEvents array)",
            path.display()
        );
    }
    if let Some(i) = info {
        data.world_size = int(&i.world_size).map(|x| x as usize);
        data.rank = int(&i.rank).map(|x| x as usize);
        data.rank_from_info = data.rank.is_some();
    }
    if data.rank.is_none() {
        data.rank = rank_from_file_name(path);
    }
    Ok(data)
}

fn describe_json_error(path: &Path, e: serde_json::Error) -> anyhow::Error {
    use serde_json::error::Category;
    if e.classify() == Category::Io {
        let m = e.to_string();
        let io = std::io::Error::from(e);
        if let Some(passed) = limits::passed_of(&io) {
            return anyhow::anyhow!("'{}': {passed}", path.display());
        }
        let what = gzip_problem(&m).unwrap_or("cannot be read");
        return anyhow::anyhow!("'{}': {what}: {m}", path.display());
    }
    let what = match e.classify() {
        Category::Eof => "truncated (the JSON ends early; was the file copied while written?)",
        Category::Syntax => "not JSON",
        Category::Data => "not a Chrome/Kineto trace",
        Category::Io => gzip_problem(&e.to_string()).unwrap_or("cannot be read"),
    };
    anyhow::anyhow!("'{}': {what}: {e}", path.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(s: &str) -> anyhow::Result<TraceData> {
        read_from(s.as_bytes(), Path::new("t.json"), &ReadOptions::default())
    }

    #[test]
    fn a_record_param_comms_named_wait_is_not_a_collective() {
        let t = read(
            r#"{"traceEvents":[
 {"ph":"X","cat":"cpu_op","name":"record_param_comms","ts":1,"dur":2,"args":{"Collective name":"wait","Seq":3}},
 {"ph":"X","cat":"cpu_op","name":"record_param_comms","ts":5,"dur":2,"args":{"Collective name":"allreduce","In msg nelems":8,"Seq":4}}
]}"#,
        )
        .unwrap();
        assert_eq!(t.comms.len(), 1);
        assert_eq!(
            t.comms[0].args.collective_name.as_deref(),
            Some("allreduce")
        );
    }

    #[test]
    fn step_label_patterns() {
        assert!(label_matches("ProfilerStep#*", "ProfilerStep#12"));
        assert!(label_matches("ProfilerStep#*", "ProfilerStep#"));
        assert!(!label_matches("ProfilerStep#*", "Profiler"));
        assert!(label_matches("verify_step", "verify_step"));
        assert!(!label_matches("verify_step", "verify_step_2"));
        assert!(label_matches("*step*", "my_step_3"));
        assert!(label_matches("a*c", "abc"));
        assert!(!label_matches("a*c", "abcd"));
        assert!(
            !label_matches("ab*ba", "aba"),
            "the two ends may not overlap"
        );
    }

    #[test]
    fn profiler_steps_are_read_without_a_label_and_gpu_copies_are_not() {
        let doc = r#"{"traceEvents":[
 {"ph":"X","cat":"user_annotation","name":"ProfilerStep#4","ts":10,"dur":100},
 {"ph":"X","cat":"gpu_user_annotation","name":"ProfilerStep#4","ts":15,"dur":100},
 {"ph":"X","cat":"user_annotation","name":"ProfilerStep#5","ts":110,"dur":90},
 {"ph":"X","cat":"user_annotation","name":"Profiler","ts":110,"dur":90}
]}"#;
        for opts in [
            ReadOptions::default(),
            ReadOptions {
                step_label: Some("ProfilerStep#*".into()),
                custom_ops: false,
            },
        ] {
            let plain = read_from(doc.as_bytes(), Path::new("t.json"), &opts).unwrap();
            let fast = read_fast(doc.as_bytes(), Path::new("t.json"), &opts).unwrap();
            let got = if opts.step_label.is_some() {
                (&plain.labels, &fast.labels)
            } else {
                (&plain.profiler_steps, &fast.profiler_steps)
            };
            assert_eq!(got.0, got.1);
            let ts: Vec<(f64, f64)> = got.0.iter().map(|s| (s.ts, s.dur)).collect();
            assert_eq!(ts, [(10.0, 100.0), (110.0, 90.0)], "{opts:?}");
        }
    }

    #[test]
    fn keeps_only_what_the_analysis_reads() {
        let t = read(
            r#"{"schemaVersion":1,"distributedInfo":{"rank":3,"world_size":8,"backend":"nccl"},
            "deviceProperties":[{"id":0,"name":"H200"}],
            "traceEvents":[
             {"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)","pid":0,"tid":7,"ts":100.5,"dur":20,
              "args":{"correlation":11,"External id":5,"stream":7,"grid":[1,1,1],"Collective name":"allreduce","In msg nelems":21504,"Out msg nelems":21504,"Group size":8,"dtype":"BFloat16","Process Group Name":"0","Seq":4}},
             {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":90,"dur":5,"args":{"correlation":11,"External id":5}},
             {"ph":"X","cat":"cuda_runtime","name":"cudaStreamSynchronize","pid":1,"tid":1,"ts":95,"dur":5,"args":{"correlation":12}},
             {"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":80,"dur":5,"args":{"Input Dims":[[1,2]]}},
             {"ph":"X","cat":"cpu_op","name":"record_param_comms","pid":1,"tid":"t1","ts":88,"dur":7,"args":{"Collective name":"allreduce","In msg nelems":21504,"dtype":"BFloat16"}},
             {"ph":"M","name":"process_name","pid":"Spans","args":{"name":"x"}},
             {"ph":"s","id":1,"pid":1,"tid":1,"ts":90,"cat":"ac2g","name":"ac2g"}
            ],"traceName":"x"}"#,
        )
        .unwrap();
        assert_eq!(
            (t.rank, t.world_size, t.rank_from_info),
            (Some(3), Some(8), true)
        );
        assert_eq!(t.events_seen, 7);
        assert_eq!(t.gpu.len(), 1);
        let k = &t.gpu[0];
        assert_eq!(
            (k.kind, k.ts, k.dur, k.correlation),
            (GpuKind::Nccl, 100.5, 20.0, Some(11))
        );
        let c = k.comm.as_ref().unwrap();
        assert_eq!(c.in_nelems, Some(21504));
        assert_eq!(c.dtype.as_deref(), Some("BFloat16"));
        assert_eq!(
            (c.pg_name.as_deref(), c.seq, c.group_size),
            (Some("0"), Some(4), Some(8))
        );
        assert_eq!(t.runtime.len(), 1, "only launches are kept");
        assert_eq!(t.comms.len(), 1);
    }

    #[test]
    fn bare_event_arrays_and_ranks_from_names() {
        let t = read_from(
            r#"[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2}]"#.as_bytes(),
            Path::new("1712345-TP-5.trace.json.gz"),
            &ReadOptions::default(),
        )
        .unwrap();
        assert_eq!((t.gpu.len(), t.rank, t.rank_from_info), (1, Some(5), false));
        assert_eq!(rank_from_file_name(Path::new("x/rank-12.json")), Some(12));
        assert_eq!(
            rank_from_file_name(Path::new("worker_rank3.pt.trace.json")),
            Some(3)
        );
        assert_eq!(rank_from_file_name(Path::new("trace.json")), None);
    }

    #[test]
    fn host_from_a_tensorboard_file_name_with_the_traces_own_pid() {
        let p = Path::new("d/node-7.cluster_4242.1712345678901234567.pt.trace.json.gz");
        assert_eq!(
            host_from_file_name(p, &[4242]).as_deref(),
            Some("node-7.cluster")
        );
        assert_eq!(host_from_file_name(p, &[4243]), None, "another pid");
        // PARAM's names: `worker0_step` and 12 are no host and pid of the trace
        let q = Path::new("worker0_step_12.1694128201545.pt.trace.json.gz");
        assert_eq!(host_from_file_name(q, &[59811]), None);
    }

    #[test]
    fn host_pids_come_from_runtime_calls_not_gpu_events_or_rank_tracks() {
        let doc = r#"{"traceEvents":[
 {"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":10,"dur":2,"args":{"correlation":1}},
 {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":4242,"tid":1,"ts":5,"dur":2,"args":{"correlation":1}},
 {"ph":"X","cat":"cuda_runtime","name":"cudaStreamSynchronize","pid":4242,"tid":1,"ts":8,"dur":1,"args":{}}
]}"#;
        let opts = ReadOptions::default();
        let plain = read_from(doc.as_bytes(), Path::new("t.json"), &opts).unwrap();
        let fast = read_fast(doc.as_bytes(), Path::new("t.json"), &opts).unwrap();
        assert_eq!(plain.host_pids, vec![4242]);
        assert_eq!(fast.host_pids, plain.host_pids);
        // verifybench's own tracks carry args.rank: their pid is the rank, no process
        let own = doc.replace(
            r#""args":{"correlation":1}}"#,
            r#""args":{"correlation":1,"rank":0}}"#,
        );
        let t = read_from(own.as_bytes(), Path::new("t.json"), &opts).unwrap();
        assert_eq!(t.host_pids, vec![4242], "the synchronize call has no rank");
        let own = own.replace(r#""args":{}"#, r#""args":{"rank":0}"#);
        let t = read_from(own.as_bytes(), Path::new("t.json"), &opts).unwrap();
        assert!(t.host_pids.is_empty(), "{:?}", t.host_pids);
    }

    #[test]
    fn bad_documents_say_why() {
        let trunc = read(r#"{"traceEvents":[{"ph":"X","name":"k""#).unwrap_err();
        assert!(trunc.to_string().contains("truncated"), "{trunc}");
        let junk = read("hello").unwrap_err();
        assert!(junk.to_string().contains("not JSON"), "{junk}");
        let other = read(r#"{"a":1}"#).unwrap_err();
        assert!(other.to_string().contains("no traceEvents"), "{other}");
        let wrong = read(r#"{"traceEvents":{"a":1}}"#).unwrap_err();
        assert!(wrong.to_string().contains("not a Chrome"), "{wrong}");
    }
}
