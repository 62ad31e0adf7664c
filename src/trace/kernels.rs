//! Collectives that are not NCCL kernels: the custom all-reduce and MoE communication kernels
//! that serving engines run instead of NCCL wherever they can, and the CPU ops that launch
//! them (whose `Input Dims` give the size). One table, each name with the source it was read
//! from (repository and file; the names are template functions, so a profile shows them as
//! `void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(...)` and the like).
//!
//! A kernel name matches an entry when the entry's name occurs in it at the start of an
//! identifier (not preceded by a letter, digit or `_`): `one_shot_all_reduce_kernel` matches
//! `(anonymous namespace)::one_shot_all_reduce_kernel<c10::BFloat16, 16, 8>` but not
//! `gemm_one_shot_all_reduce_kernel` (a fused GEMM, mostly compute).

/// One custom communication kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CustomKernel {
    /// The function name as it appears in the kernel's name (with its namespace where the
    /// bare name is too common, e.g. DeepEP's `dispatch`).
    pub(crate) name: &'static str,
    /// Normalised op: `all_reduce`, `all_gather`, `all_to_all`.
    pub(crate) op: &'static str,
    /// The implementation, as the tool labels the collective.
    pub(crate) implementation: &'static str,
    /// Where the name was read: `owner/repo path`.
    pub(crate) source: &'static str,
}

const VLLM_CAR: &str =
    "vllm-project/vllm csrc/custom_all_reduce.cuh; sgl-project/sglang sgl-kernel/csrc/allreduce/custom_all_reduce.cuh";
const SYMM: &str = "pytorch/pytorch torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu";
const TRT_CAR: &str = "NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/customAllReduceKernels.cu; flashinfer-ai/flashinfer include/flashinfer/comm/trtllm_allreduce.cuh; sgl-project/sglang sgl-kernel/csrc/allreduce/trt_reduce_internal.cu";
const TRT_FUSION: &str = "NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/communicationKernels/allReduceFusionKernels.cu; flashinfer-ai/flashinfer include/flashinfer/comm/trtllm_allreduce_fusion.cuh";
const QUICK: &str = "vllm-project/vllm csrc/quickreduce/quick_reduce_impl.cuh; sgl-project/sglang sgl-kernel/csrc/allreduce/quick_all_reduce.cuh";
const DEEPEP_INTRA: &str = "deepseek-ai/DeepEP csrc/kernels/intranode.cu";
const DEEPEP_INTER: &str = "deepseek-ai/DeepEP csrc/kernels/internode.cu";
const DEEPEP_LL: &str = "deepseek-ai/DeepEP csrc/kernels/internode_ll.cu";

