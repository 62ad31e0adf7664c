//! The one result record every command writes (JSON is the source of truth).
//!
//! A record carries its provenance (tool version, commit, command line, host, GPUs, driver,
//! NCCL version and library path, the NCCL_* environment each worker saw, timestamps) and says
//! whether its numbers are `measured` or `modeled`. Readers check `schema_version`.
//!
//! The bottom layer: every module may use it, it uses only `model` and `measure` types,
//! [`crate::util`] and the plain implementation name [`Impl`] (defined beside the kernels). Reading and writing of records, arrays and JSON lines is in [`io`];
//! rendering them is [`crate::report`]'s.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub(crate) mod vocab;

use crate::util::{hostname, now_utc};
pub use vocab::Impl;
pub use vocab::Source;
pub(crate) use vocab::{
    CollectiveKind, CyclePart, DType, DrafterKind, KvSettings, Phase, Repetitions, Straggler,
    Summary,
};

pub(crate) mod io;
pub use io::read_records;

/// Bumped whenever a field changes meaning or a required field is added.
pub const SCHEMA_VERSION: u32 = 1;

/// One GPU as the driver reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    pub index: usize,
    pub name: String,
    pub pci_bus_id: String,
    pub memory_bytes: u64,
}

/// What one worker (rank) reported about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerInfo {
    pub rank: usize,
    pub pid: u32,
    pub device: usize,
    /// Every NCCL_* variable in the worker's own environment, as it saw it.
    pub nccl_env: BTreeMap<String, String>,
}

/// The NCCL one worker (rank) loaded, as it reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WorkerNccl {
    pub(crate) rank: usize,
    pub(crate) pid: u32,
    /// The version `ncclGetVersion` returned in the worker ("2.28.3").
    pub(crate) version: Option<String>,
    /// The library file the worker mapped (resolved path, from its own /proc/self/maps).
    pub(crate) library: Option<String>,
}

/// Who made a record, where, when and with what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub(crate) tool_version: String,
    pub(crate) git_commit: String,
    pub(crate) command_line: Vec<String>,
    pub host: String,
    pub(crate) started_utc: String,
    pub(crate) finished_utc: String,
    /// `nccl`, `model`, `torch` (the PyTorch peer), `cuda` (one-GPU measurements without NCCL:
    /// `bandwidth`), or `none` for pure computations.
    pub backend: String,
    #[serde(default)]
    pub launcher: Option<String>,
    #[serde(default)]
    pub gpus: Vec<GpuInfo>,
    #[serde(default)]
    pub(crate) driver_version: Option<String>,
    #[serde(default)]
    pub nccl_version: Option<String>,
    #[serde(default)]
    pub(crate) nccl_library: Option<String>,
    #[serde(default)]
    pub workers: Vec<WorkerInfo>,
    /// The NCCL each worker loaded, rank by rank: what `nccl_version` and `nccl_library` say
    /// of the first rank alone (empty in records of runs without NCCL, and in older records).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) worker_nccl: Vec<WorkerNccl>,
    /// Cost-model profile the numbers came from (modeled records).
    #[serde(default)]
    pub(crate) model_profile: Option<String>,
    #[serde(default)]
    pub notes: Vec<String>,
    /// How the ranks' times of one sample became the sample's time (`--rank-time`); `None` in
    /// records without ranks and in records written before the flag (then the slowest rank).
    #[serde(default)]
    pub(crate) rank_time: Option<RankTime>,
}

/// How the ranks' times of one timed sample become the sample's time (`--rank-time`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RankTime {
    /// The slowest rank's time: what bounds a verify step, which waits for every rank.
    #[default]
    Max,
    /// The mean over ranks, as nccl-tests reports by default (`-a 1`).
    Mean,
}

