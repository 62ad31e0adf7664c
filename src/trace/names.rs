//! Collectives and element types as each source spells them: NCCL kernel names (new
//! `ncclDevKernel_AllReduce_Sum_bf16_RING_LL` and old `ncclKernel_AllReduce_RING_LL_Sum_float`),
//! Kineto's `record_param_comms` arguments (`allreduce`, `BFloat16`), and the `datatype` number
//! of NCCL's COLL log lines (NCCL's `ncclDataType_t`). All map to one vocabulary: ops
//! `all_reduce`, `all_gather`, `reduce_scatter`, `broadcast`, `reduce`, `send_recv`,
//! `all_to_all`, ...; dtypes `bf16`, `f16`, `f32`, `f64`, `i8`, `u8`, `i32`, `u32`, `i64`,
//! `u64`, `f8e4m3`, `f8e5m2`.

use crate::model::{CollectiveKind, DType};

/// What an NCCL kernel's name says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KernelInfo {
    /// Normalised op (`all_reduce`); `None` for NCCL's generic kernels that name no function.
    pub(crate) op: Option<String>,
    /// Element type, only for reducing ops (others move bytes; their type in the name is not
    /// the tensor's).
    pub(crate) dtype: Option<String>,
    /// `RING`, `TREE`, `NVLS`, ...
    pub(crate) algo: Option<String>,
    /// `LL`, `LL128`, `SIMPLE`.
    pub(crate) proto: Option<String>,
}

/// True for kernels NCCL launches (both naming schemes and the generic kernels).
pub(crate) fn is_nccl_kernel(name: &str) -> bool {
    name.starts_with("ncclDevKernel") || name.starts_with("ncclKernel")
}

const ALGOS: &[&str] = &["RING", "TREE", "COLLNET", "NVLS", "PAT", "DIRECT", "CHAIN"];
const PROTOS: &[&str] = &["LL", "LL128", "SIMPLE"];
const REDOPS: &[&str] = &[
    "Sum",
    "Prod",
    "Min",
    "Max",
    "PreMulSum",
    "SumPostDiv",
    "Avg",
];

/// Parses an NCCL kernel name; `None` if it is not one.
pub(crate) fn parse_kernel(name: &str) -> Option<KernelInfo> {
    let base = name.split('(').next().unwrap_or(name).trim();
    let rest = base
        .strip_prefix("ncclDevKernel_")
        .or_else(|| base.strip_prefix("ncclKernel_"))
        .or_else(|| (base == "ncclDevKernel" || base == "ncclKernel").then_some(""))?;
    let mut toks = rest.split('_').filter(|t| !t.is_empty());
    let func = toks.next().unwrap_or("");
    let op = match func {
        "" | "Generic" => None,
        f => Some(op_from_func(f)),
    };
    let reducing = matches!(
        op.as_deref(),
        Some("all_reduce" | "reduce_scatter" | "reduce")
    );
    let (mut algo, mut proto, mut dtype) = (Vec::new(), None, None);
    for t in toks {
        if ALGOS.contains(&t) {
            algo.push(t);
        } else if PROTOS.contains(&t) {
            proto = Some(t.to_string());
        } else if REDOPS.contains(&t) {
        } else if let Some(d) = dtype_from_kernel(t) {
            if reducing {
                dtype = Some(d.to_string());
            }
        }
    }
    Some(KernelInfo {
        op,
        dtype,
        algo: (!algo.is_empty()).then(|| algo.join("_")),
        proto,
    })
}

/// `AllReduce` -> `all_reduce`.
fn op_from_func(f: &str) -> String {
    match f {
        "AllReduce" => "all_reduce".into(),
        "AllGather" => "all_gather".into(),
        "ReduceScatter" => "reduce_scatter".into(),
        "Broadcast" => "broadcast".into(),
        "Reduce" => "reduce".into(),
        "SendRecv" => "send_recv".into(),
        "AllToAll" | "AlltoAll" => "all_to_all".into(),
        other => {
            // CamelCase -> snake_case for functions added later.
            let mut s = String::new();
            for (i, c) in other.chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    s.push('_');
                }
                s.push(c.to_ascii_lowercase());
            }
            s
        }
    }
}

