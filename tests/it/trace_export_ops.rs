//! `trace --export-schedule` of broadcasts and all-to-alls (PyTorch's `all_to_all_single`,
//! which NCCL runs as one SendRecv kernel of grouped sends and receives), and `verify
//! --schedule` replaying them.
//!
//! The trace is written here event by event, in the shape a PyTorch profiler writes (cpu op
//! `record_param_comms` with its collective arguments, `cudaLaunchKernel`, the kernel, linked by
//! correlation id, inside `ProfilerStep#N` spans). It is a hand-made input, not a measurement.

use std::io::Write;
use std::path::Path;

use crate::common;

/// (Collective name as PyTorch records it, kernel name, In msg nelems, Out msg nelems).
const STEP: [(&str, &str, u64, u64); 3] = [
    (
        "allreduce",
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        21504,
        21504,
    ),
    (
        "broadcast",
        "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        1024,
        1024,
    ),
    // 8 ranks x 512 elements: the input holds one block per rank
    (
        "all_to_all",
        "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
        4096,
        4096,
    ),
];

/// One rank of an 8-rank job, `steps` ProfilerStep# spans of the three collectives above.
/// `sized`: the all-reduce's `record_param_comms` carries its element counts (false: no size,
/// as when the profiler records no collective arguments).
fn write_trace(path: &Path, steps: usize, a2a_in: u64, sized: bool) {
    let mut ev: Vec<String> = vec![];
    let (pid, mut t, mut id) = (4242, 1000.0_f64, 0u64);
    for step in 0..steps {
        let t0 = t;
        for (name, kernel, n_in, n_out) in STEP {
            let n_in = if name == "all_to_all" { a2a_in } else { n_in };
            let sizes = if sized || name != "allreduce" {
                format!(r#""In msg nelems":{n_in},"Out msg nelems":{n_out},"#)
            } else {
                String::new()
            };
            id += 1;
            t += 40.0;
            ev.push(format!(
                r#"{{"ph":"X","cat":"cpu_op","name":"record_param_comms","pid":{pid},"tid":{pid},"ts":{t:.1},"dur":8.0,"args":{{"External id":{id},"Collective name":"{name}",{sizes}"Group size":8,"dtype":"BFloat16","Process Group Name":"0","Seq":{id}}}}}"#
            ));
            ev.push(format!(
                r#"{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":{pid},"tid":{pid},"ts":{:.1},"dur":5.0,"args":{{"External id":{id},"correlation":{id}}}}}"#,
                t + 1.0
            ));
            ev.push(format!(
                r#"{{"ph":"X","cat":"kernel","name":"{kernel}","pid":0,"tid":7,"ts":{:.1},"dur":20.0,"args":{{"External id":{id},"device":0,"stream":7,"correlation":{id}}}}}"#,
                t + 8.0
            ));
            t += 30.0;
        }
        t += 50.0;
        ev.push(format!(
            r#"{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{step}","pid":{pid},"tid":{pid},"ts":{t0:.1},"dur":{:.1},"args":{{}}}}"#,
            t - t0
        ));
        t += 10.0;
    }
    let mut f = std::fs::File::create(path).unwrap();
    write!(
        f,
        r#"{{"distributedInfo":{{"backend":"nccl","rank":0,"world_size":8}},"traceEvents":[{}]}}"#,
        ev.join(",\n")
    )
    .unwrap();
}

#[test]
fn broadcast_and_all_to_all_export_and_replay() {
    let d = tempfile::tempdir().unwrap();
    let trace = d.path().join("rank0.json");
    write_trace(&trace, 3, 4096, true);
    let sched = d.path().join("s.json");
    common::vb()
        .arg("trace")
        .arg(&trace)
        .arg("--export-schedule")
        .arg(&sched)
        .assert()
        .success();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sched).unwrap()).unwrap();
    assert_eq!(v["tp"], 8, "{v}");
    let ops: Vec<(String, u64, u64)> = v["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap().to_string(),
                o["count"].as_u64().unwrap(),
                o["bytes_per_rank"].as_u64().unwrap(),
            )
        })
        .collect();
    // by hand: the all-to-all's 4096 input elements are 8 blocks of 512 (NCCL's per-peer
    // count), 1024 B of bf16 to each peer; the others keep their element counts
    let want = [
        ("all_reduce", 21504, 43008),
        ("broadcast", 1024, 2048),
        ("all_to_all", 512, 1024),
    ];
    assert_eq!(
        ops,
        want.map(|(k, c, b)| (k.to_string(), c, b)).to_vec(),
        "{v}"
    );
    // the schedule replays (the cost model here; the NCCL calls on the GPU machine, where
    // selftest replays the same three ops exactly)
    {
        let backend = "model";
        let rec = d.path().join(format!("{backend}.json"));
        common::vb()
            .args(["verify", "--backend", backend, "--schedule"])
            .arg(&sched)
            .arg("--export-json")
            .arg(&rec)
            .assert()
            .success();
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&rec).unwrap()).unwrap();
        let w = &r[0]["result"]["workload"];
        assert_eq!(
            (w["tp"].as_u64(), w["n_all_reduce"].as_u64()),
            (Some(8), Some(1)),
            "{r}"
        );
        // by hand, pcie-gen5 (the model's default machine), 8 ranks, graph, Ring/LL: launch
        // 1.0 + base 4.7 + 7 hops x 1.19 = 14.03 us, plus the bus bytes at 31.5 GB/s:
        // broadcast 2048 B x 1 -> 14.095 us; all-to-all 8 x 1024 B x 7/8 -> 14.2576 us
        let graph = r[0]["result"]["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["graph"] == true)
            .unwrap();
        let us = |name: &str| {
            graph["breakdown"]
                .as_array()
                .unwrap()
                .iter()
                .find(|b| b["name"] == name)
                .unwrap()["us"]
                .as_f64()
                .unwrap()
        };
        let bc = 14.03 + 2048.0 / 31.5e3;
        let a2a = 14.03 + 8192.0 * 7.0 / 8.0 / 31.5e3;
        assert!(
            (us("broadcast") - bc).abs() < 1e-3,
            "{} vs {bc}",
            us("broadcast")
        );
        assert!(
            (us("all_to_all") - a2a).abs() < 1e-3,
            "{} vs {a2a}",
            us("all_to_all")
        );
    }
}

