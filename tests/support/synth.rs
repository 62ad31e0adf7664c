//! Synthetic Kineto traces for tests and benchmarks (never presented as measurements).
//!
//! A small simulation of ranks running a verify step: each op costs host time before its
//! launch, compute kernels run on the GPU, and an NCCL kernel cannot end before the last rank
//! has launched its own, so every earlier rank's kernel waits. One rank can be made late by a
//! fixed delay before each collective (eager) or before each graph launch (graph), which gives
//! the attribution a known answer to recover. The output has the shape of a PyTorch profiler
//! trace (cpu ops, runtime launches with correlation ids, kernels with `record_param_comms`
//! arguments, `distributedInfo`), written event by event so that large traces stream.
//!
//! Support code, not part of the library: the integration tests (`tests/it`), the trace
//! benchmark (`benches/trace.rs`) and the library's own unit tests (`trace::tests`) each include
//! this file as a module of their own.

use std::io::Write;

/// What to simulate.
#[derive(Debug, Clone)]
pub struct SynthSpec {
    pub ranks: usize,
    pub steps: usize,
    /// All-reduces per step (Kimi-K2.5 verify: 123), followed by one all-gather.
    pub all_reduces: usize,
    pub ar_elements: u64,
    pub ag_elements: u64,
    /// Transfer time of one collective once all ranks have arrived (us).
    pub transfer_us: f64,
    /// GPU time of the compute kernel before each collective (us).
    pub compute_us: f64,
    /// Host time before each launch (us), eager only.
    pub host_gap_us: f64,
    /// Uniform jitter added to each host gap, 0..jitter (us), per rank and op.
    pub jitter_us: f64,
    /// One rank later by this many us before each collective (eager) or graph launch.
    pub late_rank: Option<(usize, f64)>,
    /// Launch each step from a CUDA graph.
    pub graph: bool,
    /// Put Kineto's collective arguments on the NCCL kernels (false: kernel names only, as
    /// with NCCL called directly).
    pub with_args: bool,
    /// Extra cpu ops per compute op that the reader must skip (to make large traces
    /// realistic in composition).
    pub filler_cpu_ops: usize,
    /// Compute kernels (each with its cpu op and runtime launch) before each collective; the
    /// compute time and host gap are shared among them. A server's step has a few thousand
    /// kernels for its ~124 collectives (about 20 per collective).
    pub kernels_per_collective: usize,
    /// `python_function` events (long names, Python ids) around each compute op, as
    /// `with_stack` profiles of a Python server hold them; none are read by the analysis.
    pub python_functions: usize,
    /// Run the all-reduces through a custom kernel instead of NCCL: (the kernel's name as a
    /// profile shows it, the CPU op that launches it), the op carrying the tensor's shape in
    /// `Input Dims` and no `record_param_comms` (as engines' custom all-reduces do).
    pub custom_all_reduce: Option<(&'static str, &'static str)>,
    pub seed: u64,
}

impl Default for SynthSpec {
    fn default() -> Self {
        SynthSpec {
            ranks: 2,
            steps: 4,
            all_reduces: 123,
            ar_elements: 21504,
            ag_elements: 61440,
            transfer_us: 24.0,
            compute_us: 20.0,
            host_gap_us: 60.0,
            jitter_us: 10.0,
            late_rank: None,
            graph: false,
            with_args: true,
            filler_cpu_ops: 0,
            kernels_per_collective: 1,
            python_functions: 0,
            custom_all_reduce: None,
            seed: 7,
        }
    }
}

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One event of one rank, before formatting.
enum Ev {
    Py {
        name: &'static str,
        ts: f64,
        id: u64,
    },
    Cpu {
        name: &'static str,
        ts: f64,
        dur: f64,
        ext: u64,
        coll: Option<(bool, u64)>,
        /// The elements of the op's one input (a custom collective's op).
        dims: Option<u64>,
    },
    Runtime {
        graph: bool,
        ts: f64,
        dur: f64,
        corr: u64,
        ext: u64,
    },
    Kernel {
        coll: Option<(bool, u64, u64)>,
        ts: f64,
        dur: f64,
        corr: u64,
        ext: u64,
    },
}

const LAUNCH_US: f64 = 4.0;

