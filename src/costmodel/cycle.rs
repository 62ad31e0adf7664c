//! The cost model's price of a speculative cycle ([`crate::model::cycle::Cycle`]): each forward
//! of the cycle priced as `verify --backend model` prices one schedule ([`super::verify`]:
//! the collectives by the link profile, the compute as the bytes each rank streams at the
//! profile's HBM bandwidth, one launch per op, eager or from a CUDA graph), and the cycle as
//! the sum of its k draft forwards and the verify. The plain decode step of the same batch is
//! priced beside it. Every figure is modeled.
//!
//! `verify --backend model --phase cycle` writes the prices as a record ([`verify_cycle`]).

use super::{modeled_run, verify, ModelSettings, Modeled};
use crate::model::cycle::{draft_groups, Cycle};
use crate::record::{CyclePart, Mode, Part, PartRun, RecordedWorkload, VerifyResult, VerifyRun};
use crate::request::Launcher;

/// The modeled runs of every distinct forward of `c`: the decode, each group of alike draft
/// forwards (priced once), the verify; with the notes of the verify's pricing.
struct Priced {
    decode: Vec<VerifyRun>,
    /// Per draft forward of the cycle, in order (alike forwards share their runs).
    draft: Vec<Vec<VerifyRun>>,
    verify: Vec<VerifyRun>,
    profile: String,
    notes: Vec<String>,
}

fn price_forwards(
    c: &Cycle,
    nranks: usize,
    runs: &[(bool, Mode)],
    launcher: Launcher,
    m: &ModelSettings,
) -> anyhow::Result<Priced> {
    let v = verify(&c.verify, nranks, runs, launcher, m)?;
    let decode = verify(&c.decode, nranks, runs, launcher, m)?.result.runs;
    let mut draft = vec![];
    for (s, n) in draft_groups(&c.draft) {
        let r = verify(s, nranks, runs, launcher, m)?.result.runs;
        draft.extend(std::iter::repeat_n(r, n as usize));
    }
    Ok(Priced {
        decode,
        draft,
        verify: v.result.runs,
        profile: v.profile,
        notes: v.notes,
    })
}

/// `verify --backend model --phase cycle`: the cycle's record body, its `runs` the whole cycle
/// (broken down by forward) and its `parts` the decode step, the k draft forwards together
/// and the verify, each run as one schedule is.
pub fn verify_cycle(
    c: &Cycle,
    nranks: usize,
    runs: &[(bool, Mode)],
    launcher: Launcher,
    m: &ModelSettings,
) -> anyhow::Result<Modeled<VerifyResult>> {
    let p = price_forwards(c, nranks, runs, launcher, m)?;
    let draft_colls: u64 = c.draft.iter().map(|d| d.n_collectives()).sum();
    let ncoll = draft_colls + c.verify.n_collectives();
    let mut out = vec![];
    let mut parts = vec![];
    for (i, &(graph, mode)) in runs.iter().enumerate() {
        let draft_us: Vec<f64> = p.draft.iter().map(|d| d[i].per_verify.median_us).collect();
        let draft_total: f64 = draft_us.iter().sum();
        let verify_us = p.verify[i].per_verify.median_us;
        let mut breakdown: Vec<Part> = draft_us
            .iter()
            .enumerate()
            .map(|(k, us)| Part {
                name: format!("draft forward {}", k + 1),
                us: *us,
                count: c.draft[k].n_collectives(),
            })
            .collect();
        breakdown.push(Part {
            name: "verify".into(),
            us: verify_us,
            count: c.verify.n_collectives(),
        });
        out.push(modeled_run(
            graph,
            mode,
            draft_total + verify_us,
            ncoll,
            breakdown,
        ));
        let draft_breakdown = p.draft.iter().flat_map(|d| d[i].breakdown.clone());
        parts.push(PartRun {
            part: CyclePart::Decode,
            run: p.decode[i].clone(),
        });
        parts.push(PartRun {
            part: CyclePart::Draft,
            run: modeled_run(
                graph,
                mode,
                draft_total,
                draft_colls,
                merge_parts(draft_breakdown),
            ),
        });
        parts.push(PartRun {
            part: CyclePart::Verify,
            run: p.verify[i].clone(),
        });
    }
    let mut notes = p.notes;
    notes.push(format!(
        "cycle: {} draft forward{} then the verify, each priced as its own forward (a graph each, as the engines capture them); the plain decode step of the same batch beside it",
        c.draft.len(),
        if c.draft.len() == 1 { "" } else { "s" }
    ));
    notes.extend(c.drafter_notes.iter().map(|n| format!("drafter: {n}")));
    Ok(Modeled {
        result: VerifyResult {
            parts,
            ..VerifyResult::of(RecordedWorkload::of_cycle(c), out)
        },
        profile: p.profile,
        notes,
    })
}

