//! What `choose` prints: the header (what was compared, measured or modeled), one table per
//! collective and launch mode with every candidate's time and the choice, the crossover, the
//! virtual-rank section, the key, the engines' settings.

use std::fmt::Write;

use super::decide::{choice_words, ModeChoice, Verdict};
use super::measure::{Candidate, NCCL_DEFAULT};
use super::{Decision, ShapeChoice};
use crate::model::CollectiveKind;
use crate::record::{Record, Source};

/// The whole text of decision `d` in record `rec`, the decision file's line last.
pub(crate) fn text(rec: &Record, d: &Decision, file_line: &str) -> String {
    let mut o = String::new();
    header(&mut o, rec, d);
    for (kind, what) in [
        (CollectiveKind::AllReduce, "all_reduce"),
        (
            CollectiveKind::AllGather,
            "all_gather (the logits; the P2P kernels are all-reduces: NCCL only)",
        ),
    ] {
        let rows: Vec<&ShapeChoice> = d.shapes.iter().filter(|s| s.shape.kind == kind).collect();
        if rows.is_empty() {
            continue;
        }
        for graph in [true, false] {
            let mode = if graph {
                "CUDA graph (as the engines capture it)"
            } else {
                "eager"
            };
            let _ = writeln!(o, "{what}, {mode}, us per collective:");
            table(
                &mut o,
                &rows,
                &d.candidates,
                graph,
                rec.source == Source::Modeled,
            );
            if kind == CollectiveKind::AllReduce {
                let words = if graph {
                    &d.crossover_graph_words
                } else {
                    &d.crossover_eager_words
                };
                let _ = writeln!(
                    o,
                    "crossover, {}: {words}",
                    if graph { "graph" } else { "eager" }
                );
            }
        }
    }
    for (c, why) in &d.failed {
        let _ = writeln!(o, "not compared: {c}: {why}");
    }
    for n in rec
        .provenance
        .notes
        .iter()
        .filter(|n| n.contains("skipped"))
    {
        let _ = writeln!(o, "note: {n}");
    }
    if let Some(v) = &d.virtual_ranks {
        virtual_ranks(&mut o, v);
    }
    let _ = writeln!(o, "key of the decision:");
    for (name, value) in d.key.parts() {
        let _ = writeln!(o, "  {name:<20} {value}");
    }
    let _ = writeln!(
        o,
        "engine settings (what the graph crossover means at TP{}):",
        d.world_size
    );
    for e in &d.engines {
        let _ = writeln!(
            o,
            "  {:<7} {}: {} [{}]",
            e.engine, e.setting, e.advice, e.source
        );
    }
    let _ = writeln!(o, "{file_line}");
    o
}

fn header(o: &mut String, rec: &Record, d: &Decision) {
    let p = &rec.provenance;
    let how = match rec.source {
        Source::Modeled => format!(
            "MODELED by the cost model (profile {}), not a measurement",
            p.model_profile.as_deref().unwrap_or("?")
        ),
        _ => format!(
            "measured on {} GPUs ({}), NCCL {}",
            d.world_size,
            p.gpus.first().map_or("?", |g| g.name.as_str()),
            p.nccl_version.as_deref().unwrap_or("?")
        ),
    };
    let _ = writeln!(
        o,
        "# verifybench {} ({}) choose: which all-reduce for each shape - {how}",
        p.tool_version, p.git_commit
    );
    let conc: Vec<String> = d.concurrency.iter().map(|c| c.to_string()).collect();
    let _ = writeln!(
        o,
        "# workload: {} cycle, TP={}, {}, hidden {}: concurrency {}, {} draft steps (decode of C tokens, verify of C x {}, EAGLE-3 draft step, logits)",
        d.model,
        d.world_size,
        d.dtype.name(),
        d.hidden_size,
        conc.join(", "),
        d.draft_steps,
        d.draft_steps + 1
    );
    let labels: Vec<&str> = d.candidates.iter().map(|c| c.label.as_str()).collect();
    let noise = if rec.source == Source::Modeled {
        "modeled: no noise"
    } else {
        "and beyond the spread of NCCL's default over the rounds"
    };
    let _ = writeln!(
        o,
        "# compared: {} in {} round{} (seed {:#x}), each round every run once in its own order; chosen: at least {:.0}% and {} us faster than NCCL's default, outside the paired 95% interval ({noise})",
        labels.join(", "),
        d.rounds,
        if d.rounds == 1 { "" } else { "s" },
        d.seed,
        d.min_rel * 100.0,
        d.min_us
    );
}