fn dtype_from_kernel(t: &str) -> Option<&'static str> {
    Some(match t {
        // old names spell C types, split at '_': `int8_t` -> `int8`, `__nv_bfloat16` -> `bfloat16`
        "bf16" | "bfloat16" => "bf16",
        "f16" | "half" => "f16",
        "f32" | "float" => "f32",
        "f64" | "double" => "f64",
        "i8" | "int8" => "i8",
        "u8" | "uint8" => "u8",
        "i32" | "int32" => "i32",
        "u32" | "uint32" => "u32",
        "i64" | "int64" => "i64",
        "u64" | "uint64" => "u64",
        "f8e4m3" => "f8e4m3",
        "f8e5m2" => "f8e5m2",
        _ => return None,
    })
}

/// Kineto's "Collective name" (`allreduce`, `_allgather_base`, `all_gather_into_tensor`,
/// `reduce_scatter_tensor`, `send`, ...) -> the normalised op.
pub(crate) fn op_from_collective_name(s: &str) -> String {
    let mut n = s.trim().trim_start_matches('_').to_ascii_lowercase();
    for suffix in ["_coalesced", "_base", "_into_tensor", "_tensor"] {
        if let Some(x) = n.strip_suffix(suffix) {
            n = x.to_string();
        }
    }
    let compact: String = n.chars().filter(|c| *c != '_').collect();
    match compact.as_str() {
        "allreduce" => "all_reduce".into(),
        "allgather" => "all_gather".into(),
        "reducescatter" => "reduce_scatter".into(),
        "alltoall" | "alltoallv" => "all_to_all".into(),
        _ => n,
    }
}

/// Kineto's "dtype" (`BFloat16`, `Float`, `Half`, ...) -> the normalised dtype.
pub(crate) fn dtype_from_torch(s: &str) -> Option<&'static str> {
    Some(match s.trim() {
        "BFloat16" | "bfloat16" => "bf16",
        "Half" | "float16" => "f16",
        "Float" | "float" | "float32" => "f32",
        "Double" | "double" | "float64" => "f64",
        "Char" | "int8" => "i8",
        "Byte" | "uint8" | "Bool" | "bool" => "u8",
        "Short" | "int16" => "i16",
        "Int" | "int" | "int32" => "i32",
        "Long" | "int64" => "i64",
        "Float8_e4m3fn" | "Float8_e4m3fnuz" => "f8e4m3",
        "Float8_e5m2" | "Float8_e5m2fnuz" => "f8e5m2",
        _ => return None,
    })
}

/// NCCL's `ncclDataType_t` number (COLL log `datatype N`) -> the normalised dtype.
pub(crate) fn dtype_from_nccl(n: u32) -> Option<&'static str> {
    Some(match n {
        0 => "i8",
        1 => "u8",
        2 => "i32",
        3 => "u32",
        4 => "i64",
        5 => "u64",
        6 => "f16",
        7 => "f32",
        8 => "f64",
        9 => "bf16",
        10 => "f8e4m3",
        11 => "f8e5m2",
        _ => return None,
    })
}

/// Bytes per element of a normalised dtype.
pub(crate) fn dtype_size(d: &str) -> Option<u64> {
    Some(match d {
        "i8" | "u8" | "f8e4m3" | "f8e5m2" => 1,
        "bf16" | "f16" | "i16" => 2,
        "f32" | "i32" | "u32" => 4,
        "f64" | "i64" | "u64" => 8,
        _ => return None,
    })
}

/// The schedule's collective kind of a normalised op, if the schedule has one.
pub(crate) fn schedule_kind(op: &str) -> Option<CollectiveKind> {
    op.parse().ok()
}

/// The schedule's dtype of a normalised dtype, if the schedule has one.
pub(crate) fn schedule_dtype(d: &str) -> Option<DType> {
    match d {
        "bf16" => Some(DType::Bf16),
        "f16" => Some(DType::F16),
        "f32" => Some(DType::F32),
        _ => None,
    }
}

