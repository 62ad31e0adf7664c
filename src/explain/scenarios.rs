//! What a CUDA graph, the best NCCL setting and the one-shot all-reduce would make of the
//! verify, each as verify time and tokens/s through the break-even, and the few sentences that
//! say it.

use super::calibration::Calibration;
use super::figures::{fig, Base, Cycle, Figure, Row, Scenario, StepParts};
use super::fit::JitterFit;
use super::gather::SweepBest;
use super::pricing::Pricing;
use crate::evidence::{LaunchMode, ServerLog, Source};
use crate::speculative::bound::{hold, Floor};
use crate::trace::analysis::ms;

/// What every row is held to and priced against: the cycle, and the model held to the
/// user's decode.
pub(crate) struct Frame<'a> {
    pub(crate) cycle: &'a Cycle,
    pub(crate) calib: Option<&'a Calibration>,
}

/// The uncertain parts of a row's verify, us: `modeled`, the model's own price (the row's
/// range takes the model's stated error on it); `calibrated`, what the engine terms add to the
/// plain decode step (the range takes their held-out spread).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Doubt {
    pub(crate) modeled: f64,
    pub(crate) calibrated: f64,
}

/// How far below and above `us` the truth may lie when `us` was predicted by the engine terms
/// (their held-out spread of what a step adds: [`crate::speculative::cycle::range_us`]).
fn calibrated_reach(us: f64, f: &Frame) -> [f64; 2] {
    let Some(cal) = f.calib else {
        return [0.0, 0.0];
    };
    // A change that slows the step (a one-shot slower than NCCL) is as uncertain as one that
    // speeds it: the reach is of the amount, whatever its sign.
    let us = us.abs();
    let r = crate::speculative::cycle::range_us(0.0, us, cal.engine.increment_spread);
    [us - r[0], r[1] - us]
}

/// A row: `verify` (its own figure, `doubt` saying which of it is uncertain) held to the floor
/// less `decode_cut_us` (what the row's change saves on the decode too), with its step (the
/// cycle's drafts and overhead around it), its range and its tokens/s against plain decoding
/// with the same change.
fn row(kind: Row, verify: Figure, doubt: Doubt, decode_cut_us: f64, f: &Frame) -> Scenario {
    let c = f.cycle;
    let floor_us = f.calib.map(|cal| cal.floor_us() - decode_cut_us);
    let candidate_us = verify.us;
    let (held_us, at_floor) = hold_us(verify.us, floor_us);
    let verify = if at_floor {
        let cal = f.calib.expect("a floor comes from the calibration");
        Figure {
            us: held_us,
            source: if cal.given_decode_us.is_some() {
                Source::Derived
            } else {
                Source::Modeled
            },
            how: format!(
                "at the bound: {}{}; {} gave {}, below it",
                cal.floor_ms.how,
                if decode_cut_us > 0.0 {
                    format!(
                        ", less the {} the same change saves on the decode (modeled)",
                        ms(decode_cut_us)
                    )
                } else {
                    String::new()
                },
                verify.how,
                ms(verify.us)
            ),
        }
    } else {
        verify
    };
    let err = f
        .calib
        .and_then(|cal| cal.error.as_ref())
        .map_or(0.0, |e| e.rel);
    let own = verify.us;
    let [cal_lo, cal_hi] = calibrated_reach(doubt.calibrated, f);
    // A figure that fell below the floor was an inference or a price that conflicts with a
    // bound: by as much as it missed, it is not to be trusted above the floor either.
    let conflict = if at_floor { own - candidate_us } else { 0.0 };
    // A modeled change that slows the verify is as uncertain as one that speeds it.
    let modeled = doubt.modeled.abs();
    let uncertain = (err > 0.0 && modeled > 0.0) || doubt.calibrated != 0.0 || conflict > 0.0;
    let range_us = uncertain.then(|| {
        let lo = (own - err * modeled - cal_lo)
            .max(floor_us.unwrap_or(0.0))
            .max(0.0);
        [lo, (own + err * modeled + cal_hi + conflict).max(lo)]
    });
    let step = step_parts(own, range_us, f);
    let plain_ms = c.plain_decode_ms(decode_cut_us);
    let tps = c.tokens_per_s_of_step(step.step_us);
    Scenario {
        row: kind,
        vs_baseline: tps.zip(plain_ms).map(|(a, pm)| {
            a / (c.concurrency as f64 * crate::speculative::baseline_tokens_per_s(pm))
        }),
        vs_measured_plain: (decode_cut_us != 0.0)
            .then(|| tps.zip(c.baseline_tokens_per_s).map(|(a, b)| a / b))
            .flatten(),
        tokens_per_s: tps,
        breakeven_tau: plain_ms.map(|pm| c.breakeven_tau(own, pm)),
        at_floor,
        tokens_per_s_range: step.range_us.and_then(|[lo, hi]| {
            let (a, b) = (c.tokens_per_s_of_step(hi)?, c.tokens_per_s_of_step(lo)?);
            Some([a, b])
        }),
        range_us,
        plain_decode_ms: plain_ms,
        verify,
        step,
    }
}

