//! The schedule hash is stable across builds: every verify record committed under results/
//! names the hash of the schedule it replayed, and today's build of that workload (from the
//! record's model, phase, TP, tokens and dtype, the other knobs at their defaults, as those
//! runs used them) must give the same hash and the same collective counts, except where the
//! schedule changed on purpose ([`BUMPED`], with the reason).

use std::path::Path;

use verifybench::record::{read_records, Body};
use verifybench::request::Workload;

/// Schedules whose ops changed on purpose since the committed records, as (the record's hash,
/// today's hash, today's weight bytes per rank). The routed-expert ops of MoE models carry the
/// tokens each expert receives (a token histogram, in whole experts: the replay streams each
/// group of experts once against its own count), so every MoE verify and decode schedule hashes
/// anew; the verify's routed experts are whole experts now (Kimi-K2.5 TP2 at 3 tokens: 24 of
/// 384 touched, where the expected 23.50 were streamed before: 29,102,661,632 -> 29,471,670,272
/// B per rank). The collectives are unchanged. Dense and draft schedules keep their hashes.
const BUMPED: &[(&str, &str, u64)] = &[
    ("9c9380f13885f9ad", "4bc759e5fd3ecddf", 29_471_670_272),
    ("d6ff084a39d44250", "1a04608f6b5ad010", 17_580_818_432),
];

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
            let mut want = w.clone();
            if let Some((_, new, bytes)) = BUMPED.iter().find(|b| b.0 == w.schedule_hash) {
                want.schedule_hash = new.to_string();
                want.weight_bytes_per_rank = Some(*bytes);
            }
            assert_eq!(s.hash(), want.schedule_hash, "{}", p.display());
            // records written before the weights' formats were recorded carry none; where one
            // does, they are today's
            let mut today = verifybench::record::RecordedWorkload::of(&s);
            let recorded = &w.facts.weight_formats;
            assert!(
                recorded.is_empty() || *recorded == today.facts.weight_formats,
                "{}: weight formats",
                p.display()
            );
            today.facts.weight_formats = recorded.clone();
            assert_eq!(today, want, "{}: counts and bytes", p.display());
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
