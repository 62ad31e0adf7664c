//! Terminal renderings of results: nccl-tests style for collectives, a per-run table for verify.

use std::fmt::Write as _;

use crate::record::{Body, CollTiming, Impl, Record, RecordedWorkload, Source};
use crate::units::grouped;

/// A workload in one line, as sweep's header and messages name it: `kimi-k2.5 verify tp 8
/// tokens 3 bf16`.
pub(crate) fn workload_line(w: &RecordedWorkload) -> String {
    format!(
        "{} {} tp {} tokens {} {}",
        w.model,
        w.phase.name(),
        w.tp,
        w.tokens,
        w.dtype.name()
    )
}

/// `#` header lines shared by every measuring command: source, backend, devices, NCCL.
pub(crate) fn header(r: &Record) -> String {
    let p = &r.provenance;
    let mut o = String::new();
    let pick = p
        .model_profile
        .as_deref()
        .filter(|_| r.source == Source::Modeled)
        .map(|m| {
            format!(
                "# link profile {m}: pick another with --link NAME (--help lists them) or --profile FILE (from `model fit`)\n"
            )
        });
    let label = match r.source {
        Source::Modeled => format!(
            "MODELED by the cost model (profile {}), not a measurement",
            p.model_profile.as_deref().unwrap_or("?")
        ),
        s => s.label().to_string(),
    };
    let _ = writeln!(
        o,
        "# verifybench {} ({}) {} - backend {}{}",
        p.tool_version,
        p.git_commit,
        label,
        p.backend,
        p.launcher
            .as_deref()
            .map(|l| format!(", launcher {l}"))
            .unwrap_or_default()
    );
    if let Some(line) = pick {
        o.push_str(&line);
    }
    if let Some(v) = &p.nccl_version {
        let _ = writeln!(
            o,
            "# NCCL {v} from {}",
            p.nccl_library.as_deref().unwrap_or("?")
        );
    }
    if !p.workers.is_empty() {
        let _ = writeln!(o, "# Using devices");
        for w in &p.workers {
            let gpu = p.gpus.iter().find(|g| g.index == w.device);
            let _ = writeln!(
                o,
                "#  Rank {:>2} Pid {:>7} on {} device {:>2} [{}] {}",
                w.rank,
                w.pid,
                p.host,
                w.device,
                gpu.map(|g| g.pci_bus_id.as_str()).unwrap_or("?"),
                gpu.map(|g| g.name.as_str()).unwrap_or("?")
            );
        }
        // The NCCL_* environment is the same on every worker in the common case: print it once,
        // or per rank when they differ.
        let first = &p.workers[0].nccl_env;
        if p.workers.iter().all(|w| &w.nccl_env == first) {
            let _ = writeln!(o, "# NCCL_* seen by every worker: {}", env_line(first));
        } else {
            for w in &p.workers {
                let _ = writeln!(
                    o,
                    "# NCCL_* seen by rank {}: {}",
                    w.rank,
                    env_line(&w.nccl_env)
                );
            }
        }
    }
    for n in &p.notes {
        let _ = writeln!(o, "# note: {n}");
    }
    o
}

