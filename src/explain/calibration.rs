//! The model held to the user's own machine: the decode step the user measured against the
//! model's price of the same decode (the batch's C tokens, the same engine, from a CUDA graph),
//! the speculative cycle's draft forwards, and the engine's terms calibrated on published runs
//! ([`crate::speculative::cycle`]) that turn the model's forwards into this machine's step: the
//! verify, the drafts and their fixed costs, the drafted tokens' bookkeeping. Also the floor
//! every row is held to ([`crate::speculative::bound`]) and the error the model states for its
//! prices (the ranges of the rows).

use serde::Serialize;

use super::pricing::{self, Pricing};
use crate::costmodel::{ModelSettings, StatedError};
use crate::model::cycle::Cycle as CycleShape;
use crate::model::Phase;
use crate::request::{CycleFlags, Workload};
use crate::speculative::bound::{fmt_ms, Floor};
use crate::speculative::cycle::{self, Calibrated, Forwards, Step, PUBLISHED};

/// What the model prices for the decode, the drafts and the verify of the workload, beside the
/// user's decode, and the step the engine terms make of them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Calibration {
    /// The model's decode step (the batch's tokens, from a CUDA graph), us.
    pub(crate) model_decode_us: f64,
    /// The model's verify (k + 1 tokens per request, from a CUDA graph), us.
    pub(crate) model_verify_us: f64,
    /// The model's draft forwards of one cycle together (from CUDA graphs), us, and how many
    /// there are (`None`: the cycle is not known, e.g. a schedule file).
    pub(crate) model_drafts_us: Option<f64>,
    pub(crate) draft_forwards: u64,
    /// The drafter and where its shape comes from.
    pub(crate) drafter: Option<String>,
    /// The decode step the user gave (or a server log or trace measured), us.
    pub(crate) given_decode_us: Option<f64>,
    /// Whether the given decode is taken as run from a CUDA graph (SGLang's and vLLM's
    /// default, unless the user said it ran eagerly).
    pub(crate) decode_graphed: bool,
    /// The engine's terms and where they come from.
    pub(crate) engine: Calibrated,
    /// The speculative step the terms make of the model's forwards and the given (graphed)
    /// decode, part by part.
    pub(crate) step: Option<Step>,
    /// The least a graphed verify can take here.
    pub(crate) floor_ms: Floor,
    /// The decode's transfer under NCCL's default choice, and with the one-shot all-reduce
    /// (what the same changes would save on the decode too), us.
    pub(crate) decode_transfer_us: f64,
    pub(crate) decode_oneshot_transfer_us: Option<f64>,
    /// The model's stated error on its prices (`None`: not known for this profile).
    pub(crate) error: Option<StatedError>,
}

impl Calibration {
    /// The floor, us.
    pub(crate) fn floor_us(&self) -> f64 {
        self.floor_ms.ms * 1000.0
    }

    /// The decode's own saving from a change that scales the verify's transfer by `ratio`.
    pub(crate) fn decode_cut_us(&self, ratio: f64) -> f64 {
        self.model_to_given((self.decode_transfer_us * (1.0 - ratio)).max(0.0))
    }

    /// The decode's own saving from the one-shot all-reduce.
    pub(crate) fn decode_oneshot_cut_us(&self) -> f64 {
        let cut = self
            .decode_oneshot_transfer_us
            .map_or(0.0, |o| (self.decode_transfer_us - o).max(0.0));
        self.model_to_given(cut)
    }

    /// A saving of `model_cut_us` on the model's forward (its decode, or a verify priced whole)
    /// as this machine takes it, scaled as [`Calibration::whole`] scales the model's forward:
    /// `whole(m) - whole(m - cut)`. Always under the given decode (the scaled share is below 1), where the model's
    /// saving, taken whole from a given decode faster than the model's, could exceed it.
    pub(crate) fn model_to_given(&self, model_cut_us: f64) -> f64 {
        match self.given_decode_us.filter(|_| self.decode_graphed) {
            Some(d) => self.engine.terms.scaling * d * model_cut_us / self.model_decode_us,
            None => model_cut_us,
        }
    }