impl RankTime {
    /// The name `--rank-time` takes.
    pub(crate) fn name(self) -> &'static str {
        match self {
            RankTime::Max => "max",
            RankTime::Mean => "mean",
        }
    }

    /// The sample's time from the ranks' times of that sample (none: `None`).
    pub(crate) fn reduce(self, ranks: &[f64]) -> Option<f64> {
        if ranks.is_empty() {
            return None;
        }
        Some(match self {
            RankTime::Max => ranks.iter().copied().fold(f64::MIN, f64::max),
            RankTime::Mean => ranks.iter().sum::<f64>() / ranks.len() as f64,
        })
    }

    /// What the reduction is, for a header line.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            RankTime::Max => "per sample the slowest rank's time (--rank-time max)",
            RankTime::Mean => {
                "per sample the mean over ranks, as nccl-tests -a 1 (--rank-time mean)"
            }
        }
    }
}

impl std::str::FromStr for RankTime {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "max" => Ok(RankTime::Max),
            "mean" => Ok(RankTime::Mean),
            _ => Err(format!(
                "--rank-time '{s}': give max (the slowest rank, the default) or mean (as nccl-tests -a 1)"
            )),
        }
    }
}

impl Provenance {
    /// Provenance of this process, with start time `started_utc` and finish time now.
    pub fn here(backend: &str, started_utc: String) -> Provenance {
        Provenance {
            tool_version: env!("CARGO_PKG_VERSION").into(),
            git_commit: env!("VERIFYBENCH_GIT_COMMIT").into(),
            command_line: std::env::args().collect(),
            host: hostname(),
            started_utc,
            finished_utc: now_utc(),
            backend: backend.into(),
            launcher: None,
            gpus: Vec::new(),
            driver_version: None,
            nccl_version: None,
            nccl_library: None,
            workers: Vec::new(),
            worker_nccl: Vec::new(),
            model_profile: None,
            notes: Vec::new(),
            rank_time: None,
        }
    }
}

/// The workload a timing belongs to (enough to tell two runs apart, and to refuse mixing them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedWorkload {
    pub model: String,
    pub phase: Phase,
    pub tp: u64,
    pub tokens: u64,
    pub dtype: DType,
    pub schedule_hash: String,
    pub n_all_reduce: u64,
    pub(crate) n_all_gather: u64,
    pub(crate) all_reduce_bytes_per_rank: u64,
    pub(crate) all_gather_bytes_per_rank: u64,
    /// `null` when the model's weights are not known (a config the table could not read: the
    /// schedule holds the collectives only); never 0 for unknown.
    pub weight_bytes_per_rank: Option<u64>,
    /// The batch, the context, the weights' formats and the cycle (flattened into the
    /// workload's JSON).
    #[serde(default, flatten)]
    pub facts: Box<WorkloadFacts>,
}

/// What a workload served and streamed besides its collectives: the batch, the context, the
/// weights' formats, and the cycle of a `--phase cycle` record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadFacts {
    /// Requests in the batch (`--concurrency`): `tokens` counts all of theirs.
    #[serde(default = "crate::util::one")]
    pub(crate) concurrency: u64,
    /// Context tokens per request whose KV cache each forward reads (`--context`; 0: none).
    #[serde(default)]
    pub(crate) context: u64,
    /// The KV cache's element type and context sharding, with a context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) kv: Option<KvSettings>,
    /// KV cache bytes one rank reads per forward, with a context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) kv_bytes_per_rank: Option<u64>,
    /// The storage format of each kind of weights streamed (`"routed_experts": "int4-g32"`);
    /// empty when the weights are not known.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub weight_formats: BTreeMap<String, String>,
    /// `--weights` / `--expert-weights` where they replaced the checkpoint's formats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) weights_override: Option<String>,
    /// The speculative cycle of a `--phase cycle` record (the workload's other fields describe
    /// the verify).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cycle: Option<CycleWorkload>,
}

impl Default for WorkloadFacts {
    fn default() -> Self {
        WorkloadFacts {
            concurrency: 1,
            context: 0,
            kv: None,
            kv_bytes_per_rank: None,
            weight_formats: BTreeMap::new(),
            weights_override: None,
            cycle: None,
        }
    }
}