/// The step around a verify of `verify_us` (its range `verify_range`): the cycle's drafts and
/// overhead, whose calibrated parts widen the range by their held-out spread.
fn step_parts(verify_us: f64, verify_range: Option<[f64; 2]>, f: &Frame) -> StepParts {
    let c = f.cycle;
    let drafts_us = c.draft_forwards as f64 * c.draft_ms.value * 1000.0;
    let overhead_us = c.overhead_ms.value * 1000.0;
    let step_us = c.step_us(verify_us);
    let calibrated: f64 = [(drafts_us, &c.draft_ms), (overhead_us, &c.overhead_ms)]
        .iter()
        .filter(|(_, l)| l.origin.is_modeled())
        .map(|(us, _)| *us)
        .sum();
    let [lo, hi] = calibrated_reach(calibrated, f);
    let range_us = match verify_range {
        Some([vl, vh]) => Some([
            vl + drafts_us + overhead_us - lo,
            vh + drafts_us + overhead_us + hi,
        ]),
        None if calibrated > 0.0 => Some([step_us - lo, step_us + hi]),
        None => None,
    };
    StepParts {
        verify_us,
        drafts_us,
        overhead_us,
        step_us,
        range_us,
    }
}

/// `us` held to `floor_us` ([`hold`], whose arithmetic is the break-even's ms), and whether it
/// was below it.
fn hold_us(us: f64, floor_us: Option<f64>) -> (f64, bool) {
    let floor = floor_us.map(|u| Floor {
        ms: u / 1000.0,
        how: String::new(),
    });
    let held = hold(us / 1000.0, floor.as_ref());
    if held.at_floor {
        (held.ms * 1000.0, true)
    } else {
        (us, false)
    }
}

