//! The library side of the measuring commands `verify` and `collective`: request -> backend
//! ([`crate::backend`]) -> exports -> printed table -> exit code. `cli/` only builds the
//! request and calls one function here; `sweep` and `worker` have their own homes
//! ([`crate::sweep::command`], [`crate::launch::external_worker`]).

pub mod bandwidth;
pub mod explain;
pub mod report;
pub mod selftest;
mod selftest_stress;

use crate::backend::{self, Backend};
use crate::measure::repeat::Repetitions;
use crate::record::{Body, Record, Repeated};
use crate::report::text;
use crate::request::{BackendKind, CollectiveRequest, VerifyJob, VerifyRequest, WorkerRequest};

/// The note of a modeled record asked for fresh runs.
pub(crate) const MODELED_NO_NOISE: &str =
    "modeled: no between-run noise (the cost model gives the same numbers in every run, so --fresh-runs repeats nothing)";

/// One figure of a record: (what, graph, collective size, median us).
type Figure = (String, bool, Option<u64>, f64);

/// The figures of a record that repetitions summarise.
fn figures(r: &Record) -> Vec<Figure> {
    match &r.body {
        Body::Verify(v) => v
            .runs
            .iter()
            .map(|x| {
                (
                    format!(
                        "per verify, {}, {}",
                        if x.graph { "graph" } else { "eager" },
                        x.mode.name()
                    ),
                    x.graph,
                    None,
                    x.per_verify.median_us,
                )
            })
            .collect(),
        Body::Collective(c) => c
            .rows
            .iter()
            .flat_map(|row| {
                [(false, &row.eager), (true, &row.graph)]
                    .into_iter()
                    .filter_map(move |(g, t)| {
                        let t = t.as_ref()?;
                        Some((
                            format!(
                                "{} B, {}",
                                row.size_bytes,
                                if g { "graph" } else { "eager" }
                            ),
                            g,
                            Some(row.size_bytes),
                            t.time_us,
                        ))
                    })
            })
            .collect(),
        _ => vec![],
    }
}

/// Runs `one(i)` for repetitions i = 0..R, each in fresh workers (the backend starts new
/// workers or communicators per call), and returns the last repetition's record (its
/// within-run figures) carrying every repetition's median of each figure. The model backend
/// runs once and says it has no between-run noise.
pub fn repeated(
    kind: BackendKind,
    fresh_runs: usize,
    mut one: impl FnMut(usize) -> anyhow::Result<Record>,
) -> anyhow::Result<Record> {
    crate::request::check_fresh_runs(fresh_runs)?;
    if fresh_runs == 1 {
        return one(0);
    }
    if kind == BackendKind::Model {
        let mut r = one(0)?;
        r.provenance.notes.push(MODELED_NO_NOISE.into());
        return Ok(r);
    }
    let mut records = vec![];
    for i in 0..fresh_runs {
        records.push(one(i)?);
    }
    let figs: Vec<Vec<Figure>> = records.iter().map(figures).collect();
    let mut last = records.pop().expect("2 or more repetitions");
    for (k, (what, graph, size, _)) in figs[0].iter().enumerate() {
        let medians: Option<Vec<f64>> = figs
            .iter()
            .map(|f| f.get(k).filter(|x| x.0 == *what).map(|x| x.3))
            .collect();
        let Some(medians) = medians else {
            anyhow::bail!("the fresh runs did not all measure '{what}'");
        };
        let reps =
            Repetitions::from_medians(&medians).map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
        last.repetitions.push(Repeated {
            what: what.clone(),
            graph: *graph,
            size_bytes: *size,
            reps,
        });
    }
    last.provenance.notes.push(format!(
        "within-run figures are those of the last of {fresh_runs} fresh runs; the repetitions' medians are in 'repetitions'"
    ));
    Ok(last)
}

/// The lines printed under the table for a record of repetitions (or the model's note).
pub(crate) fn repetition_lines(r: &Record) -> String {
    let mut o = String::new();
    if !r.repetitions.is_empty() {
        o.push_str(&format!(
            "# fresh runs: {} repetitions, each in fresh workers (within-run figures above: the last one)\n",
            r.repetitions[0].reps.repetitions_us.len()
        ));
    }
    for x in &r.repetitions {
        o.push_str(&format!("  {}: {}\n", x.what, x.reps.line()));
    }
    for n in &r.provenance.notes {
        if n == MODELED_NO_NOISE || n == crate::backend::FAKE_SPREAD_NOTE {
            o.push_str(&format!("# {n}\n"));
        }
    }
    o
}

