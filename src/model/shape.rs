//! The shape of a model as far as the verify step cares: layer counts, matrix sizes and the
//! precision each group of weights is stored in.

use serde::{Deserialize, Serialize};

/// How a group of weights is stored in the checkpoint. Decides the bytes a rank streams.
/// `matrix_bytes(rows, cols)` takes the output dimension first and the input dimension second
/// (a `Linear(cols -> rows)`): group and block scales run along the input dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "format", rename_all = "snake_case")]
pub(crate) enum WeightFormat {
    /// 2 bytes per weight (bf16 or fp16).
    Bf16,
    /// fp8 e4m3, 1 byte per weight, plus one fp32 scale per `block x block` tile
    /// (DeepSeek-V3 `weight_block_size`).
    Fp8Block { block: u32 },
    /// int4 packed, half a byte per weight, plus one bf16 scale per `group` weights of a row
    /// (compressed-tensors `pack-quantized`, symmetric).
    Int4Group { group: u32 },
    /// 8-bit weights (fp8 e4m3 or int8), 1 byte per weight, plus one fp32 scale per output row
    /// (compressed-tensors `strategy: channel`; per-tensor scales are counted the same way,
    /// a few bytes too many).
    Int8Channel,
    /// int4 with one fp16 scale and one packed 4-bit zero point per `group` weights of a row
    /// (AWQ, GPTQ).
    Int4GroupZero { group: u32 },
    /// OCP MXFP4: e2m1 4-bit weights, one e8m0 (1 byte) scale per 32 weights of a row
    /// (gpt-oss, `quant_method: mxfp4`): 4.25 bits per weight.
    Mxfp4,
    /// NVFP4: e2m1 4-bit weights, one fp8 e4m3 scale per 16 weights of a row and one fp32
    /// global scale per matrix (ModelOpt `NVFP4`, compressed-tensors `nvfp4-pack-quantized`):
    /// 4.5 bits per weight.
    Nvfp4,
}

impl WeightFormat {
    /// Bytes of a `rows x cols` matrix in this format, scales included.
    pub(crate) fn matrix_bytes(self, rows: u64, cols: u64) -> u64 {
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
            WeightFormat::Int8Channel => rows * cols + 4 * rows,
            WeightFormat::Int4GroupZero { group } => {
                let g = group.max(1) as u64;
                let groups = rows * cols.div_ceil(g);
                (rows * cols).div_ceil(2) + 2 * groups + groups.div_ceil(2)
            }
            WeightFormat::Mxfp4 => (rows * cols).div_ceil(2) + rows * cols.div_ceil(32),
            WeightFormat::Nvfp4 => (rows * cols).div_ceil(2) + rows * cols.div_ceil(16) + 4,
        }
    }

    /// The short name `plan` prints and records carry, and `--weights` takes back:
    /// `bf16`, `fp8-block128`, `int4-g32`, `int4-g128-zp`, `8bit-channel`, `mxfp4`, `nvfp4`.
    pub(crate) fn label(self) -> String {
        match self {
            WeightFormat::Bf16 => "bf16".into(),
            WeightFormat::Fp8Block { block } => format!("fp8-block{block}"),
            WeightFormat::Int4Group { group } => format!("int4-g{group}"),
            WeightFormat::Int8Channel => "8bit-channel".into(),
            WeightFormat::Int4GroupZero { group } => format!("int4-g{group}-zp"),
            WeightFormat::Mxfp4 => "mxfp4".into(),
            WeightFormat::Nvfp4 => "nvfp4".into(),
        }
    }

    /// Bits per weight, scales included, of a 4096 x 4096 matrix (what a large layer pays).
    pub(crate) fn bits_per_weight(self) -> f64 {
        let n = 4096u64;
        self.matrix_bytes(n, n) as f64 * 8.0 / (n * n) as f64
    }
}

/// The formats `--weights` and `--expert-weights` take (and every [`WeightFormat::label`]):
/// `bf16`; `fp8` (e4m3 with 128 x 128 block scales, DeepSeek-V3's); `int8` (8-bit weights with
/// one scale per row); `int4` (group 32, bf16 scales, Kimi-K2's compressed-tensors); `int4-gN`,
/// `int4-gN-zp` (AWQ/GPTQ with zero points); `nvfp4`; `mxfp4`.
impl std::str::FromStr for WeightFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim().to_ascii_lowercase();
        let num = |rest: &str| rest.parse::<u32>().ok().filter(|n| (1..=4096).contains(n));
        let f = match t.as_str() {
            "bf16" | "bfloat16" | "fp16" | "f16" => Some(WeightFormat::Bf16),
            "fp8" => Some(WeightFormat::Fp8Block { block: 128 }),
            "int8" | "8bit-channel" | "fp8-channel" => Some(WeightFormat::Int8Channel),
            "int4" => Some(WeightFormat::Int4Group { group: 32 }),
            "nvfp4" => Some(WeightFormat::Nvfp4),
            "mxfp4" => Some(WeightFormat::Mxfp4),
            _ => None,
        };
        let f = f.or_else(|| {
            if let Some(b) = t.strip_prefix("fp8-block") {
                return num(b).map(|block| WeightFormat::Fp8Block { block });
            }
            let g = t.strip_prefix("int4-g")?;
            match g.strip_suffix("-zp") {
                Some(z) => num(z).map(|group| WeightFormat::Int4GroupZero { group }),
                None => num(g).map(|group| WeightFormat::Int4Group { group }),
            }
        });
        f.ok_or_else(|| {
            format!(
                "'{s}' is not a weight format (bf16, fp8, int8, int4, int4-gN, int4-gN-zp, nvfp4, mxfp4, as-shipped)"
            )
        })
    }
}