/// The verify as the server log's throughput implies it: one request at `tau` tokens per cycle
/// and X tok/s takes tau / X per cycle, of which k draft steps and the overhead are not the
/// verify. The tokens/s is the log's (measured); the verify time is derived from it.
pub(crate) fn logged_row(l: &ServerLog, f: &Frame, notes: &mut Vec<String>) -> Option<Scenario> {
    let c = f.cycle;
    let b = l.batch1.as_ref()?;
    let (tps, which) = (b.tokens_per_s, &b.which);
    let Some(tau) = &c.accept_length else {
        notes.push(format!(
            "{}: {tps:.1} tok/s with one running request, but no accept length to turn it into a verify time",
            l.file
        ));
        return None;
    };
    let cycle_ms = 1000.0 * tau.value / tps;
    let verify_ms = cycle_ms - c.draft_forwards as f64 * c.draft_ms.value - c.overhead_ms.value;
    if verify_ms <= 0.0 {
        notes.push(format!(
            "{}: {tps:.1} tok/s at accept length {:.2} leaves no time for the verify after {} draft forwards of {:.3} ms: check --draft-ms",
            l.file, tau.value, c.draft_forwards, c.draft_ms.value
        ));
        return None;
    }
    let mut s = row(
        Row::Logged,
        fig(
            verify_ms * 1000.0,
            Source::Derived,
            format!(
                "{}: {tps:.1} tok/s measured ({which}), at accept length {:.2}: cycle {cycle_ms:.2} ms less the drafts and overhead",
                l.file, tau.value
            ),
        ),
        Doubt::default(),
        0.0,
        f,
    );
    // The step and its tokens/s are measured whatever the split: where the drafts and overhead
    // leave the verify under the floor, it is the split that is wrong, not the log.
    if s.at_floor {
        notes.push(format!(
            "{}: the measured cycle of {cycle_ms:.2} ms less {} draft forwards of {:.3} ms and {:.3} ms of overhead leaves {verify_ms:.2} ms for the verify, under the floor: the drafts or overhead ({}) are dearer than on the logged machine; the row keeps the log's tokens/s",
            l.file,
            c.draft_forwards,
            c.draft_ms.value,
            c.overhead_ms.value,
            c.draft_ms.origin.kind()
        ));
    }
    s.step.step_us = cycle_ms * 1000.0;
    s.step.range_us = None;
    s.tokens_per_s = Some(tps);
    s.tokens_per_s_range = None;
    s.vs_baseline = c.baseline_tokens_per_s.map(|b| tps / b);
    Some(s)
}

pub(crate) fn scenarios(
    b: &Base,
    p: &Pricing,
    sweep: Option<&SweepBest>,
    f: &Frame,
    notes: &mut Vec<String>,
) -> Vec<Scenario> {
    if b.verify.is_none() && b.graph.is_none() {
        return vec![];
    }
    let mut out = vec![];
    // No verify given (only the decode step): the graph rows alone, the first a prediction.
    if let Some(v) = &b.verify {
        let launch = if b.already_graph {
            LaunchMode::Graph
        } else {
            LaunchMode::Eager
        };
        out.push(row(Row::AsRan(launch), v.clone(), Doubt::default(), 0.0, f));
    }
    let g = Graphed::of(b, f);
    if let Some(gr) = &g.figure {
        if !b.already_graph {
            let kind = if b.verify.is_some() {
                Row::Graph
            } else {
                Row::Predicted
            };
            out.push(row(kind, gr.clone(), g.doubt, 0.0, f));
        }
    }
    nccl_rows(b, p, sweep, f, &g, notes, &mut out);
    oneshot_rows(b, p, f, &g, notes, &mut out);
    out
}

/// The verify from a CUDA graph as the rows take it, and which of it is uncertain.
struct Graphed {
    figure: Option<Figure>,
    doubt: Doubt,
    /// What one us of the model's forward is in the graph figure: phi x D / M_decode where the
    /// figure is the model's forward scaled as the given decode scales it (a change's saving on
    /// the model's transfer is scaled the same way), 1 where the figure is in this machine's time.
    scale: f64,
}

impl Graphed {
    fn of(b: &Base, f: &Frame) -> Graphed {
        // A graph priced whole by the model is taken as this machine runs it: the engine's own
        // work and the model's forward scaled as the given decode scales the model's (the
        // engine terms); one derived from the given verify already holds both.
        let scaled = f
            .calib
            .filter(|c| b.graph_modeled_whole && c.step.is_some());
        let scale = scaled.map_or(1.0, |c| c.model_to_given(1.0));
        let figure = b.graph.clone().map(|mut gr| {
            if let Some(cal) = scaled {
                let model_us = gr.us;
                gr.us = cal.whole(model_us);
                gr.how.push_str(&format!(
                    ", {} as the given decode scales the model's {} (the engine's own work {} + the forward scaled, engine terms: {})",
                    ms(gr.us),
                    ms(cal.model_decode_us),
                    ms(cal.engine_us().unwrap_or(0.0)),
                    cal.engine.source
                ));
            }
            gr
        });
        // The uncertain part of the graph figure: what the engine terms add to the given
        // decode when priced whole from a given decode, all of it (the model's) without one,
        // the transfer when the waiting it removes was inferred against the modeled transfer,
        // nothing when measured.
        let given = f
            .calib
            .filter(|c| c.step.is_some())
            .and_then(|c| c.given_decode_us);
        let doubt = match (&figure, &b.waiting, given) {
            (Some(gr), _, Some(d)) if b.graph_modeled_whole => Doubt {
                modeled: 0.0,
                calibrated: (gr.us - d).max(0.0),
            },
            (Some(gr), _, None) if b.graph_modeled_whole => Doubt {
                modeled: gr.us,
                calibrated: 0.0,
            },
            (_, Some(w), _) if w.source == Source::Measured => Doubt::default(),
            _ => Doubt {
                modeled: b.transfer.us,
                calibrated: 0.0,
            },
        };
        Graphed {
            figure,
            doubt,
            scale,
        }
    }
}

