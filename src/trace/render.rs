//! The human-readable `trace` report: the step's collectives, the step's time split (median
//! and range over the steps), one line per rank, the diagnosis, and the notes.

use std::fmt::Write as _;

use super::analysis::{ms, Analysis, StepSummary};
use super::extract::SizeFrom;
use super::plan_diff::PlanDiff;
use crate::measure::attribution::Spread;
use crate::units::grouped;

fn opt_n(x: Option<u64>) -> String {
    x.map(grouped).unwrap_or_else(|| "unknown".into())
}

fn row(o: &mut String, name: &str, s: &Spread) {
    let _ = writeln!(
        o,
        "  {name:<18} {:>10}   [{} .. {}]",
        ms(s.median),
        ms(s.min),
        ms(s.max)
    );
}

/// Renders the analysis.
pub(crate) fn render(a: &Analysis) -> String {
    let mut o = String::new();
    header(&mut o, a);
    collectives(&mut o, a);
    if let Some(s) = &a.step {
        step(&mut o, s);
    }
    per_rank(&mut o, a);
    let _ = writeln!(o, "\nDiagnosis");
    for d in &a.diagnosis {
        let _ = writeln!(o, "  {d}");
    }
    if let Some(p) = &a.against_plan {
        against_plan(&mut o, p);
    }
    footer(&mut o, a);
    o
}

/// The title line, how the steps were found, the files skipped.
fn header(o: &mut String, a: &Analysis) {
    let steps = a.step.as_ref().map(|s| s.steps).unwrap_or(0);
    let _ = writeln!(
        o,
        "# verifybench trace: {} rank{}{}, {} step{}; every figure measured from the trace",
        a.ranks.len(),
        if a.ranks.len() == 1 { "" } else { "s" },
        a.world_size
            .map(|w| format!(" (world size {w})"))
            .unwrap_or_default(),
        steps,
        if steps == 1 { "" } else { "s" }
    );
    let _ = writeln!(o, "# steps: {}", a.step_rule);
    for s in &a.skipped {
        let _ = writeln!(o, "# skipped: {}", s.reason);
    }
}

/// The step's collectives, one line per group of the sequence.
fn collectives(o: &mut String, a: &Analysis) {
    let _ = writeln!(
        o,
        "\nCollectives per step (rank {})",
        a.ranks.first().map(|r| r.rank).unwrap_or(0)
    );
    let _ = writeln!(
        o,
        "  {:<14} {:>6} {:>6} {:>12} {:>12} {:>6}  {:<9} implementation",
        "op", "dtype", "count", "elements", "bytes/rank", "group", "size from"
    );
    for g in &a.sequence {
        let from = match g.size_from {
            SizeFrom::Trace => "trace",
            SizeFrom::NcclLog => "NCCL log",
            SizeFrom::Unknown => "unknown",
        };
        let ap = match (&g.algo, &g.proto) {
            _ if g.implementation != "nccl" => g.implementation.clone(),
            (Some(a), Some(p)) => format!("NCCL {a}/{p}"),
            (Some(a), None) => format!("NCCL {a}"),
            (None, Some(p)) => format!("NCCL {p}"),
            _ => "NCCL".into(),
        };
        let _ = writeln!(
            o,
            "  {:<14} {:>6} {:>6} {:>12} {:>12} {:>6}  {:<9} {}",
            g.op,
            g.dtype.as_deref().unwrap_or("?"),
            g.per_step,
            opt_n(g.elements),
            opt_n(g.bytes),
            g.group_size
                .map(|x| x.to_string())
                .unwrap_or_else(|| "?".into()),
            from,
            ap
        );
    }
}

/// The step's time split: median [min .. max] over the steps.
fn step(o: &mut String, s: &StepSummary) {
    let _ = writeln!(
        o,
        "\nPer step, mean over ranks: median [min .. max] over {} steps",
        s.steps
    );
    row(o, "step", &s.step_us);
    row(o, "collectives", &s.collectives_us);
    if let (Some(t), Some(w)) = (&s.transfer_us, &s.waiting_us) {
        row(o, "  transfer", t);
        row(o, "  waiting", w);
    }
    row(o, "compute kernels", &s.compute_us);
    row(o, "GPU idle", &s.idle_us);
    let _ = writeln!(o, "  {:<18} {}", "launch", s.mode_words());
}

/// One line per rank, with the attribution's matches and skew.
fn per_rank(o: &mut String, a: &Analysis) {
    let _ = writeln!(o, "\nPer rank");
    let _ = writeln!(
        o,
        "  {:>4}  {:>6} {:>7} {:>11} {:>11} {:>11} {:>6} {:>10}  file",
        "rank", "colls", "steps", "step", "in-kernel", "waiting", "last", "host gap"
    );
    let total_last: usize = a.ranks.iter().map(|r| r.times_last).sum();
    for r in &a.ranks {
        let f = |x: Option<f64>| x.map(ms).unwrap_or_else(|| "-".into());
        let last = if total_last > 0 {
            format!("{:.0}%", 100.0 * r.times_last as f64 / total_last as f64)
        } else {
            "-".into()
        };
        let _ = writeln!(
            o,
            "  {:>4}  {:>6} {:>7} {:>11} {:>11} {:>11} {:>6} {:>10}  {}",
            r.rank,
            r.collectives,
            r.steps,
            f(r.step_median_us),
            f(r.in_kernel_median_us),
            f(r.waiting_median_us),
            last,
            f(r.host_gap_median_us),
            r.file
        );
    }
    if let Some(t) = &a.attribution {
        let skew = t
            .total
            .median_skew_us
            .map(ms)
            .unwrap_or_else(|| "unknown (ranks on different hosts)".into());
        let _ = writeln!(
            o,
            "  {} collectives matched on every rank; median start skew {skew}",
            t.matched
        );
    }
    let _ = writeln!(
        o,
        "  (per rank: medians over steps; host gap: host time between consecutive collective launches)"
    );
}

/// The trace's step against `plan`'s collectives.
fn against_plan(o: &mut String, p: &PlanDiff) {
    let _ = writeln!(
        o,
        "\nAgainst plan {}: {} collectives planned, {} in the trace's step: {}",
        p.plan,
        p.plan_collectives,
        p.trace_collectives,
        if p.same { "same sequence" } else { "different" }
    );
    let _ = writeln!(
        o,
        "  {:<14} {:>6} {:>12} {:>6} {:>6}",
        "op", "dtype", "bytes/rank", "plan", "trace"
    );
    for r in &p.rows {
        let _ = writeln!(
            o,
            "  {:<14} {:>6} {:>12} {:>6} {:>6}{}",
            r.op,
            r.dtype,
            grouped(r.bytes_per_rank),
            r.plan,
            r.trace,
            if r.plan != r.trace {
                "  <- differs"
            } else {
                ""
            }
        );
    }
    if let Some((i, x, y)) = &p.first_difference {
        let _ = writeln!(
            o,
            "  first difference at collective {i}: plan {x}, trace {y}"
        );
    }
}

/// The known traps the trace shows, and the notes.
fn footer(o: &mut String, a: &Analysis) {
    if !a.traps.is_empty() {
        let _ = writeln!(
            o,
            "\nKnown traps this trace shows (`verifybench explain` checks them all)"
        );
        for t in &a.traps {
            let _ = writeln!(
                o,
                "  found: {}: {} (source: {})",
                t.name, t.detail, t.source
            );
        }
    }
    if !a.notes.is_empty() {
        let _ = writeln!(o, "\nNotes");
        for n in &a.notes {
            let _ = writeln!(o, "  - {n}");
        }
    }
}