/// `--weights` and `--expert-weights`: the formats to price the weights in instead of the
/// checkpoint's (`None`: as shipped). `all` sets every quantizable group (attention, dense
/// MLP, shared and routed experts, a multi-token-prediction layer); the LM head keeps the
/// checkpoint's format (the quantized checkpoints of the table's families keep it in bf16).
/// `experts` then sets the routed experts alone (GLM-5.1 served with 4-bit experts from an
/// fp8 checkpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct WeightOverride {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) all: Option<WeightFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) experts: Option<WeightFormat>,
}

impl WeightOverride {
    /// `p` with these formats in place of the checkpoint's.
    pub(crate) fn apply(&self, p: Precision) -> Precision {
        let mut out = p;
        if let Some(f) = self.all {
            out = Precision {
                lm_head: p.lm_head,
                ..Precision::uniform(f)
            };
        }
        if let Some(f) = self.experts {
            out.routed_experts = f;
        }
        out
    }

    /// What the flags said, for the plan's header (`None` when nothing was overridden).
    pub(crate) fn describe(&self) -> Option<String> {
        let mut v = vec![];
        if let Some(f) = self.all {
            v.push(format!("--weights {}", f.label()));
        }
        if let Some(f) = self.experts {
            v.push(format!("--expert-weights {}", f.label()));
        }
        (!v.is_empty()).then(|| v.join(" "))
    }
}

/// Storage precision per group of weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Precision {
    pub(crate) attention: WeightFormat,
    pub(crate) dense_mlp: WeightFormat,
    pub(crate) routed_experts: WeightFormat,
    pub(crate) shared_experts: WeightFormat,
    pub(crate) lm_head: WeightFormat,
}

impl Precision {
    pub(crate) fn uniform(f: WeightFormat) -> Self {
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
pub(crate) enum Attention {
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
    /// Grouped-query attention (Llama, Qwen3); full or sliding-window, the weights are the same.
    Gqa {
        heads: u64,
        kv_heads: u64,
        head_dim: u64,
        /// Value head size when it differs from `head_dim` (MiMo-V2-Flash: 192 / 128).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        v_head_dim: Option<u64>,
        /// q_proj also yields a per-head output gate, doubling its rows (Qwen3-Next, Qwen3.5).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        gated_q: bool,
    },
    /// DeepSeek-V4's attention (vLLM deepseek_v4.py `DeepseekV4Attention`): one K/V head of
    /// `head_dim` shared by every query head, a low-rank query (`q_lora_rank`) and a low-rank
    /// output in `o_groups` groups of `o_lora_rank`.
    LatentMqa {
        heads: u64,
        head_dim: u64,
        q_lora_rank: u64,
        o_lora_rank: u64,
        o_groups: u64,
    },
}

impl Attention {
    pub(crate) fn heads(&self) -> u64 {
        match *self {
            Attention::Mla { heads, .. }
            | Attention::Gqa { heads, .. }
            | Attention::LatentMqa { heads, .. } => heads,
        }
    }

    /// Plain GQA with `v_head_dim == head_dim` and no gate.
    pub(crate) fn gqa(heads: u64, kv_heads: u64, head_dim: u64) -> Self {
        Attention::Gqa {
            heads,
            kv_heads,
            head_dim,
            v_head_dim: None,
            gated_q: false,
        }
    }
}

/// Mixture-of-experts dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Moe {
    pub(crate) routed_experts: u64,
    pub(crate) experts_per_token: u64,
    pub(crate) shared_experts: u64,
    pub(crate) moe_intermediate: u64,
    /// Intermediate size of each shared expert when it differs from `moe_intermediate`
    /// (Qwen's `shared_expert_intermediate_size`, Llama-4's `intermediate_size`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) shared_intermediate: Option<u64>,
}

impl Moe {
    pub(crate) fn shared_intermediate(&self) -> u64 {
        self.shared_intermediate.unwrap_or(self.moe_intermediate)
    }
}

/// The token mixer of one layer (the part before the first all-reduce).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mixer", rename_all = "snake_case")]
pub(crate) enum Mixer {
    /// Softmax attention (full or sliding window).
    Attention(Attention),
    /// Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5): in_proj (q, k, v, z, b, a),
    /// a depthwise causal conv over q, k, v, out_proj.
    GatedDeltaNet {
        key_heads: u64,
        value_heads: u64,
        key_head_dim: u64,
        value_head_dim: u64,
        conv_kernel: u64,
    },
    /// Mamba-2 state-space mixer (Nemotron-H): in_proj (z, x, B, C, dt), conv1d over x, B, C,
    /// out_proj.
    Mamba2 {
        heads: u64,
        head_dim: u64,
        groups: u64,
        state: u64,
        conv_kernel: u64,
    },
    /// One `hidden x hidden` linear in place of attention (DeciLM `replace_with_linear`).
    Linear,
}

/// The feed-forward part of one layer (the part before the second all-reduce).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ffn", rename_all = "snake_case")]
pub enum Ffn {
    /// gate/up/down (`gated`) or up/down (Nemotron-H's relu2 MLP).
    Dense { intermediate: u64, gated: bool },
    /// Routed (and shared) experts; `dense_intermediate` > 0: a dense MLP of that size runs
    /// beside the experts in the same block (Gemma-4 `enable_moe_block`).
    Moe { moe: Moe, dense_intermediate: u64 },
    /// One `hidden x hidden` linear in place of the MLP (DeciLM `replace_with_linear`).
    Linear,
}

/// One decoder layer: a mixer and a feed-forward part, each followed by an all-reduce; either
/// may be absent (Nemotron-H blocks hold one of the two, DeciLM `no_op` skips one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Block {
    pub(crate) mixer: Option<Mixer>,
    pub ffn: Option<Ffn>,
}

