//! The human-readable break-even of `verifybench breakeven` (its number formats included),
//! and writing text to stdout that ends quietly on a closed pipe.

use std::fmt::Write as _;

use crate::evidence::Labelled;
use crate::speculative::analysis::{BreakevenAnalysis, Row};

/// Writes to stdout; a closed pipe (`| head`) ends the output quietly instead of panicking.
pub(crate) fn print_out(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// The origin cell of a row of the per-verify table (text and Markdown alike): `bound` for a
/// part of the verify, `modeled` for a row drawn from modeled times, else the verify time's
/// own origin.
pub(crate) fn origin_cell(r: &Row) -> &'static str {
    if r.bound {
        "bound"
    } else if r.modeled {
        "modeled"
    } else {
        r.verify_ms.origin.kind()
    }
}

fn ms(l: &Labelled) -> String {
    format!("{:>8.2} ms", l.value)
}

/// The verify time of a row: the time given, `^` where the row is held at the floor.
pub(crate) fn verify_cell(r: &Row) -> String {
    if r.at_floor {
        format!("{:.2}^", r.verify_ms.value)
    } else {
        format!("{:.2}", r.verify_ms.value)
    }
}

/// Up to 3 decimals, trailing zeros dropped: 2.5, 2.496, 4.
pub(crate) fn num(x: f64) -> String {
    let s = format!("{x:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// The constant rate column: a number, `any` (tau* <= 1), or `unreachable` (tau* > k+1).
pub(crate) fn rate_cell(tau_star: f64, rate: Option<f64>) -> String {
    match rate {
        None => "unreachable".into(),
        Some(_) if tau_star <= 1.0 => "any".into(),
        Some(r) => format!("{r:.3}"),
    }
}

/// The human-readable break-even: the inputs, the break-even per verify time with its
/// footnotes, and the tokens/s grid.
pub(crate) fn render(a: &BreakevenAnalysis) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# verifybench breakeven");
    let _ = writeln!(o, "# assumption: {}", a.assumption);
    if a.modeled {
        let _ = writeln!(
            o,
            "# MODELED: rows marked 'modeled' use times from the cost model, so their outputs are modeled"
        );
    }
    inputs_block(&mut o, a);
    let _ = writeln!(
        o,
        "\nWithout speculation: {:.2} tok/s (1000 / T_decode)",
        a.baseline_tokens_per_s
    );
    breakeven_block(&mut o, a);
    grid_block(&mut o, a);
    let _ = writeln!(
        o,
        "\nOutputs are computed from the inputs above{}.",
        if a.modeled {
            "; rows marked 'modeled' are modeled"
        } else {
            "; none of them is modeled"
        }
    );
    o
}

/// The inputs, each with where it comes from, then the notes and warnings.
fn inputs_block(o: &mut String, a: &BreakevenAnalysis) {
    let i = &a.inputs;
    let k = i.draft_steps;
    let line = |o: &mut String, name: &str, l: &Labelled| {
        let _ = writeln!(o, "  {:<14}{}   {}", name, ms(l), l.origin);
    };
    let _ = writeln!(o, "\nInputs");
    line(o, "T_decode", &i.decode_ms);
    line(o, "T_draft", &i.draft_ms);
    let _ = writeln!(
        o,
        "  {:<14}{:>8}      {}; the verify covers k+1 = {} tokens",
        "draft steps k",
        k,
        i.draft_steps_origin,
        k + 1
    );
    line(o, "overhead", &i.overhead_ms);
    if let Some(t) = &i.accept_length {
        let _ = writeln!(
            o,
            "  {:<14}{:>8.3}      {}",
            "accept length", t.value, t.origin
        );
    }
    for (n, v) in i.verify_ms.iter().enumerate() {
        line(o, if n == 0 { "T_verify" } else { "" }, v);
    }
    for note in &i.notes {
        let _ = writeln!(o, "  note: {note}");
    }
    for w in &a.warnings {
        let _ = writeln!(o, "  warning: {w}");
    }
}

/// The break-even of each verify time (cycle, tau*, alpha*, and tokens/s and speedup at the
/// accept length given), then a footnote for each mark the rows carry.
fn breakeven_block(o: &mut String, a: &BreakevenAnalysis) {
    let _ = writeln!(
        o,
        "\nBreak-even (cycle = k x T_draft + T_verify + overhead; tau* = cycle / T_decode; alpha* = constant acceptance rate with expected tokens tau*)"
    );
    let at = a.inputs.accept_length.as_ref().map(|t| t.value);
    let mut head = format!(
        "  {:>11}  {:<9} {:>9} {:>7} {:>12}",
        "T_verify ms", "source", "cycle ms", "tau*", "alpha*"
    );
    if let Some(t) = at {
        let _ = write!(
            head,
            " {:>16} {:>8}",
            format!("tok/s @ tau={}", num(t)),
            "speedup"
        );
    }
    let _ = writeln!(o, "{head}");
    for r in &a.rows {
        let mut line = format!(
            "  {:>11}  {:<9} {:>9.2} {:>7} {:>12}",
            verify_cell(r),
            origin_cell(r),
            r.cycle_ms,
            format!(
                "{}{:.3}",
                if r.bound { ">=" } else { "" },
                r.breakeven_accept_length
            ),
            rate_cell(r.breakeven_accept_length, r.breakeven_accept_rate)
        );
        if let Some(p) = &r.at_accept_length {
            let le = if r.bound { "<=" } else { "" };
            let _ = write!(
                line,
                " {:>16} {:>7}x{}",
                format!("{le}{:.2}", p.tokens_per_s),
                format!("{le}{:.2}", p.speedup),
                if p.beats_baseline { " *" } else { "" }
            );
        }
        let _ = writeln!(o, "{line}");
    }
    if a.rows
        .iter()
        .any(|r| !r.bound && r.breakeven_accept_length <= 1.0)
    {
        let _ = writeln!(
            o,
            "  (alpha* any: tau* <= 1, the cycle is shorter than one decode step, so speculation pays at any acceptance)"
        );
    }
    if a.rows.iter().any(|r| r.bound) {
        let _ = writeln!(
            o,
            "  (bound: T_verify is a part of the verify only, its other part is missing: tau* (>=) is a lower bound, tokens/s and speedup (<=) upper bounds, never a measured speedup)"
        );
    }
    if a.rows.iter().any(|r| r.at_floor) {
        let _ = writeln!(
            o,
            "  (^: held at the floor {:.2} ms: {}; the given time is below it)",
            a.floor.ms, a.floor.how
        );
    }
    if a.rows.iter().any(|r| !r.reachable) {
        let _ = writeln!(
            o,
            "  (unreachable: tau* > k+1 = {}, no acceptance can pay for this cycle)",
            a.inputs.draft_steps + 1
        );
    }
}

/// Tokens/s of each verify time (rows) at each accept length of the table (columns).
fn grid_block(o: &mut String, a: &BreakevenAnalysis) {
    let _ = writeln!(
        o,
        "\nTokens/s by verify time (rows) and accept length (columns); * beats {:.2} tok/s without speculation",
        a.baseline_tokens_per_s
    );
    let mut head = format!("  {:>11}", "T_verify ms");
    for t in &a.inputs.table_accept_lengths {
        let _ = write!(head, " {:>9}", format!("tau={}", num(*t)));
    }
    let _ = writeln!(o, "{head}");
    for r in &a.rows {
        let mut line = format!("  {:>11}", verify_cell(r));
        for p in &r.grid {
            let cell = format!(
                "{}{:.1}{}",
                if r.bound { "<=" } else { "" },
                p.tokens_per_s,
                if p.beats_baseline { "*" } else { " " }
            );
            let _ = write!(line, " {cell:>9}");
        }
        let _ = writeln!(o, "{line}");
    }
}