    /// The engine's share of a step that the model does not scale (the given decode's
    /// (1 - phi)), us.
    pub(crate) fn engine_us(&self) -> Option<f64> {
        self.step.map(|s| s.engine_us)
    }

    /// A forward the model prices whole at `model_us` as this machine runs it: the engine's
    /// own work plus the model's forward scaled as the given decode scales it; the model's
    /// price where no decode was given.
    pub(crate) fn whole(&self, model_us: f64) -> f64 {
        match self.given_decode_us.filter(|_| self.decode_graphed) {
            Some(d) => {
                let t = &self.engine.terms;
                (1.0 - t.scaling) * d + t.scaling * d * model_us / self.model_decode_us
            }
            None => model_us,
        }
    }

    /// The lines the text output prints.
    pub(crate) fn lines(&self, profile: &str) -> Vec<String> {
        let mut out = vec![];
        match (self.given_decode_us, self.step) {
            (Some(d), Some(st)) => {
                let t = &self.engine.terms;
                out.push(format!(
                    "decode step: given {} ({}); the model's {} (graph, {profile})",
                    fmt_ms(d / 1000.0),
                    if self.decode_graphed {
                        "taken as run from a CUDA graph, SGLang's and vLLM's default; --decode-eager if it ran eagerly"
                    } else {
                        "run eagerly (--decode-eager)"
                    },
                    fmt_ms(self.model_decode_us / 1000.0)
                ));
                out.push(format!(
                    "engine terms (calibrated on {}; held out {:+.0}% to {:+.0}% of the step): {:.0}% of the decode step scales with the modeled forward ({} of it is the engine's own work per step); each draft forward costs {:.3} x the decode step more ({}); {:.0} us per request and drafted token",
                    self.engine.source,
                    self.engine.spread[0] * 100.0,
                    self.engine.spread[1] * 100.0,
                    t.scaling * 100.0,
                    fmt_ms(st.engine_us / 1000.0),
                    t.draft_forward,
                    fmt_ms(t.draft_forward * d / 1000.0),
                    t.per_draft_token_us
                ));
                if let Some(m) = self.model_drafts_us {
                    out.push(format!(
                        "cycle (modeled forwards, {}): decode {}, {} draft forward{} {}, verify {}; priced: verify {} + drafts {} + their fixed cost {} + bookkeeping {} = step {}",
                        self.drafter.as_deref().unwrap_or("drafter"),
                        fmt_ms(self.model_decode_us / 1000.0),
                        self.draft_forwards,
                        if self.draft_forwards == 1 { "" } else { "s" },
                        fmt_ms(m / 1000.0),
                        fmt_ms(self.model_verify_us / 1000.0),
                        fmt_ms((st.engine_us + st.verify_us) / 1000.0),
                        fmt_ms(st.drafts_us / 1000.0),
                        fmt_ms(st.draft_overhead_us / 1000.0),
                        fmt_ms(st.bookkeeping_us / 1000.0),
                        fmt_ms(st.total_us() / 1000.0),
                    ));
                }
            }
            (Some(d), None) => out.push(format!(
                "decode step: given {} (run eagerly, --decode-eager); the model's {} (graph, {profile}): the engine terms take a graphed decode, so rows the model prices whole are its own",
                fmt_ms(d / 1000.0),
                fmt_ms(self.model_decode_us / 1000.0)
            )),
            _ => out.push(format!(
                "decode step: not given; the model's {} (graph, {profile}); give --decode-ms to hold the answer to the machine's own decode",
                fmt_ms(self.model_decode_us / 1000.0)
            )),
        }
        out.push(format!(
            "floor: {:.2} ms: {}",
            self.floor_ms.ms, self.floor_ms.how
        ));
        out.push(match &self.error {
            Some(e) => format!(
                "error: +-{:.0}% on the modeled part of every row ({}): the rows' ranges",
                e.rel * 100.0,
                e.how
            ),
            None => "error: not known for this profile, so modeled rows carry no range".into(),
        });
        out
    }
}

