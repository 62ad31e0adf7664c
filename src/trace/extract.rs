//! One rank's trace turned into what the diagnosis needs: its collectives in order (op, dtype,
//! elements, bytes, communicator, group size, GPU start and duration, host-side launch), its
//! steps (period of the collective sequence, or the spans of a `record_function` label) with
//! GPU busy, idle and compute time per step, and whether each step ran eagerly or from a CUDA
//! graph.
//!
//! Where the collective's size comes from, in order: the arguments Kineto copies onto the NCCL
//! kernel; the `record_param_comms` op of the same `External id`; the NCCL COLL log when it
//! shows one size for that op; else the size is unknown and said to be. Without any NCCL kernel
//! (one rank: NCCL launches none for an all-reduce of one rank) the `record_param_comms` ops
//! themselves are the sequence, timed on the host.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use serde::Serialize;

use super::kernels;
use super::names::{self, dtype_size, parse_kernel};
use super::nccl_log::LogSummary;
use super::reader::{CpuOp, GpuEvent, GpuKind, LaunchKind, RuntimeEvent, TraceData};
use super::steps;
use crate::evidence::{tally, tally_words};

/// A hasher for the integer ids of a trace (correlation, `External id`): one multiply per key
/// instead of SipHash, for maps built and probed once per GPU event. Trace ids are not chosen
/// by an adversary, and these maps are only probed, never iterated, so their order is moot.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, x: u64) {
        // Folded 128-bit multiply: every bit of the key reaches the high and the low bits.
        let m = u128::from(self.0 ^ x) * 0x9e37_79b9_7f4a_7c15_u128;
        self.0 = (m as u64) ^ ((m >> 64) as u64);
    }
}

/// A map keyed by a trace id.
type IdMap<V> = HashMap<i64, V, BuildHasherDefault<IdHasher>>;

/// The index of each item by its id (items without one left out; of two with one id, the
/// later).
fn by_id<T>(items: &[T], id: impl Fn(&T) -> Option<i64>) -> IdMap<usize> {
    items
        .iter()
        .enumerate()
        .filter_map(|(i, x)| id(x).map(|e| (e, i)))
        .collect()
}

/// Where a collective's size came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SizeFrom {
    /// The trace's `record_param_comms` arguments.
    Trace,
    /// The NCCL COLL log.
    NcclLog,
    /// Nowhere: only the kernel name (op, dtype) is known.
    #[default]
    Unknown,
}

/// One collective as one rank ran it.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct Collective {
    /// Normalised op (`all_reduce`).
    pub op: String,
    pub(crate) dtype: Option<String>,
    /// Elements each rank contributes (`In msg nelems`, NCCL's `count`).
    pub(crate) elements: Option<u64>,
    pub(crate) bytes: Option<u64>,
    /// Communicator: the process group's name, else `default`.
    pub(crate) comm: String,
    pub(crate) group_size: Option<u64>,
    pub(crate) seq: Option<i64>,
    pub(crate) algo: Option<String>,
    pub(crate) proto: Option<String>,
    pub(crate) size_from: SizeFrom,
    pub(crate) gpu_start_us: Option<f64>,
    pub(crate) gpu_dur_us: Option<f64>,
    /// Host-side launch (the runtime call correlated to the kernel, else the c10d op).
    pub(crate) launch_us: Option<f64>,
    pub(crate) launch_end_us: Option<f64>,
    /// Launched by `cudaGraphLaunch` (true) or by an individual launch (false).
    pub(crate) graph: Option<bool>,
    /// What ran it: `nccl`, or the custom kernel's implementation
    /// ([`super::kernels::KERNELS`]).
    pub(crate) implementation: String,
}

impl Collective {
    /// Where the step boundary lies on this rank's timeline: the kernel's end, else the
    /// host-side end.
    fn end_us(&self) -> f64 {
        match (self.gpu_start_us, self.gpu_dur_us) {
            (Some(s), Some(d)) => s + d,
            _ => self.launch_end_us.or(self.launch_us).unwrap_or(0.0),
        }
    }
}

/// How a step ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StepMode {
    Eager,
    Graph,
    Unknown,
}

impl StepMode {
    /// How `n` launches ran, `graph` of them from a CUDA graph: as most of them did.
    fn of(graph: usize, n: usize) -> StepMode {
        match n {
            0 => StepMode::Unknown,
            _ if 2 * graph > n => StepMode::Graph,
            _ => StepMode::Eager,
        }
    }

    pub(crate) fn words(self) -> &'static str {
        match self {
            StepMode::Eager => "eager (no CUDA graph)",
            StepMode::Graph => "CUDA graph",
            StepMode::Unknown => "launch mode unknown",
        }
    }
}

