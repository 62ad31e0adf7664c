//! Published speculative runs (a JSON file of runs as their users had them: the plain decode
//! step, the acceptance, k, the GPUs, the batch and the context, and the step that was
//! published), priced through the same cycle as `explain` prices, to fit the engine's terms
//! ([`crate::speculative::cycle::fit`]) and to check them run by run without the run itself
//! ([`crate::speculative::cycle::held_out`]). `model fit-cycle` is the command;
//! tests/data/published-spec-runs.json holds the published PCIe runs.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::costmodel::ModelSettings;
use crate::model::draft::DrafterKind;
use crate::request::Workload;
use crate::speculative::cycle::{FitRun, Forwards};

/// The file: what it is, and the runs.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct RunsFile {
    pub(crate) runs: Vec<RunSpec>,
}

/// What was published of the step.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub(crate) struct Published {
    pub(crate) step_ms: Option<f64>,
    pub(crate) step_from: Option<String>,
    pub(crate) tokens_per_s: Option<f64>,
    pub(crate) plain_tokens_per_s: Option<f64>,
}

/// One run as its user had it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct RunSpec {
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) source: String,
    /// A preset (`kimi-k2.5`), or a config.json in the folder given by `--configs`.
    pub(crate) preset: Option<String>,
    pub(crate) model_config: Option<String>,
    /// `--expert-weights` and `--weights`: the formats the run served.
    pub(crate) expert_weights: Option<String>,
    pub(crate) weights: Option<String>,
    pub(crate) gpus: u64,
    #[serde(default = "crate::util::one")]
    pub(crate) dcp: u64,
    pub(crate) drafter: DrafterKind,
    pub(crate) draft_steps: u64,
    #[serde(default = "crate::util::one")]
    pub(crate) concurrency: u64,
    #[serde(default)]
    pub(crate) context: u64,
    /// The context at which the plain decode step was measured, where it is not `context`.
    pub(crate) decode_context: Option<u64>,
    /// The plain decode step, ms, or the plain tokens/s of the batch it comes from.
    pub(crate) decode_ms: Option<f64>,
    pub(crate) plain_tokens_per_s: Option<f64>,
    /// The acceptance, one of: the mean accept length, vLLM's accept rate (accepted / drafted),
    /// vLLM's per-position rates.
    pub(crate) accept_length: Option<f64>,
    pub(crate) accept_rate: Option<f64>,
    pub(crate) accept_rates_of_drafts: Option<Vec<f64>>,
    pub(crate) published: Published,
}

impl RunSpec {
    /// The plain decode step, ms: given, else the batch over the plain tokens/s.
    pub(crate) fn decode_ms(&self) -> anyhow::Result<f64> {
        match (self.decode_ms, self.plain_tokens_per_s) {
            (Some(d), _) => Ok(d),
            (None, Some(t)) if t > 0.0 => Ok(1000.0 * self.concurrency as f64 / t),
            _ => crate::usage_bail!("run {}: neither decode_ms nor plain_tokens_per_s", self.id),
        }
    }

    /// The mean accept length (bonus token included).
    pub(crate) fn accept_length(&self) -> anyhow::Result<f64> {
        let k = self.draft_steps as f64;
        match (
            self.accept_length,
            self.accept_rate,
            &self.accept_rates_of_drafts,
        ) {
            (Some(a), _, _) => Ok(a),
            (None, Some(r), _) => Ok(1.0 + k * r),
            (None, None, Some(p)) => Ok(1.0 + p.iter().sum::<f64>()),
            _ => crate::usage_bail!(
                "run {}: no acceptance (accept_length, accept_rate or accept_rates_of_drafts)",
                self.id
            ),
        }
    }