/// Names of the kind a Python server's stack profile holds.
const PY_NAMES: &[&str] = &[
    "sglang/srt/model_executor/model_runner.py(1688): forward_decode",
    "sglang/srt/models/deepseek_v2.py(2034): forward",
    "nn.Module: DeepseekV2DecoderLayer_17",
    "sglang/srt/layers/linear.py(1402): forward",
    "torch/nn/modules/module.py(1784): _call_impl",
    "sglang/srt/layers/moe/fused_moe_triton/layer.py(901): forward",
    "sglang/srt/layers/communicator.py(512): prepare_attn",
    "<built-in method empty of type object at 0x7f3e2c5a8f20>",
];
const T0: f64 = 1_700_000_000_000_000.0;

/// Simulates one step for all ranks; `host` and `gpu` are each rank's clocks.
fn step(
    s: &SynthSpec,
    step_i: usize,
    host: &mut [f64],
    gpu: &mut [f64],
    rng: &mut Lcg,
    ids: &mut u64,
    out: &mut [Vec<Ev>],
) {
    let n_coll = s.all_reduces + 1;
    let late = |r: usize| match s.late_rank {
        Some((lr, d)) if lr == r => d,
        _ => 0.0,
    };
    let mut graph_corr = vec![0u64; s.ranks];
    if s.graph {
        for r in 0..s.ranks {
            host[r] += s.host_gap_us + late(r);
            *ids += 1;
            graph_corr[r] = *ids;
            out[r].push(Ev::Runtime {
                graph: true,
                ts: host[r],
                dur: LAUNCH_US * 2.0,
                corr: *ids,
                ext: *ids,
            });
            gpu[r] = gpu[r].max(host[r] + LAUNCH_US * 2.0);
            host[r] += LAUNCH_US * 2.0;
        }
    }
    for i in 0..n_coll {
        let ag = i == n_coll - 1;
        let seq = (step_i * n_coll + i) as u64;
        let mut starts = vec![0.0; s.ranks];
        for r in 0..s.ranks {
            // compute ops
            let k = s.kernels_per_collective.max(1);
            for _ in 0..k {
                *ids += 1;
                let id = *ids;
                let corr = if s.graph { graph_corr[r] } else { id };
                if !s.graph {
                    host[r] += (s.host_gap_us + s.jitter_us * rng.next()) / k as f64;
                    for j in 0..s.python_functions {
                        out[r].push(Ev::Py {
                            name: PY_NAMES[(id as usize + j) % PY_NAMES.len()],
                            ts: host[r],
                            id: id * 64 + j as u64,
                        });
                    }
                    for _ in 0..s.filler_cpu_ops {
                        out[r].push(Ev::Cpu {
                            name: "aten::view",
                            ts: host[r],
                            dur: 1.0,
                            ext: id,
                            coll: None,
                            dims: None,
                        });
                    }
                    out[r].push(Ev::Cpu {
                        name: "aten::mm",
                        ts: host[r],
                        dur: LAUNCH_US + 2.0,
                        ext: id,
                        coll: None,
                        dims: None,
                    });
                    out[r].push(Ev::Runtime {
                        graph: false,
                        ts: host[r] + 1.0,
                        dur: LAUNCH_US,
                        corr,
                        ext: id,
                    });
                    host[r] += LAUNCH_US + 2.0;
                }
                let k0 = gpu[r].max(if s.graph { 0.0 } else { host[r] - 1.0 });
                out[r].push(Ev::Kernel {
                    coll: None,
                    ts: k0,
                    dur: s.compute_us / k as f64,
                    corr,
                    ext: id,
                });
                gpu[r] = k0 + s.compute_us / k as f64;
            }
            // collective launch
            *ids += 1;
            let id = *ids;
            let corr = if s.graph { graph_corr[r] } else { id };
            let elements = if ag { s.ag_elements } else { s.ar_elements };
            if !s.graph {
                host[r] += late(r) + s.jitter_us * rng.next() * 0.1;
                let (name, coll, dims) = match s.custom_all_reduce {
                    Some((_, op)) if !ag => (op, None, Some(elements)),
                    _ if s.with_args => ("record_param_comms", Some((ag, elements)), None),
                    _ => ("pynccl_all_reduce", None, None),
                };
                out[r].push(Ev::Cpu {
                    name,
                    ts: host[r],
                    dur: LAUNCH_US + 2.0,
                    ext: id,
                    coll,
                    dims,
                });
                out[r].push(Ev::Runtime {
                    graph: false,
                    ts: host[r] + 1.0,
                    dur: LAUNCH_US,
                    corr,
                    ext: id,
                });
                host[r] += LAUNCH_US + 2.0;
            }
            starts[r] = gpu[r].max(if s.graph { 0.0 } else { host[r] - 1.0 });
            out[r].push(Ev::Kernel {
                coll: Some((ag, elements, seq)),
                ts: starts[r],
                dur: 0.0,
                corr,
                ext: id,
            });
        }
        let end = starts.iter().cloned().fold(f64::MIN, f64::max) + s.transfer_us;
        for r in 0..s.ranks {
            if let Some(Ev::Kernel { dur, .. }) = out[r].last_mut() {
                *dur = end - starts[r];
            }
            gpu[r] = end;
        }
    }
}

