//! `verifybench explain` checks its evidence against the workload it prices: a trace of another
//! job (the public DLRM and HTA training samples of tests/data/traces) or of another
//! workload (SYNTHETIC traces made by `tests/support/synth.rs`, with the sizes of a schedule
//! computed here by hand) is refused with exit 2 and the flag that fixes it; an NCCL log of
//! another machine (the real 2-H200 logs of tests/data) and a server log of another model are
//! named. Server-log lines are written in each test, in the format of the engine file named
//! beside them.

use std::path::{Path, PathBuf};

use crate::common::{refused, vb};
use crate::synth::{self, SynthSpec};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn json(args: &[&str]) -> serde_json::Value {
    let o = vb().args(args).args(["--format", "json"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn notes(v: &serde_json::Value) -> String {
    v["result"]["data"]["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The 8 ranks of PARAM's DLRM training step (tests/data/traces/README.md): per rank 8 NCCL
/// kernels, 5 `ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t` and 3
/// `ncclKernel_AllReduce_RING_LL_Sum_float` (`zcat worker0_* | grep -o '"name": *"ncclKernel[^"(]*'
/// | sort | uniq -c`), `"world_size": 8`, and backward kernels among the rest. Not priced as
/// the Kimi-K2.5 verify of 124 collectives: refused by `explain` with and without `--gpus 8`
/// (the world it ran on), and by `breakeven --from-trace verify=`.
#[test]
fn the_dlrm_training_sample_is_refused_as_a_training_trace() {
    let dir = data("traces/param-dlrm-8ranks");
    let d = dir.to_str().unwrap();
    let said = [
        "param-dlrm-8ranks (8 files): a training trace, not a verify",
        "8 collectives per step (5 send_recv + 3 all_reduce) in a world of 8 ranks",
        "backward",
        "--observed",
    ];
    refused(&["explain", "--trace", d], &said);
    refused(&["explain", "--trace", d, "--gpus", "8"], &said);
    refused(
        &[
            "breakeven",
            "--from-trace",
            &format!("verify={d}"),
            "--decode-ms",
            "12.2",
            "--accept-length",
            "2.5",
        ],
        &[
            "--from-trace verify=",
            "a training trace, not a verify",
            "in a world of 8 ranks",
            "--verify-ms",
        ],
    );
}

/// Holistic Trace Analysis' df_index_resolver sample (tests/data/traces/README.md: world size
/// 2, 404 NCCL all-reduces per `ProfilerStep#`) is a training job too: refused as one, with
/// its count, where its 2 ranks would otherwise price a TP=2 verify.
#[test]
fn the_hta_training_sample_is_refused_as_a_training_trace() {
    let t = data("traces/hta");
    refused(
        &["explain", "--trace", t.to_str().unwrap()],
        &[
            "a training trace, not a verify",
            "404 collectives per step (404 all_reduce) in a world of 2 ranks",
        ],
    );
}

/// Synthetic traces of 8 ranks, 3 steps, with `all_reduces` all-reduces of `ar` elements and
/// one all-gather of `ag` elements per step (bf16).
fn synth_dir(all_reduces: usize, ar: u64, ag: u64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let s = SynthSpec {
        ranks: 8,
        steps: 3,
        all_reduces,
        ar_elements: ar,
        ag_elements: ag,
        jitter_us: 0.0,
        ..Default::default()
    };
    synth::write_dir(&s, dir.path(), true).unwrap();
    dir
}

/// Kimi-K2.5 (hidden 7168, vocab 163,840) verified at 8 tokens on 8 ranks: all-reduces of
/// 8 x 7168 = 57,344 elements (114,688 B, 8/3 = 2.67x the 3-token schedule's 43,008 B) and an
/// all-gather of 8 x 163,840 / 8 = 163,840 elements. Refused at the default 3 tokens with
/// `--tokens 8` named; priced with it.
#[test]
fn a_trace_of_another_token_count_names_tokens_and_passes_with_it() {
    let dir = synth_dir(123, 8 * 7168, 8 * 163_840 / 8);
    let p = dir.path().to_str().unwrap();
    refused(
        &["explain", "--trace", p],
        &["114688 B", "43008 B", "2.67x apart", "--tokens 8"],
    );
    let v = json(&["explain", "--trace", p, "--tokens", "8"]);
    assert!(
        v["result"]["data"]["schedule"]
            .as_str()
            .unwrap()
            .contains("8 tokens: 124 collectives"),
        "{v}"
    );
    assert_eq!(notes(&v).matches("the trace's").count(), 0, "{}", notes(&v));
}

/// gpt-oss-120b (tests/data/configs, hidden 2880, 36 layers, vocab 201,088 at TP=8 and 3
/// tokens, as `plan` prints it): 73 all-reduces of 3 x 2880 = 8640 elements (17,280 B: 43,008 /
/// 17,280 = 2.49x below Kimi's, and not a whole number of Kimi's 14,336 B per token) and one
/// all-gather of 75,408. Refused under the default model with --model-config named; priced
/// with that config.
#[test]
fn a_trace_of_another_model_names_the_model_flags_and_passes_with_its_config() {
    let dir = synth_dir(73, 8640, 75_408);
    let p = dir.path().to_str().unwrap();
    refused(
        &["explain", "--trace", p],
        &["17280 B", "2.49x apart", "--model-config"],
    );
    let config = data("configs/openai--gpt-oss-120b_config.json");
    let v = json(&[
        "explain",
        "--trace",
        p,
        "--model-config",
        config.to_str().unwrap(),
    ]);
    assert!(
        v["result"]["data"]["schedule"]
            .as_str()
            .unwrap()
            .contains("74 collectives (73 all_reduce + 1 all_gather)"),
        "{v}"
    );
}

/// 404 all-reduces per step (the HTA sample's count) at Kimi's size: 281 all-reduces and the
/// all-gather without a counterpart, 282 of 404.
#[test]
fn far_more_collectives_per_step_than_the_schedule_are_refused() {
    let dir = synth_dir(403, 3 * 7168, 3 * 163_840 / 8);
    refused(
        &["explain", "--trace", dir.path().to_str().unwrap()],
        &[
            "404 collectives per step (403 all_reduce + 1 all_gather)",
            "124 (123 all_reduce + 1 all_gather",
            "--model NAME or --model-config",
        ],
    );
}

/// The real NCCL log of 2 H200s over NVLink (tests/data, NCCL 2.28.3) given for an 8-GPU PCIe
/// server: named in a note (nothing is priced from it), its machine in the evidence line, and
/// the traps it alone would check not checked (never `not found` for a machine it is not of).
#[test]
fn a_two_rank_nvlink_nccl_log_for_eight_pcie_gpus_is_named() {
    let log = data("nccl-2.28.3-h200x2-procs-default.log");
    let v = json(&[
        "explain",
        "--verify-ms",
        "30",
        "--gpus",
        "8",
        "--nccl-log",
        log.to_str().unwrap(),
    ]);
    let n = notes(&v);
    for want in [
        "nccl-2.28.3-h200x2-procs-default.log is the NCCL log of another machine",
        "2 ranks, P2P/CUMEM over NVL",
        "no communicator of 8 ranks",
        "NVLink where pcie-gen5 is PCIe",
        "its traps (the variables NCCL read, its topology search) are not checked",
    ] {
        assert!(n.contains(want), "{want}: {n}");
    }
    let ev = v["result"]["data"]["evidence"].to_string();
    assert!(ev.contains("2 ranks, P2P/CUMEM over NVL, 2 GPUs"), "{ev}");
    for id in ["nccl-graph-search-sys", "settings-not-applied"] {
        let t = trap(&v, id);
        assert_eq!(t["status"], "not_checked", "{t}");
        assert!(
            t["detail"].as_str().unwrap().contains(
                "the NCCL log given is of another machine than the 8 GPUs over pcie-gen5 priced"
            ),
            "{t}"
        );
    }
    // the same log for the 2 NVLink GPUs it came from: no note
    let v = json(&[
        "explain",
        "--verify-ms",
        "30",
        "--gpus",
        "2",
        "--link",
        "nvlink-h200",
        "--nccl-log",
        log.to_str().unwrap(),
    ]);
    assert!(!notes(&v).contains("another machine"), "{}", notes(&v));
    // and its clean topology search is checked there: not found
    assert_eq!(trap(&v, "nccl-graph-search-sys")["status"], "not_found");
}

/// SGLang logs its arguments at start-up (python/sglang/srt/entrypoints/engine.py,
/// `server_args=ServerArgs(model_path=...`); a log of DeepSeek-V3 against the default Kimi-K2.5
/// is named, and not with `--model deepseek-v3`.
#[test]
fn a_server_log_of_another_model_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sglang.log");
    std::fs::write(
        &log,
        "[2026-01-05 10:00:00] server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-V3', tokenizer_path='deepseek-ai/DeepSeek-V3', tp_size=8)\n\
[2026-01-05 10:01:00 TP0] Decode batch. #running-req: 1, #token: 64, token usage: 0.00, accept len: 2.40, cuda graph: True, gen throughput (token/s): 90.00, #queue-req: 0,\n",
    )
    .unwrap();
    let l = log.to_str().unwrap();
    let v = json(&["explain", "--verify-ms", "30", "--server-log", l]);
    let n = notes(&v);
    assert!(
        n.contains("the server ran deepseek-ai/DeepSeek-V3, but the model priced is kimi-k2.5"),
        "{n}"
    );
    let ev = v["result"]["data"]["evidence"].to_string();
    assert!(ev.contains("model deepseek-ai/DeepSeek-V3"), "{ev}");
    let v = json(&[
        "explain",
        "--verify-ms",
        "30",
        "--server-log",
        l,
        "--model",
        "deepseek-v3",
    ]);
    assert!(!notes(&v).contains("the server ran"), "{}", notes(&v));
}

/// vLLM lowers its CUDA-graph mode when the attention backend cannot run a full graph for a
/// verify (vllm/v1/worker/gpu_model_runner.py, the cudagraph_mode resolution; the line as it
/// prints it): the verify ran partly eagerly, and explain says so, quoting the line.
#[test]
fn a_vllm_log_that_lowers_the_graph_mode_is_an_eager_verify() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("vllm.log");
    std::fs::write(
        &log,
        "(EngineCore_DP0 pid=167) INFO 05-03 18:41:20 [core.py:93] Initializing a V1 LLM engine (v0.11.0) with config: model='moonshotai/Kimi-K2.5', speculative_config=SpeculativeConfig(method='eagle3', model='x/eagle3', num_spec_tokens=2), enforce_eager=False\n\
(EngineCore_DP0 pid=167) WARNING 05-03 18:41:32 [gpu_model_runner.py:4100] CUDAGraphMode.FULL_AND_PIECEWISE is not supported with spec-decode for attention backend FlashInferBackend (support: AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); setting cudagraph_mode=PIECEWISE\n",
    )
    .unwrap();
    let v = json(&[
        "explain",
        "--verify-ms",
        "30",
        "--gpus",
        "8",
        "--decode-ms",
        "12.2",
        "--accept-length",
        "2.5",
        "--server-log",
        log.to_str().unwrap(),
    ]);
    let d = &v["result"]["data"];
    let trap = d["traps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["rule"]["id"] == "eager-verify")
        .unwrap();
    assert_eq!(trap["status"], "found", "{trap}");
    let detail = trap["detail"].as_str().unwrap();
    assert!(
        detail.contains("vllm.log: `CUDAGraphMode.FULL_AND_PIECEWISE is not supported with spec-decode for attention backend FlashInferBackend (support: AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); setting cudagraph_mode=PIECEWISE`"),
        "{detail}"
    );
    assert!(detail.contains("attention runs eagerly"), "{detail}");
    assert_eq!(d["scenarios"][0]["name"], "as it ran (partly eager)", "{d}");
    let summary = d["summary"][0].as_str().unwrap();
    assert!(
        summary.starts_with(
            "The server log says the verify ran partly eagerly (vllm.log: `CUDAGraphMode."
        ),
        "{summary}"
    );
    // the model it names is the one priced: no note about it
    assert!(!notes(&v).contains("the server ran"), "{}", notes(&v));
}

/// SGLang's decode lines (python/sglang/srt/managers/scheduler.py; `Decode batch,` as SGLang
/// writes it since 0.5) that all say `cuda graph: False`: the verify ran eagerly. The prefill
/// line's `cuda graph: False` is the prefill's and is not counted: 2 decode lines, 2 False.
#[test]
fn sglang_decode_lines_without_a_graph_are_an_eager_verify() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sglang.log");
    std::fs::write(
        &log,
        "[2026-01-05 10:00:00] server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5', tp_size=8, speculative_algorithm='EAGLE3')\n\
[2026-01-05 10:00:59 TP0] Prefill batch, #new-seq: 1, #new-token: 512, #cached-token: 0, #running-req: 0, #queue-req: 0, cuda graph: False, input throughput (token/s): 6342.89\n\
[2026-01-05 10:01:00 TP0] Decode batch, #running-req: 1, #token: 600, token usage: 0.00, accept len: 2.40, accept rate: 0.47, cuda graph: False, gen throughput (token/s): 40.00, #queue-req: 0\n\
[2026-01-05 10:01:10 TP0] Decode batch, #running-req: 1, #token: 640, token usage: 0.00, accept len: 2.60, accept rate: 0.53, cuda graph: False, gen throughput (token/s): 42.00, #queue-req: 0\n",
    )
    .unwrap();
    let v = json(&[
        "explain",
        "--verify-ms",
        "30",
        "--gpus",
        "8",
        "--server-log",
        log.to_str().unwrap(),
    ]);
    let d = &v["result"]["data"];
    assert_eq!(d["scenarios"][0]["name"], "as it ran (eager)", "{d}");
    let summary = d["summary"][0].as_str().unwrap();
    assert!(
        summary.starts_with("The server log says the verify ran eagerly (sglang.log: `Decode batch, #running-req: 1, #token: 600"),
        "{summary}"
    );
    assert!(
        summary.contains("all 2 decode lines say `cuda graph: False`"),
        "{summary}"
    );
    let trap = d["traps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["rule"]["id"] == "eager-verify")
        .unwrap();
    assert_eq!(trap["status"], "found", "{trap}");
    // the model it names is the one priced (kimi-k2.5, the default): no note about it
    assert!(!notes(&v).contains("the server ran"), "{}", notes(&v));
}

/// vLLM's `--enforce-eager` as vllm/config/vllm.py logs it: an eager verify.
#[test]
fn a_vllm_log_of_enforce_eager_is_an_eager_verify() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("vllm.log");
    std::fs::write(
        &log,
        "(APIServer pid=1) INFO 11-25 08:00:42 [vllm.py:500] Cudagraph is disabled under eager mode\n\
(APIServer pid=1) INFO 11-25 08:01:42 [loggers.py:123] SpecDecoding metrics: Mean acceptance length: 2.50, Accepted throughput: 10.00 tokens/s, Drafted throughput: 20.00 tokens/s, Accepted: 100 tokens, Drafted: 200 tokens, Per-position acceptance rate: 0.600, 0.400\n",
    )
    .unwrap();
    let v = json(&[
        "explain",
        "--verify-ms",
        "30",
        "--server-log",
        log.to_str().unwrap(),
    ]);
    let d = &v["result"]["data"];
    assert_eq!(d["scenarios"][0]["name"], "as it ran (eager)", "{d}");
    assert!(
        d["summary"][0]
            .as_str()
            .unwrap()
            .contains("(vllm.log: `Cudagraph is disabled under eager mode`): --enforce-eager"),
        "{d}"
    );
}

fn trap<'a>(v: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    v["result"]["data"]["traps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["rule"]["id"] == id)
        .unwrap()
}

/// A vLLM MTP log read whole (tests/data/vllm-glm51-mtp3-tp8.log, built from vLLM's log
/// formats: see tests/data/README.md): k = 3 from its speculative config (not the default 2),
/// the one-request rate of its 6 steady intervals (535.0 / 6 = 89.17 tok/s, where every line
/// with one running request averages 743.2 / 9 = 82.58), the custom all-reduce on in its 8
/// workers as the answer says it, its figures mapped to the accept length, and the graph mode
/// lowered for the speculative arm alone.
#[test]
fn a_vllm_mtp_log_is_read_whole() {
    let log = data("vllm-glm51-mtp3-tp8.log");
    let v = json(&[
        "explain",
        "--gpus",
        "8",
        "--decode-ms",
        "20.14",
        "--server-log",
        log.to_str().unwrap(),
    ]);
    let d = &v["result"]["data"];
    assert_eq!(d["cycle"]["draft_steps"], 3, "{}", d["cycle"]);
    assert_eq!(d["workload"]["tokens"], 4);
    let n = notes(&v);
    assert!(
        n.contains("k = 3 draft steps, as the server log says (vllm-glm51-mtp3-tp8.log: `SpeculativeConfig(method='mtp', model='zai-org/GLM-5.1-FP8', num_spec_tokens=3)`)"),
        "{n}"
    );
    assert!(
        n.contains("1 + accepted tokens / drafts = 1 + 5006 / 4100 = 2.22"),
        "{n}"
    );
    assert!(n.contains("1 + k x rate = 1 + 3 x 0.407 = 2.22"), "{n}");
    let logged = d["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "as the server log measured it")
        .unwrap();
    let tps = logged["tokens_per_s"].as_f64().unwrap();
    assert!((tps - 535.0 / 6.0).abs() < 1e-9, "{tps}");
    assert!(
        logged["verify"]["how"]
            .as_str()
            .unwrap()
            .contains("lines 47, 49, 51, 57, 59, 65"),
        "{logged}"
    );
    let summary = d["summary"].to_string();
    assert!(
        summary.contains("vllm-glm51-mtp3-tp8.log says the engine's custom all-reduce is on in all 8 workers that print it"),
        "{summary}"
    );
    assert!(
        !summary.contains("SGLang and vLLM keep their custom all-reduce off"),
        "{summary}"
    );
    assert_eq!(trap(&v, "engine-custom-ar-off")["status"], "not_found");
    let eager = trap(&v, "eager-verify");
    assert_eq!(eager["status"], "found");
    assert!(
        eager["detail"].as_str().unwrap().contains(
            "the speculative arm ran PIECEWISE where the same server without speculation keeps FULL_AND_PIECEWISE"
        ),
        "{eager}"
    );
}

/// vLLM's accept rate (accepted / drafted tokens) given to `--accept-rate`, which takes one
/// per-token rate: 0.407 becomes 1 + 0.407 + 0.407^2 + 0.407^3 = 1.64 where vLLM's means 1 +
/// 3 x 0.407 = 2.22 (the GLM-5.1 DCP8 C1 run of the published runs): warned, with the flag to
/// use instead, when it matches the log's rate, or when the engine is said to be vLLM.
#[test]
fn a_vllm_accept_rate_given_to_accept_rate_is_warned() {
    let log = data("vllm-glm51-mtp3-tp8.log");
    let v = json(&[
        "explain",
        "--gpus",
        "8",
        "--decode-ms",
        "20.14",
        "--accept-rate",
        "0.407",
        "--server-log",
        log.to_str().unwrap(),
    ]);
    let n = notes(&v);
    assert!(
        n.contains("warning: --accept-rate 0.407 matches vllm-glm51-mtp3-tp8.log's `Avg Draft acceptance rate: 40.7%`"),
        "{n}"
    );
    assert!(n.contains("give --accept-length 2.22 instead"), "{n}");
    let v = json(&[
        "explain",
        "--gpus",
        "8",
        "--decode-ms",
        "20.14",
        "--draft-steps",
        "3",
        "--accept-rate",
        "0.407",
        "--engine",
        "vllm",
    ]);
    assert!(
        notes(&v).contains("warning: --accept-rate 0.407 is given where --engine vllm says vLLM"),
        "{}",
        notes(&v)
    );
    // without vLLM in the evidence: no warning
    let v = json(&[
        "explain",
        "--gpus",
        "8",
        "--decode-ms",
        "20.14",
        "--draft-steps",
        "3",
        "--accept-rate",
        "0.407",
    ]);
    assert!(!notes(&v).contains("--accept-rate 0.407"), "{}", notes(&v));
}