/// One step of one rank.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    /// Index range of its collectives in [`RankTrace::collectives`] (`first..end`).
    pub first: usize,
    pub end: usize,
    pub(crate) start_us: f64,
    pub dur_us: f64,
    /// Sum of its collectives' kernel durations.
    pub(crate) collectives_us: f64,
    /// Time non-NCCL GPU work (kernels, copies) was running.
    pub(crate) compute_us: f64,
    /// Time no GPU work was running.
    pub(crate) idle_us: f64,
    pub(crate) mode: StepMode,
}

/// What one rank's trace says.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankTrace {
    pub(crate) file: String,
    pub rank: usize,
    pub(crate) world_size: Option<usize>,
    pub collectives: Vec<Collective>,
    pub steps: Vec<Step>,
    /// How the steps were found.
    pub(crate) step_rule: String,
    /// The engine's step marker that cut the steps, when one did.
    pub(crate) step_marker: Option<StepMarkerUsed>,
    /// Collectives per step (the period), when a period was found.
    pub(crate) period: Option<usize>,
    pub(crate) gpu_span_us: f64,
    pub(crate) gpu_busy_us: f64,
    pub(crate) gpu_idle_us: f64,
    /// Host time between the end of one collective's launch and the start of the next (us),
    /// aligned with `collectives` (0 for the first).
    pub(crate) host_gaps_us: Vec<f64>,
    /// Whether collectives were timed on the GPU (NCCL kernels) or only on the host.
    pub(crate) gpu_timed: bool,
    /// Kernels whose names say they communicate but that no table knows (not in
    /// `collectives`).
    pub(crate) unknown_collective_kernels: usize,
    /// Kernels of a backward pass or an optimizer step ran (`backward`, `bwd`, `wgrad`,
    /// `dgrad`, Adam/SGD): a training job rather than an inference server. The first such name.
    pub(crate) training: Option<String>,
    /// The OS pids of the traced process ([`super::reader::TraceData::host_pids`]).
    pub(crate) host_pids: Vec<u32>,
    /// Its host, where the file name gives it (`<host>_<pid>.<time>.pt.trace.json`).
    pub(crate) host: Option<String>,
    /// The NCCL log's process (`host:pid`) matched to this rank by pid, if any (set by the
    /// caller, with [`Self::log_own`]).
    pub(crate) log_process: Option<String>,
    /// That process's logged calls, summarised.
    pub(crate) log_own: Option<LogSummary>,
    pub(crate) notes: Vec<String>,
}

/// The engine's step marker a trace's steps were cut at (a trace without `ProfilerStep#`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct StepMarkerUsed {
    pub(crate) engine: &'static str,
    pub(crate) marker: &'static str,
    /// The engine file that writes it.
    pub(crate) source: &'static str,
    /// Its spans in the trace (nested ones counted once).
    pub(crate) spans: usize,
    /// Those that hold a collective: the steps.
    pub(crate) steps: usize,
}

/// The spans not inside another one, in time order (a marker's nested calls count once).
fn outermost(mut spans: Vec<super::reader::Span>) -> Vec<super::reader::Span> {
    spans.sort_by(|a, b| a.ts.total_cmp(&b.ts).then(b.dur.total_cmp(&a.dur)));
    let mut out: Vec<super::reader::Span> = Vec::new();
    for s in spans {
        match out.last() {
            Some(o) if s.ts >= o.ts && s.ts + s.dur <= o.ts + o.dur => {}
            _ => out.push(s),
        }
    }
    out
}

/// Merged, sorted intervals with prefix sums, to measure coverage of any window.
struct Coverage {
    iv: Vec<(f64, f64)>,
    prefix: Vec<f64>,
}

impl Coverage {
    fn new(mut v: Vec<(f64, f64)>) -> Coverage {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut iv: Vec<(f64, f64)> = Vec::new();
        for (s, e) in v {
            match iv.last_mut() {
                Some(l) if s <= l.1 => l.1 = l.1.max(e),
                _ => iv.push((s, e)),
            }
        }
        let mut prefix = vec![0.0];
        for (s, e) in &iv {
            prefix.push(prefix.last().unwrap() + (e - s));
        }
        Coverage { iv, prefix }
    }
    fn total(&self) -> f64 {
        *self.prefix.last().unwrap()
    }
    /// Covered time within [a, b].
    fn within(&self, a: f64, b: f64) -> f64 {
        if b <= a || self.iv.is_empty() {
            return 0.0;
        }
        let i = self.iv.partition_point(|x| x.1 <= a);
        let j = self.iv.partition_point(|x| x.0 < b);
        if i >= j {
            return 0.0;
        }
        let mut t = self.prefix[j] - self.prefix[i];
        t -= (a - self.iv[i].0).max(0.0);
        t -= (self.iv[j - 1].1 - b).max(0.0);
        t.max(0.0)
    }
}

