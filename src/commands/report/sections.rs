//! The report's sections of the kinds that are not plotted: sweep points ranked as `sweep`
//! prints them, bandwidth results and selftest checks.

use std::fmt::Write as _;

use super::loaded::LoadedFile;
use crate::evidence;
use crate::record::{self, Mode};
use crate::report::export::{markdown_table, Table};

/// `--noise-margin` as the sweep's command line gave it (0 when it did not).
pub(super) fn noise_margin_of(command_line: &[String]) -> f64 {
    let mut it = command_line.iter();
    while let Some(a) = it.next() {
        let v = match a.strip_prefix("--noise-margin=") {
            Some(v) => Some(v.to_string()),
            None if a == "--noise-margin" => it.next().cloned(),
            None => None,
        };
        if let Some(x) = v.and_then(|v| v.parse::<f64>().ok()) {
            return x;
        }
    }
    0.0
}

/// One section per file of sweep points: the points ranked as `sweep` prints them (first
/// round's table, notes, the rounds' paired ratios, noise floor, verdicts, recommendation),
/// from the stored points alone.
pub(super) fn sweep_sections(files: &[LoadedFile]) -> String {
    use crate::sweep::results::SweepPoint;
    let mut md = String::new();
    for f in files {
        let found = f.payloads(record::kinds::SWEEP_POINT);
        if found.is_empty() {
            continue;
        }
        let name = evidence::short_name(&f.path);
        // Malformed points are named in the skipped list already.
        let stored: Vec<SweepPoint> = found
            .iter()
            .filter_map(|(_, d)| <SweepPoint as serde::Deserialize>::deserialize(*d).ok())
            .collect();
        if stored.is_empty() {
            continue;
        }
        // The newest result of each (point, round), in the order first seen; the table is
        // round 1's, as `sweep` prints it.
        let mut pairs: Vec<SweepPoint> = vec![];
        for sp in stored {
            match pairs
                .iter_mut()
                .find(|p| p.point_id == sp.point_id && p.round == sp.round)
            {
                Some(p) => *p = sp,
                None => pairs.push(sp),
            }
        }
        // In the sweep's own point order (`p00-baseline`, `p01-...`), not the shuffled order
        // the rounds ran in.
        let mut points: Vec<SweepPoint> = pairs.iter().filter(|p| p.round == 0).cloned().collect();
        points.sort_by_key(|p| {
            let n: String = p
                .point_id
                .chars()
                .skip(1)
                .take_while(char::is_ascii_digit)
                .collect();
            (n.parse::<u64>().unwrap_or(u64::MAX), p.point_id.clone())
        });
        let rounds = pairs.iter().map(|p| p.round + 1).max().unwrap_or(1);
        let mode = pairs
            .first()
            .and_then(|p| p.key.mode.parse::<Mode>().ok())
            .unwrap_or(Mode::Comm);
        let last = found.iter().rev().find_map(|(r, _)| *r);
        let margin = last.map_or(0.0, |r| noise_margin_of(&r.provenance.command_line));
        let source = last.map_or("?", |r| r.source.label());
        let (text, _) = crate::sweep::summary::render(&points, &pairs, mode, rounds, margin);
        if md.is_empty() {
            let _ = writeln!(md, "## Sweep rankings\n");
        }
        let w = &points.first().or(pairs.first()).map(|p| p.workload.clone());
        let _ = writeln!(
            md,
            "### {name}: {} point(s), {rounds} round(s), mode {}, noise margin {margin}, {source}\n",
            points.len(),
            mode.name()
        );
        if let Some(w) = w {
            let _ = writeln!(
                md,
                "Workload: {} {} TP={} T={} {}, schedule {}.\n",
                w.model,
                w.phase.name(),
                w.tp,
                w.tokens,
                w.dtype.name(),
                w.schedule_hash
            );
        }
        let _ = writeln!(md, "```text\n{}```\n", text);
    }
    md
}

pub(super) fn num(v: &serde_json::Value, k: &str) -> Option<f64> {
    v.get(k).and_then(|x| x.as_f64())
}

