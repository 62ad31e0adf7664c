//! The model held to the user's own machine: the decode step the user measured against the
//! model's price of the same decode (T = 1, the same engine, from a CUDA graph), the per-forward
//! time the model does not see, the floor every row is held to ([`crate::speculative::bound`]),
//! and the error the model states for its prices (the ranges of the rows).

use serde::Serialize;

use super::pricing::{self, Pricing};
use crate::costmodel::{ModelSettings, StatedError};
use crate::model::Phase;
use crate::request::Workload;
use crate::speculative::bound::{fmt_ms, Floor};

/// What the model prices for the decode and the verify of the workload, beside the user's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Calibration {
    /// The model's decode step (T = 1, from a CUDA graph), us.
    pub(crate) model_decode_us: f64,
    /// The model's verify (T = k + 1, from a CUDA graph), us.
    pub(crate) model_verify_us: f64,
    /// The decode step the user gave (or a server log or trace measured), us.
    pub(crate) given_decode_us: Option<f64>,
    /// Whether the given decode is taken as run from a CUDA graph (SGLang's and vLLM's
    /// default, unless the user said it ran eagerly).
    pub(crate) decode_graphed: bool,
    /// Given decode less the model's: per forward, what the model does not see (sampling,
    /// scheduling, launches, kernels it does not model). Negative when the model is slower.
    pub(crate) not_modeled_us: Option<f64>,
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
        (self.decode_transfer_us * (1.0 - ratio)).max(0.0)
    }

    /// The decode's own saving from the one-shot all-reduce.
    pub(crate) fn decode_oneshot_cut_us(&self) -> f64 {
        self.decode_oneshot_transfer_us
            .map_or(0.0, |o| (self.decode_transfer_us - o).max(0.0))
    }

    /// The lines the text output prints.
    pub(crate) fn lines(&self, profile: &str) -> Vec<String> {
        let mut out = vec![];
        match (self.given_decode_us, self.not_modeled_us) {
            (Some(d), Some(nm)) => {
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
                if nm >= 0.0 {
                    out.push(format!(
                        "not modeled: {} per forward (sampling, scheduling, launches, kernels the model does not see): rows derived from the given verify keep it (they remove only what the model prices), rows the model prices whole get it added",
                        fmt_ms(nm / 1000.0)
                    ));
                } else {
                    out.push(format!(
                        "the model's decode is {} slower than the given one: this machine is faster than the profile; rows the model prices whole are taken {} lower",
                        fmt_ms(-nm / 1000.0),
                        fmt_ms(-nm / 1000.0)
                    ));
                }
            }
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

/// The model's decode of the same workload (T = 1, phase decode) and verify, held to the given
/// decode. `None` where the workload is a schedule file (its decode is not known).
pub(crate) fn calibrate(
    workload: &Workload,
    ranks: usize,
    model: &ModelSettings,
    verify: &Pricing,
    given_decode_ms: Option<f64>,
    decode_eager: bool,
) -> anyhow::Result<Option<Calibration>> {
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
    let extra = mv - md;
    let extra_words = format!(
        "modeled: the model's verify of {} tokens {} less its decode {}",
        workload.tokens,
        fmt_ms(mv / 1000.0),
        fmt_ms(md / 1000.0)
    );
    let given = given_decode_ms.map(|d| d * 1000.0);
    let (decode_us, decode_words) = match given {
        Some(d) if !decode_eager => (d, "given, from a CUDA graph"),
        _ => (md, "the model's graphed decode"),
    };
    let floor = Floor::decode_plus(
        decode_us / 1000.0,
        decode_words,
        extra / 1000.0,
        &extra_words,
    );
    Ok(Some(Calibration {
        model_decode_us: md,
        model_verify_us: mv,
        given_decode_us: given,
        decode_graphed: !decode_eager,
        not_modeled_us: given.filter(|_| !decode_eager).map(|d| d - md),
        floor_ms: floor,
        decode_transfer_us: dp.transfer_us,
        decode_oneshot_transfer_us: dp.oneshot_transfer_us.as_ref().ok().copied(),
        error: model.stated_error()?,
    }))
}