/// Extracts one rank. `rank` is the rank the caller settled on; `log` fills unknown sizes;
/// `step_label`, the label whose spans (read into [`TraceData::labels`]) are the steps.
pub(crate) fn extract(
    t: &TraceData,
    rank: usize,
    log: Option<&LogSummary>,
    step_label: Option<&str>,
) -> RankTrace {
    let mut notes = Vec::new();
    let links = Links::new(t);
    let mut gpu: Vec<&GpuEvent> = t.gpu.iter().collect();
    gpu.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    // GPU events that are a collective's own work (not compute).
    let mut coll_gpu: HashSet<usize> = HashSet::new();
    let nccl: Vec<&GpuEvent> = gpu
        .iter()
        .copied()
        .filter(|g| g.kind.is_collective())
        .collect();
    let gpu_timed = !nccl.is_empty();
    let mut colls = if gpu_timed {
        nccl.iter().map(|g| links.kernel_collective(g)).collect()
    } else {
        host_collectives(&links, &gpu, &mut coll_gpu, &mut notes)
    };
    let unknown_collective_kernels = note_unknown_kernels(t, &gpu, &mut notes);
    if let Some(log) = log {
        sizes_from_log(&mut colls, log, &mut notes);
    }
    let unknown = colls
        .iter()
        .filter(|c| c.size_from == SizeFrom::Unknown)
        .count();
    if unknown > 0 {
        notes.push(format!(
            "{unknown} of {} collectives carry no size (no record_param_comms arguments, e.g. NCCL called directly or inside a CUDA graph): op and dtype come from the kernel name; give --nccl-log for sizes",
            colls.len()
        ));
    }
    colls.sort_by(|a, b| {
        let ka = a.gpu_start_us.or(a.launch_us).unwrap_or(0.0);
        let kb = b.gpu_start_us.or(b.launch_us).unwrap_or(0.0);
        ka.total_cmp(&kb)
    });

    let busy = GpuTime::new(&gpu, &coll_gpu, &links);
    let mut step_marker = None;
    let (ranges, rule, period) = step_ranges(
        &colls,
        t,
        step_label,
        busy.first,
        &mut notes,
        &mut step_marker,
    );
    let steps = busy.steps(ranges, &colls);
    let host_gaps_us = host_gaps(&colls);
    RankTrace {
        file: t.path.display().to_string(),
        rank,
        world_size: t.world_size,
        collectives: colls,
        steps,
        step_rule: rule,
        step_marker,
        period,
        gpu_span_us: busy.span,
        gpu_busy_us: busy.all.total(),
        gpu_idle_us: (busy.span - busy.all.total()).max(0.0),
        host_gaps_us,
        gpu_timed,
        unknown_collective_kernels,
        training: t
            .gpu
            .iter()
            .any(|g| g.kind == GpuKind::Kernel)
            .then(|| t.names.iter().find_map(|n| training_word(n)))
            .flatten(),
        host_pids: t.host_pids.clone(),
        host: t.host.clone(),
        log_process: None,
        log_own: None,
        notes,
    }
}

/// The trace's events by the ids that link them: runtime launches by correlation id, the
/// collectives' arguments and the CPU ops by `External id`, and the CPU ops in time order (for
/// the op whose span holds a launch when ids are missing).
struct Links<'t> {
    t: &'t TraceData,
    runtime: IdMap<usize>,
    comms_by_ext: IdMap<usize>,
    ops_by_ext: IdMap<usize>,
    ops_by_ts: Vec<&'t CpuOp>,
}

impl<'t> Links<'t> {
    fn new(t: &'t TraceData) -> Links<'t> {
        let mut ops_by_ts: Vec<&CpuOp> = t.cpu_ops.iter().collect();
        ops_by_ts.sort_by(|a, b| a.ts.total_cmp(&b.ts));
        Links {
            t,
            runtime: by_id(&t.runtime, |r| r.correlation),
            comms_by_ext: by_id(&t.comms, |c| c.external_id),
            ops_by_ext: by_id(&t.cpu_ops, |o| o.external_id),
            ops_by_ts,
        }
    }

    /// The runtime call that launched the GPU event of correlation id `corr`.
    fn launch_of(&self, corr: Option<i64>) -> Option<&'t RuntimeEvent> {
        corr.and_then(|c| self.runtime.get(&c))
            .map(|&i| &self.t.runtime[i])
    }

