//! The plain requests of the measuring commands, owned by the library.
//!
//! `cli/` turns flags into these structs (environment fallbacks such as `VERIFYBENCH_NCCL_LIB`,
//! `NCCL_PROTO` and `NCCL_ALGO` are resolved there) and calls one library function with them.
//! Nothing here knows clap. What a request resolves to lives here too, so that the launchers
//! below can take it: [`ResolvedWorkload`] (the workload's files read once) and [`VerifyJob`]
//! (made once by [`crate::backend::verify_job`]). The cost-model settings live with the model
//! ([`crate::costmodel::ModelSettings`]), the export files with the renderers
//! ([`crate::report::Exports`]); the requests of the other commands with the command
//! (`commands::<name>`).

use std::path::{Path, PathBuf};

use crate::measure::gaps::{HostGapRequest, HostGaps};
use crate::model::{
    self, schedule_file::ScheduleFile, CollectiveKind, DType, Logits, Phase, Routing, Schedule,
    ScheduleOptions,
};
pub(crate) use crate::record::Impl;
use crate::record::Mode;
use crate::util::Files;

/// Which model, parallelism and token count: the workload every command replays or prices.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Built-in model preset name (ignored when `model_config` is given).
    pub model: String,
    /// A Hugging Face config.json instead of a preset.
    pub model_config: Option<PathBuf>,
    /// Tensor-parallel size; `None`: the caller's default (GPUs used, or 8).
    pub tp: Option<u64>,
    pub tokens: u64,
    pub dtype: DType,
    pub routing: Routing,
    pub no_embedding_allreduce: bool,
    pub logits: Logits,
    pub draft_vocab: u64,
    pub phase: Phase,
    /// A schedule file (`plan --format json`, `trace --export-schedule`) whose exact op
    /// sequence replaces the config-derived schedule; the fields above other than `tp` are
    /// then unused, and `tp`, when given, must equal the file's.
    pub schedule_file: Option<PathBuf>,
    /// The batch and the context each forward serves (`--concurrency`, `--context`, ...).
    pub batch: Batch,
    /// `--weights`, `--expert-weights`: formats in place of the checkpoint's.
    pub weights: model::shape::WeightOverride,
    /// The speculative cycle's flags (`--phase cycle`).
    pub cycle: CycleFlags,
}

/// The batch and the context a forward serves: `--concurrency C` requests in each forward
/// (a decode step of C tokens, a verify of C x (k+1)), `--context N` tokens of each request's
/// KV cache read by every forward, its element type (`--kv-dtype`) and its sharding over the
/// TP group (`--dcp`, decode context parallelism).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batch {
    pub(crate) concurrency: u64,
    pub(crate) context: u64,
    pub(crate) kv_dtype: model::kv::KvDType,
    pub(crate) dcp: u64,
}

impl Default for Batch {
    fn default() -> Self {
        Batch {
            concurrency: 1,
            context: 0,
            kv_dtype: model::kv::KvDType::Bf16,
            dcp: 1,
        }
    }
}

/// The most requests in one forward (`--concurrency`).
pub(crate) const MAX_CONCURRENCY: u64 = 4096;
/// The longest context (`--context`): 16 Mi tokens, past every published model's window.
pub(crate) const MAX_CONTEXT: u64 = 16 << 20;

impl Batch {
    /// The documented ranges: `--concurrency` 1 to 4096, `--context` 0 to 16 Mi, `--dcp` 1 to
    /// 1024 and only with a context.
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        if !(1..=MAX_CONCURRENCY).contains(&self.concurrency) {
            crate::usage_bail!(
                "--concurrency {}: give 1 to {MAX_CONCURRENCY} requests per forward",
                self.concurrency
            );
        }
        if self.context > MAX_CONTEXT {
            crate::usage_bail!(
                "--context {}: give 0 to {MAX_CONTEXT} tokens of context per request",
                self.context
            );
        }
        if !(1..=MAX_RANKS as u64).contains(&self.dcp) {
            crate::usage_bail!("--dcp {}: give 1 to {MAX_RANKS} ranks", self.dcp);
        }
        if self.dcp > 1 && self.context == 0 {
            crate::usage_bail!(
                "--dcp {} shards the KV cache's context: add --context N (the tokens each request has seen)",
                self.dcp
            );
        }
        Ok(())
    }

    /// The flags that reproduce the batch on a child's command line (none at the defaults).
    fn to_args(self) -> Vec<String> {
        let mut a = vec![];
        let d = Batch::default();
        let c = self.concurrency;
        push_arg(&mut a, "--concurrency", (c != d.concurrency).then_some(c));
        push_arg(
            &mut a,
            "--context",
            (self.context != d.context).then_some(self.context),
        );
        let kv = self.kv_dtype;
        push_arg(&mut a, "--kv-dtype", (kv != d.kv_dtype).then(|| kv.name()));
        push_arg(&mut a, "--dcp", (self.dcp != d.dcp).then_some(self.dcp));
        a
    }
}

/// The flags of `--phase cycle`: `--drafter`, `--draft-steps`, `--draft-config`,
/// `--draft-layers`, `--tree-tokens` (`None`: not given).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CycleFlags {
    pub(crate) drafter: Option<model::draft::DrafterKind>,
    pub(crate) draft_steps: Option<u64>,
    pub(crate) draft_config: Option<PathBuf>,
    pub(crate) draft_layers: Option<u64>,
    pub(crate) tree_tokens: Option<u64>,
}

/// The draft steps of a cycle where `--draft-steps` is not given (the published runs' 3).
pub(crate) const DRAFT_STEPS_DEFAULT: u64 = 3;

impl CycleFlags {
    fn any(&self) -> bool {
        *self != CycleFlags::default()
    }

    /// The draft steps k: `--draft-steps`, else [`DRAFT_STEPS_DEFAULT`].
    fn steps(&self) -> u64 {
        self.draft_steps.unwrap_or(DRAFT_STEPS_DEFAULT)
    }

