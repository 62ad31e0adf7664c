//! `verifybench verify`: the request resolved once ([`backend::verify_job`], which picks the
//! backend), its fresh runs, exports, table and exit code.

use super::{print_result, repeated, wrong_results};
use crate::backend::{self, Backend};
use crate::record::Body;
use crate::report::text;
use crate::request::{VerifyJob, VerifyRequest};

/// Runs `verifybench verify`.
pub(crate) fn run(a: &VerifyRequest) -> anyhow::Result<i32> {
    let (b, job) = backend::verify_job(a, || {
        backend::resolve_min(a.backend, a.quiet, if a.compute_only() { 1 } else { 2 })
    })?;
    run_job(&*b, &job)
}

/// `verify` of a resolved job on a given backend: its fresh runs, exports, table and exit
/// code.
pub(crate) fn run_job(b: &dyn Backend, job: &VerifyJob) -> anyhow::Result<i32> {
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
    wrong_results(
        v.runs.iter().map(|r| r.wrong).sum::<u64>()
            + v.p2p.iter().map(|r| r.run.wrong).sum::<u64>(),
    )
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::backend::{mock_verify, MockBackend};
    use crate::record::Source;
    use crate::request::*;

    /// `verify` of a plain request on the mock backend, through [`backend::verify_job`]'s
    /// checks.
    pub(in crate::commands) fn run_with_mock(a: &VerifyRequest) -> anyhow::Result<i32> {
        let (b, job) = backend::verify_job(a, || Box::new(MockBackend))?;
        run_job(&*b, &job)
    }

    /// The mock request at TP 2, its record exported to `dir/v.json`.
    pub(in crate::commands) fn verify_request(dir: &std::path::Path) -> VerifyRequest {
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
        assert_eq!(run_with_mock(&a).unwrap(), 0);
        let rec = mock_verify(&a).unwrap();
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
        assert_eq!(run_with_mock(&a).unwrap(), 0);
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
        let e = run(&a).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("no compute ops"), "{e}");
        a.mode = vec![crate::record::Mode::Comm];
        a.workload.tp = Some(4);
        let e = mock_verify(&a).unwrap_err();
        assert!(e.to_string().contains("--tp 4"), "{e}");
    }

    #[test]
    fn verify_exports_the_backends_record_labelled_mock() {
        let dir = tempfile::tempdir().unwrap();
        let a = verify_request(dir.path());
        assert_eq!(run_with_mock(&a).unwrap(), 0);
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
        let once = mock_verify(&a).unwrap();
        assert_eq!(times(&once), times(&mock_verify(&a).unwrap()));
        assert!(times(&once).iter().all(|t| *t > 0.0));
    }
}
