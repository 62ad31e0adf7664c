//! Helpers shared by the integration tests: the binary under test, schedules, record builders
//! and writing records. Each test file includes this with `mod common;` and uses what it needs.
#![allow(dead_code)]

use std::path::Path;

use assert_cmd::Command;
use verifybench::measure::Summary;
use verifybench::model::{self, Phase, Schedule, ScheduleOptions};
use verifybench::record::{
    Body, Mode, Provenance, Record, RecordedWorkload, Source, VerifyResult, VerifyRun,
};
use verifybench::util::{now_utc, write_file};

/// The verifybench binary of this build.
pub fn vb() -> Command {
    Command::cargo_bin("verifybench").unwrap()
}

/// The schedule of Kimi-K2.5 for `phase` at `tp` ranks and `tokens` tokens.
pub fn kimi(tp: u64, tokens: u64, phase: Phase) -> Schedule {
    model::build(
        &model::presets::preset("kimi-k2.5").unwrap(),
        &ScheduleOptions {
            tp,
            tokens,
            ..Default::default()
        },
        phase,
    )
    .unwrap()
}

/// One verify run of `samples` (per-verify times in us) over `ncoll` collectives.
pub fn verify_run(graph: bool, mode: Mode, samples: &[f64], ncoll: f64, warmup: u64) -> VerifyRun {
    let s = Summary::from_samples(samples).unwrap();
    VerifyRun {
        graph,
        mode,
        per_collective_us: s.median_us / ncoll,
        per_verify: s,
        breakdown: vec![],
        wrong: 0,
        iterations: samples.len() as u64,
        warmup,
        in_collective: None,
    }
}

/// A verify record of `schedule` with `runs`, backend `backend`, started now.
pub fn verify_record(
    source: Source,
    backend: &str,
    schedule: &Schedule,
    runs: Vec<VerifyRun>,
) -> Record {
    Record::new(
        source,
        Provenance::here(backend, now_utc()),
        Body::Verify(VerifyResult::of(RecordedWorkload::of(schedule), runs)),
    )
}

/// Writes `records` as a pretty JSON array (temp-and-rename).
pub fn write_records(path: &Path, records: &[Record]) {
    write_file(path, &serde_json::to_vec_pretty(records).unwrap()).unwrap();
}

/// Runs verifybench with `args` and checks it is refused as bad input: exit code 2 and one
/// line on stderr, which contains every one of `wants`. Returns the line.
pub fn refused(args: &[&str], wants: &[&str]) -> String {
    refused_in(None, &[], args, wants)
}

/// [`refused`] run in folder `dir` (if given) with extra environment variables `env`.
pub fn refused_in(
    dir: Option<&Path>,
    env: &[(&str, &str)],
    args: &[&str],
    wants: &[&str],
) -> String {
    let mut c = vb();
    if let Some(d) = dir {
        c.current_dir(d);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    let last = lines.last().copied().unwrap_or("");
    for w in wants {
        assert!(
            last.contains(w),
            "{args:?}: '{last}' lacks '{w}' (stderr: {err})"
        );
    }
    last.to_string()
}

/// The names in folder `dir`, sorted (hidden files included: nothing may be left behind).
pub fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A file's text (a panic naming the file if it cannot be read).
pub fn read_text(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A file's JSON (a panic naming the file if it cannot be read or parsed).
pub fn read_json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&read_text(p)).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Kimi-K2.5's Hugging Face config.json (the `kimi-k2.5` preset: 61 layers) with `layers`
/// hidden layers: the first dense, the rest MoE, as in the model.
pub fn kimi_config_json(layers: u64) -> String {
    serde_json::json!({
        "architectures": ["KimiK25ForConditionalGeneration"],
        "model_type": "kimi_k25",
        "text_config": {
            "model_type": "kimi_k2",
            "num_hidden_layers": layers, "hidden_size": 7168, "vocab_size": 163840,
            "num_attention_heads": 64, "q_lora_rank": 1536, "kv_lora_rank": 512,
            "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
            "first_k_dense_replace": 1, "intermediate_size": 18432,
            "n_routed_experts": 384, "num_experts_per_tok": 8, "n_shared_experts": 1,
            "moe_intermediate_size": 2048,
            "quantization_config": {
                "quant_method": "compressed-tensors", "format": "pack-quantized",
                "config_groups": {"group_0": {"targets": ["Linear"],
                    "weights": {"num_bits": 4, "type": "int", "group_size": 32}}},
                "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                           "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"]
            }
        }
    })
    .to_string()
}

/// Writes at `path` a schedule file of Kimi-K2.5's TP2 verify ops repeated until it holds
/// `ops` operations: longer than any model's forward, to reach the bound of the exact check.
pub fn long_schedule(path: &Path, ops: usize) {
    let mut s = kimi(2, 3, Phase::Verify);
    s.ops = s.ops.iter().cycle().take(ops).cloned().collect();
    let f = verifybench::model::schedule_file::ScheduleFile {
        schedule: s,
        host_gaps_us: None,
        host_gaps_per_rank_us: None,
        origin: Some("a forward's ops repeated".into()),
    };
    write_file(path, &serde_json::to_vec(&f).unwrap()).unwrap();
}

/// The machine a check needs: one with a CUDA driver (and GPUs), where the GPU paths run, or
/// one without a driver, where their refusals can be seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Machine {
    WithGpu,
    WithoutDriver,
}

