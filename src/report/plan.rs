//! The table of `verifybench plan`: a schedule's collectives, bytes and ops, and its one-line
//! summary.

use std::fmt::Write as _;

use crate::model::engine::{profiler_lines, EngineView};
use crate::model::{Op, Phase, Schedule};
use crate::units::{grouped, human_bytes};

fn phase_name(p: Phase) -> &'static str {
    match p {
        Phase::Verify => "verify",
        Phase::Decode => "decode",
        Phase::Draft => "EAGLE-3 draft step",
    }
}

/// One summary line of a schedule.
pub(crate) fn one_line(s: &Schedule) -> String {
    let colls: Vec<String> = s
        .collective_groups()
        .iter()
        .map(|g| {
            format!(
                "{} {} of {} B",
                g.n,
                g.kind.name(),
                grouped(g.bytes_per_rank)
            )
        })
        .collect();
    let weights = match s.weight_bytes() {
        Some(b) => format!("{} of weights per rank", human_bytes(b)),
        None => "weights per rank unknown (see the warnings)".into(),
    };
    format!(
        "{} (T={}): {}; {weights}",
        phase_name(s.phase),
        s.tokens,
        colls.join(" + ")
    )
}

/// The human-readable plan.
pub(crate) fn render(s: &Schedule, ops: bool) -> String {
    render_with(s, ops, None)
}

/// The human-readable plan with an engine's names: its profiler counts after the
/// collectives, and with `ops`, each collective's call and kernel in that engine.
pub(crate) fn render_with(s: &Schedule, ops: bool, engine: Option<&EngineView>) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# verifybench plan: {} {}, TP={}, {} token{}, {}, routing {}",
        s.model,
        phase_name(s.phase),
        s.tp,
        s.tokens,
        if s.tokens == 1 { "" } else { "s" },
        s.dtype.name(),
        s.routing.name()
    );
    if s.experts_per_layer > 0.0 {
        let _ = writeln!(
            o,
            "# {:.2} distinct routed experts per MoE layer for {} token{}",
            s.experts_per_layer,
            s.tokens,
            if s.tokens == 1 { "" } else { "s" }
        );
    }
    if let Some(h) = s.routed_histogram() {
        let _ = writeln!(
            o,
            "# routed experts as replayed (whole experts, each streamed once with its own tokens): {} ({} token-expert pairs)",
            h.describe("experts"),
            h.pairs()
        );
    }
    if let Some(c) = &s.config_reading {
        if let Some(r) = &c.read_as {
            let _ = writeln!(o, "# config read as {r}");
        }
        for w in &c.warnings {
            let _ = writeln!(o, "# warning: {w}");
        }
    }
    let _ = writeln!(
        o,
        "# schedule {} : {} ops on each rank\n",
        s.hash(),
        s.ops.len()
    );
    let _ = writeln!(o, "Collectives per forward (each rank)");
    let _ = writeln!(
        o,
        "  {:<14} {:>5} {:>6} {:>12} {:>14} {:>14}",
        "op", "dtype", "count", "elements", "bytes/rank", "bytes out"
    );
    for g in s.collective_groups() {
        let _ = writeln!(
            o,
            "  {:<14} {:>5} {:>6} {:>12} {:>14} {:>14}",
            g.kind.name(),
            g.dtype.name(),
            g.n,
            grouped(g.count),
            grouped(g.bytes_per_rank),
            grouped(g.bytes_out)
        );
    }
    let _ = writeln!(
        o,
        "  total: {} collectives, {} B contributed per rank\n",
        s.n_collectives(),
        grouped(s.total_collective_bytes())
    );
    if let Some(v) = engine {
        o.push_str(&render_engine(s, v));
    }
    if !s.ops.iter().any(|op| matches!(op, Op::Compute { .. })) {
        let _ = writeln!(
            o,
            "Weights streamed per forward (each rank): unknown (see the warnings); collectives only"
        );
    } else {
        let _ = writeln!(o, "Weights streamed per forward (each rank)");
        let _ = writeln!(
            o,
            "  {:<16} {:>5} {:>18} {:>11} {:>7}",
            "op", "ops", "bytes", "", "share"
        );
        let total = s.total_weight_bytes().max(1);
        for (k, b) in s.weight_bytes_by_kind() {
            let n = s
                .ops
                .iter()
                .filter(|op| matches!(op, Op::Compute { kind, .. } if *kind == k))
                .count();
            let _ = writeln!(
                o,
                "  {:<16} {:>5} {:>18} {:>11} {:>6.1}%",
                k.name(),
                n,
                grouped(b),
                human_bytes(b),
                100.0 * b as f64 / total as f64
            );
        }
        let _ = writeln!(
            o,
            "  total {:>35} {:>11}",
            grouped(s.total_weight_bytes()),
            human_bytes(s.total_weight_bytes())
        );
    }
    if ops {
        o.push_str(&render_ops(s, engine));
    }
    o
}

