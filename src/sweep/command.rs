//! The `sweep` command's driver: resume merge, runner wiring (subprocess children or the
//! in-process mock of `--debug-mode`), progress lines, the ranking table and its exports.
//! The flags live in `cli/sweep.rs`; the pieces (matrix, environments, runner, log parsing,
//! ranking) in the sibling modules.

use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use super::matrix;
use super::results::{self, ResultsFile, SweepPoint};
use super::runner::{MockRunner, PointRunner, SubprocessRunner};
use super::{self as sw, env, known, mock, rank, rounds, signal, SweepConfig};
use crate::costmodel::ModelSettings;
use crate::record::{Mode, Record, Source, Workload};
use crate::report::export::{csv_table, markdown_table, text_table, Table};
use crate::report::Exports;
use crate::request::{BackendKind, GpuSpec, GraphChoice, Launcher, Repeat};

/// `sweep`: a cross product of NCCL settings, each point in fresh workers.
#[derive(Debug, Clone)]
pub struct SweepRequest {
    pub workload: crate::request::Workload,
    /// `-L NAME=a,b,c` lists.
    pub lists: Vec<String>,
    /// `--set NAME=VALUE` literal values.
    pub sets: Vec<String>,
    /// A built-in list of variations (`pcie`).
    pub preset: Option<String>,
    pub graph: GraphChoice,
    pub mode: Mode,
    pub backend: BackendKind,
    pub gpu: GpuSpec,
    pub repeat: Repeat,
    pub model: ModelSettings,
    /// Rounds (`--rounds`, >= 1): every round runs every point once, in its own shuffled order.
    pub rounds: usize,
    /// Seed of the rounds' shuffles (recorded in every pair's results line via its round).
    pub seed: u64,
    /// Extra relative margin on top of the measured noise floor (`--noise-margin`, default 0).
    pub noise_margin: f64,
    /// Seconds one child may take before it is killed and the point recorded as failed.
    pub point_timeout: f64,
    pub results: Option<PathBuf>,
    pub resume: Option<PathBuf>,
    pub retry_failed: bool,
    pub log_dir: Option<PathBuf>,
    pub no_probe: bool,
    pub export: Exports,
    pub export_table_markdown: Option<PathBuf>,
    pub export_table_csv: Option<PathBuf>,
    /// What stdout gets at the end: the ranking, or (json) the verify records `--export-json`
    /// writes; with json the header and summary lines go to stderr.
    pub format: crate::output::Format,
    /// No progress, no per-point lines and no notes (the ranking or JSON is still printed).
    pub quiet: bool,
    /// Fake every point in process (no child, no GPU): the mock backend.
    pub debug_mode: bool,
    /// Host gaps and a late rank, passed to every child.
    pub host_gaps: crate::request::HostGapFlags,
}

fn default_tp(a: &SweepRequest, backend: BackendKind) -> u64 {
    if let Some(tp) = a.workload.tp {
        return tp;
    }
    if let Some(g) = a.gpu.gpus {
        return g as u64;
    }
    if let Some(d) = &a.gpu.devices {
        return d.len() as u64;
    }
    if backend == BackendKind::Nccl {
        crate::comm::device_count().max(1) as u64
    } else {
        8
    }
}

/// The arguments of every child: `verify` + workload + backend + launcher + graph + mode +
/// GPU and model flags.
pub fn verify_args(a: &SweepRequest, backend: BackendKind, tp: u64) -> Vec<String> {
    let mut w = a.workload.clone();
    w.tp = Some(tp);
    let mut v = vec!["verify".to_string()];
    v.extend(w.to_args());
    v.extend(
        [
            "--backend",
            backend.name(),
            "--launcher",
            a.gpu.launcher.name(),
            "--graph",
            a.graph.name(),
            "--mode",
            a.mode.name(),
        ]
        .map(String::from),
    );
    if let Some(g) = a.gpu.gpus {
        v.extend(["--gpus".into(), g.to_string()]);
    }
    if let Some(d) = &a.gpu.devices {
        let list: Vec<String> = d.iter().map(|x| x.to_string()).collect();
        v.extend(["--devices".into(), list.join(",")]);
    }
    if let Some(p) = &a.gpu.nccl_lib {
        v.extend(["--nccl-lib".into(), p.display().to_string()]);
    }
    v.extend(["--timeout".into(), a.gpu.timeout.to_string()]);
    v.extend(a.host_gaps.to_args());
    v.extend(["--cpu-affinity".into(), a.gpu.cpu_affinity.arg()]);
    v.extend(["--link".into(), a.model.link.clone()]);
    if let Some(p) = &a.model.profile {
        v.extend(["--profile".into(), p.display().to_string()]);
    }
    v
}