/// The breakdowns of several forwards summed by name, in order of first appearance.
fn merge_parts(all: impl Iterator<Item = Part>) -> Vec<Part> {
    let mut out: Vec<Part> = vec![];
    for p in all {
        match out.iter_mut().find(|o| o.name == p.name) {
            Some(o) => {
                o.us += p.us;
                o.count += p.count;
            }
            None => out.push(p),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::cycle::{build, CycleSpec};
    use crate::model::draft::DrafterKind;
    use crate::model::{presets, Schedule, ScheduleOptions};

    /// The cost model's price of one cycle's parts in one replay mode, us.
    #[derive(Debug, Clone, PartialEq)]
    struct CyclePrice {
        /// From a CUDA graph (each part captured on its own, as the engines capture them), or
        /// eager launches.
        graph: bool,
        /// The plain decode step of the same batch (beside the cycle, not in it).
        decode_us: f64,
        /// Each draft forward of the cycle, in order.
        draft_us: Vec<f64>,
        /// The verify.
        verify_us: f64,
    }

    impl CyclePrice {
        /// The cycle: the draft forwards, then the verify.
        fn cycle_us(&self) -> f64 {
            self.draft_us.iter().sum::<f64>() + self.verify_us
        }

        /// The cycle over the plain decode step of the same batch.
        fn cycle_over_decode(&self) -> f64 {
            self.cycle_us() / self.decode_us
        }
    }

    /// Prices every part of `c` on `nranks` ranks (2 or more) for each (graph, mode) of `runs`,
    /// in that order: the decode step, each draft forward, the verify.
    fn price(
        c: &Cycle,
        nranks: usize,
        runs: &[(bool, Mode)],
        launcher: Launcher,
        m: &ModelSettings,
    ) -> anyhow::Result<Vec<CyclePrice>> {
        let p = price_forwards(c, nranks, runs, launcher, m)?;
        Ok(runs
            .iter()
            .enumerate()
            .map(|(i, &(graph, _))| CyclePrice {
                graph,
                decode_us: p.decode[i].per_verify.median_us,
                draft_us: p.draft.iter().map(|d| d[i].per_verify.median_us).collect(),
                verify_us: p.verify[i].per_verify.median_us,
            })
            .collect())
    }

    fn kimi_cycle(c: u64) -> Cycle {
        let opt = ScheduleOptions {
            concurrency: c,
            ..Default::default()
        };
        let spec = CycleSpec {
            drafter: DrafterKind::Eagle3,
            draft_steps: 3,
            ..Default::default()
        };
        build(&presets::preset("kimi-k2.5").unwrap(), &opt, &spec).unwrap()
    }

    #[test]
    fn the_cycle_is_its_forwards_each_priced_as_verify_prices_it() {
        let c = kimi_cycle(1);
        let m = ModelSettings::default();
        let runs = [(false, Mode::Full), (true, Mode::Full)];
        let p = price(&c, 8, &runs, Launcher::Processes, &m).unwrap();
        assert_eq!(p.len(), 2);
        // each part independently: the model's verify of that schedule
        let one = |s: &Schedule, graph: bool| {
            verify(s, 8, &[(graph, Mode::Full)], Launcher::Processes, &m)
                .unwrap()
                .result
                .runs[0]
                .per_verify
                .median_us
        };
        for g in &p {
            assert_eq!(g.draft_us.len(), 3);
            assert!((g.decode_us - one(&c.decode, g.graph)).abs() < 1e-9);
            assert!((g.verify_us - one(&c.verify, g.graph)).abs() < 1e-9);
            assert!((g.draft_us[0] - one(&c.draft[0], g.graph)).abs() < 1e-9);
            assert!((g.draft_us[2] - one(&c.draft[2], g.graph)).abs() < 1e-9);
            let sum = g.draft_us.iter().sum::<f64>() + g.verify_us;
            assert!((g.cycle_us() - sum).abs() < 1e-9);
            // a cycle is never cheaper than the decode step it replaces
            assert!(g.cycle_over_decode() > 1.0, "{}", g.cycle_over_decode());
        }
        // the first draft forward (4 tokens, the fc) costs more than the later ones
        assert!(p[1].draft_us[0] > p[1].draft_us[1]);
        assert!(p[0].cycle_us() > p[1].cycle_us(), "eager above graph");
    }

    #[test]
    fn the_record_holds_the_cycle_and_its_parts() {
        let c = kimi_cycle(8);
        let runs = [(true, Mode::Full)];
        let m = verify_cycle(&c, 8, &runs, Launcher::Processes, &ModelSettings::default()).unwrap();
        let v = &m.result;
        assert_eq!(v.workload.phase, crate::model::Phase::Cycle);
        assert_eq!(v.workload.facts.concurrency, 8);
        let cw = v.workload.facts.cycle.as_ref().unwrap();
        assert_eq!(
            (cw.draft_steps, cw.verify_tokens, cw.draft.len()),
            (3, 4, 3)
        );
        let part = |p: CyclePart| {
            v.parts
                .iter()
                .find(|r| r.part == p)
                .unwrap()
                .run
                .per_verify
                .median_us
        };
        let cycle = v.runs[0].per_verify.median_us;
        assert!((cycle - part(CyclePart::Draft) - part(CyclePart::Verify)).abs() < 1e-6);
        let names: Vec<&str> = v.runs[0]
            .breakdown
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(
            names,
            [
                "draft forward 1",
                "draft forward 2",
                "draft forward 3",
                "verify"
            ]
        );
    }
}
