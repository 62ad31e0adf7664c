//! What a serving engine calls each collective of a schedule, and so which count a profiler
//! shows for it.
//!
//! Under pure tensor parallelism SGLang and vLLM run the same collectives for every
//! architecture the table knows: the vocab-parallel embedding's all-reduce, one all-reduce
//! after each attention (or other mixer) block and one after each MLP/MoE block, and an
//! all-gather of the vocab-parallel logits. The schedule ([`super::schedule::build`]) is
//! therefore the same for both engines; what differs is what the engine calls each op and
//! whether it runs an all-reduce as its own kernel or fused with the residual add and RMSNorm
//! that follow it (FlashInfer's port of TensorRT-LLM's all-reduce fusion). A fused all-reduce
//! is still one collective of the same bytes, under another kernel name, so the count of
//! collectives never changes: only the rows a profiler files them under do.
//!
//! The rules, each with the engine file it follows:
//! - embedding: `VocabParallelEmbedding.forward` all-reduces the masked lookup whenever TP > 1
//!   (sgl-project/sglang python/sglang/srt/layers/vocab_parallel_embedding.py;
//!   vllm-project/vllm vllm/model_executor/layers/vocab_parallel_embedding.py).
//! - logits: both all-gather. SGLang's `LogitsProcessor._get_logits` calls
//!   `tensor_model_parallel_all_gather` (`do_tensor_parallel_all_gather`: TP > 1, no DP
//!   attention; python/sglang/srt/layers/logits_processor.py); vLLM's `_gather_logits` picks
//!   all-gather when `current_platform.use_all_gather()`, which its V1 engine (the only one
//!   now) makes true, else a gather to rank 0 (vllm/model_executor/layers/logits_processor.py,
//!   vllm/platforms/interface.py).
//! - MoE: shared and routed experts are summed first and reduced once (SGLang
//!   models/deepseek_v2.py `DeepseekV2MoE.forward_normal`; vLLM models/deepseek_v2.py
//!   `DeepseekV2MoE.forward`, `maybe_all_reduce_tensor_model_parallel`); Mixtral, Qwen3-MoE
//!   and gpt-oss reduce their experts' output once as well.
//! - fusion, SGLang: `LayerCommunicator` (python/sglang/srt/layers/communicator.py) fuses the
//!   attention all-reduce with `post_attention_layernorm` (`prepare_mlp`,
//!   `forward_with_allreduce_fusion`) and the MLP all-reduce with the next layer's
//!   `input_layernorm` (`should_fuse_mlp_allreduce_with_next_layer`, false for the last
//!   layer), so the embedding's and the last layer's MLP all-reduce stay plain. It applies
//!   when `--enable-flashinfer-allreduce-fusion` is on, which server_args.py switches on by
//!   itself only on SM90/SM100 GPUs, one node, no DP attention, for DeepSeek-V3/Kimi,
//!   gpt-oss, GLM-4 MoE, Qwen3-MoE and Qwen3-Next; other architectures keep plain
//!   all-reduces. The EAGLE-3 head (models/llama_eagle3.py) is a plain Llama layer: plain.
//! - fusion, vLLM: the compilation pass `AllReduceFusionPass`
//!   (vllm/compilation/collective_fusion.py) rewrites every all-reduce followed by an RMSNorm
//!   in the compiled graph: the embedding's with the first layer's `input_layernorm`
//!   (`AllReduceRMSNormPattern`), the others with the residual add + norm after them
//!   (`AllReduceFusedAddRMSNormPattern`; the last layer's with the final norm). The EAGLE-3
//!   head is compiled too (models/llama_eagle3.py `@support_torch_compile`), so its three
//!   all-reduces fuse alike. Off unless the pass is enabled in the compilation config.
//! - DP attention (SGLang `--enable-dp-attention`, vLLM data parallel attention) replaces the
//!   attention all-reduce by gathers and scatters of the whole DP batch: not modeled here.

use serde::Serialize;

use super::draft::DrafterKind;
pub(crate) use super::schedule::Engine;
use super::schedule::{CollectiveKind, Op, Phase, Schedule};
use super::shape::ModelShape;

