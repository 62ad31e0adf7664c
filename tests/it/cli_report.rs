//! End-to-end tests of `verifybench report` through the real binary.

use std::collections::BTreeMap;

use predicates::prelude::*;
use verifybench::measure::Summary;
use verifybench::model::{CollectiveKind, DType, Phase};
use verifybench::record::*;
use verifybench::util::now_utc;

use crate::common;
use common::{read_text as read, vb};

fn provenance(proto: &str) -> Provenance {
    let mut p = Provenance::here("nccl", now_utc());
    p.host = "gpu-host-1".into();
    p.nccl_version = Some("2.28.3".into());
    p.gpus = (0..2)
        .map(|i| GpuInfo {
            index: i,
            name: "NVIDIA H200".into(),
            pci_bus_id: format!("0000:0{i}:00.0"),
            memory_bytes: 150 << 30,
        })
        .collect();
    p.workers = vec![WorkerInfo {
        rank: 0,
        pid: 1,
        device: 0,
        nccl_env: BTreeMap::from([("NCCL_PROTO".to_string(), proto.to_string())]),
    }];
    p
}

fn timing(us: f64, bytes: u64) -> CollTiming {
    CollTiming {
        time_us: us,
        summary: Summary::from_samples(&[us, us * 1.01, us * 0.99]).unwrap(),
        algbw_gbps: algbw_gbps(bytes, us),
        busbw_gbps: algbw_gbps(bytes, us),
        wrong: 0,
    }
}

fn collective(proto: &str, base_us: f64) -> Record {
    let rows = (0..6)
        .map(|i| {
            let size = 8192u64 << (2 * i);
            CollectiveRow {
                size_bytes: size,
                count: size / 2,
                eager: Some(timing(base_us + 8.0 + size as f64 / 2e4, size)),
                graph: Some(timing(base_us + size as f64 / 2e4, size)),
                p2p: vec![],
            }
        })
        .collect();
    Record::new(
        Source::Measured,
        provenance(proto),
        Body::Collective(CollectiveResult {
            op: CollectiveKind::AllReduce,
            dtype: DType::Bf16,
            nranks: 2,
            rows,
        }),
    )
}

fn run(graph: bool, mode: Mode, ms: f64) -> VerifyRun {
    common::verify_run(
        graph,
        mode,
        &[ms * 1000.0, ms * 1010.0, ms * 990.0],
        124.0,
        1,
    )
}

fn verify(source: Source, phase: Phase, tokens: u64, full_ms: f64) -> Record {
    let s = common::kimi(2, tokens, phase);
    Record::new(
        source,
        provenance("LL"),
        Body::Verify(VerifyResult::of(
            RecordedWorkload::of(&s),
            vec![
                run(false, Mode::Comm, full_ms * 0.5),
                run(false, Mode::Compute, full_ms * 0.7),
                run(false, Mode::Full, full_ms * 1.3),
                run(true, Mode::Comm, full_ms * 0.3),
                run(true, Mode::Compute, full_ms * 0.6),
                run(true, Mode::Full, full_ms),
            ],
        )),
    )
}

use common::write_records as write;