/// A span a serving engine puts around each of its steps (one scheduler iteration, one
/// forward of the model), by which a trace without `ProfilerStep#` spans is cut into steps.
#[derive(Debug)]
pub(crate) struct StepMarker {
    /// `vLLM`, `SGLang`, `TensorRT-LLM`.
    pub(crate) engine: &'static str,
    /// The marker as the output names it.
    pub(crate) name: &'static str,
    /// The engine file that writes it.
    pub(crate) source: &'static str,
    /// Whether an event's name is this marker.
    pub(crate) matches: fn(&str) -> bool,
}

/// `name` is the Python function `function` as torch.profiler's stack tracing writes it
/// (`path/to/file.py(123): function`, category `python_function`), or a span of that name.
fn python_function(name: &str, function: &str) -> bool {
    name == function
        || name
            .strip_suffix(function)
            .is_some_and(|head| head.ends_with("): "))
}

/// The engines' step markers, most specific first: where a trace holds several (an
/// annotation around a Python function of the same step), the first that holds collectives
/// cuts the steps. Nested spans of one marker (vLLM's worker and model runner both name
/// their method `execute_model`) count once, by the outermost.
pub(crate) const STEP_MARKERS: &[StepMarker] = &[
    StepMarker {
        engine: "vLLM",
        name: "execute_context_<n>(<tokens>)_generation_<m>(<tokens>)",
        source: "vllm-project/vllm vllm/v1/worker/gpu_worker.py (Worker.annotate_profile: one annotation per execute_model)",
        matches: |n| n.starts_with("execute_context_") && n.contains("_generation_"),
    },
    StepMarker {
        engine: "vLLM",
        name: "execute_new_<n>_cached_<m>",
        source: "vllm-project/vllm vllm/v1/worker/gpu_worker.py (Worker.annotate_profile, other versions)",
        matches: |n| n.starts_with("execute_new_") && n.contains("_cached_"),
    },
    StepMarker {
        engine: "vLLM",
        name: "execute_model",
        source: "vllm-project/vllm vllm/v1/worker/gpu_worker.py, gpu_model_runner.py (execute_model, a python_function event: vLLM's profiler records stacks by default)",
        matches: |n| python_function(n, "execute_model"),
    },
    StepMarker {
        engine: "SGLang",
        name: "run_batch",
        source: "sgl-project/sglang python/sglang/srt/managers/scheduler.py (Scheduler.run_batch, a python_function event: /start_profile records stacks by default, scheduler_profiler_mixin.py)",
        matches: |n| python_function(n, "run_batch"),
    },
    StepMarker {
        engine: "SGLang",
        name: "forward_batch_generation",
        source: "sgl-project/sglang python/sglang/srt/managers/tp_worker.py (TpModelWorker.forward_batch_generation)",
        matches: |n| python_function(n, "forward_batch_generation"),
    },
    StepMarker {
        engine: "TensorRT-LLM",
        name: "_forward_step",
        source: "NVIDIA/TensorRT-LLM tensorrt_llm/_torch/pyexecutor/py_executor.py (PyExecutor._forward_step and its range `[Executor] _forward_step <iter>: ...`)",
        matches: |n| n.starts_with("[Executor] _forward_step") || python_function(n, "_forward_step"),
    },
];

/// Every marker name holds one of these (the trace scanner keeps the events that hold one,
/// [`super::prefilter::scan`]; most names are rejected by them before the markers' own rules).
pub(crate) const STEP_MARKER_WORDS: [&str; 4] = [
    "execute_",
    "run_batch",
    "forward_batch_generation",
    "_forward_step",
];