/// What a cycle record replayed or priced besides its verify.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CycleWorkload {
    pub(crate) drafter: DrafterKind,
    /// k: the tokens drafted per request per cycle.
    pub(crate) draft_steps: u64,
    /// Tokens per request of the verify (k+1, or a tree's).
    pub(crate) verify_tokens: u64,
    /// The draft forwards of one cycle, in order.
    pub(crate) draft: Vec<ForwardWorkload>,
    /// The plain decode step of the same batch.
    pub(crate) decode: ForwardWorkload,
}

/// One forward of a cycle: its tokens (all requests'), schedule hash and bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ForwardWorkload {
    pub(crate) tokens: u64,
    pub(crate) schedule_hash: String,
    pub(crate) n_collectives: u64,
    pub(crate) weight_bytes_per_rank: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) kv_bytes_per_rank: Option<u64>,
}

/// What a verify replay contained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Only the collectives.
    Comm,
    /// Only the weight-streaming compute (and launch load).
    Compute,
    /// Collectives and compute interleaved in schedule order.
    Full,
}

crate::named_enum!(Mode {
    Comm => "comm": "Only the collectives.",
    Compute => "compute": "Only the weight-streaming compute (and launch load).",
    Full => "full": "Collectives and compute interleaved in schedule order.",
});

/// Time attributed to one part of a verify (an op kind, or a collective kind).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Part {
    pub name: String,
    pub us: f64,
    pub(crate) count: u64,
}

/// One replay configuration of a verify: graph or eager, in one mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerifyRun {
    pub graph: bool,
    pub mode: Mode,
    /// Per-verify time over all timed replays (slowest rank per replay).
    pub per_verify: Summary,
    /// Median per-verify time divided by the number of collectives replayed.
    pub per_collective_us: f64,
    /// Where the time goes, per op kind.
    #[serde(default)]
    pub breakdown: Vec<Part>,
    /// Elements that differed from the expected result (all ranks, all checks).
    pub wrong: u64,
    pub iterations: u64,
    pub warmup: u64,
    /// What a profiler would show inside the collectives of one verify, split into transfer and
    /// waiting: measured in a separate per-collective pass, or modeled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_collective: Option<InCollective>,
}

/// Time inside the collectives of one verify (the mean over ranks of every collective's
/// duration): transfer = the shortest rank's duration per collective, waiting = the rest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InCollective {
    /// Transfer + waiting per verify, us (what a profiler shows in the collectives).
    pub(crate) in_collective_us: f64,
    /// Sum over the collectives of the shortest rank's duration, per verify, us.
    pub(crate) transfer_us: f64,
    /// Waiting per verify averaged over ranks, us.
    pub(crate) waiting_us: f64,
    /// Waiting per verify of each rank, us.
    pub(crate) waiting_per_rank_us: Vec<f64>,
    /// Median start skew of a collective (latest - earliest start), us; `None` when unknown.
    #[serde(default)]
    pub(crate) median_skew_us: Option<f64>,
    /// The rank most often last to start a collective.
    #[serde(default)]
    pub(crate) straggler: Option<Straggler>,
    /// A lower bound of `in_collective_us` (modeled: hosts re-synchronised at every collective).
    #[serde(default)]
    pub(crate) lower_bound_us: Option<f64>,
    /// Verifies the pass timed (0 when modeled).
    pub(crate) iterations: u64,
    /// `measured`, `modeled` or `FAKE`, and how (alignment of the ranks' clocks, model).
    pub(crate) how: String,
}

/// The streaming kernel at one token count, measured in the same run as the replay (the
/// slowest rank), with the replay's streaming launches at that count.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StreamRate {
    pub(crate) tokens: u64,
    /// Weights read per second by one launch over the whole weight pool (best of three), GB/s:
    /// the read bandwidth where the kernel is memory-bound, its flop rate / tokens (2 flops per
    /// bf16 weight per token) where it is compute-bound.
    pub(crate) gbps: f64,
    /// The cost of one launch beyond its bytes, us (back-to-back launches of this count's mean
    /// size against one launch of their bytes).
    pub(crate) fixed_us: f64,
    /// The replay's streaming launches at this count per forward.
    pub(crate) launches: u64,
    /// Their weight bytes.
    pub(crate) bytes: u64,
}

