//! Pure exporters: records -> bytes. The caller writes the files (after every result, so a
//! later failure loses nothing).

use crate::record::{
    Body, CollTiming, CollectiveRow, ImplRun, Mode, Record, Source, VerifyResult, VerifyRun,
};

/// A flat table: what CSV and Markdown both render.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Table {
    pub(crate) headers: Vec<String>,
    pub(crate) rows: Vec<Vec<String>>,
}

impl Table {
    /// A table of `headers` with no rows yet.
    pub(crate) fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: vec![],
        }
    }
}

fn f2(x: f64) -> String {
    format!("{x:.2}")
}

/// `s` for a measured record, "-" for a modeled one: a spread, a sample count or a `#wrong`
/// exists only where something was timed and checked.
pub(crate) fn if_measured(source: Source, s: String) -> String {
    match source {
        Source::Measured => s,
        _ => "-".into(),
    }
}

/// `s` for a run with collectives, "-" for a compute-only run (it has none).
pub(crate) fn if_collectives(mode: Mode, s: String) -> String {
    match mode {
        Mode::Compute => "-".into(),
        _ => s,
    }
}

fn timing_cells(source: Source, t: &Option<CollTiming>) -> Vec<String> {
    match t {
        Some(t) => vec![
            f2(t.time_us),
            if_measured(source, f2(t.summary.p99_us)),
            f2(t.algbw_gbps),
            f2(t.busbw_gbps),
            if_measured(source, t.wrong.to_string()),
        ],
        None => vec![String::new(); 5],
    }
}

const COLLECTIVE_HEADERS: [&str; 16] = [
    "source",
    "op",
    "nranks",
    "dtype",
    "size_bytes",
    "count",
    "eager_time_us",
    "eager_p99_us",
    "eager_algbw_gbps",
    "eager_busbw_gbps",
    "eager_wrong",
    "graph_time_us",
    "graph_p99_us",
    "graph_algbw_gbps",
    "graph_busbw_gbps",
    "graph_wrong",
];

const VERIFY_HEADERS: [&str; 15] = [
    "source",
    "model",
    "phase",
    "tp",
    "tokens",
    "mode",
    "graph",
    "median_us",
    "p99_us",
    "mean_us",
    "stddev_us",
    "n",
    "per_collective_us",
    "collectives",
    "wrong",
];

/// A table of `headers` with "impl" inserted at `impl_at` when given, and no rows yet.
fn empty_table(headers: &[&str], impl_at: Option<usize>) -> Table {
    let mut t = Table::new(headers);
    if let Some(at) = impl_at {
        t.headers.insert(at, "impl".into());
    }
    t
}

/// The rows of the records, one table per record kind present (collective, then verify).
pub(crate) fn tables(records: &[Record]) -> Vec<(String, Table)> {
    let mut coll = empty_table(&COLLECTIVE_HEADERS, None);
    let mut ver = empty_table(&VERIFY_HEADERS, None);
    // The custom P2P implementations' rows (`--impl`), in tables of their own so that files
    // without them export exactly as before.
    let mut coll_impl = empty_table(&COLLECTIVE_HEADERS, Some(6));
    let mut ver_impl = empty_table(&VERIFY_HEADERS, Some(5));
    for r in records {
        match &r.body {
            Body::Collective(c) => {
                let first = |row: &CollectiveRow| {
                    vec![
                        r.source.label().to_string(),
                        c.op.name().to_string(),
                        c.nranks.to_string(),
                        c.dtype.name().to_string(),
                        row.size_bytes.to_string(),
                        row.count.to_string(),
                    ]
                };
                for row in &c.rows {
                    for t in &row.p2p {
                        let mut cells = first(row);
                        cells.push(t.imp.name().to_string());
                        cells.extend(timing_cells(r.source, &t.eager));
                        cells.extend(timing_cells(r.source, &t.graph));
                        coll_impl.rows.push(cells);
                    }
                }
                for row in &c.rows {
                    let mut cells = first(row);
                    cells.extend(timing_cells(r.source, &row.eager));
                    cells.extend(timing_cells(r.source, &row.graph));
                    coll.rows.push(cells);
                }
            }
            Body::Verify(v) => {
                ver_impl
                    .rows
                    .extend(v.p2p.iter().map(|ir| verify_impl_row(r.source, v, ir)));
                ver.rows
                    .extend(v.runs.iter().map(|run| verify_row(r.source, v, run)));
            }
            Body::Other { .. } => {}
        }
    }
    [
        ("collective", coll),
        ("verify", ver),
        ("collective by implementation", coll_impl),
        ("verify by implementation", ver_impl),
    ]
    .into_iter()
    .filter(|(_, t)| !t.rows.is_empty())
    .map(|(k, t)| (k.to_string(), t))
    .collect()
}

/// A verify run's row: spreads, counts and `#wrong` only where something was timed and
/// checked, the collectives' columns only where the run had collectives.
fn verify_row(source: Source, v: &VerifyResult, run: &VerifyRun) -> Vec<String> {
    let w = &v.workload;
    let mut cells = workload_cells(source, v);
    cells.extend([
        run.mode.name().to_string(),
        run.graph.to_string(),
        f2(run.per_verify.median_us),
        if_measured(source, f2(run.per_verify.p99_us)),
        f2(run.per_verify.mean_us),
        if_measured(source, f2(run.per_verify.stddev_us)),
        if_measured(source, run.per_verify.n.to_string()),
        if_collectives(run.mode, f2(run.per_collective_us)),
        if_collectives(run.mode, (w.n_all_reduce + w.n_all_gather).to_string()),
        if_measured(source, if_collectives(run.mode, run.wrong.to_string())),
    ]);
    cells
}