    /// The ranges and combinations: k 1 to 64, a tree of 2 to 4096 tokens, a block drafter's
    /// 1 to 64 layers without a config, no config for the target's own MTP module.
    fn check(&self) -> anyhow::Result<()> {
        use model::draft::DrafterKind;
        let drafter = self.drafter.unwrap_or_default();
        if let Some(k) = self.draft_steps {
            if !(1..=model::cycle::MAX_DRAFT_STEPS).contains(&k) {
                crate::usage_bail!(
                    "--draft-steps {k}: give 1 to {} draft tokens per cycle",
                    model::cycle::MAX_DRAFT_STEPS
                );
            }
        }
        if let Some(t) = self.tree_tokens {
            if !(2..=4096).contains(&t) {
                crate::usage_bail!(
                    "--tree-tokens {t}: give 2 to 4096 tokens per request (SGLang's --speculative-num-draft-tokens)"
                );
            }
        }
        if let Some(n) = self.draft_layers {
            if drafter != DrafterKind::Block || self.draft_config.is_some() {
                crate::usage_bail!(
                    "--draft-layers {n} sets a block drafter's layers without a config: use it with --drafter block and no --draft-config"
                );
            }
            if !(1..=64).contains(&n) {
                crate::usage_bail!("--draft-layers {n}: give 1 to 64 layers");
            }
        }
        if let (Some(p), DrafterKind::Mtp) = (&self.draft_config, drafter) {
            crate::usage_bail!(
                "--draft-config '{}' with --drafter mtp: the MTP module is the target's own (num_nextn_predict_layers of its config); a draft config is for --drafter eagle3 or block",
                p.display()
            );
        }
        Ok(())
    }

    /// The flags that reproduce these on a child's command line.
    fn to_args(&self) -> Vec<String> {
        let mut a = vec![];
        push_arg(&mut a, "--drafter", self.drafter.map(|d| d.name()));
        push_arg(&mut a, "--draft-steps", self.draft_steps);
        push_arg(
            &mut a,
            "--draft-config",
            self.draft_config.as_deref().map(absolute),
        );
        push_arg(&mut a, "--draft-layers", self.draft_layers);
        push_arg(&mut a, "--tree-tokens", self.tree_tokens);
        a
    }
}

/// `flag value` on a child's command line, where the value is given.
fn push_arg(a: &mut Vec<String>, flag: &str, value: Option<impl std::fmt::Display>) {
    if let Some(v) = value {
        a.extend([flag.to_string(), v.to_string()]);
    }
}