    /// The CPU op (of the last few begun by `ts`) whose span holds `ts`.
    fn op_around(&self, ts: f64) -> Option<&'t CpuOp> {
        let i = self.ops_by_ts.partition_point(|o| o.ts <= ts);
        self.ops_by_ts[..i]
            .iter()
            .rev()
            .take(8)
            .find(|o| o.ts + o.dur >= ts)
            .copied()
    }

    /// The collective of one collective kernel (NCCL's or a custom one), timed on the GPU.
    fn kernel_collective(&self, g: &GpuEvent) -> Collective {
        let t = self.t;
        let kname = &t.names[g.name as usize];
        let l = self.launch_of(g.correlation);
        let mut c = if let GpuKind::Custom(i) = g.kind {
            self.custom_collective(g, &kernels::KERNELS[i as usize], kname, l)
        } else {
            let k = parse_kernel(kname).unwrap_or_default();
            let args = g.comm.as_deref().or_else(|| {
                g.external_id
                    .and_then(|e| self.comms_by_ext.get(&e))
                    .map(|&i| &t.comms[i].args)
            });
            let mut c = collective_from(args, k.op.clone(), k.dtype.clone());
            c.algo = k.algo;
            c.proto = k.proto;
            c
        };
        c.gpu_start_us = Some(g.ts);
        c.gpu_dur_us = Some(g.dur);
        c.launch_us = l.map(|l| l.ts);
        c.launch_end_us = l.map(|l| l.ts + l.dur);
        c.graph = l.map(|l| l.kind == LaunchKind::Graph);
        c
    }

    /// The collective of custom kernel `k` (named `kname`), launched by `l`: its size from the
    /// CPU op that launched it, when that op is the kernel's.
    fn custom_collective(
        &self,
        g: &GpuEvent,
        k: &kernels::CustomKernel,
        kname: &str,
        l: Option<&RuntimeEvent>,
    ) -> Collective {
        let op = g
            .external_id
            .and_then(|e| self.ops_by_ext.get(&e))
            .map(|&i| &self.t.cpu_ops[i])
            .or_else(|| l.and_then(|l| self.op_around(l.ts)));
        let mut c = collective_from(
            None,
            Some(k.op.into()),
            kernels::kernel_dtype(kname)
                .or(op.and_then(|o| o.dtype))
                .map(str::to_string),
        );
        if let (Some(n), Some(o)) = (op.and_then(|o| o.elements), op) {
            if o.op == k.op {
                c.elements = Some(n);
                c.bytes = c.dtype.as_deref().and_then(dtype_size).map(|b| b * n);
                c.size_from = SizeFrom::Trace;
            }
        }
        c.implementation = k.implementation.into();
        c
    }
}

/// One rank, or NCCL kernels not captured: the c10d ops are the sequence, timed on the host
/// (with the GPU work launched inside an op, whose events are added to `coll_gpu`).
fn host_collectives(
    links: &Links,
    gpu: &[&GpuEvent],
    coll_gpu: &mut HashSet<usize>,
    notes: &mut Vec<String>,
) -> Vec<Collective> {
    let mut colls = Vec::new();
    let mut seen = HashSet::new();
    let mut comms: Vec<_> = links.t.comms.iter().collect();
    comms.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    let by_ext = by_id(gpu, |g| g.external_id);
    for op in comms {
        let key = (op.args.pg_name.clone(), op.args.seq);
        if op.args.seq.is_some() && !seen.insert(key) {
            continue;
        }
        let mut c = collective_from(Some(&op.args), None, None);
        c.launch_us = Some(op.ts);
        c.launch_end_us = Some(op.ts + op.dur);
        // GPU work launched inside the op (one rank's all-gather is a device copy).
        if let Some(&i) = op.external_id.and_then(|e| by_ext.get(&e)) {
            coll_gpu.insert(i);
            let g = gpu[i];
            c.graph = links
                .launch_of(g.correlation)
                .map(|l| l.kind == LaunchKind::Graph);
            c.gpu_start_us = Some(g.ts);
            c.gpu_dur_us = Some(g.dur);
        }
        colls.push(c);
    }
    if !colls.is_empty() {
        notes.push(
            "no NCCL kernels in the trace (a single rank launches none for an all-reduce): the collective sequence comes from record_param_comms and its times are host-side".into(),
        );
    }
    colls
}

/// Kernels that look like communication but that neither NCCL nor the table knows: their
/// count, with a note naming a few.
fn note_unknown_kernels(t: &TraceData, gpu: &[&GpuEvent], notes: &mut Vec<String>) -> usize {
    let mut unknown_kernels: Vec<&str> = gpu
        .iter()
        .filter(|g| g.kind == GpuKind::CommLike)
        .map(|g| t.names[g.name as usize].as_str())
        .collect();
    let unknown_collective_kernels = unknown_kernels.len();
    if unknown_collective_kernels > 0 {
        unknown_kernels.sort_unstable();
        unknown_kernels.dedup();
        let shown: Vec<&str> = unknown_kernels.iter().take(3).copied().collect();
        notes.push(format!(
            "{unknown_collective_kernels} kernels look like collectives but are neither NCCL's nor in the table of custom kernels (left out of the sequence): {}",
            shown.join("; ")
        ));
    }
    unknown_collective_kernels
}

