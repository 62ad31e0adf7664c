//! `trace --nccl-log` beside traces, checked by process, and NCCL logs judged on their own.
//!
//! The traces here are built in the test: a few Kineto events per collective (the runtime
//! launch on the host, with the OS pid as Kineto writes it; the NCCL kernel, whose pid is the
//! device; the `record_param_comms` op), named as `torch.profiler.tensorboard_trace_handler`
//! names them (`<host>_<pid>.<time>.pt.trace.json`). The logs are NCCL COLL lines written for
//! them. Every expected value is counted from what the test writes.
//!
//! Real pairs: of the samples, only `tests/data/traces/kimi-tp1-world1-eager-rank-0` (its CPU
//! events are pid 485) and `kimi-tp1-world1-nccl-coll.log` (every line `vm:485:`) come from one
//! process; the other real traces (HTA pid 783658, PARAM 59811..59818, the other kimi traces
//! 546 and 604) have no log of their own among the samples, and the public logs are of other
//! jobs.

use std::path::{Path, PathBuf};

use crate::common;

/// A trace of one rank: `n` eager all-reduces of 21,504 bf16 (sizes in `record_param_comms`
/// unless `sizes` is false), launched by process `pid` (none: no pid field at all).
fn trace(
    dir: &Path,
    file: &str,
    rank: usize,
    world: usize,
    pid: Option<u32>,
    n: usize,
    sizes: bool,
) -> PathBuf {
    let pid_field = |p: Option<u32>| p.map(|p| format!("\"pid\":{p},")).unwrap_or_default();
    let mut ev = Vec::new();
    for i in 0..n {
        let t = 1000.0 + 100.0 * i as f64;
        let size = if sizes {
            ",\"In msg nelems\":21504,\"Out msg nelems\":21504"
        } else {
            ""
        };
        ev.push(format!(
            "{{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"record_param_comms\",{}\"tid\":1,\"ts\":{t},\"dur\":8,\"args\":{{\"External id\":{i},\"Collective name\":\"allreduce\",\"Group size\":{world},\"dtype\":\"BFloat16\",\"Process Group Name\":\"0\",\"Seq\":{i}{size}}}}}",
            pid_field(pid)
        ));
        ev.push(format!(
            "{{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaLaunchKernel\",{}\"tid\":1,\"ts\":{},\"dur\":4,\"args\":{{\"External id\":{i},\"correlation\":{}}}}}",
            pid_field(pid),
            t + 2.0,
            100 + i
        ));
        ev.push(format!(
            "{{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)\",\"pid\":{rank},\"tid\":7,\"ts\":{},\"dur\":20,\"args\":{{\"External id\":{i},\"correlation\":{},\"stream\":7}}}}",
            t + 10.0,
            100 + i
        ));
    }
    let doc = format!(
        "{{\"distributedInfo\":{{\"backend\":\"nccl\",\"rank\":{rank},\"world_size\":{world}}},\"traceEvents\":[\n{}\n]}}",
        ev.join(",\n")
    );
    let p = dir.join(file);
    std::fs::write(&p, doc).unwrap();
    p
}

/// [`trace`] of rank `rank` of 2 with 8 all-reduces, launched by `pid` and named as
/// `tensorboard_trace_handler` names it: `<host>_<pid>.<time>.pt.trace.json`.
fn named_trace(dir: &Path, host: &str, pid: u32, rank: usize, sizes: bool) -> PathBuf {
    let time = 1_700_000_000_000_000_000u64 + rank as u64;
    let file = format!("{host}_{pid}.{time}.pt.trace.json");
    trace(dir, &file, rank, 2, Some(pid), 8, sizes)
}