/// Prints a record on stdout: with `--format json` (`markdown`) exactly what `--export-json`
/// (`--export-markdown`) writes, else its table (`table`) and the repetitions' lines.
pub(crate) fn print_result(
    format: crate::output::Format,
    record: &Record,
    table: fn(&Record) -> String,
) -> anyhow::Result<()> {
    let records = std::slice::from_ref(record);
    match format {
        crate::output::Format::Json => {
            crate::output::print_document(&crate::report::export::to_json(records)?)?
        }
        crate::output::Format::Markdown => {
            crate::output::print_document(&crate::report::export::to_markdown(records)?)?
        }
        crate::output::Format::Table => {
            print!("{}", table(record));
            print!("{}", repetition_lines(record));
        }
    }
    Ok(())
}

/// `verifybench worker`: this rank of an externally launched replay; rank 0 exports and prints
/// the gathered record.
pub fn worker(a: &WorkerRequest) -> anyhow::Result<i32> {
    if let Some(rec) = crate::launch::external_worker::run(a)? {
        a.export.write(std::slice::from_ref(&rec))?;
        print_result(a.format, &rec, text::verify_table)?;
    }
    Ok(0)
}

/// `verifybench verify`: the request resolved once ([`backend::verify_job`], which picks the
/// backend), then run.
pub fn verify(a: &VerifyRequest) -> anyhow::Result<i32> {
    let (b, job) = backend::verify_job(a, || {
        backend::resolve_min(a.backend, a.quiet, if a.compute_only() { 1 } else { 2 })
    })?;
    verify_job_with(&*b, &job)
}

/// `verify` of a plain request on a given backend (its workload resolved and the job placed
/// for that backend).
pub fn verify_with(b: &dyn Backend, a: &VerifyRequest) -> anyhow::Result<i32> {
    verify_job_with(b, &backend::place(b.kind(), a, a.workload.resolve()?)?)
}

/// `verify` of a resolved job on a given backend: its fresh runs, exports, table and exit
/// code.
pub(crate) fn verify_job_with(b: &dyn Backend, job: &VerifyJob) -> anyhow::Result<i32> {
    let a = &job.request;
    let mut record = repeated(b.kind(), a.fresh_runs, |i| {
        let mut j = job.clone();
        j.request.fresh_run = i;
        b.run_verify(&j)
    })?;
    if let Some(note) = &job.file_note {
        record.provenance.notes.push(note.clone());
    }
    a.export.write(std::slice::from_ref(&record))?;
    print_result(a.format, &record, text::verify_table)?;
    let Body::Verify(v) = &record.body else {
        unreachable!("verify produces verify records")
    };
    let wrong: u64 = v.runs.iter().map(|r| r.wrong).sum::<u64>()
        + v.p2p.iter().map(|r| r.run.wrong).sum::<u64>();
    if wrong > 0 {
        anyhow::bail!("{wrong} elements of the collectives' results were wrong");
    }
    Ok(0)
}

/// `verifybench collective` with the backend `resolve` picks.
pub fn collective(a: &CollectiveRequest) -> anyhow::Result<i32> {
    a.export.check(&[])?;
    crate::launch::run::check_gpu_flags(&a.gpu, None)?;
    collective_with(&*backend::resolve(a.backend, crate::output::quiet()), a)
}