impl StreamRate {
    /// This count's share of the compute prediction: bytes / rate + launches x fixed cost, us.
    pub(crate) fn predicted_us(&self) -> f64 {
        self.bytes as f64 / (self.gbps * 1e3) + self.launches as f64 * self.fixed_us
    }
}

/// `verify`: a replay of the schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerifyResult {
    pub workload: RecordedWorkload,
    pub runs: Vec<VerifyRun>,
    /// Read bandwidth of the weight-streaming kernel measured in the same run (slowest rank),
    /// GB/s, when compute was replayed.
    #[serde(default)]
    pub stream_gbps: Option<f64>,
    /// The schedule's own prediction of the compute-only time (us): with `stream_rates`, the
    /// sum over its token counts of bytes / rate + launches x fixed cost per launch; in records
    /// without them, weight bytes per rank divided by `stream_gbps`.
    #[serde(default)]
    pub predicted_compute_us: Option<f64>,
    /// The streaming kernel at each token count the replay launched it with (the forward's
    /// tokens for the dense ops, each routed-expert group's own), measured in the same run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stream_rates: Vec<StreamRate>,
    /// The same replays with the all-reduces on a custom P2P implementation (`--impl`), in
    /// the order asked; the all-gather stays NCCL's. Empty in records without them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub p2p: Vec<ImplRun>,
    /// A cycle record's parts (`--phase cycle`): the plain decode step, the k draft forwards
    /// and the verify, each run like `runs` (which hold the whole cycle: drafts, then the
    /// verify). Empty in records of one forward.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<PartRun>,
}

/// One part of a speculative cycle (`--phase cycle`), replayed or priced like a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartRun {
    pub(crate) part: CyclePart,
    #[serde(flatten)]
    pub(crate) run: VerifyRun,
}

/// One replay of the verify schedule with its all-reduces on implementation `imp`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImplRun {
    pub imp: Impl,
    #[serde(flatten)]
    pub run: VerifyRun,
}

impl VerifyResult {
    /// The runs of `workload` alone: no streaming bandwidth or compute prediction (nothing
    /// streamed was measured), no custom P2P runs, no cycle parts.
    pub fn of(workload: RecordedWorkload, runs: Vec<VerifyRun>) -> VerifyResult {
        VerifyResult {
            workload,
            runs,
            stream_gbps: None,
            predicted_compute_us: None,
            stream_rates: vec![],
            p2p: vec![],
            parts: vec![],
        }
    }

    /// The run with that graph flag and mode, if present.
    pub fn run(&self, graph: bool, mode: Mode) -> Option<&VerifyRun> {
        self.runs
            .iter()
            .find(|r| r.graph == graph && r.mode == mode)
    }
}

/// Timing of one collective size in one launch mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollTiming {
    /// Median time per operation.
    pub time_us: f64,
    pub summary: Summary,
    /// Algorithm bandwidth, GB/s: size / time.
    pub algbw_gbps: f64,
    /// Bus bandwidth, GB/s: algbw x the collective's bus factor.
    pub busbw_gbps: f64,
    pub wrong: u64,
}

/// One size of a `collective` sweep, nccl-tests style.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectiveRow {
    /// nccl-tests' "size": bytes of the larger buffer (all-gather: output; reduce-scatter: input).
    pub size_bytes: u64,
    /// Elements of that buffer.
    pub count: u64,
    #[serde(default)]
    pub eager: Option<CollTiming>,
    #[serde(default)]
    pub graph: Option<CollTiming>,
    /// The custom P2P all-reduces at this size (`--impl`), in the order asked; `eager`/`graph`
    /// above stay NCCL's. Empty in records without them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub p2p: Vec<ImplTiming>,
}

/// One custom implementation's timing of one collective size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImplTiming {
    pub imp: Impl,
    #[serde(default)]
    pub(crate) eager: Option<CollTiming>,
    #[serde(default)]
    pub graph: Option<CollTiming>,
}