/// `p` made absolute, so that a child started in another directory reads the same file.
fn absolute(p: &Path) -> String {
    std::path::absolute(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

impl Default for Workload {
    /// The defaults of the command line: Kimi-K2.5, 3 tokens, bf16, the verify forward.
    fn default() -> Self {
        Workload {
            model: "kimi-k2.5".into(),
            model_config: None,
            tp: None,
            tokens: 3,
            dtype: DType::Bf16,
            routing: Routing::Uniform,
            no_embedding_allreduce: false,
            logits: Logits::Gather,
            draft_vocab: 32000,
            phase: Phase::Verify,
            schedule_file: None,
            batch: Batch::default(),
            weights: Default::default(),
            cycle: CycleFlags::default(),
        }
    }
}

impl Workload {
    /// The files the workload reads (`--model-config`, `--schedule`), added to a command's
    /// inputs.
    pub(crate) fn add_to(&self, f: &mut Files) {
        f.input("--model-config", self.model_config.as_deref())
            .input("--schedule", self.schedule_file.as_deref());
    }

    pub(crate) fn options(&self, default_tp: u64) -> ScheduleOptions {
        ScheduleOptions {
            tp: self.tp.unwrap_or(default_tp),
            tokens: self.tokens,
            dtype: self.dtype,
            routing: self.routing,
            embedding_allreduce: !self.no_embedding_allreduce,
            logits: self.logits,
            draft_vocab: self.draft_vocab,
            concurrency: self.batch.concurrency,
            context: self.batch.context,
            kv: model::kv::KvSettings {
                dtype: self.batch.kv_dtype,
                dcp: self.batch.dcp,
            },
            weights: self.weights,
            ..ScheduleOptions::default()
        }
    }

    pub(crate) fn shape(&self) -> anyhow::Result<model::ModelShape> {
        model::resolve(&self.model, self.model_config.as_deref())
    }

    /// The schedule of the chosen phase, with `default_tp` when `tp` is absent; with a
    /// schedule file, the file's schedule (its own tp; `default_tp` is unused). For a caller
    /// that needs nothing else of the workload; a command resolves it once ([`Workload::resolve`]).
    pub fn schedule(&self, default_tp: u64) -> anyhow::Result<Schedule> {
        self.check_bounds()?;
        self.resolve()?.build(default_tp)
    }

    /// The documented ranges of the workload flags: --tp 1..=1024, --tokens 1..=65536,
    /// --draft-vocab at least 1.
    pub(crate) fn check_bounds(&self) -> anyhow::Result<()> {
        if let Some(tp) = self.tp {
            if !(1..=MAX_RANKS as u64).contains(&tp) {
                crate::usage_bail!("--tp {tp}: give 1 to {MAX_RANKS} ranks");
            }
        }
        if !(1..=MAX_TOKENS).contains(&self.tokens) {
            crate::usage_bail!(
                "--tokens {}: give 1 to {MAX_TOKENS} tokens per forward (a verify is a few, a prefill chunk at most thousands)",
                self.tokens
            );
        }
        if self.draft_vocab == 0 {
            crate::usage_bail!(
                "--draft-vocab 0: the draft head needs a vocabulary of at least 1 (EAGLE-3 heads use 32000)"
            );
        }
        self.batch.check()?;
        self.cycle.check()?;
        if self.phase == Phase::Cycle {
            if self.tokens != Workload::default().tokens {
                crate::usage_bail!(
                    "--tokens {} with --phase cycle: the verify carries --draft-steps + 1 tokens per request (or --tree-tokens)",
                    self.tokens
                );
            }
        } else if self.cycle.any() {
            crate::usage_bail!(
                "--drafter, --draft-steps, --draft-config, --draft-layers and --tree-tokens shape the speculative cycle: add --phase cycle"
            );
        }
        let per_request = self.tokens_per_request();
        let total = per_request.saturating_mul(self.batch.concurrency);
        if total > MAX_TOKENS {
            crate::usage_bail!(
                "--concurrency {} x {per_request} tokens per request = {total} tokens in one forward: at most {MAX_TOKENS}",
                self.batch.concurrency
            );
        }
        Ok(())
    }

    /// The tokens of each request in one forward: `--tokens` for the verify phase, one for a
    /// decode or draft step, and for the cycle its verify (k + 1, or the tree's).
    fn tokens_per_request(&self) -> u64 {
        match self.phase {
            Phase::Verify => self.tokens,
            Phase::Cycle => self.cycle.tree_tokens.unwrap_or(self.cycle.steps() + 1),
            Phase::Decode | Phase::Draft => 1,
        }
    }

    /// The schedule file, loaded and checked against `tp` (`None` without `--schedule`).
    /// A `tp` other than the file's is a usage error naming both: the file's per-rank sizes
    /// belong to its tp, so replaying them at another would measure a different workload.
    /// `check_length` is given the file's number of operations before it is parsed
    /// ([`ScheduleFile::load_checking_length`]).
    pub(crate) fn load_schedule_file(
        &self,
        check_length: &dyn Fn(usize) -> anyhow::Result<()>,
    ) -> anyhow::Result<Option<ScheduleFile>> {
        let Some(p) = &self.schedule_file else {
            return Ok(None);
        };
        let f = ScheduleFile::load_checking_length(p, check_length)?;
        if let Some(tp) = self.tp {
            if tp != f.schedule.tp {
                crate::usage_bail!(
                    "--tp {tp} but --schedule '{}' is a TP{} schedule: drop --tp (it is taken from the file) or give --tp {}",
                    p.display(),
                    f.schedule.tp,
                    f.schedule.tp
                );
            }
        }
        Ok(Some(f))
    }

    /// Reads the workload's files once: the schedule file (checked against `--tp`), else the
    /// `--model-config` shape. What the commands need of them afterwards (the tp asked for,
    /// the modes check, the schedule) comes from the returned value, never from the paths.
    pub(crate) fn resolve(&self) -> anyhow::Result<ResolvedWorkload> {
        self.resolve_checking_length(&|_| Ok(()))
    }

    /// [`WorkloadRequest::resolve`] for a run that bounds the schedule's length: a schedule
    /// file's number of operations goes to `check_length` before the file is parsed, so a
    /// file too long is refused at once (the length of a schedule built from flags is
    /// checked where it is built).
    pub(crate) fn resolve_checking_length(
        &self,
        check_length: &dyn Fn(usize) -> anyhow::Result<()>,
    ) -> anyhow::Result<ResolvedWorkload> {
        let source = if let Some(f) = self.load_schedule_file(check_length)? {
            WorkloadSource::File(f)
        } else if self.model_config.is_some() {
            WorkloadSource::Config(self.shape()?)
        } else {
            WorkloadSource::Preset
        };
        let draft = match &self.cycle.draft_config {
            Some(p) => Some(model::config::load_draft(p)?),
            None => None,
        };
        Ok(ResolvedWorkload {
            flags: self.clone(),
            source,
            draft,
        })
    }

    /// The flags that reproduce this workload on another command line (sweep children).
    pub(crate) fn to_args(&self) -> Vec<String> {
        let mut a = vec![];
        if let Some(p) = &self.schedule_file {
            // The other workload flags conflict with --schedule.
            a.extend(["--schedule".into(), absolute(p)]);
            push_arg(&mut a, "--tp", self.tp);
            return a;
        }
        match &self.model_config {
            Some(p) => a.extend(["--model-config".into(), p.display().to_string()]),
            None => a.extend(["--model".into(), self.model.clone()]),
        }
        push_arg(&mut a, "--tp", self.tp);
        a.extend(["--tokens".into(), self.tokens.to_string()]);
        a.extend(["--dtype".into(), self.dtype.name().into()]);
        a.extend(["--routing".into(), self.routing.name().into()]);
        if self.no_embedding_allreduce {
            a.push("--no-embedding-allreduce".into());
        }
        a.extend(["--logits".into(), self.logits.name().into()]);
        a.extend(["--draft-vocab".into(), self.draft_vocab.to_string()]);
        a.extend(["--phase".into(), self.phase.name().into()]);
        a.extend(self.batch.to_args());
        push_arg(&mut a, "--weights", self.weights.all.map(|f| f.label()));
        push_arg(
            &mut a,
            "--expert-weights",
            self.weights.experts.map(|f| f.label()),
        );
        a.extend(self.cycle.to_args());
        a
    }
}

/// A [`Workload`] whose files have been read once ([`Workload::resolve`]): the schedule file,
/// already checked against `--tp`, or the `--model-config` shape.
#[derive(Debug, Clone)]
pub(crate) struct ResolvedWorkload {
    /// The flags as given (for the children's command lines and the messages).
    pub(crate) flags: Workload,
    source: WorkloadSource,
    /// `--draft-config`, as read.
    draft: Option<(model::ModelShape, model::config::DraftKeys)>,
}

/// Where a resolved workload's schedule comes from.
#[derive(Debug, Clone)]
enum WorkloadSource {
    /// `--schedule FILE`, as read.
    File(ScheduleFile),
    /// `--model-config FILE`, as read.
    Config(model::ModelShape),
    /// A built-in preset (`--model NAME`), looked up when the schedule is built.
    Preset,
}

impl ResolvedWorkload {
    /// The tp the user asked for: `--tp`, else the schedule file's, else `None` (the
    /// caller's default).
    pub(crate) fn requested_tp(&self) -> Option<u64> {
        match &self.source {
            WorkloadSource::File(f) => Some(f.schedule.tp),
            _ => self.flags.tp,
        }
    }

    /// With a schedule file: refuses `modes` other than comm when the file has no compute ops
    /// (a trace export holds the collectives only). With a `--model-config` whose weights are
    /// not known (architecture or weight format not understood): the same, naming why.
    pub(crate) fn check_modes(&self, modes: &[Mode]) -> anyhow::Result<()> {
        let other = || modes.iter().find(|m| **m != Mode::Comm);
        match &self.source {
            WorkloadSource::File(f) => {
                let compute = f
                    .schedule
                    .ops
                    .iter()
                    .any(|o| matches!(o, model::Op::Compute { .. }));
                if let (Some(m), false) = (other(), compute) {
                    crate::usage_bail!(
                        "--mode {} but --schedule '{}' has no compute ops to replay (a trace export holds the collectives only): use --mode comm",
                        m.name(),
                        self.path().display()
                    );
                }
            }
            WorkloadSource::Config(shape) => {
                if let (Some(m), false) = (other(), shape.weights_known) {
                    crate::usage_bail!(
                        "--mode {} but the weight bytes of --model-config '{}' are unknown ({}): use --mode comm",
                        m.name(),
                        self.path().display(),
                        shape.warnings.join("; ")
                    );
                }
            }
            WorkloadSource::Preset => {}
        }
        Ok(())
    }

    /// The tokens of the largest forward the schedule replays: a schedule file's own, else
    /// [`Workload::tokens_per_request`] times the requests of the batch.
    pub(crate) fn forward_tokens(&self) -> u64 {
        match &self.source {
            WorkloadSource::File(file) => file.schedule.tokens,
            _ => self.flags.tokens_per_request() * self.flags.batch.concurrency.max(1),
        }
    }

    /// The file the workload came from (`--schedule` or `--model-config`); empty for a preset.
    fn path(&self) -> &std::path::Path {
        let f = &self.flags;
        f.schedule_file
            .as_deref()
            .or(f.model_config.as_deref())
            .unwrap_or(std::path::Path::new(""))
    }

    /// The schedule of the chosen phase, with `default_tp` when `--tp` is absent (a schedule
    /// file's own tp otherwise), after the range checks of the flags.
    pub(crate) fn schedule(&self, default_tp: u64) -> anyhow::Result<Schedule> {
        self.flags.check_bounds()?;
        self.build(default_tp)
    }

    /// [`ResolvedWorkload::schedule`] without the range checks (the caller made them once:
    /// [`crate::backend::verify_job`]). With `--phase cycle`, the cycle's verify: `verify`
    /// replays the cycle ([`ResolvedWorkload::cycle`]); the commands that take one forward
    /// refuse it ([`model::build`]).
    pub(crate) fn build(&self, default_tp: u64) -> anyhow::Result<Schedule> {
        let opt = self.flags.options(default_tp);
        match &self.source {
            WorkloadSource::File(f) => Ok(f.schedule.clone()),
            WorkloadSource::Config(shape) => model::build(shape, &opt, self.flags.phase),
            WorkloadSource::Preset => model::build(&self.flags.shape()?, &opt, self.flags.phase),
        }
    }

    /// The speculative cycle of the workload (`--phase cycle`), built once at `default_tp`
    /// when `--tp` is absent: the draft forwards, the verify and the decode step beside them.
    pub(crate) fn cycle(&self, default_tp: u64) -> anyhow::Result<model::cycle::Cycle> {
        let opt = self.flags.options(default_tp);
        let shape = self.shape()?;
        let f = &self.flags.cycle;
        let spec = model::cycle::CycleSpec {
            drafter: f.drafter.unwrap_or_default(),
            draft_steps: f.steps(),
            tree_tokens: f.tree_tokens,
            draft_config: self.draft.clone(),
            draft_layers: f.draft_layers,
        };
        model::cycle::build(&shape, &opt, &spec)
    }

    /// The model's shape: the `--model-config` as read, or the preset; a schedule file has
    /// none (its ops are all there is).
    pub(crate) fn shape(&self) -> anyhow::Result<model::ModelShape> {
        match &self.source {
            WorkloadSource::File(_) => crate::usage_bail!(
                "--phase cycle is built from the model (--model or --model-config), not from a schedule file"
            ),
            WorkloadSource::Config(shape) => Ok(shape.clone()),
            WorkloadSource::Preset => self.flags.shape(),
        }
    }

    /// The provenance note of a schedule read from a file (`None` otherwise).
    pub(crate) fn file_note(&self) -> Option<String> {
        let WorkloadSource::File(f) = &self.source else {
            return None;
        };
        Some(format!(
            "schedule from the file {}: {}",
            self.path().display(),
            f.origin.as_deref().unwrap_or("no origin recorded")
        ))
    }
}

/// Where the numbers come from. `Auto` is resolved by [`crate::backend::resolve`]; `Mock` is
/// never offered on the command line (only `sweep --debug-mode` and tests pick it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// NCCL when at least two GPUs are present, otherwise the cost model (and say so).
    Auto,
    /// Real NCCL collectives on real GPUs.
    Nccl,
    /// The calibrated cost model: runs anywhere, every number labelled modeled.
    Model,
    /// Deterministic FAKE numbers for tests, labelled `mock` in the provenance.
    Mock,
}

crate::named_enum!(BackendKind {
    Auto => "auto": "NCCL when at least two GPUs are present, otherwise the cost model (and say so)",
    Nccl => "nccl": "Real NCCL collectives on real GPUs",
    Model => "model": "The calibrated cost model: runs anywhere, every number labelled modeled",
} hidden {
    Mock => "mock": "Deterministic FAKE numbers for tests",
});

/// How ranks are started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Launcher {
    /// One thread per GPU in this process.
    Threads,
    /// One worker process per GPU, as serving engines run (default).
    Processes,
}