    /// The published step, ms: given, else the batch's tokens per step over the published
    /// tokens/s; `None` where neither was published.
    pub(crate) fn published_step_ms(&self) -> anyhow::Result<Option<f64>> {
        if let Some(s) = self.published.step_ms {
            return Ok(Some(s));
        }
        let Some(t) = self.published.tokens_per_s else {
            return Ok(None);
        };
        Ok(Some(
            1000.0 * self.concurrency as f64 * self.accept_length()? / t,
        ))
    }

    /// The `explain` flags its user would give for this run (configs named by the run are
    /// looked for in `configs`): the model, the GPUs, the drafter and k, the batch and the
    /// context, the weight formats, the plain decode step and the acceptance as an accept
    /// length (vLLM's accept rate is accepted / drafted, not explain's --accept-rate).
    pub(crate) fn explain_args(&self, configs: &Path) -> anyhow::Result<Vec<String>> {
        let mut a: Vec<String> = vec!["explain".into()];
        let mut flag = |f: &str, v: String| {
            a.push(f.into());
            a.push(v);
        };
        match (&self.preset, &self.model_config) {
            (Some(p), None) => flag("--model", p.clone()),
            (None, Some(c)) => flag("--model-config", configs.join(c).display().to_string()),
            _ => crate::usage_bail!("run {}: give one of preset and model_config", self.id),
        }
        flag("--gpus", self.gpus.to_string());
        flag("--drafter", self.drafter.to_string());
        flag("--draft-steps", self.draft_steps.to_string());
        flag("--concurrency", self.concurrency.to_string());
        if self.context > 0 {
            flag("--context", self.context.to_string());
        }
        // DCP shards the KV cache's context: without a context there is nothing it changes.
        if self.dcp > 1 && self.context > 0 {
            flag("--dcp", self.dcp.to_string());
        }
        if let Some(f) = &self.weights {
            flag("--weights", f.clone());
        }
        if let Some(f) = &self.expert_weights {
            flag("--expert-weights", f.clone());
        }
        flag("--decode-ms", self.decode_ms()?.to_string());
        if let Some(c) = self.decode_context.filter(|&c| c != self.context) {
            flag("--decode-context", c.to_string());
        }
        match &self.accept_rates_of_drafts {
            Some(r) if self.accept_length.is_none() && self.accept_rate.is_none() => flag(
                "--accept-rates-of-drafts",
                r.iter().map(f64::to_string).collect::<Vec<_>>().join(","),
            ),
            _ => flag("--accept-length", self.accept_length()?.to_string()),
        }
        Ok(a)
    }

    /// The workload `explain` prices for this run.
    pub(crate) fn workload(&self, configs: &Path) -> anyhow::Result<Workload> {
        let mut w = Workload::default();
        match (&self.preset, &self.model_config) {
            (Some(p), None) => w.model = p.clone(),
            (None, Some(c)) => w.model_config = Some(configs.join(c)),
            _ => crate::usage_bail!("run {}: give one of preset and model_config", self.id),
        }
        w.tp = Some(self.gpus);
        w.tokens = self.draft_steps + 1;
        w.batch.concurrency = self.concurrency;
        w.batch.context = self.context;
        w.batch.dcp = self.dcp;
        if let Some(f) = &self.expert_weights {
            w.weights.experts = Some(f.parse().map_err(crate::error::usage)?);
        }
        if let Some(f) = &self.weights {
            w.weights.all = Some(f.parse().map_err(crate::error::usage)?);
        }
        w.cycle.drafter = Some(self.drafter);
        w.cycle.draft_steps = Some(self.draft_steps);
        Ok(w)
    }
}

/// Reads a runs file.
pub(crate) fn read(path: &Path) -> anyhow::Result<RunsFile> {
    let give = "a runs file of the form of tests/data/published-spec-runs.json";
    let text = crate::util::read_text(path, "runs file", give, crate::util::read::CONFIG)?;
    serde_json::from_str(&text).map_err(|e| {
        crate::error::usage(format!(
            "{}: not a runs file ({e}); see tests/data/published-spec-runs.json for the form",
            path.display()
        ))
    })
}