fn write_ev<W: Write>(w: &mut W, s: &SynthSpec, rank: usize, e: &Ev) -> std::io::Result<()> {
    let pid = 1000 + rank;
    let coll_args = |ag: bool, n: u64| {
        format!(
            ",\"Collective name\":\"{}\",\"In msg nelems\":{n},\"Out msg nelems\":{},\"Group size\":{},\"dtype\":\"BFloat16\",\"Process Group Name\":\"0\"",
            if ag { "_allgather_base" } else { "allreduce" },
            if ag { n * s.ranks as u64 } else { n },
            s.ranks
        )
    };
    match e {
        Ev::Py { name, ts, id } => write!(
            w,
            "{{\"ph\":\"X\",\"cat\":\"python_function\",\"name\":\"{name}\",\"pid\":{pid},\"tid\":{pid},\"ts\":{:.3},\"dur\":0.500,\"args\":{{\"Python parent id\":{},\"Python id\":{id},\"Python thread\":0}}}}",
            T0 + ts,
            id.saturating_sub(1)
        ),
        Ev::Cpu { name, ts, dur, ext, coll, dims } => {
            let extra = coll.map(|(ag, n)| coll_args(ag, n)).unwrap_or_default();
            let shapes = match dims {
                Some(n) => format!("[[{n}]],\"Input type\":[\"c10::BFloat16\"]"),
                None => "[[3,7168],[7168,2304]],\"Input type\":[\"c10::BFloat16\",\"c10::BFloat16\"]".into(),
            };
            write!(w, "{{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"{name}\",\"pid\":{pid},\"tid\":{pid},\"ts\":{:.3},\"dur\":{:.3},\"args\":{{\"External id\":{ext},\"Record function id\":0,\"Input Dims\":{shapes},\"Ev Idx\":{ext}{extra}}}}}", T0 + ts, dur)
        }
        Ev::Runtime { graph, ts, dur, corr, ext } => write!(
            w,
            "{{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"{}\",\"pid\":{pid},\"tid\":{pid},\"ts\":{:.3},\"dur\":{:.3},\"args\":{{\"External id\":{ext},\"cbid\":211,\"correlation\":{corr}}}}},\n{{\"ph\":\"s\",\"id\":{corr},\"pid\":{pid},\"tid\":{pid},\"ts\":{:.3},\"cat\":\"ac2g\",\"name\":\"ac2g\"}}",
            if *graph { "cudaGraphLaunch" } else { "cudaLaunchKernel" },
            T0 + ts,
            dur,
            T0 + ts
        ),
        Ev::Kernel { coll, ts, dur, corr, ext } => {
            let (name, extra) = match coll {
                Some((false, _, _)) if s.custom_all_reduce.is_some() => (
                    s.custom_all_reduce.map(|c| c.0).unwrap_or_default(),
                    String::new(),
                ),
                Some((ag, n, seq)) => (
                    if *ag {
                        "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
                    } else {
                        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
                    },
                    if s.with_args {
                        format!("{},\"Seq\":{seq}", coll_args(*ag, *n))
                    } else {
                        String::new()
                    },
                ),
                None => (
                    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(Params)",
                    String::new(),
                ),
            };
            write!(w, "{{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"{name}\",\"pid\":{rank},\"tid\":7,\"ts\":{:.3},\"dur\":{:.3},\"args\":{{\"External id\":{ext},\"queued\":0,\"device\":{rank},\"context\":1,\"stream\":7,\"correlation\":{corr},\"registers per thread\":96,\"shared memory\":0,\"blocks per SM\":0.5,\"warps per SM\":2.0,\"grid\":[16,1,1],\"block\":[640,1,1],\"est. achieved occupancy %\":5{extra}}}}},\n{{\"ph\":\"f\",\"id\":{corr},\"pid\":{rank},\"tid\":7,\"ts\":{:.3},\"cat\":\"ac2g\",\"name\":\"ac2g\",\"bp\":\"e\"}}", T0 + ts, dur, T0 + ts)
        }
    }
}