/// The best NCCL setting's rows: the sweep's when given (measured or modeled as it says),
/// else the model's.
fn nccl_rows(
    b: &Base,
    p: &Pricing,
    sweep: Option<&SweepBest>,
    f: &Frame,
    g: &Graphed,
    notes: &mut Vec<String>,
    out: &mut Vec<Scenario>,
) {
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
    let cut = b.transfer.us * (1.0 - ratio);
    let dcut = f.calib.map_or(0.0, |cal| cal.decode_cut_us(ratio));
    if ratio >= 0.999 {
        notes.push(format!(
            "no NCCL setting row: {setting} is already the best ({from}); NCCL settings leave the verify as it is"
        ));
        return;
    }
    let how = |base: &str| format!("{base} with the transfer x {ratio:.3}: {setting}, {from}");
    if let Some(v) = b.verify.as_ref().filter(|_| !b.already_graph) {
        let verify = fig(v.us - cut, src, how("as it ran"));
        let doubt = Doubt {
            modeled: cut,
            calibrated: 0.0,
        };
        out.push(row(Row::Nccl, verify, doubt, dcut, f));
    }
    if let Some(gr) = &g.figure {
        let kind = if b.already_graph {
            Row::NcclOnGraph
        } else {
            Row::NcclGraph
        };
        let cut = cut * g.scale;
        let verify = fig(gr.us - cut, modeled_from(src), how("the graph row"));
        let doubt = Doubt {
            modeled: g.doubt.modeled + cut,
            ..g.doubt
        };
        out.push(row(kind, verify, doubt, dcut, f));
    }
}

