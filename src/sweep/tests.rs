//! The sweep pipeline with a mock runner: canned records and the real NCCL logs of
//! tests/data, no child process, no GPU.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::*;
use crate::measure::Summary;
use crate::model::{self, Phase, ScheduleOptions};
use crate::record::{Mode, VerifyResult, VerifyRun, WorkerInfo};
use runner::MockRunner;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn schedule(tokens: u64) -> model::Schedule {
    model::build(
        &model::presets::preset("kimi-k2.5").unwrap(),
        &ScheduleOptions {
            tp: 2,
            tokens,
            ..Default::default()
        },
        Phase::Verify,
    )
    .unwrap()
}

fn cfg(dir: &std::path::Path) -> SweepConfig {
    SweepConfig {
        seed: super::rounds::DEFAULT_SEED,
        workload: RecordedWorkload::of(&schedule(3)),
        graph: "both".into(),
        launcher: "processes".into(),
        backend: "nccl".into(),
        mode: "comm".into(),
        parent_env: [("NCCL_NVLS_ENABLE".into(), "0".into())]
            .into_iter()
            .collect(),
        log_dir: dir.join("logs"),
        probe: true,
        timeout: Duration::from_secs(5),
        source: Source::Measured,
        libraries: Default::default(),
    }
}

/// A verify record whose graph median is `graph_us` (+-1%), eager 1.3x that.
fn record(graph_us: f64, env: &env::Env, wrong: u64) -> Record {
    let s = schedule(3);
    let run = |graph: bool, m: f64| {
        let samples: Vec<f64> = (0..50).map(|i| m * (0.99 + 0.0004 * i as f64)).collect();
        VerifyRun {
            graph,
            mode: Mode::Comm,
            per_verify: Summary::from_samples(&samples).unwrap(),
            per_collective_us: m / 124.0,
            breakdown: vec![],
            wrong,
            iterations: 50,
            warmup: 5,
            in_collective: None,
        }
    };
    let mut prov = Provenance::here("nccl", crate::util::now_utc());
    prov.workers = (0..2)
        .map(|rank| WorkerInfo {
            rank,
            pid: 100 + rank as u32,
            device: rank,
            nccl_env: env::nccl_part(env),
        })
        .collect();
    Record::new(
        Source::Measured,
        prov,
        Body::Verify(VerifyResult::of(
            RecordedWorkload::of(&s),
            vec![run(false, graph_us * 1.3), run(true, graph_us)],
        )),
    )
}

/// The canned outcome of each point, keyed by its label.
fn canned(job: &PointJob) -> anyhow::Result<PointOutcome> {
    let label = job.point.label();
    let (log, us) =
        match label.as_str() {
            "(defaults)" => ("nccl-2.28.3-h200x2-procs-default.log", 900.0),
            "NCCL_PROTO=Simple" => ("nccl-2.28.3-h200x2-procs-simple.log", 1400.0),
            "NCCL_P2P_DISABLE=1" => ("nccl-2.28.3-h200x2-procs-p2poff.log", 1800.0),
            "NCCL_PROTO=LL128" => ("nccl-2.28.3-h200x2-procs-default.log", 880.0),
            "NCCL_PROTO=LL128 NCCL_ALGO=Tree" | "NCCL_ALGO=Tree" => return Ok(PointOutcome {
                failure: Some(
                    "the probe run (NCCL_DEBUG=INFO) exited with code 1: Error: ncclInvalidUsage"
                        .into(),
                ),
                probe_logs: vec![data("nccl-2.28.3-h200x2-procs-ll128-tree.log")],
                stderr_tail: "[rank 0] FAILED: Comm::all_gather: ncclInvalidUsage".into(),
                ..Default::default()
            }),
            other => panic!("no canned outcome for {other}"),
        };
    Ok(PointOutcome {
        record: Some(record(us, &job.env, 0)),
        probe_logs: vec![data(log)],
        ..Default::default()
    })
}

fn points(lists: &[&str]) -> Vec<Point> {
    let l: Vec<String> = lists.iter().map(|s| s.to_string()).collect();
    matrix::points(&matrix::dimensions(&l, &[]).unwrap(), None)
}

