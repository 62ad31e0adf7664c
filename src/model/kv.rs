//! The KV cache a forward reads: per layer and rank, `concurrency x context x` the layer's
//! bytes per token on that rank (`--concurrency`, `--context`, `--kv-dtype`, `--dcp`).
//!
//! How each mixer keeps its cache under pure tensor parallelism (SGLang, vLLM):
//! - MLA (DeepSeek-V3, Kimi-K2.x, GLM-5): the compressed latent, `kv_lora_rank +
//!   qk_rope_head_dim` elements per token, which every head reads: every TP rank holds and reads
//!   the whole of it (SGLang `MLATokenToKVPool`, vLLM `MLAAttention`: one KV head).
//! - DeepSeek-V4's attention: one K/V head of `head_dim` shared by every query head: replicated
//!   the same way (its compressed-attention layers, which read less, are priced as full).
//! - GQA: K and V of the rank's KV heads (`kv_heads / TP`, or one head replicated on every rank
//!   when TP exceeds the KV heads).
//! - Linear attention (Gated DeltaNet) and Mamba-2: a fixed state per request, whatever the
//!   context (the recurrent state and the convolution's last `kernel - 1` inputs, in the
//!   model's dtype, bf16), sharded over TP with their heads.
//!
//! Decode context parallelism (`--dcp D`, vLLM `--decode-context-parallel-size`) shards the
//! context of the attention layers' caches `D` ways within the TP group: each rank reads
//! `ceil(context / D)` tokens of its requests. The linear states are not split.

use super::shape::{Attention, Mixer};
pub(crate) use crate::record::vocab::{KvDType, KvSettings};

/// Bytes of KV cache one rank reads for `m` in one forward of `requests` requests of
/// `context` tokens each, at `tp`; 0 for a mixer without a cache (a plain linear).
pub(crate) fn mixer_kv_bytes(
    m: &Mixer,
    tp: u64,
    requests: u64,
    context: u64,
    kv: KvSettings,
) -> u64 {
    let e = kv.dtype.size();
    let per_rank_context = context.div_ceil(kv.dcp.max(1));
    match *m {
        Mixer::Attention(a) => requests * per_rank_context * attention_bytes_per_token(&a, tp, e),
        Mixer::GatedDeltaNet {
            value_heads,
            key_heads,
            key_head_dim,
            value_head_dim,
            conv_kernel,
        } => {
            // state: value heads x key dim x value dim; conv: (kernel - 1) x its channels,
            // both bf16 and sharded with the heads
            let state = value_heads / tp * key_head_dim * value_head_dim;
            let channels = (2 * key_heads * key_head_dim + value_heads * value_head_dim) / tp;
            requests * 2 * (state + conv_kernel.saturating_sub(1) * channels)
        }
        Mixer::Mamba2 {
            heads,
            head_dim,
            groups,
            state,
            conv_kernel,
        } => {
            let il = heads * head_dim / tp;
            let gl = groups.div_ceil(tp).max(1);
            let ssm = heads / tp * head_dim * state;
            let conv = conv_kernel.saturating_sub(1) * (il + 2 * gl * state);
            requests * 2 * (ssm + conv)
        }
        Mixer::Linear => 0,
    }
}

/// KV bytes of one token of one attention layer on one rank, elements of `e` bytes.
pub(crate) fn attention_bytes_per_token(a: &Attention, tp: u64, e: u64) -> u64 {
    match *a {
        Attention::Mla {
            kv_lora_rank,
            qk_rope_head_dim,
            ..
        } => (kv_lora_rank + qk_rope_head_dim) * e,
        Attention::LatentMqa { head_dim, .. } => head_dim * e,
        Attention::Gqa {
            kv_heads,
            head_dim,
            v_head_dim,
            ..
        } => {
            let local = if kv_heads >= tp { kv_heads / tp } else { 1 };
            local * (head_dim + v_head_dim.unwrap_or(head_dim)) * e
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BF16: KvSettings = KvSettings {
        dtype: KvDType::Bf16,
        dcp: 1,
    };

    #[test]
    fn mla_latent_is_read_whole_on_every_rank() {
        // Kimi-K2.5: (512 + 64) x 2 B per token, whatever the TP; 8 requests of 2048 tokens:
        // 8 x 2048 x 1152 = 18,874,368 B per layer and rank
        let m = Mixer::Attention(
            crate::model::presets::preset("kimi-k2.5")
                .unwrap()
                .attention,
        );
        assert_eq!(mixer_kv_bytes(&m, 8, 8, 2048, BF16), 8 * 2048 * 1152);
        assert_eq!(mixer_kv_bytes(&m, 1, 8, 2048, BF16), 8 * 2048 * 1152);
        // fp8 halves it; DCP 4 reads a quarter of the context (2048 / 4 = 512 tokens)
        let fp8 = KvSettings {
            dtype: KvDType::Fp8,
            dcp: 4,
        };
        assert_eq!(mixer_kv_bytes(&m, 8, 8, 2048, fp8), 8 * 512 * 576);
    }

    #[test]
    fn gqa_heads_split_over_tp_or_replicate() {
        // Llama-3.1-70B: 8 KV heads of 128: at TP 4 two heads, K and V: 2 x 256 x 2 B = 1 KiB
        // per token; at TP 16 one head replicated: 512 B
        let m = Mixer::Attention(Attention::gqa(64, 8, 128));
        assert_eq!(mixer_kv_bytes(&m, 4, 1, 1000, BF16), 1000 * 1024);
        assert_eq!(mixer_kv_bytes(&m, 16, 1, 1000, BF16), 1000 * 512);
        // a context DCP does not divide rounds up: 1000 / 3 -> 334 tokens
        let dcp3 = KvSettings {
            dtype: KvDType::Bf16,
            dcp: 3,
        };
        assert_eq!(mixer_kv_bytes(&m, 4, 1, 1000, dcp3), 334 * 1024);
    }

    #[test]
    fn a_linear_state_does_not_grow_with_the_context() {
        // Qwen3-Next's Gated DeltaNet: 32 value heads, 16 key heads of 128, value dim 128,
        // conv kernel 4, TP 4: state 8 x 128 x 128 = 131,072; conv 3 x (2 x 16 x 128 + 32 x
        // 128) / 4 = 3 x 2048 = 6,144; (131,072 + 6,144) x 2 B = 274,432 B per request
        let m = Mixer::GatedDeltaNet {
            key_heads: 16,
            value_heads: 32,
            key_head_dim: 128,
            value_head_dim: 128,
            conv_kernel: 4,
        };
        assert_eq!(mixer_kv_bytes(&m, 4, 1, 10, BF16), 274_432);
        assert_eq!(mixer_kv_bytes(&m, 4, 2, 100_000, BF16), 2 * 274_432);
        assert_eq!(mixer_kv_bytes(&Mixer::Linear, 4, 8, 4096, BF16), 0);
    }
}