/// Sizes from the NCCL log where the trace has none.
fn sizes_from_log(colls: &mut [Collective], log: &LogSummary, notes: &mut Vec<String>) {
    let mut filled = 0;
    for c in colls.iter_mut().filter(|c| c.elements.is_none()) {
        let n = c.group_size.map(|g| g as u32);
        if let Some((s, _)) = log.likely_size(&c.op, c.dtype.as_deref(), n) {
            c.elements = Some(s.count);
            if c.dtype.is_none() {
                c.dtype = s.dtype.clone();
            }
            c.bytes = c.dtype.as_deref().and_then(dtype_size).map(|b| b * s.count);
            c.group_size = c.group_size.or(Some(s.nranks as u64));
            c.size_from = SizeFrom::NcclLog;
            filled += 1;
        }
    }
    if filled > 0 {
        notes.push(format!("{filled} collective sizes taken from the NCCL log"));
    }
}

/// The GPU's time as the steps measure it: its coverage (all work, and compute alone), its
/// span, and the launch kind of each GPU event.
struct GpuTime {
    all: Coverage,
    compute: Coverage,
    first: f64,
    span: f64,
    /// Launch kind of each GPU event, as (ts, graph?) for the step mode.
    kinds: Vec<(f64, bool)>,
    /// Graph launches among the first `i` of `kinds`.
    graph_prefix: Vec<usize>,
}

impl GpuTime {
    /// `gpu` in time order; `coll_gpu` the events that are a collective's own work.
    fn new(gpu: &[&GpuEvent], coll_gpu: &HashSet<usize>, links: &Links) -> GpuTime {
        let all = Coverage::new(gpu.iter().map(|g| (g.ts, g.ts + g.dur)).collect());
        let compute = Coverage::new(
            gpu.iter()
                .enumerate()
                .filter(|(i, g)| !g.kind.is_collective() && !coll_gpu.contains(i))
                .map(|(_, g)| (g.ts, g.ts + g.dur))
                .collect(),
        );
        let first = gpu.first().map(|g| g.ts).unwrap_or(0.0);
        let last = gpu.iter().map(|g| g.ts + g.dur).fold(first, f64::max);
        let span = last - first;
        let kinds: Vec<(f64, bool)> = gpu
            .iter()
            .filter_map(|g| {
                links
                    .launch_of(g.correlation)
                    .map(|l| (g.ts, l.kind == LaunchKind::Graph))
            })
            .collect();
        let graph_prefix: Vec<usize> = std::iter::once(0)
            .chain(kinds.iter().scan(0, |acc, k| {
                *acc += k.1 as usize;
                Some(*acc)
            }))
            .collect();
        GpuTime {
            all,
            compute,
            first,
            span,
            kinds,
            graph_prefix,
        }
    }

    /// How most GPU events within [a, b] were launched.
    fn mode_in(&self, a: f64, b: f64) -> StepMode {
        let i = self.kinds.partition_point(|k| k.0 < a);
        let j = self.kinds.partition_point(|k| k.0 < b);
        StepMode::of(
            self.graph_prefix[j] - self.graph_prefix[i],
            j.saturating_sub(i),
        )
    }

    /// The steps of `ranges` (empty ones left out), with their GPU time and launch mode.
    fn steps(&self, ranges: Ranges, colls: &[Collective]) -> Vec<Step> {
        let mut steps = Vec::new();
        for (first_i, end_i, a, b) in ranges {
            let dur = b - a;
            if dur <= 0.0 {
                continue;
            }
            // + 0.0: an empty f64 sum is -0.0
            let collectives_us = colls[first_i..end_i]
                .iter()
                .filter_map(|c| c.gpu_dur_us)
                .sum::<f64>()
                + 0.0;
            let busy = self.all.within(a, b);
            let mode = match self.mode_in(a, b) {
                StepMode::Unknown => {
                    // host-side fallback: how this step's collectives were launched
                    let g: Vec<bool> = colls[first_i..end_i]
                        .iter()
                        .filter_map(|c| c.graph)
                        .collect();
                    StepMode::of(g.iter().filter(|x| **x).count(), g.len())
                }
                m => m,
            };
            steps.push(Step {
                first: first_i,
                end: end_i,
                start_us: a,
                dur_us: dur,
                collectives_us,
                compute_us: self.compute.within(a, b),
                idle_us: (dur - busy).max(0.0),
                mode,
            });
        }
        steps
    }
}

