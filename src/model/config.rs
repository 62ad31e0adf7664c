//! Reads a Hugging Face `config.json` into a [`ModelShape`].
//!
//! Supported families: DeepSeek-V3 / Kimi-K2 (MLA + MoE; flat, or nested under `text_config`
//! as Kimi-K2.5 ships it), Llama (GQA, dense) and Qwen3-MoE (GQA + MoE). Storage precision comes
//! from `quantization_config`: fp8 with `weight_block_size`, or compressed-tensors with an int4
//! group scheme and an `ignore` list (modules kept in bf16).

use std::path::Path;

use regex::Regex;
use serde_json::{Map, Value};

use super::shape::*;
use crate::error::usage;

/// Parses the file at `path`. Every error names the file, and a missing key is named.
pub fn load(path: &Path) -> anyhow::Result<ModelShape> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        usage(format!(
            "cannot read model config '{}': {e}",
            path.display()
        ))
    })?;
    let json: Value = serde_json::from_str(&text).map_err(|e| {
        usage(format!(
            "model config '{}' is not valid JSON: {e}",
            path.display()
        ))
    })?;
    let name = path
        .parent()
        .and_then(|p| p.file_name())
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "config".into());
    from_json(&json, &name).map_err(|e| usage(format!("model config '{}': {e}", path.display())))
}

fn get_u64(obj: &Map<String, Value>, key: &str) -> Option<u64> {
    obj.get(key).and_then(Value::as_u64)
}

fn need_u64(obj: &Map<String, Value>, key: &str) -> Result<u64, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Err(format!("missing key '{key}'")),
        Some(v) => v
            .as_u64()
            .ok_or_else(|| format!("key '{key}' must be a non-negative integer, found {v}")),
    }
}

/// Builds the shape from parsed JSON. Errors are plain strings; [`load`] adds the file name.
pub fn from_json(root: &Value, name: &str) -> Result<ModelShape, String> {
    let root = root
        .as_object()
        .ok_or_else(|| "top level must be a JSON object".to_string())?;
    // Kimi-K2.5 nests the language model under text_config.
    let cfg = match root.get("text_config").and_then(Value::as_object) {
        Some(t) => t,
        None => root,
    };
    let layers = need_u64(cfg, "num_hidden_layers")?;
    let hidden = need_u64(cfg, "hidden_size")?;
    let vocab = need_u64(cfg, "vocab_size")?;
    let heads = need_u64(cfg, "num_attention_heads")?;

    let attention = if cfg.contains_key("kv_lora_rank") {
        Attention::Mla {
            heads,
            q_lora_rank: get_u64(cfg, "q_lora_rank"),
            kv_lora_rank: need_u64(cfg, "kv_lora_rank")?,
            qk_nope_head_dim: need_u64(cfg, "qk_nope_head_dim")?,
            qk_rope_head_dim: need_u64(cfg, "qk_rope_head_dim")?,
            v_head_dim: need_u64(cfg, "v_head_dim")?,
        }
    } else {
        if heads == 0 {
            return Err("key 'num_attention_heads' must be positive".into());
        }
        Attention::Gqa {
            heads,
            kv_heads: get_u64(cfg, "num_key_value_heads").unwrap_or(heads),
            head_dim: get_u64(cfg, "head_dim").unwrap_or(hidden / heads),
        }
    };

    let routed = get_u64(cfg, "n_routed_experts").or_else(|| get_u64(cfg, "num_experts"));
    let moe = match routed {
        Some(e) if e > 0 => Some(Moe {
            routed_experts: e,
            experts_per_token: need_u64(cfg, "num_experts_per_tok")?,
            shared_experts: get_u64(cfg, "n_shared_experts").unwrap_or(0),
            moe_intermediate: need_u64(cfg, "moe_intermediate_size")?,
        }),
        _ => None,
    };
    let first_dense = match moe {
        None => layers,
        Some(_) => get_u64(cfg, "first_k_dense_replace").unwrap_or(0),
    };
    let intermediate = if first_dense > 0 {
        need_u64(cfg, "intermediate_size")?
    } else {
        get_u64(cfg, "intermediate_size").unwrap_or(0)
    };

    let quant = cfg
        .get("quantization_config")
        .or_else(|| root.get("quantization_config"));
    let precision = match quant {
        None | Some(Value::Null) => Precision::uniform(WeightFormat::Bf16),
        Some(q) => precision_from_quant(q)?,
    };

    let model_type = cfg
        .get("model_type")
        .and_then(Value::as_str)
        .unwrap_or("model");
    Ok(ModelShape {
        name: format!("{name} ({model_type})"),
        layers,
        hidden,
        vocab,
        first_dense,
        intermediate,
        moe,
        attention,
        precision,
    })
}

