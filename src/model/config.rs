//! Reads a Hugging Face `config.json` into a [`ModelShape`].
//!
//! The architectures and their keys are in [`super::arch`] (one table, each entry citing the
//! engine code it follows). Storage precision comes from `quantization_config`: fp8 (block or
//! per-tensor), compressed-tensors (int4 groups, 8-bit channels, fp8 blocks, nvfp4, mxfp4),
//! mxfp4 (gpt-oss), ModelOpt (FP8, NVFP4), AWQ and GPTQ, each with its list of modules kept in
//! bf16. A `model_type` or a weight format that is not understood still gives the collectives,
//! with the weights marked unknown and a warning that says why.

use std::path::Path;

use regex::Regex;
use serde_json::{Map, Value};

use super::arch::{self, Cfg};
use super::shape::*;
use crate::error::usage;

/// Parses the file at `path`. Every error names the file, and a missing key is named.
pub fn load(path: &Path) -> anyhow::Result<ModelShape> {
    let json = read_json(path, "model config")?;
    shape_of(json, path)
}

/// The JSON of the config at `path` (`what`: how errors name it).
fn read_json(path: &Path, what: &str) -> anyhow::Result<Value> {
    let text = crate::util::read_text(
        path,
        what,
        "the model's Hugging Face config.json",
        crate::util::read::CONFIG,
    )?;
    serde_json::from_str(&python_json(&text)).map_err(|e| {
        usage(format!(
            "{what} '{}' is {}; give the model's Hugging Face config.json",
            path.display(),
            crate::util::json_problem(&e)
        ))
    })
}

/// What a draft model's config says beyond the shape of its layers (`--draft-config`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DraftKeys {
    /// `draft_vocab_size`: the rows of an EAGLE-3 head's own LM head (`None`: the target's
    /// vocabulary, the head loaded from the target, SGLang `load_lm_head_from_target`).
    pub(crate) draft_vocab: Option<u64>,
    /// `target_hidden_size`: the width of the target's hidden states the fc reads.
    pub(crate) target_hidden: Option<u64>,
    /// How many target layers' hidden states the fc concatenates
    /// (`dflash_config.target_layer_ids`, `eagle_aux_hidden_state_layer_ids`).
    pub(crate) target_layers: Option<u64>,
}

/// A draft model's config (`--draft-config`): its layers read as a model's (an EAGLE-3 head is
/// a one-layer Llama config, a DFlash drafter a Qwen3 one), and its draft keys.
pub(crate) fn load_draft(path: &Path) -> anyhow::Result<(ModelShape, DraftKeys)> {
    let json = read_json(path, "draft config")?;
    let obj = json.get("text_config").unwrap_or(&json);
    let u = |k: &str| obj.get(k).and_then(Value::as_u64);
    let count = |v: Option<&Value>| v.and_then(Value::as_array).map(|a| a.len() as u64);
    let keys = DraftKeys {
        draft_vocab: u("draft_vocab_size").filter(|v| *v > 0),
        target_hidden: u("target_hidden_size").filter(|v| *v > 0),
        target_layers: count(obj.pointer("/dflash_config/target_layer_ids"))
            .or_else(|| count(obj.get("eagle_aux_hidden_state_layer_ids")))
            .filter(|n| *n > 0),
    };
    for (k, v) in [
        ("draft_vocab_size", keys.draft_vocab),
        ("target_hidden_size", keys.target_hidden),
        ("num_hidden_layers", keys.target_layers),
    ] {
        if let Some(v) = v {
            arch::check_bound(k, v)
                .map_err(|e| usage(format!("draft config '{}': {e}", path.display())))?;
        }
    }
    let shape = shape_of(json, path)?;
    Ok((shape, keys))
}

/// The shape of the parsed config `json` read from `path`.
fn shape_of(json: Value, path: &Path) -> anyhow::Result<ModelShape> {
    let file = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "config.json".into());
    let (json, note) = with_hf_quant_config(json, path)?;
    let mut shape = from_json(&json, &file)
        .map_err(|e| usage(format!("model config '{}': {e}", path.display())))?;
    shape.warnings.extend(note);
    Ok(shape)
}