/// Everything printed after the sweep: the first round's table, notes, failures, then the
/// rounds' judgement ([`rounds_block`]) from `pairs` (every finished pair, all rounds).
pub fn render(
    points: &[SweepPoint],
    pairs: &[SweepPoint],
    mode: Mode,
    rounds: usize,
    margin: f64,
) -> (String, Table) {
    let r = rank::rank(points, mode);
    let full = rank::table(&r);
    let notes_col = full.headers.len() - 1;
    let shown = Table {
        headers: full.headers[..notes_col].to_vec(),
        rows: full
            .rows
            .iter()
            .map(|row| row[..notes_col].to_vec())
            .collect(),
    };
    let mut out = String::new();
    let source = match r.source.as_str() {
        "none" => "no point was timed".to_string(),
        s => format!("{s} numbers"),
    };
    let first = if rounds > 1 {
        format!("round 1 of {rounds}, ")
    } else {
        String::new()
    };
    out.push_str(&format!(
        "# {first}per-verify time in us (median ± standard error within the run), {source}; ratios are to the baseline (defaults)\n"
    ));
    out.push_str(&text_table(&shown));
    let mut notes = String::new();
    let mut hints: Vec<(String, Vec<String>)> = vec![];
    for row in &full.rows {
        let p = r
            .rows
            .iter()
            .map(|x| x.point)
            .chain(r.failed.iter().copied())
            .find(|p| p.point_id == row[1]);
        let note = match p {
            Some(p) if !p.ok() => p.reason.clone().unwrap_or_default(),
            _ => row[notes_col].clone(),
        };
        if !note.is_empty() {
            notes.push_str(&format!("  {}: {note}\n", row[1]));
        }
        if let Some(h) = p.and_then(|p| p.hint.clone()) {
            match hints.iter_mut().find(|(x, _)| *x == h) {
                Some((_, ids)) => ids.push(row[1].clone()),
                None => hints.push((h, vec![row[1].clone()])),
            }
        }
    }
    for p in &r.failed {
        if let Some(t) = &p.stderr_tail {
            let last = t.lines().last().unwrap_or("");
            if !p.reason.as_deref().unwrap_or("").contains(last.trim()) {
                notes.push_str(&format!("  {} stderr: {last}\n", p.point_id));
            }
        }
        if !p.log_paths.is_empty() {
            let paths: Vec<String> = p
                .log_paths
                .iter()
                .map(|x| x.display().to_string())
                .collect();
            notes.push_str(&format!("  {} NCCL log: {}\n", p.point_id, paths.join(" ")));
        }
    }
    for (h, ids) in hints {
        notes.push_str(&format!("  HINT ({}): {h}\n", ids.join(", ")));
    }
    if !notes.is_empty() {
        out.push_str("\nNotes:\n");
        out.push_str(&notes);
    }
    out.push('\n');
    if r.rows.iter().all(|x| x.wrong > 0) {
        out.push_str("No point ran without errors: nothing to recommend.\n");
    } else {
        out.push_str(&rounds_block(
            points,
            pairs,
            r.primary_graph,
            rounds,
            margin,
        ));
    }
    (out, full)
}