/// Architectures whose model file SGLang routes through `LayerCommunicator` with the
/// all-reduce fusion, as `model_type` values (server_args.py's list, by architecture).
const SGLANG_FUSED: &[&str] = &[
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_v32",
    "kimi_k2",
    "gpt_oss",
    "glm4_moe",
    "qwen3_moe",
    "qwen3_next",
    "qwen3_5_moe",
    "qwen3_5_moe_text",
];

const NCCL_AR: &str = "ncclDevKernel_AllReduce_Sum_* (NCCL; the custom all-reduce's cross_device_reduce_* where it runs)";
const NCCL_AG: &str = "ncclDevKernel_AllGather_* (NCCL)";
const FUSED_AR: &str =
    "allreduce_fusion_kernel_oneshot_lamport / _twoshot_sync (FlashInfer all-reduce fusion)";

/// What the engine calls one collective of the schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct EngineOp {
    /// The engine code that issues it (class.method -> call).
    pub(crate) call: &'static str,
    /// The GPU kernel a profiler shows for it.
    pub(crate) kernel: &'static str,
    /// The norm it is fused with; `None`: a collective kernel of its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fused_with: Option<&'static str>,
    /// The engine file the rule follows (repository and path).
    pub(crate) source: &'static str,
}

/// The counts a profiler shows for one forward, by kernel family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub(crate) struct ProfilerCount {
    /// All-reduces run as collective kernels of their own (NCCL, or a custom all-reduce).
    pub(crate) all_reduce: u64,
    /// All-reduces run fused with the residual add and RMSNorm after them.
    pub(crate) fused_all_reduce: u64,
    pub(crate) all_gather: u64,
}

/// The engine's view of a whole schedule: one entry per op (`None` for compute ops).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct EngineView {
    pub(crate) engine: Engine,
    pub(crate) allreduce_fusion: bool,
    /// Whether the engine fuses anything in this schedule (false when the architecture or
    /// phase has no fusion in that engine even with the switch on).
    pub(crate) fusion_applies: bool,
    pub(crate) ops: Vec<Option<EngineOp>>,
    pub(crate) count: ProfilerCount,
    /// The same engine's count for one EAGLE-3 draft step, when the caller built it (shown
    /// beside a verify, whose count it is not part of).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) draft: Option<ProfilerCount>,
    /// The forward is a part of a cycle shown with its drafts (`plan --phase cycle`): the
    /// verify's line pointing at `--phase draft` is left out.
    #[serde(skip)]
    pub(crate) in_cycle: bool,
}

/// Whether `engine` with fusion on fuses the all-reduces of `shape` in `phase`.
fn fusion_applies(engine: Engine, shape: &ModelShape, phase: Phase) -> bool {
    match engine {
        // the draft head is a plain Llama layer outside LayerCommunicator
        Engine::Sglang => {
            phase != Phase::Draft
                && shape
                    .model_type
                    .as_deref()
                    .is_some_and(|t| SGLANG_FUSED.contains(&t))
        }
        // a graph pass: every all-reduce followed by an RMSNorm, draft head included
        Engine::Vllm => true,
    }
}

/// The model file of `model_type` in `engine` (where its attention and MLP all-reduces are
/// issued, unfused).
fn model_file(engine: Engine, model_type: Option<&str>) -> &'static str {
    let t = model_type.unwrap_or("");
    let family = if t == "deepseek_v4" {
        t
    } else if t.starts_with("deepseek") || t == "kimi_k2" || t == "glm_moe_dsa" {
        "deepseek_v2"
    } else {
        t
    };
    match (engine, family) {
        (Engine::Sglang, "deepseek_v2") => {
            "sgl-project/sglang python/sglang/srt/models/deepseek_v2.py"
        }
        (Engine::Sglang, "deepseek_v4") => {
            "sgl-project/sglang python/sglang/srt/models/deepseek_v4.py"
        }
        (Engine::Sglang, "llama") => "sgl-project/sglang python/sglang/srt/models/llama.py",
        (Engine::Sglang, "mixtral") => "sgl-project/sglang python/sglang/srt/models/mixtral.py",
        (Engine::Sglang, "qwen3_moe") => "sgl-project/sglang python/sglang/srt/models/qwen3_moe.py",
        (Engine::Sglang, "gpt_oss") => "sgl-project/sglang python/sglang/srt/models/gpt_oss.py",
        (Engine::Sglang, _) => {
            "sgl-project/sglang python/sglang/srt/models/ (the architecture's file)"
        }
        (Engine::Vllm, "deepseek_v2") => {
            "vllm-project/vllm vllm/model_executor/models/deepseek_v2.py"
        }
        (Engine::Vllm, "deepseek_v4") => {
            "vllm-project/vllm vllm/model_executor/models/deepseek_v4.py"
        }
        (Engine::Vllm, "llama") => "vllm-project/vllm vllm/model_executor/models/llama.py",
        (Engine::Vllm, "mixtral") => "vllm-project/vllm vllm/model_executor/models/mixtral.py",
        (Engine::Vllm, "qwen3_moe") => "vllm-project/vllm vllm/model_executor/models/qwen3_moe.py",
        (Engine::Vllm, "gpt_oss") => "vllm-project/vllm vllm/model_executor/models/gpt_oss.py",
        (Engine::Vllm, _) => {
            "vllm-project/vllm vllm/model_executor/models/ (the architecture's file)"
        }
    }
}