/// One table: a row per shape, a column per candidate that ran at that collective.
fn table(o: &mut String, rows: &[&ShapeChoice], cands: &[Candidate], graph: bool, modeled: bool) {
    let mode = |s: &ShapeChoice| -> ModeChoice {
        if graph {
            s.graph.clone()
        } else {
            s.eager.clone()
        }
    };
    let shown: Vec<&Candidate> = cands
        .iter()
        .filter(|c| rows.iter().any(|s| mode(s).figure(&c.id).is_some()))
        .collect();
    let used_width = rows
        .iter()
        .map(|s| s.shape.used_by().len())
        .max()
        .unwrap_or(7)
        .max(7);
    let _ = write!(
        o,
        "  {:>12} {:>6}  {:<used_width$}",
        "bytes", "tokens", "used by"
    );
    let width = |c: &Candidate| c.label.len().max(9);
    for c in &shown {
        let _ = write!(o, " {:>w$}", c.label, w = width(c));
    }
    let _ = writeln!(o, "  choice");
    for s in rows {
        let m = mode(s);
        let _ = write!(
            o,
            "  {:>12} {:>6}  {:<used_width$}",
            crate::units::grouped(s.shape.bytes),
            s.shape.tokens(),
            s.shape.used_by()
        );
        for c in &shown {
            let w = width(c);
            match m.figure(&c.id) {
                Some(f) => {
                    let _ = write!(o, " {:>w$.2}", f.median_us);
                }
                None => {
                    let _ = write!(o, " {:>w$}", "-");
                }
            }
        }
        let _ = writeln!(o, "  {}", verdict_words(&m, cands, modeled));
    }
}

/// The choice column: the choice, with its ratio to NCCL's default and why.
fn verdict_words(m: &ModeChoice, cands: &[Candidate], modeled: bool) -> String {
    let noise = match m.noise_rel {
        Some(n) if !modeled => format!(", noise ±{:.1}%", n * 100.0),
        _ => String::new(),
    };
    let choice = choice_words(m, cands);
    match m.verdict {
        Verdict::Wins => {
            let f = m.figure(&m.choice).expect("a winner has figures");
            let ratio = f.ratio.unwrap_or(f64::NAN);
            let interval = match f.interval {
                Some([lo, hi]) if hi > lo => format!(" [{lo:.3}-{hi:.3}]"),
                _ => String::new(),
            };
            format!(
                "{choice}: x{ratio:.3}{interval} of NCCL's default, {:.2} us faster{noise}",
                f.gain_us.unwrap_or(f64::NAN)
            )
        }
        Verdict::NcclHolds => {
            format!("{choice}: every other is slower beyond the noise{noise}")
        }
        Verdict::WithinNoise if m.figures.len() == 1 => {
            format!("{choice}: nothing else compared here")
        }
        Verdict::WithinNoise => format!(
            "{choice}: nothing beats it by {:.0}% and {} us beyond the noise{noise}",
            m.bar_rel * 100.0,
            super::decide::MIN_US
        ),
        Verdict::NoNoise => format!(
            "{choice}: one round, no noise measured, nothing chosen over it (--rounds 2 or more)"
        ),
        Verdict::NotMeasured => format!("not measured: {NCCL_DEFAULT} did not run"),
    }
}

fn virtual_ranks(o: &mut String, v: &super::on_one_gpu::VirtualRanks) {
    let _ = writeln!(
        o,
        "{}: GPU {}, {} ranks, us per call:",
        v.label, v.gpu, v.ranks
    );
    let _ = writeln!(
        o,
        "  {:>12} {:<8} {:>9} {:>9} {:>6}  exact check",
        "bytes", "kernel", "eager", "graph", "blocks"
    );
    for r in &v.rows {
        let f = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.2}"));
        let _ = writeln!(
            o,
            "  {:>12} {:<8} {:>9} {:>9} {:>6}  {}: {}",
            crate::units::grouped(r.bytes),
            r.imp,
            f(r.eager_us),
            f(r.graph_us),
            r.blocks.map_or("-".into(), |b| b.to_string()),
            if r.exact { "pass" } else { "FAIL" },
            r.detail
        );
    }
}