/// NCCL_* variables as `K=V` words, "(none)" when there are none.
pub(crate) fn env_line(m: &std::collections::BTreeMap<String, String>) -> String {
    if m.is_empty() {
        return "(none)".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn cells(source: Source, t: &Option<CollTiming>) -> String {
    match t {
        Some(t) => format!(
            "{:>9.2} {:>7.2} {:>7.2} {:>6}",
            t.time_us,
            t.algbw_gbps,
            t.busbw_gbps,
            crate::report::export::if_measured(source, t.wrong.to_string())
        ),
        None => format!("{:>9} {:>7} {:>7} {:>6}", "-", "-", "-", "-"),
    }
}

/// nccl-tests style table of a collective record (eager and graph instead of out-of-place and
/// in-place), with the `#wrong` column and the average bus bandwidth.
pub fn collective_table(r: &Record) -> String {
    let Body::Collective(c) = &r.body else {
        return String::new();
    };
    if c.rows.iter().any(|row| !row.p2p.is_empty()) {
        return crossover_table(r);
    }
    let mut o = header(r);
    let _ = writeln!(
        o,
        "# {} of {} on {} ranks{}",
        c.op.name(),
        c.dtype.name(),
        c.nranks,
        if r.source == Source::Modeled {
            " (modeled; --gpus N picks another rank count)"
        } else {
            ""
        }
    );
    let _ = writeln!(o, "#");
    let _ = writeln!(o, "# {:>41}  {:^32}  {:^32}", "", "eager", "graph");
    let _ = writeln!(
        o,
        "# {:>10} {:>12} {:>8} {:>6} {:>9} {:>7} {:>7} {:>6}  {:>9} {:>7} {:>7} {:>6}",
        "size",
        "count",
        "type",
        "redop",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "time",
        "algbw",
        "busbw",
        "#wrong"
    );
    let _ = writeln!(
        o,
        "# {:>10} {:>12} {:>8} {:>6} {:>9} {:>7} {:>7} {:>6}  {:>9} {:>7} {:>7} {:>6}",
        "(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""
    );
    let redop = match c.op {
        crate::model::CollectiveKind::AllGather
        | crate::model::CollectiveKind::Broadcast
        | crate::model::CollectiveKind::AllToAll => "none",
        _ => "sum",
    };
    let mut bw = vec![];
    let mut wrong = 0;
    for row in &c.rows {
        let _ = writeln!(
            o,
            "  {:>10} {:>12} {:>8} {:>6} {}  {}",
            row.size_bytes,
            row.count,
            c.dtype.name(),
            redop,
            cells(r.source, &row.eager),
            cells(r.source, &row.graph)
        );
        for t in [&row.eager, &row.graph].into_iter().flatten() {
            bw.push(t.busbw_gbps);
            wrong += t.wrong;
        }
    }
    let avg = if bw.is_empty() {
        0.0
    } else {
        bw.iter().sum::<f64>() / bw.len() as f64
    };
    out_of_bounds_line(&mut o, r.source != Source::Modeled, wrong);
    let _ = writeln!(o, "# Avg bus bandwidth    : {avg:.3} GB/s");
    o
}

/// nccl-tests' closing count of wrong elements (`checked`: the results were checked, else the
/// record is modeled).
fn out_of_bounds_line(o: &mut String, checked: bool, wrong: u64) {
    if checked {
        let _ = writeln!(
            o,
            "# Out of bounds values : {wrong} {}",
            if wrong == 0 { "OK" } else { "WRONG" }
        );
    } else {
        let _ = writeln!(
            o,
            "# Out of bounds values : - (modeled: nothing was checked)"
        );
    }
}

/// The in-collective rows of a verify table: per run, what a profiler would show inside the
/// collectives of one verify (transfer + waiting) and the top straggler, then how each was
/// obtained (measured pass, modeled, FAKE).
fn in_collective_lines(o: &mut String, v: &crate::record::VerifyResult) {
    let rows: Vec<_> = v
        .runs
        .iter()
        .filter_map(|r| r.in_collective.as_ref().map(|c| (r, c)))
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "# in collectives per verify (what a profiler shows) = transfer (shortest rank per collective) + waiting (mean over ranks):"
    );
    let _ = writeln!(
        o,
        "  {:<8} {:<6} {:>13} {:>12} {:>11} {:>9} {:>12}  straggler",
        "mode", "launch", "in_coll_us", "transfer_us", "waiting_us", "skew_us", "lower_bound"
    );
    let mut hows: Vec<&str> = vec![];
    for (r, c) in &rows {
        let straggler = match &c.straggler {
            Some(s) => format!(
                "rank {} last in {:.0}% (median lag {:.1} us)",
                s.rank,
                100.0 * s.share,
                s.median_lag_us
            ),
            None => "-".into(),
        };
        let _ = writeln!(
            o,
            "  {:<8} {:<6} {:>13.1} {:>12.1} {:>11.1} {:>9} {:>12}  {straggler}",
            r.mode.name(),
            if r.graph { "graph" } else { "eager" },
            c.in_collective_us,
            c.transfer_us,
            c.waiting_us,
            c.median_skew_us
                .map_or("-".to_string(), |x| format!("{x:.1}")),
            c.lower_bound_us
                .map_or("-".to_string(), |x| format!("{x:.1}")),
        );
        if !hows.contains(&c.how.as_str()) {
            hows.push(&c.how);
        }
    }
    for h in hows {
        let _ = writeln!(o, "#   {h}");
    }
    if v.runs.iter().any(|r| r.graph && r.in_collective.is_some()) {
        let _ = writeln!(
            o,
            "#   graph replay has no host gaps: a CUDA graph launches every kernel from the device"
        );
    }
}

/// Table of a verify record: one row per (mode, graph) run, the eager/graph ratio, and the
/// comm/compute split when the runs allow it.
pub fn verify_table(r: &Record) -> String {
    let Body::Verify(v) = &r.body else {
        return String::new();
    };
    let w = &v.workload;
    let mut o = header(r);
    let _ = writeln!(
        o,
        "# workload: {} {}, TP={}, {} tokens, {}: {} all_reduce x {} B + {} all_gather x {} B (schedule {})",
        w.model,
        w.phase.name(),
        w.tp,
        w.tokens,
        w.dtype.name(),
        w.n_all_reduce,
        grouped(w.all_reduce_bytes_per_rank),
        w.n_all_gather,
        grouped(w.all_gather_bytes_per_rank),
        w.schedule_hash
    );
    workload_extra(&mut o, w);
    let _ = writeln!(
        o,
        "  {:<8} {:<6} {:>12} {:>12} {:>10} {:>12} {:>6} {:>8} {:>7}",
        "mode",
        "launch",
        "median_us",
        "p99_us",
        "stddev_us",
        "per_coll_us",
        "n",
        "outliers",
        "#wrong"
    );
    use crate::report::export::{if_collectives, if_measured};
    for run in &v.runs {
        let s = &run.per_verify;
        let _ = writeln!(
            o,
            "  {:<8} {:<6} {:>12.1} {:>12} {:>10} {:>12} {:>6} {:>8} {:>7}",
            run.mode.name(),
            if run.graph { "graph" } else { "eager" },
            s.median_us,
            if_measured(r.source, format!("{:.1}", s.p99_us)),
            if_measured(r.source, format!("{:.1}", s.stddev_us)),
            if_collectives(run.mode, format!("{:.2}", run.per_collective_us)),
            if_measured(r.source, s.n.to_string()),
            if_measured(r.source, s.outliers.to_string()),
            if_measured(r.source, if_collectives(run.mode, run.wrong.to_string()))
        );
    }
    in_collective_lines(&mut o, v);
    cycle_lines(&mut o, r.source, v);
    for mode in [
        crate::record::Mode::Comm,
        crate::record::Mode::Compute,
        crate::record::Mode::Full,
    ] {
        if let (Some(e), Some(g)) = (v.run(false, mode), v.run(true, mode)) {
            if g.per_verify.median_us > 0.0 {
                let _ = writeln!(
                    o,
                    "# {}: eager / graph = {:.2}x ({:.1} us -> {:.1} us per verify)",
                    mode.name(),
                    e.per_verify.median_us / g.per_verify.median_us,
                    e.per_verify.median_us,
                    g.per_verify.median_us
                );
            }
        }
    }
    use crate::record::Mode;
    for graph in [false, true] {
        let launch = if graph { "graph" } else { "eager" };
        let (full, comp, comm) = (
            v.run(graph, Mode::Full),
            v.run(graph, Mode::Compute),
            v.run(graph, Mode::Comm),
        );
        if let (Some(f), Some(c)) = (full, comp) {
            let (f, c) = (f.per_verify.median_us, c.per_verify.median_us);
            let exposed = f - c;
            let _ = writeln!(
                o,
                "# split ({launch}): full {f:.1} us = compute {c:.1} us ({:.0}%) + exposed communication {exposed:.1} us ({:.0}%){}",
                100.0 * c / f,
                100.0 * exposed / f,
                comm.map(|m| format!("; communication alone {:.1} us", m.per_verify.median_us))
                    .unwrap_or_default()
            );
        }
        if let Some(c) = comp {
            for p in &c.breakdown {
                let _ = writeln!(
                    o,
                    "#   {launch} compute {:<28} {:>10.1} us  ({} ops)",
                    p.name, p.us, p.count
                );
            }
        }
    }
    if let (Some(bw), Some(pred)) = (v.stream_gbps, v.predicted_compute_us) {
        let bytes = w
            .weight_bytes_per_rank
            .map_or_else(|| "unknown".into(), grouped);
        if v.stream_rates.is_empty() {
            let _ = write!(
                o,
                "# compute prediction: {bytes} B / {bw:.0} GB/s (streaming kernel, same run) = {pred:.1} us"
            );
        } else {
            let launches: u64 = v.stream_rates.iter().map(|r| r.launches).sum();
            let _ = write!(
                o,
                "# compute prediction: {bytes} B / the streaming kernel's rate at each launch's token count + {launches} launches x fixed cost (same run) = {pred:.1} us"
            );
        }
        for graph in [true, false] {
            if let Some(c) = v.run(graph, Mode::Compute) {
                let m = c.per_verify.median_us;
                let _ = write!(
                    o,
                    "; measured {} {m:.1} us ({:+.1}%)",
                    if graph { "graph" } else { "eager" },
                    100.0 * (m - pred) / pred
                );
            }
        }
        let _ = writeln!(o);
    }
    o.push_str(&impl_comparison(r.source, v));
    let outl: usize = v.runs.iter().map(|r| r.per_verify.outliers).sum();
    if outl > 0 {
        let _ = writeln!(
            o,
            "# warning: {outl} outlier replays (MAD); p99 may reflect interference from other work on this machine"
        );
    }
    o
}

/// The workload's batch, context and cycle, where they are not one request without context.
fn workload_extra(o: &mut String, w: &crate::record::RecordedWorkload) {
    let w = &*w.facts;
    if w.concurrency > 1 || w.context > 0 {
        let kv = match w.kv {
            Some(kv) => format!(
                "; context {} tokens per request, KV cache {}{} ({} B per rank per forward)",
                grouped(w.context),
                kv.dtype.name(),
                if kv.dcp > 1 {
                    format!(" sharded {} ways", kv.dcp)
                } else {
                    String::new()
                },
                grouped(w.kv_bytes_per_rank.unwrap_or(0))
            ),
            None => String::new(),
        };
        let _ = writeln!(o, "# batch: {} requests per forward{kv}", w.concurrency);
    }
    if let Some(c) = &w.cycle {
        let tokens: Vec<String> = c.draft.iter().map(|d| d.tokens.to_string()).collect();
        let _ = writeln!(
            o,
            "# cycle: {} k={}: {} draft forward{} of {} tokens, then the verify of {} tokens per request; the plain decode step ({} tokens, schedule {}) beside it",
            c.drafter.name(),
            c.draft_steps,
            c.draft.len(),
            if c.draft.len() == 1 { "" } else { "s" },
            tokens.join(", "),
            c.verify_tokens,
            c.decode.tokens,
            c.decode.schedule_hash
        );
    }
}

/// A cycle record's parts: per run, the plain decode step, the draft forwards, the verify and
/// the cycle, and the cycle over the decode step.
fn cycle_lines(o: &mut String, source: crate::record::Source, v: &crate::record::VerifyResult) {
    use crate::report::export::if_measured;
    if v.parts.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "# the cycle's parts (the rows above: the cycle, draft forwards then the verify)"
    );
    let _ = writeln!(
        o,
        "  {:<8} {:<8} {:<6} {:>12} {:>12} {:>7}",
        "part", "mode", "launch", "median_us", "p99_us", "#wrong"
    );
    for run in &v.runs {
        let same = |p: &&crate::record::PartRun| p.run.graph == run.graph && p.run.mode == run.mode;
        for p in v.parts.iter().filter(same) {
            let s = &p.run.per_verify;
            let _ = writeln!(
                o,
                "  {:<8} {:<8} {:<6} {:>12.1} {:>12} {:>7}",
                p.part.name(),
                p.run.mode.name(),
                if p.run.graph { "graph" } else { "eager" },
                s.median_us,
                if_measured(source, format!("{:.1}", s.p99_us)),
                if_measured(source, p.run.wrong.to_string())
            );
        }
        let decode = v
            .parts
            .iter()
            .filter(same)
            .find(|p| p.part == crate::record::CyclePart::Decode);
        if let Some(d) = decode.filter(|d| d.run.per_verify.median_us > 0.0) {
            let (c, d) = (run.per_verify.median_us, d.run.per_verify.median_us);
            let _ = writeln!(
                o,
                "# {} {}: the cycle {c:.1} us = {:.2}x the plain decode step ({d:.1} us)",
                run.mode.name(),
                if run.graph { "graph" } else { "eager" },
                c / d
            );
        }
    }
}