/// The engine file of a drafter's own layers (the EAGLE-3 head's of `--phase draft` too).
fn drafter_file(engine: Engine, drafter: Option<DrafterKind>) -> &'static str {
    match (engine, drafter.unwrap_or_default()) {
        (Engine::Sglang, DrafterKind::Eagle3) => {
            "sgl-project/sglang python/sglang/srt/models/llama_eagle3.py"
        }
        (Engine::Sglang, DrafterKind::Mtp) => {
            "sgl-project/sglang python/sglang/srt/models/deepseek_nextn.py (DeepseekModelNextN: eh_proj, one DeepseekV2DecoderLayer, the shared head)"
        }
        (Engine::Sglang, DrafterKind::Block) => {
            "sgl-project/sglang python/sglang/srt/models/dflash.py (its layers; embedding and LM head the target's)"
        }
        (Engine::Vllm, DrafterKind::Eagle3) => {
            "vllm-project/vllm vllm/model_executor/models/llama_eagle3.py"
        }
        (Engine::Vllm, DrafterKind::Mtp) => {
            "vllm-project/vllm vllm/model_executor/models/deepseek_mtp.py (DeepSeekMultiTokenPredictorLayer: eh_proj, mtp_block, shared_head)"
        }
        (Engine::Vllm, DrafterKind::Block) => {
            "vllm-project/vllm vllm/model_executor/models/qwen3_dflash.py (its layers; embedding and LM head the target's)"
        }
    }
}

fn source(
    engine: Engine,
    phase: Phase,
    drafter: Option<DrafterKind>,
    site: &str,
    fused: bool,
    model_type: Option<&str>,
) -> &'static str {
    match (engine, phase, site) {
        (Engine::Sglang, _, _) if fused => {
            "sgl-project/sglang python/sglang/srt/layers/communicator.py"
        }
        (Engine::Vllm, _, _) if fused => "vllm-project/vllm vllm/compilation/collective_fusion.py",
        (Engine::Sglang, _, "embedding") => {
            "sgl-project/sglang python/sglang/srt/layers/vocab_parallel_embedding.py"
        }
        (Engine::Sglang, _, "logits") => {
            "sgl-project/sglang python/sglang/srt/layers/logits_processor.py"
        }
        (Engine::Sglang, Phase::Draft, _) => drafter_file(engine, drafter),
        (Engine::Vllm, _, "embedding") => {
            "vllm-project/vllm vllm/model_executor/layers/vocab_parallel_embedding.py"
        }
        (Engine::Vllm, _, "logits") => {
            "vllm-project/vllm vllm/model_executor/layers/logits_processor.py"
        }
        (Engine::Vllm, Phase::Draft, _) => drafter_file(engine, drafter),
        (_, _, _) => model_file(engine, model_type),
    }
}

fn call(engine: Engine, site: &str, communicator: bool) -> &'static str {
    match (engine, site) {
        (_, "embedding") => "VocabParallelEmbedding.forward -> tensor_model_parallel_all_reduce",
        (Engine::Sglang, "attention") if communicator => {
            "LayerCommunicator.prepare_mlp -> tensor_model_parallel_all_reduce (attention output)"
        }
        (_, "attention") => "o_proj RowParallelLinear -> tensor_model_parallel_all_reduce",
        (_, "mlp") => {
            "MLP/MoE output -> tensor_model_parallel_all_reduce (experts summed, reduced once)"
        }
        (Engine::Sglang, "logits") => {
            "LogitsProcessor._get_logits -> tensor_model_parallel_all_gather"
        }
        (Engine::Vllm, "logits") => {
            "LogitsProcessor._gather_logits -> tensor_model_parallel_all_gather"
        }
        _ => "tensor_model_parallel_all_reduce",
    }
}