/// A run priced: its spec, the model's forwards, and what the fit takes.
#[derive(Debug, Clone)]
pub(crate) struct Priced {
    pub(crate) spec: RunSpec,
    /// The cost model's profile that priced it.
    pub(crate) profile: String,
    pub(crate) forwards: Forwards,
    pub(crate) accept_length: f64,
    pub(crate) fit: Option<FitRun>,
}

/// Prices every run's cycle with `model`; configs named by a run are read from `configs`.
pub(crate) fn price(
    file: &RunsFile,
    configs: &Path,
    model: &ModelSettings,
) -> anyhow::Result<Vec<Priced>> {
    let mut out = vec![];
    for r in &file.runs {
        let w = r.workload(configs)?;
        let ranks = r.gpus as usize;
        let cycle = super::cycle::build(&w, ranks, r.draft_steps)
            .map_err(|e| anyhow::anyhow!("run {}: {e:#}", r.id))?;
        let (forwards, profile) =
            super::cycle::forwards(&cycle, &w, ranks, model, r.decode_context)
                .map_err(|e| anyhow::anyhow!("run {}: {e:#}", r.id))?;
        let decode_us = r.decode_ms()? * 1000.0;
        let fit = r.published_step_ms()?.map(|s| FitRun {
            decode_us,
            forwards,
            concurrency: r.concurrency,
            k: r.draft_steps,
            published_step_us: s * 1000.0,
        });
        out.push(Priced {
            spec: r.clone(),
            profile,
            forwards,
            accept_length: r.accept_length()?,
            fit,
        });
    }
    Ok(out)
}

/// The folder of a runs file's configs where none is given: `configs/` beside it.
pub(crate) fn default_configs(runs: &Path) -> PathBuf {
    runs.parent()
        .map_or_else(|| PathBuf::from("configs"), |p| p.join("configs"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::speculative::cycle::{self, PUBLISHED};

    /// The terms `explain` uses are what `model fit-cycle` fits on the committed runs with the
    /// built-in profile: fitted again here, each within a millionth, and every run's held-out
    /// prediction within 15% of its published step.
    #[test]
    fn the_published_terms_are_the_fit_of_the_published_runs() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
        let path = dir.join("published-spec-runs.json");
        let file = read(&path).unwrap();
        let priced = price(&file, &default_configs(&path), &ModelSettings::default()).unwrap();
        let runs: Vec<FitRun> = priced.iter().filter_map(|p| p.fit.clone()).collect();
        assert_eq!(runs.len(), PUBLISHED.runs);
        let t = cycle::fit(&runs).unwrap();
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b.abs().max(1.0);
        assert!(close(t.scaling, PUBLISHED.terms.scaling), "{t:?}");
        assert!(
            close(t.draft_forward, PUBLISHED.terms.draft_forward),
            "{t:?}"
        );
        assert!(
            close(t.per_draft_token_us, PUBLISHED.terms.per_draft_token_us),
            "{t:?}"
        );
        let held: Vec<cycle::HeldOut> = cycle::held_out(&runs).into_iter().flatten().collect();
        assert_eq!(held.len(), runs.len());
        for (h, p) in held.iter().zip(priced.iter()) {
            assert!(
                h.error.abs() <= 0.15,
                "{}: held out {:+.1}%",
                p.spec.id,
                h.error * 100.0
            );
        }
        let spread = cycle::extent(held.iter().map(|h| h.error)).unwrap();
        let inc = cycle::extent(held.iter().map(|h| h.increment_error)).unwrap();
        for (a, b) in spread.iter().zip(PUBLISHED.spread) {
            assert!(close(*a, b), "{spread:?}");
        }
        for (a, b) in inc.iter().zip(PUBLISHED.increment_spread) {
            assert!(close(*a, b), "{inc:?}");
        }
    }
}
