//! The renderers of a comparison: the terminal table and the Markdown page.

use std::fmt::Write as _;

use super::{describe, run_name, Comparison, Row, UNCERTAINTY_METHOD};
use crate::report::export::{if_collectives, if_measured};

fn ratio_text(r: &Row) -> String {
    match (r.ratio, r.ratio_err) {
        (Some(_), Some(_)) if r.entry == 0 => "1 (base)".into(),
        (Some(x), Some(u)) => {
            let d = decimals(u);
            format!("{x:.d$} ± {u:.d$}")
        }
        _ => "-".into(),
    }
}

/// Decimals that show the first significant digit of an uncertainty (2 to 4).
pub(super) fn decimals(u: f64) -> usize {
    if u <= 0.0 || !u.is_finite() {
        return 2;
    }
    ((-u.log10()).ceil() as i64).clamp(2, 4) as usize
}

fn header(c: &Comparison) -> String {
    format!(
        "verifybench compare: {}, {} collectives per verify",
        describe(&c.workload),
        c.workload.n_all_reduce + c.workload.n_all_gather
    )
}

const COLS: [&str; 11] = [
    "run",
    "file",
    "backend",
    "source",
    "median us",
    "p99 us",
    "us/coll",
    "n",
    "wrong",
    "ratio",
    "",
];

fn cells(c: &Comparison, r: &Row) -> Vec<String> {
    let e = &c.entries[r.entry];
    vec![
        run_name(r.mode, r.graph),
        r.label.clone(),
        e.backend.clone(),
        e.source.label().to_string(),
        format!("{:.1}", r.median_us),
        if_measured(e.source, format!("{:.1}", r.p99_us)),
        if_collectives(r.mode, format!("{:.2}", r.per_collective_us)),
        if_measured(e.source, r.n.to_string()),
        if_measured(e.source, if_collectives(r.mode, r.wrong.to_string())),
        ratio_text(r),
    ]
}

/// The plain-text table with its notes.
pub(crate) fn render_table(c: &Comparison) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# {}\n", header(c));
    let head: Vec<String> = COLS[..10].iter().map(|s| s.to_string()).collect();
    let body: Vec<Vec<String>> = c.rows.iter().map(|r| cells(c, r)).collect();
    let widths: Vec<usize> = (0..head.len())
        .map(|j| {
            body.iter()
                .map(|row| row[j].chars().count())
                .chain([head[j].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |row: &[String]| {
        let mut s = String::from(" ");
        for (j, cell) in row.iter().enumerate() {
            let w = widths[j];
            // text columns left-aligned, numbers right-aligned
            if j < 4 {
                let _ = write!(s, " {cell:<w$}");
            } else {
                let _ = write!(s, " {cell:>w$}");
            }
        }
        s.trim_end().to_string()
    };
    let _ = writeln!(o, "{}", line(&head));
    let mut last = None;
    for (r, row) in c.rows.iter().zip(&body) {
        let key = (r.mode, r.graph);
        if last.is_some() && last != Some(key) {
            o.push('\n');
        }
        last = Some(key);
        let _ = writeln!(o, "{}", line(row));
    }
    let _ = writeln!(o, "\n{}", wrap(UNCERTAINTY_METHOD, 96, ""));
    if !c.notes.is_empty() {
        let _ = writeln!(o, "\nWhere the difference comes from:");
        for n in &c.notes {
            let _ = writeln!(o, "{}", wrap(n, 96, "  - "));
        }
    }
    o
}

/// The Markdown table with its notes.
pub(crate) fn render_markdown(c: &Comparison) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "### {}\n", header(c));
    let _ = writeln!(o, "| {} |", COLS[..10].join(" | "));
    let _ = writeln!(o, "|{}", ["---|"; 4].concat() + &["---:|"; 6].concat());
    for r in &c.rows {
        let cs: Vec<String> = cells(c, r)
            .into_iter()
            .map(|s| s.replace('|', "\\|"))
            .collect();
        let _ = writeln!(o, "| {} |", cs.join(" | "));
    }
    let _ = writeln!(o, "\n{}", UNCERTAINTY_METHOD);
    if !c.notes.is_empty() {
        let _ = writeln!(o, "\n**Where the difference comes from**\n");
        for n in &c.notes {
            let _ = writeln!(o, "- {n}");
        }
    }
    o
}

/// Wraps `text` at `width` columns; the first line starts with `lead`, the rest are indented
/// to match.
pub(super) fn wrap(text: &str, width: usize, lead: &str) -> String {
    let indent = " ".repeat(lead.chars().count());
    let mut out = String::new();
    let mut line = lead.to_string();
    let mut empty = true;
    for word in text.split_whitespace() {
        if !empty && line.chars().count() + 1 + word.chars().count() > width {
            out.push_str(&line);
            out.push('\n');
            line = indent.clone();
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    out.push_str(&line);
    out
}