/// `n` COLL lines of all-reduces of `count` bf16 by `host:pid` on a communicator of `nranks`.
fn lines(host: &str, pid: u32, n: usize, count: u64, nranks: u32) -> String {
    (0..n)
        .map(|_| format!("{host}:{pid}:{pid} [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count {count} datatype 9 op 0 root 0 comm 0xc{pid} [nranks={nranks}] stream 0x1\n"))
        .collect()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn json(args: &[&std::ffi::OsStr]) -> serde_json::Value {
    let o = common::vb()
        .arg("trace")
        .args(args)
        .args(["--format", "json"])
        .assert()
        .success();
    serde_json::from_slice(&o.get_output().stdout).unwrap()
}

/// The stderr of `trace ARGS`, which must exit 2.
fn refused(args: &[&std::ffi::OsStr]) -> String {
    let o = common::vb().arg("trace").args(args).assert().code(2);
    String::from_utf8_lossy(&o.get_output().stderr).into_owned()
}

fn notes(v: &serde_json::Value) -> Vec<String> {
    v["result"]["data"]["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn each_rank_is_matched_to_its_own_process_and_checked_against_its_calls() {
    let d = tempfile::tempdir().unwrap();
    let t0 = named_trace(d.path(), "hostA.example.com", 4242, 0, true);
    let t1 = named_trace(d.path(), "hostA.example.com", 4243, 1, true);
    // Each traced process logged its 8 calls; a third process (another job on the host)
    // logged 1. Over the three, 17 / 3 = 5.7 calls per process, fewer than the 8 each rank
    // ran: only the matching by pid tells that the log is this run's.
    let log = write(
        d.path(),
        "nccl.log",
        &(lines("hostA", 4242, 8, 21504, 2)
            + &lines("hostA", 4243, 8, 21504, 2)
            + &lines("hostA", 9999, 1, 21504, 2)),
    );
    let v = json(&[
        t0.as_os_str(),
        t1.as_os_str(),
        "--nccl-log".as_ref(),
        log.as_os_str(),
    ]);
    let ranks = v["result"]["data"]["ranks"].as_array().unwrap();
    // NCCL cuts the host at its first '.': hostA is hostA.example.com.
    assert_eq!(ranks[0]["log_process"], "hostA:4242", "{v}");
    assert_eq!(ranks[1]["log_process"], "hostA:4243", "{v}");
    assert_eq!(ranks[0]["host"], "hostA.example.com");
    assert_eq!(ranks[1]["host_pids"], serde_json::json!([4243]));
    let n = notes(&v);
    assert!(
        n.iter().any(|x| x == "the NCCL log's processes matched to the traces by pid: rank 0 = hostA:4242, rank 1 = hostA:4243"),
        "{n:?}"
    );
    assert!(
        n.iter().any(|x| x == "the NCCL log's processes hostA:9999 are no traced rank: read, not checked against any trace"),
        "{n:?}"
    );
    // every size came from the trace: read but not used for sizes, and said so
    assert!(n.iter().any(|x| x.contains("gave no size")), "{n:?}");

    // Rank 1's own process logged 3 calls, though the others logged plenty.
    let short = write(
        d.path(),
        "short.log",
        &(lines("hostA", 4242, 8, 21504, 2)
            + &lines("hostA", 4243, 3, 21504, 2)
            + &lines("hostA", 9999, 20, 21504, 2)),
    );
    let err = refused(&[
        t0.as_os_str(),
        t1.as_os_str(),
        "--nccl-log".as_ref(),
        short.as_os_str(),
    ]);
    assert!(
        err.contains(&format!(
            "has 3 all_reduce calls of process hostA:4243, but rank 1 of the trace '{}' (the same pid) ran 8 all_reduce collectives eagerly",
            t1.display()
        )),
        "{err}"
    );
}

#[test]
fn a_log_of_other_processes_is_refused_with_both_sides_named() {
    let d = tempfile::tempdir().unwrap();
    let t0 = named_trace(d.path(), "hostA", 4242, 0, true);
    let t1 = trace(d.path(), "rank1.json", 1, 2, Some(4243), 8, true);
    let log = write(
        d.path(),
        "other.log",
        &(lines("hostB", 77, 8, 21504, 2) + &lines("hostB", 78, 8, 21504, 2)),
    );
    let err = refused(&[
        t0.as_os_str(),
        t1.as_os_str(),
        "--nccl-log".as_ref(),
        log.as_os_str(),
    ]);
    let want = format!(
        "Error: the NCCL log ({}) holds processes hostB:77, hostB:78, but none of them is a traced process (rank 0 '{}' pid 4242 host hostA, rank 1 '{}' pid 4243): a log of another run? give the log of the traced run (NCCL begins each line with host:pid; the trace's pid is on its CPU events)\n",
        log.display(),
        t0.display(),
        t1.display()
    );
    assert_eq!(err, want);
    // The same pid on another host is another process: the file name gives the trace's host.
    let log = write(d.path(), "samepid.log", &lines("hostB", 4242, 8, 21504, 2));
    let err = refused(&[t0.as_os_str(), "--nccl-log".as_ref(), log.as_os_str()]);
    assert!(
        err.contains("holds processes hostB:4242, but none"),
        "{err}"
    );
}

#[test]
fn a_partial_log_is_used_for_the_ranks_it_holds_and_the_rest_is_said() {
    let d = tempfile::tempdir().unwrap();
    // Sizes only in the log: rank 0's process logged 21,504 elements, another process on the
    // host logged as many calls of 999. Over the whole log neither size has 90% of the calls;
    // rank 0's own calls give 21,504.
    let t0 = named_trace(d.path(), "hostA", 4242, 0, false);
    let t1 = named_trace(d.path(), "hostA", 4243, 1, false);
    let log = write(
        d.path(),
        "part.log",
        &(lines("hostA", 4242, 8, 21504, 2) + &lines("hostA", 5555, 8, 999, 2)),
    );
    let v = json(&[
        t0.as_os_str(),
        t1.as_os_str(),
        "--nccl-log".as_ref(),
        log.as_os_str(),
    ]);
    let ranks = v["result"]["data"]["ranks"].as_array().unwrap();
    assert_eq!(ranks[0]["log_process"], "hostA:4242", "{v}");
    assert!(ranks[1].get("log_process").is_none(), "{v}");
    let seq = &v["result"]["data"]["sequence"][0];
    assert_eq!(
        (seq["elements"].as_u64(), seq["size_from"].as_str()),
        (Some(21504), Some("nccl_log")),
        "{v}"
    );
    let n = notes(&v);
    assert!(
        n.iter().any(|x| x == &format!(
            "no process of the NCCL log is rank 1 '{}' pid 4243 host hostA: not checked against the log, and its sizes (where the trace lacked them) came from all logged processes",
            t1.display()
        )),
        "{n:?}"
    );
    assert!(
        n.iter()
            .any(|x| x.contains("processes hostA:5555 are no traced rank")),
        "{n:?}"
    );
}

#[test]
fn without_pids_the_calls_per_process_of_the_whole_log_are_checked() {
    // A trace with no pid on its events (as verifybench writes its own): nothing to match, so
    // the first rank is checked against the mean calls per process: (5 + 3) / 2 = 4 < 8.
    let d = tempfile::tempdir().unwrap();
    let t0 = trace(d.path(), "rank0.json", 0, 2, None, 8, true);
    let log = write(
        d.path(),
        "n.log",
        &(lines("h", 1, 5, 21504, 2) + &lines("h", 2, 3, 21504, 2)),
    );
    let err = refused(&[t0.as_os_str(), "--nccl-log".as_ref(), log.as_os_str()]);
    assert!(
        err.contains("has 4 all_reduce calls per process, but rank 0"),
        "{err}"
    );
    assert!(
        err.contains("ran 8 all_reduce collectives eagerly"),
        "{err}"
    );
}

fn data(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(p)
}

#[test]
fn the_real_pair_matches_and_a_real_trace_of_another_process_does_not() {
    // kimi-tp1-world1-eager: CPU events of pid 485 (zcat | grep '"pid"' on cpu_op and
    // cuda_runtime events: 2,243, all 485); its log: 409 COLL lines, all `vm:485:`.
    let log = data("traces/kimi-tp1-world1-nccl-coll.log");
    let v = json(&[
        data("traces/kimi-tp1-world1-eager-rank-0.trace.json.gz").as_os_str(),
        "--nccl-log".as_ref(),
        log.as_os_str(),
    ]);
    assert_eq!(
        v["result"]["data"]["ranks"][0]["log_process"], "vm:485",
        "{v}"
    );
    assert_eq!(
        v["result"]["data"]["ranks"][0]["host_pids"],
        serde_json::json!([485])
    );
    // the TP2 sizes replayed by another process (pid 546): not this log's
    let err = refused(&[
        data("traces/kimi-tp2-world1-eager-rank-0.trace.json.gz").as_os_str(),
        "--nccl-log".as_ref(),
        log.as_os_str(),
    ]);
    assert!(
        err.contains("holds processes vm:485, but none of them is a traced process"),
        "{err}"
    );
    assert!(err.contains("pid 546"), "{err}");
}

/// COLL lines of one process and communicator: for each (count, times), `times` steps of
/// 3 all-reduces of `count` bf16 and one all-gather of `count * 8`.
fn steps_log(shape: &[(u64, usize)]) -> String {
    let mut s = String::new();
    for &(count, times) in shape {
        for _ in 0..times {
            for _ in 0..3 {
                s += &format!("h:7:7 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count {count} datatype 9 op 0 root 0 comm 0xa [nranks=2] stream 0x1\n");
            }
            s += &format!("h:7:7 [0] NCCL INFO AllGather: opCount 0 sendbuff 0x1 recvbuff 0x1 count {} datatype 9 op 0 root 0 comm 0xa [nranks=2] stream 0x1\n", count * 8);
        }
    }
    s
}

fn judged(text: &str) -> (String, String) {
    let d = tempfile::tempdir().unwrap();
    let p = write(d.path(), "coll.log", text);
    let v = json(&[p.as_os_str()]);
    let s = &v["result"]["data"]["sequences"][0];
    (
        s["mode"].as_str().unwrap().to_string(),
        s["mode_why"].as_str().unwrap().to_string(),
    )
}

#[test]
fn a_log_alone_says_eager_captured_or_cannot_tell() {
    // 2 set-up all-reduces of 1 element, then 5 steps of 7168-element calls: the first step
    // holds the set-up calls, the other 4 are the same, back to back: 4 > 3 -> eager.
    let setup = "h:7:7 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 1 datatype 7 op 0 root 0 comm 0xa [nranks=2] stream 0x1\n".repeat(2);
    let (m, why) = judged(&(setup.clone() + &steps_log(&[(7168, 5)])));
    assert_eq!(m, "eager", "{why}");
    assert!(why.starts_with("the same step of 4 calls logged 4 times in a row (steps end at all_gather; from step 2)"), "{why}");
    // SGLang's capture: batch sizes 4, 2, 1 (largest first), each run twice and captured
    // (3 steps alike), then nothing: captured.
    let (m, why) = judged(&steps_log(&[(4 * 7168, 3), (2 * 7168, 3), (7168, 3)]));
    assert_eq!(m, "captured", "{why}");
    assert!(why.starts_with("3 different steps"), "{why}");
    // 3 steps alike: the warm-up runs and capture of one size, or a short eager run.
    let (m, why) = judged(&steps_log(&[(7168, 3)]));
    assert_eq!((m.as_str(), why.as_str()), ("cannot_tell", "3 step(s) (steps end at all_gather): an eager run this short looks like the warm-up runs and capture of one graph"));
    // The sweep, then a step of a size already seen: not captured only.
    let (m, _) = judged(&steps_log(&[
        (4 * 7168, 3),
        (2 * 7168, 3),
        (7168, 3),
        (2 * 7168, 1),
    ]));
    assert_eq!(m, "cannot_tell");
    // Batch sizes 1 and 2 in turn, 7 steps each: never two alike in a row, but one step
    // logged 7 times in all, more than 2 x 3 (an engine's capture passes) -> eager; with 6
    // each, 6 <= 6 -> cannot tell.
    let turns = |n: usize| steps_log(&[(7168, 1), (2 * 7168, 1)].repeat(n));
    let (m, why) = judged(&turns(7));
    assert_eq!(m, "eager", "{why}");
    assert!(why.starts_with("the same step of 4 calls logged 7 times in all, between others (steps end at all_gather; first at step 1)"), "{why}");
    assert_eq!(judged(&turns(6)).0, "cannot_tell");
    // All-reduces only: no step boundary.
    let (m, why) = judged(&lines("h", 7, 50, 7168, 2));
    assert_eq!(
        (m.as_str(), why.as_str()),
        (
            "cannot_tell",
            "one kind of call only: the log shows no step boundary"
        )
    );
}

#[test]
fn the_samples_logs_judged() {
    // kimi-tp1-world1-nccl-coll.log (its first 400 lines, then torch's set-up calls), by
    // `uniq -c` of op/count/datatype: 3 x (123 AllReduce 21504 bf16 + 1 AllGather 491520), 27
    // AllReduce 21504, then set-up calls: AllReduce 1 f32, AllGather 20 f64, AllReduce 1 i64,
    // 2 AllReduce 1 f32, AllGather 20 f64, AllReduce 1 i64, AllGather 1 i64, AllGather 253 u8,
    // AllReduce 1 f32. All-gathers (7) are rarer than all-reduces (402): 7 steps end at them,
    // the verify step 3 times in a row (not more than a capture's 3), and the set-up steps are
    // no sweep of sizes (16 B then 253 B grows after shrinking).
    let o = common::vb()
        .arg("trace")
        .arg(data("traces/kimi-tp1-world1-nccl-coll.log"))
        .arg("--format")
        .arg("json")
        .assert()
        .success();
    let v: serde_json::Value = serde_json::from_slice(&o.get_output().stdout).unwrap();
    let s = &v["result"]["data"]["sequences"][0];
    assert_eq!(s["mode"], "cannot_tell", "{s}");
    assert_eq!(s["mode_why"], "7 steps (steps end at all_gather), at most 3 alike in a row, not one sweep of sizes: neither eager repetition nor a capture");
    // The public logs (tests/data/nccl-coll-public/, read by hand): #203 all-reduces only;
    // #531 one all-gather per process; #584 one communicator of 4 sends of 2,420,736 f32 then
    // a recv (the send is the rarer op called twice: 4 one-call steps, no other op between)
    // and one of 2 sends; torchtitan hopper01:191369 ReduceScatter, AllGather, AllReduce,
    // AllReduce (the all-reduce is the only op called twice: 2 steps) and hopper01:191370
    // AllGather, ReduceScatter, AllGather (2 steps).
    let o = common::vb()
        .arg("trace")
        .arg(data("nccl-coll-public"))
        .arg("--format")
        .arg("json")
        .assert()
        .success();
    let v: serde_json::Value = serde_json::from_slice(&o.get_output().stdout).unwrap();
    let got: Vec<(String, String, String)> = v["result"]["data"]["sequences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                format!("{}:{}", s["host"].as_str().unwrap(), s["pid"]),
                s["mode"].as_str().unwrap().into(),
                s["mode_why"].as_str().unwrap().into(),
            )
        })
        .collect();
    for (p, m, why) in &got {
        assert_eq!(m, "cannot_tell", "{p}: {why}");
    }
    let why = |p: &str| {
        got.iter()
            .filter(|g| g.0 == p)
            .map(|g| g.2.as_str())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        why("gpu1:13135"),
        ["one kind of call only: the log shows no step boundary"; 2]
    );
    assert_eq!(why("hopper01:191369"), ["2 step(s) (steps end at all_reduce): an eager run this short looks like the warm-up runs and capture of one graph"]);
    assert_eq!(why("ubuntu:199574")[0], "the same call (send) logged 4 times in a row, with no other op between: calls of one op back to back may be one step's own, so no step boundary shows");
    assert_eq!(why("hopper01:191370"), ["2 step(s) (steps end at all_gather): an eager run this short looks like the warm-up runs and capture of one graph"]);
}