/// The bandwidth files as one table: per GPU the device copy and the streaming kernel.
pub(super) fn bandwidth_section(files: &[LoadedFile]) -> String {
    let mut t = Table::new(&[
        "file",
        "GPU",
        "name",
        "copy r+w (GB/s)",
        "copy read (GB/s)",
        "streaming kernel, bytes read (tokens: GB/s, % of copy r+w)",
    ]);
    for f in files {
        let name = evidence::short_name(&f.path);
        for (_, data) in f.payloads(record::kinds::BANDWIDTH) {
            for g in data.as_array().into_iter().flatten() {
                let rw = num(g, "copy_rw_gbps").unwrap_or(f64::NAN);
                let stream: Vec<String> = g
                    .get("stream_gbps")
                    .and_then(|x| x.as_array())
                    .into_iter()
                    .flatten()
                    .filter_map(|p| Some((p.get(0)?.as_u64()?, p.get(1)?.as_f64()?)))
                    .map(|(t, x)| format!("T={t}: {x:.0} ({:.0}%)", 100.0 * x / rw))
                    .collect();
                t.rows.push(vec![
                    cell(&name),
                    g.get("device").map_or("?".into(), |d| d.to_string()),
                    cell(g.get("name").and_then(|x| x.as_str()).unwrap_or("?")),
                    format!("{rw:.0}"),
                    format!("{:.0}", num(g, "copy_read_gbps").unwrap_or(f64::NAN)),
                    stream.join(", "),
                ]);
            }
        }
    }
    if t.rows.is_empty() {
        return String::new();
    }
    let roof = roofline_table(files);
    let roof = if roof.rows.is_empty() {
        String::new()
    } else {
        format!(
            "\nThe tensor-core streaming kernel against its roofline, min(T x read bandwidth, tensor-core peak), both terms measured in the same run (the peak: mma.sync m16n8k16 bf16 on register operands); TFLOP/s = 1e12 flops/s, 2 flops per weight per token.\n\n{}\n",
            markdown_table(&roof)
        )
    };
    format!(
        "## Memory bandwidth (measured)\n\nBest of the timed passes per GPU (`verifybench bandwidth`); GB/s = 1e9 B/s.\n\n{}\n{roof}",
        markdown_table(&t)
    )
}

/// Per GPU of the bandwidth files that state a tensor-core roofline: its terms, the knee, and
/// the tensor-core kernel at each token count against it.
fn roofline_table(files: &[LoadedFile]) -> Table {
    let mut t = Table::new(&[
        "file",
        "GPU",
        "read (GB/s)",
        "tensor-core peak (TFLOP/s)",
        "knee (tokens)",
        "tensor cores (tokens: TFLOP/s, % of roofline, bound)",
    ]);
    for f in files {
        let name = evidence::short_name(&f.path);
        for (_, data) in f.payloads(record::kinds::BANDWIDTH) {
            for g in data.as_array().into_iter().flatten() {
                let Some(r) = g.get("roofline").filter(|r| r.is_object()) else {
                    continue;
                };
                let rates: Vec<String> = g
                    .get("kernels")
                    .and_then(|x| x.as_array())
                    .into_iter()
                    .flatten()
                    .filter(|k| k.get("kernel").and_then(|x| x.as_str()) == Some("tensor_cores"))
                    .filter_map(|k| {
                        Some(format!(
                            "T={}: {:.1} ({:.0}%, {})",
                            k.get("tokens")?.as_u64()?,
                            num(k, "tflops")?,
                            num(k, "pct_roofline")?,
                            k.get("bound")?.as_str()?
                        ))
                    })
                    .collect();
                let f0 = |k: &str| num(r, k).map_or("?".into(), |x| format!("{x:.0}"));
                t.rows.push(vec![
                    cell(&name),
                    g.get("device").map_or("?".into(), |d| d.to_string()),
                    f0("read_gbps"),
                    num(r, "tensor_peak_tflops").map_or("?".into(), |x| format!("{x:.1}")),
                    f0("knee_tokens"),
                    rates.join(", "),
                ]);
            }
        }
    }
    t
}

/// The selftest files: passed and failed checks, and the failed checks by name.
pub(super) fn selftest_section(files: &[LoadedFile]) -> String {
    let mut t = Table::new(&["file", "checks", "passed", "failed", "failed checks"]);
    for f in files {
        let name = evidence::short_name(&f.path);
        for (_, data) in f.payloads(record::kinds::SELFTEST) {
            let checks: Vec<&serde_json::Value> = data.as_array().into_iter().flatten().collect();
            let failed: Vec<String> = checks
                .iter()
                .filter(|c| c.get("pass").and_then(|x| x.as_bool()) != Some(true))
                .map(|c| {
                    format!(
                        "{} ({})",
                        c.get("name").and_then(|x| x.as_str()).unwrap_or("?"),
                        c.get("launcher").and_then(|x| x.as_str()).unwrap_or("?")
                    )
                })
                .collect();
            t.rows.push(vec![
                cell(&name),
                checks.len().to_string(),
                (checks.len() - failed.len()).to_string(),
                failed.len().to_string(),
                if failed.is_empty() {
                    "-".into()
                } else {
                    cell(&failed.join(", "))
                },
            ]);
        }
    }
    if t.rows.is_empty() {
        return String::new();
    }
    format!(
        "## Selftest (measured)\n\nExact-result checks of `verifybench selftest` on the GPUs.\n\n{}\n",
        markdown_table(&t)
    )
}

pub(super) fn cell(x: &str) -> String {
    x.replace('|', "\\|")
}
