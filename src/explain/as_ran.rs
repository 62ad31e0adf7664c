//! The verify as it ran, from the best evidence given: the traces (measured), what the
//! profiler showed inside the collectives (`--observed`: the transfer modeled, the waiting
//! inferred and fitted with host gaps), or the verify time alone.

use super::figures::{fig, part, Base, Figure, Part};
use super::fit::{self, JitterFit};
use super::observed::Observed;
use super::pricing::Pricing;
use crate::evidence::Source;
use crate::trace::analysis::ms;
use crate::trace::Analysis;

pub(crate) fn from_trace(
    a: &Analysis,
    p: &Pricing,
    parts: &mut Vec<Part>,
    notes: &mut Vec<String>,
) -> Base {
    let s = a.step.as_ref().expect("checked when read");
    let t = &s.typical;
    let ncoll = s.collectives_per_step as f64;
    let step_how = format!(
        "median step (step {} of {}) of the traces, mean over ranks; {}",
        t.index + 1,
        s.steps,
        s.mode_words()
    );
    let measured = |us: f64, how: &str| fig(us, Source::Measured, how);
    parts.push(part("verify step", 0, measured(t.step_us, &step_how)));
    let how = format!(
        "{} collectives' kernels, mean over ranks",
        s.collectives_per_step
    );
    parts.push(part("in collectives", 1, measured(t.collectives_us, &how)));
    let (transfer, waiting) = match (t.transfer_us, t.waiting_us) {
        (Some(x), Some(w)) => (
            measured(
                x,
                "the shortest rank's kernel per collective (the last to arrive waits for no one)",
            ),
            measured(w, "each rank's kernel less the transfer, mean over ranks"),
        ),
        _ => {
            notes.push("one rank's trace: its collectives cannot be split into transfer and waiting by measurement; the transfer is modeled and the waiting inferred (give every rank's trace of the same run)".into());
            let x = ncoll * p.per_collective_mean_us();
            (
                fig(
                    x,
                    Source::Modeled,
                    format!(
                        "{ncoll} x {:.1} us, the model's mean collective ({})",
                        p.per_collective_mean_us(),
                        p.profile
                    ),
                ),
                fig(
                    (t.collectives_us - x).max(0.0),
                    Source::Inferred,
                    "in collectives less the modeled transfer",
                ),
            )
        }
    };
    parts.push(part("transfer", 2, transfer.clone()));
    parts.push(part("waiting", 2, waiting.clone()));
    let how = "every other kernel's time, mean over ranks";
    parts.push(part("compute kernels", 1, measured(t.compute_us, how)));
    let how = "no kernel running, mean over ranks";
    parts.push(part("GPU idle", 1, measured(t.idle_us, how)));
    let already_graph = s.graph_steps > 0 && s.eager_steps == 0;
    let graph = if already_graph {
        measured(t.step_us, "the traced steps already ran from a CUDA graph")
    } else {
        let us = transfer.us + t.compute_us + ncoll * p.launch_graph_us;
        fig(
            us,
            Source::Modeled,
            format!(
                "{} transfer + compute as measured, plus {:.1} us of graph node gap per collective ({}); the waiting and the GPU idle left out: a graph launches every kernel from the device",
                transfer.source.label(),
                p.launch_graph_us,
                p.profile
            ),
        )
    };
    Base {
        verify: Some(measured(t.step_us, "the median step")),
        transfer,
        waiting: Some(waiting),
        graph: Some(graph),
        already_graph,
        graph_modeled_whole: false,
    }
}

