//! The explanation as text (a table for people) or Markdown. Every figure is printed with its
//! source word (measured, modeled, inferred, given, derived).

use std::fmt::Write;

use super::{Explanation, Part, Scenario};
use crate::trace::analysis::ms;

/// A part's share of the verify (the first line, when it is a whole).
fn share(p: &Part, e: &Explanation) -> String {
    let whole = e.as_ran.first().filter(|p| p.depth == 0);
    match whole.map(|p| p.figure.us) {
        Some(w) if w > 0.0 => format!("{:.0}%", 100.0 * p.figure.us / w),
        _ => "-".into(),
    }
}

fn tps(s: &Scenario) -> (String, String) {
    match (s.tokens_per_s, s.vs_baseline) {
        (Some(t), Some(x)) => (format!("{t:.1}"), format!("{x:.2}x")),
        _ => (
            "-".into(),
            s.breakeven_tau
                .map(|t| format!("tau* {t:.2}"))
                .unwrap_or_else(|| "-".into()),
        ),
    }
}

/// The row's time, `^` where it is held at the floor.
fn time_cell(s: &Scenario) -> String {
    format!("{}{}", ms(s.verify.us), if s.at_floor { "^" } else { "" })
}

/// `8.1-9.0 ms`, or `-` for a row with nothing uncertain in it.
fn range_cell(r: Option<[f64; 2]>) -> String {
    match r {
        Some([lo, hi]) => {
            let (l, h) = (ms(lo), ms(hi));
            format!("{}-{h}", l.trim_end_matches(" ms"))
        }
        None => "-".into(),
    }
}

/// A row's cells in the columns' order (verify, time, range, step, step range, source, tok/s,
/// vs plain); its how apart.
fn cells(sc: &Scenario) -> [String; 8] {
    let (t, x) = tps(sc);
    [
        sc.row.name().to_string(),
        time_cell(sc),
        range_cell(sc.range_us),
        ms(sc.step.step_us),
        range_cell(sc.step.range_us),
        sc.verify.source.label().to_string(),
        t,
        x,
    ]
}

/// What the rows' columns mean.
const LEGEND: &str = "step = draft forwards x draft + verify + overhead, what the tokens/s divides by; tok/s = requests x accept length / step; vs plain = over decoding without speculation, with the row's change applied to the decode too; tau* = the accept length that breaks even; range: the calibrated terms' held-out spread on what they price and the model's stated error on its modeled part; ^: held at the floor, never faster than the decode step of this machine, so no row gains more than the accept length";

fn cycle_words(e: &Explanation) -> String {
    let c = &e.cycle;
    let mut v = vec![format!("k = {} draft steps", c.draft_steps)];
    if let Some(t) = &c.accept_length {
        v.push(format!(
            "accept length {} {}",
            crate::util::fmt_number((t.value * 1000.0).round() / 1000.0),
            t.origin.kind()
        ));
    }
    v.push(format!(
        "{} draft forward{} of {} {}",
        c.draft_forwards,
        if c.draft_forwards == 1 { "" } else { "s" },
        ms(c.draft_ms.value * 1000.0),
        c.draft_ms.origin.kind()
    ));
    v.push(format!(
        "overhead {} {}",
        ms(c.overhead_ms.value * 1000.0),
        c.overhead_ms.origin.kind()
    ));
    if c.concurrency > 1 {
        v.push(format!("{} requests per step", c.concurrency));
    }
    if let (Some(d), Some(b)) = (&c.decode_ms, c.baseline_tokens_per_s) {
        v.push(format!(
            "without speculation {b:.1} tok/s (decode {} ms {})",
            crate::util::fmt_number(d.value),
            d.origin.kind()
        ));
    }
    v.join(", ")
}

/// The first section's title: the verify as it ran, or as the model prices it where no verify
/// was given (the rows then predict it).
fn as_ran_title(e: &Explanation) -> &'static str {
    if e.scenarios
        .first()
        .is_some_and(|sc| sc.row == super::Row::Predicted)
    {
        "The verify as the model prices it (not given)"
    } else {
        "The verify as it ran"
    }
}