/// The decode step the user gave: ms, whether it ran eagerly, and the context per request it
/// was measured at (`None`: the cycle's).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct GivenDecode {
    pub(crate) ms: Option<f64>,
    pub(crate) eager: bool,
    pub(crate) context: Option<u64>,
}

/// The model's decode of the same workload (the batch's tokens, phase decode), its draft
/// forwards and verify, held to the given decode through the engine terms. `None` where the
/// workload is a schedule file (its decode is not known).
pub(crate) fn calibrate(
    workload: &Workload,
    ranks: usize,
    model: &ModelSettings,
    verify: &Pricing,
    decode: &GivenDecode,
    drafter: &CycleFlags,
    k: u64,
) -> anyhow::Result<Option<Calibration>> {
    let (given_decode_ms, decode_eager) = (decode.ms, decode.eager);
    if workload.schedule_file.is_some() {
        return Ok(None);
    }
    let decode_workload = Workload {
        tokens: 1,
        phase: Phase::Decode,
        ..workload.clone()
    };
    let ds = decode_workload.schedule(ranks as u64)?;
    let dp = pricing::price(&ds, ranks, model)?;
    let (Some(md), Some(mv)) = (dp.graph_forward_us(), verify.graph_forward_us()) else {
        return Ok(None);
    };
    let with_drafter = Workload {
        cycle: drafter.clone(),
        ..workload.clone()
    };
    let shape: CycleShape = super::cycle::build(&with_drafter, ranks, k)?;
    let (f, _) = super::cycle::forwards(&shape, &with_drafter, ranks, model, decode.context)?;
    // The decode the user measured: the model's at the context it was measured at, where that
    // is not the cycle's.
    let measured_at_other_context = decode.context.is_some_and(|c| c != workload.batch.context);
    let forwards = Forwards {
        decode_us: if measured_at_other_context {
            f.decode_us
        } else {
            md
        },
        decode_at_context_us: md,
        verify_us: mv,
        ..f
    };
    let given = given_decode_ms.map(|d| d * 1000.0);
    let terms = PUBLISHED.terms;
    let step = given
        .filter(|_| !decode_eager)
        .map(|d| cycle::step(d, &forwards, &terms, workload.batch.concurrency, k));
    let floor = match (given, step) {
        (Some(d), Some(st)) => Floor::decode_plus(
            d / 1000.0,
            "given, from a CUDA graph",
            (st.engine_us + st.verify_us - d) / 1000.0 / (1.0 + PUBLISHED.increment_spread[1]),
            &format!(
                "the model's verify of {} tokens {} over its decode {}, scaled as the given decode scales the model's, at the low end of the engine terms' held-out spread",
                workload.tokens * workload.batch.concurrency,
                fmt_ms(mv / 1000.0),
                fmt_ms(md / 1000.0)
            ),
        ),
        _ => Floor::decode_plus(
            md / 1000.0,
            "the model's graphed decode",
            (mv - md) / 1000.0,
            &format!(
                "modeled: the model's verify of {} tokens {} less its decode {}",
                workload.tokens * workload.batch.concurrency,
                fmt_ms(mv / 1000.0),
                fmt_ms(md / 1000.0)
            ),
        ),
    };
    Ok(Some(Calibration {
        model_decode_us: forwards.decode_us,
        model_verify_us: mv,
        model_drafts_us: Some(forwards.drafts_us),
        draft_forwards: forwards.draft_forwards,
        drafter: Some(shape.drafter.to_string()),
        given_decode_us: given,
        decode_graphed: !decode_eager,
        engine: PUBLISHED,
        step,
        floor_ms: floor,
        decode_transfer_us: dp.transfer_us,
        decode_oneshot_transfer_us: dp.oneshot_transfer_us.as_ref().ok().copied(),
        error: model.stated_error()?,
    }))
}