/// One round of `pts` through the sweep's own loop ([`run_pairs`]), in the order given (the
/// first point is the baseline), each finished point appended to `file`.
fn run_round(
    c: &SweepConfig,
    pts: &[Point],
    runner: &dyn PointRunner,
    file: &mut ResultsFile,
    interrupted: &AtomicBool,
    each: impl FnMut(&Point),
) -> PairsRun {
    run_rounds_of(1, c, pts, runner, file, interrupted, each)
}

/// What the sweep prints after two rounds of `pts` (the first the baseline) run by `runner`:
/// the first round's table, the rounds' judgement and the recommendation. `edit` changes every
/// finished point before it is judged.
fn judged_over_two_rounds(
    pts: &[Point],
    runner: &dyn PointRunner,
    edit: impl Fn(&mut SweepPoint),
) -> String {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(dir.path());
    let mut file = ResultsFile::open(&dir.path().join("r.jsonl")).unwrap();
    let flag = AtomicBool::new(false);
    let mut pairs = run_rounds_of(2, &c, pts, runner, &mut file, &flag, |_| {}).finished;
    pairs.iter_mut().for_each(edit);
    let first: Vec<SweepPoint> = pairs.iter().filter(|p| p.round == 0).cloned().collect();
    summary::render(&first, &pairs, Mode::Comm, 2, 0.0).0
}

/// [`run_round`] over `n` rounds, every round in the order given.
fn run_rounds_of(
    n: usize,
    c: &SweepConfig,
    pts: &[Point],
    runner: &dyn PointRunner,
    file: &mut ResultsFile,
    interrupted: &AtomicBool,
    mut each: impl FnMut(&Point),
) -> PairsRun {
    let plan = rounds::RoundPlan {
        rounds: n,
        seed: c.seed,
        baseline: pts[0].id.clone(),
        order: (0..n)
            .flat_map(|round| {
                pts.iter().map(move |p| rounds::RoundKey {
                    point_id: p.id.clone(),
                    round,
                })
            })
            .collect(),
    };
    run_pairs(
        c,
        &plan,
        pts,
        &Default::default(),
        &Default::default(),
        runner,
        file,
        interrupted,
        |p, _, _| each(p),
    )
    .unwrap()
}