/// Everything the schedule needs to know about a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelShape {
    pub(crate) name: String,
    pub(crate) layers: u64,
    pub(crate) hidden: u64,
    pub(crate) vocab: u64,
    /// Leading layers with a dense MLP (`first_k_dense_replace`); all layers when `moe` is None.
    pub(crate) first_dense: u64,
    /// Dense MLP intermediate size (0 when no layer is dense).
    pub(crate) intermediate: u64,
    pub(crate) moe: Option<Moe>,
    pub(crate) attention: Attention,
    pub(crate) precision: Precision,
    /// One entry per layer when the layers differ from what the fields above describe
    /// (hybrid mixers, interleaved MoE, per-layer NAS blocks); empty: every layer has
    /// `attention`, then a dense MLP for the first `first_dense` layers and `moe` after.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) blocks: Vec<Block>,
    /// False when the architecture or the weight format is not understood: the schedule then
    /// holds the collectives only (they depend on layers, hidden size, vocabulary and TP alone).
    #[serde(default = "yes")]
    pub(crate) weights_known: bool,
    /// The LM head shares the embedding's matrix (`tie_word_embeddings`): counted once in the
    /// parameter total, still streamed by every forward.
    #[serde(default)]
    pub(crate) tied_embeddings: bool,
    /// What the reading guessed or did not understand, for the user to see.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) warnings: Vec<String>,
    /// Which entry of the architecture table read the config, and the source it follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) read_as: Option<String>,
    /// The config's `model_type` (presets: their family's), which decides the engine's
    /// fusion rules ([`super::engine`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) model_type: Option<String>,
    /// The model's own multi-token-prediction module (`num_nextn_predict_layers` > 0), the
    /// drafter of `--drafter mtp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) mtp: Option<Mtp>,
}

/// A multi-token-prediction module shipped with the model (DeepSeek-V3's, GLM-5's): per draft
/// forward one more decoder layer of the target's last layer's shape (attention and MoE),
/// `eh_proj` (a plain, replicated `2H -> H` linear over the embedding and the previous hidden
/// state), the target's embedding and LM head (SGLang models/deepseek_nextn.py, vLLM
/// model_executor/models/deepseek_mtp.py).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Mtp {
    /// `num_nextn_predict_layers`: the layers the module has (the draft steps use them in
    /// turn; each forward runs one).
    pub(crate) layers: u64,
    /// The storage format of the module's layer, by group, as the checkpoint keeps it (the
    /// quantization's ignore list may keep it in bf16 while the target's layers are not).
    pub(crate) precision: Precision,
    /// `eh_proj`'s format (a plain `nn.Linear`: bf16 in every checkpoint the engines load).
    pub(crate) eh_proj: WeightFormat,
}

fn yes() -> bool {
    true
}

