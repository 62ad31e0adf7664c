//! `model fit --nccl-tests`: a profile from a public nccl-tests table, held to physics and to
//! the acceptance bound of the leave-one-size-out error.

use crate::common;

#[test]
fn fit_on_a_public_table_predicts_left_out_sizes_within_10_percent() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s01.json");
    let data = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/public-nccl/S01_aikitoria_8x5090_p2p.txt"
    );
    let o = common::vb()
        .args([
            "model",
            "fit",
            "--nccl-tests",
            data,
            "--base",
            "pcie-gen5",
            "-o",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let fit = &v["result"]["data"]["fit"];
    // 25 sizes, 8 B .. 128 MiB, each left out in turn.
    assert_eq!(fit["points"].as_array().unwrap().len(), 25);
    let loo = fit["median_abs_loo_rel_err"].as_f64().unwrap();
    assert!(loo <= 0.10, "leave-one-size-out median {loo}");
    // The published table steps up from 24.5 us at 2 KB to 36.3 us at 4 KB: the switch found.
    assert_eq!(fit["switches"][0]["ll_up_to_bytes"], 2048, "{stdout}");
    // No fitted parameter past PCIe 5.0 x16's bound (LL <= 31.5 GB/s, Simple <= 63 GB/s).
    let p = &v["result"]["data"]["profile"];
    assert!(p["ll_fitted"]["gbps"].as_f64().unwrap() <= 31.5 + 1e-9);
    assert!(p["intra"]["bw_gbps"].as_f64().unwrap() <= 63.0 + 1e-9);
    assert!(stdout.contains("# switch all_reduce n=8"), "{stdout}");
}