/// The engine's names for every op of `s` (built from `shape`), and the profiler counts.
pub(crate) fn view(
    s: &Schedule,
    shape: &ModelShape,
    engine: Engine,
    allreduce_fusion: bool,
) -> EngineView {
    let applies = allreduce_fusion && fusion_applies(engine, shape, s.phase);
    let model_type = shape.model_type.as_deref();
    // SGLang's models that route their all-reduces through LayerCommunicator: those it fuses
    let communicator = engine == Engine::Sglang && fusion_applies(engine, shape, s.phase);
    // the last layer's MLP all-reduce: SGLang leaves it plain (`not self.is_last_layer`)
    let last_mlp = s.ops.iter().rposition(
        |o| matches!(o, Op::Collective { kind: CollectiveKind::AllReduce, site, .. } if site == "mlp"),
    );
    let mut count = ProfilerCount::default();
    let ops = s
        .ops
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let Op::Collective { kind, site, .. } = o else {
                return None;
            };
            let site = site.as_str();
            let fused_with = match (*kind, site) {
                (CollectiveKind::AllReduce, _) if !applies => None,
                (CollectiveKind::AllReduce, "embedding") => match engine {
                    Engine::Sglang => None,
                    Engine::Vllm => Some("the first layer's input_layernorm"),
                },
                (CollectiveKind::AllReduce, "attention") => {
                    Some("residual add + post_attention_layernorm")
                }
                (CollectiveKind::AllReduce, "mlp") if Some(i) == last_mlp => match engine {
                    Engine::Sglang => None,
                    Engine::Vllm => Some("residual add + the final norm"),
                },
                (CollectiveKind::AllReduce, "mlp") => {
                    Some("residual add + the next layer's input_layernorm")
                }
                _ => None,
            };
            let kernel = match (*kind, fused_with) {
                (CollectiveKind::AllGather, _) => NCCL_AG,
                (_, Some(_)) => FUSED_AR,
                _ => NCCL_AR,
            };
            match (*kind, fused_with) {
                (CollectiveKind::AllGather, _) => count.all_gather += 1,
                (_, Some(_)) => count.fused_all_reduce += 1,
                _ => count.all_reduce += 1,
            }
            Some(EngineOp {
                call: call(engine, site, communicator),
                kernel,
                fused_with,
                source: source(
                    engine,
                    s.phase,
                    s.facts.drafter,
                    site,
                    fused_with.is_some(),
                    model_type,
                ),
            })
        })
        .collect();
    EngineView {
        engine,
        allreduce_fusion,
        fusion_applies: applies,
        ops,
        count,
        draft: None,
        in_cycle: false,
    }
}

/// Collectives of `s` at `site`.
fn at(s: &Schedule, site: &str) -> u64 {
    s.ops
        .iter()
        .filter(|o| matches!(o, Op::Collective { site: x, .. } if x == site))
        .count() as u64
}

