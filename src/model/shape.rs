//! The shape of a model as far as the verify step cares: layer counts, matrix sizes and the
//! precision each group of weights is stored in.

use serde::{Deserialize, Serialize};

/// How a group of weights is stored in the checkpoint. Decides the bytes a rank streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "format", rename_all = "snake_case")]
pub enum WeightFormat {
    /// 2 bytes per weight.
    Bf16,
    /// fp8 e4m3, 1 byte per weight, plus one fp32 scale per `block x block` tile.
    Fp8Block { block: u32 },
    /// int4 packed, half a byte per weight, plus one bf16 scale per `group` weights of a row.
    Int4Group { group: u32 },
}

impl WeightFormat {
    /// Bytes of a `rows x cols` matrix in this format, scales included.
    pub fn matrix_bytes(self, rows: u64, cols: u64) -> u64 {
        match self {
            WeightFormat::Bf16 => 2 * rows * cols,
            WeightFormat::Fp8Block { block } => {
                let b = block.max(1) as u64;
                rows * cols + 4 * rows.div_ceil(b) * cols.div_ceil(b)
            }
            WeightFormat::Int4Group { group } => {
                let g = group.max(1) as u64;
                (rows * cols).div_ceil(2) + 2 * rows * cols.div_ceil(g)
            }
        }
    }

    pub fn label(self) -> String {
        match self {
            WeightFormat::Bf16 => "bf16".into(),
            WeightFormat::Fp8Block { block } => format!("fp8 block {block}x{block}"),
            WeightFormat::Int4Group { group } => format!("int4 group {group}"),
        }
    }
}

/// Storage precision per group of weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Precision {
    pub attention: WeightFormat,
    pub dense_mlp: WeightFormat,
    pub routed_experts: WeightFormat,
    pub shared_experts: WeightFormat,
    pub lm_head: WeightFormat,
}

impl Precision {
    pub fn uniform(f: WeightFormat) -> Self {
        Precision {
            attention: f,
            dense_mlp: f,
            routed_experts: f,
            shared_experts: f,
            lm_head: f,
        }
    }
}

/// Attention flavour and its dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Attention {
    /// Multi-head latent attention (DeepSeek-V3, Kimi-K2.x).
    Mla {
        heads: u64,
        /// `None` when the model has a plain q_proj (DeepSeek-V2-Lite style).
        q_lora_rank: Option<u64>,
        kv_lora_rank: u64,
        qk_nope_head_dim: u64,
        qk_rope_head_dim: u64,
        v_head_dim: u64,
    },
    /// Grouped-query attention (Llama, Qwen3).
    Gqa {
        heads: u64,
        kv_heads: u64,
        head_dim: u64,
    },
}

impl Attention {
    pub fn heads(&self) -> u64 {
        match *self {
            Attention::Mla { heads, .. } | Attention::Gqa { heads, .. } => heads,
        }
    }
}

/// Mixture-of-experts dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Moe {
    pub routed_experts: u64,
    pub experts_per_token: u64,
    pub shared_experts: u64,
    pub moe_intermediate: u64,
}

/// Everything the schedule needs to know about a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelShape {
    pub name: String,
    pub layers: u64,
    pub hidden: u64,
    pub vocab: u64,
    /// Leading layers with a dense MLP (`first_k_dense_replace`); all layers when `moe` is None.
    pub first_dense: u64,
    /// Dense MLP intermediate size (0 when no layer is dense).
    pub intermediate: u64,
    pub moe: Option<Moe>,
    pub attention: Attention,
    pub precision: Precision,
}

impl ModelShape {
    /// Number of layers whose MLP is dense.
    pub fn dense_layers(&self) -> u64 {
        match self.moe {
            None => self.layers,
            Some(_) => self.first_dense.min(self.layers),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int4_group_32_is_4_5_bits_per_weight() {
        let b = WeightFormat::Int4Group { group: 32 }.matrix_bytes(7168, 2048);
        assert_eq!(b * 8, 7168 * 2048 * 9 / 2);
    }

    #[test]
    fn fp8_block_adds_one_fp32_scale_per_tile() {
        let b = WeightFormat::Fp8Block { block: 128 }.matrix_bytes(7168, 2048);
        assert_eq!(b, 7168 * 2048 + 4 * 56 * 16);
        // partial tiles round up
        let b = WeightFormat::Fp8Block { block: 128 }.matrix_bytes(129, 1);
        assert_eq!(b, 129 + 4 * 2);
    }
}
