//! `plan --model-config` on six real public configs (tests/data/configs/, see its README), and
//! on configs the architecture table does not know.
//!
//! Expected weight bytes per rank are worked out by hand below, at TP=8 for T=3 tokens, from
//! the config's dimensions with the sharding of MODELS.md (column/row-parallel matrices split
//! over the 8 ranks, KV heads replicated when fewer than 8, router replicated, embedding not
//! streamed, LM head vocab/8 rows), and routed experts touched under uniform routing,
//! E x (1 - (1 - k/E)^3). The same dimensions summed at TP=1 are checked against each model's
//! published parameter count first, so that a misread dimension shows there too.
//! The arithmetic was run as this short script (its output is the numbers below):
//! ```text
//! touched = lambda E, k: E * (1 - (1 - k / E) ** 3)
//! mixtral = 2 * (32*(4096*6144//8 + 512*4096) + 32*touched(8,2)*3*4096*14336/8
//!                + 32*8*4096 + 4000*4096)                                 # 6,888,357,888
//! scout   = 2 * (48*(5120*7168//8 + 640*5120) + 48*touched(16,1)*3*5120*8192/8
//!                + 48*3*5120*8192/8 + 48*16*5120 + 25256*5120)            # 6,784,040,960
//! gptoss  = 2 * 36*(2880*5120//8 + 512*2880) + 36*touched(128,4)*3*2880*2880/8*(4.25/8)
//!           + 2 * (36*128*2880 + 25136*2880)                              # 1,101,965,929
//! ```
//! and likewise for the other three (written out at each test).

use std::path::PathBuf;

use crate::common::vb;

fn config(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/configs")
        .join(format!("{name}_config.json"))
}