/// The text table.
pub(crate) fn text(e: &Explanation) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# verifybench explain: {} ranks; the model prices {} (cost model {})",
        e.ranks, e.schedule, e.pricing.profile
    );
    for ev in &e.evidence {
        let _ = writeln!(s, "# evidence: {ev}");
    }
    let _ = writeln!(s, "\n{}", as_ran_title(e));
    let _ = writeln!(
        s,
        "  {:<22} {:>10} {:>6}  {:<9} how",
        "part", "time", "share", "source"
    );
    for p in &e.as_ran {
        let name = format!("{}{}", "  ".repeat(p.depth as usize), p.name);
        let _ = writeln!(
            s,
            "  {:<22} {:>10} {:>6}  {:<9} {}",
            name,
            ms(p.figure.us),
            share(p, e),
            p.figure.source.label(),
            p.figure.how
        );
    }
    if let Some(c) = &e.calibration {
        let _ = writeln!(s, "\nHeld to this machine");
        for l in c.lines(&e.pricing.profile) {
            let _ = writeln!(s, "  {l}");
        }
    }
    if !e.scenarios.is_empty() {
        let _ = writeln!(s, "\nWhat would change it ({})", cycle_words(e));
        let _ = writeln!(
            s,
            "  {:<34} {:>10} {:>13} {:>9} {:>13}  {:<9} {:>7} {:>10}  how",
            "verify", "time", "range", "step", "step range", "source", "tok/s", "vs plain"
        );
        for sc in &e.scenarios {
            let [name, time, range, step, step_range, source, t, x] = cells(sc);
            let _ = writeln!(
                s,
                "  {name:<34} {time:>10} {range:>13} {step:>9} {step_range:>13}  {source:<9} {t:>7} {x:>10}  {}",
                sc.verify.how
            );
        }
        let _ = writeln!(s, "  ({LEGEND})");
    }
    let _ = writeln!(s, "\nAnswer");
    for l in &e.summary {
        let _ = writeln!(s, "  {l}");
    }
    let _ = writeln!(s, "\nNext");
    for n in &e.next {
        let _ = writeln!(s, "  {}:", n.why);
        let _ = writeln!(s, "    $ {}", n.command);
    }
    if !e.engine_flags.is_empty() {
        let _ = writeln!(
            s,
            "\nServer flags that decide whether the verify runs from a CUDA graph"
        );
        for f in &e.engine_flags {
            let _ = writeln!(
                s,
                "  {:<7} {}: {} ({})",
                f.engine.label(),
                f.flag,
                f.effect,
                f.source
            );
        }
    }
    let _ = writeln!(s, "\nKnown traps");
    for t in &e.traps {
        let _ = writeln!(
            s,
            "  {:<12} {}: {}",
            t.status.words(),
            t.rule.name,
            t.detail
        );
    }
    let _ = writeln!(s, "  where each rule comes from:");
    for t in &e.traps {
        let _ = writeln!(s, "    {}: {}", t.rule.id, t.rule.source);
    }
    if let Some(f) = &e.fit {
        let _ = writeln!(s, "\nFit: {}; mean from {}", f.method, f.mean_from);
    }
    if !e.notes.is_empty() {
        let _ = writeln!(s, "\nNotes");
        for n in &e.notes {
            let _ = writeln!(s, "  - {n}");
        }
    }
    s
}

fn md_escape(x: &str) -> String {
    x.replace('|', "\\|")
}

/// The Markdown page.
pub(crate) fn markdown(e: &Explanation) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "## verifybench explain\n\n{} ranks; the model prices {} (cost model {}).\n",
        e.ranks, e.schedule, e.pricing.profile
    );
    for ev in &e.evidence {
        let _ = writeln!(s, "- evidence: {}", md_escape(ev));
    }
    let _ = writeln!(
        s,
        "\n### {}\n\n| part | time | share | source | how |\n|---|---:|---:|---|---|",
        as_ran_title(e)
    );
    for p in &e.as_ran {
        let _ = writeln!(
            s,
            "| {}{} | {} | {} | {} | {} |",
            "&nbsp;&nbsp;".repeat(p.depth as usize),
            p.name,
            ms(p.figure.us),
            share(p, e),
            p.figure.source.label(),
            md_escape(&p.figure.how)
        );
    }
    if !e.scenarios.is_empty() {
        let _ = writeln!(s, "\n### What would change it\n\n{}\n\n| verify | time | range | step | step range | source | tok/s | vs plain | how |\n|---|---:|---:|---:|---:|---|---:|---:|---|", cycle_words(e));
        for sc in &e.scenarios {
            let cells = cells(sc).join(" | ");
            let _ = writeln!(s, "| {cells} | {} |", md_escape(&sc.verify.how));
        }
        let _ = writeln!(s, "\n{LEGEND}");
    }
    let _ = writeln!(s, "\n### Answer\n");
    for l in &e.summary {
        let _ = writeln!(s, "{l}");
    }
    let _ = writeln!(s, "\n### Next\n");
    for n in &e.next {
        let _ = writeln!(s, "- {}:\n  `{}`", n.why, n.command);
    }
    if !e.engine_flags.is_empty() {
        let _ = writeln!(s, "\n### Server flags that decide the CUDA graph\n\n| engine | flag | effect | source |\n|---|---|---|---|");
        for f in &e.engine_flags {
            let _ = writeln!(
                s,
                "| {} | `{}` | {} | {} |",
                f.engine.label(),
                md_escape(f.flag),
                md_escape(f.effect),
                md_escape(f.source)
            );
        }
    }
    let _ = writeln!(
        s,
        "\n### Known traps\n\n| status | trap | evidence | rule from |\n|---|---|---|---|"
    );
    for t in &e.traps {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            t.status.words(),
            t.rule.name,
            md_escape(&t.detail),
            md_escape(t.rule.source)
        );
    }
    if !e.notes.is_empty() {
        let _ = writeln!(s, "\n### Notes\n");
        for n in &e.notes {
            let _ = writeln!(s, "- {}", md_escape(n));
        }
    }
    s
}