/// The index in [`STEP_MARKERS`] of the marker `name` is, if any.
pub(crate) fn step_marker(name: &str) -> Option<usize> {
    if !STEP_MARKER_WORDS.iter().any(|w| name.contains(w)) {
        return None;
    }
    STEP_MARKERS.iter().position(|m| (m.matches)(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(
        name: &str,
    ) -> (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    ) {
        let i = parse_kernel(name).unwrap();
        (i.op, i.dtype, i.algo, i.proto)
    }
    fn s(x: &str) -> Option<String> {
        Some(x.to_string())
    }

    #[test]
    fn new_kernel_names() {
        assert_eq!(
            k("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            (s("all_reduce"), s("bf16"), s("RING"), s("LL"))
        );
        assert_eq!(
            k("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            (s("all_gather"), None, s("RING"), s("LL"))
        );
        assert_eq!(
            k("ncclDevKernel_ReduceScatter_Sum_f32_NVLS_SIMPLE(x)"),
            (s("reduce_scatter"), s("f32"), s("NVLS"), s("SIMPLE"))
        );
        assert_eq!(
            k("ncclDevKernel_AllReduce_Sum_f16_COLLNET_DIRECT_LL128()"),
            (s("all_reduce"), s("f16"), s("COLLNET_DIRECT"), s("LL128"))
        );
        assert_eq!(k("ncclDevKernel_Generic_1(x)").0, None);
    }

    #[test]
    fn old_kernel_names() {
        assert_eq!(
            k("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"),
            (s("all_reduce"), s("f32"), s("RING"), s("LL"))
        );
        assert_eq!(
            k("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"),
            (s("send_recv"), None, s("RING"), s("SIMPLE"))
        );
        assert_eq!(
            k("ncclKernel_AllReduce_TREE_LL128_Sum___nv_bfloat16(ncclDevComm*)").1,
            s("bf16")
        );
        assert!(parse_kernel("void at::native::elementwise_kernel<128, 4>(int)").is_none());
        assert!(is_nccl_kernel("ncclKernel_AllGather_RING_LL_Sum_int8_t(x)"));
    }

    #[test]
    fn torch_and_nccl_vocabularies() {
        for (a, b) in [
            ("allreduce", "all_reduce"),
            ("_allgather_base", "all_gather"),
            ("all_gather_into_tensor", "all_gather"),
            ("allgather_into_tensor_coalesced", "all_gather"),
            ("reduce_scatter_tensor", "reduce_scatter"),
            ("_reduce_scatter_base", "reduce_scatter"),
            ("all_to_allv", "all_to_all"),
            ("broadcast", "broadcast"),
        ] {
            assert_eq!(op_from_collective_name(a), b, "{a}");
        }
        assert_eq!(dtype_from_torch("BFloat16"), Some("bf16"));
        assert_eq!(dtype_from_torch("Float"), Some("f32"));
        assert_eq!(dtype_from_nccl(9), Some("bf16"));
        assert_eq!(dtype_from_nccl(6), Some("f16"));
        assert_eq!(dtype_from_nccl(7), Some("f32"));
        assert_eq!(dtype_from_nccl(0), Some("i8"));
        assert_eq!(dtype_from_nccl(99), None);
        assert_eq!(dtype_size("bf16"), Some(2));
        assert_eq!(schedule_kind("all_gather"), Some(CollectiveKind::AllGather));
        assert_eq!(schedule_kind("send_recv"), None);
    }

    #[test]
    fn engine_step_markers_by_name() {
        let engine =
            |n: &str| step_marker(n).map(|i| (STEP_MARKERS[i].engine, STEP_MARKERS[i].name));
        assert_eq!(
            engine("execute_context_1(888)_generation_0(0)"),
            Some((
                "vLLM",
                "execute_context_<n>(<tokens>)_generation_<m>(<tokens>)"
            ))
        );
        assert_eq!(engine("execute_new_2_cached_30").unwrap().0, "vLLM");
        assert_eq!(
            engine("vllm/v1/worker/gpu_model_runner.py(1502): execute_model"),
            Some(("vLLM", "execute_model"))
        );
        assert_eq!(engine("execute_model"), Some(("vLLM", "execute_model")));
        assert_eq!(
            engine("sglang/srt/managers/scheduler.py(1650): run_batch"),
            Some(("SGLang", "run_batch"))
        );
        assert_eq!(
            engine("[Executor] _forward_step 12: 0 ctx reqs, 32 gen reqs")
                .unwrap()
                .0,
            "TensorRT-LLM"
        );
        // a function whose name merely ends the same way, and other ops, are not markers
        for n in [
            "my_execute_model",
            "vllm/x.py(3): pre_execute_model",
            "aten::mm",
            "ProfilerStep#3",
            "execute_context",
        ] {
            assert_eq!(step_marker(n), None, "{n}");
        }
    }
}