/// Writes every rank's trace through `open(rank)`, simulating all ranks step by step so that
/// memory stays bounded however many steps are written.
pub fn write_all<W: Write>(s: &SynthSpec, mut writers: Vec<W>) -> std::io::Result<Vec<W>> {
    assert_eq!(writers.len(), s.ranks);
    for (r, w) in writers.iter_mut().enumerate() {
        writeln!(w, "{{\"schemaVersion\":1,\"deviceProperties\":[{{\"id\":{r},\"name\":\"synthetic\"}}],\"distributedInfo\":{{\"backend\":\"nccl\",\"rank\":{r},\"world_size\":{}}},\"record_shapes\":1,\"traceEvents\":[", s.ranks)?;
        write!(w, "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{r},\"tid\":0,\"args\":{{\"name\":\"synthetic\"}}}}")?;
    }
    let mut host = vec![0.0; s.ranks];
    let mut gpu = vec![0.0; s.ranks];
    let mut rng = Lcg(s.seed);
    let mut ids = 0;
    for k in 0..s.steps {
        let mut out: Vec<Vec<Ev>> = (0..s.ranks).map(|_| Vec::new()).collect();
        step(s, k, &mut host, &mut gpu, &mut rng, &mut ids, &mut out);
        for (r, evs) in out.iter().enumerate() {
            for e in evs {
                writers[r].write_all(b",\n")?;
                write_ev(&mut writers[r], s, r, e)?;
            }
        }
    }
    for w in writers.iter_mut() {
        write!(w, "\n],\"traceName\":\"synthetic\"}}\n")?;
    }
    Ok(writers)
}

/// Every rank's trace as a string (small traces for tests).
pub fn to_strings(s: &SynthSpec) -> Vec<String> {
    let w = write_all(s, (0..s.ranks).map(|_| Vec::new()).collect()).expect("in memory");
    w.into_iter()
        .map(|b| String::from_utf8(b).expect("utf-8"))
        .collect()
}

/// Writes every rank's trace into `dir` as `rank-<n>.json` (or `.json.gz`); returns the paths.
pub fn write_dir(
    s: &SynthSpec,
    dir: &std::path::Path,
    gz: bool,
) -> std::io::Result<Vec<std::path::PathBuf>> {
    let paths: Vec<_> = (0..s.ranks)
        .map(|r| dir.join(format!("rank-{r}.json{}", if gz { ".gz" } else { "" })))
        .collect();
    if gz {
        // The buffer before the encoder: each event is written in many small pieces, and the
        // encoder moves its whole output buffer on every write it is given.
        let ws = paths
            .iter()
            .map(|p| {
                Ok(std::io::BufWriter::with_capacity(
                    1 << 16,
                    flate2::write::GzEncoder::new(
                        std::fs::File::create(p)?,
                        flate2::Compression::fast(),
                    ),
                ))
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        for w in write_all(s, ws)? {
            w.into_inner()
                .map_err(std::io::IntoInnerError::into_error)?
                .finish()?;
        }
    } else {
        let ws = paths
            .iter()
            .map(|p| Ok(std::io::BufWriter::new(std::fs::File::create(p)?)))
            .collect::<std::io::Result<Vec<_>>>()?;
        for mut w in write_all(s, ws)? {
            w.flush()?;
        }
    }
    Ok(paths)
}