/// The custom communication kernels, by family.
pub(crate) const KERNELS: &[CustomKernel] = &[
    // vLLM's custom all-reduce (SGLang carries the same kernels): one-shot and two-shot over
    // P2P/IPC buffers.
    CustomKernel {
        name: "cross_device_reduce_1stage",
        op: "all_reduce",
        implementation: "custom all-reduce 1-stage (vLLM/SGLang)",
        source: VLLM_CAR,
    },
    CustomKernel {
        name: "cross_device_reduce_2stage",
        op: "all_reduce",
        implementation: "custom all-reduce 2-stage (vLLM/SGLang)",
        source: VLLM_CAR,
    },
    // PyTorch symmetric memory (torch.ops.symm_mem), which vLLM uses where NVLink allows.
    CustomKernel {
        name: "multimem_all_reduce_kernel",
        op: "all_reduce",
        implementation: "symmetric-memory multimem all-reduce (PyTorch)",
        source: SYMM,
    },
    CustomKernel {
        name: "multimem_one_shot_all_reduce_kernel",
        op: "all_reduce",
        implementation: "symmetric-memory multimem one-shot all-reduce (PyTorch)",
        source: SYMM,
    },
    CustomKernel {
        name: "one_shot_all_reduce_kernel",
        op: "all_reduce",
        implementation: "symmetric-memory one-shot all-reduce (PyTorch)",
        source: SYMM,
    },
    CustomKernel {
        name: "two_shot_all_reduce_kernel",
        op: "all_reduce",
        implementation: "symmetric-memory two-shot all-reduce (PyTorch)",
        source: SYMM,
    },
    CustomKernel {
        name: "multimem_all_gather_kernel",
        op: "all_gather",
        implementation: "symmetric-memory multimem all-gather (PyTorch)",
        source: SYMM,
    },
    // TensorRT-LLM's custom all-reduce (FlashInfer and SGLang carry ports of it).
    CustomKernel {
        name: "oneShotAllReduceKernel",
        op: "all_reduce",
        implementation: "one-shot all-reduce (TensorRT-LLM/FlashInfer)",
        source: TRT_CAR,
    },
    CustomKernel {
        name: "twoShotAllReduceKernel",
        op: "all_reduce",
        implementation: "two-shot all-reduce (TensorRT-LLM/FlashInfer)",
        source: TRT_CAR,
    },
    // TensorRT-LLM's all-reduce fused with residual add and RMS norm (FlashInfer's
    // trtllm_allreduce_fusion is a port).
    CustomKernel {
        name: "allreduce_fusion_kernel_oneshot_lamport",
        op: "all_reduce",
        implementation: "fused one-shot all-reduce+norm (TensorRT-LLM/FlashInfer)",
        source: TRT_FUSION,
    },
    CustomKernel {
        name: "allreduce_fusion_kernel_twoshot_sync",
        op: "all_reduce",
        implementation: "fused two-shot all-reduce+norm (TensorRT-LLM/FlashInfer)",
        source: TRT_FUSION,
    },
    // AMD's quantised quick all-reduce (ROCm; vLLM and SGLang).
    CustomKernel {
        name: "allreduce_prototype_twoshot",
        op: "all_reduce",
        implementation: "quick-reduce two-shot all-reduce (AMD, vLLM/SGLang)",
        source: QUICK,
    },
    // DeepEP's MoE dispatch and combine (expert parallelism): all-to-all exchanges.
    CustomKernel {
        name: "deep_ep::intranode::dispatch",
        op: "all_to_all",
        implementation: "DeepEP intranode dispatch",
        source: DEEPEP_INTRA,
    },
    CustomKernel {
        name: "deep_ep::intranode::combine",
        op: "all_to_all",
        implementation: "DeepEP intranode combine",
        source: DEEPEP_INTRA,
    },
    CustomKernel {
        name: "deep_ep::internode::dispatch",
        op: "all_to_all",
        implementation: "DeepEP internode dispatch",
        source: DEEPEP_INTER,
    },
    CustomKernel {
        name: "deep_ep::internode::combine",
        op: "all_to_all",
        implementation: "DeepEP internode combine",
        source: DEEPEP_INTER,
    },
    CustomKernel {
        name: "deep_ep::internode_ll::dispatch",
        op: "all_to_all",
        implementation: "DeepEP low-latency dispatch",
        source: DEEPEP_LL,
    },
    CustomKernel {
        name: "deep_ep::internode_ll::combine",
        op: "all_to_all",
        implementation: "DeepEP low-latency combine",
        source: DEEPEP_LL,
    },
];

/// One CPU op that launches a custom collective: its first input is the tensor reduced, so
/// its `Input Dims` and `Input type` give the size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CustomOp {
    pub(crate) name: &'static str,
    pub(crate) op: &'static str,
    pub(crate) source: &'static str,
}