/// The row of a custom P2P implementation's verify run (`--impl`).
fn verify_impl_row(source: Source, v: &VerifyResult, ir: &ImplRun) -> Vec<String> {
    let (w, run) = (&v.workload, &ir.run);
    let mut cells = workload_cells(source, v);
    cells.extend([
        ir.imp.name().to_string(),
        run.mode.name().to_string(),
        run.graph.to_string(),
        f2(run.per_verify.median_us),
        f2(run.per_verify.p99_us),
        f2(run.per_verify.mean_us),
        f2(run.per_verify.stddev_us),
        run.per_verify.n.to_string(),
        f2(run.per_collective_us),
        (w.n_all_reduce + w.n_all_gather).to_string(),
        run.wrong.to_string(),
    ]);
    cells
}

/// The first cells of a verify row: the source and the workload.
fn workload_cells(source: Source, v: &VerifyResult) -> Vec<String> {
    let w = &v.workload;
    vec![
        source.label().to_string(),
        w.model.clone(),
        w.phase.name().to_string(),
        w.tp.to_string(),
        w.tokens.to_string(),
    ]
}

/// JSON: the records themselves (an array), pretty-printed.
pub(crate) fn to_json(records: &[Record]) -> anyhow::Result<Vec<u8>> {
    let mut v = serde_json::to_vec_pretty(records)?;
    v.push(b'\n');
    Ok(v)
}

/// CSV of the records' rows. Several record kinds become consecutive blocks, each with its
/// own header, separated by an empty line.
pub(crate) fn to_csv(records: &[Record]) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    for (i, (_, t)) in tables(records).iter().enumerate() {
        if i > 0 {
            out.push(b'\n');
        }
        out.extend(csv_table(t)?);
    }
    Ok(out)
}

/// Plain-text rendering of a table, columns aligned.
pub(crate) fn text_table(t: &Table) -> String {
    let mut w: Vec<usize> = t.headers.iter().map(|h| h.chars().count()).collect();
    for r in &t.rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = w[i] - c.chars().count();
            s.push_str(c);
            if i + 1 < cells.len() {
                s.push_str(&" ".repeat(pad + 2));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(&t.headers);
    for r in &t.rows {
        out.push_str(&line(r));
    }
    out
}

/// CSV rendering of a table, headers first.
pub(crate) fn csv_table(t: &Table) -> anyhow::Result<Vec<u8>> {
    let mut w = csv::Writer::from_writer(vec![]);
    w.write_record(&t.headers)?;
    for r in &t.rows {
        w.write_record(r)?;
    }
    Ok(w.into_inner()?)
}

/// A Markdown table.
pub(crate) fn markdown_table(t: &Table) -> String {
    let mut s = format!("| {} |\n", t.headers.join(" | "));
    s += &format!("|{}\n", "---|".repeat(t.headers.len()));
    for r in &t.rows {
        s += &format!("| {} |\n", r.join(" | "));
    }
    s
}

/// Markdown: one section per record kind.
pub(crate) fn to_markdown(records: &[Record]) -> anyhow::Result<Vec<u8>> {
    let mut s = String::new();
    for (name, t) in tables(records) {
        s += &format!("### {name}\n\n{}\n", markdown_table(&t));
    }
    Ok(s.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::Summary;
    use crate::model::{CollectiveKind, DType};
    use crate::record::*;

    fn coll_record() -> Record {
        let s = Summary::from_samples(&[7.0, 7.5, 8.0]).unwrap();
        let t = CollTiming {
            time_us: 7.5,
            summary: s,
            algbw_gbps: algbw_gbps(43008, 7.5),
            busbw_gbps: algbw_gbps(43008, 7.5),
            wrong: 0,
        };
        let mut p = Provenance::here("nccl", "t0".into());
        p.finished_utc = "t1".into();
        Record::new(
            Source::Measured,
            p,
            Body::Collective(CollectiveResult {
                op: CollectiveKind::AllReduce,
                dtype: DType::Bf16,
                nranks: 2,
                rows: vec![CollectiveRow {
                    size_bytes: 43008,
                    count: 21504,
                    eager: None,
                    graph: Some(t),
                    p2p: vec![],
                }],
            }),
        )
    }

    #[test]
    fn csv_snapshot() {
        let csv = String::from_utf8(to_csv(&[coll_record()]).unwrap()).unwrap();
        assert_eq!(
            csv,
            "source,op,nranks,dtype,size_bytes,count,eager_time_us,eager_p99_us,eager_algbw_gbps,eager_busbw_gbps,eager_wrong,graph_time_us,graph_p99_us,graph_algbw_gbps,graph_busbw_gbps,graph_wrong\n\
             measured,all_reduce,2,bf16,43008,21504,,,,,,7.50,7.99,5.73,5.73,0\n"
        );
    }

    #[test]
    fn markdown_snapshot() {
        let md = String::from_utf8(to_markdown(&[coll_record()]).unwrap()).unwrap();
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines[0], "### collective");
        assert!(lines[2].starts_with("| source | op | nranks |"));
        assert_eq!(lines[3], format!("|{}", "---|".repeat(16)));
        assert_eq!(
            lines[4],
            "| measured | all_reduce | 2 | bf16 | 43008 | 21504 |  |  |  |  |  | 7.50 | 7.99 | 5.73 | 5.73 | 0 |"
        );
    }

    #[test]
    fn json_is_an_array_of_records() {
        let v: serde_json::Value =
            serde_json::from_slice(&to_json(&[coll_record()]).unwrap()).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 1);
        assert_eq!(v[0]["kind"], "collective");
    }
}