#[test]
fn an_uneven_all_to_all_is_refused_naming_its_position() {
    let d = tempfile::tempdir().unwrap();
    let trace = d.path().join("rank0.json");
    // 4100 elements do not split into 8 equal blocks
    write_trace(&trace, 3, 4100, true);
    let o = common::vb()
        .arg("trace")
        .arg(&trace)
        .arg("--export-schedule")
        .arg(d.path().join("s.json"))
        .assert()
        .code(2);
    let err = String::from_utf8_lossy(&o.get_output().stderr).to_string();
    assert!(
        err.contains("collective 2 of the step (all_to_all)")
            && err.contains("4100 elements does not split into 8 equal blocks"),
        "{err}"
    );
    assert!(!d.path().join("s.json").exists());
}

#[test]
fn unknown_sizes_are_named_by_position_and_assume_size_fills_them_saying_so() {
    let d = tempfile::tempdir().unwrap();
    let trace = d.path().join("rank0.json");
    write_trace(&trace, 3, 4096, false);
    let sched = d.path().join("s.json");
    let o = common::vb()
        .arg("trace")
        .arg(&trace)
        .arg("--export-schedule")
        .arg(&sched)
        .assert()
        .code(2);
    let err = String::from_utf8_lossy(&o.get_output().stderr).to_string();
    assert!(
        err.contains(
            "1 of the 3 collectives of the step have no known size (positions 0: all_reduce)"
        ) && err.contains("--assume-size BYTES"),
        "{err}"
    );
    assert!(!sched.exists());
    // --assume-size 42K: 43,008 B of bf16 = 21,504 elements, at position 0 only
    let o = common::vb()
        .arg("trace")
        .arg(&trace)
        .args(["--assume-size", "42K", "--export-schedule"])
        .arg(&sched)
        .assert()
        .success();
    let err = String::from_utf8_lossy(&o.get_output().stderr).to_string();
    assert!(
        err.contains("1 of the 3 collectives of the exported step take the ASSUMED size --assume-size 43008 B (positions 0)"),
        "{err}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sched).unwrap()).unwrap();
    assert_eq!(
        (v["ops"][0]["count"].as_u64(), v["ops"][1]["count"].as_u64()),
        (Some(21504), Some(1024))
    );
    let origin = v["origin"].as_str().unwrap();
    assert!(
        origin.contains("sizes ASSUMED (--assume-size 43008 B, not in the trace) at positions 0"),
        "{origin}"
    );
    // an assumed size that is no whole number of elements, and --assume-size without an export
    common::vb()
        .arg("trace")
        .arg(&trace)
        .args(["--assume-size", "43009", "--export-schedule"])
        .arg(d.path().join("t.json"))
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "not a whole number of 2 B elements",
        ));
    common::vb()
        .arg("trace")
        .arg(&trace)
        .args(["--assume-size", "42K"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "give --export-schedule FILE with it",
        ));
}