/// Representative module names of each weight group, as DeepSeek-style checkpoints name them.
const GROUP_MODULES: [(&str, &str); 5] = [
    ("attention", "model.layers.1.self_attn.o_proj"),
    ("dense_mlp", "model.layers.0.mlp.down_proj"),
    ("routed_experts", "model.layers.1.mlp.experts.0.down_proj"),
    (
        "shared_experts",
        "model.layers.1.mlp.shared_experts.down_proj",
    ),
    ("lm_head", "lm_head"),
];

fn precision_from_quant(q: &Value) -> Result<Precision, String> {
    let q = q
        .as_object()
        .ok_or("quantization_config must be an object")?;
    let method = q
        .get("quant_method")
        .and_then(Value::as_str)
        .ok_or("quantization_config lacks key 'quant_method'")?;
    let (format, ignore) = match method {
        "fp8" => {
            let block = q
                .get("weight_block_size")
                .and_then(Value::as_array)
                .and_then(|a| a.first())
                .and_then(Value::as_u64)
                .ok_or("quantization_config (fp8) lacks key 'weight_block_size'")?;
            let mut ignore = string_list(q.get("modules_to_not_convert"));
            // fp8 checkpoints keep lm_head (and embeddings) in bf16.
            ignore.push("lm_head".into());
            (
                WeightFormat::Fp8Block {
                    block: block as u32,
                },
                ignore,
            )
        }
        "compressed-tensors" => {
            let groups = q
                .get("config_groups")
                .and_then(Value::as_object)
                .ok_or("quantization_config (compressed-tensors) lacks key 'config_groups'")?;
            let weights = groups
                .values()
                .find_map(|g| g.get("weights"))
                .and_then(Value::as_object)
                .ok_or("quantization_config.config_groups has no group with 'weights'")?;
            let bits = weights
                .get("num_bits")
                .and_then(Value::as_u64)
                .ok_or("quantization_config weights lack key 'num_bits'")?;
            let kind = weights.get("type").and_then(Value::as_str).unwrap_or("int");
            let format = match (bits, kind) {
                (4, "int") => WeightFormat::Int4Group {
                    group: weights
                        .get("group_size")
                        .and_then(Value::as_u64)
                        .ok_or("quantization_config weights lack key 'group_size'")?
                        as u32,
                },
                (8, "float") => {
                    let block = weights
                        .get("block_structure")
                        .and_then(Value::as_array)
                        .and_then(|a| a.first())
                        .and_then(Value::as_u64)
                        .unwrap_or(128);
                    WeightFormat::Fp8Block {
                        block: block as u32,
                    }
                }
                _ => {
                    return Err(format!(
                        "unsupported compressed-tensors scheme: {bits}-bit {kind} (supported: 4-bit int groups, 8-bit float blocks)"
                    ))
                }
            };
            (format, string_list(q.get("ignore")))
        }
        other => {
            return Err(format!(
                "unsupported quant_method '{other}' (supported: fp8, compressed-tensors)"
            ))
        }
    };
    let matchers = ignore
        .iter()
        .map(|p| IgnoreRule::new(p))
        .collect::<Result<Vec<_>, _>>()?;
    let pick = |module: &str| {
        let prefixed = format!("language_model.{module}");
        if matchers
            .iter()
            .any(|m| m.matches(module) || m.matches(&prefixed))
        {
            WeightFormat::Bf16
        } else {
            format
        }
    };
    let f: Vec<WeightFormat> = GROUP_MODULES.iter().map(|(_, m)| pick(m)).collect();
    Ok(Precision {
        attention: f[0],
        dense_mlp: f[1],
        routed_experts: f[2],
        shared_experts: f[3],
        lm_head: f[4],
    })
}

fn string_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// One entry of an `ignore` list: `re:PATTERN` (matched from the start of the module name, as
/// compressed-tensors does) or a module name (matched exactly or as a dotted suffix).
enum IgnoreRule {
    Regex(Regex),
    Name(String),
}

