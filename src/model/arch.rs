//! The table of architectures `--model-config` understands: which config keys give the expert
//! count, the experts per token, which layers are MoE, the shared experts, the intermediate
//! sizes and the mixer of every layer. Each entry names the engine file (or model card) whose
//! reading of the keys it follows; `docs/plan-configs.md` lists the same table for users.
//!
//! A `model_type` not in the table is still planned for its collectives (those depend on the
//! layers, hidden size, vocabulary and TP alone) with its weights marked unknown. Keys that look
//! like shape keys (sizes, counts, patterns, per-layer lists) and that no part of the reading
//! used are named in a warning, so that a guess never passes silently.

use std::cell::RefCell;
use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::shape::*;

/// How one architecture's keys map to the shape.
pub(crate) struct Arch {
    /// `model_type` values (of the language model's config) this entry reads.
    pub(crate) model_types: &'static [&'static str],
    /// The engine code or model card the reading follows.
    pub(crate) source: &'static str,
    /// Where the routed experts' intermediate size lives when `moe_intermediate_size` is absent:
    /// Mixtral, gpt-oss, Llama-4 and MiniMax put it in `intermediate_size`.
    pub(crate) expert_size_in_intermediate: bool,
    /// Llama-4: every MoE layer also runs one shared expert of the routed experts' size, and
    /// the dense layers use `intermediate_size_mlp`.
    pub(crate) llama4: bool,
    /// Gemma-4 (`enable_moe_block`): a dense MLP of `intermediate_size` runs beside the experts.
    pub(crate) parallel_dense: bool,
    /// The LM head shares the embedding unless the config says otherwise (Gemma).
    pub(crate) tied_by_default: bool,
}

const fn arch(model_types: &'static [&'static str], source: &'static str) -> Arch {
    Arch {
        model_types,
        source,
        expert_size_in_intermediate: false,
        llama4: false,
        parallel_dense: false,
        tied_by_default: false,
    }
}

/// The table. Order does not matter; a `model_type` appears once.
pub(crate) const ARCHS: &[Arch] = &[
    arch(
        &["deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32"],
        "vLLM model_executor/models/deepseek_v2.py; SGLang models/deepseek_v2.py",
    ),
    arch(
        &["glm_moe_dsa"],
        "vLLM model_executor/models/deepseek_v2.py and SGLang models/glm4_moe.py (GLM-5's GlmMoeDsaForCausalLM is a DeepseekV2ForCausalLM in both)",
    ),
    arch(
        &["deepseek_v4"],
        "vLLM model_executor/models/deepseek_v4.py and SGLang models/deepseek_v4.py (DeepseekV4Attention / MQALayer: fused wq_a+wkv replicated, wq_b and grouped wo_a column-parallel, wo_b row-parallel; DeepseekV4MoE on every layer)",
    ),
    arch(
        &["llama", "mistral", "qwen2", "qwen3", "granite", "phi3", "olmo2", "internlm3"],
        "HF transformers models/llama/modeling_llama.py (and the Qwen2/Qwen3 copies)",
    ),
    arch(
        &["qwen2_moe", "qwen3_moe", "qwen3_vl_moe_text"],
        "HF transformers models/qwen3_moe/modeling_qwen3_moe.py (decoder_sparse_step, mlp_only_layers)",
    ),
    arch(
        &["qwen3_next", "qwen3_5_moe_text", "qwen3_5_moe", "qwen3_5_text", "qwen3_5"],
        "HF transformers models/qwen3_next/modeling_qwen3_next.py; vLLM model_executor/models/qwen3_next.py, qwen3_5_moe.py",
    ),
    Arch {
        expert_size_in_intermediate: true,
        ..arch(
            &["mixtral"],
            "HF transformers models/mixtral/modeling_mixtral.py; vLLM model_executor/models/mixtral.py",
        )
    },
    Arch {
        expert_size_in_intermediate: true,
        ..arch(
            &["minimax_m2"],
            "vLLM model_executor/models/minimax_m2.py (num_local_experts, intermediate_size per expert)",
        )
    },
    Arch {
        expert_size_in_intermediate: true,
        ..arch(
            &["gpt_oss"],
            "HF transformers models/gpt_oss/modeling_gpt_oss.py; vLLM model_executor/models/gpt_oss.py",
        )
    },
    Arch {
        expert_size_in_intermediate: true,
        llama4: true,
        ..arch(
            &["llama4_text", "llama4"],
            "HF transformers models/llama4/modeling_llama4.py (interleave_moe_layer_step, moe_layers, shared_expert)",
        )
    },
    Arch {
        parallel_dense: true,
        tied_by_default: true,
        ..arch(
            &["gemma4_text", "gemma4"],
            "HF transformers models/gemma4 (num_experts, top_k_experts, enable_moe_block)",
        )
    },
    Arch {
        tied_by_default: true,
        ..arch(
            &["gemma2", "gemma3_text", "gemma3"],
            "HF transformers models/gemma3/modeling_gemma3.py",
        )
    },
    arch(
        &["glm4_moe", "glm4v_moe_text"],
        "vLLM model_executor/models/glm4_moe.py (first_k_dense_replace, n_shared_experts)",
    ),
    arch(
        &["mimo", "mimo_v2_flash", "mimo_v2"],
        "SGLang models/mimo_v2_flash.py (hybrid_layer_pattern, swa_* heads, moe_layer_freq list)",
    ),
    arch(
        &["nemotron_h"],
        "vLLM model_executor/models/nemotron_h.py; HF nvidia/Nemotron-H modeling_nemotron_h.py (hybrid_override_pattern)",
    ),
    arch(
        &["nemotron-nas", "deci", "deci_lm"],
        "vLLM model_executor/models/nemotron_nas.py (block_configs: n_heads_in_group, ffn_mult, no_op)",
    ),
];