/// The one-shot all-reduce's rows, or why there are none.
fn oneshot_rows(
    b: &Base,
    p: &Pricing,
    f: &Frame,
    g: &Graphed,
    notes: &mut Vec<String>,
    out: &mut Vec<Scenario>,
) {
    let one = match &p.oneshot_transfer_us {
        Ok(one) => one,
        Err(why) => return notes.push(format!("no one-shot row: {why}")),
    };
    let r1 = one / p.transfer_us;
    let cut1 = b.transfer.us * (1.0 - r1);
    let dcut1 = f.calib.map_or(0.0, |cal| cal.decode_oneshot_cut_us());
    let how = |base: &str| {
        let held = p
            .oneshot_held
            .as_ref()
            .map_or(String::new(), |h| format!("; {h}"));
        format!(
            "{base} with the transfer x {r1:.3}: the all-reduces by the one-shot P2P kernel, the all-gather on NCCL (modeled, {}{held})",
            p.profile
        )
    };
    if let Some(v) = b.verify.as_ref().filter(|_| !b.already_graph) {
        let verify = fig(v.us - cut1, Source::Modeled, how("as it ran"));
        let doubt = Doubt {
            modeled: cut1,
            calibrated: 0.0,
        };
        out.push(row(Row::OneShot, verify, doubt, dcut1, f));
    }
    if let Some(gr) = &g.figure {
        let cut1 = cut1 * g.scale;
        let verify = fig(gr.us - cut1, Source::Modeled, how("the graph row"));
        let doubt = Doubt {
            modeled: g.doubt.modeled + cut1,
            ..g.doubt
        };
        out.push(row(Row::OneShotGraph, verify, doubt, dcut1, f));
    }
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
    (engines_gate, custom_ar): (bool, Option<&str>),
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
    let row = |kind: Row| sc.iter().find(|s| s.row == kind);
    let tps = |s: &Scenario| {
        match (s.tokens_per_s, s.vs_baseline) {
        (Some(t), Some(x)) => match (s.vs_measured_plain, s.plain_decode_ms) {
            (Some(m), Some(pm)) => format!(
                ", {t:.1} tok/s ({x:.2}x decoding without speculation with the same change, its decode {pm:.2} ms; {m:.2}x the plain decoding measured)"
            ),
            _ => format!(", {t:.1} tok/s ({x:.2}x decoding without speculation)"),
        },
        _ => s
            .breakeven_tau
            .map(|t| format!(", breaking even at accept length {t:.2}"))
            .unwrap_or_default(),
    }
    };
    if let Some(p) = row(Row::Predicted) {
        let range = |r: Option<[f64; 2]>, unit: &str, f: &dyn Fn(f64) -> String| {
            r.map(|[lo, hi]| format!(", range {}-{}{unit}", f(lo), f(hi)))
                .unwrap_or_default()
        };
        out.push(format!(
            "No verify given: the model's verify held to the given decode step predicts {} ({}{}){}{}.",
            ms(p.verify.us),
            p.verify.source.label(),
            range(p.range_us, " ms", &|u| format!("{:.1}", u / 1000.0)),
            tps(p),
            range(p.tokens_per_s_range, " tok/s", &|t| format!("{t:.1}")),
        ));
        if c.draft_ms.value == 0.0 && c.accept_length.is_some() {
            out.push("Drafting is taken as free (no --draft-ms, and no cycle to price it from), so the tokens/s is an upper bound: the engine's step also runs k draft forwards.".into());
        } else {
            out.push(format!(
                "The step it divides by: verify {} + {} draft forward{} of {} ({}) + overhead {} ({}) = {}{}.",
                ms(p.step.verify_us),
                c.draft_forwards,
                if c.draft_forwards == 1 { "" } else { "s" },
                ms(c.draft_ms.value * 1000.0),
                c.draft_ms.origin.kind(),
                ms(c.overhead_ms.value * 1000.0),
                c.overhead_ms.origin.kind(),
                ms(p.step.step_us),
                range(p.step.range_us, " ms", &|u| format!("{:.1}", u / 1000.0)),
            ));
        }
    } else if let (Some(now), Some(g)) = (sc.first(), row(Row::Graph)) {
        out.push(format!(
            "A CUDA graph removes the waiting: verify {} -> {} ({}{}){}{}.",
            ms(now.verify.us),
            ms(g.verify.us),
            g.verify.source.label(),
            if g.at_floor {
                ", at the floor: never faster than this machine's decode step plus what the extra tokens add"
            } else {
                ""
            },
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
    let best = match row(Row::Predicted) {
        Some(_) => row(Row::NcclGraph),
        None => row(Row::Nccl).or(row(Row::NcclOnGraph)),
    };
    match (row(Row::Predicted).or(sc.first()), best) {
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
    if let Some(o) = row(Row::OneShotGraph) {
        out.push(format!(
            "The one-shot all-reduce with a CUDA graph: verify {} ({}{}){}{}",
            ms(o.verify.us),
            o.verify.source.label(),
            if o.at_floor { ", at the floor" } else { "" },
            tps(o),
            match (custom_ar, engines_gate) {
                (Some(said), _) => format!("; {said}."),
                (None, true) => "; SGLang and vLLM keep their custom all-reduce off on more than two GPUs without full NVLink, so this row needs an engine change.".into(),
                (None, false) => ".".into(),
            }
        ));
    }
    out
}
