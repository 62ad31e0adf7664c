//! `verifybench explain`: reads the evidence ([`crate::explain::gather`]), explains it
//! ([`crate::explain::explain`]), prints the table, Markdown or the JSON record, and writes
//! `--export-json`. The value is the exit code.

use crate::explain::{render, ExplainRequest, Explanation};
use crate::record::{Body, Provenance, Record, Source};

/// The explanation in the record envelope (`kind: other`, `name: explain`): measured when a
/// trace was read, else modeled (every figure inside carries its own source). Its `markdown`
/// is the answer as `--format markdown` prints it, which `report` renders as its first section.
pub(crate) fn record(e: &Explanation, traced: bool, started: String) -> Record {
    let mut p = Provenance::here("model", started);
    p.notes
        .push(format!("cost model profile {}", e.pricing.profile));
    for ev in &e.evidence {
        p.notes.push(format!("evidence: {ev}"));
    }
    Record::new(
        if traced {
            Source::Measured
        } else {
            Source::Modeled
        },
        p,
        Body::Other {
            name: crate::record::kinds::EXPLAIN.into(),
            data: {
                let mut d = serde_json::to_value(e).expect("the explanation serializes");
                d["markdown"] = render::markdown(e).into();
                d
            },
        },
    )
}

/// Runs `verifybench explain`.
pub(crate) fn run(req: &ExplainRequest) -> anyhow::Result<i32> {
    let started = crate::util::now_utc();
    let mut files = crate::util::Files::new();
    files
        .inputs("--trace", &req.traces)
        .inputs("--nccl-log", &req.nccl_logs)
        .input("--server-log", req.server_log.as_deref())
        .input("--sweep", req.sweep.as_deref())
        .input("--allreduce-choice", req.allreduce_choice.as_deref());
    req.workload.add_to(&mut files);
    req.model.add_to(&mut files);
    files
        .output("--export-json", req.export_json.as_deref())
        .check()?;
    let g = crate::explain::gather(req)?;
    let e = crate::explain::explain(req, &g)?;
    let rec = record(&e, g.trace.is_some(), started);
    let doc = rec.to_json_pretty() + "\n";
    match req.format {
        crate::output::Format::Json => {}
        crate::output::Format::Markdown => print!("{}", render::markdown(&e)),
        crate::output::Format::Table => print!("{}", render::text(&e)),
    }
    crate::output::write_and_print(&doc, req.export_json.as_deref(), req.format.is_json())?;
    Ok(0)
}
