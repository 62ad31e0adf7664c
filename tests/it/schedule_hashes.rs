//! The schedule hash is stable across builds: every verify record committed under results/
//! names the hash of the schedule it replayed, and today's build of that workload (from the
//! record's model, phase, TP, tokens and dtype, the other knobs at their defaults, as those
//! runs used them) must give the same hash and the same collective counts.

use std::path::Path;

use verifybench::record::{read_records, Body};
use verifybench::request::Workload;

#[test]
fn todays_schedules_hash_as_the_committed_results_say() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("results/h200x2");
    let mut checked = 0;
    let mut hashes = std::collections::BTreeSet::new();
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    for p in paths {
        let Ok(records) = read_records(&p) else {
            continue; // bandwidth, env and selftest files are not records
        };
        for r in records {
            let Body::Verify(v) = &r.body else { continue };
            let w = &v.workload;
            let s = Workload {
                model: w.model.clone(),
                tp: Some(w.tp),
                tokens: w.tokens,
                dtype: w.dtype,
                phase: w.phase,
                ..Default::default()
            }
            .schedule(w.tp)
            .unwrap();
            assert_eq!(s.hash(), w.schedule_hash, "{}", p.display());
            // records written before the weights' formats were recorded carry none; where one
            // does, they are today's
            let mut today = verifybench::record::Workload::of(&s);
            let recorded = &w.facts.weight_formats;
            assert!(
                recorded.is_empty() || *recorded == today.facts.weight_formats,
                "{}: weight formats",
                p.display()
            );
            today.facts.weight_formats = recorded.clone();
            assert_eq!(today, *w, "{}: counts and bytes", p.display());
            hashes.insert(w.schedule_hash.clone());
            checked += 1;
        }
    }
    assert!(checked >= 8, "checked {checked} committed verify records");
    assert!(
        hashes.len() >= 3,
        "verify, decode and draft schedules: {hashes:?}"
    );
}