impl ModelShape {
    /// Number of layers whose MLP is dense.
    #[cfg(test)]
    pub(crate) fn dense_layers(&self) -> u64 {
        self.layer_blocks()
            .iter()
            .filter(|b| matches!(b.ffn, Some(Ffn::Dense { .. })))
            .count() as u64
    }

    /// The blocks of every layer, in order.
    pub fn layer_blocks(&self) -> Vec<Block> {
        if !self.blocks.is_empty() {
            return self.blocks.clone();
        }
        let dense = match self.moe {
            None => self.layers,
            Some(_) => self.first_dense.min(self.layers),
        };
        (0..self.layers)
            .map(|l| Block {
                mixer: Some(Mixer::Attention(self.attention)),
                ffn: Some(match self.moe {
                    Some(moe) if l >= dense => Ffn::Moe {
                        moe,
                        dense_intermediate: 0,
                    },
                    _ => Ffn::Dense {
                        intermediate: self.intermediate,
                        gated: true,
                    },
                }),
            })
            .collect()
    }

    /// The first MoE block's dimensions, if any layer is MoE.
    pub(crate) fn first_moe(&self) -> Option<Moe> {
        self.layer_blocks().iter().find_map(|b| match b.ffn {
            Some(Ffn::Moe { moe, .. }) => Some(moe),
            _ => None,
        })
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
    fn four_bit_formats_by_hand() {
        // mxfp4: 4 bits + one byte per 32 weights = 4.25 bits
        let b = WeightFormat::Mxfp4.matrix_bytes(2880, 2880);
        assert_eq!(b * 8, 2880 * 2880 * 17 / 4);
        // nvfp4: 4 bits + one byte per 16 weights = 4.5 bits, + one fp32 global scale
        let b = WeightFormat::Nvfp4.matrix_bytes(4096, 4096);
        assert_eq!(b, 4096 * 4096 * 9 / 16 + 4);
        // AWQ group 128: 4 bits + 16-bit scale + 4-bit zero per 128 weights
        let b = WeightFormat::Int4GroupZero { group: 128 }.matrix_bytes(4096, 4096);
        assert_eq!(b, 4096 * 4096 / 2 + 4096 * 32 * 2 + 4096 * 32 / 2);
    }

    #[test]
    fn formats_parse_from_their_labels_and_the_flag_words() {
        for f in [
            WeightFormat::Bf16,
            WeightFormat::Fp8Block { block: 128 },
            WeightFormat::Int4Group { group: 32 },
            WeightFormat::Int8Channel,
            WeightFormat::Int4GroupZero { group: 128 },
            WeightFormat::Mxfp4,
            WeightFormat::Nvfp4,
        ] {
            assert_eq!(f.label().parse::<WeightFormat>().unwrap(), f);
        }
        assert_eq!("fp8".parse(), Ok(WeightFormat::Fp8Block { block: 128 }));
        assert_eq!("INT4".parse(), Ok(WeightFormat::Int4Group { group: 32 }));
        assert!("int3"
            .parse::<WeightFormat>()
            .unwrap_err()
            .contains("as-shipped"));
        assert!("int4-g0".parse::<WeightFormat>().is_err());
        // int4 group 32 with bf16 scales: 4 + 16/32 = 4.5 bits; nvfp4 4 + 8/16 = 4.5 (+ a
        // global scale); fp8 blocks 8 + 32/128^2
        assert!((WeightFormat::Int4Group { group: 32 }.bits_per_weight() - 4.5).abs() < 1e-9);
        assert!((WeightFormat::Nvfp4.bits_per_weight() - 4.5).abs() < 1e-5);
        let fp8 = WeightFormat::Fp8Block { block: 128 }.bits_per_weight();
        assert!((fp8 - (8.0 + 32.0 / 16384.0)).abs() < 1e-9, "{fp8}");
    }

    #[test]
    fn an_override_keeps_the_lm_head_and_sets_the_experts_last() {
        let shipped = Precision {
            lm_head: WeightFormat::Bf16,
            ..Precision::uniform(WeightFormat::Fp8Block { block: 128 })
        };
        let o = WeightOverride {
            all: None,
            experts: Some(WeightFormat::Nvfp4),
        };
        let p = o.apply(shipped);
        assert_eq!(p.routed_experts, WeightFormat::Nvfp4);
        assert_eq!(p.attention, WeightFormat::Fp8Block { block: 128 });
        let o = WeightOverride {
            all: Some(WeightFormat::Int8Channel),
            experts: Some(WeightFormat::Mxfp4),
        };
        let p = o.apply(shipped);
        assert_eq!(
            (p.attention, p.shared_experts, p.routed_experts, p.lm_head),
            (
                WeightFormat::Int8Channel,
                WeightFormat::Int8Channel,
                WeightFormat::Mxfp4,
                WeightFormat::Bf16
            )
        );
        assert_eq!(WeightOverride::default().apply(shipped), shipped);
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
