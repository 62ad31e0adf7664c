//! End-to-end tests of `verifybench explain` through the real binary: plain numbers (no GPU,
//! no trace), a SYNTHETIC trace set of 8 ranks with a known late rank (made by
//! `tests/support/synth.rs`, not a profile of a real run), and bad input. Expected values are
//! computed here by hand from the inputs.

use crate::common::{refused, vb};
use crate::synth::{self, SynthSpec};

/// Exit 2, and stderr holds every one of `wants` (clap's own errors end with a help line, so
/// the whole of stderr is searched).
fn refused_flag(args: &[&str], wants: &[&str]) {
    let o = vb().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    for w in wants {
        assert!(err.contains(w), "{args:?}: stderr lacks '{w}': {err}");
    }
}

fn json(args: &[&str]) -> serde_json::Value {
    let o = vb().args(args).args(["--format", "json"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn part<'a>(d: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    d["as_ran"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no part {name}: {d}"))
}

fn scenario<'a>(d: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    d["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no scenario {name}: {d}"))
}

const PLAIN: &[&str] = &[
    "explain",
    "--observed",
    "122x0.2ms",
    "--verify-ms",
    "30",
    "--decode-ms",
    "12.2",
    "--accept-length",
    "2.5",
    "--gpus",
    "8",
];

/// The case: 122 all-reduces of 0.2 ms in a 30 ms verify on 8 PCIe GPUs, 82 tok/s
/// without speculation.
#[test]
fn plain_numbers_attribute_most_of_the_collectives_to_waiting() {
    let v = json(PLAIN);
    assert_eq!(v["kind"], "other");
    assert_eq!(v["result"]["name"], "explain");
    let d = &v["result"]["data"];
    // 122 x 0.2 ms = 24.4 ms inside the collectives, as given.
    let in_coll = part(d, "in collectives");
    assert_eq!(in_coll["figure"]["us"].as_f64().unwrap(), 24_400.0);
    assert_eq!(in_coll["figure"]["source"], "given");
    // transfer modeled, waiting inferred = 24.4 ms - transfer, most of it.
    let x = part(d, "transfer")["figure"]["us"].as_f64().unwrap();
    assert_eq!(part(d, "transfer")["figure"]["source"], "modeled");
    let w = part(d, "waiting")["figure"]["us"].as_f64().unwrap();
    assert_eq!(part(d, "waiting")["figure"]["source"], "inferred");
    assert!((w - (24_400.0 - x)).abs() < 1e-6, "{w} {x}");
    assert!(w > 0.5 * 24_400.0, "most of the 24.4 ms is waiting: {w}");
    // 30 - 24.4 = 5.6 ms of compute and idle.
    assert!((part(d, "compute + idle")["figure"]["us"].as_f64().unwrap() - 5_600.0).abs() < 1e-6);
    // The CUDA-graph verify would be the verify less the waiting (8.5 ms), faster than the
    // given 12.2 ms decode: it is held at the floor, marked, with the model's own decode shown
    // beside the given one. The floor is the decode plus what 3 tokens add over 1 as the engine
    // terms scale it (phi x D x (M_verify - M_decode) / M_decode), at the low end of their
    // held-out spread on the increment.
    let g = scenario(d, "with a CUDA graph");
    let g_us = g["verify"]["us"].as_f64().unwrap();
    let cal = &d["calibration"];
    let (md, mv) = (
        cal["model_decode_us"].as_f64().unwrap(),
        cal["model_verify_us"].as_f64().unwrap(),
    );
    let terms = &cal["engine"]["terms"];
    let phi = terms["scaling"].as_f64().unwrap();
    let inc_hi = cal["engine"]["increment_spread"][1].as_f64().unwrap();
    assert!(30_000.0 - w < 12_200.0);
    let floor = 12_200.0 + phi * 12_200.0 * (mv - md) / md / (1.0 + inc_hi);
    assert!((g_us - floor).abs() < 1e-6, "{g_us} {floor}");
    assert_eq!(g["at_floor"], true);
    assert_eq!(cal["given_decode_us"].as_f64().unwrap(), 12_200.0);
    // The step the tokens/s divides by: k = 2 draft forwards (the model's draft scaled as the
    // decode is, plus each forward's fixed cost o x D), the verify, and tau_us x C x k of
    // bookkeeping; the engine's own work (1 - phi) x D of the decode.
    let st = &cal["step"];
    assert!((st["engine_us"].as_f64().unwrap() - (1.0 - phi) * 12_200.0).abs() < 1e-6);
    let drafts = phi * 12_200.0 * cal["model_drafts_us"].as_f64().unwrap() / md
        + 2.0 * terms["draft_forward"].as_f64().unwrap() * 12_200.0;
    let overhead = terms["per_draft_token_us"].as_f64().unwrap() * 2.0;
    let step = g_us + drafts + overhead;
    assert!(
        (g["step"]["step_us"].as_f64().unwrap() - step).abs() < 1e-6,
        "{g}"
    );
    // every row: a range in JSON with low <= time <= high, never faster than 12.2 ms, never
    // more than 2.5x decoding
    for sc in d["scenarios"].as_array().unwrap() {
        let us = sc["verify"]["us"].as_f64().unwrap();
        assert!(us >= 12_200.0 - 1e-6 || sc["plain_decode_ms"].as_f64().unwrap() < 12.2);
        assert!(sc["vs_baseline"].as_f64().unwrap() <= 2.5 + 1e-9, "{sc}");
        if let Some(r) = sc["range_us"].as_array() {
            let (lo, hi) = (r[0].as_f64().unwrap(), r[1].as_f64().unwrap());
            assert!(lo <= us + 1e-6 && us <= hi + 1e-6, "{sc}");
        }
    }
    assert!(g["range_us"].is_array());
    let tps = 2.5 / (step / 1e6);
    assert!((g["tokens_per_s"].as_f64().unwrap() - tps).abs() < 1e-6);
    // against 1000 / 12.2 = 81.97 tok/s without speculation
    assert!((g["vs_baseline"].as_f64().unwrap() - tps / (1000.0 / 12.2)).abs() < 1e-9);
    // as it ran: 2.5 / (30 ms + the same drafts and bookkeeping)
    let now = &d["scenarios"][0];
    let tps_now = 2.5 / ((30_000.0 + drafts + overhead) / 1e6);
    assert!((now["tokens_per_s"].as_f64().unwrap() - tps_now).abs() < 1e-6);
    // The fitted host gaps reproduce the observed per-collective time within a few percent:
    // 200 us x the schedule's 124 collectives.
    let f = &d["fit"];
    assert_eq!(f["reached"], true);
    assert_eq!(f["target_us"].as_f64().unwrap(), 200.0 * 124.0);
    let rel = (f["modeled_us"].as_f64().unwrap() - 24_800.0).abs() / 24_800.0;
    assert!(rel < 0.05, "{f}");
    // mean gap: 30 ms over 124 collectives
    assert!((f["mean_us"].as_f64().unwrap() - 30_000.0 / 124.0).abs() < 1e-9);
}

#[test]
fn plain_numbers_table_says_inferred_and_names_the_commands() {
    let o = vb().args(PLAIN).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = String::from_utf8_lossy(&o.stdout);
    for want in [
        "waiting inferred, not measured",
        "with a CUDA graph",
        "one-shot all-reduce + CUDA graph",
        "verifybench verify --backend nccl --gpus 8 --model kimi-k2.5 --tp 8 --tokens 3 --host-gap-us",
        "--graph both",
        "verifybench sweep --backend nccl --gpus 8",
        "verifybench inspect --pid SERVER_PID --expect",
        "--disable-cuda-graph",
        "--enforce-eager",
        "not checked",
    ] {
        assert!(s.to_lowercase().contains(&want.to_lowercase()), "lacks '{want}':\n{s}");
    }
}

/// 8 ranks, rank 5 late by 200 us before every collective, no jitter. Each rank's host spends
/// 32 us + two launches of 4 + 2 us = 44 us per collective, as long as its GPU's work (20 us of
/// compute + 24 us of transfer), so without the delay no rank waits and no GPU idles; with it,
/// every other rank waits the 200 us in each of the 124 collectives of a step and the late one
/// not at all: the mean over ranks is 124 x 200 x 7/8 = 21,700 us per step.
#[test]
fn eight_rank_trace_with_a_late_rank_gives_the_measured_split() {
    let dir = tempfile::tempdir().unwrap();
    let s = SynthSpec {
        ranks: 8,
        steps: 3,
        late_rank: Some((5, 200.0)),
        jitter_us: 0.0,
        host_gap_us: 32.0,
        compute_us: 20.0,
        transfer_us: 24.0,
        ar_elements: 3 * 7168,
        ag_elements: 3 * 163840 / 8,
        ..Default::default()
    };
    synth::write_dir(&s, dir.path(), true).unwrap();
    let p = dir.path().to_str().unwrap();
    let v = json(&[
        "explain",
        "--trace",
        p,
        "--decode-ms",
        "12.2",
        "--accept-length",
        "2.5",
    ]);
    assert_eq!(v["source"], "measured");
    let d = &v["result"]["data"];
    assert_eq!(d["ranks"], 8);
    let w = part(d, "waiting")["figure"].clone();
    assert_eq!(w["source"], "measured");
    let want = 124.0 * 200.0 * 7.0 / 8.0;
    let got = w["us"].as_f64().unwrap();
    assert!((got - want).abs() <= 0.1 * want, "waiting {got} vs {want}");
    // transfer: 124 x the simulation's 24 us
    let x = part(d, "transfer")["figure"]["us"].as_f64().unwrap();
    assert!(
        (x - 124.0 * 24.0).abs() <= 0.1 * 124.0 * 24.0,
        "transfer {x}"
    );
    // No fit: nothing is inferred.
    assert!(d["fit"].is_null());
    let traps = d["traps"].as_array().unwrap();
    let eager = traps
        .iter()
        .find(|t| t["rule"]["id"] == "eager-verify")
        .unwrap();
    assert_eq!(eager["status"], "found");
    // The table says measured.
    let o = vb()
        .args(["explain", "--trace", p, "--decode-ms", "12.2"])
        .output()
        .unwrap();
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(t.contains("waiting for the last rank (measured)"), "{t}");
}

/// A dual-socket host's NCCL log whose graph search fell to bw 0.1 across SYS (the line as
/// NCCL prints it, written here by hand): the trap is found and priced.
#[test]
fn the_graph_search_floor_is_a_found_trap_with_its_price() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("nccl.log");
    std::fs::write(
        &log,
        "host:1:1 [0] NCCL INFO Pattern 4, crossNic 0, nChannels 2, bw 0.100000/0.100000, type SYS/SYS, sameChannels 1\n",
    )
    .unwrap();
    let out = dir.path().join("explain.json");
    let v = json(&[
        "explain",
        "--verify-ms",
        "30",
        "--gpus",
        "8",
        "--nccl-log",
        log.to_str().unwrap(),
        "--export-json",
        out.to_str().unwrap(),
    ]);
    let t = v["result"]["data"]["traps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["rule"]["id"] == "nccl-graph-search-sys")
        .unwrap()
        .clone();
    assert_eq!(t["status"], "found", "{t}");
    let d = t["detail"].as_str().unwrap();
    assert!(
        d.contains("nChannels 2, bw 0.100000/0.100000, type SYS/SYS"),
        "{d}"
    );
    assert!(d.contains("without a topology file"), "{d}");
    // --export-json writes what --format json prints
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(written, v);
    // --format markdown: the same answer as tables
    let o = vb()
        .args([
            "explain",
            "--verify-ms",
            "30",
            "--gpus",
            "8",
            "--format",
            "markdown",
        ])
        .output()
        .unwrap();
    let md = String::from_utf8_lossy(&o.stdout);
    assert!(
        md.contains("| part | time | share | source | how |"),
        "{md}"
    );
    assert!(md.contains("| with a CUDA graph |"), "{md}");
}

#[test]
fn bad_input_exits_2_with_what_to_give() {
    refused_flag(
        &["explain", "--observed", "122", "--gpus", "8"],
        &["--observed", "COUNTxTIME", "122x0.2ms"],
    );
    refused_flag(
        &["explain", "--observed", "122x0.2", "--gpus", "8"],
        &["no unit", "ms or us"],
    );
    refused_flag(&["explain", "--observed", "0x0.2ms"], &["count 0"]);
    refused(
        &["explain", "--gpus", "8"],
        &["nothing to explain", "--trace", "--observed"],
    );
    refused(
        &["explain", "--observed", "122x0.2ms", "--verify-ms", "20"],
        &["below the time inside the collectives"],
    );
    refused(
        &["explain", "--verify-ms", "30", "--gpus", "1"],
        &["2 to 1024 ranks"],
    );
    refused(&["explain", "--verify-ms", "-3"], &["--verify-ms"]);
    refused(
        &[
            "explain",
            "--verify-ms",
            "30",
            "--decode-ms",
            "12.2",
            "--accept-length",
            "9",
        ],
        &["--accept-length 9", "k+1"],
    );
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    std::fs::write(&log, "hello\n").unwrap();
    refused(
        &[
            "explain",
            "--verify-ms",
            "30",
            "--server-log",
            log.to_str().unwrap(),
        ],
        &["server.log", "neither SGLang"],
    );
    refused(
        &[
            "explain",
            "--trace",
            dir.path().join("none").to_str().unwrap(),
        ],
        &["--trace", "no such file"],
    );
}

/// The engines' one-stage custom all-reduce taking 200 us per collective on 8 ranks (the
/// simulation's transfer), far above the P2P model's one-shot at 43,008 B on pcie-gen5:
/// 6.3213 us + 7 x 43,008 B / 26.44 GB/s = 17.7 us (the fit of the public S10 table);
/// 200 > 3 x 17.7, so the trap is found.
#[test]
fn a_custom_all_reduce_far_slower_than_the_model_is_a_found_trap() {
    let dir = tempfile::tempdir().unwrap();
    let s = SynthSpec {
        ranks: 8,
        steps: 3,
        transfer_us: 200.0,
        jitter_us: 0.0,
        ar_elements: 3 * 7168,
        ag_elements: 3 * 163840 / 8,
        custom_all_reduce: Some((
            "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)",
            "_C_custom_ar::all_reduce",
        )),
        ..Default::default()
    };
    synth::write_dir(&s, dir.path(), true).unwrap();
    let v = json(&["explain", "--trace", dir.path().to_str().unwrap()]);
    let d = &v["result"]["data"];
    let t = d["traps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["rule"]["id"] == "custom-ar-slow")
        .unwrap();
    assert_eq!(t["status"], "found", "{t}");
    assert!(
        t["detail"].as_str().unwrap().contains("17.7 us modeled"),
        "{t}"
    );
}

/// The motivating numbers with the verify predicted (k = 3): the one-shot graph row is the
/// predicted row less the one-shot's saving on the model's transfer, scaled as the engine terms
/// scale the model's forward onto the given decode (phi x 12.2 ms / the model's decode), the
/// same scaling as the saving on the decode.
#[test]
fn a_predicted_rows_saving_is_scaled_as_the_forward_is() {
    let v = json(&[
        "explain",
        "--decode-ms",
        "12.2",
        "--accept-length",
        "2.5",
        "--gpus",
        "8",
        "--draft-steps",
        "3",
    ]);
    let d = &v["result"]["data"];
    let p = &d["pricing"];
    let cal = &d["calibration"];
    let saving = p["transfer_us"].as_f64().unwrap() - p["oneshot"]["transfer_us"].as_f64().unwrap();
    let scale = cal["engine"]["terms"]["scaling"].as_f64().unwrap() * 12_200.0
        / cal["model_decode_us"].as_f64().unwrap();
    let predicted = scenario(d, "predicted (CUDA graph)")["verify"]["us"]
        .as_f64()
        .unwrap();
    let one = scenario(d, "one-shot all-reduce + CUDA graph");
    assert_eq!(one["at_floor"], false, "{one}");
    let got = one["verify"]["us"].as_f64().unwrap();
    assert!(
        (got - (predicted - scale * saving)).abs() < 1e-6,
        "{got} vs {predicted} - {scale} x {saving}"
    );
}