#[test]
fn pipeline_records_every_point_and_proves_what_nccl_did() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(dir.path());
    let one = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
    let pts: Vec<Point> = [
        vec![],
        one("NCCL_PROTO", "Simple"),
        one("NCCL_P2P_DISABLE", "1"),
        one("NCCL_PROTO", "LL128"),
        one("NCCL_ALGO", "Tree"),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, o)| Point {
        id: format!("p{i:02}"),
        overrides: o,
    })
    .collect();
    let path = dir.path().join("r.jsonl");
    let mut file = ResultsFile::open(&path).unwrap();
    let flag = AtomicBool::new(false);
    let mut seen = 0;
    let run = run_round(&c, &pts, &MockRunner(canned), &mut file, &flag, |_| {
        seen += 1
    });
    assert!(!run.interrupted);
    assert_eq!(seen, pts.len());
    let (stored, warnings) = results::load(&path).unwrap();
    assert!(warnings.is_empty());
    let ids = |v: &[SweepPoint]| v.iter().map(|p| p.point_id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&stored), ids(&run.finished));
    assert_eq!(ids(&stored), ["p00", "p01", "p02", "p03", "p04"]);

    let by = |label: &str| {
        stored
            .iter()
            .find(|p| {
                let pt = Point {
                    id: String::new(),
                    overrides: p.overrides.clone(),
                };
                pt.label() == label
            })
            .unwrap()
    };
    let base = by("(defaults)");
    assert!(base.ok());
    let e = base.effective.as_ref().unwrap();
    assert_eq!(e.algo_proto(), "RING/LL");
    assert_eq!(e.transport(), "P2P/CUMEM");
    assert_eq!(e.nccl_version.as_deref(), Some("2.28.3+cuda13.0"));
    assert_eq!(base.env_check.status, "ok");

    let simple = by("NCCL_PROTO=Simple");
    assert_eq!(
        simple.effective.as_ref().unwrap().algo_proto(),
        "RING/SIMPLE"
    );
    assert!(simple.effective.as_ref().unwrap().mismatches.is_empty());
    assert_eq!(simple.env_check.nccl_confirmed, vec!["NCCL_PROTO"]);

    let p2p = by("NCCL_P2P_DISABLE=1");
    assert_eq!(
        p2p.effective.as_ref().unwrap().transport(),
        "SHM/direct/direct"
    );
    assert!(p2p.effective.as_ref().unwrap().mismatches.is_empty());

    // The default log under an LL128 request: NCCL used LL -> flagged as a mismatch.
    let ll128 = by("NCCL_PROTO=LL128");
    let m = &ll128.effective.as_ref().unwrap().mismatches;
    assert!(
        m.iter()
            .any(|x| x.contains("asked NCCL_PROTO=LL128, NCCL used LL for AllReduce 43008 B")),
        "{m:?}"
    );

    let tree = by("NCCL_ALGO=Tree");
    assert!(!tree.ok());
    let why = tree.reason.as_deref().unwrap();
    assert!(why.contains("ncclInvalidUsage"), "{why}");
    assert!(why.contains("no algorithm/protocol available for function AllGather"));
    assert!(tree
        .hint
        .as_deref()
        .unwrap()
        .contains("NCCL_ALGO=ring;allreduce:tree"));
    assert_eq!(tree.log_paths.len(), 1);
    assert_eq!(tree.nccl_warnings.len(), 1);

    // Ranking: LL128 (880) first, then the baseline; failed Tree listed apart.
    let r = rank::rank(&stored, Mode::Comm);
    assert!(r.primary_graph);
    assert_eq!(r.rows[0].point.overrides[0].1, "LL128");
    assert_eq!(r.failed.len(), 1);
    let (ratio, err) = r.rows[0].graph.as_ref().unwrap().ratio.unwrap();
    assert!((ratio - 880.0 / 900.0).abs() < 1e-3, "{ratio}");
    assert!(err > 0.0 && err < 0.01, "{err}");
    // Over two rounds (identical timings: no noise) LL128 is recommended, with the warning
    // that the log shows NCCL running LL at it.
    let text = judged_over_two_rounds(&pts, &MockRunner(canned), |_| {});
    assert!(
        text.contains("Recommendation (graph replay, held over 2 rounds): NCCL_PROTO=LL128\n  export NCCL_PROTO=LL128\n"),
        "{text}"
    );
    assert!(text.contains("did not do exactly what was asked"), "{text}");
    let t = rank::table(&r);
    assert_eq!(t.rows.len(), stored.len());
    assert_eq!(t.rows.last().unwrap()[0], "failed");

    // The same numbers on a communicator of one rank: NCCL chooses nothing there, so LL128's
    // lead is not exported, in the single-round ranking as in the rounds' block.
    let text = judged_over_two_rounds(&pts, &MockRunner(canned), |p| {
        p.effective.get_or_insert_with(Default::default).one_rank = Some("1 rank".into());
    });
    assert!(
        text.contains("Recommendation: none at one rank (graph replay)"),
        "{text}"
    );
    assert!(!text.contains("export NCCL_"), "{text}");
}

#[test]
fn a_lead_within_the_noise_of_the_rounds_is_not_recommended() {
    let pts = points(&["NCCL_PROTO=LL128"]);
    // The baseline moves 0.6% between its rounds; LL128 is 0.06% faster than its first.
    let close = |job: &PointJob| -> anyhow::Result<PointOutcome> {
        let us = match (job.point.is_baseline(), job.round) {
            (true, 0) => 900.0,
            (true, _) => 905.0,
            (false, _) => 899.5,
        };
        Ok(PointOutcome {
            record: Some(record(us, &job.env, 0)),
            ..Default::default()
        })
    };
    let text = judged_over_two_rounds(&pts, &MockRunner(close), |_| {});
    assert!(
        text.contains(
            "graph replay: no setting beats the defaults beyond the noise measured here (±0.3%)"
        ),
        "{text}"
    );
    assert!(
        text.contains("Recommendation: keep NCCL's defaults"),
        "{text}"
    );
    assert!(!text.contains("export"), "{text}");
}