/// The host time before each collective's launch, from the end of the previous launch (0 for
/// the first, or where either is unknown).
fn host_gaps(colls: &[Collective]) -> Vec<f64> {
    let mut host_gaps_us = Vec::with_capacity(colls.len());
    let mut prev_end: Option<f64> = None;
    for c in colls {
        host_gaps_us.push(match (prev_end, c.launch_us) {
            (Some(p), Some(s)) => (s - p).max(0.0),
            _ => 0.0,
        });
        if let Some(e) = c.launch_end_us.or(c.launch_us) {
            prev_end = Some(e);
        }
    }
    host_gaps_us
}

/// The identifier in a kernel's name that says it trains (`indexing_backward_kernel` of
/// `void (anonymous namespace)::indexing_backward_kernel<float, 4>(long*, ...)`): one with
/// `backward`, `bwd`, `wgrad`, `dgrad`, `adam` or `sgd_` in it.
fn training_word(name: &str) -> Option<String> {
    let l = name.to_ascii_lowercase();
    let i = ["backward", "bwd", "wgrad", "dgrad", "adam", "sgd_"]
        .iter()
        .find_map(|w| l.find(w))?;
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let start = name[..i].rfind(|c: char| !ident(c)).map_or(0, |j| j + 1);
    let end = name[i..]
        .find(|c: char| !ident(c))
        .map_or(name.len(), |j| i + j);
    Some(name[start..end].to_string())
}

fn collective_from(
    args: Option<&super::reader::CommArgs>,
    kernel_op: Option<String>,
    kernel_dtype: Option<String>,
) -> Collective {
    let op = args
        .and_then(|a| a.collective_name.as_deref())
        .map(names::op_from_collective_name)
        .or(kernel_op)
        .unwrap_or_else(|| "unknown".into());
    let dtype = args
        .and_then(|a| a.dtype.as_deref())
        .and_then(names::dtype_from_torch)
        .map(str::to_string)
        .or(kernel_dtype);
    let elements = args.and_then(|a| a.in_nelems);
    let bytes = match (elements, dtype.as_deref().and_then(dtype_size)) {
        (Some(n), Some(s)) => Some(n * s),
        _ => None,
    };
    Collective {
        op,
        dtype,
        elements,
        bytes,
        comm: args
            .and_then(|a| a.pg_name.clone())
            .unwrap_or_else(|| "default".into()),
        group_size: args.and_then(|a| a.group_size),
        seq: args.and_then(|a| a.seq),
        size_from: if elements.is_some() {
            SizeFrom::Trace
        } else {
            SizeFrom::Unknown
        },
        implementation: "nccl".into(),
        ..Default::default()
    }
}

/// A signature per collective (op, dtype, elements), for the period search.
fn signatures(colls: &[Collective]) -> (Vec<u32>, Vec<u64>) {
    steps::signatures(colls.iter().map(|c| {
        let key = (c.op.as_str(), c.dtype.as_deref(), c.elements);
        (key, c.bytes.or(c.elements).unwrap_or(0))
    }))
}

type Ranges = Vec<(usize, usize, f64, f64)>;

/// The steps that host-side spans mark: each span's collectives are those launched inside it
/// (host launch, else the kernel's start, in `[start, end)`). `own_window`: the step is the
/// span itself (`ProfilerStep#N`, which wraps one whole step); otherwise it runs from its
/// first collective's kernel start to its last's end (a label around the collectives only).
/// Spans without a collective are left out; the count is of all spans.
fn span_ranges(
    colls: &[Collective],
    spans: &[super::reader::Span],
    own_window: bool,
) -> (Ranges, usize) {
    let mut spans = spans.to_vec();
    spans.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    let mut out = Vec::new();
    for s in &spans {
        let (a, b) = (s.ts, s.ts + s.dur);
        let at = |c: &Collective| c.launch_us.or(c.gpu_start_us);
        let f = colls.partition_point(|c| at(c).is_some_and(|h| h < a));
        let idx: Vec<usize> = (f..colls.len())
            .filter(|&i| at(&colls[i]).is_some_and(|h| h >= a && h < b))
            .collect();
        let (Some(&f), Some(&l)) = (idx.first(), idx.last()) else {
            continue;
        };
        if own_window {
            out.push((f, l + 1, a, b));
            continue;
        }
        // GPU window: from the first collective's kernel start (or the span) to the last's end.
        let start = colls[f].gpu_start_us.unwrap_or(a);
        let end = colls[l].end_us().max(start);
        out.push((f, l + 1, start.min(end), end));
    }
    (out, spans.len())
}