/// The entry for `model_type`, if any.
pub(crate) fn find(model_type: &str) -> Option<&'static Arch> {
    ARCHS.iter().find(|a| a.model_types.contains(&model_type))
}

/// What a `model_type` the table lacks is read as: the keys every family of the table shares
/// (`n_routed_experts` / `num_local_experts` / `num_experts`, `num_experts_per_tok`,
/// `moe_intermediate_size`, `n_shared_experts`, `shared_expert_intermediate_size`,
/// `first_k_dense_replace`, `moe_layer_freq`, `decoder_sparse_step`, `mlp_only_layers`,
/// `layer_types`, MLA's `kv_lora_rank`, ...), read as the table's entries read them. The
/// routed experts' size is in `intermediate_size` when `moe_intermediate_size` is absent
/// (Mixtral's form). A guess: the caller warns and names the keys it rests on.
pub(crate) const GENERIC_SOURCE: &str =
    "the keys the table's families share (not in the table: a guess)";

pub(crate) fn generic(obj: &Map<String, Value>) -> Arch {
    Arch {
        expert_size_in_intermediate: !obj.contains_key("moe_intermediate_size"),
        ..arch(&[], GENERIC_SOURCE)
    }
}

/// The most a real model has of a dimension, and why: about eight times the largest
/// published one, so that the next model still passes while a value no model has (a layer
/// count of 10^12, a hidden size of 2^40: a typo, a corrupted file, a hostile one) is refused
/// before anything is sized by it. Keys are grouped by their name: the layer count, the hidden
/// size and the vocabulary on their own, then every `*intermediate*` size, every expert count,
/// every LoRA rank, every head count, every head or state dimension, and the rest of the
/// integers the reading uses (interval and frequency keys, group counts, kernel widths).
pub(crate) fn bound(key: &str) -> (u64, &'static str) {
    if key == "num_hidden_layers" {
        (1_024, "Llama-3.1-405B, among the deepest, has 126 layers")
    } else if key == "hidden_size" {
        (131_072, "Llama-3.1-405B, among the widest, has 16,384")
    } else if key == "vocab_size" {
        (
            4_194_304,
            "Gemma-3, among the largest vocabularies, has 262,144 tokens",
        )
    } else if key.contains("intermediate") {
        (
            1_048_576,
            "Llama-3.1-405B's MLP, among the widest, is 53,248",
        )
    } else if key.contains("experts") {
        (65_536, "Qwen3-Next, among the most, has 512 routed experts")
    } else if key.ends_with("lora_rank") {
        (131_072, "a LoRA rank is below the hidden size")
    } else if key.ends_with("heads") || key.contains("heads_") {
        (4_096, "Llama-3.1-405B has 128 attention heads")
    } else if key.ends_with("_dim") || key.contains("state_size") {
        (
            16_384,
            "the widest heads published (DeepSeek-V4, Gemma) are 512",
        )
    } else {
        (
            1_048_576,
            "no dimension of a published model but its vocabulary reaches this",
        )
    }
}

/// `key`'s value checked against [`bound`]; the error says what the value is and what a
/// model has.
pub(crate) fn check_bound(key: &str, v: u64) -> Result<(), String> {
    let (max, why) = bound(key);
    if v > max {
        return Err(format!(
            "key '{key}' is {v}, more than a real model has (at most {max}: {why}); give the model's own config.json"
        ));
    }
    Ok(())
}

