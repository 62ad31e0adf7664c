//! The report's break-even section: its inputs from the flags and the verify records, and the
//! Markdown of the analysis.

use std::fmt::Write as _;

use super::sections::cell;
use crate::evidence::{Labelled, RecordTime};
use crate::model::Phase;
use crate::report::breakeven::{origin_cell, verify_cell};
use crate::report::export::{markdown_table, Table};
use crate::speculative::analysis::{analyse_step, BreakevenAnalysis};
use crate::speculative::inputs::{self, Flags};

/// The break-even of the report, or why there is none (a missing input is not an error here:
/// the rest of the report still renders).
pub(super) fn breakeven_of(
    flags: &Flags,
    engine: &crate::explain::EngineSettings,
    times: &[RecordTime],
) -> anyhow::Result<Result<BreakevenAnalysis, String>> {
    let has = |p: Phase| times.iter().any(|t| t.phase == p);
    if flags.decode_ms.is_none() && !has(Phase::Decode) {
        return Ok(Err(
            "no decode time. Give `--decode-ms` (one plain decode step, ms) or a results file \
             with a decode record to compare against plain decoding."
                .into(),
        ));
    }
    if !has(Phase::Verify) {
        return Ok(Err(
            "no verify-phase verify record in the results files.".into()
        ));
    }
    // The rule `breakeven` follows too (evidence::times_of): a verify record of
    // one part of the forward (collectives only, or compute only) is shown as a lower bound of
    // the verify, marked so; the decode and draft times must be whole forwards, since a part
    // of them would overstate what speculation gains. Beside a full verify record the bounds
    // add nothing and are left out; without one they are what the report can show.
    let is_full = |t: &RecordTime| t.mode == crate::record::Mode::Full;
    let any_full_verify = times.iter().any(|t| t.phase == Phase::Verify && is_full(t));
    let full: Vec<RecordTime> = times
        .iter()
        .filter(|t| is_full(t) || t.phase == Phase::Verify && !any_full_verify)
        .cloned()
        .collect();
    if flags.decode_ms.is_none() && !full.iter().any(|t| t.phase == Phase::Decode) {
        return Ok(Err(
            "no full-mode decode record (`verify --phase decode --mode full`) and no \
             `--decode-ms`: a decode time that is not a whole forward is not compared."
                .into(),
        ));
    }
    let times = &full[..];
    let i = inputs::resolve(flags, times, true)?;
    let (i, terms) = crate::commands::breakeven::with_engine_step(
        i,
        flags,
        engine,
        &crate::request::Batch::default(),
        times,
    )?;
    Ok(Ok(analyse_step(i, &terms)))
}

/// The break-even as Markdown: inputs with their origins, the per-verify table, the grid.
pub(crate) fn breakeven_markdown(a: &BreakevenAnalysis) -> String {
    let i = &a.inputs;
    let mut md = String::new();
    let _ = writeln!(md, "Assumption: {}.\n", a.assumption);
    if a.modeled {
        let _ = writeln!(
            md,
            "**Modeled**: rows whose origin is *modeled* use times from the cost model, so their outputs are modeled.\n"
        );
    }
    let _ = writeln!(md, "| input | value | origin |\n|---|---|---|");
    let row = |md: &mut String, name: &str, value: String, origin: &dyn std::fmt::Display| {
        let _ = writeln!(md, "| {name} | {value} | {} |", cell(&origin.to_string()));
    };
    let ms = |l: &Labelled| format!("{:.2} ms", l.value);
    row(&mut md, "T_decode", ms(&i.decode_ms), &i.decode_ms.origin);
    row(&mut md, "T_draft", ms(&i.draft_ms), &i.draft_ms.origin);
    let k = i.draft_steps.to_string();
    row(&mut md, "draft steps k", k, &i.draft_steps_origin);
    row(
        &mut md,
        "overhead",
        ms(&i.overhead_ms),
        &i.overhead_ms.origin,
    );
    for v in &i.verify_ms {
        row(&mut md, "T_verify", ms(v), &v.origin);
    }
    md.push('\n');
    for n in &i.notes {
        let _ = writeln!(md, "- note: {n}");
    }
    for w in &a.warnings {
        let _ = writeln!(md, "- warning: {w}");
    }
    let _ = writeln!(
        md,
        "Without speculation: **{:.2} tok/s** (1000 / T_decode). Cycle = k x T_draft + T_verify + \
         overhead; tau* = cycle / T_decode; alpha* = the constant acceptance rate whose expected \
         tokens are tau*.\n",
        a.baseline_tokens_per_s
    );
    let mut t = Table::new(&["T_verify (ms)", "origin", "cycle (ms)", "tau*", "alpha*"]);
    for r in &a.rows {
        t.rows.push(vec![
            verify_cell(r),
            origin_cell(r).to_string(),
            format!("{:.2}", r.cycle_ms),
            format!("{:.3}", r.breakeven_accept_length),
            match r.breakeven_accept_rate {
                None => "unreachable (tau* > k+1)".into(),
                Some(_) if r.breakeven_accept_length <= 1.0 => "any (tau* <= 1)".into(),
                Some(x) => format!("{x:.3}"),
            },
        ]);
    }
    let _ = writeln!(md, "{}", markdown_table(&t));
    if a.rows.iter().any(|r| r.at_floor) {
        let _ = writeln!(
            md,
            "^ held at the floor {:.2} ms: {}; the given time is below it.\n",
            a.floor.ms, a.floor.how
        );
    }
    if a.rows.iter().any(|r| r.bound) {
        let _ = writeln!(
            md,
            "*bound*: T_verify is a part of the verify only, its other part is missing: tau* is a lower bound and tokens/s (<=) upper bounds, never a measured speedup.\n"
        );
    }
    let mut g = Table {
        headers: std::iter::once("T_verify (ms)".to_string())
            .chain(i.table_accept_lengths.iter().map(|x| format!("tau={x}")))
            .collect(),
        rows: vec![],
    };
    for r in &a.rows {
        g.rows.push(
            std::iter::once(verify_cell(r))
                .chain(r.grid.iter().map(|p| {
                    if r.bound {
                        format!("<={:.1}", p.tokens_per_s)
                    } else if p.beats_baseline {
                        format!("**{:.1}**", p.tokens_per_s)
                    } else {
                        format!("{:.1}", p.tokens_per_s)
                    }
                }))
                .collect(),
        );
    }
    let _ = writeln!(
        md,
        "Tokens/s by verify time and accept length; **bold** beats plain decoding.\n\n{}",
        markdown_table(&g)
    );
    md
}