/// The crossover table of a collective record with custom implementations (`--impl`), in
/// nccl-tests' column style: per size, each implementation's eager and graph time (us) and
/// #wrong, the fastest of each launch mode marked `*`, and the fastest in graph replay (else
/// eager) named in the last column.
pub(crate) fn crossover_table(r: &Record) -> String {
    let Body::Collective(c) = &r.body else {
        return String::new();
    };
    let Some(first) = c.rows.first() else {
        return header(r);
    };
    // The implementations as the first row has them: NCCL when its columns are there.
    let mut imps: Vec<Impl> = vec![];
    if first.eager.is_some() || first.graph.is_some() {
        imps.push(Impl::Nccl);
    }
    imps.extend(first.p2p.iter().map(|t| t.imp));
    let timing = |row: &crate::record::CollectiveRow, imp: Impl, graph: bool| {
        let t = if imp == Impl::Nccl {
            if graph {
                &row.graph
            } else {
                &row.eager
            }
        } else {
            match row.p2p.iter().find(|t| t.imp == imp) {
                Some(t) if graph => &t.graph,
                Some(t) => &t.eager,
                None => &None,
            }
        };
        t.clone()
    };
    let mut o = header(r);
    let _ = writeln!(o, "#");
    let _ = write!(o, "# {:>10} {:>12} {:>8} {:>6}", "", "", "", "");
    for imp in &imps {
        let _ = write!(o, "  {:^28}", imp.name());
    }
    let _ = writeln!(o);
    let _ = write!(
        o,
        "# {:>10} {:>12} {:>8} {:>6}",
        "size", "count", "type", "redop"
    );
    for _ in &imps {
        let _ = write!(o, "  {:>10} {:>10} {:>6}", "eager", "graph", "#wrong");
    }
    let _ = writeln!(o, "  fastest");
    let _ = write!(
        o,
        "# {:>10} {:>12} {:>8} {:>6}",
        "(B)", "(elements)", "", ""
    );
    for _ in &imps {
        let _ = write!(o, "  {:>10} {:>10} {:>6}", "(us)", "(us)", "");
    }
    let _ = writeln!(o);
    let mut wrong_total = 0;
    for row in &c.rows {
        let best = |graph: bool| {
            imps.iter()
                .filter_map(|&i| timing(row, i, graph).map(|t| (i, t.time_us)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map(|x| x.0)
        };
        let (best_e, best_g) = (best(false), best(true));
        let _ = write!(
            o,
            "  {:>10} {:>12} {:>8} {:>6}",
            row.size_bytes,
            row.count,
            c.dtype.name(),
            "sum"
        );
        for &imp in &imps {
            let cell = |graph: bool, best: Option<Impl>| match timing(row, imp, graph) {
                Some(t) => format!(
                    "{:>9.2}{}",
                    t.time_us,
                    if best == Some(imp) { "*" } else { " " }
                ),
                None => format!("{:>9} ", "-"),
            };
            let wrong: u64 = [false, true]
                .iter()
                .filter_map(|&g| timing(row, imp, g))
                .map(|t| t.wrong)
                .sum();
            wrong_total += wrong;
            let _ = write!(
                o,
                "  {:>10} {:>10} {:>6}",
                cell(false, best_e),
                cell(true, best_g),
                crate::report::export::if_measured(r.source, wrong.to_string())
            );
        }
        let _ = writeln!(
            o,
            "  {}",
            best_g
                .map(|i| format!("{i} (graph)"))
                .or(best_e.map(|i| format!("{i} (eager)")))
                .unwrap_or_else(|| "-".into())
        );
    }
    out_of_bounds_line(&mut o, r.source == Source::Measured, wrong_total);
    let _ = writeln!(o, "# * fastest of the implementations in that launch mode");
    o
}

/// The `--impl` part of a verify record: comm time per verify with each implementation of the
/// all-reduces and the saving per verify against NCCL's run of the same launch mode and mode.
pub(crate) fn impl_comparison(
    source: crate::record::Source,
    v: &crate::record::VerifyResult,
) -> String {
    let mut o = String::new();
    if v.p2p.is_empty() {
        return o;
    }
    let _ = writeln!(
        o,
        "# --impl: the all-reduces on each implementation (the logits all-gather stays on NCCL)"
    );
    let _ = writeln!(
        o,
        "  {:<8} {:<8} {:<6} {:>12} {:>12} {:>7} {:>22}",
        "impl", "mode", "launch", "median_us", "per_coll_us", "#wrong", "saving_vs_nccl_us"
    );
    let nccl = v.runs.iter().map(|r| (Impl::Nccl, r));
    let others = v.p2p.iter().map(|r| (r.imp, &r.run));
    for (imp, run) in nccl.chain(others) {
        let saving = match (imp, v.run(run.graph, run.mode)) {
            (Impl::Nccl, _) | (_, None) => "-".to_string(),
            (_, Some(n)) => {
                let (a, b) = (n.per_verify.median_us, run.per_verify.median_us);
                format!("{:.1} ({:+.0}%)", a - b, 100.0 * (b - a) / a.max(1e-9))
            }
        };
        let _ = writeln!(
            o,
            "  {:<8} {:<8} {:<6} {:>12.1} {:>12.2} {:>7} {:>22}",
            imp.name(),
            run.mode.name(),
            if run.graph { "graph" } else { "eager" },
            run.per_verify.median_us,
            run.per_collective_us,
            crate::report::export::if_measured(source, run.wrong.to_string()),
            saving
        );
    }
    o
}