#[test]
fn worker_that_did_not_see_the_variable_is_flagged() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(dir.path());
    let pts = points(&["NCCL_PROTO=Simple"]);
    let lost = |job: &PointJob| -> anyhow::Result<PointOutcome> {
        // The workers report the parent's environment only: the override never reached them.
        let parent = env::timed_env(
            &[].into_iter().collect(),
            &Point {
                id: String::new(),
                overrides: vec![],
            },
        );
        let _ = job;
        Ok(PointOutcome {
            record: Some(record(900.0, &parent, 0)),
            ..Default::default()
        })
    };
    let mut file = ResultsFile::open(&dir.path().join("r.jsonl")).unwrap();
    let run = run_round(
        &c,
        &pts,
        &MockRunner(lost),
        &mut file,
        &AtomicBool::new(false),
        |_| {},
    );
    let p = &run.finished[1];
    assert_eq!(p.env_check.status, "mismatch");
    assert!(p.env_check.problems[0].contains("saw NCCL_PROTO=<unset>, asked Simple"));
}

#[test]
fn wrong_results_fail_the_point_and_never_rank_first() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(dir.path());
    let pts = points(&["NCCL_PROTO=LL128"]);
    // The stub reports no failure: only wrong elements in an otherwise clean, faster run.
    // Failing the point is the job of the code under test.
    let corrupt = |job: &PointJob| -> anyhow::Result<PointOutcome> {
        let (us, wrong) = if job.point.is_baseline() {
            (900.0, 0)
        } else {
            (500.0, 7)
        };
        Ok(PointOutcome {
            record: Some(record(us, &job.env, wrong)),
            failure: None,
            ..Default::default()
        })
    };
    let mut file = ResultsFile::open(&dir.path().join("r.jsonl")).unwrap();
    let run = run_round(
        &c,
        &pts,
        &MockRunner(corrupt),
        &mut file,
        &AtomicBool::new(false),
        |_| {},
    );
    assert_eq!(run.finished[0].status, "ok");
    assert_eq!(run.finished[1].status, "failed");
    assert_eq!(
        run.finished[1].reason.as_deref(),
        Some("14 elements of the results were wrong")
    );
    // what was appended to the results file says the same
    let (stored, _) = super::results::load(file.path()).unwrap();
    assert_eq!(stored[1].status, "failed");
    let r = rank::rank(&run.finished, Mode::Comm);
    assert!(r.rows[0].point.overrides.is_empty());
    assert_eq!(r.rows[1].wrong, 14);
}

#[test]
fn interruption_keeps_finished_points_only() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(dir.path());
    let pts = points(&["NCCL_PROTO=LL,LL128,Simple"]);
    let flag = AtomicBool::new(false);
    let stop_at_third = |job: &PointJob| -> anyhow::Result<PointOutcome> {
        if job.point.get("NCCL_PROTO") == Some("LL128") {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            return Ok(PointOutcome {
                interrupted: true,
                ..Default::default()
            });
        }
        Ok(PointOutcome {
            record: Some(record(900.0, &job.env, 0)),
            ..Default::default()
        })
    };
    let path = dir.path().join("r.jsonl");
    let mut file = ResultsFile::open(&path).unwrap();
    let run = run_round(
        &c,
        &pts,
        &MockRunner(stop_at_third),
        &mut file,
        &flag,
        |_| {},
    );
    assert!(run.interrupted);
    assert_eq!(run.finished.len(), 2);
    assert_eq!(results::load(&path).unwrap().0.len(), 2);
}