/// Keys that decide nothing about the weights a verify forward streams: positions, norms,
/// routing numerics, dropout, training knobs, token ids, MTP heads (not part of the target's
/// forward).
const IRRELEVANT: &[&str] = &[
    "max_position_embeddings",
    "original_max_position_embeddings",
    "sliding_window",
    "sliding_window_size",
    "sliding_window_pattern",
    "attention_chunk_size",
    "max_window_layers",
    "partial_rotary_factor",
    "rotary_dim",
    "rope_theta",
    "swa_rope_theta",
    "compress_rope_theta",
    "rope_scaling",
    "rope_parameters",
    "initial_context_length",
    "num_logits_to_keep",
    "num_nextn_predict_layers",
    "n_group",
    "topk_group",
    "routed_scaling_factor",
    "chunk_size",
    "time_step_rank",
    "time_step_limit",
    "ep_size",
    "pretraining_tp",
    "moe_router_topk_scaling_factor",
    "aux_loss_alpha",
    "num_experts_per_tok_for_shared",
    "no_rope_layers",
    "nope_layer_interval",
    "attention_value_scale",
    "final_logit_softcapping",
    "attn_logit_softcapping",
    "query_pre_attn_scalar",
    "linear_conv_kernel_dim",
    "norm_topk_prob",
    "index_topk",
    "index_n_heads",
    "index_head_dim",
    "index_top_k",
    "initializer_range",
    "hidden_dropout",
    "attention_dropout",
    "expand",
    "mamba_chunk_size",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "swiglu_limit",
    "mtp_transformer_layers",
    "num_mtp_modules",
    "time_step_min",
    "time_step_max",
    "time_step_floor",
    // a draft model's own keys, read by `--draft-config` (config::load_draft)
    "draft_vocab_size",
    "target_hidden_size",
    "eagle_aux_hidden_state_layer_ids",
    "block_size",
];

/// Does `key` look like it sets a shape (a size, a count, a per-layer list)?
fn shape_like(key: &str, v: &Value) -> bool {
    if key.ends_with("token_id") || key.ends_with("token_ids") || key.ends_with("_eps") {
        return false;
    }
    // floats are scales and epsilons; sizes, counts and per-layer lists are integers or lists
    let numeric = v.is_u64() || v.is_array() || v.is_object();
    let words = [
        "size", "dim", "num_", "layer", "expert", "head", "ratio", "mult", "pattern", "freq",
        "step", "rank", "group", "kernel", "state", "interval", "topk", "top_k", "block",
        "compress", "hc_", "types",
    ];
    numeric && (key.starts_with("n_") || words.iter().any(|w| key.contains(w)))
}

/// A config object whose reads are recorded, so the keys nobody read can be named.
pub(crate) struct Cfg<'a> {
    pub(crate) obj: &'a Map<String, Value>,
    read: RefCell<BTreeSet<String>>,
}

impl<'a> Cfg<'a> {
    pub(crate) fn new(obj: &'a Map<String, Value>) -> Self {
        Cfg {
            obj,
            read: RefCell::new(BTreeSet::new()),
        }
    }