#[test]
fn report_writes_markdown_and_three_plots() {
    let dir = tempfile::tempdir().unwrap();
    let coll = dir.path().join("coll.json");
    write(&coll, &[collective("LL", 12.0), collective("Simple", 25.0)]);
    let ver = dir.path().join("verify.json");
    let sweep = Record::new(
        Source::Measured,
        provenance("LL"),
        Body::Other {
            name: "sweep_point".into(),
            data: serde_json::json!({"point": 1}),
        },
    );
    write(
        &ver,
        &[
            verify(Source::Measured, Phase::Verify, 4, 19.0),
            verify(Source::Modeled, Phase::Verify, 4, 12.0),
            verify(Source::Measured, Phase::Decode, 1, 12.2),
            sweep,
        ],
    );
    let out = dir.path().join("out");
    vb().args([
        "report",
        coll.to_str().unwrap(),
        ver.to_str().unwrap(),
        "-o",
    ])
    .arg(&out)
    .args(["--draft-ms", "1", "--overhead-ms", "0"])
    .assert()
    .success()
    .stdout(predicate::str::contains("report.md"))
    .stderr(predicate::str::contains(
        "verify.json record 4: a malformed sweep point",
    ));

    let md = read(&out.join("report.md"));
    for t in [
        "# verifybench report",
        "## Inputs",
        "gpu-host-1",
        "2 x NVIDIA H200",
        "2.28.3",
        "NCCL_PROTO=Simple",
        "- verify.json record 4: a malformed sweep point",
        "## Collective latency",
        "](collective_latency.svg)",
        "| source | op | nranks |",
        "## Verify time",
        "](verify_time.svg)",
        "| source | model | phase |",
        "## Speculative-decoding break-even",
        "batch 1",
        "81.97 tok/s",
        "](tokens_per_s.svg)",
        "| 19.00 | measured | 22.00 | 1.803 |",
    ] {
        assert!(md.contains(t), "report.md lacks {t:?}\n{md}");
    }
    // 12 ms is below the decode step (12.2 ms): held at the floor explain holds the same
    // inputs to (the records' kimi-k2.5 at TP=2), cycle 3 x 1 + floor, tau* = cycle / 12.2.
    let floor = common::explain_floor_ms("3", &["--gpus", "2"]);
    for t in [
        format!(
            "| 12.00^ | modeled | {:.2} | {:.3} |",
            3.0 + floor,
            (3.0 + floor) / 12.2
        ),
        format!("^ held at the floor {floor:.2} ms"),
    ] {
        assert!(md.contains(&t), "report.md lacks {t:?}\n{md}");
    }

    let svg = read(&out.join("collective_latency.svg"));
    for t in [
        "<text",
        "Collective latency vs message size",
        "message size (bytes, log scale)",
        "time per operation (µs",
        "PROTO=LL, graph",
        "PROTO=Simple, eager",
        "32.0 KiB",
    ] {
        assert!(svg.contains(t), "collective_latency.svg lacks {t:?}");
    }
    let svg = read(&out.join("verify_time.svg"));
    for t in [
        "Time per verify forward, eager vs CUDA graph (includes modeled)",
        "time per verify (ms, median)",
        "collectives only (mode comm), graph",
        "compute only (mode compute), eager",
        "full verify (mode full), marker",
        "kimi-k2.5 decode TP=2 T=1",
    ] {
        assert!(svg.contains(t), "verify_time.svg lacks {t:?}");
    }
    let svg = read(&out.join("tokens_per_s.svg"));
    for t in [
        "Tokens/s vs accept length (k = 3, T_draft 1.00 ms) (includes modeled)",
        "accept length tau",
        "tokens/s (batch 1)",
        "without speculation: 82.0 tok/s",
        "tau* 1.80",
    ] {
        assert!(svg.contains(t), "tokens_per_s.svg lacks {t:?}");
    }
    let t = format!("T_verify 12.00 ms (modeled, held at the floor {floor:.2} ms)");
    assert!(svg.contains(&t), "tokens_per_s.svg lacks {t:?}");
}

#[test]
fn report_without_a_decode_time_says_why_and_skips_the_tokens_plot() {
    let dir = tempfile::tempdir().unwrap();
    let ver = dir.path().join("verify.jsonl");
    let line = serde_json::to_string(&verify(Source::Measured, Phase::Verify, 4, 19.0)).unwrap();
    std::fs::write(&ver, format!("{line}\n")).unwrap();
    let out = dir.path().join("out");
    vb().args(["report", ver.to_str().unwrap(), "--out"])
        .arg(&out)
        .assert()
        .success();
    let md = read(&out.join("report.md"));
    assert!(md.contains("Not drawn: no decode time"), "{md}");
    assert!(out.join("verify_time.svg").exists());
    assert!(!out.join("tokens_per_s.svg").exists());
    assert!(!out.join("collective_latency.svg").exists());

    // With --decode-ms the tokens/s plot appears.
    vb().args(["report", ver.to_str().unwrap(), "--out"])
        .arg(&out)
        .args([
            "--decode-ms",
            "12.2",
            "--draft-ms",
            "0",
            "--overhead-ms",
            "0",
        ])
        .assert()
        .success();
    // 19 / 12.2 = 1.557
    assert!(read(&out.join("tokens_per_s.svg")).contains("tau* 1.56"));
}

#[test]
fn report_bad_input_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let old = dir.path().join("old.json");
    let mut v = serde_json::to_value(collective("LL", 10.0)).unwrap();
    v["schema_version"] = 99.into();
    std::fs::write(&old, v.to_string()).unwrap();
    let o = vb()
        .args(["report", old.to_str().unwrap(), "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("schema_version 99"), "{err}");
    assert_eq!(err.trim().lines().count(), 1);

    let ver = dir.path().join("v.json");
    write(&ver, &[verify(Source::Measured, Phase::Verify, 4, 19.0)]);
    vb().args(["report", ver.to_str().unwrap(), "-o"])
        .arg(&out)
        .args(["--decode-ms", "-2"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--decode-ms -2"));
}