/// The variable that says which machine the tests run on: `1` a machine with a CUDA driver and
/// GPUs, `0` one without a driver (CI); unset, either.
pub const REQUIRE_GPU_ENV: &str = "VERIFYBENCH_REQUIRE_GPU";

/// Whether a check that needs `needs` runs here (`here`: this machine is such a machine).
/// When it does not, the skip is written to the test run's stderr (past the harness' capture,
/// so a plain `cargo test` shows it); and where [`REQUIRE_GPU_ENV`] says this is the machine
/// the check was meant for, the test fails instead of passing without it.
pub fn runs_here(what: &str, needs: Machine, here: bool) -> bool {
    if here {
        return true;
    }
    let (meant_for, this) = match needs {
        Machine::WithGpu => ("1", "has no CUDA driver or too few GPUs"),
        Machine::WithoutDriver => ("0", "has a CUDA driver"),
    };
    let line = format!("SKIPPED: {what}: this machine {this}");
    assert_ne!(
        std::env::var(REQUIRE_GPU_ENV).ok().as_deref(),
        Some(meant_for),
        "{line}, but {REQUIRE_GPU_ENV}={meant_for} says the check runs here"
    );
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
    false
}

/// Whether this machine has a CUDA driver.
pub fn has_driver() -> bool {
    verifybench::comm::libs::cuda_present()
}

/// The floor `explain --decode-ms 12.2 --draft-steps K` holds a verify to (the decode plus what
/// the extra tokens add), with `more` flags: breakeven and report hold their rows to the same.
pub fn explain_floor_ms(k: &str, more: &[&str]) -> f64 {
    let out = vb()
        .args(["explain", "--decode-ms", "12.2", "--draft-steps", k])
        .args(more)
        .args(["--format", "json", "-q"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["result"]["data"]["calibration"]["floor_ms"]["ms"]
        .as_f64()
        .unwrap()
}

/// What `verifybench ARGS --format json -q` prints, parsed; the command must succeed.
pub fn json_of<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(args: &[S]) -> serde_json::Value {
    let o = vb()
        .args(args)
        .args(["--format", "json", "-q"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{args:?}: {o:?}");
    serde_json::from_slice(&o.stdout).unwrap()
}

/// A JSON number, or a panic naming what stood there.
pub fn num(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Runs `cases` at the same time, each on a thread of its own, and fails naming every case that
/// failed with its message. For tests that mostly wait for a timeout they test: side by side
/// their waits overlap, where one after the other they kept libtest's two threads idle for
/// seconds (results/cpu2/test-time.txt, round 9).
pub fn side_by_side(cases: &[(&str, fn())]) {
    let failed: Vec<String> = std::thread::scope(|s| {
        let running: Vec<_> = cases
            .iter()
            .map(|(name, case)| (*name, s.spawn(*case)))
            .collect();
        running
            .into_iter()
            .filter_map(|(name, h)| {
                let e = h.join().err()?;
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|m| m.to_string()))
                    .unwrap_or_default();
                Some(format!("{name}: {msg}"))
            })
            .collect()
    });
    assert!(
        failed.is_empty(),
        "{} of {} cases failed:\n{}",
        failed.len(),
        cases.len(),
        failed.join("\n")
    );
}