crate::named_enum!(Launcher {
    Threads => "threads": "One thread per GPU in this process.",
    Processes => "processes": "One worker process per GPU, as serving engines run (default).",
});

/// Which GPUs and how to reach NCCL.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSpec {
    /// Number of GPUs (ranks): the first N visible devices.
    pub gpus: Option<usize>,
    /// Exact device ordinals.
    pub devices: Option<Vec<usize>>,
    pub launcher: Launcher,
    /// libnccl.so to load (else the search of [`crate::comm::libs::prepare`]).
    pub nccl_lib: Option<PathBuf>,
    /// Seconds any rendezvous, collective or worker may take before the run is aborted.
    pub timeout: f64,
    /// `--cpu-affinity auto|none|LIST`: each rank pinned to its GPU's NUMA node (auto).
    pub cpu_affinity: CpuAffinity,
}

impl Default for GpuSpec {
    fn default() -> Self {
        GpuSpec {
            gpus: None,
            devices: None,
            launcher: Launcher::Processes,
            nccl_lib: None,
            timeout: 60.0,
            cpu_affinity: CpuAffinity::Auto,
        }
    }
}

pub(crate) use crate::model::schedule::{MAX_RANKS, MAX_TOKENS};
/// The largest collective size (-b, -e, --sizes): 16 GiB.
pub(crate) const MAX_COLLECTIVE_BYTES: u64 = 16 << 30;

impl GpuSpec {
    /// `--nccl-lib` (a library file or its folder; a sweep's list of them, comma-separated),
    /// added to a command's inputs.
    pub(crate) fn add_to(&self, f: &mut Files) {
        if let Some(libs) = &self.nccl_lib {
            for l in libs.to_string_lossy().split(',') {
                f.input("--nccl-lib", Some(Path::new(l)));
            }
        }
    }

    /// The rank count the flags fix: the `--devices` listed, else `--gpus`.
    pub(crate) fn ranks(&self) -> Option<usize> {
        self.devices.as_ref().map(|d| d.len()).or(self.gpus)
    }
}

/// The rank count where nothing fixes it and no GPU is counted: the cost model and the mock
/// price an 8-GPU server, and so does `explain`.
pub(crate) const DEFAULT_RANKS: usize = 8;

/// What can fix the rank count of a run ([`ranks`]), strongest first.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct RankInputs {
    /// The world of the evidence: a trace's ranks.
    pub(crate) world: Option<usize>,
    /// How many GPUs `--devices` lists.
    pub(crate) devices: Option<usize>,
    pub(crate) gpus: Option<usize>,
    pub(crate) tp: Option<u64>,
    /// One GPU runs one rank's share of a larger `--tp` (`verify --gpus 1 --tp 8`): the GPU
    /// count need not equal `--tp`.
    pub(crate) one_rank_share: bool,
}

impl RankInputs {
    /// The GPU flags of `g` and the `--tp` asked for.
    pub(crate) fn of(g: &GpuSpec, tp: Option<u64>) -> RankInputs {
        RankInputs {
            devices: g.devices.as_ref().map(Vec::len),
            gpus: g.gpus,
            tp,
            ..Default::default()
        }
    }
}