#[test]
fn resume_file_of_another_workload_is_refused_and_torn_lines_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(dir.path());
    let pts = points(&["NCCL_PROTO=Simple"]);
    let path = dir.path().join("r.jsonl");
    let mut file = ResultsFile::open(&path).unwrap();
    run_round(
        &c,
        &pts,
        &MockRunner(canned),
        &mut file,
        &AtomicBool::new(false),
        |_| {},
    );
    // A crash mid-write leaves half a line: loading skips it with a warning.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"{\"schema_version\": 1, \"sou"))
        .unwrap();
    let (done, warnings) = results::load(&path).unwrap();
    assert_eq!(done.len(), 2);
    assert!(warnings[0].contains("is truncated and was ignored"));
    // Appending after a torn line starts a new line.
    let mut file = ResultsFile::open(&path).unwrap();
    let sp = &done[0];
    file.append(&to_record(&c, sp, crate::util::now_utc()))
        .unwrap();
    let (again, warnings) = results::load(&path).unwrap();
    assert_eq!((again.len(), warnings.len()), (3, 1));
    // A valid record of another kind is refused.
    std::fs::write(&path, "{\"schema_version\": 1}\n").unwrap();
    assert_eq!(
        crate::error::exit_code(&results::load(&path).unwrap_err()),
        2
    );

    assert!(results::check_same_workload(&path, &done, &c.workload).is_ok());
    let other = RecordedWorkload::of(&schedule(4));
    let e = results::check_same_workload(&path, &done, &other).unwrap_err();
    assert_eq!(crate::error::exit_code(&e), 2);
    assert!(e.to_string().contains("another workload"), "{e}");
    assert!(e.to_string().contains("tokens 3"), "{e}");
}

#[test]
fn a_variable_nccl_does_not_read_is_never_recommended() {
    let pts = points(&["NCCL_PRTO=LL"]);
    // The misspelt point times 3% faster in both rounds: noise, since NCCL ran its defaults.
    let lucky = |job: &PointJob| -> anyhow::Result<PointOutcome> {
        let us = if job.point.is_baseline() {
            900.0
        } else {
            873.0
        };
        Ok(PointOutcome {
            record: Some(record(us, &job.env, 0)),
            ..Default::default()
        })
    };
    let text = judged_over_two_rounds(&pts, &MockRunner(lucky), |_| {});
    // it ranks first in the table, and is judged apart
    let rank1 = text.lines().find(|l| l.starts_with("1 ")).unwrap();
    assert!(rank1.contains("NCCL_PRTO=LL"), "{text}");
    assert!(
        text.contains("not judged (they set only variables NCCL does not read, so they ran NCCL's defaults): p01"),
        "{text}"
    );
    assert!(
        text.contains("Recommendation: keep NCCL's defaults"),
        "{text}"
    );
    assert!(!text.contains("export NCCL_PRTO"), "{text}");
}

#[test]
fn one_rank_proof_says_what_the_log_can_and_cannot_prove() {
    let e = results::Effective {
        nccl_version: Some("2.28.3".into()),
        one_rank: Some(String::new()),
        ..Default::default()
    };
    let p = super::one_rank_proof(&e, &["NCCL_PROTO".to_string()]);
    assert!(
        p.starts_with("1 rank: NCCL's path, no transfer: NCCL 2.28.3 ran"),
        "{p}"
    );
    assert!(p.contains("NCCL read NCCL_PROTO"), "{p}");
    assert!(p.contains("cannot be proven here"), "{p}");
    assert_eq!(e.algo_proto(), "none (1 rank)");
    assert_eq!(e.transport(), "no transport (1 rank)");
    let p = super::one_rank_proof(&results::Effective::default(), &[]);
    assert!(
        p.contains("version not logged") && p.contains("no variable"),
        "{p}"
    );
}

#[test]
fn the_time_split_is_given_for_measured_runs_only() {
    let dir = tempfile::tempdir().unwrap();
    let c = cfg(dir.path());
    let p = points(&[]).remove(0);
    let mut outcome = PointOutcome {
        record: Some(record(1000.0, &env::Env::default(), 0)),
        ..Default::default()
    };
    let sp = assemble(&c, &p, outcome.clone());
    // timed loops: eager 1300 us + graph 1000 us medians, each x (50 iterations + 5 warm-ups)
    let (init, timed) = time_split(&sp).expect("a measured record has a split");
    assert_eq!(init, None, "the record has no NCCL init note");
    let median = |m: f64| {
        let v: Vec<f64> = (0..50).map(|i| m * (0.99 + 0.0004 * i as f64)).collect();
        Summary::from_samples(&v).unwrap().median_us
    };
    let expect = (median(1300.0) + median(1000.0)) * 55.0 * 1e-6;
    assert!((timed - expect).abs() < 1e-12, "{timed} vs {expect}");
    // the cost model's record: no loop ran, so no split
    outcome.record.as_mut().unwrap().source = Source::Modeled;
    assert_eq!(time_split(&assemble(&c, &p, outcome)), None);
}

