//! The home of every command: `commands::<name>::run` takes the command's plain request and
//! does the rest (request -> library calls -> record -> print and exports -> exit code).
//! `cli/` only turns flags into the request and calls it; the work itself stays in the
//! modules below (`backend`, `sweep`, `trace`, `costmodel`, ...). Here: what `verify` and
//! `collective` share, their fresh runs and the printing of their records.

pub mod bandwidth;
pub(crate) mod breakeven;
pub(crate) mod choose;
pub mod collective;
pub(crate) mod compare;
pub(crate) mod env;
pub(crate) mod explain;
pub(crate) mod inspect;
pub(crate) mod model;
pub(crate) mod plan;
pub(crate) mod rank;
pub(crate) mod report;
pub(crate) mod selftest;
pub(crate) mod sweep;
pub(crate) mod trace;
pub(crate) mod verify;
pub(crate) mod worker;

use crate::measure::repeat::Repetitions;
use crate::record::{Body, Record, Repeated};
use crate::request::BackendKind;

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
pub(crate) fn repeated(
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

/// The exit code of a run with `wrong` wrong elements in the collectives' results: 0, or an
/// error that says how many.
fn wrong_results(wrong: u64) -> anyhow::Result<i32> {
    if wrong > 0 {
        anyhow::bail!("{wrong} elements of the collectives' results were wrong");
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::verify::tests::{run_with_mock, verify_request};
    use super::*;
    use crate::backend::{mock_verify, Backend, MockBackend};
    use crate::request::*;

    #[test]
    fn fresh_runs_keep_every_repetitions_median_and_summarise_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = verify_request(dir.path());
        a.fresh_runs = 6;
        assert_eq!(run_with_mock(&a).unwrap(), 0);
        let recs = crate::record::read_records(&dir.path().join("v.json")).unwrap();
        let r = &recs[0];
        assert_eq!(r.repetitions.len(), 2, "eager and graph");
        // Each repetition's median is what that repetition alone measures.
        for (k, rep) in r.repetitions.iter().enumerate() {
            let want: Vec<f64> = (0..6)
                .map(|i| {
                    let mut x = a.clone();
                    x.fresh_run = i;
                    figures(&mock_verify(&x).unwrap())[k].3
                })
                .collect();
            // read back from JSON: serde_json's parse (without float_roundtrip) may differ from
            // the written value in the last bit
            let got = &rep.reps.repetitions_us;
            assert_eq!(got.len(), want.len(), "{}", rep.what);
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-12 * w.abs(),
                    "{}: {got:?} {want:?}",
                    rep.what
                );
            }
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
        let one = repeated(BackendKind::Mock, 1, |_| mock_verify(&a)).unwrap();
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