/// `collective` on a given backend.
pub fn collective_with(b: &dyn Backend, a: &CollectiveRequest) -> anyhow::Result<i32> {
    let record = repeated(b.kind(), a.fresh_runs, |i| {
        let mut r = a.clone();
        r.fresh_run = i;
        b.collective(&r)
    })?;
    a.export.write(std::slice::from_ref(&record))?;
    print_result(a.format, &record, text::collective_table)?;
    let Body::Collective(c) = &record.body else {
        unreachable!("collective produces collective records")
    };
    let wrong: u64 = c
        .rows
        .iter()
        .flat_map(|r| {
            [&r.eager, &r.graph]
                .into_iter()
                .chain(r.p2p.iter().flat_map(|t| [&t.eager, &t.graph]))
        })
        .flatten()
        .map(|t| t.wrong)
        .sum();
    if wrong > 0 {
        anyhow::bail!("{wrong} elements of the collectives' results were wrong");
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MockBackend;
    use crate::record::Source;
    use crate::request::*;

    /// The mock request at TP 2, its record exported to `dir/v.json`.
    fn verify_request(dir: &std::path::Path) -> VerifyRequest {
        let mut r = VerifyRequest::mock();
        r.workload.tp = Some(2);
        r.export.export_json = Some(dir.join("v.json"));
        r
    }

    #[test]
    fn mock_per_collective_pass_reaches_the_table_and_the_trace_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = verify_request(dir.path());
        a.host_gaps.gaps.late = Some(crate::measure::gaps::LateRank { rank: 1, us: 50.0 });
        let tp = dir.path().join("pass.json");
        a.export_trace = Some(tp.clone());
        assert_eq!(verify_with(&MockBackend, &a).unwrap(), 0);
        let rec = MockBackend.verify(&a).unwrap();
        let Body::Verify(v) = &rec.body else {
            panic!("a verify record")
        };
        let eager = v.run(false, crate::record::Mode::Comm).unwrap();
        let c = eager.in_collective.as_ref().unwrap();
        assert!(c.how.contains("FAKE"));
        assert_eq!(c.straggler.as_ref().unwrap().rank, 1);
        assert!(c.waiting_us > 0.0 && c.in_collective_us > c.transfer_us);
        // graph replay: no late rank, no waiting
        let g = v.run(true, crate::record::Mode::Comm).unwrap();
        assert_eq!(g.in_collective.as_ref().unwrap().waiting_us, 0.0);
        let table = text::verify_table(&rec);
        assert!(table.contains("in collectives per verify"), "{table}");
        assert!(table.contains("rank 1 last in 100%"), "{table}");
        // the exported pass reads back through `trace` with the same split
        let back = crate::trace::analyse(&crate::trace::TraceRequest::new(vec![tp])).unwrap();
        assert_eq!(back.ranks.len(), 2);
        let at = back.attribution.unwrap();
        assert_eq!(at.straggler.unwrap().rank, 1);
        let s = a.workload.schedule(2).unwrap();
        assert_eq!(at.matched as u64, s.n_collectives() * c.iterations);
        let per_verify = at.total.transfer_us / c.iterations as f64;
        assert!((per_verify - c.transfer_us).abs() < 1e-6 * c.transfer_us);
    }

    #[test]
    fn the_mock_backend_replays_a_schedule_file_and_says_where_it_came_from() {
        use crate::model::schedule_file::ScheduleFile;
        let dir = tempfile::tempdir().unwrap();
        // a collectives-only file (as a trace exports): 3 all-reduces of 43,008 B at TP2
        let mut s = Workload {
            tp: Some(2),
            ..Default::default()
        }
        .schedule(8)
        .unwrap();
        s.ops
            .retain(|o| matches!(o, crate::model::Op::Collective { .. }));
        s.ops.truncate(3);
        let path = dir.path().join("s.json");
        ScheduleFile {
            schedule: s.clone(),
            host_gaps_us: None,
            host_gaps_per_rank_us: None,
            origin: Some("three all-reduces".into()),
        }
        .save(&path)
        .unwrap();
        let mut a = verify_request(dir.path());
        a.workload = Workload {
            schedule_file: Some(path.clone()),
            ..Default::default()
        };
        assert_eq!(verify_with(&MockBackend, &a).unwrap(), 0);
        let recs = crate::record::read_records(&dir.path().join("v.json")).unwrap();
        let Body::Verify(v) = &recs[0].body else {
            panic!("a verify record")
        };
        assert_eq!(v.workload.schedule_hash, s.hash());
        assert_eq!((v.workload.tp, v.workload.n_all_reduce), (2, 3));
        assert!(recs[0]
            .provenance
            .notes
            .iter()
            .any(|n| n.contains("three all-reduces")));
        // no compute to replay in --mode full, and a --tp other than the file's
        a.mode = vec![crate::record::Mode::Full];
        let e = verify(&a).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("no compute ops"), "{e}");
        a.mode = vec![crate::record::Mode::Comm];
        a.workload.tp = Some(4);
        let e = MockBackend.verify(&a).unwrap_err();
        assert!(e.to_string().contains("--tp 4"), "{e}");
    }

    #[test]
    fn verify_exports_the_backends_record_labelled_mock() {
        let dir = tempfile::tempdir().unwrap();
        let a = verify_request(dir.path());
        assert_eq!(verify_with(&MockBackend, &a).unwrap(), 0);
        let recs = crate::record::read_records(&dir.path().join("v.json")).unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].provenance.backend, "mock");
        assert_eq!(recs[0].source, Source::Modeled);
        let Body::Verify(v) = &recs[0].body else {
            panic!("a verify record")
        };
        assert_eq!(v.workload.tp, 2);
        assert_eq!(
            v.runs.iter().map(|r| r.graph).collect::<Vec<_>>(),
            vec![false, true]
        );
        // the mock is deterministic: the same request gives the same numbers
        let times = |r: &crate::record::Record| match &r.body {
            Body::Verify(v) => v
                .runs
                .iter()
                .map(|r| r.per_verify.median_us)
                .collect::<Vec<_>>(),
            _ => panic!("a verify record"),
        };
        let once = MockBackend.verify(&a).unwrap();
        assert_eq!(times(&once), times(&MockBackend.verify(&a).unwrap()));
        assert!(times(&once).iter().all(|t| *t > 0.0));
    }

    #[test]
    fn fresh_runs_keep_every_repetitions_median_and_summarise_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = verify_request(dir.path());
        a.fresh_runs = 6;
        assert_eq!(verify_with(&MockBackend, &a).unwrap(), 0);
        let recs = crate::record::read_records(&dir.path().join("v.json")).unwrap();
        let r = &recs[0];
        assert_eq!(r.repetitions.len(), 2, "eager and graph");
        // Each repetition's median is what that repetition alone measures.
        for (k, rep) in r.repetitions.iter().enumerate() {
            let want: Vec<f64> = (0..6)
                .map(|i| {
                    let mut x = a.clone();
                    x.fresh_run = i;
                    figures(&MockBackend.verify(&x).unwrap())[k].3
                })
                .collect();
            assert_eq!(rep.reps.repetitions_us, want, "{}", rep.what);
            let mut s = want.clone();
            s.sort_by(f64::total_cmp);
            assert!(rep.reps.cold_start.is_none());
            assert_eq!(rep.reps.used, 6);
            assert!((rep.reps.median_us - (s[2] + s[3]) / 2.0).abs() < 1e-9);
            assert_eq!((rep.reps.min_us, rep.reps.max_us), (s[0], s[5]));
            // 6 repetitions: the order-statistic interval, here the full range.
            let iv = rep.reps.interval.as_ref().unwrap();
            assert_eq!(iv.method, "order statistics");
            assert!(s[0] < s[5], "the FAKE spread is not zero");
        }
        assert!(r
            .provenance
            .notes
            .iter()
            .any(|n| n == crate::backend::FAKE_SPREAD_NOTE));
        let lines = repetition_lines(r);
        assert!(
            lines.contains("per verify, graph, comm: median of 6 fresh runs"),
            "{lines}"
        );
        // One run: no repetitions, numbers unchanged by the repetition machinery.
        a.fresh_runs = 1;
        let one = repeated(BackendKind::Mock, 1, |_| MockBackend.verify(&a)).unwrap();
        assert!(one.repetitions.is_empty());
        // Out of range: a usage error before anything runs.
        for bad in [0, MAX_FRESH_RUNS + 1] {
            let e = repeated(BackendKind::Mock, bad, |_| panic!("must not run")).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2);
        }
    }

    #[test]
    fn a_cold_first_collective_repetition_is_named_and_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let a = CollectiveRequest {
            op: crate::model::CollectiveKind::AllReduce,
            min_bytes: 43008,
            max_bytes: 43008,
            step_factor: 2,
            sizes: vec![],
            dtype: crate::model::DType::Bf16,
            graph: GraphChoice::On,
            backend: BackendKind::Mock,
            gpu: GpuSpec::default(),
            repeat: Repeat {
                iters: 5,
                warmup: 1,
                ..Default::default()
            },
            impls: vec![],
            model: Default::default(),
            format: Default::default(),
            export: crate::report::Exports {
                export_json: Some(dir.path().join("c.json")),
                ..Default::default()
            },
            fresh_runs: 5,
            fresh_run: 0,
        };
        // The first repetition 30% slower (a cold start); the rest from the mock.
        let r = repeated(BackendKind::Mock, 5, |i| {
            let mut x = a.clone();
            x.fresh_run = i;
            let mut rec = MockBackend.collective(&x)?;
            if i == 0 {
                if let Body::Collective(c) = &mut rec.body {
                    c.rows[0].graph.as_mut().unwrap().time_us *= 1.3;
                }
            }
            Ok(rec)
        })
        .unwrap();
        assert_eq!(r.repetitions.len(), 1);
        let rep = &r.repetitions[0];
        assert_eq!(rep.what, "43008 B, graph");
        assert_eq!(rep.size_bytes, Some(43008));
        assert_eq!(rep.reps.repetitions_us.len(), 5);
        assert!(rep.reps.cold_start.is_some(), "{:?}", rep.reps);
        assert_eq!(rep.reps.used, 4);
        assert!(rep.reps.max_us < rep.reps.repetitions_us[0]);
        assert!(repetition_lines(&r).contains("43008 B, graph: median of 4 fresh runs"));
    }
}
