//! Where a difference between compared results comes from: findings from the numbers and the
//! provenance alone (settings, machines, schedules, what each run timed).

use super::render::decimals;
use super::{n_collectives, run_name, Entry, Row};
use crate::record::{Mode, Source};

/// Findings on where the difference comes from, from the numbers and the provenance alone.
pub(crate) fn explain(entries: &[Entry], rows: &[Row]) -> Vec<String> {
    let mut notes = Vec::new();
    let Some(first) = entries.first() else {
        return notes;
    };
    for (i, e) in entries.iter().enumerate() {
        if e.source == Source::Modeled {
            notes.push(format!(
                "'{}' is modeled (backend {}), not measured: its numbers are not measurements",
                e.label, e.backend
            ));
        }
        let wrong: u64 = e.result.runs.iter().map(|r| r.wrong).sum();
        if wrong > 0 {
            notes.push(format!(
                "'{}' had {wrong} wrong elements: its timings are of a broken run",
                e.label
            ));
        }
        // Graph replay against eager within one entry: the host-side cost per collective.
        for mode in [Mode::Comm, Mode::Compute, Mode::Full] {
            let find = |g: bool| {
                rows.iter()
                    .find(|r| r.entry == i && r.mode == mode && r.graph == g)
            };
            if let (Some(ea), Some(gr)) = (find(false), find(true)) {
                if mode == Mode::Compute {
                    notes.push(format!(
                        "'{}' compute: eager − graph = {:+.1} us per verify: the launch cost of the compute kernels a graph replay no longer pays (this mode has no collectives)",
                        e.label,
                        ea.median_us - gr.median_us
                    ));
                    continue;
                }
                let per = (ea.median_us - gr.median_us) / n_collectives(&e.result.workload) as f64;
                notes.push(format!(
                    "'{}' {}: eager − graph = {:+.1} us per verify, {:+.2} us per collective: the host-side enqueue cost a graph replay no longer pays{}",
                    e.label,
                    mode.name(),
                    ea.median_us - gr.median_us,
                    per,
                    if e.backend == "torch" {
                        " (for PyTorch c10d: the Python call, a Work object, and an event record plus a stream wait into and out of its NCCL stream per collective)"
                    } else {
                        " (kernel launch per collective)"
                    }
                ));
            }
        }
        if i == 0 {
            continue;
        }
        // Against the base, run by run.
        for r in rows.iter().filter(|r| r.entry == i) {
            let Some(b) = rows
                .iter()
                .find(|b| b.entry == 0 && b.mode == r.mode && b.graph == r.graph)
            else {
                continue;
            };
            let (Some(x), Some(u)) = (r.ratio, r.ratio_err) else {
                continue;
            };
            let d = decimals(u);
            let verdict = if (x - 1.0).abs() > 2.0 * u {
                "beyond 2 standard errors"
            } else {
                "within 2 standard errors: no clear difference"
            };
            notes.push(format!(
                "'{}' vs '{}', {}: {:+.1} us per verify, {:+.2} us per collective, ratio {:.d$} ± {:.d$} ({verdict})",
                r.label,
                first.label,
                run_name(r.mode, r.graph),
                r.median_us - b.median_us,
                r.per_collective_us - b.per_collective_us,
                x,
                u
            ));
            if (r.iterations, r.warmup) != (b.iterations, b.warmup) {
                notes.push(format!(
                    "'{}' {}: {} timed replays after {} warm-up, the base {} after {}: not the same protocol",
                    r.label,
                    run_name(r.mode, r.graph),
                    r.iterations,
                    r.warmup,
                    b.iterations,
                    b.warmup
                ));
            }
        }
        notes.extend(setup_differences(first, e));
    }
    notes
}

/// What differs between two runs' setups (NCCL version, NCCL_* environment, host, GPU).
pub(super) fn setup_differences(a: &Entry, b: &Entry) -> Vec<String> {
    let mut d = Vec::new();
    let mut same = Vec::new();
    let lib = |e: &Entry| {
        e.nccl_library
            .as_deref()
            .map(|l| format!(" ({l})"))
            .unwrap_or_default()
    };
    match (&a.nccl_version, &b.nccl_version) {
        (Some(x), Some(y)) if x != y => d.push(format!(
            "NCCL {x}{} vs {y}{}: the two use different NCCL builds, so kernels and tuning may differ",
            lib(a),
            lib(b)
        )),
        (Some(x), Some(_)) => match (&a.nccl_library, &b.nccl_library) {
            (Some(la), Some(lb)) if la != lb => d.push(format!(
                "NCCL {x} in both, from two library files: {la} vs {lb} (one version number, possibly two builds: a patched or differently compiled NCCL)"
            )),
            _ => same.push(format!("NCCL {x}")),
        },
        _ => {}
    }
    let keys: std::collections::BTreeSet<&String> =
        a.nccl_env.keys().chain(b.nccl_env.keys()).collect();
    let env_diff: Vec<String> = keys
        .into_iter()
        .filter(|k| a.nccl_env.get(*k) != b.nccl_env.get(*k))
        .map(|k| {
            let v = |e: &Entry| e.nccl_env.get(k).cloned().unwrap_or_else(|| "unset".into());
            format!("{k}={} vs {}", v(a), v(b))
        })
        .collect();
    if !(a.has_workers && b.has_workers) {
        let which: Vec<&str> = [a, b]
            .iter()
            .filter(|e| !e.has_workers)
            .map(|e| e.label.as_str())
            .collect();
        d.push(format!(
            "no worker environment recorded in {}: cannot tell whether the NCCL settings matched",
            which.join(" and ")
        ));
    } else if env_diff.is_empty() {
        same.push("the same NCCL_* environment".into());
    } else {
        d.push(format!(
            "NCCL_* environment differs: {}",
            env_diff.join(", ")
        ));
    }
    if a.host != b.host {
        d.push(format!("hosts differ: {} vs {}", a.host, b.host));
    }
    if let (Some(x), Some(y)) = (&a.gpu, &b.gpu) {
        if x != y {
            d.push(format!("GPUs differ: {x} vs {y}"));
        }
    }
    let mut out: Vec<String> = d
        .into_iter()
        .map(|s| format!("'{}' vs '{}': {s}", b.label, a.label))
        .collect();
    if out.is_empty() && a.host == b.host {
        out.push(format!(
            "'{}' and '{}' ran on the same host with {}: the difference is in how each enqueues the same collectives, not in NCCL's version or NCCL_* settings",
            b.label,
            a.label,
            same.join(" and ")
        ));
    }
    out
}
