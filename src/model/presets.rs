//! Built-in model shapes, from the published config.json of each model.

use super::shape::*;
use crate::error::usage;

/// Names accepted by `--model`.
pub(crate) const PRESETS: &[&str] = &[
    "kimi-k2.5",
    "deepseek-v3",
    "llama-3.1-70b",
    "qwen3-235b-a22b",
];

fn mla(heads: u64) -> Attention {
    Attention::Mla {
        heads,
        q_lora_rank: Some(1536),
        kv_lora_rank: 512,
        qk_nope_head_dim: 128,
        qk_rope_head_dim: 64,
        v_head_dim: 128,
    }
}

/// What the presets share, under the sizes each gives: every layer alike (no blocks), the
/// weights known from the formats, the embedding untied, nothing to warn of, no MTP module;
/// no dense layer, no MoE and bf16 throughout unless the preset says otherwise.
fn base(name: &str, model_type: &str) -> ModelShape {
    ModelShape {
        name: name.into(),
        layers: 0,
        hidden: 0,
        vocab: 0,
        first_dense: 0,
        intermediate: 0,
        moe: None,
        attention: Attention::gqa(0, 0, 0),
        precision: Precision::uniform(WeightFormat::Bf16),
        blocks: vec![],
        weights_known: true,
        tied_embeddings: false,
        warnings: vec![],
        read_as: None,
        model_type: Some(model_type.into()),
        mtp: None,
    }
}

/// The preset of that name, or a usage error listing the known ones.
pub fn preset(name: &str) -> anyhow::Result<ModelShape> {
    let shape = match name.to_ascii_lowercase().as_str() {
        // moonshotai/Kimi-K2.5: DeepSeek-V3 architecture; routed experts int4 (group 32),
        // attention, shared experts, dense MLP and lm_head bf16.
        "kimi-k2.5" | "kimi-k2" | "kimi-k2-thinking" => ModelShape {
            layers: 61,
            hidden: 7168,
            vocab: 163840,
            first_dense: 1,
            intermediate: 18432,
            moe: Some(Moe {
                routed_experts: 384,
                experts_per_token: 8,
                shared_experts: 1,
                moe_intermediate: 2048,
                shared_intermediate: None,
            }),
            attention: mla(64),
            precision: Precision {
                attention: WeightFormat::Bf16,
                dense_mlp: WeightFormat::Bf16,
                routed_experts: WeightFormat::Int4Group { group: 32 },
                shared_experts: WeightFormat::Bf16,
                lm_head: WeightFormat::Bf16,
            },
            // num_nextn_predict_layers 0: Kimi-K2.5 ships no MTP module
            ..base("kimi-k2.5", "kimi_k2")
        },
        // deepseek-ai/DeepSeek-V3: fp8 e4m3 with 128x128 block scales; lm_head bf16.
        "deepseek-v3" | "deepseek-r1" => ModelShape {
            layers: 61,
            hidden: 7168,
            vocab: 129280,
            first_dense: 3,
            intermediate: 18432,
            moe: Some(Moe {
                routed_experts: 256,
                experts_per_token: 8,
                shared_experts: 1,
                moe_intermediate: 2048,
                shared_intermediate: None,
            }),
            attention: mla(128),
            precision: Precision {
                lm_head: WeightFormat::Bf16,
                ..Precision::uniform(WeightFormat::Fp8Block { block: 128 })
            },
            // num_nextn_predict_layers 1: layer 61 in the same fp8 blocks, eh_proj bf16
            mtp: Some(Mtp {
                layers: 1,
                precision: Precision {
                    lm_head: WeightFormat::Bf16,
                    ..Precision::uniform(WeightFormat::Fp8Block { block: 128 })
                },
                eh_proj: WeightFormat::Bf16,
            }),
            ..base("deepseek-v3", "deepseek_v3")
        },
        "llama-3.1-70b" => ModelShape {
            layers: 80,
            hidden: 8192,
            vocab: 128256,
            first_dense: 80,
            intermediate: 28672,
            attention: Attention::gqa(64, 8, 128),
            ..base("llama-3.1-70b", "llama")
        },
        "qwen3-235b-a22b" => ModelShape {
            layers: 94,
            hidden: 4096,
            vocab: 151936,
            moe: Some(Moe {
                routed_experts: 128,
                experts_per_token: 8,
                shared_experts: 0,
                moe_intermediate: 1536,
                shared_intermediate: None,
            }),
            attention: Attention::gqa(64, 4, 128),
            ..base("qwen3-235b-a22b", "qwen3_moe")
        },
        _ => {
            return Err(usage(format!(
                "unknown model preset '{name}'; known presets: {} (or pass --model-config PATH to a config.json)",
                PRESETS.join(", ")
            )))
        }
    };
    Ok(shape)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_preset_resolves() {
        for p in PRESETS {
            assert_eq!(preset(p).unwrap().name, *p);
        }
    }

    #[test]
    fn unknown_preset_lists_known_ones() {
        let e = preset("gpt-5").unwrap_err().to_string();
        assert!(e.contains("gpt-5") && e.contains("kimi-k2.5") && e.contains("qwen3-235b-a22b"));
    }
}