/// A command's words for the rank counts it refuses, and the counts it allows.
pub(crate) struct RankRule {
    /// A trace's world `w`, `--gpus n`.
    pub(crate) world_vs_gpus: fn(usize, usize) -> String,
    /// The flag (`--gpus` or `--devices`) fixing `n` ranks, `--tp t`.
    pub(crate) gpus_vs_tp: fn(&str, usize, u64) -> String,
    pub(crate) range: std::ops::RangeInclusive<usize>,
    pub(crate) out_of_range: fn(usize) -> String,
}

/// The words of the commands that run ranks (`verify`, `collective`, `sweep`), which read no
/// trace and check the flags' own ranges apart, before
/// ([`crate::launch::devices::check_gpu_flags`], [`Workload::check_bounds`]).
pub(crate) const GPU_FLAGS: RankRule = RankRule {
    world_vs_gpus: |_, _| unreachable!("no trace's world"),
    gpus_vs_tp: |flag, n, t| {
        format!("--tp {t} and {flag} ({n} GPUs) disagree: one rank per GPU, so give the same number (or only one of them)")
    },
    range: 0..=usize::MAX,
    out_of_range: |_| unreachable!("every count is in range"),
};

/// The one rank rule: the evidence and the flags agree (a trace's world and `--gpus`;
/// `--gpus` and `--devices`; either and `--tp`, unless one GPU runs one rank's share), and the
/// count is the first of the world, the GPUs listed, `--gpus`, `--tp`, else the command's
/// `default`, within the rule's range. Every refusal is a usage error in the rule's words.
pub(crate) fn ranks(i: &RankInputs, default: usize, rule: &RankRule) -> anyhow::Result<usize> {
    let refuse = |why: String| Err(crate::error::usage(why));
    match (i.world, i.gpus, i.devices) {
        (Some(w), Some(n), _) if w != n => return refuse((rule.world_vs_gpus)(w, n)),
        (_, Some(n), Some(m)) if n != m => {
            return refuse(format!(
                "--gpus {n} and --devices (listing {m} GPUs) disagree: give one of them"
            ))
        }
        _ => {}
    }
    let (listed, flag) = match i.devices {
        Some(m) => (Some(m), "--devices"),
        None => (i.gpus, "--gpus"),
    };
    if let (Some(n), Some(t), false) = (listed, i.tp, i.one_rank_share) {
        if n as u64 != t {
            return refuse((rule.gpus_vs_tp)(flag, n, t));
        }
    }
    let n = i
        .world
        .or(listed)
        .or(i.tp.map(|t| t as usize))
        .unwrap_or(default);
    if !rule.range.contains(&n) {
        return refuse((rule.out_of_range)(n));
    }
    Ok(n)
}

/// Timed and warm-up iterations (nccl-tests' and hyperfine's `-n`/`-w`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repeat {
    pub iters: u64,
    pub warmup: u64,
    /// `--rank-time max|mean`: how the ranks' times of one sample become its time.
    pub rank_time: crate::record::RankTime,
}

impl Default for Repeat {
    fn default() -> Self {
        Repeat {
            iters: 200,
            warmup: 20,
            rank_time: crate::record::RankTime::Max,
        }
    }
}

/// Eager launches, CUDA-graph replay, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphChoice {
    On,
    Off,
    Both,
}

crate::named_enum!(GraphChoice {
    On => "on": "",
    Off => "off": "",
    Both => "both": "",
});

impl GraphChoice {
    /// The graph flags to run, eager first.
    pub(crate) fn modes(self) -> Vec<bool> {
        match self {
            GraphChoice::On => vec![true],
            GraphChoice::Off => vec![false],
            GraphChoice::Both => vec![false, true],
        }
    }
}

/// The (graph, mode) runs of `modes` x `graph`, eager first, in mode order, without repeats.
pub(crate) fn runs(modes: &[Mode], graph: GraphChoice) -> Vec<(bool, Mode)> {
    let mut modes = modes.to_vec();
    modes.dedup();
    let mut v = vec![];
    for m in modes {
        for g in graph.modes() {
            if !v.contains(&(g, m)) {
                v.push((g, m));
            }
        }
    }
    v
}

/// The host-gap flags of `verify`, `sweep` and `worker` (`--host-gap-us`, `--host-gap-per`,
/// `--late-rank`, `--gap-seed` in [`HostGapRequest`]; `--host-gap-from` as the file's path,
/// read when the schedule is known).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostGapFlags {
    pub(crate) gaps: HostGapRequest,
    /// `--host-gap-from SCHEDULE`: a schedule file with `host_gaps_us`.
    pub(crate) from: Option<PathBuf>,
}

impl HostGapFlags {
    /// `--host-gap-from`, added to a command's inputs.
    pub(crate) fn add_to(&self, f: &mut Files) {
        f.input("--host-gap-from", self.from.as_deref());
    }

    /// Validates the flags for `schedule` on `nranks` ranks: usage errors (exit 2, one line
    /// naming the flag or file) for a late rank outside the world, a schedule file that is not
    /// of this schedule or has no host gaps, both `--host-gap-us` and `--host-gap-from`.
    pub(crate) fn resolve(&self, schedule: &Schedule, nranks: usize) -> anyhow::Result<HostGaps> {
        let mut req = self.gaps.clone();
        if let Some(p) = &self.from {
            let f = ScheduleFile::load(p)?;
            let name = p.display().to_string();
            let Some(g) = f.host_gaps_us else {
                crate::usage_bail!(
                    "--host-gap-from '{name}': the file has no host_gaps_us; write it with `verifybench trace ... --export-schedule`"
                );
            };
            if let Some(why) = other_schedule(&f.schedule, schedule) {
                crate::usage_bail!(
                    "--host-gap-from '{name}' was traced for another schedule ({why}); give the workload flags it was traced with (or --schedule it)"
                );
            }
            // Each rank's own gaps where the trace had every rank; else one list for all.
            let lists = f.host_gaps_per_rank_us.unwrap_or_else(|| vec![g]);
            req.from_schedule = Some((lists, name));
        }
        HostGaps::from_request(&req, nranks, schedule.ops.len())
    }

    /// The flags that reproduce these settings on a child's command line (sweep points).
    pub(crate) fn to_args(&self) -> Vec<String> {
        let mut a = vec![];
        let g = &self.gaps;
        push_arg(&mut a, "--host-gap-us", g.gap.as_ref());
        push_arg(&mut a, "--host-gap-per", g.per.map(|p| p.name()));
        let late = g.late.as_ref().map(|l| format!("{}:{}", l.rank, l.us));
        push_arg(&mut a, "--late-rank", late);
        push_arg(
            &mut a,
            "--host-gap-from",
            self.from.as_ref().map(|p| p.display()),
        );
        push_arg(&mut a, "--gap-seed", g.seed);
        a
    }
}

