//! `plan --phase cycle` and `verify --backend model --phase cycle` on the public configs of
//! Kimi-K2.5, DeepSeek-V3 and GLM-5 (tests/data/configs, see its README), at one request and
//! eight, with 2,048 and 32,768 tokens of context; the weight formats as shipped and chosen;
//! the batch and context flags of `explain` and `breakeven`.
//!
//! The figures expected are worked out by hand in each test's comments from the configs:
//! hidden size H, layers L, vocabulary V, MLA's latent kv_lora_rank + qk_rope_head_dim
//! (512 + 64 in all three) read whole by every rank, TP 8.

use std::path::PathBuf;

use crate::common::vb;

fn config(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/configs")
        .join(format!("{name}_config.json"))
}

fn run_json(args: &[&str]) -> serde_json::Value {
    let out = vb().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `plan --phase cycle --format json` of a config with `extra` flags.
fn cycle(name: &str, extra: &[&str]) -> serde_json::Value {
    let p = config(name);
    let mut args = vec![
        "plan",
        "--format",
        "json",
        "--tp",
        "8",
        "--phase",
        "cycle",
        "--model-config",
        p.to_str().unwrap(),
    ];
    args.extend(extra);
    run_json(&args)
}

fn collectives(s: &serde_json::Value, kind: &str) -> Vec<u64> {
    s["ops"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["op"] == "collective" && o["kind"] == kind)
        .map(|o| o["bytes_per_rank"].as_u64().unwrap())
        .collect()
}

fn bytes_of(s: &serde_json::Value, kind: &str) -> u64 {
    s["ops"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["op"] == "compute" && o["kind"] == kind)
        .map(|o| o["weight_bytes"].as_u64().unwrap())
        .sum()
}

/// The three cycles of the issue at C = 1 and 8 and 2,048 and 32,768 tokens of context: each
/// forward's tokens, collectives (count x bytes) and KV cache.
#[test]
fn the_three_cycles_at_two_batches_and_two_contexts() {
    // (config, drafter, H, L, V)
    let models = [
        (
            "moonshotai--Kimi-K2.5",
            "eagle3",
            7168u64,
            61u64,
            163_840u64,
        ),
        ("deepseek-ai--DeepSeek-V3", "mtp", 7168, 61, 129_280),
        ("zai-org--GLM-5-FP8", "mtp", 6144, 78, 154_880),
    ];
    for (name, drafter, h, l, v) in models {
        for c in [1u64, 8] {
            for n in [2048u64, 32_768] {
                let (cs, ns) = (c.to_string(), n.to_string());
                let j = cycle(
                    name,
                    &["--drafter", drafter, "--concurrency", &cs, "--context", &ns],
                );
                let at = format!("{name} C={c} N={n}");
                assert_eq!(j["draft_steps"], 3, "{at}");
                // the decode carries C tokens, the verify C x (k+1) = 4C; the drafts 4C, C, C
                assert_eq!(j["decode"]["tokens"], c, "{at}");
                assert_eq!(j["verify"]["tokens"], 4 * c, "{at}");
                let drafts: Vec<u64> = j["draft"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|d| d["tokens"].as_u64().unwrap())
                    .collect();
                assert_eq!(drafts, [4 * c, c, c], "{at}");
                // the target: 1 + 2L all-reduces of T x H bf16, one all-gather of T x V/8
                let ar = collectives(&j["verify"], "all_reduce");
                assert_eq!(ar.len() as u64, 1 + 2 * l, "{at}");
                assert!(ar.iter().all(|b| *b == 4 * c * h * 2), "{at}");
                assert_eq!(
                    collectives(&j["verify"], "all_gather"),
                    [4 * c * v / 8 * 2],
                    "{at}"
                );
                // each draft forward: embedding, attention and MLP/MoE all-reduces, its logits
                for d in j["draft"].as_array().unwrap() {
                    assert_eq!(collectives(d, "all_reduce").len(), 3, "{at}");
                    assert_eq!(collectives(d, "all_gather").len(), 1, "{at}");
                }
                // KV: C x N x (512 + 64) x 2 B per MLA layer and rank, every layer
                let per_layer = c * n * 576 * 2;
                assert_eq!(bytes_of(&j["verify"], "kv_cache"), l * per_layer, "{at}");
                assert_eq!(bytes_of(&j["decode"], "kv_cache"), l * per_layer, "{at}");
                if drafter == "mtp" {
                    // the MTP layer is one more MLA layer
                    assert_eq!(bytes_of(&j["draft"][1], "kv_cache"), per_layer, "{at}");
                    let mtp_ag = collectives(&j["draft"][1], "all_gather");
                    assert_eq!(mtp_ag, [c * v / 8 * 2], "{at}: the target's LM head");
                } else {
                    // the assumed EAGLE-3 head: 8 KV heads of 128 over 8 ranks: one head,
                    // K and V bf16 = 512 B per token; its 32,000-token vocabulary / 8
                    assert_eq!(bytes_of(&j["draft"][1], "kv_cache"), c * n * 512, "{at}");
                    let ag = collectives(&j["draft"][1], "all_gather");
                    assert_eq!(ag, [c * 32_000 / 8 * 2], "{at}");
                }
            }
        }
    }
}

/// Kimi-K2.5's 384 experts, top-8, at C = 8: 384 (1 - (376/384)^8) = 59.5228 touched by the
/// decode's 8 tokens, 384 (1 - (376/384)^32) = 188.2314 by the verify's 32
/// (python3: 384*(1-(376/384)**8), 384*(1-(376/384)**32)).
#[test]
fn kimi_experts_touched_by_a_batch_of_eight() {
    let j = cycle("moonshotai--Kimi-K2.5", &["--concurrency", "8"]);
    let e = |s: &serde_json::Value| s["experts_per_layer"].as_f64().unwrap();
    assert!(
        (e(&j["decode"]) - 59.5228).abs() < 1e-3,
        "{}",
        e(&j["decode"])
    );
    assert!(
        (e(&j["verify"]) - 188.2314).abs() < 1e-3,
        "{}",
        e(&j["verify"])
    );
}

#[test]
fn weight_formats_as_shipped_and_as_chosen() {
    let fmt = |s: &serde_json::Value, k: &str| s["weight_formats"][k]["format"].clone();
    // Kimi-K2.5: int4 experts (group 32), the rest bf16 (its ignore list)
    let k = cycle("moonshotai--Kimi-K2.5", &[]);
    assert_eq!(fmt(&k["verify"], "routed_experts"), "int4_group");
    assert_eq!(k["verify"]["weight_formats"]["routed_experts"]["group"], 32);
    assert_eq!(fmt(&k["verify"], "attention"), "bf16");
    // GLM-5 NVFP4 (ModelOpt's hf_quant_config.json beside the config): the target's experts
    // nvfp4, attention bf16; its MTP layer (model.layers.78*) excluded: bf16
    let n = cycle("nvidia--GLM-5-NVFP4", &["--drafter", "mtp"]);
    assert_eq!(fmt(&n["verify"], "routed_experts"), "nvfp4");
    assert_eq!(fmt(&n["verify"], "attention"), "bf16");
    assert_eq!(fmt(&n["draft"][0], "routed_experts"), "bf16");
    // GLM-5 FP8 with 4-bit experts chosen: the experts priced in nvfp4, the rest as shipped;
    // 4.5 bits against fp8's 8 + 32/128^2: the experts' bytes fall to 0.5624... of fp8's
    let base = cycle("zai-org--GLM-5-FP8", &["--drafter", "mtp"]);
    let four = cycle(
        "zai-org--GLM-5-FP8",
        &["--drafter", "mtp", "--expert-weights", "nvfp4"],
    );
    assert_eq!(fmt(&four["verify"], "routed_experts"), "nvfp4");
    assert_eq!(fmt(&four["verify"], "attention"), "fp8_block");
    assert_eq!(four["verify"]["weights_override"], "--expert-weights nvfp4");
    let ratio = bytes_of(&four["verify"], "routed_experts") as f64
        / bytes_of(&base["verify"], "routed_experts") as f64;
    let want = 4.5 / (8.0 + 32.0 / 16384.0);
    assert!((ratio - want).abs() < 1e-3, "{ratio} vs {want}");
}

/// `verify --backend model --phase cycle`: the record's runs are the cycle (eager and graph),
/// its parts the decode step, the drafts and the verify, and the cycle is the drafts plus the
/// verify; the workload records the batch, the context and the cycle.
#[test]
fn the_model_backend_prices_the_cycle_and_its_parts() {
    let r = run_json(&[
        "verify",
        "--backend",
        "model",
        "--tp",
        "8",
        "--phase",
        "cycle",
        "--concurrency",
        "8",
        "--context",
        "2048",
        "--mode",
        "full",
        "--format",
        "json",
    ]);
    let v = &r[0]["result"];
    let w = &v["workload"];
    assert_eq!(w["phase"], "cycle");
    assert_eq!(
        (w["concurrency"].as_u64(), w["context"].as_u64()),
        (Some(8), Some(2048))
    );
    assert_eq!(w["cycle"]["drafter"], "eagle3");
    assert_eq!(w["weight_formats"]["routed_experts"], "int4-g32");
    // 61 MLA layers x 8 x 2048 x 1152 B
    assert_eq!(w["kv_bytes_per_rank"], 61u64 * 8 * 2048 * 1152);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for run in runs {
        let graph = run["graph"].as_bool().unwrap();
        let part = |p: &str| {
            v["parts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["part"] == p && x["graph"] == graph)
                .unwrap()["per_verify"]["median_us"]
                .as_f64()
                .unwrap()
        };
        let cycle = run["per_verify"]["median_us"].as_f64().unwrap();
        assert!((cycle - part("draft") - part("verify")).abs() < 1e-6);
        assert!(cycle > part("decode"));
    }
}

#[test]
fn explain_and_breakeven_take_the_batch_and_record_it() {
    let e = run_json(&[
        "explain",
        "--decode-ms",
        "12.2",
        "--accept-length",
        "2.5",
        "--gpus",
        "8",
        "--concurrency",
        "8",
        "--context",
        "2048",
        "--format",
        "json",
    ]);
    let w = &e["result"]["data"]["workload"];
    assert_eq!(
        (w["concurrency"].as_u64(), w["context"].as_u64()),
        (Some(8), Some(2048))
    );
    let b = run_json(&[
        "breakeven",
        "--decode-ms",
        "12.2",
        "--verify-ms",
        "19",
        "--draft-steps",
        "3",
        "--accept-length",
        "2.5",
        "--concurrency",
        "8",
        "--format",
        "json",
    ]);
    assert!(
        b.to_string().contains("batch: 8 requests per forward"),
        "{b}"
    );
}

#[test]
fn cycle_flags_refused_where_they_mean_nothing() {
    let cases: [(&[&str], &str); 8] = [
        (
            &["plan", "--phase", "cycle", "--drafter", "mtp"],
            "has no MTP module",
        ),
        (&["plan", "--drafter", "mtp"], "add --phase cycle"),
        (
            &["plan", "--tp", "8", "--context", "100", "--dcp", "3"],
            "--dcp 3 does not divide --tp 8",
        ),
        (&["plan", "--dcp", "2"], "add --context N"),
        (&["plan", "--concurrency", "0"], "--concurrency 0"),
        (
            &["plan", "--phase", "cycle", "--tokens", "5"],
            "--draft-steps + 1",
        ),
        (&["plan", "--weights", "int3"], "not a weight format"),
        (
            &[
                "sweep",
                "--backend",
                "model",
                "--phase",
                "cycle",
                "-L",
                "NCCL_PROTO=LL",
            ],
            "several forwards",
        ),
    ];
    for (args, says) in cases {
        let out = vb().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// `--draft-config`: an EAGLE-3 head's own config (a one-layer Llama config with
/// `draft_vocab_size`, sized as Kimi's heads are published: 64 heads, 8 KV heads of 128, MLP
/// 18,432) and a DFlash drafter's (a Qwen3 config of 5 layers reading 5 target layers).
#[test]
fn draft_configs_give_the_drafters_shape() {
    let d = tempfile::tempdir().unwrap();
    let eagle = d.path().join("eagle3.json");
    std::fs::write(
        &eagle,
        r#"{"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
            "hidden_size": 7168, "num_hidden_layers": 1, "num_attention_heads": 64,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 18432,
            "vocab_size": 163840, "draft_vocab_size": 32000, "tie_word_embeddings": false}"#,
    )
    .unwrap();
    let j = cycle(
        "moonshotai--Kimi-K2.5",
        &["--draft-config", eagle.to_str().unwrap()],
    );
    // the midlayer's qkv reads 2H (llama_eagle3.py): (64/8 x 128 + 1 x 2 x 128) = 1280 rows
    // x 14,336, o 7168 x 1024, bf16; the fc 3H -> H only in the first forward; the LM head
    // 32,000 / 8 rows
    let first = &j["draft"][0];
    assert_eq!(
        bytes_of(first, "attention"),
        2 * (1280 * 14_336 + 7168 * 1024)
    );
    assert_eq!(bytes_of(first, "draft_fc"), 2 * 7168 * 21_504);
    assert_eq!(bytes_of(&j["draft"][1], "draft_fc"), 0);
    assert_eq!(bytes_of(first, "lm_head"), 2 * 4000 * 7168);
    let notes = j["drafter_notes"].to_string();
    assert!(notes.contains("--draft-config"), "{notes}");
    // draft_vocab_size is read, not named as a key nobody understood
    assert!(!notes.contains("not understood"), "{notes}");

    let dflash = d.path().join("dflash.json");
    std::fs::write(
        &dflash,
        r#"{"architectures": ["DFlashDraftModel"], "model_type": "qwen3",
            "hidden_size": 7168, "num_hidden_layers": 5, "num_attention_heads": 64,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 18432,
            "vocab_size": 163840, "block_size": 8,
            "dflash_config": {"target_layer_ids": [1, 15, 30, 45, 59], "mask_token_id": 1}}"#,
    )
    .unwrap();
    let j = cycle(
        "moonshotai--Kimi-K2.5",
        &[
            "--drafter",
            "block",
            "--draft-steps",
            "7",
            "--concurrency",
            "8",
            "--draft-config",
            dflash.to_str().unwrap(),
        ],
    );
    // one forward of 8 x (7 + 1) = 64 positions: 1 + 2 x 5 all-reduces, the target's logits
    let b = &j["draft"][0];
    assert_eq!(j["draft"].as_array().unwrap().len(), 1);
    assert_eq!(b["tokens"], 64);
    assert_eq!(collectives(b, "all_reduce").len(), 11);
    assert_eq!(collectives(b, "all_gather"), [64 * 163_840 / 8 * 2]);
    // fc over 5 target layers: 7168 x 35,840 bf16, replicated
    assert_eq!(bytes_of(b, "draft_fc"), 2 * 7168 * 35_840);
    // a tree of 8 tokens per request in the verify
    let t = cycle(
        "moonshotai--Kimi-K2.5",
        &["--tree-tokens", "8", "--concurrency", "2"],
    );
    assert_eq!(t["verify"]["tokens"], 16);
    assert_eq!(t["verify_tokens"], 8);
}