impl IgnoreRule {
    fn new(p: &str) -> Result<Self, String> {
        match p.strip_prefix("re:") {
            Some(pat) => Regex::new(&format!("^(?:{pat})"))
                .map(IgnoreRule::Regex)
                .map_err(|e| format!("ignore pattern '{p}' is not a valid regex: {e}")),
            None => Ok(IgnoreRule::Name(p.to_string())),
        }
    }

    fn matches(&self, module: &str) -> bool {
        match self {
            IgnoreRule::Regex(r) => r.is_match(module),
            IgnoreRule::Name(n) => module == n || module.ends_with(&format!(".{n}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn kimi_k25_config() -> Value {
        json!({
            "architectures": ["KimiK25ForConditionalGeneration"],
            "model_type": "kimi_k25",
            "text_config": {
                "model_type": "kimi_k2",
                "num_hidden_layers": 61, "hidden_size": 7168, "vocab_size": 163840,
                "num_attention_heads": 64, "q_lora_rank": 1536, "kv_lora_rank": 512,
                "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
                "first_k_dense_replace": 1, "intermediate_size": 18432,
                "n_routed_experts": 384, "num_experts_per_tok": 8, "n_shared_experts": 1,
                "moe_intermediate_size": 2048,
                "quantization_config": {
                    "quant_method": "compressed-tensors", "format": "pack-quantized",
                    "config_groups": {"group_0": {"targets": ["Linear"],
                        "weights": {"num_bits": 4, "type": "int", "group_size": 32, "symmetric": true, "strategy": "group"}}},
                    "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                               "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"]
                }
            }
        })
    }

    #[test]
    fn kimi_nested_text_config_matches_preset() {
        let s = from_json(&kimi_k25_config(), "kimi").unwrap();
        let p = crate::model::presets::preset("kimi-k2.5").unwrap();
        assert_eq!(s.precision, p.precision);
        assert_eq!(s.attention, p.attention);
        assert_eq!(s.moe, p.moe);
        assert_eq!(
            (s.layers, s.hidden, s.vocab, s.first_dense),
            (61, 7168, 163840, 1)
        );
    }

    #[test]
    fn deepseek_fp8_keeps_lm_head_bf16() {
        let c = json!({"model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168,
            "vocab_size": 129280, "num_attention_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512,
            "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
            "first_k_dense_replace": 3, "intermediate_size": 18432, "n_routed_experts": 256,
            "num_experts_per_tok": 8, "n_shared_experts": 1, "moe_intermediate_size": 2048,
            "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}});
        let s = from_json(&c, "dsv3").unwrap();
        assert_eq!(
            s.precision,
            crate::model::presets::preset("deepseek-v3")
                .unwrap()
                .precision
        );
    }

    #[test]
    fn llama_and_qwen3_moe() {
        let l = json!({"model_type": "llama", "num_hidden_layers": 80, "hidden_size": 8192,
            "vocab_size": 128256, "num_attention_heads": 64, "num_key_value_heads": 8,
            "intermediate_size": 28672, "torch_dtype": "bfloat16"});
        let s = from_json(&l, "l").unwrap();
        assert_eq!(s.moe, None);
        assert_eq!(s.dense_layers(), 80);
        assert_eq!(
            s.attention,
            Attention::Gqa {
                heads: 64,
                kv_heads: 8,
                head_dim: 128
            }
        );
        let q = json!({"model_type": "qwen3_moe", "num_hidden_layers": 94, "hidden_size": 4096,
            "vocab_size": 151936, "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128,
            "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 1536,
            "intermediate_size": 12288});
        let s = from_json(&q, "q").unwrap();
        let p = crate::model::presets::preset("qwen3-235b-a22b").unwrap();
        assert_eq!(
            (s.moe, s.attention, s.dense_layers()),
            (p.moe, p.attention, 0)
        );
    }

    #[test]
    fn missing_key_is_named() {
        let mut c = kimi_k25_config();
        c["text_config"]
            .as_object_mut()
            .unwrap()
            .remove("hidden_size");
        let e = from_json(&c, "k").unwrap_err();
        assert!(e.contains("hidden_size"), "{e}");
    }

    #[test]
    fn load_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.json");
        std::fs::write(&p, "{not json").unwrap();
        let e = load(&p).unwrap_err().to_string();
        assert!(
            e.contains("config.json") && e.contains("not valid JSON"),
            "{e}"
        );
        let e = load(&dir.path().join("absent.json"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("absent.json") && e.contains("cannot read"),
            "{e}"
        );
    }
}