/// Two library files: the system's `libnccl.so.2.28.3` and a pip wheel's bare
/// `nvidia/nccl/lib/libnccl.so.2` whose metadata says 2.28.9 (resolved paths).
fn two_libraries(dir: &std::path::Path) -> (PathBuf, PathBuf) {
    let sys = dir.join("libnccl.so.2.28.3");
    std::fs::write(&sys, crate::comm::elf::fake_nccl()).unwrap();
    let lib = dir.join("site/nvidia/nccl/lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(lib.join("libnccl.so.2"), crate::comm::elf::fake_nccl()).unwrap();
    std::fs::create_dir(dir.join("site/nvidia_nccl_cu13-2.28.9.dist-info")).unwrap();
    (
        std::fs::canonicalize(sys).unwrap(),
        std::fs::canonicalize(lib.join("libnccl.so.2")).unwrap(),
    )
}

/// The mock's spec for the test schedule, without noise.
fn spec(s: &model::Schedule) -> mock::MockSpec<'_> {
    mock::MockSpec {
        schedule: s,
        graphs: vec![false, true],
        mode: Mode::Comm,
        iters: 20,
        warmup: 2,
        threads: false,
        noise: 0.0,
        seed: 1,
        plant: None,
    }
}

/// A sweep config over the libraries `libs` crossed with `lists`, and its points.
fn library_sweep(
    dir: &std::path::Path,
    libs: &[&PathBuf],
    lists: &[&str],
) -> (SweepConfig, Vec<Point>) {
    let joined: Vec<String> = libs.iter().map(|p| p.display().to_string()).collect();
    let mut l = vec![format!("NCCL_LIB={}", joined.join(","))];
    l.extend(lists.iter().map(|s| s.to_string()));
    let dims = matrix::dimensions(&l, &[]).unwrap();
    let mut c = cfg(dir);
    c.libraries = matrix::libraries(&dims).unwrap();
    (c, matrix::points(&dims, None))
}

#[test]
fn a_two_library_sweep_runs_every_point_on_each_and_records_what_its_workers_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let (sys, wheel) = two_libraries(dir.path());
    let (c, pts) = library_sweep(dir.path(), &[&sys, &wheel], &["NCCL_PROTO=LL,Simple"]);
    // without libraries: the baseline, LL and Simple; with two: twice that
    assert_eq!(pts.len(), 2 * 3);
    let s = schedule(3);
    let sp = spec(&s);
    let asked = std::cell::RefCell::new(vec![]);
    let runner = MockRunner(|job: &PointJob| {
        let lib = job.env.get(std::ffi::OsStr::new(library::ENV)).cloned();
        let probe_lib = job
            .probe
            .as_ref()
            .and_then(|p| p.env.get(std::ffi::OsStr::new(library::ENV)).cloned());
        assert_eq!(lib, probe_lib, "the probe loads the point's library too");
        asked.borrow_mut().push((job.point.id.clone(), lib));
        mock::outcome(job, &sp)
    });
    let mut file = ResultsFile::open(&dir.path().join("r.jsonl")).unwrap();
    let flag = AtomicBool::new(false);
    let run = run_round(&c, &pts, &runner, &mut file, &flag, |_| {});
    assert_eq!(run.finished.len(), 6);
    for (i, p) in run.finished.iter().enumerate() {
        // the first 3 points are the first library's (no NCCL_LIB), the next 3 the wheel's
        let (want, version) = if i < 3 {
            (&sys, "2.28.3")
        } else {
            (&wheel, "2.28.9")
        };
        assert!(p.ok(), "{}: {:?}", p.point_id, p.reason);
        assert_eq!(
            asked.borrow()[i],
            (p.point_id.clone(), Some(want.clone().into_os_string()))
        );
        let l = p.library.as_ref().unwrap();
        assert_eq!(
            (l.status.as_str(), l.path.as_str()),
            ("ok", &*want.display().to_string())
        );
        assert_eq!(l.workers.len(), 2, "both ranks answered");
        assert!(l
            .workers
            .iter()
            .all(|w| w.version.as_deref() == Some(version)
                && w.library.as_deref() == Some(&*want.display().to_string())));
        assert_eq!(
            l.log_version.as_deref(),
            Some(&*format!("{version}+cuda13.0"))
        );
        assert_eq!(
            p.key.nccl_lib.as_deref(),
            Some(&*want.display().to_string())
        );
        assert_eq!(p.overrides.iter().any(|(k, _)| k == library::NAME), i >= 3);
    }
    // the stored record carries every worker's NCCL
    let (stored, _) = results::load(&dir.path().join("r.jsonl")).unwrap();
    assert_eq!(stored[4].library, run.finished[4].library);
    let text = rank::library_block(&run.finished);
    assert!(
        text.contains(&format!(
            "L2 {}: NCCL 2.28.9 (log: 2.28.9+cuda13.0); proven in 3 of 3 point(s): p03-LIB-2, p04-LIB-2_PROTO-LL, p05-LIB-2_PROTO-Simple",
            wheel.display()
        )),
        "{text}"
    );
}