#[test]
fn trace_shows_the_known_traps_its_own_evidence_proves() {
    // The delay trace's 3 steps were launched kernel by kernel (cudaLaunchKernel, no
    // cudaGraphLaunch: tests/data/traces/README.md, "eager"): explain's eager-verify trap,
    // with its source from explain's table.
    let o = common::vb()
        .arg("trace")
        .arg(data(
            "traces/kimi-tp1-world1-delay-eager-rank-0.trace.json.gz",
        ))
        .assert()
        .success();
    let out = String::from_utf8_lossy(&o.get_output().stdout).into_owned();
    assert!(
        out.contains("\n  found: the verify ran eagerly (no CUDA graph): 3 of 3 traced steps launched kernel by kernel (no cudaGraphLaunch) (source: SGLang python/sglang/srt/managers/scheduler.py"),
        "{out}"
    );
    assert_eq!(
        out.matches("\n  found: ").count(),
        1,
        "one line per trap found: {out}"
    );
    let v = json(&[data("traces/kimi-tp1-world1-delay-eager-rank-0.trace.json.gz").as_os_str()]);
    let traps = v["result"]["data"]["traps"].as_array().unwrap();
    assert_eq!(traps.len(), 1);
    assert_eq!(traps[0]["id"], "eager-verify");
    // PARAM's DLRM step is training (backward kernels): it runs no verify, so no verify trap,
    // though it ran eagerly.
    let o = common::vb()
        .arg("trace")
        .arg(data("traces/param-dlrm-8ranks"))
        .assert()
        .success();
    let out = String::from_utf8_lossy(&o.get_output().stdout).into_owned();
    assert!(out.contains("eager"), "{out}");
    assert!(!out.contains("Known traps"), "{out}");
}
