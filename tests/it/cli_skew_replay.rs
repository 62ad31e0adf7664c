//! The server's skew replayed: `trace --export-schedule` of every rank's trace writes each
//! rank's own host gaps, and `verify --host-gap-from` replays them per rank, so the waiting the
//! trace measured comes back. The traces are SYNTHETIC (`tests/support/synth.rs`: a
//! simulation with a known late rank), not a profile of a real run.

use std::path::Path;

use crate::synth::{self, SynthSpec};

use crate::common::{read_json as json, vb};

const RANKS: usize = 4;
const LATE_US: f64 = 400.0;

fn spec() -> SynthSpec {
    SynthSpec {
        ranks: RANKS,
        steps: 4,
        late_rank: Some((2, LATE_US)),
        ar_elements: 3 * 7168,
        ag_elements: 3 * 163840 / RANKS as u64,
        ..Default::default()
    }
}

/// `trace --format json --export-schedule`: the trace's record and the schedule file.
fn export(traces: &Path, sched: &Path) -> serde_json::Value {
    let o = vb()
        .args(["trace", "--format", "json"])
        .arg(traces)
        .arg("--export-schedule")
        .arg(sched)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The eager run's `in_collective` of a modeled comm-only replay of `sched` with its gaps.
fn replay(sched: &Path, gaps: &Path, out: &Path) -> serde_json::Value {
    let o = vb()
        .args([
            "verify",
            "--backend",
            "model",
            "--mode",
            "comm",
            "--graph",
            "both",
        ])
        .args(["--tp", &RANKS.to_string(), "--schedule"])
        .arg(sched)
        .arg("--host-gap-from")
        .arg(gaps)
        .arg("--export-json")
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json(out);
    let rec = v.as_array().map_or(v.clone(), |a| a[0].clone());
    let runs = rec["result"]["runs"].as_array().unwrap().clone();
    let graph = runs.iter().find(|r| r["graph"] == true).unwrap();
    assert_eq!(graph["in_collective"]["waiting_us"].as_f64(), Some(0.0));
    runs.iter().find(|r| r["graph"] == false).unwrap()["in_collective"].clone()
}

#[test]
fn a_late_rank_exported_and_replayed_gives_back_the_traces_waiting() {
    let d = tempfile::tempdir().unwrap();
    let s = spec();
    synth::write_dir(&s, d.path(), true).unwrap();
    let out = tempfile::tempdir().unwrap();
    let sched = out.path().join("s.json");
    let t = export(d.path(), &sched);

    // The file holds each rank's own gaps; the late rank's are about LATE_US longer before
    // every collective (its delay sits between its compute launch and its collective's).
    let f = json(&sched);
    let per: Vec<Vec<f64>> = serde_json::from_value(f["host_gaps_per_rank_us"].clone()).unwrap();
    assert_eq!(per.len(), RANKS);
    let n = per[0].len();
    assert_eq!(n, s.all_reduces + 1);
    let mean = |v: &[f64]| v[1..].iter().sum::<f64>() / (v.len() - 1) as f64;
    let extra = mean(&per[2]) - mean(&per[0]);
    assert!((extra - LATE_US).abs() < 0.05 * LATE_US, "{extra}");
    assert!(f["origin"]
        .as_str()
        .unwrap()
        .contains("each of the 4 ranks' own gaps"));

    // The trace's waiting per step (mean over ranks) against the replay's.
    let traced = t["result"]["data"]["step"]["typical"]["waiting_us"]
        .as_f64()
        .unwrap();
    // By hand: each collective, the three on-time ranks wait for the late one about LATE_US
    // (less the transfer and compute that follow the late rank's launch, more its host time):
    // the mean over ranks is near 3/4 x LATE_US per collective.
    let hand = 0.75 * LATE_US * n as f64;
    assert!((traced / hand - 1.0).abs() < 0.15, "{traced} vs {hand}");
    let ic = replay(&sched, &sched, &out.path().join("v.json"));
    let replayed = ic["waiting_us"].as_f64().unwrap();
    assert!(
        (replayed / traced - 1.0).abs() < 0.10,
        "replayed {replayed} us, traced {traced} us"
    );
    // The late rank itself waits for nobody; the others wait about alike.
    let by_rank: Vec<f64> = serde_json::from_value(ic["waiting_per_rank_us"].clone()).unwrap();
    assert!(by_rank[2] < 0.05 * by_rank[0], "{by_rank:?}");

    // An old file (one list of gaps, no per-rank ones) stays readable: every rank replays the
    // same gaps, so nobody waits.
    let mut old = f.clone();
    old.as_object_mut().unwrap().remove("host_gaps_per_rank_us");
    let oldp = out.path().join("old.json");
    std::fs::write(&oldp, old.to_string()).unwrap();
    let ic = replay(&oldp, &oldp, &out.path().join("v2.json"));
    assert_eq!(ic["waiting_us"].as_f64(), Some(0.0));
}

#[test]
fn per_rank_gaps_of_another_rank_count_are_refused() {
    let d = tempfile::tempdir().unwrap();
    synth::write_dir(&spec(), d.path(), true).unwrap();
    let out = tempfile::tempdir().unwrap();
    let sched = out.path().join("s.json");
    export(d.path(), &sched);
    // The same ops at two ranks: the file's 4 lists of gaps cannot be given to 2 ranks.
    let mut f = json(&sched);
    f["tp"] = serde_json::json!(2);
    let two = out.path().join("two.json");
    std::fs::write(&two, f.to_string()).unwrap();
    let o = vb()
        .args([
            "verify",
            "--backend",
            "model",
            "--mode",
            "comm",
            "--tp",
            "2",
        ])
        .arg("--schedule")
        .arg(&two)
        .arg("--host-gap-from")
        .arg(&two)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("host gaps of 4 ranks but this replay runs 2"),
        "{e}"
    );

    // Two of the four ranks' traces: no per-rank gaps (they would leave ranks without any),
    // and the origin says why.
    let part = tempfile::tempdir().unwrap();
    for r in [0, 2] {
        let name = format!("rank-{r}.json.gz");
        std::fs::copy(d.path().join(&name), part.path().join(&name)).unwrap();
    }
    let sched2 = out.path().join("part.json");
    export(part.path(), &sched2);
    let f = json(&sched2);
    assert!(f.get("host_gaps_per_rank_us").is_none(), "{f}");
    let origin = f["origin"].as_str().unwrap();
    assert!(
        origin.contains("no per-rank gaps (the traces are of ranks [0, 2]"),
        "{origin}"
    );
}