/// The sentences `plan` prints: which count a profiler shows for this forward in this engine,
/// and how it splits by site.
pub(crate) fn profiler_lines(s: &Schedule, v: &EngineView) -> Vec<String> {
    let c = v.count;
    let what = match s.phase {
        Phase::Verify => "verify forward",
        Phase::Decode => "decode forward",
        Phase::Draft => match s.facts.drafter {
            Some(d) => d.forward_word(),
            None => "EAGLE-3 draft step",
        },
        Phase::Cycle => "speculative cycle",
    };
    let mut lines = Vec::new();
    let plural = |n: u64, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    let mut parts = Vec::new();
    if c.all_reduce > 0 || c.fused_all_reduce == 0 {
        parts.push(plural(c.all_reduce, "all-reduce"));
    }
    if c.fused_all_reduce > 0 {
        parts.push(plural(
            c.fused_all_reduce,
            "fused all-reduce+RMSNorm kernel",
        ));
    }
    parts.push(plural(c.all_gather, "all-gather"));
    let head = format!(
        "{} runs {} per {what} at TP={}",
        v.engine.label(),
        parts.join(" + "),
        s.tp
    );
    lines.push(head);
    let ar = s.count_collectives(CollectiveKind::AllReduce);
    lines.push(format!(
        "the {ar} all-reduces of the schedule: embedding {}, after attention {}, after MLP/MoE {}",
        at(s, "embedding"),
        at(s, "attention"),
        at(s, "mlp")
    ));
    if c.all_reduce > 0 {
        lines.push(format!(
            "a profiler shows the {} as {NCCL_AR}",
            plural(c.all_reduce, "plain all-reduce")
        ));
    }
    if c.fused_all_reduce > 0 {
        lines.push(format!(
            "the {} fused ones as {FUSED_AR}, not as NCCL kernels (this tool's replay and cost model still price them as NCCL all-reduces of the same bytes)",
            c.fused_all_reduce
        ));
    } else if v.allreduce_fusion {
        lines.push(format!(
            "{} does not fuse the all-reduces of this {} (the fusion covers {}): all plain",
            v.engine.label(),
            if s.phase == Phase::Draft {
                "EAGLE-3 head"
            } else {
                "architecture"
            },
            match v.engine {
                Engine::Sglang =>
                    "DeepSeek-V3/Kimi, gpt-oss, GLM-4 MoE, Qwen3-MoE, Qwen3-Next targets",
                Engine::Vllm => "every all-reduce followed by an RMSNorm",
            }
        ));
    }
    if s.phase == Phase::Verify && !v.in_cycle {
        let counts = match v.draft {
            Some(d) => format!(
                " ({} + {})",
                plural(d.all_reduce + d.fused_all_reduce, "all-reduce"),
                plural(d.all_gather, "all-gather")
            ),
            None => String::new(),
        };
        lines.push(format!(
            "the EAGLE-3 draft's own collectives{counts}: its embedding, one decoder layer, its logits; they run once per draft step in the draft phase, not in this verify (--phase draft)"
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::build;
    use crate::model::presets::preset;
    use crate::model::schedule::ScheduleOptions;

    fn kimi(phase: Phase) -> (Schedule, ModelShape) {
        let shape = preset("kimi-k2.5").unwrap();
        (
            build(&shape, &ScheduleOptions::default(), phase).unwrap(),
            shape,
        )
    }

    #[test]
    fn sglang_fusion_leaves_the_embedding_and_the_last_mlp_plain() {
        let (s, shape) = kimi(Phase::Verify);
        let v = view(&s, &shape, Engine::Sglang, true);
        // 61 layers: 61 attention + 60 MLP fused, embedding + last MLP plain
        assert_eq!(
            v.count,
            ProfilerCount {
                all_reduce: 2,
                fused_all_reduce: 61 + 60,
                all_gather: 1
            }
        );
        let off = view(&s, &shape, Engine::Sglang, false);
        assert_eq!(
            off.count,
            ProfilerCount {
                all_reduce: 1 + 2 * 61,
                fused_all_reduce: 0,
                all_gather: 1
            }
        );
    }

    #[test]
    fn vllm_fusion_fuses_every_all_reduce() {
        let (s, shape) = kimi(Phase::Verify);
        let v = view(&s, &shape, Engine::Vllm, true);
        assert_eq!((v.count.all_reduce, v.count.fused_all_reduce), (0, 123));
        let (d, _) = kimi(Phase::Draft);
        let v = view(&d, &shape, Engine::Vllm, true);
        assert_eq!((v.count.fused_all_reduce, v.count.all_gather), (3, 1));
        let v = view(&d, &shape, Engine::Sglang, true);
        assert_eq!((v.count.all_reduce, v.count.fused_all_reduce), (3, 0));
    }

    #[test]
    fn compute_ops_have_no_engine_name() {
        let (s, shape) = kimi(Phase::Verify);
        let v = view(&s, &shape, Engine::Sglang, false);
        assert_eq!(v.ops.len(), s.ops.len());
        for (o, e) in s.ops.iter().zip(&v.ops) {
            assert_eq!(matches!(o, Op::Collective { .. }), e.is_some());
        }
    }
}
