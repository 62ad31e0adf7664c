//! Acceptance as each engine prints it (issue 28 item 7), through the binary: vLLM's
//! per-position rates are fractions of all drafts (1 + their sum), conditional rates multiply,
//! and `--accept-from-log` reads vLLM's `SpecDecoding metrics` lines as well as SGLang's
//! `accept len:` lines, naming the engine.

use crate::common::vb;

fn accept_length(args: &[&str]) -> (f64, String) {
    let out = vb()
        .args([
            "breakeven",
            "--decode-ms",
            "12.2",
            "--verify-ms",
            "19",
            "--format",
            "json",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let a = &v["inputs"]["accept_length"];
    (a["value"].as_f64().unwrap(), a.to_string())
}

#[test]
fn vllm_rates_add_and_conditional_rates_multiply() {
    // 1 + 0.645 + 0.393 + 0.240 = 2.278 (a published Kimi-K2.6 vLLM run's rates)
    let (t, o) = accept_length(&["--accept-rates-of-drafts", "0.645,0.393,0.240"]);
    assert!((t - 2.278).abs() < 1e-9, "{t} {o}");
    assert!(o.contains("fractions of all drafts"), "{o}");
    // conditional: 1 + 0.645 + 0.253485 + 0.0608364 = 1.9593214
    let (t, o) = accept_length(&["--accept-rates", "0.645,0.393,0.240"]);
    assert!((t - 1.959_321_4).abs() < 1e-9, "{t} {o}");
    assert!(o.contains("conditional"), "{o}");
}

#[test]
fn accept_from_log_reads_vllm_and_names_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("vllm.log");
    // the layout of vllm/v1/spec_decode/metrics.py's log line; numbers written for this test
    std::fs::write(
        &log,
        "INFO 05-01 10:00:00 [metrics.py:86] SpecDecoding metrics: Mean acceptance length: 2.83, Accepted throughput: 10.00 tokens/s, Drafted throughput: 20.00 tokens/s, Accepted: 1830 tokens, Drafted: 3000 tokens, Per-position acceptance rate: 0.826, 0.652, 0.352, Avg Draft acceptance rate: 61.0%\n\
INFO 05-01 10:00:10 [metrics.py:86] SpecDecoding metrics: Mean acceptance length: 2.00, Accepted throughput: 5.00 tokens/s, Drafted throughput: 15.00 tokens/s, Accepted: 500 tokens, Drafted: 1500 tokens, Per-position acceptance rate: 0.600, 0.300, 0.100, Avg Draft acceptance rate: 33.3%\n",
    )
    .unwrap();
    let p = log.to_str().unwrap();
    // drafts 1830/1.830 = 1000 and 500/1.000 = 500: 1 + 2330/1500 = 2.553333...
    let (t, o) = accept_length(&["--draft-steps", "3", "--accept-from-log", p]);
    assert!((t - (1.0 + 2330.0 / 1500.0)).abs() < 1e-9, "{t} {o}");
    assert!(o.contains("vLLM") && o.contains("measured"), "{o}");
    // rising fractions cannot be fractions of all drafts: exit 2 pointing to --accept-rates
    let out = vb()
        .args(["breakeven", "--decode-ms", "12.2", "--verify-ms", "19"])
        .args(["--accept-rates-of-drafts", "0.4,0.6"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("give them to --accept-rates"));
}