    pub(crate) fn get(&self, key: &str) -> Option<&'a Value> {
        self.read.borrow_mut().insert(key.to_string());
        self.obj.get(key).filter(|v| !v.is_null())
    }

    pub(crate) fn u64(&self, key: &str) -> Option<u64> {
        self.get(key).and_then(Value::as_u64)
    }

    /// The first of `keys` present (all of them count as read: they say the same thing).
    pub(crate) fn first_u64(&self, keys: &[&str]) -> Option<u64> {
        let all: Vec<Option<u64>> = keys.iter().map(|k| self.u64(k)).collect();
        all.into_iter().flatten().next()
    }

    pub(crate) fn need(&self, key: &str) -> Result<u64, String> {
        match self.get(key) {
            None => Err(format!("missing key '{key}'")),
            Some(v) => v
                .as_u64()
                .ok_or_else(|| format!("key '{key}' must be a non-negative integer, found {v}")),
        }
    }

    pub(crate) fn bool(&self, key: &str) -> Option<bool> {
        self.get(key).and_then(Value::as_bool)
    }

    pub(crate) fn str(&self, key: &str) -> Option<&'a str> {
        self.get(key).and_then(Value::as_str)
    }

    pub(crate) fn u64_list(&self, key: &str) -> Option<Vec<u64>> {
        self.get(key)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
    }

    pub(crate) fn str_list(&self, key: &str) -> Option<Vec<&'a str>> {
        self.get(key)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
    }

    /// Every integer the reading used, checked against [`bound`].
    pub(crate) fn check_bounds(&self) -> Result<(), String> {
        let read = self.read.borrow();
        for (k, v) in self.obj {
            if let (true, Some(n)) = (read.contains(k.as_str()), v.as_u64()) {
                check_bound(k, n)?;
            }
        }
        Ok(())
    }

    /// The keys that were read and are present, in the config's order: what a reading rests on.
    pub(crate) fn keys_used(&self) -> Vec<String> {
        let read = self.read.borrow();
        self.obj
            .iter()
            .filter(|(k, v)| read.contains(k.as_str()) && !v.is_null())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Shape-like keys that were not read and are not known to be irrelevant.
    pub(crate) fn not_understood(&self) -> Vec<String> {
        let read = self.read.borrow();
        self.obj
            .iter()
            .filter(|(k, v)| {
                !read.contains(k.as_str())
                    && !IRRELEVANT.contains(&k.as_str())
                    && !k.starts_with('_')
                    && shape_like(k, v)
            })
            .map(|(k, _)| k.clone())
            .collect()
    }
}

/// What the table made of one config: the per-layer blocks and the uniform fields.
pub(crate) struct Read {
    pub(crate) blocks: Vec<Block>,
    pub(crate) attention: Attention,
    pub(crate) intermediate: u64,
    pub(crate) moe: Option<Moe>,
    pub(crate) first_dense: u64,
    pub(crate) tied: bool,
    pub(crate) notes: Vec<String>,
}

/// Reads the layers of `c` as `a` says. Errors name the key at fault.
pub(crate) fn read(a: &Arch, c: &Cfg, layers: u64, hidden: u64) -> Result<Read, String> {
    let mut notes = Vec::new();
    let (full, heads, head_dim) = attention(c, hidden, &mut notes)?;
    let moe = experts(a, c)?;
    let dense_key = if a.llama4 {
        "intermediate_size_mlp"
    } else {
        "intermediate_size"
    };
    // read now so that it counts as understood even when every layer is MoE
    let dense_size = c.u64(dense_key);
    let is_moe = moe_layers(a, c, layers, moe.is_some())?;
    let first_dense = is_moe.iter().take_while(|m| !**m).count() as u64;
    let any_dense = is_moe.iter().any(|m| !m);
    let intermediate = match dense_size {
        Some(i) => i,
        None if any_dense && !c.family_is("nemotron-nas") => {
            return Err(format!("missing key '{dense_key}'"))
        }
        None => 0,
    };

    // ---- mixers, per layer
    let mixers = mixers(c, layers, full, &mut notes)?;
    let mut blocks: Vec<Block> = Vec::with_capacity(layers as usize);
    let parallel_dense = a.parallel_dense && c.bool("enable_moe_block").unwrap_or(moe.is_some());
    for l in 0..layers as usize {
        let ffn = match (moe, is_moe[l]) {
            (Some(moe), true) => Ffn::Moe {
                moe,
                dense_intermediate: if parallel_dense { intermediate } else { 0 },
            },
            _ => Ffn::Dense {
                intermediate,
                gated: true,
            },
        };
        blocks.push(Block {
            mixer: Some(mixers[l]),
            ffn: Some(ffn),
        });
    }
    if c.family_is("nemotron_h") {
        blocks = nemotron_h(c, layers, full, intermediate)?;
    }
    if let Some(bc) = c.get("block_configs") {
        blocks = block_configs(bc, heads, head_dim, hidden)?;
    }
    if c.u64("index_topk").is_some() || c.u64("index_top_k").is_some() {
        notes.push(
            "sparse-attention indexer (index_*) weights are not counted (about 0.1% of the model)"
                .into(),
        );
    }
    if let Some(n) = c.u64("num_kv_shared_layers").filter(|n| *n > 0) {
        notes.push(format!(
            "num_kv_shared_layers {n}: those layers' K/V projections are counted although they reuse another layer's"
        ));
    }
    let tied = c.bool("tie_word_embeddings").unwrap_or(a.tied_by_default);
    Ok(Read {
        blocks,
        attention: full,
        intermediate,
        moe,
        first_dense,
        tied,
        notes,
    })
}