fn step_ranges(
    colls: &[Collective],
    t: &TraceData,
    step_label: Option<&str>,
    first_gpu_us: f64,
    notes: &mut Vec<String>,
    marker: &mut Option<StepMarkerUsed>,
) -> (Ranges, String, Option<usize>) {
    if let Some(label) = step_label {
        let (out, found) = span_ranges(colls, &t.labels, false);
        return (
            out,
            format!("spans of the step label '{label}' ({found} found)"),
            None,
        );
    }
    if !t.profiler_steps.is_empty() {
        let (out, found) = span_ranges(colls, &t.profiler_steps, true);
        if !out.is_empty() {
            return (
                out,
                format!("the trace's ProfilerStep# spans ({found} found)"),
                None,
            );
        }
        notes.push(format!(
            "{found} ProfilerStep# spans hold no collective: steps found from the period instead"
        ));
    }
    // No ProfilerStep#: the engine's own step marker (vLLM's execute_model, SGLang's
    // run_batch, ...), the first of the table whose spans hold collectives. Each span is one
    // step, as a ProfilerStep# span is.
    for (i, m) in super::names::STEP_MARKERS.iter().enumerate() {
        let spans = outermost(
            t.engine_steps
                .iter()
                .filter(|(k, _)| *k == i)
                .map(|(_, s)| *s)
                .collect(),
        );
        if spans.is_empty() {
            continue;
        }
        let (out, found) = span_ranges(colls, &spans, true);
        if out.is_empty() {
            continue;
        }
        *marker = Some(StepMarkerUsed {
            engine: m.engine,
            marker: m.name,
            source: m.source,
            spans: found,
            steps: out.len(),
        });
        return (
            out,
            format!(
                "{}'s step marker {} ({found} found, no ProfilerStep# span; {})",
                m.engine, m.name, m.source
            ),
            None,
        );
    }
    // The step after boundary x[0], up to boundary x[1].
    let between = |x: &[usize]| {
        let end = |i: usize| colls[i].end_us();
        (x[0] + 1, x[1] + 1, end(x[0]), end(x[1]))
    };
    let (sigs, w) = signatures(colls);
    if let Some(p) = steps::find_period(&sigs, |s| w[s as usize]) {
        let p = anchor_at_gaps(colls, p, notes);
        let b = &p.boundaries;
        let mut out: Ranges = Vec::new();
        // The first step is whole when the trace starts with it; it began with the trace's
        // first GPU work (or the first collective's launch when collectives are host-timed).
        if p.start == 0 && b[0] + 1 == p.len {
            let a = if colls[0].gpu_start_us.is_some() {
                first_gpu_us.min(colls[0].gpu_start_us.unwrap_or(first_gpu_us))
            } else {
                colls[0].launch_us.unwrap_or(0.0)
            };
            out.push((0, b[0] + 1, a, colls[b[0]].end_us()));
        }
        out.extend(b.windows(2).map(between));
        let e = *b.last().expect("a period has a boundary");
        let desc = describe_period(&colls[(e + 1).saturating_sub(p.len)..=e]);
        return (
            out,
            format!("period of the collective sequence: {desc}"),
            Some(p.len),
        );
    }
    if let Some(b) = steps::split_at_rarest(&sigs, |s| w[s as usize]) {
        notes.push("the collective sequence does not repeat exactly: steps end at each occurrence of its rarest collective".into());
        let out = b.windows(2).map(between).collect();
        return (out, "split at the rarest collective".into(), None);
    }
    if !colls.is_empty() {
        notes.push("no repeating step found: the whole trace is one step".into());
        let a = colls[0].gpu_start_us.or(colls[0].launch_us).unwrap_or(0.0);
        let b = colls[colls.len() - 1].end_us();
        return (vec![(0, colls.len(), a, b)], "whole trace".into(), None);
    }
    (Vec::new(), "no collectives".into(), None)
}

