//! End-to-end tests of the documented range of every numeric flag (issue 15, item 14): a value
//! outside it exits 2 with one line naming the flag and its range, and rounding is said on
//! stderr. Through the cost model and pure commands: no GPU needed.

use predicates::prelude::*;

use crate::common;
use common::{refused, vb};

#[test]
fn values_outside_the_documented_ranges_are_refused() {
    for (args, wants) in [
        (
            vec![
                "collective",
                "--backend",
                "model",
                "-e",
                "18446744073709551615",
            ],
            vec!["-e/--maxbytes", "at most 16G"],
        ),
        (
            vec!["collective", "--backend", "model", "--sizes", "32G"],
            vec!["--sizes", "at most 16G"],
        ),
        (
            vec!["collective", "--backend", "model", "--gpus", "100000"],
            vec!["--gpus 100000", "1 to 1024"],
        ),
        (
            vec!["plan", "--tokens", "100000000"],
            vec!["--tokens 100000000", "1 to 65536"],
        ),
        (vec!["plan", "--tokens", "0"], vec!["--tokens 0"]),
        (vec!["plan", "--tp", "4096"], vec!["--tp 4096", "1 to 1024"]),
        (
            vec!["plan", "--phase", "draft", "--draft-vocab", "0"],
            vec!["--draft-vocab 0"],
        ),
        (
            vec![
                "breakeven",
                "--decode-ms",
                "12",
                "--verify-ms",
                "1e308",
                "--draft-steps",
                "3",
                "--accept-length",
                "2",
            ],
            vec!["--verify-ms", "at most 1000000"],
        ),
        (
            vec![
                "breakeven",
                "--decode-ms",
                "12",
                "--verify-ms",
                "19",
                "--draft-steps",
                "100000",
                "--accept-length",
                "2",
            ],
            vec!["--draft-steps 100000", "1 to 64"],
        ),
        (
            vec![
                "sweep",
                "--debug-mode",
                "--tp",
                "2",
                "-L",
                "NCCL_PROTO=LL",
                "--noise-margin",
                "-1",
            ],
            vec!["--noise-margin -1", "0 to 0.5"],
        ),
        (
            vec![
                "sweep",
                "--debug-mode",
                "--tp",
                "2",
                "-L",
                "NCCL_PROTO=LL",
                "--noise-floor",
                "5",
            ],
            vec!["--noise-margin 5", "0 to 0.5"],
        ),
        (
            vec!["inspect", "--match", ""],
            vec!["--match ''", "every process"],
        ),
    ] {
        refused(&args, &wants);
    }
}

#[test]
fn rounded_and_dropped_sizes_are_said() {
    vb().args([
        "collective",
        "--backend",
        "model",
        "--gpus",
        "8",
        "-b",
        "8K",
        "-e",
        "8K",
        "--sizes",
        "43009,7",
    ])
    .assert()
    .success()
    .stderr(predicate::str::contains(
        "size 43009 rounded down to 43008 (whole bf16 elements per rank on 8 ranks)",
    ))
    .stderr(predicate::str::contains("size 7 dropped"))
    .stdout(predicate::str::contains("43008"));
}

