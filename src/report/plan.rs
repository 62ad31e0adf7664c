//! The table of `verifybench plan`: a schedule's collectives, bytes and ops, and its one-line
//! summary.

use std::fmt::Write as _;

use crate::model::cycle::{draft_groups, Cycle};
use crate::model::engine::{profiler_lines, EngineView};
use crate::model::{ComputeKind, Op, Phase, Schedule};
use crate::units::{grouped, human_bytes};

fn phase_name(s: &Schedule) -> &'static str {
    match s.phase {
        Phase::Verify => "verify",
        Phase::Decode => "decode",
        Phase::Draft => match s.facts.drafter {
            Some(d) => d.forward_word(),
            None => "EAGLE-3 draft step",
        },
        Phase::Cycle => "speculative cycle",
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
        phase_name(s),
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
        phase_name(s),
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
    if let Some(line) = batch_line(s) {
        let _ = writeln!(o, "# {line}");
    }
    if let Some(line) = formats_line(s) {
        let _ = writeln!(o, "# {line}");
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
    o.push_str(&collectives_table(s));
    if let Some(v) = engine {
        o.push_str(&render_engine(s, v));
    }
    o.push_str(&weights_table(s));
    if ops {
        o.push_str(&ops_list(s, engine));
    }
    o
}

/// Every op of `s` in order, each collective with the engine's call for it.
fn ops_list(s: &Schedule, engine: Option<&EngineView>) -> String {
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
                "  {i:>4}  {:<14} {:>12} B  {} {}{}",
                k_name(kind.name()),
                grouped(*weight_bytes),
                if *kind == ComputeKind::KvCache {
                    "read"
                } else {
                    "weights"
                },
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

/// The collectives of one forward, grouped by kind and size, with their total.
fn collectives_table(s: &Schedule) -> String {
    let mut o = String::new();
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
    o
}

/// The weights (and KV cache) each rank streams per forward, by kind, with each kind's
/// storage format.
pub(crate) fn weights_table(s: &Schedule) -> String {
    let mut o = String::new();
    if !s.ops.iter().any(|op| matches!(op, Op::Compute { .. })) {
        let _ = writeln!(
            o,
            "Weights streamed per forward (each rank): unknown (see the warnings); collectives only"
        );
        return o;
    }
    let kv = s.kv_bytes() > 0;
    let _ = writeln!(
        o,
        "{} streamed per forward (each rank)",
        if kv {
            "Weights and KV cache"
        } else {
            "Weights"
        }
    );
    let _ = writeln!(
        o,
        "  {:<16} {:>5} {:>18} {:>11} {:>7}  format",
        "op", "ops", "bytes", "", "share"
    );
    let total = s.streamed_bytes().max(1);
    for (k, b) in s.weight_bytes_by_kind() {
        let n = s
            .ops
            .iter()
            .filter(|op| matches!(op, Op::Compute { kind, .. } if *kind == k))
            .count();
        let format = match (k, s.facts.weight_formats.get(&k), s.facts.kv) {
            (ComputeKind::KvCache, _, Some(kv)) => format!("{} (cache)", kv.dtype.name()),
            (_, Some(f), _) => f.label(),
            _ => "-".into(),
        };
        let _ = writeln!(
            o,
            "  {:<16} {:>5} {:>18} {:>11} {:>6.1}%  {format}",
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
        grouped(s.streamed_bytes()),
        human_bytes(s.streamed_bytes())
    );
    o
}

/// The header line of the weights' formats: each group's and its bits per weight where it is
/// packed, and whether they are the checkpoint's.
pub(crate) fn formats_line(s: &Schedule) -> Option<String> {
    let f = &s.facts.weight_formats;
    if f.is_empty() {
        return None;
    }
    let groups: Vec<String> = f
        .iter()
        .map(|(k, w)| {
            let bits = w.bits_per_weight();
            if (bits - bits.round()).abs() < 0.01 {
                format!("{} {}", k.name(), w.label())
            } else {
                format!("{} {} ({bits:.2} bits/weight)", k.name(), w.label())
            }
        })
        .collect();
    let how = match &s.facts.weights_override {
        Some(o) => format!("{o}, the rest as shipped"),
        None => "as shipped".into(),
    };
    Some(format!("weights ({how}): {}", groups.join(", ")))
}

/// The header line of the batch and the context, when either is not the default.
pub(crate) fn batch_line(s: &Schedule) -> Option<String> {
    let f = &s.facts;
    if f.concurrency <= 1 && f.context == 0 {
        return None;
    }
    let mut line = format!(
        "batch: {} request{} x {} token{} = {} tokens per forward",
        f.concurrency,
        if f.concurrency == 1 { "" } else { "s" },
        s.tokens_per_request(),
        if s.tokens_per_request() == 1 { "" } else { "s" },
        s.tokens
    );
    if let Some(kv) = f.kv {
        let _ = write!(
            line,
            "; context {} tokens per request, KV cache {}{} ({} of it read per forward on each rank)",
            grouped(f.context),
            kv.dtype.name(),
            if kv.dcp > 1 {
                format!(", sharded {} ways (--dcp)", kv.dcp)
            } else {
                String::new()
            },
            human_bytes(s.kv_bytes())
        );
    }
    Some(line)
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

/// A part of a cycle as the plan names it: the decode step, a draft forward (or a run of
/// alike ones), the verify.
struct CyclePartView<'a> {
    name: String,
    schedule: &'a Schedule,
    /// How many times it runs per cycle (the decode: beside the cycle, not in it).
    times: u64,
    in_cycle: bool,
    engine: EngineView,
}

/// The parts of `c` in order, each with its engine names: the decode step, each group of
/// alike draft forwards, the verify.
fn cycle_parts<'a>(
    c: &'a Cycle,
    engine: &dyn Fn(&Schedule) -> EngineView,
) -> Vec<CyclePartView<'a>> {
    let mut v = vec![CyclePartView {
        name: "decode step (plain, beside the cycle)".into(),
        schedule: &c.decode,
        times: 1,
        in_cycle: false,
        engine: engine(&c.decode),
    }];
    let mut first = 1;
    for (s, n) in draft_groups(&c.draft) {
        let last = first + n - 1;
        let name = if n == 1 {
            format!("draft forward {first}")
        } else {
            format!("draft forwards {first}-{last} (each)")
        };
        v.push(CyclePartView {
            name,
            schedule: s,
            times: n,
            in_cycle: true,
            engine: engine(s),
        });
        first = last + 1;
    }
    v.push(CyclePartView {
        name: "verify".into(),
        schedule: &c.verify,
        times: 1,
        in_cycle: true,
        engine: engine(&c.verify),
    });
    v
}

/// The collectives of a forward in one line: `123 x all_reduce 114,688 B + 1 x all_gather ...`.
fn collectives_line(s: &Schedule) -> String {
    s.collective_groups()
        .iter()
        .map(|g| {
            format!(
                "{} x {} {} B",
                g.n,
                g.kind.name(),
                grouped(g.bytes_per_rank)
            )
        })
        .collect::<Vec<_>>()
        .join(" + ")
}

/// `plan --phase cycle`: the cycle's header (the drafter and what is assumed of it, the
/// batch, the formats), a summary row per part, then each part's collectives with the
/// engine's call sites and its weights, KV cache and experts; with `ops`, every op of each.
pub(crate) fn render_cycle(
    c: &Cycle,
    ops: bool,
    engine: &dyn Fn(&Schedule) -> EngineView,
) -> String {
    let mut o = String::new();
    let v = &c.verify;
    let _ = writeln!(
        o,
        "# verifybench plan: {} speculative cycle, TP={}, {} k={}, {} request{}, verify of {} tokens per request, {}, routing {}",
        v.model,
        v.tp,
        c.drafter.label(),
        c.draft_steps,
        c.concurrency,
        if c.concurrency == 1 { "" } else { "s" },
        c.verify_tokens,
        v.dtype.name(),
        v.routing.name()
    );
    for n in &c.drafter_notes {
        let _ = writeln!(o, "# drafter: {n}");
    }
    if let Some(kv) = v.facts.kv {
        let _ = writeln!(
            o,
            "# context: {} tokens per request, KV cache {}{}, read by every forward",
            grouped(v.facts.context),
            kv.dtype.name(),
            if kv.dcp > 1 {
                format!(", sharded {} ways (--dcp)", kv.dcp)
            } else {
                String::new()
            }
        );
    }
    if let Some(line) = formats_line(v) {
        let _ = writeln!(o, "# target {line}");
    }
    if let Some(cr) = &v.config_reading {
        if let Some(r) = &cr.read_as {
            let _ = writeln!(o, "# config read as {r}");
        }
        for w in &cr.warnings {
            let _ = writeln!(o, "# warning: {w}");
        }
    }
    let parts = cycle_parts(c, engine);
    o.push('\n');
    o.push_str(&cycle_summary(&parts));
    for p in &parts {
        let s = p.schedule;
        let _ = writeln!(
            o,
            "\n## {}: {} token{}{}",
            p.name,
            s.tokens,
            if s.tokens == 1 { "" } else { "s" },
            if s.experts_per_layer > 0.0 {
                format!(
                    ", {:.2} distinct routed experts per MoE layer",
                    s.experts_per_layer
                )
            } else {
                String::new()
            }
        );
        if s.phase == Phase::Draft {
            if let Some(line) = formats_line(s) {
                let _ = writeln!(o, "# {line}");
            }
        }
        let _ = writeln!(
            o,
            "# schedule {} : {} ops on each rank",
            s.hash(),
            s.ops.len()
        );
        o.push_str(&collectives_table(s));
        o.push_str(&render_engine(s, &p.engine));
        o.push_str(&weights_table(s));
        if ops {
            o.push_str(&ops_list(s, Some(&p.engine)));
        }
    }
    o
}

/// One row per part and the cycle's total: forwards per cycle, tokens, collectives, weights
/// and KV cache per rank.
fn cycle_summary(parts: &[CyclePartView]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "The cycle, each rank (bytes per forward; the cycle row sums its forwards)"
    );
    let _ = writeln!(
        o,
        "  {:<38} {:>5} {:>7} {:>12} {:>11} {:>11}  collectives",
        "part", "times", "tokens", "collectives", "weights", "KV cache"
    );
    let (mut n, mut w, mut kv, mut coll_bytes) = (0u64, 0u64, 0u64, 0u64);
    for p in parts {
        let s = p.schedule;
        let weights = s.weight_bytes().map_or("unknown".into(), human_bytes);
        let _ = writeln!(
            o,
            "  {:<38} {:>5} {:>7} {:>12} {:>11} {:>11}  {}",
            p.name,
            p.times,
            s.tokens,
            s.n_collectives(),
            weights,
            human_bytes(s.kv_bytes()),
            collectives_line(s)
        );
        if p.in_cycle {
            n += p.times * s.n_collectives();
            w += p.times * s.weight_bytes().unwrap_or(0);
            kv += p.times * s.kv_bytes();
            coll_bytes += p.times * s.total_collective_bytes();
        }
    }
    let _ = writeln!(
        o,
        "  {:<38} {:>5} {:>7} {:>12} {:>11} {:>11}  {} B contributed per rank",
        "cycle (draft forwards + verify)",
        "",
        "",
        n,
        human_bytes(w),
        human_bytes(kv),
        grouped(coll_bytes)
    );
    o
}

/// `plan --phase cycle --format json`: the cycle (drafter, k, the tokens, the notes) with
/// each forward as `plan --format json` writes one (engine names included).
pub(crate) fn cycle_json(
    c: &Cycle,
    engine: &dyn Fn(&Schedule) -> EngineView,
) -> serde_json::Result<serde_json::Value> {
    let one = |s: &Schedule| json_with_engine(s, &engine(s));
    let draft = c.draft.iter().map(one).collect::<Result<Vec<_>, _>>()?;
    Ok(serde_json::json!({
        "phase": "cycle",
        "drafter": c.drafter,
        "draft_steps": c.draft_steps,
        "verify_tokens": c.verify_tokens,
        "concurrency": c.concurrency,
        "drafter_notes": c.drafter_notes,
        "decode": one(&c.decode)?,
        "draft": draft,
        "verify": one(&c.verify)?,
    }))
}
