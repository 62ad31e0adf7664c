//! `choose` end to end through the cost model: Kimi-K2.5 at TP8 and a GLM-5-class model at TP4,
//! at 1 and 8 requests, print the crossover, the key and the engines' settings; the JSON
//! carries each shape's decision with its figures and interval; the decision file is reused
//! while its key holds and measured again, naming the part, when the world size or the hidden
//! size changes; `explain --allreduce-choice` prices with it.

use crate::common::vb;

const GLM5: &str = "tests/data/configs/zai-org--GLM-5_config.json";

fn repo(p: &str) -> String {
    format!("{}/{p}", env!("CARGO_MANIFEST_DIR"))
}

/// stdout and stderr of `choose --backend model ARGS`, which must succeed.
fn choose(dir: &std::path::Path, args: &[&str]) -> (String, String) {
    let out = vb()
        .current_dir(dir)
        .args(["choose", "--backend", "model", "--concurrency", "1,8"])
        .args(args)
        .output()
        .unwrap();
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{args:?}\n{so}\n{se}");
    (so, se)
}

#[test]
fn kimi_tp8_and_glm5_tp4_print_the_crossover_the_key_and_the_engine_settings() {
    let dir = tempfile::tempdir().unwrap();
    let glm = repo(GLM5);
    // hidden 7168 and 6144, bf16: 14,336 and 12,288 B per token; the all-reduces of the decode
    // (C tokens), the verify (4 C) and the draft step (C) at C = 1 and 8.
    let cases: [(&[&str], u64, u64, [u64; 4]); 2] = [
        (
            &["--model", "kimi-k2.5", "--tp", "8"],
            8,
            7168,
            [14_336, 57_344, 114_688, 458_752],
        ),
        (
            &["--model-config", &glm, "--tp", "4"],
            4,
            6144,
            [12_288, 49_152, 98_304, 393_216],
        ),
    ];
    for (args, tp, hidden, sizes) in cases {
        let (text, _) = choose(dir.path(), args);
        assert!(text.contains("MODELED by the cost model"), "{text}");
        assert!(text.contains("crossover, graph: "), "{text}");
        assert!(text.contains("crossover, eager: "), "{text}");
        assert!(text.contains("key of the decision:"), "{text}");
        assert!(
            text.contains(&format!("  world size           {tp}\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!("  hidden size          {hidden}\n")),
            "{text}"
        );
        assert!(
            text.contains("  tokens               1, 4, 8, 32\n"),
            "{text}"
        );
        for engine in ["vLLM   ", "SGLang "] {
            assert!(
                text.contains(&format!("  {engine} --disable-custom-all-reduce: ")),
                "{text}"
            );
        }
        assert!(text.contains("[vllm/config/parallel.py]"), "{text}");
        assert!(
            text.contains(
                "[python/sglang/srt/distributed/device_communicators/custom_all_reduce.py]"
            ),
            "{text}"
        );
        let (json, _) = choose(dir.path(), &[args, &["--format", "json"]].concat());
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["kind"], "other");
        assert_eq!(v["result"]["name"], "allreduce_choice");
        assert_eq!(v["source"], "modeled");
        let d = &v["result"]["data"];
        assert_eq!(d["world_size"], tp);
        assert_eq!(d["key"]["hidden_size"], hidden);
        let ar: Vec<&serde_json::Value> = d["shapes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["shape"]["kind"] == "all_reduce")
            .collect();
        let got: Vec<u64> = ar
            .iter()
            .map(|s| s["shape"]["bytes"].as_u64().unwrap())
            .collect();
        assert_eq!(got, sizes);
        for s in &ar {
            for mode in ["graph", "eager"] {
                let m = &s[mode];
                let choice = m["choice"].as_str().unwrap();
                let fig = m["figures"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|f| f["candidate"] == choice)
                    .unwrap();
                assert_eq!(fig["per_round_us"].as_array().unwrap().len(), 3);
                assert!(fig["median_us"].as_f64().unwrap() > 0.0);
                if m["verdict"] == "wins" {
                    let ratio = fig["ratio"].as_f64().unwrap();
                    let iv = fig["interval"].as_array().unwrap();
                    assert!(iv[1].as_f64().unwrap() < 0.99 && ratio < 0.99, "{fig}");
                    assert!(fig["gain_us"].as_f64().unwrap() >= 0.25, "{fig}");
                }
            }
        }
    }
}

#[test]
fn the_decision_file_is_reused_while_its_key_holds_and_a_changed_part_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let glm = repo(GLM5);
    let first = choose(dir.path(), &["--tp", "8", "--decision", "d.json"]);
    assert!(
        first.0.ends_with("decision file: d.json written\n"),
        "{}",
        first.0
    );
    let written = std::fs::read_to_string(dir.path().join("d.json")).unwrap();
    // The same key: reused, said on stderr and in the last line; the file untouched.
    let (text, err) = choose(dir.path(), &["--tp", "8", "--decision", "d.json"]);
    assert!(
        err.contains(
            "--decision d.json: its key holds: the decision is reused, nothing is measured"
        ),
        "{err}"
    );
    assert!(text.ends_with("decision file: d.json reused: its key holds, nothing was measured (--remeasure measures again)\n"), "{text}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("d.json")).unwrap(),
        written
    );
    // Another world size: named, measured again, written under the new key.
    let (text, err) = choose(dir.path(), &["--tp", "4", "--decision", "d.json"]);
    assert!(
        err.contains("the key changed (world size was 8, now 4): measuring again"),
        "{err}"
    );
    assert!(
        text.ends_with("the key changed (world size was 8, now 4): measured again and written\n"),
        "{text}"
    );
    // Another hidden size at the same world size.
    let (_, err) = choose(
        dir.path(),
        &["--model-config", &glm, "--tp", "4", "--decision", "d.json"],
    );
    assert!(
        err.contains("the key changed (hidden size was 7168, now 6144): measuring again"),
        "{err}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("d.json")).unwrap()).unwrap();
    assert_eq!(v["result"]["data"]["key"]["hidden_size"], 6144);
    // A file of another kind is refused, not overwritten.
    let out = vb()
        .current_dir(dir.path())
        .args(["choose", "--backend", "model", "--decision", &glm])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("a model's config.json"));
}

#[test]
fn explain_prices_its_one_shot_rows_with_a_decision_file() {
    let dir = tempfile::tempdir().unwrap();
    choose(dir.path(), &["--tp", "8", "--decision", "d.json"]);
    let out = vb()
        .current_dir(dir.path())
        .args([
            "explain",
            "--observed",
            "122x0.2ms",
            "--verify-ms",
            "30",
            "--decode-ms",
            "12.2",
            "--accept-length",
            "2.5",
            "--draft-steps",
            "3",
            "--gpus",
            "8",
            "--allreduce-choice",
            "d.json",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    // k = 3: a verify of 4 tokens, whose all-reduces of 57,344 B the decision holds (two-shot
    // on pcie-gen5 at TP8: 17.4 us against one-shot's 22.5 us).
    assert!(
        text.contains("the all-reduces as --allreduce-choice d.json chose per size (modeled, paired ratios to NCCL's default in CUDA graphs): two-shot at 57,344 B"),
        "{text}"
    );
}

#[test]
fn bad_requests_are_refused_with_the_flag_named() {
    for (args, says) in [
        (&["--tp", "16"][..], "run on 2 to 8 ranks (got 16)"),
        (&["--concurrency", "0"][..], "--concurrency 0"),
        (&["--draft-steps", "0"][..], "--draft-steps 0"),
        (&["--rounds", "0"][..], "--rounds 0"),
        (
            &["--concurrency", "20000"][..],
            "--concurrency 20000 with --draft-steps 3",
        ),
        (&["--nccl-proto", "LL256"][..], "--nccl-proto LL256"),
    ] {
        let out = vb()
            .args(["choose", "--backend", "model"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn the_measured_pipeline_of_child_processes_decides_as_the_model_in_process() {
    // --debug-children-on-model runs every point as `--backend nccl` does (a fresh child
    // process per run and round, the first round's probe run first), each child a `collective
    // --backend model`: its decision must be the in-process model's, figure for figure.
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--tp",
        "4",
        "--nccl-proto",
        "LL",
        "--rounds",
        "2",
        "--format",
        "json",
    ];
    let decision = |extra: &[&str]| -> serde_json::Value {
        let (json, _) = choose(dir.path(), &[&args[..], extra].concat());
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        v["result"]["data"].clone()
    };
    let a = decision(&[]);
    let b = decision(&["--debug-children-on-model"]);
    let (sa, sb) = (
        a["shapes"].as_array().unwrap(),
        b["shapes"].as_array().unwrap(),
    );
    assert_eq!(sa.len(), sb.len());
    assert_eq!(sa.len(), 10, "4 all-reduce and 6 all-gather shapes");
    for (x, y) in sa.iter().zip(sb) {
        assert_eq!(x["shape"], y["shape"]);
        for mode in ["graph", "eager"] {
            assert_eq!(x[mode]["choice"], y[mode]["choice"], "{}", x["shape"]);
            let figs = |v: &serde_json::Value| -> Vec<(String, Vec<f64>)> {
                v[mode]["figures"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| {
                        let r = f["per_round_us"].as_array().unwrap();
                        (
                            f["candidate"].as_str().unwrap().to_string(),
                            r.iter().map(|t| t.as_f64().unwrap()).collect(),
                        )
                    })
                    .collect()
            };
            let (fx, fy) = (figs(x), figs(y));
            assert_eq!(fx.len(), fy.len());
            for ((cx, tx), (cy, ty)) in fx.iter().zip(&fy) {
                assert_eq!(cx, cy);
                for (p, q) in tx.iter().zip(ty) {
                    assert!((p - q).abs() < 1e-6, "{cx}: {tx:?} {ty:?}");
                }
            }
        }
    }
    assert_eq!(a["crossover_graph_words"], b["crossover_graph_words"]);
}
