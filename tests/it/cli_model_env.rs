//! End-to-end tests of the NCCL variables the cost model expresses and the ones it says it
//! does not (issue 15, item 8): P2P off prices the host-memory path, SHM off too the network
//! path, NCCL_PROTO/NCCL_ALGO restrict the choice, anything else is marked "not modeled" in
//! the table and the record. Through `verify --backend model` and a model-backend sweep.

use crate::common;
use common::vb;

fn graph_comm_us(env: &[(&str, &str)]) -> (f64, String) {
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("v.json");
    let mut c = vb();
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c
        .args([
            "verify",
            "--backend",
            "model",
            "--tp",
            "2",
            "--export-json",
            j.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.split_whitespace().take(2).eq(["comm", "graph"]))
        .unwrap();
    let us = line.split_whitespace().nth(2).unwrap().parse().unwrap();
    (us, text + &std::fs::read_to_string(&j).unwrap())
}

#[test]
fn p2p_and_shm_off_change_the_path_and_other_variables_are_marked() {
    let (base, _) = graph_comm_us(&[]);
    let (shm, t) = graph_comm_us(&[("NCCL_P2P_DISABLE", "1")]);
    assert!(shm > 1.3 * base, "{base} {shm}");
    assert!(t.contains("host-memory (SHM) path"), "{t}");
    let (net, t) = graph_comm_us(&[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")]);
    assert!(net > 2.0 * shm, "{shm} {net}");
    assert!(t.contains("network transport"), "{t}");
    let (buf, t) = graph_comm_us(&[("NCCL_BUFFSIZE", "1048576")]);
    assert_eq!(buf, base);
    assert!(t.contains("not modeled: NCCL_BUFFSIZE=1048576"), "{t}");
    // the record says it too
    assert!(t.matches("not modeled: NCCL_BUFFSIZE").count() >= 2, "{t}");
}

#[test]
fn a_model_sweep_marks_the_points_it_cannot_price() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path().join("r.jsonl");
    let out = vb()
        .args([
            "sweep",
            "--backend",
            "model",
            "--tp",
            "2",
            "--preset",
            "pcie",
            "-q",
            "--results",
            r.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let note = |id: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(&format!("{id}:")))
            .unwrap_or("")
            .to_string()
    };
    assert!(
        note("p15-BUFFSIZE-1048576").contains("not modeled: NCCL_BUFFSIZE=1048576"),
        "{text}"
    );
    assert!(
        note("p12-NTHREADS-128").contains("not modeled: NCCL_NTHREADS=128"),
        "{text}"
    );
    assert_eq!(note("p00-baseline"), "", "{text}");
    // P2P off is priced, not a copy of the baseline
    let row = text
        .lines()
        .find(|l| l.contains("p08-P2P-DISABLE-1"))
        .unwrap();
    assert!(!row.contains("1.000 ± 0.000"), "{row}");
}