fn plan(name: &str, tp: &str) -> serde_json::Value {
    let p = config(name);
    let out = vb()
        .args(["plan", "--format", "json", "--tokens", "3", "--tp", tp])
        .arg("--model-config")
        .arg(&p)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn weights_by_kind(v: &serde_json::Value) -> std::collections::BTreeMap<String, u64> {
    let mut m = std::collections::BTreeMap::new();
    for o in v["ops"].as_array().unwrap() {
        if o["op"] == "compute" {
            *m.entry(o["kind"].as_str().unwrap().to_string())
                .or_insert(0) += o["weight_bytes"].as_u64().unwrap();
        }
    }
    m
}

fn count(v: &serde_json::Value, kind: &str) -> usize {
    v["ops"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["op"] == "collective" && o["kind"] == kind)
        .count()
}

fn warnings(v: &serde_json::Value) -> Vec<String> {
    v["config_reading"]["warnings"]
        .as_array()
        .map(|a| a.iter().map(|w| w.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// The plan's total weight bytes are within 2% of the hand figure, and the parameter count
/// of the same shape within 2% of the published one.
fn check(name: &str, hand_bytes: f64, published_params: f64) -> serde_json::Value {
    let v = plan(name, "8");
    let total: u64 = weights_by_kind(&v).values().sum();
    let err = (total as f64 - hand_bytes).abs() / hand_bytes;
    assert!(
        err < 0.02,
        "{name}: plan {total} B vs hand {hand_bytes} B ({:.2}%)",
        100.0 * err
    );
    let shape = verifybench::model::config::load(&config(name)).unwrap();
    let (params, _) = verifybench::model::schedule::parameter_counts(&shape).unwrap();
    let err = (params as f64 - published_params).abs() / published_params;
    assert!(
        err < 0.02,
        "{name}: {params} parameters vs {published_params} published ({:.2}%)",
        100.0 * err
    );
    assert!(warnings(&v).is_empty(), "{name}: {:?}", warnings(&v));
    v
}

#[test]
fn mixtral_8x7b_is_moe() {
    // 32 layers, hidden 4096, 8 experts (num_local_experts) of intermediate 14336, top-2.
    // Published 46.7 B parameters: experts 32 x 8 x 3 x 4096 x 14336 = 45.10 B, attention
    // 32 x (4096 x 6144 + 4096 x 4096) = 1.34 B, embedding + LM head 2 x 32000 x 4096 = 0.26 B.
    // Per rank, T=3: touched experts 8 x (1 - 0.75^3) = 4.625 expected, in whole experts 5
    // (hit at least once 4.625 -> 5, at least twice 8 x 0.15625 = 1.25 -> 1: 4 by 1 token and
    // 1 by 2, 6 = 3 x 2 token-expert pairs); attention 1.34 B / 8, experts 32 x 5 x 176.2 M / 8,
    // router 32 x 8 x 4096, LM head 4000 x 4096, all bf16: 7,416,840,192 B (6,888,357,888 with
    // the 4.625 expected experts + 32 x 0.375 x 44,040,192).
    let v = check("mistralai--Mixtral-8x7B-v0.1", 7_416_840_192.0, 46.7e9);
    let w = weights_by_kind(&v);
    assert!(w.contains_key("routed_experts") && !w.contains_key("dense_mlp"));
    assert_eq!((count(&v, "all_reduce"), count(&v, "all_gather")), (65, 1));
    assert!((v["experts_per_layer"].as_f64().unwrap() - 4.625).abs() < 1e-9);
}

#[test]
fn llama4_scout_has_routed_and_shared_experts() {
    // text_config: 48 layers, hidden 5120, 16 experts (num_local_experts) of 8192, top-1,
    // interleave_moe_layer_step 1 (every layer MoE) and one shared expert of 8192 per layer.
    // Published 109 B (with the vision encoder): routed 48 x 16 x 3 x 5120 x 8192 = 96.6 B,
    // shared 6.04 B, attention 48 x (5120 x 7168 + 5120 x 5120) = 3.02 B, embedding + LM
    // head 2 x 202048 x 5120 = 2.07 B: 107.8 B of text model.
    // Per rank: touched 16 x (1 - (15/16)^3) = 2.816 expected, 3 whole experts (at least twice:
    // 0.18 -> 0; 3 = 3 x 1 pairs); 6,784,040,960 B with 2.816, + 0.184 x 48 x 31,457,280 =
    // 7,061,258,240 B (bf16).
    let v = check(
        "meta-llama--Llama-4-Scout-17B-16E-Instruct",
        7_061_258_240.0,
        109e9,
    );
    let w = weights_by_kind(&v);
    assert!(w["routed_experts"] > 0 && w["shared_experts"] > 0);
    assert_eq!(count(&v, "all_reduce"), 97);
}

#[test]
fn llama4_maverick_interleaves_moe_and_differs_from_scout() {
    // Maverick's shape (its published config): 128 experts, interleave_moe_layer_step 2, so
    // layers 1, 3, ..., 47 are MoE and the others dense with intermediate_size_mlp 16384.
    let mut c: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(config("meta-llama--Llama-4-Scout-17B-16E-Instruct")).unwrap(),
    )
    .unwrap();
    c["text_config"]["num_local_experts"] = 128.into();
    c["text_config"]["interleave_moe_layer_step"] = 2.into();
    let s = verifybench::model::config::from_json(&c, "maverick.json").unwrap();
    let blocks = s.layer_blocks();
    use verifybench::model::shape::Ffn;
    assert!(matches!(
        blocks[0].ffn,
        Some(Ffn::Dense {
            intermediate: 16384,
            ..
        })
    ));
    assert!(matches!(blocks[1].ffn, Some(Ffn::Moe { .. })));
    let dense = blocks
        .iter()
        .filter(|b| matches!(b.ffn, Some(Ffn::Dense { .. })));
    assert_eq!(dense.count(), 24);
    // published 400 B: routed 24 x 128 x 125.8 M = 386.5 B, shared 3.0 B, dense 24 x 3 x
    // 5120 x 16384 = 6.04 B, attention 3.02 B, embedding + LM head 2.07 B = 400.7 B
    let (p, _) = verifybench::model::schedule::parameter_counts(&s).unwrap();
    assert!((p as f64 - 400e9).abs() / 400e9 < 0.02, "{p}");
}

#[test]
fn gpt_oss_120b_mxfp4_is_planned_not_refused() {
    // 36 layers, hidden 2880, 128 experts of 2880, top-4, experts mxfp4 (4 bits + one e8m0
    // byte per 32 weights = 4.25 bits); attention, router, LM head bf16 (modules_to_not_convert).
    // Published 116.8 B: experts 36 x 128 x 3 x 2880^2 = 114.7 B, attention 36 x (2880 x 5120
    // + 4096 x 2880) = 0.96 B, embedding + LM head 2 x 201088 x 2880 = 1.16 B.
    // Per rank: attention 36 x (2880 x 640 + 512 x 2880) x 2 = 238,878,720; router
    // 36 x 128 x 2880 x 2 = 26,542,080; LM head 25136 x 2880 x 2 = 144,783,360; experts
    // touched 128 x (1 - (124/128)^3) = 11.63, 12 whole experts (12 = 3 x 4 pairs):
    // 36 x 12 x 3,110,400 x 0.53125 = 713,836,800: 1,124,040,960 B.
    let v = check("openai--gpt-oss-120b", 1_124_040_960.0, 116.8e9);
    let w = weights_by_kind(&v);
    assert_eq!(w["attention"], 238_878_720);
    assert_eq!(w["lm_head"], 144_783_360);
}

#[test]
fn qwen3_next_has_linear_attention_and_a_shared_expert() {
    // 48 layers, full attention every 4th (full_attention_interval 4): 12 full, 36 Gated
    // DeltaNet. Per rank, bf16:
    //   full: q (gated) 16 x 256 x 2 / 8 = 1024 rows, k and v one replicated head of 256 each,
    //     o 512 -> 2048: (1536 x 2048 + 2048 x 512) x 2 = 8,388,608; x 12 = 100,663,296
    //   linear: in_proj_qkvz (2x2048 + 2x4096)/8 = 1536 rows, in_proj_ba 64/8 = 8 rows, conv
    //     (2x2048 + 4096)/8 x 4, out 4096/8 -> 2048: 4,214,784 x 2 x 36 = 303,464,448
    //   experts: 512 of 512, top-10: touched 512 x (1 - (502/512)^3) = 29.42 expected, 29
    //     whole experts (hit at least twice 0.58 -> 1: 28 by 1 token, 1 by 2, 30 = 3 x 10
    //     pairs): 48 x 29 x 3 x 2048 x 64 x 2 = 1,094,713,344 (1,110,487,680 with 29.4217)
    //   shared expert (shared_expert_intermediate_size 512): 48 x 3 x 2048 x 64 x 2 = 37,748,736
    //   router 48 x 512 x 2048 x 2 = 100,663,296; LM head 18992 x 2048 x 2 = 77,791,232
    // total 1,715,044,352 B. Published 80 B parameters (experts 48 x 512 x 3.1 M = 77.3 B).
    let v = check("Qwen--Qwen3-Next-80B-A3B-Thinking", 1_715_044_352.0, 80e9);
    let w = weights_by_kind(&v);
    assert_eq!(w["linear_attention"], 303_464_448);
    assert_eq!(w["attention"], 100_663_296);
    assert_eq!(w["shared_experts"], 37_748_736);
}

#[test]
fn nemotron_h_reads_infinity_and_its_hybrid_pattern() {
    // hybrid_override_pattern: 54 'M' (Mamba-2), 10 '*' (attention), 54 '-' (relu2 MLP); one
    // all-reduce per block: 118 + the embedding's. Per rank, bf16:
    //   Mamba: in_proj (2 x 16384/8 + 2 x 1 group x 256 + 256/8) = 4640 rows x 8192, conv
    //     (2048 + 512) x 4, out_proj 8192 x 2048: 54,798,336 x 2 x 54 = 5,918,220,288
    //   attention: (1024 + 256) x 8192 + 8192 x 1024 = 18,874,368 x 2 x 10 = 377,487,360
    //   MLP: 2 x 8192 x 4096 x 2 x 54 = 7,247,757,312; LM head 16384 x 8192 x 2 = 268,435,456
    // total 13,811,900,416 B. Published 56 B parameters.
    let v = check("nvidia--Nemotron-H-56B-Base-8K", 13_811_900_416.0, 56e9);
    assert_eq!(count(&v, "all_reduce"), 119);
    let w = weights_by_kind(&v);
    assert_eq!(w["mamba"], 5_918_220_288);
}

#[test]
fn nemotron_super_reads_block_configs() {
    // block_configs: 49 layers with attention (n_heads_in_group 8: 8 KV heads), 31 no_op;
    // FFN sizes int(2 x ffn_mult x 8192 / 3) rounded up to 256: 49 x 5.25 -> 28672,
    // 6 x 2.625 -> 14336, 1 x 3.28125 -> 17920, 10 x 1.3125 -> 7168, 8 x 1.0 -> 5632,
    // 6 x 0.5 -> 2816 (80 FFNs). Per rank, bf16:
    //   attention (1024 + 2 x 128) x 8192 + 8192 x 1024 = 18,874,368 x 2 x 49 = 1,849,688,064
    //   FFN 3 x 8192 x (sum of sizes)/8 x 2 = 10,091,495,424; LM head 16032 x 8192 x 2
    //   = 262,668,288; total 12,203,851,776 B.
    // Published 49.9 B parameters (the checkpoint's safetensors count).
    let v = check(
        "nvidia--Llama-3_3-Nemotron-Super-49B-v1",
        12_203_851_776.0,
        49.9e9,
    );
    // one all-reduce per attention that is not a no-op, one per FFN, plus the embedding's
    assert_eq!(count(&v, "all_reduce"), 1 + 49 + 80);
    let model = v["model"].as_str().unwrap();
    assert!(
        model.contains("llama_nemotron_super")
            && model.contains("nemotron-nas")
            && model.contains("Nemotron-Super-49B-v1_config.json"),
        "{model}"
    );
}

#[test]
fn two_configs_in_one_folder_have_different_names() {
    let a = plan("mistralai--Mixtral-8x7B-v0.1", "8");
    let b = plan("openai--gpt-oss-120b", "8");
    assert_ne!(a["model"], b["model"]);
    assert!(a["model"].as_str().unwrap().contains("mixtral"));
}

fn write(dir: &std::path::Path, v: &serde_json::Value) -> PathBuf {
    let p = dir.join("config.json");
    std::fs::write(&p, v.to_string()).unwrap();
    p
}

#[test]
fn unknown_architecture_gets_collectives_and_names_the_keys() {
    // a config of a model_type the table lacks whose keys do not describe its MoE (an expert
    // count, no experts per token), with keys nothing reads
    let d = tempfile::tempdir().unwrap();
    let p = write(
        d.path(),
        &serde_json::json!({"model_type": "mystery_lm", "num_hidden_layers": 3,
            "hidden_size": 1024, "vocab_size": 8192, "num_attention_heads": 16,
            "hc_mult": 4, "compress_ratios": [0, 4, 128], "n_routed_experts": 64}),
    );
    let out = vb()
        .args(["plan", "--format", "json", "--tokens", "3", "--tp", "8"])
        .arg("--model-config")
        .arg(&p)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // 1 + 2 x 3 all-reduces of 3 x 1024 bf16, one all-gather of 3 x 8192/8
    assert_eq!((count(&v, "all_reduce"), count(&v, "all_gather")), (7, 1));
    assert!(weights_by_kind(&v).is_empty(), "no weight figures");
    let w = warnings(&v).join(" ");
    assert!(
        w.contains("mystery_lm")
            && w.contains("num_experts_per_tok")
            && w.contains("hc_mult")
            && w.contains("compress_ratios"),
        "{w}"
    );
    // the expert count was read (as an MoE lacking its experts per token), not "not understood"
    assert!(
        !w.contains("n_routed_experts,") && !w.ends_with("n_routed_experts"),
        "{w}"
    );
    // the table says so too, every phase's line calls the weights unknown (never "0 B"), and
    // --mode full is refused with the reason
    let out = vb()
        .args(["plan", "--model-config"])
        .arg(&p)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("unknown") && text.contains("# warning:"),
        "{text}"
    );
    assert!(
        text.contains("decode (T=1): 7 all_reduce")
            && text.contains("weights per rank unknown (see the warnings)"),
        "{text}"
    );
    assert!(!text.contains("0 B of weights"), "{text}");
    vb().args([
        "verify",
        "--backend",
        "model",
        "--mode",
        "full",
        "--model-config",
    ])
    .arg(&p)
    .assert()
    .code(2)
    .stderr(predicates::str::contains("--mode comm"));
}

/// A public config with its `model_type` changed on purpose to a name the table lacks: the
/// generic keys must carry the reading.
fn renamed(name: &str, new_type: &str) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let mut c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(config(name)).unwrap()).unwrap();
    c["model_type"] = new_type.into();
    let p = write(d.path(), &c);
    (d, p)
}