#[test]
fn a_point_whose_worker_mapped_another_library_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (sys, wheel) = two_libraries(dir.path());
    let (c, pts) = library_sweep(dir.path(), &[&sys, &wheel], &[]);
    assert_eq!(pts.len(), 2);
    let s = schedule(3);
    let sp = spec(&s);
    // rank 1 of the wheel's point maps the system library (e.g. LD_PRELOAD won)
    let runner = MockRunner(|job: &PointJob| {
        let mut out = mock::outcome(job, &sp)?;
        if job.point.get(library::NAME).is_some() {
            let prov = &mut out.record.as_mut().unwrap().provenance;
            prov.worker_nccl[1].library = Some(sys.display().to_string());
            prov.worker_nccl[1].version = Some("2.28.3".into());
        }
        Ok(out)
    });
    let mut file = ResultsFile::open(&dir.path().join("r.jsonl")).unwrap();
    let run = run_round(
        &c,
        &pts,
        &runner,
        &mut file,
        &AtomicBool::new(false),
        |_| {},
    );
    assert!(run.finished[0].ok());
    let bad = &run.finished[1];
    assert_eq!(bad.status, "failed");
    let want = format!(
        "rank 1 (pid 1001) mapped {} (NCCL 2.28.3), not the {} asked",
        sys.display(),
        wheel.display()
    );
    assert_eq!(bad.library.as_ref().unwrap().problems, vec![want.clone()]);
    assert_eq!(
        bad.reason.as_deref(),
        Some(&*format!(
            "refused: its workers did not run the NCCL asked ({}): {want}",
            wheel.display()
        ))
    );
    let r = rank::rank(&run.finished, Mode::Comm);
    assert_eq!(r.failed.len(), 1, "listed apart, never ranked");
    assert!(
        rank::library_block(&run.finished).contains(&format!("REFUSED {}: {want}", bad.point_id))
    );
}

#[test]
fn a_global_tree_refused_by_the_cost_model_gets_the_per_function_hint() {
    // what `sweep --backend model -L NCCL_ALGO=Tree` records for the point: the cost model's
    // refusal of the all-gather, with no NCCL log
    let p = matrix::Point {
        id: "p01-ALGO-Tree".into(),
        overrides: vec![("NCCL_ALGO".into(), "Tree".into())],
    };
    let prof = crate::costmodel::profile::builtin("pcie-gen5").unwrap();
    let force = crate::costmodel::Force::parse(None, Some("Tree")).unwrap();
    let reason =
        crate::costmodel::predict::choose(&prof, model::CollectiveKind::AllGather, 8192, 8, &force)
            .unwrap_err()
            .to_string();
    let h = hint(&p, &reason, &[]).expect("a hint");
    assert!(h.contains("NCCL_ALGO=ring;allreduce:tree"), "{h}");
    // the per-function form itself is not told to use the per-function form
    let p = matrix::Point {
        id: "p02".into(),
        overrides: vec![("NCCL_ALGO".into(), "ring;allreduce:tree".into())],
    };
    assert!(!hint(&p, &reason, &[])
        .unwrap()
        .contains("NCCL_ALGO=ring;allreduce:tree"));
}