/// The period's steps placed where the trace pauses: the boundary after which the next
/// collective starts latest (median gap over the repetitions, on the kernels' clock, else the
/// host's) wins over the rarest-collective boundary when its gap is clearly longer than the
/// gap at every other position (1.5 times and 1 us more). A step then never starts in the middle of what the trace repeats, even when
/// its rarest collective sits mid-step.
fn anchor_at_gaps(
    colls: &[Collective],
    p: steps::Period,
    notes: &mut Vec<String>,
) -> steps::Period {
    let n = colls.len();
    let begin = |c: &Collective| c.gpu_start_us.or(c.launch_us);
    let gap = |i: usize| -> Option<f64> { Some(begin(&colls[i + 1])? - colls[i].end_us()) };
    let score = |first: usize| -> Option<f64> {
        let g: Vec<f64> = (first..n.saturating_sub(1))
            .step_by(p.len)
            .filter_map(gap)
            .collect();
        crate::measure::attribution::Spread::of(&g).map(|s| s.median)
    };
    if p.len < 2 || p.boundaries.is_empty() {
        return p;
    }
    let b0 = p.boundaries[0];
    let Some(base) = score(b0) else {
        return p;
    };
    let mut all: Vec<(usize, f64)> = (1..p.len)
        .map(|phi| p.start + (b0 - p.start + phi) % p.len)
        .filter_map(|f| score(f).map(|s| (f, s)))
        .collect();
    all.push((b0, base));
    all.sort_by(|a, b| b.1.total_cmp(&a.1));
    // The longest pause must stand out from every other position of the period, not only
    // from the rarest collective's.
    let best = match all.as_slice() {
        [(f, s), (_, next), ..] if *f != b0 && *s > 1.5 * next.max(0.0) + 1.0 => Some((*f, *s)),
        _ => None,
    };
    match best {
        Some((first, s)) => {
            notes.push(format!(
                "steps end at the longest pause of the period (median {s:.1} us before the next collective) rather than at its rarest collective ({base:.1} us)"
            ));
            steps::Period {
                len: p.len,
                start: p.start,
                boundaries: (first..n).step_by(p.len).collect(),
            }
        }
        _ => p,
    }
}

/// `123 all_reduce + 1 all_gather`.
pub(crate) fn describe_period(one: &[Collective]) -> String {
    tally_words(&tally(one.iter().map(|c| (&c.op, 1))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coll(op: &str, start: f64, dur: f64) -> Collective {
        let mut c = collective_from(None, Some(op.into()), Some("bf16".into()));
        c.gpu_start_us = Some(start);
        c.gpu_dur_us = Some(dur);
        c
    }

    #[test]
    fn period_steps_start_after_the_pause_not_at_the_rarest_collective() {
        // Each step: all_reduce, all_gather (the rarest, mid-step), all_reduce, all_reduce;
        // 10 us kernels 5 us apart, 500 us of pause between steps. The rarest-collective rule
        // ends a step after the all_gather (index 1 of 4); the pause is after index 3.
        let ops = ["all_reduce", "all_gather", "all_reduce", "all_reduce"];
        let mut colls = Vec::new();
        let mut t = 0.0;
        for _ in 0..4 {
            for op in ops {
                colls.push(coll(op, t, 10.0));
                t += 15.0;
            }
            t += 500.0;
        }
        let (sigs, w) = signatures(&colls);
        let p = steps::find_period(&sigs, |s| w[s as usize]).unwrap();
        assert_eq!((p.len, p.boundaries[0]), (4, 1), "the rarest rule");
        let mut notes = Vec::new();
        let q = anchor_at_gaps(&colls, p, &mut notes);
        // Boundaries 3, 7, 11, 15: every step is [all_reduce, all_gather, all_reduce, all_reduce].
        assert_eq!(q.boundaries, [3, 7, 11, 15]);
        assert!(notes[0].contains("longest pause"), "{notes:?}");
        // Evenly spaced collectives: no pause is clearly longer, the rarest rule stays.
        let even: Vec<Collective> = (0..16)
            .map(|i| coll(ops[i % 4], 15.0 * i as f64, 10.0))
            .collect();
        let (sigs, w) = signatures(&even);
        let p = steps::find_period(&sigs, |s| w[s as usize]).unwrap();
        let b = p.boundaries.clone();
        assert_eq!(anchor_at_gaps(&even, p, &mut Vec::new()).boundaries, b);
    }

    #[test]
    fn coverage_of_windows() {
        let c = Coverage::new(vec![(0.0, 10.0), (5.0, 15.0), (20.0, 30.0)]);
        assert_eq!(c.total(), 25.0);
        assert_eq!(c.within(0.0, 100.0), 25.0);
        assert_eq!(c.within(12.0, 22.0), 5.0);
        assert_eq!(c.within(16.0, 19.0), 0.0);
        assert_eq!(c.within(25.0, 27.0), 2.0);
    }

    #[test]
    fn the_word_that_says_training_is_the_identifier_around_it() {
        let w = |n: &str| training_word(n);
        assert_eq!(
            w("void (anonymous namespace)::indexing_backward_kernel<float, 4>(long*, long*)")
                .as_deref(),
            Some("indexing_backward_kernel")
        );
        assert_eq!(
            w("autograd::engine::evaluate_function: MulBackward0").as_deref(),
            Some("MulBackward0")
        );
        assert_eq!(w("ncclDevKernel_AllReduce_Sum_bf16_RING_LL"), None);
    }
}