/// `collective`: one operation over a range of sizes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectiveResult {
    pub op: CollectiveKind,
    pub dtype: DType,
    pub nranks: usize,
    pub rows: Vec<CollectiveRow>,
}

/// Algorithm bandwidth (GB/s) of `bytes` moved in `time_us`.
pub fn algbw_gbps(bytes: u64, time_us: f64) -> f64 {
    if time_us <= 0.0 {
        return 0.0;
    }
    bytes as f64 / (time_us * 1e3)
}

/// The payload of a record, tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "result", rename_all = "snake_case")]
pub enum Body {
    Collective(CollectiveResult),
    Verify(VerifyResult),
    /// Records of other kinds keep their own typed struct and store it here as JSON until they
    /// earn a variant: sweep points, bandwidth, selftest, env, compare and cost-model profiles
    /// (the names in [`kinds`]).
    Other {
        name: String,
        data: serde_json::Value,
    },
}

/// The names of the [`Body::Other`] records this version writes, and which command writes each.
pub mod kinds {
    /// One finished point of `sweep --results` (JSON lines).
    pub(crate) const SWEEP_POINT: &str = "sweep_point";
    /// `bandwidth --export-json`: one entry per GPU.
    pub const BANDWIDTH: &str = "bandwidth";
    /// `selftest --export-json`: one entry per check.
    pub const SELFTEST: &str = "selftest";
    /// `env --format json`: the machine as `env` found it.
    pub const ENV: &str = "env";
    /// `compare --format json`: the comparison of verify records.
    pub const COMPARE: &str = "compare";
    /// `model fit -o`: a cost-model profile (`costmodel::profile::PROFILE_KIND` is this).
    pub const PROFILE: &str = "verifybench-cost-profile";
    /// `choose --decision FILE`: which all-reduce for each shape, under the key it depends on.
    pub(crate) const ALLREDUCE_CHOICE: &str = "allreduce_choice";
    /// `explain --format json` / `--export-json`: the answer, with its Markdown (`markdown`).
    pub(crate) const EXPLAIN: &str = "explain";

    /// What a file of kind `name` is and which command reads it, for messages.
    pub(crate) fn describe(name: &str) -> String {
        match name {
            SWEEP_POINT => "sweep points (from `verifybench sweep --results`; read by `sweep --resume` and `report`)".into(),
            BANDWIDTH => "a bandwidth measurement (from `verifybench bandwidth --export-json`; read by `report`)".into(),
            SELFTEST => "selftest results (from `verifybench selftest --export-json`; read by `report`)".into(),
            ENV => "a machine description (from `verifybench env --format json`; no command reads it back)".into(),
            COMPARE => "a comparison (from `verifybench compare --format json`; no command reads it back: compare its input records again)".into(),
            EXPLAIN => "an answer (from `verifybench explain --export-json`; read by `report`, which renders it first)".into(),
            ALLREDUCE_CHOICE => "an all-reduce decision (from `verifybench choose --decision`; read by `choose --decision` and `explain --allreduce-choice`)".into(),
            PROFILE => "a cost-model profile (from `verifybench model fit`; read by --profile of verify, collective and sweep, and --base-profile of model fit)".into(),
            k => format!("a '{k}' record"),
        }
    }
}

impl Body {
    pub fn kind(&self) -> &str {
        match self {
            Body::Collective(_) => "collective",
            Body::Verify(_) => "verify",
            Body::Other { name, .. } => name,
        }
    }
}

/// A result record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub(crate) schema_version: u32,
    /// `measured` or `modeled`.
    pub source: Source,
    pub provenance: Provenance,
    #[serde(flatten)]
    pub body: Body,
    /// `--fresh-runs R`: every repetition's median of each figure (absent in records of one
    /// run, and in files written before repetitions existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) repetitions: Vec<Repeated>,
}

