//! End-to-end tests of flags that conflict, hints that must name the right thing, and output
//! that must not pretend (issue 15, items 5, 10, 12, 13 and 17). Through the cost model and on
//! this machine as it is: the GPU-only paths are checked where they refuse, on a machine
//! without a CUDA driver (on a machine with one, those checks say that they are skipped, and
//! fail where `VERIFYBENCH_REQUIRE_GPU=0` says the machine has no driver: there the real path
//! runs, and `selftest` is its check).

use predicates::prelude::*;

use crate::common;
use common::{has_driver, listing, refused, refused_in, runs_here, vb, Machine};

#[test]
fn sweep_on_nccl_without_a_driver_is_refused_before_anything_is_written() {
    if !runs_here(
        "sweep --backend nccl refused without a driver",
        Machine::WithoutDriver,
        !has_driver(),
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    refused_in(
        Some(dir.path()),
        &[],
        &[
            "sweep",
            "--backend",
            "nccl",
            "--tp",
            "2",
            "-L",
            "NCCL_PROTO=LL,Simple",
        ],
        &["no CUDA driver", "--backend model"],
    );
    refused_in(
        Some(dir.path()),
        &[],
        &[
            "sweep",
            "--backend",
            "nccl",
            "--tp",
            "2",
            "-L",
            "NCCL_PROTO=LL",
            "--results",
            "r.jsonl",
        ],
        &["no CUDA driver"],
    );
    assert_eq!(listing(dir.path()), Vec::<String>::new(), "nothing written");
}

#[test]
fn hints_name_what_the_user_gave() {
    if runs_here(
        "selftest and worker refused without a driver",
        Machine::WithoutDriver,
        !has_driver(),
    ) {
        for cmd in [
            vec!["selftest"],
            vec![
                "worker",
                "--rank",
                "0",
                "--world-size",
                "2",
                "--rendezvous",
                "127.0.0.1:1",
            ],
        ] {
            let out = vb().args(&cmd).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{cmd:?}: {err}");
            assert!(!err.contains("use --backend model"), "{cmd:?}: {err}");
            assert!(err.contains("this command needs a GPU"), "{cmd:?}: {err}");
        }
    }
    refused(
        &["verify", "--backend", "model", "--gpus", "0"],
        &["--gpus 0", "give 1 to 1024 GPUs"],
    );
    let line = refused_in(
        None,
        &[("NCCL_PROTO", "bogus")],
        &["verify", "--backend", "model", "--tp", "2"],
        &["NCCL_PROTO (from the environment)", "bogus"],
    );
    assert!(!line.contains("--proto"), "{line}");
    refused(
        &[
            "verify",
            "--backend",
            "model",
            "--tp",
            "2",
            "--proto",
            "bogus",
        ],
        &["--proto 'bogus'"],
    );
}

#[test]
fn conflicting_gpu_flags_are_refused() {
    refused(
        &["verify", "--backend", "model", "--gpus", "8", "--tp", "2"],
        &["--tp 2", "--gpus", "disagree"],
    );
    refused(
        &["verify", "--backend", "model", "--gpus", "2", "--tp", "8"],
        &["--tp 8", "--gpus", "disagree"],
    );
    refused(
        &["verify", "--backend", "model", "--devices", "0,0"],
        &["--devices", "GPU 0 twice"],
    );
    refused(
        &[
            "verify",
            "--backend",
            "model",
            "--devices",
            "0,1,2,3",
            "--tp",
            "8",
        ],
        &["--tp 8", "--devices", "disagree"],
    );
    refused(
        &["collective", "--backend", "model", "--devices", "3"],
        &["at least 2 ranks"],
    );
    refused(
        &[
            "verify",
            "--backend",
            "model",
            "--tp",
            "2",
            "--nccl-lib",
            "/nonexistent",
        ],
        &["--nccl-lib", "/nonexistent"],
    );
    refused(
        &["env", "--nccl-lib", "/nonexistent"],
        &["--nccl-lib", "/nonexistent"],
    );
    refused(
        &[
            "sweep",
            "--debug-mode",
            "--gpus",
            "8",
            "--tp",
            "2",
            "-L",
            "NCCL_PROTO=LL",
        ],
        &["disagree"],
    );
    // --devices fixes the rank count of the model too, and collective says how many it modeled
    let out = vb()
        .args([
            "collective",
            "--backend",
            "model",
            "--devices",
            "0,1,2,3",
            "-b",
            "8K",
            "-e",
            "8K",
        ])
        .assert()
        .success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(text.contains("on 4 ranks"), "{text}");
    vb().args(["verify", "--backend", "model", "--devices", "0,1,2,3"])
        .assert()
        .success()
        .stdout(predicate::str::contains("TP=4"));
}

#[test]
fn modeled_rows_show_dashes_where_nothing_was_measured_or_checked() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("v.csv");
    let out = vb()
        .args([
            "verify",
            "--backend",
            "model",
            "--tp",
            "2",
            "--mode",
            "comm,compute",
            "--export-csv",
            csv.to_str().unwrap(),
        ])
        .assert()
        .success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    let row = |mode: &str, launch: &str| -> Vec<String> {
        text.lines()
            .find(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 2 && f[0] == mode && f[1] == launch
            })
            .unwrap_or_else(|| panic!("no {mode} {launch} row: {text}"))
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    // mode launch median p99 stddev per_coll n outliers #wrong
    let comm = row("comm", "graph");
    assert_eq!(&comm[3..5], ["-", "-"], "{comm:?}");
    assert_ne!(comm[5], "-");
    assert_eq!(&comm[6..9], ["-", "-", "-"], "{comm:?}");
    let compute = row("compute", "graph");
    assert_eq!(
        compute[5], "-",
        "compute-only rows have no collectives: {compute:?}"
    );
    let csv = std::fs::read_to_string(&csv).unwrap();
    let compute_line = csv.lines().find(|l| l.contains(",compute,")).unwrap();
    assert!(!compute_line.contains(",124,"), "{compute_line}");
    // the collective table of the model checks nothing
    vb().args([
        "collective",
        "--backend",
        "model",
        "--gpus",
        "2",
        "-b",
        "8K",
        "-e",
        "8K",
    ])
    .assert()
    .success()
    .stdout(predicate::str::contains(
        "Out of bounds values : - (modeled",
    ));
    // compare does not explain a compute-only difference by collectives
    let v = dir.path().join("v.json");
    vb().args([
        "verify",
        "--backend",
        "model",
        "--tp",
        "2",
        "--mode",
        "compute",
        "--export-json",
        v.to_str().unwrap(),
    ])
    .assert()
    .success();
    // a second file: one file alone is refused (a table of the base only)
    let w = dir.path().join("w.json");
    std::fs::copy(&v, &w).unwrap();
    let out = vb()
        .args(["compare", v.to_str().unwrap(), w.to_str().unwrap()])
        .assert()
        .success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(!text.contains("kernel launch per collective"), "{text}");
    assert!(text.contains("this mode has no collectives"), "{text}");
}