/// The attention of `c`'s full layers (GQA, MLA or DeepSeek-V4's latent MQA), with its head
/// count and head size.
fn attention(
    c: &Cfg,
    hidden: u64,
    notes: &mut Vec<String>,
) -> Result<(Attention, u64, u64), String> {
    let heads = c.need("num_attention_heads")?;
    if heads == 0 {
        return Err("key 'num_attention_heads' must be positive".into());
    }
    let head_dim = c
        .first_u64(&["head_dim", "attention_head_dim"])
        .unwrap_or(hidden / heads);
    let kv_heads = c.u64("num_key_value_heads").unwrap_or(heads);
    let gated_q = c.family_is("qwen3_next") || c.bool("attn_output_gate").unwrap_or(false);
    let full = if !c.obj.contains_key("kv_lora_rank") && c.obj.contains_key("o_lora_rank") {
        // DeepSeek-V4 (vLLM deepseek_v4.py DeepseekV4Attention)
        let groups = c.u64("o_groups").unwrap_or(1);
        if groups == 0 {
            return Err("key 'o_groups' must be positive".into());
        }
        // read: what they shape is named in the note, not guessed away silently
        for k in [
            "compress_ratios",
            "hc_mult",
            "hc_sinkhorn_iters",
            "num_hash_layers",
            "qk_rope_head_dim",
        ] {
            c.get(k);
        }
        notes.push(
            "DeepSeek-V4 attention: the compressor and indexer of the compressed-attention layers (compress_ratios) and the hyper-connection mixers (hc_mult) are not counted; the first num_hash_layers MoE layers route by a token-id table and are counted like the others".into(),
        );
        Attention::LatentMqa {
            heads,
            head_dim: c.need("head_dim")?,
            q_lora_rank: c.need("q_lora_rank")?,
            o_lora_rank: c.need("o_lora_rank")?,
            o_groups: groups,
        }
    } else if c.obj.contains_key("kv_lora_rank") {
        // GLM-5 also states qk_nope + qk_rope as qk_head_dim: read, it shapes nothing new
        c.get("qk_head_dim");
        Attention::Mla {
            heads,
            q_lora_rank: c.u64("q_lora_rank"),
            kv_lora_rank: c.need("kv_lora_rank")?,
            qk_nope_head_dim: c.need("qk_nope_head_dim")?,
            qk_rope_head_dim: c.need("qk_rope_head_dim")?,
            v_head_dim: c.need("v_head_dim")?,
        }
    } else {
        Attention::Gqa {
            heads,
            kv_heads,
            head_dim,
            v_head_dim: c.u64("v_head_dim").filter(|v| *v != head_dim),
            gated_q,
        }
    };
    Ok((full, heads, head_dim))
}

/// The routed expert count of `c`: the first of its keys present, each present one a whole
/// number of at least 1 (a key of 0, a negative or fractional count is an error naming it:
/// a dense model leaves the key out, or null); `None` without any.
pub(crate) fn routed_experts(c: &Cfg) -> Result<Option<u64>, String> {
    let mut experts = None;
    for k in [
        "n_routed_experts",
        "num_local_experts",
        "num_experts",
        "moe_num_experts",
    ] {
        let Some(v) = c.get(k) else {
            continue;
        };
        match v.as_u64() {
            Some(e) if e >= 1 => experts = experts.or(Some(e)),
            _ => {
                return Err(format!(
                    "key '{k}' is {v}: a MoE config has a whole number of routed experts, at least 1 (a dense model leaves the key out, or null)"
                ))
            }
        }
    }
    Ok(experts)
}

/// The routed (and shared) experts of `c`, if it has any.
fn experts(a: &Arch, c: &Cfg) -> Result<Option<Moe>, String> {
    let experts = routed_experts(c)?;
    let moe = match experts {
        None => None,
        Some(e) => {
            let k = c
                .first_u64(&["num_experts_per_tok", "top_k_experts", "moe_topk", "experts_per_token"])
                .ok_or("MoE config (expert count given) lacks the experts per token: none of 'num_experts_per_tok', 'top_k_experts', 'moe_topk', 'experts_per_token'")?;
            if k == 0 || k > e {
                return Err(format!(
                    "{k} experts per token of {e} routed experts: give 1 to {e}"
                ));
            }
            let inter = match c.u64("moe_intermediate_size") {
                Some(i) => i,
                None if a.expert_size_in_intermediate => c.need("intermediate_size")?,
                None => return Err("missing key 'moe_intermediate_size'".into()),
            };
            let shared_size = c
                .first_u64(&[
                    "shared_expert_intermediate_size",
                    "shared_intermediate_size",
                ])
                .filter(|s| *s > 0);
            let (shared, shared_intermediate) = if a.llama4 {
                (1, None)
            } else if let Some(s) = shared_size {
                // Qwen2-MoE / Qwen3-Next: one shared expert of that size (with a sigmoid gate)
                (1, Some(s).filter(|s| *s != inter))
            } else {
                (
                    c.first_u64(&[
                        "n_shared_experts",
                        "num_shared_experts",
                        "moe_num_shared_experts",
                    ])
                    .unwrap_or(0),
                    None,
                )
            };
            Some(Moe {
                routed_experts: e,
                experts_per_token: k,
                shared_experts: shared,
                moe_intermediate: inter,
                shared_intermediate,
            })
        }
    };
    Ok(moe)
}