pub(crate) fn from_observed(
    o: Observed,
    verify_ms: Option<f64>,
    s: &crate::model::Schedule,
    p: &Pricing,
    ranks: usize,
    parts: &mut Vec<Part>,
    notes: &mut Vec<String>,
) -> anyhow::Result<(Base, Option<JitterFit>)> {
    let in_coll = o.total_us();
    let verify_us = verify_ms.map(|v| v * 1000.0);
    if let Some(v) = verify_us {
        if v < in_coll {
            crate::usage_bail!(
                "--verify-ms {} is below the time inside the collectives, --observed {o} = {}: the verify holds its collectives; give the whole verify step's time",
                crate::util::fmt_number(v / 1000.0),
                ms(in_coll)
            );
        }
        parts.push(part("verify step", 0, fig(v, Source::Given, "--verify-ms")));
    }
    let nsched = p.per_collective_us.len();
    if o.count as usize != nsched {
        notes.push(format!(
            "the profiler's {} collectives differ from the schedule's {nsched} (engines fuse all-reduce with norms, skip the embedding's, or add the draft model's): per-collective means are compared, the model's transfer is {:.1} us per collective",
            o.count,
            p.per_collective_mean_us()
        ));
    }
    let x = o.count as f64 * p.per_collective_mean_us();
    parts.push(part(
        "in collectives",
        1,
        fig(in_coll, Source::Given, format!("--observed {o}")),
    ));
    let transfer = fig(
        x,
        Source::Modeled,
        format!(
            "{} x {:.1} us, the model's mean collective ({}, {})",
            o.count,
            p.per_collective_mean_us(),
            p.choice,
            p.profile
        ),
    );
    parts.push(part("transfer", 2, transfer.clone()));
    let w = in_coll - x;
    let mut fitted = None;
    let waiting = if w <= 0.0 {
        notes.push(format!(
            "the observed {} inside the collectives is at or below the model's transfer {}: nothing is left for waiting; the machine is faster than the profile ({}): give --link or a fitted --profile",
            ms(in_coll),
            ms(x),
            p.profile
        ));
        fig(
            0.0,
            Source::Inferred,
            "in collectives less the modeled transfer (none left)",
        )
    } else {
        let (mean, from) = match verify_us {
            Some(v) => (
                v / nsched as f64,
                format!("--verify-ms over the schedule's {nsched} collectives: the eager engine spends the verify launching"),
            ),
            None => (
                o.time_us,
                "the observed time of one collective (give --verify-ms to pin it)".to_string(),
            ),
        };
        let target = o.time_us * nsched as f64;
        let f = fit::fit(s, ranks, &p.per_collective_us, mean, &from, target);
        let how = if f.reached {
            format!(
                "in collectives less the modeled transfer; host gaps of {:.0} +- {:.0} us per collective reproduce it in the model ({} modeled vs {} observed per verify of {nsched} collectives)",
                f.mean_us,
                f.jitter_us,
                ms(f.modeled_us),
                ms(f.target_us)
            )
        } else {
            format!(
                "in collectives less the modeled transfer; no host-gap jitter up to {:.0} us reproduces it in the model (at most {})",
                f.jitter_us,
                ms(f.modeled_us)
            )
        };
        fitted = Some(f);
        fig(w, Source::Inferred, how)
    };
    parts.push(part("waiting", 2, waiting.clone()));
    let graph = verify_us.map(|v| {
        let how = "the verify less its collectives (not split without traces)";
        parts.push(part("compute + idle", 1, fig(v - in_coll, Source::Derived, how)));
        fig(
            v - waiting.us,
            Source::Modeled,
            "as it ran less the inferred waiting; compute and idle kept whole (an upper bound: a graph removes the launch gaps too)",
        )
    });
    if verify_us.is_none() {
        notes.push("no --verify-ms: the in-collective split is shown, but no verify time or tokens/s (give the verify step's time, ms)".into());
    }
    Ok((
        Base {
            verify: verify_us.map(|v| fig(v, Source::Given, "--verify-ms")),
            transfer,
            waiting: Some(waiting),
            graph,
            already_graph: false,
            graph_modeled_whole: false,
        },
        fitted,
    ))
}

pub(crate) fn from_verify_only(
    v: f64,
    p: &Pricing,
    parts: &mut Vec<Part>,
    notes: &mut Vec<String>,
) -> Base {
    parts.push(part("verify step", 0, fig(v, Source::Given, "--verify-ms")));
    let transfer = modeled_parts(p, parts);
    let compute = p.compute_us.unwrap_or(0.0);
    let rest = v - p.transfer_us - compute;
    let how =
        "the verify less the modeled transfer and compute; not split without --observed or traces";
    parts.push(part(
        "waiting + idle",
        1,
        fig(rest.max(0.0), Source::Inferred, how),
    ));
    if rest < 0.0 {
        notes.push(format!(
            "the model's transfer and compute ({}) exceed the given verify ({}): the machine is faster than the profile ({})",
            ms(p.transfer_us + compute),
            ms(v),
            p.profile
        ));
    }
    let graph = modeled_graph(p);
    Base {
        verify: Some(fig(v, Source::Given, "--verify-ms")),
        transfer,
        waiting: None,
        graph: Some(fig(graph.us.min(v), Source::Modeled, graph.how)),
        already_graph: false,
        graph_modeled_whole: true,
    }
}

/// No verify given, only the decode step: the model's verify of the workload from a CUDA
/// graph, priced whole; the rows hold it to the given decode (the per-forward time the model
/// does not see added, never below the floor), so it is a prediction, not a split.
pub(crate) fn predicted(p: &Pricing, parts: &mut Vec<Part>) -> Base {
    let graph = modeled_graph(p);
    let how = format!("not given: the model's verify from a CUDA graph ({}); predicted below, held to the given decode", graph.how);
    parts.push(part("verify step", 0, fig(graph.us, Source::Modeled, how)));
    Base {
        verify: None,
        transfer: modeled_parts(p, parts),
        waiting: None,
        graph: Some(graph),
        already_graph: false,
        graph_modeled_whole: true,
    }
}

/// The model's verify from a CUDA graph: transfer + compute + one graph node gap per
/// collective.
fn modeled_graph(p: &Pricing) -> Figure {
    let n = p.per_collective_us.len() as f64;
    let us = p.transfer_us + p.compute_us.unwrap_or(0.0) + n * p.launch_graph_us;
    let how = format!(
        "modeled transfer + compute + {:.1} us of graph node gap per collective",
        p.launch_graph_us
    );
    fig(us, Source::Modeled, how)
}

/// The model's transfer and compute, as the lines under the verify; the transfer returned.
fn modeled_parts(p: &Pricing, parts: &mut Vec<Part>) -> Figure {
    let n = p.per_collective_us.len() as f64;
    let how = format!(
        "the schedule's {n} collectives, {} ({})",
        p.choice, p.profile
    );
    let transfer = fig(p.transfer_us, Source::Modeled, how);
    parts.push(part("transfer", 1, transfer.clone()));
    if let Some(c) = p.compute_us {
        let how = "the weight shards streamed at the profile's HBM bandwidth";
        parts.push(part("compute", 1, fig(c, Source::Modeled, how)));
    }
    transfer
}