/// CPU ops around the custom kernels (what `record_shapes` sizes).
pub(crate) const OPS: &[CustomOp] = &[
    CustomOp {
        name: "_C_custom_ar::all_reduce",
        op: "all_reduce",
        source: "vllm-project/vllm csrc/torch_bindings.cpp (custom_ar library)",
    },
    CustomOp {
        name: "vllm::all_reduce",
        op: "all_reduce",
        source: "vllm-project/vllm vllm/distributed/parallel_state.py",
    },
    CustomOp {
        name: "sgl_kernel::all_reduce",
        op: "all_reduce",
        source: "sgl-project/sglang sgl-kernel/csrc/common_extension.cc",
    },
    CustomOp {
        name: "symm_mem::one_shot_all_reduce",
        op: "all_reduce",
        source: "pytorch/pytorch torch/csrc/distributed/c10d/symm_mem/SymmetricMemory.cpp",
    },
    CustomOp {
        name: "symm_mem::one_shot_all_reduce_out",
        op: "all_reduce",
        source: "pytorch/pytorch torch/csrc/distributed/c10d/symm_mem/SymmetricMemory.cpp",
    },
    CustomOp {
        name: "symm_mem::two_shot_all_reduce_",
        op: "all_reduce",
        source: "pytorch/pytorch torch/csrc/distributed/c10d/symm_mem/SymmetricMemory.cpp",
    },
    CustomOp {
        name: "symm_mem::two_shot_all_reduce_out",
        op: "all_reduce",
        source: "pytorch/pytorch torch/csrc/distributed/c10d/symm_mem/SymmetricMemory.cpp",
    },
    CustomOp {
        name: "symm_mem::multimem_all_reduce_",
        op: "all_reduce",
        source: "pytorch/pytorch torch/csrc/distributed/c10d/symm_mem/SymmetricMemory.cpp",
    },
    CustomOp {
        name: "symm_mem::multimem_one_shot_all_reduce",
        op: "all_reduce",
        source: "pytorch/pytorch torch/csrc/distributed/c10d/symm_mem/SymmetricMemory.cpp",
    },
    CustomOp {
        name: "trtllm::allreduce",
        op: "all_reduce",
        source: "NVIDIA/TensorRT-LLM cpp/tensorrt_llm/thop/allreduceOp.cpp",
    },
];

/// Whether `hay` holds `word` at the start of an identifier.
fn at_identifier(hay: &str, word: &str) -> bool {
    hay.match_indices(word).any(|(i, _)| {
        hay[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'))
    })
}

/// The table's entry for a GPU kernel name, if it is a custom communication kernel.
pub(crate) fn custom_kernel(name: &str) -> Option<(u16, &'static CustomKernel)> {
    KERNELS
        .iter()
        .enumerate()
        .find(|(_, k)| at_identifier(name, k.name))
        .map(|(i, k)| (i as u16, k))
}

/// The table's entry for a CPU op name.
pub(crate) fn custom_op(name: &str) -> Option<&'static CustomOp> {
    OPS.iter().find(|o| o.name == name)
}

/// A kernel whose name says it communicates (all-reduce, all-gather, reduce-scatter,
/// all-to-all) but which is neither NCCL's nor in the table: counted, so that a trace made
/// mostly of such kernels says so instead of giving a partial sequence.
pub(crate) fn looks_like_collective(name: &str) -> bool {
    let l = name.to_ascii_lowercase();
    [
        "allreduce",
        "all_reduce",
        "allgather",
        "all_gather",
        "reducescatter",
        "reduce_scatter",
        "alltoall",
        "all_to_all",
    ]
    .iter()
    .any(|w| l.contains(w))
}

/// The element type of a custom kernel, from its template arguments (`__nv_bfloat16`,
/// `c10::BFloat16`, `__half`, `float`), when it names exactly one.
pub(crate) fn kernel_dtype(name: &str) -> Option<&'static str> {
    // The template arguments only (the parameter list may name other types).
    let open = name.find('<')?;
    let mut depth = 0usize;
    let mut end = name.len();
    for (i, c) in name[open..].char_indices() {
        match c {
            '<' => depth += 1,
            '>' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    end = open + i;
                    break;
                }
            }
            _ => {}
        }
    }
    let args = &name[open..end];
    let found: Vec<&'static str> = [
        ("__nv_bfloat16", "bf16"),
        ("BFloat16", "bf16"),
        ("__half", "f16"),
        ("c10::Half", "f16"),
        ("float", "f32"),
    ]
    .iter()
    .filter(|(t, _)| at_identifier(args, t))
    .map(|(_, d)| *d)
    .collect();
    let first = *found.first()?;
    found.iter().all(|d| *d == first).then_some(first)
}

