//! The library side of the measuring commands `verify` and `collective`: request -> backend
//! ([`crate::backend`]) -> exports -> printed table -> exit code. `cli/` only builds the
//! request and calls one function here; `sweep` and `worker` have their own homes
//! ([`crate::sweep::command`], [`crate::launch::external_worker`]).

use crate::backend::{self, Backend};
use crate::record::Body;
use crate::report::text;
use crate::request::{CollectiveRequest, VerifyRequest};

/// `verifybench verify` with the backend `resolve` picks.
pub fn verify(a: &VerifyRequest) -> anyhow::Result<i32> {
    if a.launches_per_layer > 10_000 {
        crate::usage_bail!(
            "--launches-per-layer {} is absurd: a real layer launches tens of kernels; use at most 10000",
            a.launches_per_layer
        );
    }
    a.workload.check_schedule_modes(&a.mode)?;
    verify_with(&*backend::resolve(a.backend, a.quiet), a)
}

/// `verify` on a given backend.
pub fn verify_with(b: &dyn Backend, a: &VerifyRequest) -> anyhow::Result<i32> {
    let mut record = b.verify(a)?;
    if let (Some(p), Some(f)) = (&a.workload.schedule_file, a.workload.load_schedule_file()?) {
        record.provenance.notes.push(format!(
            "schedule from the file {}: {}",
            p.display(),
            f.origin.as_deref().unwrap_or("no origin recorded")
        ));
    }
    a.export.write(std::slice::from_ref(&record))?;
    if !a.quiet {
        print!("{}", text::verify_table(&record));
    }
    let Body::Verify(v) = &record.body else {
        unreachable!("verify produces verify records")
    };
    let wrong: u64 = v.runs.iter().map(|r| r.wrong).sum();
    if wrong > 0 {
        anyhow::bail!("{wrong} elements of the collectives' results were wrong");
    }
    Ok(0)
}

/// `verifybench collective` with the backend `resolve` picks.
pub fn collective(a: &CollectiveRequest) -> anyhow::Result<i32> {
    collective_with(&*backend::resolve(a.backend, false), a)
}

/// `collective` on a given backend.
pub fn collective_with(b: &dyn Backend, a: &CollectiveRequest) -> anyhow::Result<i32> {
    let record = b.collective(a)?;
    a.export.write(std::slice::from_ref(&record))?;
    print!("{}", text::collective_table(&record));
    let Body::Collective(c) = &record.body else {
        unreachable!("collective produces collective records")
    };
    let wrong: u64 = c
        .rows
        .iter()
        .flat_map(|r| [&r.eager, &r.graph])
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

    fn verify_request(dir: &std::path::Path) -> VerifyRequest {
        VerifyRequest {
            workload: Workload {
                tp: Some(2),
                ..Default::default()
            },
            graph: GraphChoice::Both,
            mode: vec![crate::record::Mode::Comm],
            launches_per_layer: 0,
            backend: BackendKind::Mock,
            gpu: GpuSpec::default(),
            repeat: Repeat {
                iters: 5,
                warmup: 1,
            },
            model: Default::default(),
            export: crate::report::Exports {
                export_json: Some(dir.join("v.json")),
                ..Default::default()
            },
            quiet: true,
            inject_fault: None,
        }
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
}
