//! What a CUDA graph, the best NCCL setting and the one-shot all-reduce would make of the
//! verify, each as verify time and tokens/s through the break-even, and the few sentences that
//! say it.

use super::figures::{fig, Base, Cycle, Figure, Scenario};
use super::fit::JitterFit;
use super::gather::SweepBest;
use super::pricing::Pricing;
use crate::evidence::{ServerLog, Source};
use crate::trace::analysis::ms;

fn with_cycle(name: &str, verify: Figure, c: &Cycle) -> Scenario {
    let v_ms = verify.us / 1000.0;
    let (k, d, o) = (c.draft_steps, c.draft_ms.value, c.overhead_ms.value);
    let tps = match (&c.accept_length, c.baseline_tokens_per_s) {
        (Some(t), Some(_)) => Some(crate::speculative::tokens_per_s(t.value, v_ms, d, k, o)),
        _ => None,
    };
    let tau = c
        .decode_ms
        .as_ref()
        .map(|dm| crate::speculative::breakeven_accept_length(v_ms, d, k, o, dm.value));
    Scenario {
        name: name.into(),
        vs_baseline: tps.zip(c.baseline_tokens_per_s).map(|(a, b)| a / b),
        tokens_per_s: tps,
        breakeven_tau: tau,
        verify,
    }
}

/// The verify as the server log's throughput implies it: one request at `tau` tokens per cycle
/// and X tok/s takes tau / X per cycle, of which k draft steps and the overhead are not the
/// verify. The tokens/s is the log's (measured); the verify time is derived from it.
pub(crate) fn logged_row(l: &ServerLog, c: &Cycle, notes: &mut Vec<String>) -> Option<Scenario> {
    let (tps, lines) = l.batch1_tokens_per_s?;
    let Some(tau) = &c.accept_length else {
        notes.push(format!(
            "{}: {tps:.1} tok/s with one running request, but no accept length to turn it into a verify time",
            l.file
        ));
        return None;
    };
    let cycle_ms = 1000.0 * tau.value / tps;
    let verify_ms = cycle_ms - c.draft_steps as f64 * c.draft_ms.value - c.overhead_ms.value;
    if verify_ms <= 0.0 {
        notes.push(format!(
            "{}: {tps:.1} tok/s at accept length {:.2} leaves no time for the verify after {} draft steps of {} ms: check --draft-ms",
            l.file, tau.value, c.draft_steps, c.draft_ms.value
        ));
        return None;
    }
    let mut s = with_cycle(
        "as the server log measured it",
        fig(
            verify_ms * 1000.0,
            Source::Derived,
            format!(
                "{}: {tps:.1} tok/s measured (mean of {lines} lines with one running request), at accept length {:.2}: cycle {cycle_ms:.2} ms less the drafts and overhead",
                l.file, tau.value
            ),
        ),
        c,
    );
    s.tokens_per_s = Some(tps);
    s.vs_baseline = c.baseline_tokens_per_s.map(|b| tps / b);
    Some(s)
}

pub(crate) fn scenarios(
    b: &Base,
    p: &Pricing,
    sweep: Option<&SweepBest>,
    c: &Cycle,
    notes: &mut Vec<String>,
) -> Vec<Scenario> {
    let Some(v) = &b.verify else {
        return vec![];
    };
    let x = b.transfer.us;
    let mut out = vec![with_cycle(
        if b.already_graph {
            "as it ran (CUDA graph)"
        } else {
            "as it ran (eager)"
        },
        v.clone(),
        c,
    )];
    let graph = b.graph.clone();
    if let Some(gr) = &graph {
        if !b.already_graph {
            out.push(with_cycle("with a CUDA graph", gr.clone(), c));
        }
    }
    // The best NCCL setting: the sweep's when given (measured or modeled as it says), else
    // the model's.
    let (ratio, setting, src, from) = match sweep {
        Some(s) => (
            s.ratio,
            s.setting.clone(),
            if s.source == "measured" {
                Source::Derived
            } else {
                Source::Modeled
            },
            format!(
                "{} ({}, {} {} runs)",
                s.file,
                s.source,
                if s.graph { "graph" } else { "eager" },
                s.mode
            ),
        ),
        None => (
            p.best_ratio(),
            p.best_setting.clone(),
            Source::Modeled,
            format!("the model's best ({})", p.profile),
        ),
    };
    let cut = x * (1.0 - ratio);
    if ratio >= 0.999 {
        notes.push(format!(
            "no NCCL setting row: {setting} is already the best ({from}); NCCL settings leave the verify as it is"
        ));
    }
    let nccl_how = |base: &str| format!("{base} with the transfer x {ratio:.3}: {setting}, {from}");
    if !b.already_graph && ratio < 0.999 {
        out.push(with_cycle(
            "best NCCL setting",
            fig(v.us - cut, src, nccl_how("as it ran")),
            c,
        ));
    }
    if let Some(gr) = graph.as_ref().filter(|_| ratio < 0.999) {
        out.push(with_cycle(
            if b.already_graph {
                "best NCCL setting (graph)"
            } else {
                "best NCCL setting + CUDA graph"
            },
            fig(gr.us - cut, modeled_from(src), nccl_how("the graph row")),
            c,
        ));
    }
    match &p.oneshot_transfer_us {
        Ok(one) => {
            let r1 = one / p.transfer_us;
            let cut1 = x * (1.0 - r1);
            let how = |base: &str| {
                format!(
                    "{base} with the transfer x {r1:.3}: the all-reduces by the one-shot P2P kernel, the all-gather on NCCL (modeled, {})",
                    p.profile
                )
            };
            if !b.already_graph {
                out.push(with_cycle(
                    "one-shot all-reduce",
                    fig(v.us - cut1, Source::Modeled, how("as it ran")),
                    c,
                ));
            }
            if let Some(gr) = &graph {
                out.push(with_cycle(
                    "one-shot all-reduce + CUDA graph",
                    fig(gr.us - cut1, Source::Modeled, how("the graph row")),
                    c,
                ));
            }
        }
        Err(why) => notes.push(format!("no one-shot row: {why}")),
    }
    out
}