impl Cfg<'_> {
    /// Whether the config's `model_type` is one the table's entry of `member` reads (the
    /// family named by one of its types, its list kept in the table alone).
    fn family_is(&self, member: &str) -> bool {
        let family = find(member).expect("a type of the table").model_types;
        self.obj
            .get("model_type")
            .and_then(Value::as_str)
            .is_some_and(|t| family.contains(&t))
    }
}

/// Which layers run the experts, by the keys each family uses.
fn moe_layers(a: &Arch, c: &Cfg, layers: u64, has_moe: bool) -> Result<Vec<bool>, String> {
    let n = layers as usize;
    if !has_moe {
        return Ok(vec![false; n]);
    }
    // MiMo-V2-Flash: a list, 1 = MoE (SGLang mimo_v2_flash.py); DeepSeek-V2: an int, with
    // first_k_dense_replace (vLLM deepseek_v2.py: l >= k and l % freq == 0)
    let freq = c.get("moe_layer_freq");
    let mut v: Vec<bool> = match freq.and_then(Value::as_array) {
        Some(list) => {
            if list.len() != n {
                return Err(format!(
                    "moe_layer_freq lists {} layers but num_hidden_layers is {layers}",
                    list.len()
                ));
            }
            list.iter()
                .map(|x| x.as_u64().unwrap_or(0) == 1 || x.as_bool() == Some(true))
                .collect()
        }
        None => {
            let f = freq.and_then(Value::as_u64).unwrap_or(1).max(1) as usize;
            let k = c.u64("first_k_dense_replace").unwrap_or(0) as usize;
            (0..n).map(|l| l >= k && l % f == 0).collect()
        }
    };
    // Llama-4: an explicit moe_layers list, else every interleave_moe_layer_step-th layer
    // (HF configuration_llama4.py: range(step - 1, layers, step))
    if let Some(list) = c.u64_list("moe_layers") {
        v = (0..n).map(|l| list.contains(&(l as u64))).collect();
    } else if let Some(step) = c.u64("interleave_moe_layer_step").filter(|s| *s > 0) {
        let s = step as usize;
        v = (0..n).map(|l| v[l] && (l + 1) % s == 0).collect();
    } else if a.llama4 {
        // the HF default step is 1: every layer
    }
    // Qwen2/3-MoE: (l + 1) % decoder_sparse_step == 0 and l not in mlp_only_layers
    if let Some(step) = c.u64("decoder_sparse_step").filter(|s| *s > 0) {
        let s = step as usize;
        v = (0..n).map(|l| v[l] && (l + 1) % s == 0).collect();
    }
    if let Some(only) = c.u64_list("mlp_only_layers") {
        for l in only {
            if let Some(x) = v.get_mut(l as usize) {
                *x = false;
            }
        }
    }
    Ok(v)
}