fn plan_file(p: &std::path::Path) -> serde_json::Value {
    let out = vb()
        .args(["plan", "--format", "json", "--tokens", "3", "--tp", "8"])
        .arg("--model-config")
        .arg(p)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_mixtral_config_under_a_new_type_name_is_planned_with_its_experts() {
    // Mixtral-8x7B's public config, model_type renamed (on purpose) to one the table lacks:
    // num_local_experts 8, num_experts_per_tok 2 and no moe_intermediate_size (the experts'
    // size is intermediate_size, Mixtral's form) give the same plan as the table's mixtral
    // entry, byte for byte (7,416,840,192 B per rank by hand, see mixtral_8x7b_is_moe).
    let (_d, p) = renamed("mistralai--Mixtral-8x7B-v0.1", "mixtral_next");
    let v = plan_file(&p);
    let known = plan("mistralai--Mixtral-8x7B-v0.1", "8");
    assert_eq!(weights_by_kind(&v), weights_by_kind(&known));
    assert_eq!(weights_by_kind(&v).values().sum::<u64>(), 7_416_840_192);
    assert!(weights_by_kind(&v).contains_key("routed_experts"));
    assert_eq!(v["experts_per_layer"], known["experts_per_layer"]);
    let w = warnings(&v).join(" ");
    assert!(
        w.contains("model_type 'mixtral_next' is not in the architecture table")
            && w.contains("a guess")
            && w.contains("MoE of 8 routed experts, 2 per token, of intermediate size 14336")
            && w.contains("num_local_experts")
            && w.contains("num_experts_per_tok"),
        "{w}"
    );
    assert!(!w.contains("not understood"), "{w}");
}

#[test]
fn a_qwen3_next_config_under_a_new_type_name_keeps_experts_and_layer_pattern() {
    // Qwen3-Next-80B's public config, model_type renamed on purpose: num_experts 512, top-10,
    // moe_intermediate_size 512, shared_expert_intermediate_size 512, full attention every
    // 4th layer (full_attention_interval). The experts, the shared expert and the 36 linear-
    // attention layers are read by their keys alone: the same bytes as under qwen3_next
    // (see qwen3_next_has_linear_attention_and_a_shared_expert). The output gate of its
    // attention is Qwen3-Next's own (the table's entry says so, no key does): the generic
    // reading counts a plain q_proj, 16 x 256 / 8 = 512 rows instead of 1024, so attention
    // is (1024 x 2048 + 2048 x 512) x 2 = 6,291,456 per full layer, x 12 = 75,497,472.
    let (_d, p) = renamed("Qwen--Qwen3-Next-80B-A3B-Thinking", "qwen_future_moe");
    let v = plan_file(&p);
    let known = plan("Qwen--Qwen3-Next-80B-A3B-Thinking", "8");
    let (w, k) = (weights_by_kind(&v), weights_by_kind(&known));
    for kind in ["routed_experts", "shared_experts", "linear_attention"] {
        assert_eq!(w[kind], k[kind], "{kind}");
    }
    assert_eq!(w["attention"], 75_497_472);
    assert_eq!(count(&v, "all_reduce"), count(&known, "all_reduce"));
    let warn = warnings(&v).join(" ");
    assert!(
        warn.contains("qwen_future_moe")
            && warn.contains("MoE of 512 routed experts, 10 per token")
            && warn.contains("shared_expert_intermediate_size")
            && warn.contains("full_attention_interval"),
        "{warn}"
    );
}

#[test]
fn unknown_weight_format_warns_and_keeps_the_collectives() {
    let d = tempfile::tempdir().unwrap();
    let mut c: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(config("mistralai--Mixtral-8x7B-v0.1")).unwrap(),
    )
    .unwrap();
    c["quantization_config"] =
        serde_json::json!({"quant_method": "bitsandbytes", "load_in_4bit": true});
    let p = write(d.path(), &c);
    let out = vb()
        .args(["plan", "--format", "json", "--model-config"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(count(&v, "all_reduce"), 65);
    assert!(weights_by_kind(&v).is_empty());
    assert!(warnings(&v).join(" ").contains("bitsandbytes"));
}

#[test]
fn trace_against_plan_works_for_a_hybrid_config() {
    // a synthetic 2-rank trace with Nemotron-H's collectives at TP=2: 119 all-reduces of
    // 3 x 8192 bf16 and one all-gather of 3 x 131072/2
    use crate::synth::{self, SynthSpec};
    let d = tempfile::tempdir().unwrap();
    let s = SynthSpec {
        ranks: 2,
        steps: 3,
        all_reduces: 119,
        ar_elements: 3 * 8192,
        ag_elements: 3 * 131072 / 2,
        ..Default::default()
    };
    synth::write_dir(&s, d.path(), true).unwrap();
    let out = vb()
        .args([
            "trace",
            "--format",
            "json",
            "--against-plan",
            "--tp",
            "2",
            "--tokens",
            "3",
        ])
        .arg("--model-config")
        .arg(config("nvidia--Nemotron-H-56B-Base-8K"))
        .arg(d.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let a = &v["result"]["data"]["against_plan"];
    assert_eq!(a["same"], true, "{a}");
    assert_eq!(a["plan_collectives"], 120);
}

/// `plan --engine E [--allreduce-fusion]` on a preset (`--model NAME`) or a config file
/// (`--model-config`), T=3, TP=8: (all-reduces, all-gathers) of the ops, and (plain, fused,
/// all-gather) as the engine runs them, counted from each op's `engine_op`.
fn engine_counts(model: &[&str], phase: &str, engine: &str, fusion: bool) -> [usize; 5] {
    let mut cmd = vb();
    cmd.args(["plan", "--format", "json", "--tokens", "3", "--tp", "8"])
        .args(["--phase", phase, "--engine", engine]);
    match model {
        ["config", name] => cmd.arg("--model-config").arg(config(name)),
        [name] => cmd.args(["--model", name]),
        _ => unreachable!(),
    };
    if fusion {
        cmd.arg("--allreduce-fusion");
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{model:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ops = v["ops"].as_array().unwrap();
    let n = |f: &dyn Fn(&serde_json::Value) -> bool| ops.iter().filter(|o| f(o)).count();
    let ar = |o: &serde_json::Value| o["op"] == "collective" && o["kind"] == "all_reduce";
    let fused = |o: &serde_json::Value| !o["engine_op"]["fused_with"].is_null();
    let counts = [
        n(&ar),
        n(&|o| o["op"] == "collective" && o["kind"] == "all_gather"),
        n(&|o| ar(o) && !fused(o)),
        n(&|o| ar(o) && fused(o)),
        n(&|o| {
            o["engine_op"]["call"]
                .as_str()
                .is_some_and(|c| c.contains("all_gather"))
        }),
    ];
    // the summary the plan prints agrees with the ops
    let c = &v["engine"]["profiler_count"];
    assert_eq!(
        [
            c["all_reduce"].as_u64(),
            c["fused_all_reduce"].as_u64(),
            c["all_gather"].as_u64()
        ],
        [counts[2], counts[3], counts[4]].map(|x| Some(x as u64)),
        "{model:?} {engine}"
    );
    counts
}

/// The count of each op kind per engine and architecture, at TP=8, worked out by hand from
/// the layer counts: every layer reduces once after attention and once after its MLP/MoE
/// (2 L), the embedding once (1), the logits are all-gathered once. Fused (with the residual
/// add and RMSNorm after them): SGLang fuses, for the architectures it wires through
/// LayerCommunicator, every attention all-reduce (L) and every MLP all-reduce but the last
/// layer's (L - 1), leaving the embedding's and the last one plain (2); Llama and Mixtral
/// stay plain. vLLM's compilation pass fuses all 2 L + 1. The EAGLE-3 draft step is
/// 3 all-reduces (embedding, attention, MLP of its one layer) + 1 all-gather in both;
/// SGLang's draft head stays plain, vLLM's fuses all 3.
#[test]
fn engine_counts_per_architecture() {
    // (model, layers, SGLang fuses it)
    let cases: [(&[&str], usize, bool); 6] = [
        (&["kimi-k2.5"], 61, true),
        (&["qwen3-235b-a22b"], 94, true),
        (&["llama-3.1-70b"], 80, false),
        (&["config", "mistralai--Mixtral-8x7B-v0.1"], 32, false),
        (&["config", "openai--gpt-oss-120b"], 36, true),
        (&["config", "Qwen--Qwen3-Next-80B-A3B-Thinking"], 48, true),
    ];
    for (model, l, sglang_fuses) in cases {
        let all = 2 * l + 1;
        for engine in ["sglang", "vllm"] {
            // no fusion: every all-reduce is a collective of its own
            assert_eq!(
                engine_counts(model, "verify", engine, false),
                [all, 1, all, 0, 1],
                "{model:?} {engine}"
            );
        }
        let sglang = if sglang_fuses {
            [all, 1, 2, l + (l - 1), 1]
        } else {
            [all, 1, all, 0, 1]
        };
        assert_eq!(
            engine_counts(model, "verify", "sglang", true),
            sglang,
            "{model:?}"
        );
        assert_eq!(
            engine_counts(model, "verify", "vllm", true),
            [all, 1, 0, all, 1],
            "{model:?}"
        );
    }
    let kimi: &[&str] = &["kimi-k2.5"];
    assert_eq!(
        engine_counts(kimi, "draft", "sglang", true),
        [3, 1, 3, 0, 1]
    );
    assert_eq!(engine_counts(kimi, "draft", "vllm", true), [3, 1, 0, 3, 1]);
    assert_eq!(engine_counts(kimi, "draft", "vllm", false), [3, 1, 3, 0, 1]);
}

/// The engine changes names, never the ops: the same schedule hash under both engines, with
/// or without fusion.
#[test]
fn engine_leaves_the_schedule_hash_alone() {
    let hash = |extra: &[&str]| {
        let out = vb()
            .args(["plan", "--model", "kimi-k2.5", "--tp", "8"])
            .args(extra)
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        text.lines()
            .find(|l| l.starts_with("# schedule "))
            .unwrap()
            .to_string()
    };
    let base = hash(&[]);
    assert!(base.contains("68ab7ed804084a5e"), "{base}");
    for extra in [
        &["--engine", "vllm"][..],
        &["--engine", "sglang", "--allreduce-fusion"],
        &["--engine", "vllm", "--allreduce-fusion"],
    ] {
        assert_eq!(hash(extra), base, "{extra:?}");
    }
}

#[test]
fn deepseek_v4_flash_is_planned_as_moe_as_the_engines_read_it() {
    // DeepSeek-V4-Flash's public config (model_type deepseek_v4): 43 layers, hidden 4096,
    // 256 routed experts (n_routed_experts) of 2048, top-6, one shared expert, every layer MoE;
    // attention as vLLM's and SGLang's deepseek_v4.py shard it: fused wq_a+wkv replicated
    // (4096 -> 1024 + 512), wq_b column-parallel (1024 -> 64/8 x 512), wo_a column-parallel
    // over the 8 groups (64 x 512 / 8 -> 8/8 x 1024), wo_b row-parallel (1024 -> 4096).
    // FP8 blocks of 128 (1 B a weight + a 4 B scale a block), the routed experts MXFP4
    // (expert_dtype fp4: 4.25 bits a weight), router and LM head bf16. By hand, at TP=8, T=3:
    // ```text
    // touched = lambda E, k: E * (1 - (1 - k / E) ** 3)                    # 17.58 expected
    //                      # in whole experts 18 (at least twice 0.42 -> 0; 18 = 3 x 6 pairs)
    // fp8 = lambda r, c: r*c + 4*((r+127)//128)*((c+127)//128)
    // att    = 43*(fp8(1536,4096) + fp8(4096,1024) + fp8(1024,4096) + fp8(4096,1024))
    //                                                                       # 811,795,968
    // router = 43*256*4096*2                                                # 90,177,536
    // routed = 43*18*3*4096*2048/8*(4.25/8)                               # 1,293,484,032
    // shared = 43*(fp8(512,4096) + fp8(4096,256))                          # 135,299,328
    // head   = 2*(129280/8)*4096                                            # 132,382,720
    // ```
    // 2,463,139,584 B in all. Parameters at TP=1, 43 x (attention 54,525,952 + experts
    // 256 x 3 x 4096 x 2048 + shared 3 x 4096 x 2048 + router 256 x 4096) + 2 x 129280 x 4096
    // = 283.8 B; the model card publishes 284 B total (13 B active).
    let p = config("deepseek-ai--DeepSeek-V4-Flash");
    let v = plan("deepseek-ai--DeepSeek-V4-Flash", "8");
    let w = weights_by_kind(&v);
    assert_eq!(w["attention"], 811_795_968);
    assert_eq!(w["router"], 90_177_536);
    assert_eq!(w["shared_experts"], 135_299_328);
    assert_eq!(w["lm_head"], 132_382_720);
    let routed = w["routed_experts"] as f64;
    assert!((routed - 1_293_484_032.0).abs() < 2.0, "{routed}");
    assert!(!w.contains_key("dense_mlp"), "every layer is MoE: {w:?}");
    // 1 + 2 x 43 all-reduces, the logits' all-gather of 129280 / 8 x 3 elements
    assert_eq!((count(&v, "all_reduce"), count(&v, "all_gather")), (87, 1));
    let ag = v["ops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "all_gather")
        .unwrap();
    assert_eq!(ag["count"], 16_160 * 3);
    let shape = verifybench::model::config::load(&p).unwrap();
    let (params, _) = verifybench::model::schedule::parameter_counts(&shape).unwrap();
    assert!(
        (params as f64 - 284e9).abs() / 284e9 < 0.02,
        "{params} parameters"
    );
    // what is not counted is said, and nothing is left unread
    let warn = warnings(&v).join(" ");
    assert!(
        warn.contains("compress_ratios") && warn.contains("hc_mult"),
        "{warn}"
    );
    assert!(!warn.contains("not understood"), "{warn}");
    assert!(v["config_reading"]["read_as"]
        .as_str()
        .unwrap()
        .contains("deepseek_v4.py"));
}