/// One figure of a record measured in R fresh sets of workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Repeated {
    /// What the figure is: `per verify, graph, comm` or `43008 B, eager`.
    pub(crate) what: String,
    pub(crate) graph: bool,
    /// The collective size of a `collective` row; `None` for a verify run.
    #[serde(default)]
    pub(crate) size_bytes: Option<u64>,
    pub(crate) reps: Repetitions,
}

impl Record {
    pub fn new(source: Source, provenance: Provenance, body: Body) -> Record {
        Record {
            schema_version: SCHEMA_VERSION,
            source,
            provenance,
            body,
            repetitions: vec![],
        }
    }

    /// A record of a kind without its own variant ([`kinds`]): `data` serialized as its payload.
    pub fn other(
        source: Source,
        provenance: Provenance,
        name: &str,
        data: &impl Serialize,
    ) -> anyhow::Result<Record> {
        Ok(Record::new(
            source,
            provenance,
            Body::Other {
                name: name.into(),
                data: serde_json::to_value(data)?,
            },
        ))
    }

    /// The payload of a [`Body::Other`] record of kind `name`.
    pub(crate) fn other_data(&self, name: &str) -> Option<&serde_json::Value> {
        match &self.body {
            Body::Other { name: n, data } if n == name => Some(data),
            _ => None,
        }
    }

    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).expect("records serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::write_file;

    fn sample() -> Record {
        let s = crate::model::build(
            &crate::model::presets::preset("kimi-k2.5").unwrap(),
            &crate::model::ScheduleOptions {
                tp: 2,
                ..Default::default()
            },
            Phase::Verify,
        )
        .unwrap();
        let summary = Summary::from_samples(&[900.0, 910.0, 905.0]).unwrap();
        Record::new(
            Source::Modeled,
            Provenance::here("model", now_utc()),
            Body::Verify(VerifyResult::of(
                RecordedWorkload::of(&s),
                vec![VerifyRun {
                    graph: true,
                    mode: Mode::Comm,
                    per_collective_us: summary.median_us / 124.0,
                    per_verify: summary,
                    breakdown: vec![],
                    wrong: 0,
                    iterations: 3,
                    warmup: 1,
                    in_collective: None,
                }],
            )),
        )
    }

    #[test]
    fn round_trip_through_json_and_lines() {
        let r = sample();
        let dir = tempfile::tempdir().unwrap();
        let one = dir.path().join("one.json");
        write_file(&one, r.to_json_pretty().as_bytes()).unwrap();
        assert_eq!(read_records(&one).unwrap(), vec![r.clone()]);
        let lines = dir.path().join("many.jsonl");
        let text = format!(
            "{}\n{}\n",
            serde_json::to_string(&r).unwrap(),
            serde_json::to_string(&r).unwrap()
        );
        std::fs::write(&lines, text).unwrap();
        assert_eq!(read_records(&lines).unwrap().len(), 2);
    }

    #[test]
    fn json_carries_kind_source_and_version() {
        let v: serde_json::Value = serde_json::from_str(&sample().to_json_pretty()).unwrap();
        assert_eq!(v["kind"], "verify");
        assert_eq!(v["source"], "modeled");
        assert_eq!(v["schema_version"], SCHEMA_VERSION);
        assert_eq!(v["result"]["workload"]["n_all_reduce"], 123);
        // a record is measured or modeled, never given (the other sources are not read back)
        let given = v.to_string().replace("\"modeled\"", "\"given\"");
        let e = serde_json::from_str::<Record>(&given)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown variant `given`, expected `measured` or `modeled`"),
            "{e}"
        );
    }

    #[test]
    fn wrong_schema_is_refused_with_file_name() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("old.json");
        let mut v: serde_json::Value = serde_json::from_str(&sample().to_json_pretty()).unwrap();
        v["schema_version"] = 99.into();
        std::fs::write(&p, v.to_string()).unwrap();
        let e = read_records(&p).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("old.json") && e.to_string().contains("99"));
        std::fs::write(&p, "{\"a\": 1}").unwrap();
        assert!(read_records(&p)
            .unwrap_err()
            .to_string()
            .contains("no schema_version"));
    }
}