/// The mixer of every layer: `layer_types` (full / sliding / linear), Qwen3-Next's
/// `full_attention_interval`, MiMo's `hybrid_layer_pattern`, Gemma-4's global heads.
fn mixers(
    c: &Cfg,
    layers: u64,
    full: Attention,
    notes: &mut Vec<String>,
) -> Result<Vec<Mixer>, String> {
    let n = layers as usize;
    let gdn = || -> Result<Mixer, String> {
        Ok(Mixer::GatedDeltaNet {
            key_heads: c.need("linear_num_key_heads")?,
            value_heads: c.need("linear_num_value_heads")?,
            key_head_dim: c.need("linear_key_head_dim")?,
            value_head_dim: c.need("linear_value_head_dim")?,
            conv_kernel: c.u64("linear_conv_kernel_dim").unwrap_or(4),
        })
    };
    // sliding-window layers with their own head counts (MiMo-V2-Flash swa_*)
    let swa = match full {
        Attention::Gqa {
            heads,
            kv_heads,
            head_dim,
            v_head_dim,
            gated_q,
        } => {
            let hd = c.u64("swa_head_dim").unwrap_or(head_dim);
            Attention::Gqa {
                heads: c.u64("swa_num_attention_heads").unwrap_or(heads),
                kv_heads: c.u64("swa_num_key_value_heads").unwrap_or(kv_heads),
                head_dim: hd,
                v_head_dim: c.u64("swa_v_head_dim").or(v_head_dim).filter(|v| *v != hd),
                gated_q,
            }
        }
        mla => mla,
    };
    // Gemma-4: full-attention layers have their own KV heads and head size
    let global = match full {
        Attention::Gqa {
            heads,
            kv_heads,
            head_dim,
            v_head_dim,
            gated_q,
        } => Attention::Gqa {
            heads,
            kv_heads: c.u64("num_global_key_value_heads").unwrap_or(kv_heads),
            head_dim: c.u64("global_head_dim").unwrap_or(head_dim),
            v_head_dim,
            gated_q,
        },
        mla => mla,
    };
    if c.bool("attention_k_eq_v") == Some(true) {
        notes.push("attention_k_eq_v: K and V are counted as two projections".into());
    }
    if let Some(types) = c.str_list("layer_types") {
        if types.len() != n {
            return Err(format!(
                "layer_types lists {} layers but num_hidden_layers is {layers}",
                types.len()
            ));
        }
        return types
            .iter()
            .map(|t| match *t {
                "linear_attention" => gdn(),
                "sliding_attention" | "chunked_attention" => Ok(Mixer::Attention(swa)),
                "full_attention" | "attention" => Ok(Mixer::Attention(global)),
                other => Err(format!("layer_types entry '{other}' is not understood")),
            })
            .collect();
    }
    if let Some(i) = c.u64("full_attention_interval").filter(|i| *i > 0) {
        // Qwen3-Next: layer l is full attention when (l + 1) % interval == 0, else linear
        return (0..n)
            .map(|l| {
                if (l as u64 + 1) % i == 0 {
                    Ok(Mixer::Attention(full))
                } else {
                    gdn()
                }
            })
            .collect();
    }
    if let Some(p) = c.u64_list("hybrid_layer_pattern") {
        // MiMo-V2-Flash: 1 = sliding window (swa_* heads), 0 = full
        if p.len() != n {
            return Err(format!(
                "hybrid_layer_pattern lists {} layers but num_hidden_layers is {layers}",
                p.len()
            ));
        }
        return Ok(p
            .iter()
            .map(|x| Mixer::Attention(if *x == 1 { swa } else { full }))
            .collect());
    }
    if let Some(t) = c.u64_list("attn_type_list") {
        if t.iter().any(|x| *x != 1) {
            return Err("attn_type_list holds lightning (linear) attention layers, which are not in the table".into());
        }
    }
    Ok(vec![Mixer::Attention(full); n])
}

/// Nemotron-H: one character per layer of `hybrid_override_pattern`, `M` Mamba-2, `*`
/// attention, `-` MLP (relu2, no gate); each block holds one mixer and one all-reduce
/// (vLLM nemotron_h.py NemotronHMambaDecoderLayer / AttentionDecoderLayer / MLPDecoderLayer).
fn nemotron_h(c: &Cfg, layers: u64, att: Attention, inter: u64) -> Result<Vec<Block>, String> {
    let p = c
        .str("hybrid_override_pattern")
        .ok_or("missing key 'hybrid_override_pattern'")?;
    if p.chars().count() != layers as usize {
        return Err(format!(
            "hybrid_override_pattern has {} layers but num_hidden_layers is {layers}",
            p.chars().count()
        ));
    }
    let mamba = Mixer::Mamba2 {
        heads: c.need("mamba_num_heads")?,
        head_dim: c.need("mamba_head_dim")?,
        groups: c.u64("n_groups").unwrap_or(1),
        state: c.need("ssm_state_size")?,
        conv_kernel: c.u64("conv_kernel").unwrap_or(4),
    };
    p.chars()
        .map(|ch| match ch {
            'M' => Ok(Block {
                mixer: Some(mamba),
                ffn: None,
            }),
            '*' => Ok(Block {
                mixer: Some(Mixer::Attention(att)),
                ffn: None,
            }),
            '-' => Ok(Block {
                mixer: None,
                ffn: Some(Ffn::Dense {
                    intermediate: inter,
                    gated: false,
                }),
            }),
            other => Err(format!(
                "hybrid_override_pattern character '{other}' is not understood (known: M, *, -)"
            )),
        })
        .collect()
}