/// The "Operations in order" part of the plan (`--ops`), with an engine's names where given.
fn render_ops(s: &Schedule, engine: Option<&EngineView>) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "\nOperations in order");
    for (i, op) in s.ops.iter().enumerate() {
        let layer = |l: &Option<u64>| l.map(|l| format!("layer {l}")).unwrap_or_default();
        let _ = match op {
            Op::Collective {
                kind,
                bytes_per_rank,
                site,
                layer: l,
                ..
            } => {
                let named = engine
                    .and_then(|v| v.ops.get(i).cloned().flatten())
                    .map(|e| match e.fused_with {
                        Some(f) => format!("  fused with {f}: {}", e.kernel),
                        None => format!("  {}", e.call),
                    })
                    .unwrap_or_default();
                writeln!(
                    o,
                    "  {i:>4}  {:<14} {:>12} B  {site} {}{named}",
                    kind.name(),
                    grouped(*bytes_per_rank),
                    layer(l)
                )
            }
            Op::Compute {
                kind,
                weight_bytes,
                layer: l,
                token_histogram,
            } => writeln!(
                o,
                "  {i:>4}  {:<14} {:>12} B  weights {}{}",
                k_name(kind.name()),
                grouped(*weight_bytes),
                layer(l),
                token_histogram
                    .as_ref()
                    .map(|h| format!("  {}", h.describe("experts")))
                    .unwrap_or_default()
            ),
        };
    }
    o
}

fn k_name(s: &str) -> String {
    s.replace(' ', "_")
}

/// `plan --schedule FILE`: where the file's schedule came from, its host gaps, whether it has
/// compute to replay, then the plan of its schedule.
pub(crate) fn render_file(f: &crate::model::schedule_file::ScheduleFile, ops: bool) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# schedule file: {}",
        f.origin.as_deref().unwrap_or("no origin recorded")
    );
    if let Some(g) = &f.host_gaps_us {
        let total: f64 = g.iter().sum();
        let _ = writeln!(
            o,
            "# host gaps: {} (one per op), {total:.1} us in all, as the file's source measured them",
            g.len()
        );
    }
    if !f
        .schedule
        .ops
        .iter()
        .any(|op| matches!(op, Op::Compute { .. }))
    {
        let _ = writeln!(
            o,
            "# collectives only: no compute ops, so `verify --mode compute|full` has nothing to replay"
        );
    }
    o.push_str(&render(&f.schedule, ops));
    o
}

/// What the engine runs of the schedule's collectives: the profiler count and where each
/// group of collectives comes from in the engine's code.
pub(crate) fn render_engine(s: &Schedule, v: &EngineView) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "As {} runs it (all-reduce fusion {})",
        v.engine.label(),
        if v.fusion_applies {
            "on"
        } else if v.allreduce_fusion {
            "asked for, not applicable"
        } else {
            "off"
        }
    );
    for line in profiler_lines(s, v) {
        let _ = writeln!(o, "  {line}");
    }
    // one row per (site, call, fused) in order of first appearance
    let mut rows: Vec<(String, &str, Option<&str>, &str, u64)> = Vec::new();
    for (op, e) in s.ops.iter().zip(&v.ops) {
        let (Op::Collective { site, .. }, Some(e)) = (op, e) else {
            continue;
        };
        match rows
            .iter_mut()
            .find(|r| r.0 == *site && r.1 == e.call && r.2 == e.fused_with)
        {
            Some(r) => r.4 += 1,
            None => rows.push((site.clone(), e.call, e.fused_with, e.source, 1)),
        }
    }
    for (site, call, fused, src, n) in rows {
        let how = match fused {
            Some(f) => format!("fused with {f}"),
            None => call.to_string(),
        };
        let _ = writeln!(o, "  {n:>5} x {site:<9} {how}\n            ({src})");
    }
    o.push('\n');
    o
}

/// `plan --format json`: the schedule, each collective with the engine's name for it
/// (`engine_op`), and the engine's profiler count (`engine`). A schedule file reader ignores
/// both, so the output stays a valid `--schedule` file.
pub(crate) fn json_with_engine(
    s: &Schedule,
    v: &EngineView,
) -> serde_json::Result<serde_json::Value> {
    let mut j = serde_json::to_value(s)?;
    if let Some(ops) = j.get_mut("ops").and_then(|o| o.as_array_mut()) {
        for (op, e) in ops.iter_mut().zip(&v.ops) {
            if let (Some(obj), Some(e)) = (op.as_object_mut(), e) {
                obj.insert("engine_op".into(), serde_json::to_value(e)?);
            }
        }
    }
    if let Some(obj) = j.as_object_mut() {
        obj.insert(
            "engine".into(),
            serde_json::json!({
                "engine": v.engine,
                "allreduce_fusion": v.allreduce_fusion,
                "fusion_applies": v.fusion_applies,
                "profiler_count": v.count,
                "profiler_lines": profiler_lines(s, v),
            }),
        );
    }
    Ok(j)
}