/// ModelOpt checkpoints (NVIDIA's NVFP4 and FP8 ones) keep their quantization in
/// `hf_quant_config.json` beside `config.json`, which then has no `quantization_config`: the
/// file beside `path` (`X_config.json` -> `X_hf_quant_config.json`, `config.json` ->
/// `hf_quant_config.json`) is folded in as ModelOpt's, and said so. A config that has its own
/// `quantization_config` is left alone.
fn with_hf_quant_config(mut json: Value, path: &Path) -> anyhow::Result<(Value, Option<String>)> {
    let has = |v: &Value| v.get("quantization_config").is_some_and(|q| !q.is_null());
    if has(&json) || json.get("text_config").is_some_and(has) {
        return Ok((json, None));
    }
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return Ok((json, None));
    };
    let Some(stem) = name.strip_suffix("config.json") else {
        return Ok((json, None));
    };
    let beside = path.with_file_name(format!("{stem}hf_quant_config.json"));
    if !beside.is_file() {
        return Ok((json, None));
    }
    let text = crate::util::read_text(
        &beside,
        "quantization config",
        "ModelOpt's hf_quant_config.json",
        crate::util::read::CONFIG,
    )?;
    let q: Value = serde_json::from_str(&text).map_err(|e| {
        usage(format!(
            "'{}' (beside the model config) is {}; give ModelOpt's hf_quant_config.json or remove it",
            beside.display(),
            crate::util::json_problem(&e)
        ))
    })?;
    let Some(inner) = q.get("quantization").filter(|v| v.is_object()) else {
        return Ok((json, None));
    };
    if let Some(obj) = json.as_object_mut() {
        obj.insert(
            "quantization_config".into(),
            serde_json::json!({"quant_method": "modelopt", "quantization": inner}),
        );
    }
    let note = format!(
        "weight formats from {} beside the config (ModelOpt's hf_quant_config.json)",
        beside
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    );
    Ok((json, Some(note)))
}