#[test]
fn env_without_a_gpu_says_what_is_missing_and_catches_misspelt_variables() {
    let out = vb()
        .env("NCCL_PROTOCOL", "LL")
        .args(["env"])
        .assert()
        .success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(
        text.contains("NCCL_PROTOCOL is not a variable NCCL knows (did you mean NCCL_PROTO?)"),
        "{text}"
    );
    if runs_here(
        "env says what is missing without a driver",
        Machine::WithoutDriver,
        !has_driver(),
    ) {
        assert!(!text.contains("driver          ?"), "{text}");
        assert!(!text.contains("from ?"), "{text}");
        assert!(
            text.contains("not found (no CUDA driver library)"),
            "{text}"
        );
    }
}

#[test]
fn one_gpu_streams_one_ranks_share_of_a_larger_tp_in_compute_mode_only() {
    // compute mode: one GPU stands for one rank of a TP=8 machine
    vb().args([
        "verify",
        "--backend",
        "model",
        "--gpus",
        "1",
        "--tp",
        "8",
        "--mode",
        "compute",
        "-q",
    ])
    .assert()
    .success();
    // with collectives on the cost model one rank per GPU still holds: --tp and --gpus must
    // agree (the NCCL backend runs them on a communicator of one rank instead)
    refused(
        &[
            "verify",
            "--backend",
            "model",
            "--gpus",
            "1",
            "--tp",
            "8",
            "--mode",
            "comm",
        ],
        &["--tp 8 and --gpus (1 GPUs) disagree"],
    );
}

/// `--pdl` changes how compute kernels launch: with collectives only it has nothing to change
/// (exit 2, naming the flag), and the cost model, which has no per-launch cost, says it does
/// not model it rather than printing a figure as if it had.
#[test]
fn pdl_without_compute_is_refused_and_the_model_says_it_does_not_model_it() {
    refused(
        &["verify", "--backend", "model", "--pdl", "--mode", "comm"],
        &["--pdl", "--mode compute or full"],
    );
    let out = vb()
        .args([
            "verify",
            "--backend",
            "model",
            "--pdl",
            "--mode",
            "compute",
            "--tp",
            "8",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(all.contains("--pdl: not modeled"), "{all}");
}
