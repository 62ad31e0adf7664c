//! `verifybench sweep`: resume merge, runner wiring (subprocess children or the in-process
//! mock of `--debug-mode`), progress lines, the ranking table and its exports. The pieces
//! (matrix, environments, runner, log parsing, ranking, what a sweep prints) live in
//! [`crate::sweep`].

use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::record::{Mode, Record, RecordedWorkload, Source};
use crate::report::export::{csv_table, markdown_table};
use crate::request::{BackendKind, GpuSpec, Launcher};
use crate::sweep::library::Libraries;
use crate::sweep::matrix::{self, Point};
use crate::sweep::results::{self, ResultsFile, SweepPoint};
use crate::sweep::runner::{PointRunner, SubprocessRunner};
use crate::sweep::summary::{progress_line, render};
use crate::sweep::{self as sw, env, known, library, mock, rounds, settings, signal, SweepConfig};
#[cfg(test)]
use {
    crate::costmodel::ModelSettings,
    crate::report::Exports,
    crate::request::{GraphChoice, Repeat},
};

mod child_args;
mod outputs;
mod request;

use child_args::default_tp;
pub(crate) use child_args::verify_args;
use outputs::{check_results_file, output_paths};
pub(crate) use request::SweepRequest;

/// Runs `verifybench sweep`; the value is the exit code (130 when interrupted).
pub(crate) fn run(a: &SweepRequest) -> anyhow::Result<i32> {
    let (results_path, log_dir) = output_paths(a)?;
    outputs::files(a, &results_path, &log_dir).check()?;
    let (gpu, points, libraries) = settings(a)?;
    check_environment(a, &points)?;
    let backend = backend_of(a, &libraries)?;
    // With --schedule the file's tp (checked against --tp) wins over the GPU count.
    let w = a.workload.resolve()?;
    let tp = w.requested_tp().unwrap_or_else(|| default_tp(a, backend));
    let schedule = w.schedule(tp)?;
    w.check_modes(&[a.mode])?;
    let workload = RecordedWorkload::of(&schedule);

    check_results_file(a, &log_dir, &workload)?;
    if backend == BackendKind::Nccl && !a.debug_mode {
        // The same preflight as `verify`: no point runs (and nothing is written) on a machine
        // that cannot run one.
        // (one GPU: one rank's share of any --tp, through a communicator of one rank)
        let wanted = (a.gpu.ranks() != Some(1)).then_some(tp as usize);
        crate::launch::run::preflight(&gpu, wanted)?;
    }
    let cfg = config(a, backend, workload, log_dir, libraries);
    let stored = Stored {
        done: resumed(a, &cfg, &points)?,
        cfg: &cfg,
        points: &points,
    };
    let plan = Plan::new(a, &stored)?;
    if !a.quiet {
        for line in header(a, &cfg, points.len(), &plan, &results_path) {
            say(a, line);
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
        work_dir: cfg.log_dir.clone(),
        extra_args,
        extra_when,
        interrupted: &signal::INTERRUPTED,
    };
    let fake = a.debug_mode.then(|| {
        mock::DebugRunner::new(mock::MockSpec {
            schedule: &schedule,
            graphs: a.graph.modes(),
            mode: a.mode,
            iters: a.repeat.iters,
            warmup: a.repeat.warmup,
            threads: a.gpu.launcher == Launcher::Threads,
            noise,
            seed: a.seed,
            plant,
        })
    });
    let runner: &dyn PointRunner = match &fake {
        Some(fake) => fake,
        None => &sub,
    };
    let (run, times, wall_s) = run_with_progress(a, &cfg, &plan, &points, runner, &mut file)?;
    finish(a, &plan, &stored, &run, &times, wall_s, &file)
}

/// The points of the sweep (`-L`, `--set`, `--preset` and the libraries of `--nccl-lib A,B`)
/// and its libraries, after the GPU flags (returned without the libraries: those are a
/// dimension here, checked with the points); a name NCCL does not know is warned about once.
fn settings(a: &SweepRequest) -> anyhow::Result<(GpuSpec, Vec<Point>, Libraries)> {
    // one GPU replays one rank's share of any --tp (see `verify`)
    let tp_check = if a.gpu.ranks() == Some(1) {
        None
    } else {
        a.workload.tp
    };
    let gpu = GpuSpec {
        nccl_lib: None,
        ..a.gpu.clone()
    };
    crate::launch::run::check_gpu_flags(&gpu, tp_check)?;
    let lists = library::lists(&a.lists, a.gpu.nccl_lib.as_deref())?;
    let dims = matrix::dimensions(&lists, &a.sets)?;
    let preset = a.preset.as_deref().map(settings::preset).transpose()?;
    let points = matrix::points(&dims, preset.map(|p| p.points));
    if points.len() < 2 {
        crate::usage_bail!(
            "nothing to sweep: give -L NAME=a,b, --set NAME=VALUE, --preset pcie or two NCCL libraries (--nccl-lib A,B) (see --help)"
        );
    }
    let libraries = matrix::libraries(&dims)?;
    let mut warned = BTreeSet::new();
    for (k, _) in points.iter().flat_map(|p| &p.overrides) {
        if let Some(w) = known::unknown_warning(k) {
            if warned.insert(k.clone()) {
                eprintln!("warning: {w}");
            }
        }
    }
    Ok((gpu, points, libraries))
}

/// The environment the points inherit: a swept variable already set in it is refused (the
/// points that leave it out would inherit it, so the baseline would not be NCCL's defaults
/// although it is labelled so); the others are said. A compute-only sweep is warned about.
fn check_environment(a: &SweepRequest, points: &[Point]) -> anyhow::Result<()> {
    let env_now = crate::util::nccl_env();
    for (k, _) in points.iter().flat_map(|p| &p.overrides) {
        if let Some(v) = env_now.get(k) {
            crate::usage_bail!(
                "{k}={v} is set in this environment and the sweep varies {k}: every point that does not set {k} (the baseline \"(defaults)\" among them) would run with {k}={v}, not NCCL's default; unset it (`env -u {k} verifybench sweep ...`): the sweep itself sets {k} on the points that name it"
            );
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
    Ok(())
}

/// The backend every point runs on: the mock in debug mode; the cost model cannot compare
/// NCCL libraries.
fn backend_of(a: &SweepRequest, libraries: &Libraries) -> anyhow::Result<BackendKind> {
    let backend = if a.debug_mode {
        BackendKind::Mock
    } else {
        crate::backend::resolve(a.backend, a.quiet).kind()
    };
    if backend == BackendKind::Model && libraries.0.len() > 1 {
        crate::usage_bail!(
            "--backend model: the cost model loads no NCCL, so it cannot compare libraries; sweep them on the GPUs (--backend nccl)"
        );
    }
    Ok(backend)
}

/// What is fixed for every point.
fn config(
    a: &SweepRequest,
    backend: BackendKind,
    workload: RecordedWorkload,
    log_dir: PathBuf,
    libraries: Libraries,
) -> SweepConfig {
    SweepConfig {
        seed: a.seed,
        workload,
        graph: a.graph.name().into(),
        launcher: a.gpu.launcher.name().into(),
        backend: backend.name().into(),
        mode: a.mode.name().into(),
        parent_env: env::parent_env(),
        log_dir,
        probe: !a.no_probe && matches!(backend, BackendKind::Nccl | BackendKind::Mock),
        timeout: Duration::from_secs_f64(a.point_timeout),
        source: if backend == BackendKind::Nccl {
            Source::Measured
        } else {
            Source::Modeled
        },
        libraries,
    }
}

/// The results of `--resume`'s file (all of them: [`Stored`] picks the ones of this sweep's
/// settings), its warnings said; none without `--resume`.
fn resumed(
    a: &SweepRequest,
    cfg: &SweepConfig,
    points: &[Point],
) -> anyhow::Result<Vec<SweepPoint>> {
    let Some(rp) = &a.resume else {
        return Ok(vec![]);
    };
    let (pts, warnings) = results::load(rp)?;
    for w in warnings {
        eprintln!("warning: {w}");
    }
    results::check_same_workload(rp, &pts, &cfg.workload)?;
    let keys: Vec<_> = points.iter().map(|p| cfg.key(p)).collect();
    let other = pts.iter().filter(|p| !keys.contains(&p.key)).count();
    if other > 0 && !a.quiet {
        eprintln!(
            "note: {other} point(s) in '{}' ran with other settings (graph, launcher, backend, mode, NCCL library or inherited NCCL_* variables) and are not reused",
            rp.display()
        );
    }
    Ok(pts)
}

/// The points and the results stored before this run (`--resume`).
struct Stored<'a> {
    cfg: &'a SweepConfig,
    points: &'a [Point],
    done: Vec<SweepPoint>,
}

impl Stored<'_> {
    /// The newest stored result of (point `id`, `round`) with this sweep's settings.
    fn get(&self, id: &str, round: usize) -> Option<&SweepPoint> {
        let p = self.points.iter().find(|p| p.id == id)?;
        let k = self.cfg.key(p);
        self.done
            .iter()
            .rev()
            .find(|d| d.key == k && d.round == round)
    }
}

/// The (point, round) pairs of the sweep and which of them are left to run.
struct Plan {
    rounds: rounds::RoundPlan,
    /// Pairs with a stored result to reuse (a failed one runs again with --retry-failed).
    done: BTreeSet<rounds::RoundKey>,
    /// Points whose stored first round failed: their later rounds do not run.
    failed_first: BTreeSet<String>,
    /// Pairs to run.
    n_todo: usize,
}

impl Plan {
    /// Skips the finished (point, round) pairs of the same workload and settings.
    fn new(a: &SweepRequest, stored: &Stored) -> anyhow::Result<Plan> {
        let ids: Vec<String> = stored.points.iter().map(|p| p.id.clone()).collect();
        let baseline_id = stored
            .points
            .iter()
            .find(|p| p.overrides.is_empty())
            .map(|p| p.id.clone())
            .unwrap_or_else(|| ids[0].clone());
        let plan = rounds::RoundPlan::new(&ids, &baseline_id, a.rounds, a.seed)?;
        let done: BTreeSet<rounds::RoundKey> = plan
            .order
            .iter()
            .filter(|k| {
                stored
                    .get(&k.point_id, k.round)
                    .is_some_and(|d| d.ok() || !a.retry_failed)
            })
            .cloned()
            .collect();
        let failed_first: BTreeSet<String> = ids
            .iter()
            .filter(|id| done.iter().any(|k| &k.point_id == *id && k.round == 0))
            .filter(|id| stored.get(id, 0).is_some_and(|d| !d.ok()))
            .cloned()
            .collect();
        let n_todo = plan.remaining(&done).len();
        Ok(Plan {
            rounds: plan,
            done,
            failed_first,
            n_todo,
        })
    }
}

/// The header and the summary line go on stdout above the ranking, on stderr with --format
/// json (stdout then holds the JSON alone).
fn say(a: &SweepRequest, line: String) {
    if a.format.is_json() {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
}

/// The header: the workload and how it runs, the rounds and the outputs, the probe, the
/// libraries, debug mode.
fn header(
    a: &SweepRequest,
    cfg: &SweepConfig,
    n_points: usize,
    plan: &Plan,
    results_path: &Path,
) -> Vec<String> {
    let workload = &cfg.workload;
    let runs = plan.rounds.order.len();
    let mut lines = vec![
        format!(
            "# verifybench sweep: {} ({} all-reduces of {} B, {} all-gather(s)), backend {}, launcher {}, graph {}, mode {}",
            crate::report::text::workload_line(workload),
            workload.n_all_reduce,
            workload.all_reduce_bytes_per_rank,
            workload.n_all_gather,
            cfg.backend,
            cfg.launcher,
            cfg.graph,
            cfg.mode
        ),
        format!(
            "# {} points x {} round(s), each round in its own shuffled order (seed {:#x}), the baseline in every round: {runs} runs ({} to run, {} already in the resume file); results: {}; logs: {}",
            n_points,
            a.rounds,
            a.seed,
            plan.n_todo,
            runs - plan.n_todo,
            results_path.display(),
            cfg.log_dir.display()
        ),
    ];
    if cfg.probe {
        lines.push("# timed runs have NCCL_DEBUG unset; NCCL's algorithm/protocol/transport come from a separate probe run (-n 2 -w 1, NCCL_DEBUG=INFO), once per point (round 1)".into());
    } else {
        lines.push(format!(
            "# no probe run ({}): NCCL's choices are not checked",
            if a.no_probe {
                "--no-probe"
            } else {
                "the cost model has no NCCL log"
            }
        ));
    }
    lines.extend(cfg.libraries.header());
    if a.debug_mode {
        lines.push(
            "# DEBUG MODE: no verify runs; every number is FAKE (between-run noise included)"
                .into(),
        );
    }
    lines
}

/// Where the children's time went, summed over the pairs run.
#[derive(Default)]
struct ChildTimes {
    probe_s: f64,
    child_s: f64,
    init_s: f64,
    timed_s: f64,
    measured_runs: usize,
}

impl ChildTimes {
    /// Adds a finished pair; the value is its (NCCL init, timed loops) split when measured.
    fn add(&mut self, sp: &SweepPoint) -> Option<(Option<f64>, f64)> {
        self.probe_s += sp.probe_wall_s;
        self.child_s += sp.timed_wall_s;
        let split = sw::time_split(sp);
        if let Some((init, timed)) = split {
            self.measured_runs += 1;
            self.init_s += init.unwrap_or(0.0);
            self.timed_s += timed;
        }
        split
    }

    /// The closing line: the sweep's wall time over `runs` runs and what the children took.
    fn line(&self, wall_s: f64, runs: usize) -> String {
        let (probe_s, child_s) = (self.probe_s, self.child_s);
        // The split covers only measured runs: a modeled child ran no NCCL and no timed loop.
        let split = if self.measured_runs > 0 {
            format!(
                " (of which NCCL init {:.1} s, timed loops ~{:.1} s, the rest worker start and teardown)",
                self.init_s, self.timed_s
            )
        } else {
            " (modeled runs: no NCCL init, no timed loop)".into()
        };
        format!("wall time: {wall_s:.1} s for {runs} runs: probe children {probe_s:.1} s, timed children {child_s:.1} s{split}")
    }
}

/// Runs the pairs left, each finished one said on a line of its own (above the progress bar
/// on a terminal); the value is how the run ended, the children's times and the wall time.
fn run_with_progress(
    a: &SweepRequest,
    cfg: &SweepConfig,
    plan: &Plan,
    points: &[Point],
    runner: &dyn PointRunner,
    file: &mut ResultsFile,
) -> anyhow::Result<(sw::PairsRun, ChildTimes, f64)> {
    let n_todo = plan.n_todo;
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
    let mut i = 0;
    let wall = std::time::Instant::now();
    let mut times = ChildTimes::default();
    let run = sw::run_pairs(
        cfg,
        &plan.rounds,
        points,
        &plan.done,
        &plan.failed_first,
        runner,
        file,
        &signal::INTERRUPTED,
        |_, _, sp| {
            i += 1;
            let split = times.add(sp);
            let line = progress_line(i, n_todo, sp, split, a.mode);
            if !a.quiet {
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
        if !a.quiet {
            eprintln!(
                "round {} {}: not run (its first round failed)",
                k.round + 1,
                k.point_id
            );
        }
    }
    Ok((run, times, wall_s))
}

/// The end of a sweep: the ranking (or the records, with `--format json`), the wall-time line,
/// the exports, and the exit code.
fn finish(
    a: &SweepRequest,
    plan: &Plan,
    stored: &Stored,
    run: &sw::PairsRun,
    times: &ChildTimes,
    wall_s: f64,
    file: &ResultsFile,
) -> anyhow::Result<i32> {
    // Every stored pair of this sweep: the newest result of each (point, round).
    let pairs: Vec<SweepPoint> = plan
        .rounds
        .order
        .iter()
        .filter_map(|k| {
            run.finished
                .iter()
                .rev()
                .find(|s| s.point_id == k.point_id && s.round == k.round)
                .or_else(|| stored.get(&k.point_id, k.round))
                .cloned()
        })
        .collect();
    // The table covers round 0 (the round with the probe): the newest result of each point.
    let all: Vec<SweepPoint> = stored
        .points
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
    if a.format.is_json() {
        crate::output::print_document(&crate::report::export::to_json(&verify_records)?)?;
        // stdout holds the records of the points that ran; why the others failed, and what
        // to try instead, go to stderr as the text output says them
        for p in all.iter().filter(|p| !p.ok()) {
            eprintln!(
                "{}: FAILED: {}",
                p.point_id,
                p.reason.as_deref().unwrap_or("?")
            );
            if let Some(h) = &p.hint {
                eprintln!("HINT ({}): {h}", p.point_id);
            }
        }
    } else {
        println!();
        print!("{text}");
    }
    if !a.quiet && !run.finished.is_empty() {
        say(a, times.line(wall_s, run.finished.len()));
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
        let w = RecordedWorkload::of(&sched);
        let e = check_results_file(&a, &dir.path().join("logs"), &w).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        let msg = e.to_string();
        assert!(
            msg.contains("--results") && msg.contains("is not a sweep results file"),
            "{msg}"
        );
        // an empty file is a fresh start, and the default logs folder of a new results file
        // must not exist already
        std::fs::write(&f, "").unwrap();
        check_results_file(&a, &dir.path().join("logs"), &w).unwrap();
        std::fs::create_dir(dir.path().join("taken")).unwrap();
        let e = check_results_file(&a, &dir.path().join("taken"), &w).unwrap_err();
        assert!(e.to_string().contains("already exists"), "{e}");
    }
}