/// Why `file` is not the schedule `want` (op count, or the first op whose kind, collective or
/// size differs), or `None` when it is.
pub(crate) fn other_schedule(file: &Schedule, want: &Schedule) -> Option<String> {
    if file.ops.len() != want.ops.len() {
        return Some(format!(
            "{} ops, this schedule has {}",
            file.ops.len(),
            want.ops.len()
        ));
    }
    let sig = |o: &model::Op| match o {
        model::Op::Collective {
            kind, dtype, count, ..
        } => format!("{} of {count} {}", kind.name(), dtype.name()),
        model::Op::Compute { .. } => "compute".to_string(),
    };
    file.ops
        .iter()
        .zip(&want.ops)
        .enumerate()
        .find(|(_, (a, b))| sig(a) != sig(b))
        .map(|(i, (a, b))| format!("op {i} is {} in the file, {} here", sig(a), sig(b)))
}

/// `verify`: replay the verify schedule.
#[derive(Debug, Clone)]
pub struct VerifyRequest {
    pub workload: Workload,
    pub graph: GraphChoice,
    pub mode: Vec<Mode>,
    /// Tiny kernels launched per layer (eager mode pays their launch cost).
    pub launches_per_layer: u32,
    /// Launch the streaming (compute) kernels with programmatic dependent launch.
    pub pdl: bool,
    pub backend: BackendKind,
    pub gpu: GpuSpec,
    pub repeat: Repeat,
    pub model: ModelSettings,
    pub export: Exports,
    /// What stdout gets: the table, or the record as `--export-json` writes it.
    pub format: crate::output::Format,
    /// No progress or notes on stderr (the ranks' stderr is not echoed either).
    pub quiet: bool,
    /// Testing only: make a rank (or, with the model backend, the process) fail; see
    /// [`crate::backend::fault`].
    pub inject_fault: Option<String>,
    /// The all-reduce implementations to replay the schedule with (`--impl`; empty: NCCL
    /// only). The all-gather stays on NCCL.
    pub impls: Vec<Impl>,
    /// Host time before each launch in eager replay, a late rank (issue 17).
    pub host_gaps: HostGapFlags,
    /// `--export-trace FILE`: the per-collective timing pass as a Chrome trace.
    pub export_trace: Option<PathBuf>,
    /// `--fresh-runs R` (1 to [`MAX_FRESH_RUNS`]): R repetitions, each in fresh workers.
    pub fresh_runs: usize,
    /// Which repetition this request is (0-based; set by the repetition loop).
    pub fresh_run: usize,
}

impl VerifyRequest {
    /// Every file the replay reads and writes, checked together before any work.
    pub(crate) fn files(&self) -> Files {
        let mut f = Files::new();
        self.workload.add_to(&mut f);
        self.gpu.add_to(&mut f);
        self.model.add_to(&mut f);
        self.host_gaps.add_to(&mut f);
        self.export.add_to(&mut f);
        f.output("--export-trace", self.export_trace.as_deref());
        f
    }

    /// Whether every requested mode is compute only (no collective is replayed).
    pub(crate) fn compute_only(&self) -> bool {
        self.mode.iter().all(|m| *m == Mode::Compute)
    }

    /// The (graph, mode) runs requested, eager first, in mode order.
    pub(crate) fn runs(&self) -> Vec<(bool, Mode)> {
        runs(&self.mode, self.graph)
    }
}

#[cfg(test)]
impl VerifyRequest {
    /// The request the unit tests start from and edit: a quiet collectives-only replay of the
    /// default workload on the mock backend, eager and graph, 5 iterations after 1 warm-up.
    pub(crate) fn mock() -> VerifyRequest {
        VerifyRequest {
            workload: Workload::default(),
            graph: GraphChoice::Both,
            mode: vec![Mode::Comm],
            launches_per_layer: 0,
            pdl: false,
            backend: BackendKind::Mock,
            gpu: GpuSpec::default(),
            repeat: Repeat {
                iters: 5,
                warmup: 1,
                ..Default::default()
            },
            model: Default::default(),
            export: Default::default(),
            format: Default::default(),
            quiet: true,
            inject_fault: None,
            impls: vec![],
            host_gaps: Default::default(),
            export_trace: None,
            fresh_runs: 1,
            fresh_run: 0,
        }
    }
}

/// A `verify` request resolved once ([`crate::backend::verify_job`]): every flag checked, the
/// backend picked, the GPUs selected, the schedule read or built, the host gaps drawn. The
/// backends and the launchers take this and never go back to the request's files or re-check
/// its values.
#[derive(Debug, Clone)]
pub struct VerifyJob {
    /// The request as given (the run settings: modes, repeat, implementations, exports).
    pub(crate) request: VerifyRequest,
    /// The schedule replayed, at the tp it was resolved for.
    pub(crate) schedule: Schedule,
    /// "schedule from the file ...": the provenance note of a `--schedule` file.
    pub(crate) file_note: Option<String>,
    /// The GPU ordinals of the ranks (the NCCL backend; empty for the model and the mock).
    pub(crate) devices: Vec<usize>,
    /// The ranks that run: the devices selected, else the schedule's tp.
    pub(crate) nranks: usize,
    /// The host gaps and the late rank, validated for this schedule and rank count.
    pub(crate) host_gaps: HostGaps,
    /// `--phase cycle`: the whole cycle, built once at the schedule's tp (`schedule` is its
    /// verify).
    pub(crate) cycle: Option<model::cycle::Cycle>,
}

/// `collective`: one collective over a size range, nccl-tests style.
#[derive(Debug, Clone)]
pub struct CollectiveRequest {
    pub op: CollectiveKind,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub step_factor: u64,
    /// Extra exact sizes.
    pub sizes: Vec<u64>,
    pub dtype: DType,
    pub graph: GraphChoice,
    pub backend: BackendKind,
    pub gpu: GpuSpec,
    pub repeat: Repeat,
    pub model: ModelSettings,
    pub export: Exports,
    /// What stdout gets: the table, or the record as `--export-json` writes it.
    pub format: crate::output::Format,
    /// The implementations to run side by side (`--impl`; empty: NCCL only).
    pub impls: Vec<Impl>,
    /// `--fresh-runs R` (1 to [`MAX_FRESH_RUNS`]): R repetitions, each in fresh workers.
    pub fresh_runs: usize,
    /// Which repetition this request is (0-based; set by the repetition loop).
    pub fresh_run: usize,
}

/// Largest `--fresh-runs`.
pub(crate) const MAX_FRESH_RUNS: usize = 100;