/// The JSON that Python's `json` module (and so every Hugging Face tool) reads: the bare
/// tokens `NaN`, `Infinity` and `-Infinity` outside strings become `null` (Nemotron-H's
/// config holds `"time_step_limit": [0.0, Infinity]`). No key the plan reads takes them.
pub(crate) fn python_json(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("NaN") && !text.contains("Infinity") {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut in_str = false;
    let mut escaped = false;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_str {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_str = false;
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        let token = ["-Infinity", "Infinity", "NaN"]
            .into_iter()
            .find(|t| rest.starts_with(t));
        match token {
            Some(t) => {
                out.push_str("null");
                rest = &rest[t.len()..];
            }
            None => {
                if c == '"' {
                    in_str = true;
                }
                out.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    std::borrow::Cow::Owned(out)
}

/// How the plan names a config: `_name_or_path`, `model_type` and the file name, so that two
/// configs in one folder print different names.
fn display_name(root: &Map<String, Value>, cfg: &Map<String, Value>, file: &str) -> String {
    let s = |m: &Map<String, Value>, k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
    let model_type = s(cfg, "model_type")
        .or_else(|| s(root, "model_type"))
        .unwrap_or_else(|| "no model_type".into());
    match s(root, "_name_or_path").or_else(|| s(cfg, "_name_or_path")) {
        Some(n) if !n.is_empty() => format!("{n} ({model_type}, {file})"),
        _ => format!("{file} ({model_type})"),
    }
}

/// What a JSON document this tool writes is, when one is given as a config: a record of any
/// kind, or a schedule (`plan --format json`, `trace --export-schedule`).
fn not_a_config(v: &Value) -> Option<String> {
    let has = |k: &str| v.get(k).is_some();
    if has("num_hidden_layers") || has("text_config") {
        return None;
    }
    if (has("schema_version") && has("provenance")) || v.is_array() {
        return Some(crate::record::io::describe(v));
    }
    if has("ops") && (has("phase") || has("schedule")) {
        return Some("a schedule (the output of `verifybench plan --format json` or `trace --export-schedule`)".into());
    }
    None
}

/// Builds the shape from parsed JSON; `file` is the config's file name (for the model's name).
/// Errors are plain strings; [`load`] adds the path.
pub fn from_json(root: &Value, file: &str) -> Result<ModelShape, String> {
    let (root, obj) = language_model(root)?;
    let name = display_name(root, obj, file);
    let c = Cfg::new(obj);
    let (layers, hidden, vocab) = dimensions(&c)?;
    let model_type = obj
        .get("model_type")
        .or_else(|| root.get("model_type"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut warnings = Vec::new();

    let quant = obj
        .get("quantization_config")
        .or_else(|| root.get("quantization_config"))
        .filter(|q| !q.is_null());
    let rules = quant.map(quant_rules);
    let precision_at = |layer: Option<u64>| match &rules {
        None => Ok(Precision::uniform(WeightFormat::Bf16)),
        Some(Ok(r)) => Ok(r.precision(layer)),
        Some(Err(e)) => Err(e.clone()),
    };
    let precision = precision_at(None);
    // the MTP layer follows the target's layers (index num_hidden_layers), in the format
    // the quantization's ignore rules give that index
    let mtp_layers = c.u64("num_nextn_predict_layers").filter(|n| *n > 0);
    let mtp_precision = mtp_layers.map(|_| precision_at(Some(layers)));

    let entry = arch::find(model_type);
    // a model_type the table lacks is read by the keys the table's families share
    let generic = arch::generic(obj);
    let reading = entry.unwrap_or(&generic);
    let read = match arch::read(reading, &c, layers, hidden) {
        Ok(r) => Some(r),
        // the layers, hidden size and vocabulary were read: the collectives can still be planned
        Err(e) => {
            let what = match entry {
                Some(_) => String::new(),
                None => format!(
                    "model_type '{model_type}' is not in the architecture table and its generic keys do not describe it: "
                ),
            };
            warnings.push(format!(
                "{what}{e}: collectives planned from num_hidden_layers, hidden_size and vocab_size, weight bytes unknown"
            ));
            None
        }
    };
    let read_ok = read.is_some();
    let mut weights_known = read_ok;
    // read before the unread keys are listed: the collectives-only path and the draft use it
    let heads = c
        .u64("num_attention_heads")
        .filter(|h| *h > 0)
        .unwrap_or((hidden / 128).max(1));
    let precision = deepseek_v4_experts(precision, model_type, quant, &c);
    // a present expert count that no MoE has is refused, not planned as a dense model
    arch::routed_experts(&c)?;
    let mtp_precision = mtp_precision.map(|p| deepseek_v4_experts(p, model_type, quant, &c));
    c.check_bounds()?;
    reading_warnings(
        &c,
        read.as_ref(),
        entry.is_none(),
        model_type,
        &mut warnings,
    );
    let precision = match precision {
        Ok(p) => p,
        Err(e) => {
            weights_known = false;
            warnings.push(format!("{e}: collectives planned, weight bytes unknown"));
            Precision::uniform(WeightFormat::Bf16)
        }
    };
    let r = read.unwrap_or(arch::Read {
        blocks: vec![],
        attention: Attention::gqa(heads, heads, hidden / heads),
        intermediate: c.u64("intermediate_size").unwrap_or(0),
        moe: None,
        first_dense: layers,
        tied: false,
        notes: vec![],
    });
    let read_as = match entry {
        Some(a) => format!("model_type '{model_type}' as {}", a.source),
        None => format!("model_type '{model_type}' by {}", arch::GENERIC_SOURCE),
    };
    let mut shape = ModelShape {
        name,
        layers,
        hidden,
        vocab,
        first_dense: r.first_dense,
        intermediate: r.intermediate,
        moe: r.moe,
        attention: r.attention,
        precision,
        blocks: r.blocks,
        weights_known,
        tied_embeddings: r.tied,
        warnings,
        read_as: (entry.is_some() || read_ok).then_some(read_as),
        model_type: (!model_type.is_empty()).then(|| model_type.to_string()),
        mtp: match (mtp_layers, mtp_precision) {
            (Some(n), Some(Ok(p))) if weights_known => Some(Mtp {
                layers: n,
                precision: p,
                // a plain nn.Linear in both engines: no quantized weights load into it
                eh_proj: WeightFormat::Bf16,
            }),
            _ => None,
        },
    };
    // a shape the uniform fields describe exactly keeps no per-layer list
    if !shape.blocks.is_empty() {
        let blocks = std::mem::take(&mut shape.blocks);
        if shape.layer_blocks() != blocks {
            shape.blocks = blocks;
        }
    }
    Ok(shape)
}

/// A JSON object.
type Object = Map<String, Value>;

/// The top level of a config as an object, and the language model's part of it: Kimi-K2.5,
/// Llama-4, Qwen3.5 and Gemma-4 nest it under text_config. A document this tool writes is
/// refused, named.
fn language_model(root: &Value) -> Result<(&Object, &Object), String> {
    if let Some(what) = not_a_config(root) {
        return Err(format!(
            "the file is {what}, not a model's config.json: give the Hugging Face config.json of the model (a schedule goes to --schedule)"
        ));
    }
    let root = root
        .as_object()
        .ok_or_else(|| "top level must be a JSON object".to_string())?;
    let obj = match root.get("text_config").and_then(Value::as_object) {
        Some(t) => t,
        None => root,
    };
    Ok((root, obj))
}

/// Layers, hidden size and vocabulary, each checked (positive and within bounds) before
/// anything is sized by them.
fn dimensions(c: &Cfg) -> Result<(u64, u64, u64), String> {
    let layers = c.need("num_hidden_layers")?;
    let hidden = c.need("hidden_size")?;
    let vocab = c.need("vocab_size")?;
    for (k, v) in [
        ("num_hidden_layers", layers),
        ("hidden_size", hidden),
        ("vocab_size", vocab),
    ] {
        if v == 0 {
            return Err(format!("key '{k}' is 0: a model has at least one"));
        }
        arch::check_bound(k, v)?;
    }
    Ok((layers, hidden, vocab))
}

/// DeepSeek-V4 checkpoints store the routed experts in MXFP4 unless `expert_dtype` says
/// fp8 (vLLM deepseek_v4.py DeepseekV4FP8Config: "fp4" when the key is absent).
fn deepseek_v4_experts(
    precision: Result<Precision, String>,
    model_type: &str,
    quant: Option<&Value>,
    c: &Cfg,
) -> Result<Precision, String> {
    match (precision, model_type, quant) {
        (Ok(mut p), "deepseek_v4", Some(q))
            if q.get("quant_method").and_then(Value::as_str) == Some("fp8") =>
        {
            if c.str("expert_dtype").unwrap_or("fp4") == "fp4" {
                p.routed_experts = WeightFormat::Mxfp4;
            }
            Ok(p)
        }
        (p, _, _) => p,
    }
}

/// The warnings of the reading: a guessed reading named with the keys it rests on (`guessed`:
/// the model type is not in the table), the reading's notes, the keys not understood.
fn reading_warnings(
    c: &Cfg,
    read: Option<&arch::Read>,
    guess: bool,
    model_type: &str,
    warnings: &mut Vec<String>,
) {
    if let Some(r) = read {
        if guess {
            warnings.push(format!(
                "model_type '{model_type}' is not in the architecture table: read as a guess from its generic keys ({}); the keys it rests on: {}; check the weight figures against the model card",
                guessed(r),
                c.keys_used().join(", ")
            ));
        }
        warnings.extend(r.notes.iter().cloned());
    }
    let not_understood = c.not_understood();
    if !not_understood.is_empty() {
        warnings.push(format!(
            "keys not understood (the weight figures may be off): {}",
            not_understood.join(", ")
        ));
    }
}

/// What a generic reading made of a config, in words: the MoE it found (or none), and the
/// attention.
fn guessed(r: &arch::Read) -> String {
    let moe = match r.moe {
        Some(m) => {
            let moe_layers = r
                .blocks
                .iter()
                .filter(|b| matches!(b.ffn, Some(Ffn::Moe { .. })))
                .count();
            format!(
                "MoE of {} routed experts, {} per token, of intermediate size {}{}, on {moe_layers} layers",
                m.routed_experts,
                m.experts_per_token,
                m.moe_intermediate,
                match m.shared_experts {
                    0 => String::new(),
                    n => format!(", with {n} shared expert(s) of size {}", m.shared_intermediate()),
                }
            )
        }
        None => "dense: no expert count among its keys".into(),
    };
    let att = match r.attention {
        Attention::Mla { .. } => "MLA attention",
        Attention::LatentMqa { .. } => "DeepSeek-V4 attention",
        Attention::Gqa { .. } => "GQA attention",
    };
    format!("{moe}; {att}")
}

/// Representative module names of each weight group, as the checkpoints of the table's
/// families name them; a group is kept in bf16 when an ignore rule matches any of its names.
const GROUP_MODULES: [(&str, &[&str]); 5] = [
    (
        "attention",
        &[
            "model.layers.1.self_attn.o_proj",
            "model.layers.1.linear_attn.out_proj",
            "backbone.layers.1.mixer.out_proj",
        ],
    ),
    (
        "dense_mlp",
        &[
            "model.layers.0.mlp.down_proj",
            "model.layers.0.feed_forward.down_proj",
        ],
    ),
    (
        "routed_experts",
        &[
            "model.layers.1.mlp.experts.0.down_proj",
            "model.layers.1.block_sparse_moe.experts.0.w2",
            "model.layers.1.feed_forward.experts.0.down_proj",
        ],
    ),
    (
        "shared_experts",
        &[
            "model.layers.1.mlp.shared_experts.down_proj",
            "model.layers.1.mlp.shared_expert.down_proj",
            "model.layers.1.feed_forward.shared_expert.down_proj",
        ],
    ),
    ("lm_head", &["lm_head"]),
];

fn block_of(v: Option<&Value>) -> Option<u64> {
    v.and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_u64)
}

/// One compressed-tensors weight scheme (`config_groups.*.weights`).
fn compressed_tensors_format(w: &Map<String, Value>, fmt: &str) -> Result<WeightFormat, String> {
    let bits = w
        .get("num_bits")
        .and_then(Value::as_u64)
        .ok_or("quantization_config weights lack key 'num_bits'")?;
    let kind = w.get("type").and_then(Value::as_str).unwrap_or("int");
    let strategy = w.get("strategy").and_then(Value::as_str).unwrap_or("");
    let group = w.get("group_size").and_then(Value::as_u64);
    let symmetric = w.get("symmetric").and_then(Value::as_bool).unwrap_or(true);
    Ok(match (bits, kind) {
        (4, "int") => {
            let group = group.ok_or("quantization_config weights lack key 'group_size'")? as u32;
            if symmetric {
                WeightFormat::Int4Group { group }
            } else {
                WeightFormat::Int4GroupZero { group }
            }
        }
        // nvfp4-pack-quantized: group 16 with fp8 scales; mxfp4: group 32 with e8m0 scales
        (4, "float") if group == Some(32) || fmt.contains("mxfp4") => WeightFormat::Mxfp4,
        (4, "float") => WeightFormat::Nvfp4,
        (8, "float") if strategy == "block" || w.contains_key("block_structure") => {
            WeightFormat::Fp8Block {
                block: block_of(w.get("block_structure")).unwrap_or(128) as u32,
            }
        }
        (8, _) => WeightFormat::Int8Channel,
        _ => {
            return Err(format!(
                "compressed-tensors scheme {bits}-bit {kind} is not understood (known: 4-bit int groups, 4-bit float nvfp4/mxfp4, 8-bit float or int)"
            ))
        }
    })
}

/// The storage precision of each weight group, from `quantization_config`. An error says
/// which format was not understood (the caller plans the collectives and warns).
#[cfg(test)]
fn precision_from_quant(q: &Value) -> Result<Precision, String> {
    quant_rules(q).map(|r| r.precision(None))
}

/// A checkpoint's quantization: the format of its quantized linears and the modules it keeps
/// in bf16.
struct QuantRules {
    format: WeightFormat,
    ignore: Vec<IgnoreRule>,
}

impl QuantRules {
    /// The format of each weight group of the target's layers (`layer` `None`: the
    /// representative layers of [`GROUP_MODULES`]) or of layer `layer` (the MTP module's,
    /// which follows the target's last layer): bf16 where an ignore rule names the group.
    fn precision(&self, layer: Option<u64>) -> Precision {
        let pick = |modules: &[&str]| {
            let hit = modules.iter().any(|module| {
                let module = match layer {
                    Some(l) => module
                        .replace("layers.1.", &format!("layers.{l}."))
                        .replace("layers.0.", &format!("layers.{l}.")),
                    None => module.to_string(),
                };
                let prefixed = format!("language_model.{module}");
                let model_prefixed = format!(
                    "model.language_model.{}",
                    module.trim_start_matches("model.")
                );
                self.ignore.iter().any(|m| {
                    m.matches(&module) || m.matches(&prefixed) || m.matches(&model_prefixed)
                })
            });
            if hit {
                WeightFormat::Bf16
            } else {
                self.format
            }
        };
        let f: Vec<WeightFormat> = GROUP_MODULES.iter().map(|(_, m)| pick(m)).collect();
        Precision {
            attention: f[0],
            dense_mlp: f[1],
            routed_experts: f[2],
            shared_experts: f[3],
            lm_head: f[4],
        }
    }
}

/// The quantization of `quantization_config`: its format and ignore rules. An error says
/// which format was not understood.
fn quant_rules(q: &Value) -> Result<QuantRules, String> {
    let q = q
        .as_object()
        .ok_or("quantization_config must be an object")?;
    let method = q
        .get("quant_method")
        .and_then(Value::as_str)
        .ok_or("quantization_config lacks key 'quant_method'")?;
    let mut ignore = string_list(q.get("modules_to_not_convert"));
    let format = match method {
        // DeepSeek-V3, MiniMax-M2, Qwen3-FP8: 128x128 blocks; without weight_block_size one
        // scale per tensor (counted per row, a few bytes too many)
        "fp8" => {
            // fp8 checkpoints keep lm_head (and embeddings) in bf16.
            ignore.push("lm_head".into());
            match block_of(q.get("weight_block_size")) {
                Some(b) => WeightFormat::Fp8Block { block: b as u32 },
                None => WeightFormat::Int8Channel,
            }
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
            let fmt = q.get("format").and_then(Value::as_str).unwrap_or("");
            ignore.extend(string_list(q.get("ignore")));
            compressed_tensors_format(weights, fmt)?
        }
        // gpt-oss: experts in MXFP4, the rest (modules_to_not_convert) bf16
        // (HF transformers integrations/mxfp4.py)
        "mxfp4" => WeightFormat::Mxfp4,
        // NVIDIA ModelOpt (hf_quant_config.json folded into config.json)
        "modelopt" => {
            let inner = q.get("quantization").and_then(Value::as_object).unwrap_or(q);
            let algo = inner
                .get("quant_algo")
                .and_then(Value::as_str)
                .unwrap_or("");
            ignore.extend(string_list(inner.get("exclude_modules")));
            match algo.to_ascii_uppercase().as_str() {
                "FP8" | "FP8_PER_CHANNEL_PER_TOKEN" => WeightFormat::Int8Channel,
                "FP8_BLOCK" | "FP8_PB_WO" => WeightFormat::Fp8Block { block: 128 },
                "NVFP4" => WeightFormat::Nvfp4,
                "MXFP4" => WeightFormat::Mxfp4,
                other => return Err(format!("ModelOpt quant_algo '{other}' is not understood")),
            }
        }
        "awq" | "gptq" | "auto-round" => {
            let bits = q
                .get("bits")
                .or_else(|| q.get("w_bit"))
                .and_then(Value::as_u64)
                .unwrap_or(4);
            let group = q
                .get("group_size")
                .or_else(|| q.get("q_group_size"))
                .and_then(Value::as_u64)
                .unwrap_or(128) as u32;
            let sym = q.get("sym").and_then(Value::as_bool).unwrap_or(method == "gptq");
            match bits {
                4 if sym => WeightFormat::Int4Group { group },
                4 => WeightFormat::Int4GroupZero { group },
                8 => WeightFormat::Int8Channel,
                b => return Err(format!("{method} with {b}-bit weights is not understood")),
            }
        }
        other => {
            return Err(format!(
                "quant_method '{other}' is not understood (known: fp8, compressed-tensors, mxfp4, modelopt, awq, gptq)"
            ))
        }
    };
    let ignore = ignore
        .iter()
        .map(|p| IgnoreRule::new(p))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(QuantRules { format, ignore })
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
/// compressed-tensors does), a glob with `*` (`model.layers.*.self_attn`, as gpt-oss and
/// ModelOpt write them; matches the module or any module below it) or a module name (matched
/// exactly, as a dotted suffix, or as a parent of the module).
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
            None if p.contains('*') => {
                let pat = regex::escape(p).replace("\\*", ".*");
                Regex::new(&format!("^(?:.*\\.)?{pat}(?:\\..*)?$"))
                    .map(IgnoreRule::Regex)
                    .map_err(|e| format!("ignore pattern '{p}' is not a valid glob: {e}"))
            }
            None => Ok(IgnoreRule::Name(p.to_string())),
        }
    }

    fn matches(&self, module: &str) -> bool {
        match self {
            IgnoreRule::Regex(r) => r.is_match(module),
            IgnoreRule::Name(n) => {
                module == n
                    || module.ends_with(&format!(".{n}"))
                    || module.starts_with(&format!("{n}."))
                    || module.contains(&format!(".{n}."))
            }
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
        assert_eq!(s.attention, Attention::gqa(64, 8, 128));
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
    fn python_json_reads_infinity_and_nan_outside_strings_only() {
        let t = r#"{"a": [0.0, Infinity, -Infinity, NaN], "s": "Infinity \" NaN"}"#;
        let v: Value = serde_json::from_str(&python_json(t)).unwrap();
        assert_eq!(v["a"], json!([0.0, null, null, null]));
        assert_eq!(v["s"], "Infinity \" NaN");
    }

    #[test]
    fn glob_and_parent_ignore_rules() {
        let g = IgnoreRule::new("model.layers.*.self_attn").unwrap();
        assert!(g.matches("model.layers.1.self_attn.o_proj"));
        assert!(!g.matches("model.layers.1.mlp.experts.0.down_proj"));
        let n = IgnoreRule::new("self_attn").unwrap();
        assert!(n.matches("model.layers.1.self_attn.o_proj"));
        assert!(!n.matches("model.layers.1.mlp.down_proj"));
    }

    #[test]
    fn nvfp4_and_awq_formats() {
        let q = json!({"quant_method": "modelopt", "quantization": {"quant_algo": "NVFP4",
            "exclude_modules": ["lm_head", "model.layers.*.self_attn*"]}});
        let p = precision_from_quant(&q).unwrap();
        assert_eq!(
            (p.routed_experts, p.attention, p.lm_head),
            (WeightFormat::Nvfp4, WeightFormat::Bf16, WeightFormat::Bf16)
        );
        let q = json!({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true});
        assert_eq!(
            precision_from_quant(&q).unwrap().dense_mlp,
            WeightFormat::Int4GroupZero { group: 128 }
        );
        let e = precision_from_quant(&json!({"quant_method": "hqq"})).unwrap_err();
        assert!(e.contains("hqq"), "{e}");
    }

    #[test]
    fn a_known_architecture_missing_a_key_keeps_its_collectives() {
        let c = json!({"model_type": "mixtral", "num_hidden_layers": 4, "hidden_size": 1024,
            "vocab_size": 8000, "num_attention_heads": 8, "num_local_experts": 8,
            "intermediate_size": 2048});
        let s = from_json(&c, "m.json").unwrap();
        assert!(!s.weights_known);
        let w = s.warnings.join(" ");
        assert!(
            w.contains("num_experts_per_tok") && w.contains("collectives"),
            "{w}"
        );
        let opt = crate::model::ScheduleOptions::default();
        let sch = crate::model::build(&s, &opt, crate::model::Phase::Verify).unwrap();
        assert_eq!(sch.n_collectives(), 1 + 2 * 4 + 1);
        assert_eq!(sch.streamed_bytes(), 0);
    }

    /// A config with the keys vLLM's DeepSeek-V4 classes read (deepseek_v4.py), sizes chosen
    /// small for the hand calculation (not a published model's).
    fn dsv4(quant: bool) -> Value {
        let mut c = json!({"model_type": "deepseek_v4", "num_hidden_layers": 4,
            "hidden_size": 1024, "vocab_size": 8192, "num_attention_heads": 16,
            "num_key_value_heads": 1, "head_dim": 128, "qk_rope_head_dim": 32,
            "q_lora_rank": 256, "o_lora_rank": 128, "o_groups": 8,
            "n_routed_experts": 16, "num_experts_per_tok": 2, "moe_intermediate_size": 256,
            "n_shared_experts": 1, "num_hash_layers": 1, "compress_ratios": [0, 4, 128, 4],
            "hc_mult": 2, "hc_sinkhorn_iters": 20, "index_n_heads": 4, "index_head_dim": 32,
            "index_topk": 64, "expert_dtype": "fp4", "sliding_window": 128});
        if quant {
            c["quantization_config"] =
                json!({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]});
        }
        c
    }

    #[test]
    fn deepseek_v4_is_planned_as_moe_with_its_own_attention() {
        let s = from_json(&dsv4(false), "dsv4").unwrap();
        assert!(s.weights_known);
        // every layer MoE (no first_k_dense_replace), one shared expert of the experts' size
        assert_eq!(s.dense_layers(), 0);
        assert_eq!(
            s.moe,
            Some(Moe {
                routed_experts: 16,
                experts_per_token: 2,
                shared_experts: 1,
                moe_intermediate: 256,
                shared_intermediate: None
            })
        );
        assert!(matches!(
            s.attention,
            Attention::LatentMqa { o_groups: 8, .. }
        ));
        let w = s.warnings.join(" ");
        assert!(
            w.contains("compress_ratios") && w.contains("hc_mult"),
            "{w}"
        );
        assert!(!w.contains("not understood"), "{w}");
        // attention per layer per rank at TP=8, bf16 (vLLM deepseek_v4.py):
        //   fused_wqa_wkv replicated (256 + 128) x 1024 = 393,216
        //   wq_b 16/8 x 128 = 256 rows x 256 = 65,536
        //   wo_a 8/8 x 128 = 128 rows x 16 x 128 / 8 = 256 cols = 32,768
        //   wo_b 1024 x 128 = 131,072
        // 622,592 weights x 2 B = 1,245,184 B per layer
        let opt = crate::model::ScheduleOptions::default();
        let sch = crate::model::build(&s, &opt, crate::model::Phase::Verify).unwrap();
        let att: Vec<u64> = sch
            .ops
            .iter()
            .filter_map(|o| match o {
                crate::model::Op::Compute {
                    kind: crate::model::schedule::ComputeKind::Attention,
                    weight_bytes,
                    ..
                } => Some(*weight_bytes),
                _ => None,
            })
            .collect();
        assert_eq!(att, [1_245_184; 4]);
        // 1 + 2 x 4 all-reduces and the logits all-gather
        assert_eq!(sch.n_collectives(), 10);
        // fp8 blocks everywhere, the routed experts in MXFP4 (expert_dtype fp4), LM head bf16
        let q = from_json(&dsv4(true), "dsv4").unwrap();
        assert_eq!(q.precision.routed_experts, WeightFormat::Mxfp4);
        assert_eq!(q.precision.attention, WeightFormat::Fp8Block { block: 128 });
        assert_eq!(
            q.precision.shared_experts,
            WeightFormat::Fp8Block { block: 128 }
        );
        assert_eq!(q.precision.lm_head, WeightFormat::Bf16);
        let mut f8 = dsv4(true);
        f8["expert_dtype"] = "fp8".into();
        let q = from_json(&f8, "dsv4").unwrap();
        assert_eq!(
            q.precision.routed_experts,
            WeightFormat::Fp8Block { block: 128 }
        );
        // o_groups that TP does not divide is refused by the schedule
        let opt = crate::model::ScheduleOptions {
            tp: 16,
            ..Default::default()
        };
        let mut g = dsv4(false);
        g["num_attention_heads"] = 32.into();
        let s = from_json(&g, "dsv4").unwrap();
        let e = crate::model::build(&s, &opt, crate::model::Phase::Verify).unwrap_err();
        assert!(e.to_string().contains("o_groups"), "{e}");
    }

    #[test]
    fn a_new_model_type_with_generic_moe_keys_keeps_its_layer_pattern() {
        // Qwen3-MoE's keys under a name the table lacks: experts on every 2nd layer
        // ((l + 1) % 2 == 0) except those in mlp_only_layers: of 6 layers, 1, 3, 5 by the step,
        // less 3: MoE on layers 1 and 5, dense (intermediate_size) on 0, 2, 3, 4
        let c = json!({"model_type": "qwen_next_next", "num_hidden_layers": 6,
            "hidden_size": 1024, "vocab_size": 8192, "num_attention_heads": 16,
            "num_key_value_heads": 4, "head_dim": 64, "num_experts": 32,
            "num_experts_per_tok": 4, "moe_intermediate_size": 256, "intermediate_size": 2048,
            "decoder_sparse_step": 2, "mlp_only_layers": [3]});
        let s = from_json(&c, "q").unwrap();
        let moe: Vec<bool> = s
            .layer_blocks()
            .iter()
            .map(|b| matches!(b.ffn, Some(Ffn::Moe { .. })))
            .collect();
        assert_eq!(moe, [false, true, false, false, false, true]);
        assert_eq!(s.dense_layers(), 4);
        let w = s.warnings.join(" ");
        assert!(
            w.contains("not in the architecture table")
                && w.contains("a guess")
                && w.contains("on 2 layers")
                && w.contains("decoder_sparse_step")
                && w.contains("mlp_only_layers"),
            "{w}"
        );
        assert!(s.read_as.as_deref().unwrap().contains("a guess"));
    }

    #[test]
    fn fields_beyond_any_real_model_are_refused_before_anything_is_sized() {
        let base = || {
            json!({"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 1024,
                "vocab_size": 8000, "num_attention_heads": 8, "intermediate_size": 2048})
        };
        for (key, value, says) in [
            (
                "num_hidden_layers",
                json!(1_000_000_000_000u64),
                "at most 1024",
            ),
            ("num_hidden_layers", json!(100_000), "at most 1024"),
            ("hidden_size", json!(1u64 << 40), "at most 131072"),
            ("vocab_size", json!(0), "is 0"),
            ("intermediate_size", json!(1u64 << 30), "at most 1048576"),
            ("num_attention_heads", json!(1 << 20), "at most 4096"),
        ] {
            let mut c = base();
            c[key] = value.clone();
            let e = from_json(&c, "c").unwrap_err();
            assert!(e.contains(key) && e.contains(says), "{key} {value}: {e}");
        }
        // the same bound holds for a model_type the table lacks (collectives-only path)
        let mut c = base();
        c["model_type"] = "mystery".into();
        c["num_hidden_layers"] = json!(1u64 << 40);
        assert!(from_json(&c, "c")
            .unwrap_err()
            .contains("num_hidden_layers"));
        // more experts per token than experts
        let mut c = base();
        c["model_type"] = "mixtral".into();
        c["num_local_experts"] = 8.into();
        c["num_experts_per_tok"] = 9.into();
        let s = from_json(&c, "c").unwrap();
        assert!(!s.weights_known);
        assert!(s.warnings.join(" ").contains("give 1 to 8"));
    }

    #[test]
    fn a_record_or_a_schedule_given_as_a_config_is_named() {
        let rec = json!({"schema_version": 1, "kind": "verify", "provenance": {}, "result": {}});
        let e = from_json(&rec, "v.json").unwrap_err();
        assert!(
            e.contains("not a model's config.json") && e.contains("'verify'"),
            "{e}"
        );
        let plan = json!({"model": "kimi", "phase": "verify", "tp": 8, "ops": []});
        let e = from_json(&plan, "plan.json").unwrap_err();
        assert!(
            e.contains("a schedule") && e.contains("plan --format json"),
            "{e}"
        );
    }

    #[test]
    fn load_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.json");
        std::fs::write(&p, "{not json").unwrap();
        let e = load(&p).unwrap_err().to_string();
        assert!(e.contains("config.json") && e.contains("not JSON"), "{e}");
        let e = load(&dir.path().join("absent.json"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("absent.json") && e.contains("cannot read"),
            "{e}"
        );
    }
}