/// A figure computed by the model from one of `source` is modeled (measured stays derived).
fn modeled_from(source: Source) -> Source {
    match source {
        Source::Measured | Source::Given | Source::Derived => Source::Derived,
        _ => Source::Modeled,
    }
}

fn pct(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        100.0 * a / b
    } else {
        0.0
    }
}

pub(crate) fn summary(
    b: &Base,
    sc: &[Scenario],
    c: &Cycle,
    f: Option<&JitterFit>,
    traced: bool,
    engines_gate: bool,
) -> Vec<String> {
    let mut out = vec![];
    if let Some(w) = &b.waiting {
        let in_coll = b.transfer.us + w.us;
        out.push(format!(
            "Of the {} inside the collectives, {} ({:.0}%) is waiting for the last rank ({}) and {} transfer ({}): NCCL settings can change at most the transfer.",
            ms(in_coll),
            ms(w.us),
            pct(w.us, in_coll),
            if traced && w.source == Source::Measured {
                "measured".to_string()
            } else {
                "inferred, not measured".to_string()
            },
            ms(b.transfer.us),
            b.transfer.source.label()
        ));
    }
    if let Some(f) = f {
        if f.reached {
            out.push(format!(
                "Waiting inferred, not measured: host gaps of {:.0} +- {:.0} us before each collective (an eager engine's CPU time between launches, different on every rank) reproduce it in the cost model.",
                f.mean_us, f.jitter_us
            ));
        } else {
            out.push(format!(
                "Waiting inferred, not measured, and larger than host-gap jitter up to {:.0} us explains in the model: look for a late rank (a trace of every rank shows it).",
                f.jitter_us
            ));
        }
    }
    let row = |name: &str| sc.iter().find(|s| s.name == name);
    let tps = |s: &Scenario| match (s.tokens_per_s, s.vs_baseline) {
        (Some(t), Some(x)) => format!(", {t:.1} tok/s ({x:.2}x decoding without speculation)"),
        _ => s
            .breakeven_tau
            .map(|t| format!(", breaking even at accept length {t:.2}"))
            .unwrap_or_default(),
    };
    if let (Some(now), Some(g)) = (sc.first(), row("with a CUDA graph")) {
        out.push(format!(
            "A CUDA graph removes the waiting: verify {} -> {} ({}){}{}.",
            ms(now.verify.us),
            ms(g.verify.us),
            g.verify.source.label(),
            tps(g),
            match (now.tokens_per_s, c.baseline_tokens_per_s) {
                (Some(t), Some(bl)) => format!(
                    ", against {t:.1} tok/s as it ran and {bl:.1} tok/s without speculation"
                ),
                _ => String::new(),
            }
        ));
    } else if b.already_graph {
        out.push("The verify already ran from a CUDA graph: its collectives' time is transfer and skew the graph cannot remove.".into());
    }
    match (
        sc.first(),
        row("best NCCL setting").or(row("best NCCL setting (graph)")),
    ) {
        (Some(now), Some(n)) => out.push(format!(
            "The best NCCL setting saves {} per verify ({}).",
            ms((now.verify.us - n.verify.us).max(0.0)),
            n.verify.source.label()
        )),
        (Some(_), None) => out.push(
            "NCCL's default choice is already the best setting the evidence knows: NCCL settings change nothing here (a sweep of the real machine, --sweep, may know better).".into(),
        ),
        _ => {}
    }
    if let Some(o) = row("one-shot all-reduce + CUDA graph") {
        out.push(format!(
            "The one-shot all-reduce with a CUDA graph: verify {} (modeled){}{}",
            ms(o.verify.us),
            tps(o),
            if engines_gate {
                "; SGLang and vLLM keep their custom all-reduce off on more than two GPUs without full NVLink, so this row needs an engine change."
            } else {
                "."
            }
        ));
    }
    out
}
