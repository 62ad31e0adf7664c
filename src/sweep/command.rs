//! The `sweep` command's driver: resume merge, runner wiring (subprocess children or the
//! in-process mock of `--debug-mode`), progress lines, the ranking table and its exports.
//! The flags live in `cli/sweep.rs`; the pieces (matrix, environments, runner, log parsing,
//! ranking) in the sibling modules.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use super::matrix::{self, Point};
use super::results::{self, ResultsFile, SweepPoint};
use super::runner::{MockRunner, PointRunner, SubprocessRunner};
use super::{self as sw, env, known, mock, rank, signal, SweepConfig};
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
    /// Smallest relative gain over the baseline that counts as real.
    pub noise_floor: f64,
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
    pub quiet: bool,
    /// Fake every point in process (no child, no GPU): the mock backend.
    pub debug_mode: bool,
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
    v.extend(["--link".into(), a.model.link.clone()]);
    if let Some(p) = &a.model.profile {
        v.extend(["--profile".into(), p.display().to_string()]);
    }
    v
}

/// Everything printed after the sweep: table, notes, failures, advice.
pub fn render(points: &[SweepPoint], mode: Mode, noise_floor: f64) -> (String, Table) {
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
    out.push_str(&format!(
        "# per-verify time in us (median ± standard error), {source}; ratios are to the baseline (defaults)\n"
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
    out.push_str(&rank::advice_with(&r, noise_floor));
    (out, full)
}

/// Runs the sweep; the value is the exit code (130 when interrupted).
pub fn run(a: &SweepRequest) -> anyhow::Result<i32> {
    if !(a.point_timeout > 0.0 && a.point_timeout.is_finite()) {
        crate::usage_bail!("--point-timeout must be a positive number of seconds");
    }
    if a.repeat.iters == 0 {
        crate::usage_bail!("-n/--iters must be at least 1");
    }
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

    let backend = if a.debug_mode {
        BackendKind::Mock
    } else {
        crate::backend::resolve(a.backend, a.quiet).kind()
    };
    // With --schedule the file's tp (checked against --tp) wins over the GPU count.
    let tp = match a.workload.requested_tp()? {
        Some(tp) => tp,
        None => default_tp(a, backend),
    };
    let mut w = a.workload.clone();
    w.tp = Some(tp);
    let schedule = w.schedule(tp)?;
    w.check_schedule_modes(&[a.mode])?;
    let workload = Workload::of(&schedule);

    let stamp = chrono::Utc::now().format("%Y%m%d-%H%M%S").to_string();
    let results_path = a
        .results
        .clone()
        .or_else(|| a.resume.clone())
        .unwrap_or_else(|| PathBuf::from(format!("sweep-{stamp}.jsonl")));
    let log_dir = a
        .log_dir
        .clone()
        .unwrap_or_else(|| results_path.with_extension("logs"));
    let cfg = SweepConfig {
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

    // Resume: skip finished points of the same workload and settings.
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
    let finished_key = |p: &Point| {
        let k = cfg.key(p);
        done.iter()
            .rev()
            .find(|d| d.key == k)
            .is_some_and(|d| d.ok() || !a.retry_failed)
    };
    let todo: Vec<Point> = points
        .iter()
        .filter(|p| !finished_key(p))
        .cloned()
        .collect();

    if !a.quiet {
        println!(
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
        );
        println!(
            "# {} points ({} to run, {} already in the resume file); results: {}; logs: {}",
            points.len(),
            todo.len(),
            points.len() - todo.len(),
            results_path.display(),
            log_dir.display()
        );
        if cfg.probe {
            println!("# timed runs have NCCL_DEBUG unset; NCCL's algorithm/protocol/transport come from a separate probe run (-n 2 -w 1, NCCL_DEBUG=INFO)");
        } else {
            println!(
                "# no probe run ({}): NCCL's choices are not checked",
                if a.no_probe {
                    "--no-probe"
                } else {
                    "the cost model has no NCCL log"
                }
            );
        }
        if a.debug_mode {
            println!("# DEBUG MODE: no verify runs; every number is FAKE");
        }
    }

    signal::install()?;
    let mut file = ResultsFile::open(&results_path)?;
    let (extra_args, extra_when) = crate::backend::fault::sweep_extra_args();
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
    };
    let fake = MockRunner(|job: &super::runner::PointJob| mock::outcome(job, &spec));
    let runner: &dyn PointRunner = if a.debug_mode { &fake } else { &sub };

    let bar = if a.quiet || !std::io::stderr().is_terminal() {
        indicatif::ProgressBar::hidden()
    } else {
        let b = indicatif::ProgressBar::new(todo.len() as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:30} {pos}/{len} points  {elapsed} elapsed, ETA {eta}  {msg}",
            )
            .expect("valid template"),
        );
        b
    };
    let show_lines = !a.quiet;
    let n_todo = todo.len();
    let mut i = 0;
    let run = sw::run_points(
        &cfg,
        &todo,
        runner,
        &mut file,
        &signal::INTERRUPTED,
        |p, sp| {
            i += 1;
            if let Some(sp) = sp {
                let line = match &sp.reason {
                    None => {
                        let t = rank::rank(std::slice::from_ref(sp), a.mode);
                        let r = &t.rows[0];
                        let c = r.graph.as_ref().or(r.eager.as_ref());
                        let eff = sp
                            .effective
                            .as_ref()
                            .map(|e| format!(", NCCL {} via {}", e.algo_proto(), e.transport()))
                            .unwrap_or_default();
                        format!(
                            "[{i}/{n_todo}] {}: ok, {:.1} us per verify ({}){eff}",
                            p.id,
                            c.map_or(f64::NAN, |c| c.median_us),
                            if r.graph.is_some() { "graph" } else { "eager" }
                        )
                    }
                    Some(why) => format!("[{i}/{n_todo}] {}: FAILED: {why}", p.id),
                };
                if show_lines {
                    if bar.is_hidden() {
                        eprintln!("{line}");
                    } else {
                        bar.println(line);
                    }
                }
            }
            bar.inc(1);
        },
    )?;
    bar.finish_and_clear();

    // The ranking covers this sweep's points: the newest result of each.
    let mut all: Vec<SweepPoint> = vec![];
    for p in &points {
        let k = cfg.key(p);
        if let Some(sp) = run
            .finished
            .iter()
            .rev()
            .find(|s| s.key == k)
            .or_else(|| done.iter().rev().find(|s| s.key == k))
        {
            all.push(sp.clone());
        }
    }
    let (text, table) = render(&all, a.mode, a.noise_floor);
    println!();
    print!("{text}");
    let verify_records: Vec<Record> = all.iter().filter_map(|p| p.verify.clone()).collect();
    a.export.write(&verify_records)?;
    if let Some(p) = &a.export_table_markdown {
        crate::util::write_file(p, markdown_table(&table).as_bytes())?;
    }
    if let Some(p) = &a.export_table_csv {
        crate::util::write_file(p, &csv_table(&table)?)?;
    }
    if run.interrupted {
        eprintln!(
            "interrupted: {} finished point(s) are in '{}'; continue with --resume {}",
            all.len(),
            file.path().display(),
            file.path().display()
        );
        return Ok(130);
    }
    if !all.iter().any(|p| p.ok()) {
        anyhow::bail!(
            "every point failed (see the reasons above and '{}')",
            file.path().display()
        );
    }
    Ok(0)
}