/// `--fresh-runs R`: 1 to [`MAX_FRESH_RUNS`].
pub(crate) fn check_fresh_runs(fresh_runs: usize) -> anyhow::Result<()> {
    if !(1..=MAX_FRESH_RUNS).contains(&fresh_runs) {
        crate::usage_bail!("--fresh-runs must be 1 to {MAX_FRESH_RUNS} (default 1)");
    }
    Ok(())
}

impl CollectiveRequest {
    /// Every file the run reads and writes, checked together before any work.
    pub(crate) fn files(&self) -> Files {
        let mut f = Files::new();
        self.gpu.add_to(&mut f);
        self.model.add_to(&mut f);
        self.export.add_to(&mut f);
        f
    }

    /// The ranks of a run that counts no GPUs (the model, the mock): [`ranks`] of the GPU flags.
    pub(crate) fn ranks(&self) -> anyhow::Result<usize> {
        ranks(&RankInputs::of(&self.gpu, None), DEFAULT_RANKS, &GPU_FLAGS)
    }

    /// The sizes to run: min, min*f, ... <= max, plus the explicit ones, each rounded down to a
    /// whole number of elements that splits evenly over `nranks` ranks; sorted, deduplicated.
    pub(crate) fn sizes(&self, nranks: usize) -> anyhow::Result<Vec<u64>> {
        if self.min_bytes == 0 || self.max_bytes < self.min_bytes {
            crate::usage_bail!(
                "-b/--minbytes must be positive and at most -e/--maxbytes (got {} and {})",
                self.min_bytes,
                self.max_bytes
            );
        }
        if self.step_factor < 2 {
            crate::usage_bail!("-f/--stepfactor must be at least 2");
        }
        for (flag, s) in [
            ("-b/--minbytes", self.min_bytes),
            ("-e/--maxbytes", self.max_bytes),
        ]
        .into_iter()
        .chain(self.sizes.iter().map(|&s| ("--sizes", s)))
        {
            if s > MAX_COLLECTIVE_BYTES {
                crate::usage_bail!(
                    "{flag} {s}: at most 16G ({MAX_COLLECTIVE_BYTES} bytes) per collective"
                );
            }
        }
        let unit = self.dtype.size() * nranks as u64;
        let out = std::iter::successors(Some(self.min_bytes), |s| s.checked_mul(self.step_factor))
            .take_while(|&s| s <= self.max_bytes)
            .chain(self.sizes.iter().copied());
        let mut v: Vec<u64> = vec![];
        for s in out {
            let r = s / unit * unit;
            if r == 0 {
                crate::note!(
                    "verifybench: size {s} dropped: smaller than one {} element per rank ({unit} bytes on {nranks} ranks)",
                    self.dtype.name()
                );
            } else {
                if r != s {
                    crate::note!(
                        "verifybench: size {s} rounded down to {r} (whole {} elements per rank on {nranks} ranks)",
                        self.dtype.name()
                    );
                }
                v.push(r);
            }
        }
        v.sort_unstable();
        v.dedup();
        if v.is_empty() {
            crate::usage_bail!("no size holds one element per rank: raise -b/--minbytes");
        }
        Ok(v)
    }
}

/// `worker`: one rank of a verify replay started by an external launcher.
#[derive(Debug, Clone)]
pub(crate) struct WorkerRequest {
    pub(crate) workload: Workload,
    /// Where rank 0 serves the NCCL id (else from MASTER_ADDR/MASTER_PORT).
    pub(crate) rendezvous: Option<Endpoint>,
    /// Seconds a rank waits for the others to join the rendezvous; `None`: `timeout`.
    pub(crate) rendezvous_timeout: Option<f64>,
    /// `--rendezvous-token-file`: the file holding the run's secret (else
    /// `VERIFYBENCH_RENDEZVOUS_TOKEN`, read by the worker; neither: an open rendezvous).
    pub(crate) rendezvous_token_file: Option<PathBuf>,
    /// `--cpu-affinity` of this rank.
    pub(crate) cpu_affinity: CpuAffinity,
    pub(crate) rank: Option<usize>,
    pub(crate) world_size: Option<usize>,
    pub(crate) local_rank: Option<usize>,
    pub(crate) graph: GraphChoice,
    pub(crate) mode: Vec<Mode>,
    pub(crate) launches_per_layer: u32,
    /// Launch the streaming (compute) kernels with programmatic dependent launch.
    pub(crate) pdl: bool,
    pub(crate) repeat: Repeat,
    /// Seconds without progress after which this rank aborts its communicator and exits.
    pub(crate) timeout: f64,
    pub(crate) nccl_lib: Option<PathBuf>,
    pub(crate) export: Exports,
    /// What rank 0 prints on stdout: the table, or the record as `--export-json` writes it.
    pub(crate) format: crate::output::Format,
    /// Host time before each launch in eager replay, a late rank.
    pub(crate) host_gaps: HostGapFlags,
}

impl WorkerRequest {
    /// Every file the rank reads (its token file and NCCL library too) and writes, checked
    /// together before any work.
    pub(crate) fn files(&self) -> Files {
        let mut f = Files::new();
        self.workload.add_to(&mut f);
        f.input(
            "--rendezvous-token-file",
            self.rendezvous_token_file.as_deref(),
        )
        .input("--nccl-lib", self.nccl_lib.as_deref());
        self.host_gaps.add_to(&mut f);
        self.export.add_to(&mut f);
        f
    }
}

/// Settings of the cost model (`--link`, `--profile`, `--proto`, `--algo`). The command line
/// fills `proto`/`algo` from NCCL_PROTO/NCCL_ALGO when the flags are absent.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSettings {
    /// Built-in link profile name.
    pub(crate) link: String,
    /// Calibrated profile file written by `verifybench model fit` (overrides `link`).
    pub(crate) profile: Option<PathBuf>,
    /// Protocols the model may pick, in NCCL_PROTO syntax; `None`: the fastest.
    pub(crate) proto: Option<String>,
    /// Algorithms the model may pick, in NCCL_ALGO syntax; `None`: the fastest.
    pub(crate) algo: Option<String>,
    /// `proto` came from the NCCL_PROTO environment variable, not `--proto` (for messages).
    pub(crate) proto_from_env: bool,
    /// `algo` came from the NCCL_ALGO environment variable, not `--algo` (for messages).
    pub(crate) algo_from_env: bool,
    /// The NCCL_* environment the run would give NCCL: NCCL_P2P_DISABLE and NCCL_SHM_DISABLE
    /// change the path the model prices ([`profile::apply_transport_env`]); every other
    /// variable (NCCL_PROTO/NCCL_ALGO come as `proto`/`algo`) is said to be not modeled.
    pub(crate) nccl_env: std::collections::BTreeMap<String, String>,
}