/// Every refusal the request allows comes before any GPU, NCCL or process start, with exit 2
/// in both launchers: the range of --tp before the GPU flags and the devices, the length of
/// the schedule before the devices. On a machine without GPUs a device check would say "no
/// GPU found" (or "no CUDA driver"): the range's or the length's message proves the order.
#[test]
fn refusals_of_the_request_come_before_the_devices_in_both_launchers() {
    let dir = tempfile::tempdir().unwrap();
    let long = dir.path().join("long.json");
    // one operation more than the exact check's 117,649 = 7^6 (the base-7 digits 0..6 of an
    // index are its inputs' offsets; each of the 3 slots adds its own)
    common::long_schedule(&long, 117_650);
    let long = long.to_str().unwrap();
    let length = "the exact check gives distinct inputs to at most 117649 operations of one \
                  schedule (3 buffer slots each), and this one has 117650";
    for launcher in ["threads", "processes"] {
        let base = ["verify", "--backend", "nccl", "--launcher", launcher];
        for (extra, want) in [
            (vec!["--tp", "0"], "--tp 0: give 1 to 1024 ranks"),
            (vec!["--tp", "2000"], "--tp 2000: give 1 to 1024 ranks"),
            (
                vec!["--tp", "0", "--gpus", "2"],
                "--tp 0: give 1 to 1024 ranks",
            ),
            (
                vec!["--tp", "2", "--tokens", "0"],
                "--tokens 0: give 1 to 65536",
            ),
            (vec!["--gpus", "2000"], "--gpus 2000: give 1 to 1024 GPUs"),
            (vec!["--schedule", long], length),
            (vec!["--schedule", long, "--gpus", "2"], length),
        ] {
            let args: Vec<&str> = base.iter().copied().chain(extra).collect();
            let line = refused(&args, &[want]);
            assert!(
                !line.contains("GPU found") && !line.contains("CUDA"),
                "{line}"
            );
        }
    }
    // one rank's compute alone has no exact check: the same schedule goes on to the devices
    // (here: refused there, as this machine has none, or run on a GPU)
    if common::runs_here(
        "one rank's long compute schedule refused without a driver",
        common::Machine::WithoutDriver,
        !common::has_driver(),
    ) {
        let out = vb()
            .args([
                "verify",
                "--backend",
                "nccl",
                "--schedule",
                long,
                "--gpus",
                "1",
            ])
            .args(["--mode", "compute"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(!err.contains("117649"), "{err}");
    }
}

/// More tokens than the GPU's streaming kernels take (`comm::MAX_STREAM_TOKENS`, 512) is refused
/// with exit 2 before any device is looked at, naming the limit, wherever a GPU would replay the
/// compute: `--backend nccl`, and `--backend auto` before its fall-back to the cost model on a
/// machine without GPUs (the message, not "no GPU found", proves the order). The cost model
/// prices any count; `--mode comm` streams nothing, so it is not refused for its tokens.
#[test]
fn more_tokens_than_the_streaming_kernels_take_are_refused_before_the_gpus() {
    let max = verifybench::comm::MAX_STREAM_TOKENS;
    assert_eq!(max, 512);
    let want = "--tokens 600: the GPU's weight-streaming kernels take at most 512 tokens";
    // one GPU's share of TP8 as the issue ran it (nccl), and a TP8 request on auto
    for (backend, gpus) in [("nccl", &["--gpus", "1"][..]), ("auto", &[][..])] {
        for mode in ["compute", "full", "compute,full"] {
            let args: Vec<&str> = ["verify", "--backend", backend]
                .into_iter()
                .chain(gpus.iter().copied())
                .chain(["--tp", "8", "--model", "kimi-k2.5", "--tokens", "600"])
                .chain(["--mode", mode])
                .collect();
            let line = refused(&args, &[want, "MAX_STREAM_TOKENS", "--backend model"]);
            assert!(
                !line.contains("GPU found") && !line.contains("CUDA"),
                "{line}"
            );
        }
    }
    // the cost model prices 600 tokens
    vb().args([
        "verify",
        "--backend",
        "model",
        "--tp",
        "8",
        "--tokens",
        "600",
    ])
    .args(["--mode", "compute", "-q"])
    .assert()
    .success();
    // 512 tokens and --mode comm at 600 pass the check (and go on to the devices: on this
    // machine without GPUs, refused there)
    if !verifybench::comm::libs::cuda_present() {
        for (tokens, mode) in [("512", "compute"), ("600", "comm")] {
            let out = vb()
                .args(["verify", "--backend", "nccl", "--gpus", "1", "--tp", "8"])
                .args(["--tokens", tokens, "--mode", mode])
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{err}");
            assert!(!err.contains("MAX_STREAM_TOKENS"), "{err}");
        }
    }
}