/// The dtype of a CPU op's `Input type` entry (`c10::BFloat16`, `float`, `c10::Half`).
pub(crate) fn input_type_dtype(t: &str) -> Option<&'static str> {
    Some(match t.trim() {
        "c10::BFloat16" | "BFloat16" => "bf16",
        "c10::Half" | "Half" => "f16",
        "float" | "Float" => "f32",
        "double" => "f64",
        "c10::Float8_e4m3fn" => "f8e4m3",
        "c10::Float8_e5m2" => "f8e5m2",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_found_by_its_name_as_profiles_show_it() {
        let cases = [
            (
                "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)",
                "all_reduce",
                Some("bf16"),
            ),
            (
                "void sglang::cross_device_reduce_2stage<half, 4>(sglang::RankData*)",
                "all_reduce",
                None,
            ),
            (
                "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long, unsigned int**, unsigned long, unsigned long)",
                "all_reduce",
                Some("bf16"),
            ),
            (
                "void (anonymous namespace)::two_shot_all_reduce_kernel_inplace<c10::BFloat16, 16, 8>(c10::BFloat16**, unsigned long)",
                "all_reduce",
                Some("bf16"),
            ),
            (
                "void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8>(tensorrt_llm::kernels::AllReduceParams)",
                "all_reduce",
                Some("bf16"),
            ),
            (
                "void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<(flashinfer::trtllm_allreduce_fusion::AllReduceFusionPattern)1, __nv_bfloat16, 8, true, true>(flashinfer::trtllm_allreduce_fusion::AllReduceFusionParams<__nv_bfloat16>)",
                "all_reduce",
                Some("bf16"),
            ),
            (
                "void quickreduce::allreduce_prototype_twoshot<quickreduce::AllReduceTwoshot<__half, quickreduce::CodecQ4<__half, 8>, true>, __half>(__half const*, __half*, unsigned int)",
                "all_reduce",
                Some("f16"),
            ),
            (
                "void deep_ep::internode_ll::dispatch<true, 3, 10, 7168>(void*, float*, int*, long*)",
                "all_to_all",
                None,
            ),
            (
                "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(__nv_bfloat16*, float*)",
                "all_to_all",
                Some("bf16"),
            ),
        ];
        for (name, op, dtype) in cases {
            let (_, k) = custom_kernel(name).unwrap_or_else(|| panic!("{name}"));
            assert_eq!(k.op, op, "{name}");
            assert_eq!(kernel_dtype(name), dtype, "{name}");
        }
        // A fused GEMM whose name ends in the same words, and NCCL's own kernels, are not.
        assert!(custom_kernel("gemm_one_shot_all_reduce_kernel_0d1d2d").is_none());
        assert!(custom_kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL").is_none());
        assert!(custom_kernel("void deep_ep::layout::get_dispatch_layout<256>()").is_none());
        assert!(looks_like_collective(
            "my_engine::fancy_allreduce_kernel<bf16>"
        ));
        assert!(!looks_like_collective("ampere_bf16_s16816gemm"));
    }

    #[test]
    fn every_entry_names_its_source_and_the_ops_are_unique() {
        for k in KERNELS {
            assert!(k.source.contains('/') && k.source.contains(' '), "{k:?}");
        }
        for (i, o) in OPS.iter().enumerate() {
            assert!(o.source.contains('/'), "{o:?}");
            assert!(OPS[..i].iter().all(|p| p.name != o.name), "{o:?}");
        }
        assert_eq!(
            custom_op("symm_mem::two_shot_all_reduce_").map(|o| o.op),
            Some("all_reduce")
        );
        assert_eq!(input_type_dtype("c10::BFloat16"), Some("bf16"));
    }
}