impl ModelSettings {
    /// `--profile`, added to a command's inputs.
    pub(crate) fn add_to(&self, f: &mut Files) {
        f.input("--profile", self.profile.as_deref());
    }
}

impl Default for ModelSettings {
    fn default() -> Self {
        ModelSettings {
            link: "pcie-gen5".into(),
            profile: None,
            proto: None,
            algo: None,
            proto_from_env: false,
            algo_from_env: false,
            nccl_env: Default::default(),
        }
    }
}

/// `--cpu-affinity`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CpuAffinity {
    /// The CPUs of the GPU's NUMA node (default).
    #[default]
    Auto,
    /// Leave the affinity as inherited.
    None,
    /// These CPUs.
    List(Vec<usize>),
}

/// `host:port` of the rendezvous, as given by `--rendezvous` or `MASTER_ADDR`/`MASTER_PORT`.
/// The host is resolved on every connection attempt (a name may resolve only once its node is
/// up).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
}

/// The export files of a measuring command (`--export-json/--export-csv/--export-markdown`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exports {
    /// The results as JSON records (the source of truth).
    pub(crate) export_json: Option<PathBuf>,
    /// The results as CSV.
    pub(crate) export_csv: Option<PathBuf>,
    /// The results as a Markdown table.
    pub(crate) export_markdown: Option<PathBuf>,
}

impl Exports {
    /// The requested export files, each with its flag, added to a command's outputs.
    pub(crate) fn add_to(&self, f: &mut Files) {
        f.output("--export-json", self.export_json.as_deref())
            .output("--export-csv", self.export_csv.as_deref())
            .output("--export-markdown", self.export_markdown.as_deref());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collective(min: u64, max: u64, f: u64, sizes: Vec<u64>, dtype: DType) -> CollectiveRequest {
        CollectiveRequest {
            op: CollectiveKind::AllReduce,
            min_bytes: min,
            max_bytes: max,
            step_factor: f,
            sizes,
            dtype,
            graph: GraphChoice::Both,
            backend: BackendKind::Model,
            gpu: GpuSpec::default(),
            repeat: Repeat::default(),
            model: ModelSettings::default(),
            export: Exports::default(),
            format: Default::default(),
            impls: vec![],
            fresh_runs: 1,
            fresh_run: 0,
        }
    }

    #[test]
    fn the_rank_count_is_the_strongest_source_given_and_sources_must_agree() {
        let rule = |i: RankInputs| ranks(&i, DEFAULT_RANKS, &GPU_FLAGS);
        let (d, g) = (Some(4), Some(4));
        // the world of a trace, the GPUs listed, --gpus, --tp, the default, in that order
        let world = RankInputs {
            world: Some(2),
            tp: Some(4),
            ..Default::default()
        };
        assert_eq!(rule(world).unwrap(), 2);
        assert_eq!(
            rule(RankInputs {
                devices: d,
                gpus: g,
                tp: Some(4),
                ..Default::default()
            })
            .unwrap(),
            4
        );
        assert_eq!(
            rule(RankInputs {
                tp: Some(16),
                ..Default::default()
            })
            .unwrap(),
            16
        );
        assert_eq!(rule(RankInputs::default()).unwrap(), 8);
        // one GPU running one rank's share of --tp 8 is one rank; without the share, refused
        let share = RankInputs {
            gpus: Some(1),
            tp: Some(8),
            one_rank_share: true,
            ..Default::default()
        };
        assert_eq!(rule(share).unwrap(), 1);
        let e = rule(RankInputs {
            one_rank_share: false,
            ..share
        })
        .unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert_eq!(e.to_string(), "--tp 8 and --gpus (1 GPUs) disagree: one rank per GPU, so give the same number (or only one of them)");
        let e = rule(RankInputs {
            devices: Some(2),
            gpus: g,
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "--gpus 4 and --devices (listing 2 GPUs) disagree: give one of them"
        );
        // a command's range: 2 to 4 here
        let narrow = RankRule {
            range: 2..=4,
            out_of_range: |n| format!("{n} out"),
            ..GPU_FLAGS
        };
        let e = ranks(
            &RankInputs {
                tp: Some(1),
                ..Default::default()
            },
            2,
            &narrow,
        )
        .unwrap_err();
        assert_eq!(
            (e.to_string().as_str(), crate::error::exit_code(&e)),
            ("1 out", 2)
        );
        assert_eq!(ranks(&RankInputs::default(), 3, &narrow).unwrap(), 3);
    }

    #[test]
    fn nccl_tests_style_size_range() {
        let c = collective(8192, 65536, 2, vec![43008], DType::Bf16);
        assert_eq!(c.sizes(2).unwrap(), vec![8192, 16384, 32768, 43008, 65536]);
        assert!(collective(65536, 8192, 2, vec![], DType::Bf16)
            .sizes(2)
            .is_err());
        // sizes round down to whole elements per rank
        assert_eq!(
            collective(10, 10, 2, vec![], DType::F32).sizes(2).unwrap(),
            vec![8]
        );
    }

    #[test]
    fn runs_are_eager_first_in_mode_order_without_repeats() {
        let r = runs(&[Mode::Full, Mode::Comm, Mode::Full], GraphChoice::Both);
        assert_eq!(
            r,
            vec![
                (false, Mode::Full),
                (true, Mode::Full),
                (false, Mode::Comm),
                (true, Mode::Comm)
            ]
        );
        assert_eq!(
            runs(&[Mode::Comm], GraphChoice::On),
            vec![(true, Mode::Comm)]
        );
    }

    #[test]
    fn a_schedule_file_goes_to_children_as_an_absolute_path_alone() {
        let w = Workload {
            schedule_file: Some(PathBuf::from("rel/s.json")),
            tp: Some(2),
            ..Default::default()
        };
        let a = w.to_args();
        assert_eq!(a.len(), 4, "{a:?}");
        assert_eq!(
            (a[0].as_str(), a[2].as_str(), a[3].as_str()),
            ("--schedule", "--tp", "2")
        );
        let p = PathBuf::from(&a[1]);
        assert!(p.is_absolute() && p.ends_with("rel/s.json"), "{a:?}");
    }

    #[test]
    fn workload_names_parse_back() {
        use crate::util::Named;
        for p in Phase::ALL {
            assert_eq!(p.name().parse::<Phase>().unwrap(), *p);
        }
        for r in Routing::ALL {
            assert_eq!(r.name().parse::<Routing>().unwrap(), *r);
        }
        for l in Logits::ALL {
            assert_eq!(l.name().parse::<Logits>().unwrap(), *l);
        }
        assert_eq!(
            "mock".parse::<BackendKind>().unwrap_err(),
            "'mock' is not one of: auto, nccl, model"
        );
    }
}