/// The judgement of the rounds: per point the paired ratio to the baseline and its 95%
/// interval (eager and graph), the measured noise floor of each mode, each mode's verdict,
/// a line when the rounds are too few, and the recommendation of the primary mode.
pub fn rounds_block(
    points: &[SweepPoint],
    pairs: &[SweepPoint],
    primary_graph: bool,
    rounds: usize,
    margin: f64,
) -> String {
    use super::rounds as rd;
    let timings: Vec<rd::RoundTiming> = pairs.iter().map(sw::round_timing).collect();
    let Some(base) = points.iter().find(|p| p.overrides.is_empty()) else {
        return "No baseline point: nothing to pair with, nothing recommended.\n".into();
    };
    let ids: Vec<String> = points.iter().map(|p| p.point_id.clone()).collect();
    let verdicts: Vec<rd::Verdict> = [false, true]
        .into_iter()
        .map(|g| rd::judge_with_margin(&timings, &ids, &base.point_id, g, margin))
        .filter(|v| v.noise.is_some() || !v.ratios.is_empty())
        .collect();
    let mut out = String::new();
    let cell = |v: Option<&rd::Verdict>, id: &str| -> String {
        let Some(r) = v.and_then(|v| v.ratios.iter().find(|r| r.point_id == id)) else {
            return "-".into();
        };
        match r.interval {
            Some((lo, hi)) => format!("{:.3} [{lo:.3}, {hi:.3}] ({})", r.ratio, r.per_round.len()),
            None => format!("{:.3} (1)", r.ratio),
        }
    };
    let eager = verdicts.iter().find(|v| !v.graph);
    let graph = verdicts.iter().find(|v| v.graph);
    let table = Table {
        headers: vec![
            "point".into(),
            "eager ratio [95%] (rounds)".into(),
            "graph ratio [95%] (rounds)".into(),
        ],
        rows: points
            .iter()
            .filter(|p| p.point_id != base.point_id)
            .map(|p| {
                vec![
                    p.point_id.clone(),
                    cell(eager, &p.point_id),
                    cell(graph, &p.point_id),
                ]
            })
            .collect(),
    };
    out.push_str(&format!(
        "# paired ratios to the baseline over {rounds} round(s) (geometric mean of the per-round ratios, t interval on their logs)\n"
    ));
    out.push_str(&text_table(&table));
    for v in &verdicts {
        let mode = if v.graph { "graph" } else { "eager" };
        if let Some(nf) = &v.noise {
            out.push_str(&format!(
                "noise floor ({mode}): ±{:.1}%, the largest deviation of the baseline's {} rounds from their median {:.1} us\n",
                nf.rel * 100.0,
                nf.rounds,
                nf.baseline_median_us
            ));
        }
        if v.noise.as_ref().is_some_and(|nf| nf.rel == 0.0) {
            out.push_str(&format!(
                "noise floor ({mode}): the baseline's rounds are identical: numbers without between-run noise (modeled), so any ratio below 1 passes\n"
            ));
        }
    }
    for v in &verdicts {
        out.push_str(&v.sentence);
        out.push('\n');
        if let Some(line) = rd::rounds_advice(v, rounds) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    let primary = verdicts
        .iter()
        .find(|v| v.graph == primary_graph)
        .or(verdicts.first());
    let rec = primary.and_then(|v| {
        let id = v.recommended.as_ref()?;
        Some((v, points.iter().find(|p| &p.point_id == id)?))
    });
    match rec {
        Some((v, p)) => {
            let mode = if v.graph { "graph" } else { "eager" };
            out.push_str(&format!(
                "Recommendation ({mode} replay, held over {rounds} rounds): {}\n",
                rank::label(p)
            ));
            for (k, val) in &p.overrides {
                out.push_str(&format!("  export {k}={}\n", rank::shell_quote(val)));
            }
        }
        None => out.push_str(&format!(
            "Recommendation: keep NCCL's defaults ({} replay): no setting's whole interval lies below 1 minus the measured noise floor\n",
            if primary.map_or(primary_graph, |v| v.graph) { "graph" } else { "eager" }
        )),
    }
    out
}

/// Largest `--rounds`.
pub const MAX_ROUNDS: usize = 100;

/// Where a pair's child time went, for its progress line.
fn time_line(sp: &SweepPoint, split: Option<(Option<f64>, f64)>) -> String {
    let probe = if sp.probe_wall_s > 0.0 {
        format!("probe {:.1} s, ", sp.probe_wall_s)
    } else {
        String::new()
    };
    match split {
        Some((init, timed)) => format!(
            "{probe}timed child {:.1} s: NCCL init {}, timed loops ~{timed:.2} s, worker start and the rest {:.1} s",
            sp.timed_wall_s,
            init.map_or("n/a".into(), |x| format!("{x:.2} s")),
            (sp.timed_wall_s - init.unwrap_or(0.0) - timed).max(0.0)
        ),
        None => format!("{probe}timed child {:.1} s", sp.timed_wall_s),
    }
}

/// The results file and the logs folder: the flags', or fresh default names
/// (`sweep-<timestamp>-<pid>[-<n>].jsonl` and its `.logs` folder, neither of which exists).
fn output_paths(a: &SweepRequest) -> anyhow::Result<(PathBuf, PathBuf)> {
    let results = a.results.clone().or_else(|| a.resume.clone());
    let results = match results {
        Some(r) => r,
        None => {
            let stamp = chrono::Utc::now().format("%Y%m%d-%H%M%S").to_string();
            let pid = std::process::id();
            (0..)
                .map(|n| match n {
                    0 => PathBuf::from(format!("sweep-{stamp}-{pid}.jsonl")),
                    n => PathBuf::from(format!("sweep-{stamp}-{pid}-{n}.jsonl")),
                })
                .find(|p| {
                    !p.exists() && (a.log_dir.is_some() || !p.with_extension("logs").exists())
                })
                .expect("some name is free")
        }
    };
    let log_dir = a
        .log_dir
        .clone()
        .unwrap_or_else(|| results.with_extension("logs"));
    Ok((results, log_dir))
}

/// Every output of the sweep checked before any point runs: the results file (an existing one
/// must be a sweep of this workload), the logs folder, the exports.
fn check_outputs(
    a: &SweepRequest,
    results_path: &std::path::Path,
    log_dir: &std::path::Path,
    workload: &Workload,
) -> anyhow::Result<()> {
    let results_flag = if a.results.is_some() {
        "--results"
    } else if a.resume.is_some() {
        "--resume"
    } else {
        "the default results file"
    };
    let mut outputs = vec![(results_flag, results_path)];
    outputs.extend(a.export.outputs());
    if let Some(p) = &a.export_table_markdown {
        outputs.push(("--export-table-markdown", p));
    }
    if let Some(p) = &a.export_table_csv {
        outputs.push(("--export-table-csv", p));
    }
    crate::util::check_outputs(&outputs, &[])?;
    let log_flag = if a.log_dir.is_some() {
        "--log-dir"
    } else {
        "the default logs folder"
    };
    crate::util::check_output_dir(log_flag, log_dir)?;
    if a.resume.is_none() {
        if let Some(rp) = &a.results {
            let existing = std::fs::metadata(rp).map(|m| m.len() > 0).unwrap_or(false);
            if existing {
                let refuse = |why: String| {
                    crate::error::usage(format!(
                        "--results '{}' exists and {why}; sweep appends only to its own results file of the same workload: give a new path, or --resume FILE to continue a sweep",
                        rp.display()
                    ))
                };
                let (pts, _) = results::load(rp)
                    .map_err(|e| refuse(format!("is not a sweep results file ({e})")))?;
                if let Some(p) = pts
                    .iter()
                    .find(|p| p.key.schedule_hash != workload.schedule_hash)
                {
                    let w = &p.workload;
                    return Err(refuse(format!(
                        "holds points of another workload ({} {} tp {} tokens {} {})",
                        w.model,
                        w.phase.name(),
                        w.tp,
                        w.tokens,
                        w.dtype.name()
                    )));
                }
            } else if a.log_dir.is_none() && log_dir.exists() {
                crate::usage_bail!(
                    "the default logs folder '{}' of --results '{}' already exists (another sweep's?); give --log-dir DIR or another --results path",
                    log_dir.display(),
                    rp.display()
                );
            }
        }
    }
    Ok(())
}

/// Runs the sweep; the value is the exit code (130 when interrupted).
pub fn run(a: &SweepRequest) -> anyhow::Result<i32> {
    if !(a.point_timeout > 0.0 && a.point_timeout.is_finite()) {
        crate::usage_bail!("--point-timeout must be a positive number of seconds");
    }
    if a.repeat.iters == 0 {
        crate::usage_bail!("-n/--iters must be at least 1");
    }
    if !(a.rounds >= 1 && a.rounds <= MAX_ROUNDS) {
        crate::usage_bail!(
            "--rounds must be 1 to {MAX_ROUNDS} (default {})",
            rounds::DEFAULT_ROUNDS
        );
    }
    if !(0.0..0.5).contains(&a.noise_margin) {
        crate::usage_bail!(
            "--noise-margin {}: give a fraction from 0 to 0.5 (0.5 excluded), e.g. 0.01 for 1% (default 0)",
            a.noise_margin
        );
    }

    // one GPU replays one rank's share of any --tp (see `verify`)
    let tp_check = if a.gpu.ranks() == Some(1) {
        None
    } else {
        a.workload.tp
    };
    crate::launch::run::check_gpu_flags(&a.gpu, tp_check)?;
    let dims = matrix::dimensions(&a.lists, &a.sets)?;
    let preset = a.preset.as_deref().map(matrix::preset).transpose()?;
    if dims.is_empty() && preset.is_none() {
        crate::usage_bail!(
            "nothing to sweep: give -L NAME=a,b, --set NAME=VALUE or --preset pcie (see --help)"
        );
    }
    let points = matrix::points(&dims, preset);
    let mut warned = std::collections::BTreeSet::new();
    for p in &points {
        for (k, _) in &p.overrides {
            if let Some(w) = known::unknown_warning(k) {
                if warned.insert(k.clone()) {
                    eprintln!("warning: {w}");
                }
            }
        }
    }

    // A swept variable already set in this environment: the points that leave it out inherit
    // it, so the baseline would not be NCCL's defaults although it is labelled so.
    let env_now = crate::util::nccl_env();
    for p in &points {
        for (k, _) in &p.overrides {
            if let Some(v) = env_now.get(k) {
                crate::usage_bail!(
                    "{k}={v} is set in this environment and the sweep varies {k}: every point that does not set {k} (the baseline \"(defaults)\" among them) would run with {k}={v}, not NCCL's default; unset it (`env -u {k} verifybench sweep ...`): the sweep itself sets {k} on the points that name it"
                );
            }
        }
    }
    let inherited: Vec<String> = env_now
        .iter()
        .filter(|(k, _)| !env::DEBUG_VARS.contains(&k.as_str()))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if !inherited.is_empty() {
        eprintln!(
            "note: every point, the baseline \"(defaults)\" included, inherits {} from this environment",
            inherited.join(" ")
        );
    }
    if a.mode == Mode::Compute {
        eprintln!(
            "warning: --mode compute runs no collective, so NCCL settings cannot change it: every ratio is 1 by construction; sweep --mode comm or --mode full to rank NCCL settings"
        );
    }

    let backend = if a.debug_mode {
        BackendKind::Mock
    } else {
        crate::backend::resolve(a.backend, a.quiet).kind()
    };
    // With --schedule the file's tp (checked against --tp) wins over the GPU count.
    let w = a.workload.resolve()?;
    let tp = w.requested_tp().unwrap_or_else(|| default_tp(a, backend));
    let schedule = w.schedule(tp)?;
    w.check_modes(&[a.mode])?;
    let workload = Workload::of(&schedule);

    let (results_path, log_dir) = output_paths(a)?;
    check_outputs(a, &results_path, &log_dir, &workload)?;
    if backend == BackendKind::Nccl && !a.debug_mode {
        // The same preflight as `verify`: no point runs (and nothing is written) on a machine
        // that cannot run one.
        // (one GPU: one rank's share of any --tp, through a communicator of one rank)
        let wanted = (a.gpu.ranks() != Some(1)).then_some(tp as usize);
        crate::launch::run::preflight(&a.gpu, wanted)?;
    }
    let cfg = SweepConfig {
        seed: a.seed,
        workload: workload.clone(),
        graph: a.graph.name().into(),
        launcher: a.gpu.launcher.name().into(),
        backend: backend.name().into(),
        mode: a.mode.name().into(),
        parent_env: env::parent_env(),
        log_dir: log_dir.clone(),
        probe: !a.no_probe && matches!(backend, BackendKind::Nccl | BackendKind::Mock),
        timeout: Duration::from_secs_f64(a.point_timeout),
        source: if backend == BackendKind::Nccl {
            Source::Measured
        } else {
            Source::Modeled
        },
    };

    // Resume: skip the finished (point, round) pairs of the same workload and settings.
    let mut done: Vec<SweepPoint> = vec![];
    if let Some(rp) = &a.resume {
        let (pts, warnings) = results::load(rp)?;
        for w in warnings {
            eprintln!("warning: {w}");
        }
        results::check_same_workload(rp, &pts, &workload)?;
        let keys: Vec<_> = points.iter().map(|p| cfg.key(p)).collect();
        let other = pts.iter().filter(|p| !keys.contains(&p.key)).count();
        if other > 0 && !a.quiet {
            eprintln!(
                "note: {other} point(s) in '{}' ran with other settings (graph, launcher, backend, mode or inherited NCCL_* variables) and are not reused",
                rp.display()
            );
        }
        done = pts;
    }
    let ids: Vec<String> = points.iter().map(|p| p.id.clone()).collect();
    let baseline_id = points
        .iter()
        .find(|p| p.overrides.is_empty())
        .map(|p| p.id.clone())
        .unwrap_or_else(|| ids[0].clone());
    let plan = rounds::RoundPlan::new(&ids, &baseline_id, a.rounds, a.seed)?;
    // The newest stored result of each (point, round) of this sweep's settings.
    let stored = |id: &str, round: usize| -> Option<&SweepPoint> {
        let p = points.iter().find(|p| p.id == id)?;
        let k = cfg.key(p);
        done.iter().rev().find(|d| d.key == k && d.round == round)
    };
    let done_keys: BTreeSet<rounds::RoundKey> = plan
        .order
        .iter()
        .filter(|k| stored(&k.point_id, k.round).is_some_and(|d| d.ok() || !a.retry_failed))
        .cloned()
        .collect();
    let failed_first: BTreeSet<String> = ids
        .iter()
        .filter(|id| done_keys.iter().any(|k| &k.point_id == *id && k.round == 0))
        .filter(|id| stored(id, 0).is_some_and(|d| !d.ok()))
        .cloned()
        .collect();
    let n_todo = plan.remaining(&done_keys).len();

    // The header and the summary line: on stdout above the ranking, on stderr with --format
    // json (stdout then holds the JSON alone).
    let json = a.format.is_json();
    let say = |line: String| {
        if json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    if !a.quiet {
        say(format!(
            "# verifybench sweep: {} {} tp {} tokens {} {} ({} all-reduces of {} B, {} all-gather(s)), backend {}, launcher {}, graph {}, mode {}",
            workload.model,
            workload.phase.name(),
            workload.tp,
            workload.tokens,
            workload.dtype.name(),
            workload.n_all_reduce,
            workload.all_reduce_bytes_per_rank,
            workload.n_all_gather,
            cfg.backend,
            cfg.launcher,
            cfg.graph,
            cfg.mode
        ));
        say(format!(
            "# {} points x {} round(s), each round in its own shuffled order (seed {:#x}), the baseline in every round: {} runs ({} to run, {} already in the resume file); results: {}; logs: {}",
            points.len(),
            a.rounds,
            a.seed,
            plan.order.len(),
            n_todo,
            plan.order.len() - n_todo,
            results_path.display(),
            log_dir.display()
        ));
        if cfg.probe {
            say("# timed runs have NCCL_DEBUG unset; NCCL's algorithm/protocol/transport come from a separate probe run (-n 2 -w 1, NCCL_DEBUG=INFO), once per point (round 1)".into());
        } else {
            say(format!(
                "# no probe run ({}): NCCL's choices are not checked",
                if a.no_probe {
                    "--no-probe"
                } else {
                    "the cost model has no NCCL log"
                }
            ));
        }
        if a.debug_mode {
            say(
                "# DEBUG MODE: no verify runs; every number is FAKE (between-run noise included)"
                    .into(),
            );
        }
    }

    // Test hooks of the mock: bad values are refused before anything is written.
    let (noise, plant) = if a.debug_mode {
        mock::MockSpec::hooks_from_env()?
    } else {
        (0.0, None)
    };
    signal::install()?;
    let mut file = ResultsFile::open(&results_path)?;
    let (extra_args, extra_when) = crate::launch::fault::sweep_extra_args();
    let sub = SubprocessRunner {
        exe: std::env::current_exe()?,
        verify_args: verify_args(a, backend, tp),
        iters: a.repeat.iters,
        warmup: a.repeat.warmup,
        work_dir: log_dir.clone(),
        extra_args,
        extra_when,
        interrupted: &signal::INTERRUPTED,
    };
    let spec = mock::MockSpec {
        schedule: &schedule,
        graphs: a.graph.modes(),
        mode: a.mode,
        iters: a.repeat.iters,
        warmup: a.repeat.warmup,
        threads: a.gpu.launcher == Launcher::Threads,
        noise,
        seed: a.seed,
        plant,
    };
    let stop_after = if a.debug_mode {
        mock::interrupt_after_from_env()
    } else {
        None
    };
    let ran = std::cell::Cell::new(0usize);
    let fake = MockRunner(|job: &super::runner::PointJob| {
        if stop_after.is_some_and(|n| ran.get() >= n) {
            return Ok(super::runner::PointOutcome {
                interrupted: true,
                ..Default::default()
            });
        }
        ran.set(ran.get() + 1);
        mock::outcome(job, &spec)
    });
    let runner: &dyn PointRunner = if a.debug_mode { &fake } else { &sub };

    let bar = if a.quiet || !std::io::stderr().is_terminal() {
        indicatif::ProgressBar::hidden()
    } else {
        let b = indicatif::ProgressBar::new(n_todo as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:30} {pos}/{len} runs  {elapsed} elapsed, ETA {eta}  {msg}",
            )
            .expect("valid template"),
        );
        b
    };
    let show_lines = !a.quiet;
    let mut i = 0;
    let wall = std::time::Instant::now();
    let (mut probe_s, mut child_s, mut init_s, mut timed_s) = (0.0, 0.0, 0.0, 0.0);
    let run = sw::run_pairs(
        &cfg,
        &plan,
        &points,
        &done_keys,
        &failed_first,
        runner,
        &mut file,
        &signal::INTERRUPTED,
        |p, k, sp| {
            i += 1;
            probe_s += sp.probe_wall_s;
            child_s += sp.timed_wall_s;
            let split = sw::time_split(sp);
            if let Some((init, timed)) = split {
                init_s += init.unwrap_or(0.0);
                timed_s += timed;
            }
            let line = match &sp.reason {
                None => {
                    let t = rank::rank(std::slice::from_ref(sp), a.mode);
                    let r = &t.rows[0];
                    let c = r.graph.as_ref().or(r.eager.as_ref());
                    let eff = sp
                        .effective
                        .as_ref()
                        .map(|e| match &e.one_rank {
                            Some(proof) => format!("; {proof}"),
                            None => format!(", NCCL {} via {}", e.algo_proto(), e.transport()),
                        })
                        .unwrap_or_default();
                    format!(
                        "[{i}/{n_todo}] round {} {}: ok, {:.1} us per verify ({}){eff}; {}",
                        k.round + 1,
                        p.id,
                        c.map_or(f64::NAN, |c| c.median_us),
                        if r.graph.is_some() { "graph" } else { "eager" },
                        time_line(sp, split)
                    )
                }
                Some(why) => format!(
                    "[{i}/{n_todo}] round {} {}: FAILED: {why}",
                    k.round + 1,
                    p.id
                ),
            };
            if show_lines {
                if bar.is_hidden() {
                    eprintln!("{line}");
                } else {
                    bar.println(line);
                }
            }
            bar.inc(1);
        },
    )?;
    bar.finish_and_clear();
    let wall_s = wall.elapsed().as_secs_f64();
    for k in &run.skipped {
        if show_lines {
            eprintln!(
                "round {} {}: not run (its first round failed)",
                k.round + 1,
                k.point_id
            );
        }
    }

    // Every stored pair of this sweep: the newest result of each (point, round).
    let mut pairs: Vec<SweepPoint> = vec![];
    for k in &plan.order {
        if let Some(sp) = run
            .finished
            .iter()
            .rev()
            .find(|s| s.point_id == k.point_id && s.round == k.round)
            .or_else(|| stored(&k.point_id, k.round))
        {
            pairs.push(sp.clone());
        }
    }
    // The table covers round 0 (the round with the probe): the newest result of each point.
    let all: Vec<SweepPoint> = points
        .iter()
        .filter_map(|p| {
            pairs
                .iter()
                .find(|s| s.point_id == p.id && s.round == 0)
                .cloned()
        })
        .collect();
    let (text, table) = render(&all, &pairs, a.mode, a.rounds, a.noise_margin);
    let verify_records: Vec<Record> = all.iter().filter_map(|p| p.verify.clone()).collect();
    if json {
        crate::output::print_document(&crate::report::export::to_json(&verify_records)?)?;
    } else {
        println!();
        print!("{text}");
    }
    if !a.quiet && !run.finished.is_empty() {
        say(format!(
            "wall time: {wall_s:.1} s for {} runs: probe children {probe_s:.1} s, timed children {child_s:.1} s (of which NCCL init {init_s:.1} s, timed loops ~{timed_s:.1} s, the rest worker start and teardown)",
            run.finished.len()
        ));
    }
    a.export.write(&verify_records)?;
    if let Some(p) = &a.export_table_markdown {
        crate::util::write_file(p, markdown_table(&table).as_bytes())?;
    }
    if let Some(p) = &a.export_table_csv {
        crate::util::write_file(p, &csv_table(&table)?)?;
    }
    if run.interrupted {
        eprintln!(
            "interrupted: {} finished run(s) are in '{}'; continue with --resume {}",
            pairs.len(),
            file.path().display(),
            file.path().display()
        );
        return Ok(130);
    }
    if !pairs.iter().any(|p| p.ok()) {
        anyhow::bail!(
            "every point failed (see the reasons above and '{}')",
            file.path().display()
        );
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sweep of the default workload with every flag at its default.
    fn request() -> SweepRequest {
        SweepRequest {
            workload: crate::request::Workload::default(),
            lists: vec![],
            sets: vec![],
            preset: None,
            graph: GraphChoice::Both,
            mode: Mode::Comm,
            backend: BackendKind::Model,
            gpu: GpuSpec::default(),
            repeat: Repeat::default(),
            model: ModelSettings::default(),
            rounds: 1,
            seed: 0,
            noise_margin: 0.0,
            point_timeout: 600.0,
            results: None,
            resume: None,
            retry_failed: false,
            log_dir: None,
            no_probe: false,
            export: Exports::default(),
            export_table_markdown: None,
            export_table_csv: None,
            format: crate::output::Format::Table,
            quiet: true,
            debug_mode: false,
            host_gaps: Default::default(),
        }
    }

    /// The value after `flag` in `args`.
    fn after<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
        let i = args.iter().position(|a| a == flag)?;
        args.get(i + 1).map(String::as_str)
    }

    #[test]
    fn the_rank_count_comes_from_tp_then_the_gpu_flags_then_the_users_machine() {
        let mut a = request();
        // the model's default machine: 8 GPUs
        assert_eq!(default_tp(&a, BackendKind::Model), 8);
        a.gpu.devices = Some(vec![0, 2, 5]);
        assert_eq!(default_tp(&a, BackendKind::Model), 3);
        a.gpu.gpus = Some(4);
        assert_eq!(default_tp(&a, BackendKind::Model), 4);
        a.workload.tp = Some(2);
        assert_eq!(default_tp(&a, BackendKind::Model), 2);
    }

    #[test]
    fn every_child_gets_the_workload_backend_launcher_and_gpu_flags() {
        let mut a = request();
        a.gpu.devices = Some(vec![1, 3]);
        a.gpu.timeout = 42.5;
        a.mode = Mode::Full;
        a.graph = GraphChoice::Off;
        a.model.link = "pcie-gen4".into();
        let args = verify_args(&a, BackendKind::Nccl, 2);
        assert_eq!(args[0], "verify");
        assert_eq!(after(&args, "--tp"), Some("2"));
        assert_eq!(after(&args, "--backend"), Some("nccl"));
        assert_eq!(after(&args, "--launcher"), Some(a.gpu.launcher.name()));
        assert_eq!(after(&args, "--graph"), Some("off"));
        assert_eq!(after(&args, "--mode"), Some("full"));
        assert_eq!(after(&args, "--devices"), Some("1,3"));
        assert_eq!(after(&args, "--timeout"), Some("42.5"));
        assert_eq!(after(&args, "--link"), Some("pcie-gen4"));
        assert_eq!(after(&args, "--gpus"), None);
        assert_eq!(after(&args, "--profile"), None);
        // the request's own --tp is not what the children get: the resolved one is
        assert_eq!(a.workload.tp, None);
    }

    #[test]
    fn default_outputs_are_fresh_names_and_the_flags_win() {
        let dir = tempfile::tempdir().unwrap();
        let a = request();
        let cwd = std::env::current_dir().unwrap();
        let (r, logs) = output_paths(&a).unwrap();
        let name = r.to_string_lossy().into_owned();
        assert!(
            name.starts_with("sweep-") && name.ends_with(".jsonl"),
            "{name}"
        );
        assert!(!cwd.join(&r).exists());
        assert_eq!(logs, r.with_extension("logs"));
        let mut b = request();
        b.results = Some(dir.path().join("mine.jsonl"));
        b.log_dir = Some(dir.path().join("logs"));
        assert_eq!(
            output_paths(&b).unwrap(),
            (dir.path().join("mine.jsonl"), dir.path().join("logs"))
        );
        // --resume names the results file when --results does not
        let mut c = request();
        c.resume = Some(dir.path().join("old.jsonl"));
        assert_eq!(output_paths(&c).unwrap().0, dir.path().join("old.jsonl"));
    }

    #[test]
    fn an_existing_results_file_that_is_not_a_sweep_is_refused_before_any_point() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("r.jsonl");
        std::fs::write(&f, "not a sweep\n").unwrap();
        let mut a = request();
        a.results = Some(f.clone());
        let sched = a.workload.schedule(8).unwrap();
        let w = Workload::of(&sched);
        let e = check_outputs(&a, &f, &dir.path().join("logs"), &w).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        let msg = e.to_string();
        assert!(
            msg.contains("--results") && msg.contains("is not a sweep results file"),
            "{msg}"
        );
        // an empty file is a fresh start, and the default logs folder of a new results file
        // must not exist already
        std::fs::write(&f, "").unwrap();
        check_outputs(&a, &f, &dir.path().join("logs"), &w).unwrap();
        std::fs::create_dir(dir.path().join("taken")).unwrap();
        let e = check_outputs(&a, &f, &dir.path().join("taken"), &w).unwrap_err();
        assert!(e.to_string().contains("already exists"), "{e}");
    }
}