/// DeciLM / Nemotron-NAS: each layer's attention (`n_heads_in_group` = query heads per KV
/// head, `no_op`, `replace_with_linear`) and FFN (`ffn_mult`, `no_op`, `replace_with_linear`).
/// The FFN size follows vLLM nemotron_nas.py `_ffn_mult_to_intermediate_size`:
/// `int(2 * ffn_mult * hidden / 3)` rounded up to a multiple of 256.
fn block_configs(v: &Value, heads: u64, head_dim: u64, hidden: u64) -> Result<Vec<Block>, String> {
    let list = v.as_array().ok_or("block_configs must be a list")?;
    check_bound("num_hidden_layers", list.len() as u64)
        .map_err(|e| format!("block_configs lists {} layers: {e}", list.len()))?;
    list.iter()
        .enumerate()
        .map(|(i, b)| {
            let att = &b["attention"];
            let ffn = &b["ffn"];
            let yes = |v: &Value, k: &str| v.get(k).and_then(Value::as_bool).unwrap_or(false);
            let mixer = if yes(att, "no_op") {
                None
            } else if yes(att, "replace_with_linear") {
                Some(Mixer::Linear)
            } else {
                let g = att
                    .get("n_heads_in_group")
                    .and_then(Value::as_u64)
                    .filter(|g| *g > 0)
                    .ok_or(format!(
                        "block_configs[{i}].attention lacks 'n_heads_in_group'"
                    ))?;
                Some(Mixer::Attention(Attention::gqa(heads, heads / g, head_dim)))
            };
            let ffn = if yes(ffn, "no_op") {
                None
            } else if yes(ffn, "replace_with_linear") {
                Some(Ffn::Linear)
            } else {
                let m = ffn
                    .get("ffn_mult")
                    .and_then(Value::as_f64)
                    .ok_or(format!("block_configs[{i}].ffn lacks 'ffn_mult'"))?;
                let size = (2.0 * m * hidden as f64 / 3.0) as u64;
                if m.is_nan() || m <= 0.0 || check_bound("intermediate_size", size).is_err() {
                    return Err(format!(
                        "block_configs[{i}].ffn.ffn_mult {m} gives an MLP no model has (at most {} wide)",
                        bound("intermediate_size").0
                    ));
                }
                Some(Ffn::Dense {
                    intermediate: size.div_ceil(256) * 256,
                    gated: true,
                })
            };
            Ok(Block { mixer, ffn })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_model_type_appears_once() {
        let mut seen = BTreeSet::new();
        for a in ARCHS {
            for t in a.model_types {
                assert!(seen.insert(*t), "{t} twice");
            }
            assert!(!a.source.is_empty());
        }
    }

    #[test]
    fn ffn_mult_rounds_up_to_256() {
        // 2 * 5.25 * 8192 / 3 = 28672 exactly; 2 * 2.625 * 8192 / 3 = 14336;
        // 2 * 3.28125 * 8192 / 3 = 17920; 2 * 1.3125 * 8192 / 3 = 7168; 0.5 -> 2730.67 -> 2816
        let v = serde_json::json!([
            {"attention": {"n_heads_in_group": 8}, "ffn": {"ffn_mult": 5.25}},
            {"attention": {"no_op": true}, "ffn": {"ffn_mult": 0.5}},
            {"attention": {"replace_with_linear": true}, "ffn": {"no_op": true}}
        ]);
        let b = block_configs(&v, 64, 128, 8192).unwrap();
        assert_eq!(
            b[0].ffn,
            Some(Ffn::Dense {
                intermediate: 28672,
                gated: true
            })
        );
        assert_eq!(
            b[0].mixer,
            Some(Mixer::Attention(Attention::gqa(64, 8, 128)))
        );
        assert_eq!(b[1].mixer, None);
        assert_eq!(
            b[1].ffn,
            Some(Ffn::Dense {
                intermediate: 2816,
                gated: true
            })
        );
        assert_eq!((b[2].mixer, b[2].ffn), (Some(Mixer::Linear), None));
    }

    #[test]
    fn shape_like_keys() {
        use serde_json::json;
        assert!(shape_like("hc_mult", &json!(4)));
        assert!(shape_like("compress_ratios", &json!([1, 4])));
        assert!(!shape_like("bos_token_id", &json!(1)));
        assert!(!shape_like("hidden_act", &json!("silu")));
        assert!(!shape_like("rms_norm_eps", &json!(1e-5)));
    }
}
