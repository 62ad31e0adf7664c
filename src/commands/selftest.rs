//! `verifybench selftest`: exact-result checks of every collective, dtype, launcher and graph
//! mode on this machine's GPUs (every buffer slot of every collective written and checked), the
//! worker environment round trip, clean failure of a dead or hung rank, the streaming kernel
//! against a CPU reference, the P2P all-reduce protocol on virtual ranks of one GPU, and the P2P
//! access check and stress test (`selftest_stress.rs`). Prints a pass/fail table; exits 1 when
//! anything fails. On a machine with one GPU the NCCL checks run
//! on a communicator of one rank (no transfer), beside the streaming kernel and the P2P virtual
//! ranks. The flags live in `cli/selftest.rs`; this module takes a plain request.

use std::path::PathBuf;
use std::time::Instant;

use crate::comm;
use crate::comm::p2p::Impl;
use crate::launch::job::slots::SLOTS;
use crate::launch::job::{CollCase, Fault, FaultKind, RankResult};
use crate::launch::run::{combine, run_job, select_devices};
use crate::launch::{Job, LaunchSpec};
use crate::measure::Summary;
use crate::model::{self, CollectiveKind, DType, Phase, ScheduleOptions};
use crate::output::Format;
use crate::record::{Mode, RankTime};
use crate::request::{GpuSpec, Launcher};

/// What to check.
#[derive(Debug, Clone)]
pub struct SelftestRequest {
    /// The GPUs, launcher, NCCL library and timeout (`--gpus`, `--devices`, ...).
    pub gpu: GpuSpec,
    /// Skip the fault checks (a worker that exits or hangs on purpose).
    pub no_faults: bool,
    /// Skip the P2P stress test and its negative controls.
    pub no_stress: bool,
    /// Where to write the table as JSON.
    pub export_json: Option<PathBuf>,
    /// What stdout gets: the table, or (json) the record `export_json` gets.
    pub format: Format,
}

/// One line of the selftest table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Check {
    pub name: String,
    pub launcher: String,
    pub pass: bool,
    pub detail: String,
}

impl From<super::selftest_stress::Line> for Check {
    fn from(l: super::selftest_stress::Line) -> Check {
        Check {
            name: l.name,
            launcher: l.launcher.into(),
            pass: l.pass,
            detail: l.detail,
        }
    }
}

/// The streaming kernel's result against a CPU reference (small sizes, exact inputs), as a
/// plain launch and, where the GPU has it, with programmatic dependent launch.
pub(crate) fn streaming_kernel(device: usize) -> Check {
    let r = (|| -> anyhow::Result<String> {
        let gpu = comm::Gpu::open(device)?;
        let k = comm::kernels::Kernels::load(&gpu)?;
        let pool = comm::kernels::Pool::new(&gpu, 1 << 24)?;
        let pdl = streaming_pdl(&gpu, &pool, &k)?;
        let mut worst = 0f64;
        for (tokens, start, nvec) in [
            (1usize, 0u64, 1u64),
            (3, 5, 1000),
            (4, 1000, 300_000),
            (16, 77, 1 << 20),
        ] {
            let (act, a) = activations(&gpu, tokens)?;
            let partial = gpu.alloc(k.partial_bytes())?;
            k.stream(&gpu, &pool, start, nvec, &a, tokens, &partial)?;
            gpu.sync()?;
            let blocks = k.blocks_for(nvec, tokens) as usize;
            let got = comm::kernels::sum_partials(
                &gpu.download(&partial, partial.len())?,
                blocks,
                tokens,
            );
            let want = comm::kernels::reference(pool.vecs(), start, nvec, &act, tokens);
            worst = worst.max(relative_error(&got, &want));
        }
        if worst > 1e-4 {
            anyhow::bail!("relative error {worst:.2e} against the CPU reference");
        }
        Ok(format!(
            "max relative error {worst:.1e} (fp32 accumulation order); {pdl}"
        ))
    })();
    Check {
        name: "streaming kernel vs CPU reference".into(),
        launcher: "-".into(),
        pass: r.is_ok(),
        detail: r.unwrap_or_else(|e| format!("{e:#}")),
    }
}

/// The largest relative error of the GPU's sums against the CPU reference's (relative to at
/// least 1).
fn relative_error(got: &[f64], want: &[f64]) -> f64 {
    got.iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs() / w.abs().max(1.0))
        .fold(0.0, f64::max)
}

/// `tokens` activation rows of small exact values, on the host and uploaded.
fn activations(gpu: &comm::Gpu, tokens: usize) -> anyhow::Result<(Vec<f32>, comm::Buffer)> {
    let act: Vec<f32> = (0..tokens * 8)
        .map(|i| 0.25 * ((i % 5) as f32 + 1.0))
        .collect();
    let bytes: Vec<u8> = act.iter().flat_map(|x| x.to_le_bytes()).collect();
    let a = gpu.alloc(bytes.len())?;
    gpu.upload(&a, &bytes)?;
    Ok((act, a))
}

/// The PDL streaming kernels (`--pdl`): back-to-back launches into one partial-sum buffer, eager
/// and replayed from a CUDA graph; the buffer must hold the last launch's sums, which holds
/// only if each launch waited for the one before it to finish before writing.
fn streaming_pdl(
    gpu: &comm::Gpu,
    pool: &comm::kernels::Pool,
    plain: &comm::kernels::Kernels,
) -> anyhow::Result<String> {
    use comm::kernels::{reference, sum_partials};
    let (major, minor) = gpu.compute_capability()?;
    if major < 9 {
        return Ok(format!(
            "programmatic dependent launch not checked (compute capability {major}.{minor}, needs 9.0)"
        ));
    }
    let k = plain.with_pdl(gpu)?;
    let tokens = 3usize;
    let (act, a) = activations(gpu, tokens)?;
    let partial = gpu.alloc(k.partial_bytes())?;
    // Same block count for every launch, so that each writes every block's slot.
    let nvec = 1u64 << 20;
    let blocks = k.blocks_for(nvec, tokens) as usize;
    let launches: Vec<u64> = (0..6u64).map(|i| 1000 * i + 7).collect();
    let want = reference(pool.vecs(), *launches.last().unwrap(), nvec, &act, tokens);
    let mut worst = 0f64;
    let mut check = |label: &str| -> anyhow::Result<()> {
        let got = sum_partials(&gpu.download(&partial, partial.len())?, blocks, tokens);
        let e = relative_error(&got, &want);
        if e > 1e-4 {
            anyhow::bail!(
                "programmatic dependent launch ({label}): relative error {e:.2e} against the last launch's CPU reference"
            );
        }
        worst = worst.max(e);
        Ok(())
    };
    gpu.fill(&partial, 0)?;
    for &s in &launches {
        k.stream(gpu, pool, s, nvec, &a, tokens, &partial)?;
    }
    gpu.sync()?;
    check("eager")?;
    let graph = gpu.capture(|| {
        for &s in &launches {
            k.stream(gpu, pool, s, nvec, &a, tokens, &partial)?;
        }
        Ok(())
    })?;
    gpu.fill(&partial, 0)?;
    gpu.sync()?;
    graph.launch()?;
    gpu.sync()?;
    check("CUDA graph")?;
    Ok(format!(
        "programmatic dependent launch: {} back-to-back launches, eager and from a graph, max relative error {worst:.1e}",
        launches.len()
    ))
}

/// The GPU's rated clocks are read through the driver (both positive), and `--cpu-affinity
/// auto` resolves for this GPU and, when sysfs names its NUMA node, pins a thread to exactly
/// those CPUs (checked in /proc/thread-self/status).
pub(crate) fn clocks_and_affinity(device: usize) -> Check {
    use crate::launch::affinity::{self, CpuAffinity};
    let r = (|| -> anyhow::Result<String> {
        let (sm, mem) = comm::device::clocks_khz(device)?;
        if sm <= 0 || mem <= 0 {
            anyhow::bail!("rated clocks SM {sm} kHz, memory {mem} kHz: not positive");
        }
        let bus = comm::device::info(device)?.pci_bus_id;
        let root = std::path::Path::new("/");
        let f = affinity::resolve(&CpuAffinity::Auto, root, Some(&bus));
        let pinned = match f.cpus.as_deref() {
            None => format!("auto left the affinity alone: {}", f.note),
            Some(list) => {
                let want = affinity::parse_cpulist(list).map_err(anyhow::Error::msg)?;
                let w = want.clone();
                let got = std::thread::spawn(move || {
                    affinity::apply(&w).map(|_| affinity::allowed_cpus(std::path::Path::new("/")))
                })
                .join()
                .map_err(|_| anyhow::anyhow!("the pinning thread panicked"))??;
                if got.as_ref() != Some(&want) {
                    anyhow::bail!("pinned to {list}, the thread may run on {got:?}");
                }
                format!("pinned a thread to {list} ({})", f.note)
            }
        };
        Ok(format!(
            "SM {} MHz, memory {} MHz; {pinned}",
            sm / 1000,
            mem / 1000
        ))
    })();
    Check {
        name: "GPU clocks and CPU affinity".into(),
        launcher: "-".into(),
        pass: r.is_ok(),
        detail: r.unwrap_or_else(|e| format!("{e:#}")),
    }
}

fn spec(devices: &[usize], launcher: Launcher, timeout_s: f64) -> LaunchSpec {
    LaunchSpec {
        echo_stderr: false,
        ..LaunchSpec::new(devices.to_vec(), launcher, timeout_s)
    }
}

/// Every collective x dtype at three sizes (one element per rank, the verify's 43,008 B, 1 MiB),
/// eager and graph, in one run of the launcher.
fn collectives(devices: &[usize], launcher: Launcher, checks: &mut Vec<Check>) {
    let n = devices.len();
    let mut cases = vec![];
    for op in CollectiveKind::ALL {
        for dtype in [DType::Bf16, DType::F16, DType::F32] {
            for bytes in [dtype.size() * n as u64, 43008, 1 << 20] {
                let count = op.ops().count_for_size(bytes, dtype.size(), n).max(1);
                cases.push(CollCase {
                    op,
                    dtype,
                    count,
                    imp: Default::default(),
                });
            }
        }
    }
    run_cases(
        devices,
        launcher,
        &cases,
        "collectives",
        |case, graph, _sum, wrong| {
            (
                format!(
                    "{} {} count {} {}",
                    case.op.name(),
                    case.dtype.name(),
                    case.count,
                    eager_or_graph(graph)
                ),
                format!("{wrong} wrong elements"),
            )
        },
        checks,
    );
}

/// The P2P all-reduces (one-shot, two-shot) through the same harness as NCCL's: every dtype at
/// one element per rank, the verify's 43,008 B and 1 MiB, eager and graph, exact results. Where
/// two GPUs cannot reach each other the line says which and the checks are skipped.
fn p2p_collectives(devices: &[usize], launcher: Launcher, checks: &mut Vec<Check>) {
    if let Err(u) = comm::p2p::check_topology(devices) {
        checks.push(Check {
            name: "p2p all-reduces".into(),
            launcher: launcher.name().into(),
            pass: true,
            detail: format!("SKIPPED: {}", u.skipped(&[Impl::OneShot, Impl::TwoShot])),
        });
        return;
    }
    let n = devices.len();
    let mut cases = vec![];
    for imp in [Impl::OneShot, Impl::TwoShot] {
        for dtype in [DType::Bf16, DType::F16, DType::F32] {
            for bytes in [dtype.size() * n as u64, 43008, 1 << 20] {
                let count = (bytes / dtype.size()) as usize;
                cases.push(CollCase {
                    op: CollectiveKind::AllReduce,
                    dtype,
                    count,
                    imp,
                });
            }
        }
    }
    run_cases(
        devices,
        launcher,
        &cases,
        "p2p all-reduces",
        |case, graph, sum, wrong| {
            (
                format!(
                    "{} {} count {} {}",
                    case.imp,
                    case.dtype.name(),
                    case.count,
                    eager_or_graph(graph)
                ),
                format!("{wrong} wrong elements, {:.1} us", sum.median_us),
            )
        },
        checks,
    );
}

fn eager_or_graph(graph: bool) -> &'static str {
    if graph {
        "graph"
    } else {
        "eager"
    }
}

/// One run of the launcher over `cases`, eager and graph (3 iterations after 1 warm-up, in
/// batches of 2), and a check per case and mode: it passes when no element is wrong; `line`
/// gives its name and detail. A run that fails is one failed check named `failed_name`.
fn run_cases(
    devices: &[usize],
    launcher: Launcher,
    cases: &[CollCase],
    failed_name: &str,
    line: impl Fn(&CollCase, bool, &Summary, u64) -> (String, String),
    checks: &mut Vec<Check>,
) {
    let job = Job::Collective {
        cases: cases.to_vec(),
        graphs: vec![false, true],
        iters: 3,
        warmup: 1,
        batch: 2,
    };
    let raw = run_job(&spec(devices, launcher, 60.0), &job);
    if let Ok(r) = &raw {
        let n = devices.len();
        // per case, eager then graph: every slot's output
        let want: Vec<u64> = cases
            .iter()
            .flat_map(|c| [(SLOTS * c.op.ops().recv_elems(c.count, n)) as u64; 2])
            .collect();
        checks.push(slot_coverage(r, &want, failed_name, launcher));
    }
    let res = raw.and_then(|r| combine(&r, job.configs(), RankTime::Max));
    match res {
        Ok(c) => {
            for (i, case) in cases.iter().enumerate() {
                for (g, graph) in [false, true].into_iter().enumerate() {
                    let (sum, wrong) = (&c[i * 2 + g].0, c[i * 2 + g].1);
                    let (name, detail) = line(case, graph, sum, wrong);
                    checks.push(Check {
                        name,
                        launcher: launcher.name().into(),
                        pass: wrong == 0,
                        detail,
                    });
                }
            }
        }
        Err(e) => checks.push(Check {
            name: failed_name.into(),
            launcher: launcher.name().into(),
            pass: false,
            detail: format!("{e:#}"),
        }),
    }
}

/// The moving buffers: every rank's exact check compared, per configuration, `want` elements
/// ([`SLOTS`] x the outputs' elements, 0 for compute only). With every slot's output poisoned
/// before the check, a slot that no launch wrote counts as wrong, so this and `#wrong = 0`
/// together say that every slot was written and checked.
fn slot_coverage(results: &[RankResult], want: &[u64], what: &str, launcher: Launcher) -> Check {
    let mut bad = vec![];
    for r in results {
        if r.checked != want {
            let at = (0..want.len().max(r.checked.len()))
                .find(|&c| r.checked.get(c) != want.get(c))
                .unwrap_or(0);
            bad.push(format!(
                "rank {} configuration {at}: {:?} elements checked, {:?} wanted",
                r.rank,
                r.checked.get(at),
                want.get(at)
            ));
        }
    }
    let total: u64 = want.iter().sum();
    Check {
        name: format!("{what}: every buffer slot checked"),
        launcher: launcher.name().into(),
        pass: bad.is_empty() && !results.is_empty(),
        detail: if bad.is_empty() {
            format!(
                "{SLOTS} buffer slots per collective, {total} elements checked on each of {} ranks",
                results.len()
            )
        } else {
            bad.join("; ")
        },
    }
}

/// A rank that never makes its P2P calls: its peers' waits must time out naming it (rank 1),
/// the run must end within the signal timeout plus the launcher's, and leave no worker behind.
fn p2p_fault(devices: &[usize], checks: &mut Vec<Check>) {
    if comm::p2p::check_topology(devices).is_err() {
        return; // p2p_collectives said why
    }
    let timeout = 30.0;
    let mut sp = spec(devices, Launcher::Processes, timeout);
    sp.fault = Some(Fault {
        kind: FaultKind::P2pSilent,
        rank: 1,
    });
    let job = Job::Collective {
        cases: vec![CollCase {
            op: CollectiveKind::AllReduce,
            dtype: DType::Bf16,
            count: 21504,
            imp: Impl::OneShot,
        }],
        graphs: vec![false],
        iters: 3,
        warmup: 1,
        batch: 1,
    };
    checks.push(failing_run(
        &sp,
        &job,
        "rank 1 p2p-silent: peers name it".into(),
        "the run succeeded although rank 1 never signalled",
        |msg| msg.contains("rank 1 never signalled"),
        timeout,
        String::new(),
    ));
}

/// The Kimi-K2.5 verify schedule (comm and full), eager and graph: exact results in both.
fn verify(devices: &[usize], launcher: Launcher, checks: &mut Vec<Check>) {
    let shape = model::presets::preset("kimi-k2.5").expect("preset");
    // one rank replays the TP=8 schedule's per-rank collectives (TP=1 has none)
    let opt = ScheduleOptions {
        tp: if devices.len() == 1 {
            8
        } else {
            devices.len() as u64
        },
        ..Default::default()
    };
    let s = match model::build(&shape, &opt, Phase::Verify) {
        Ok(s) => s,
        Err(e) => {
            checks.push(Check {
                name: "verify schedule".into(),
                launcher: launcher.name().into(),
                pass: false,
                detail: format!("{e:#}"),
            });
            return;
        }
    };
    let runs = vec![
        (false, Mode::Comm),
        (true, Mode::Comm),
        (false, Mode::Full),
        (true, Mode::Full),
    ];
    let job = Job::Verify {
        schedule: s.clone(),
        runs: runs.clone(),
        iters: 3,
        warmup: 1,
        launches_per_layer: 2,
        run_impls: vec![],
        // Small jittered host gaps exercise the eager busy-wait; the exact-result checks hold
        // with them as without.
        host_gaps: crate::measure::gaps::HostGaps::from_request(
            &crate::measure::gaps::HostGapRequest {
                gap: Some(crate::measure::gaps::HostGap {
                    mean_us: 20.0,
                    jitter_us: 5.0,
                }),
                ..Default::default()
            },
            devices.len(),
            s.ops.len(),
        )
        .expect("valid host gaps"),
        timing_pass: 2,
        pdl: false,
    };
    let results = run_job(&spec(devices, launcher, 120.0), &job);
    if let Ok(r) = &results {
        let n = devices.len();
        let outputs: usize = s
            .ops
            .iter()
            .map(|op| match op {
                model::Op::Collective { kind, count, .. } => {
                    kind.ops().recv_elems(*count as usize, n)
                }
                _ => 0,
            })
            .sum();
        let want: Vec<u64> = runs
            .iter()
            .map(|(_, m)| match m {
                Mode::Compute => 0,
                _ => (SLOTS * outputs) as u64,
            })
            .collect();
        checks.push(slot_coverage(r, &want, "verify kimi-k2.5", launcher));
        // The per-collective pass: every rank, every run, each verify's collectives timed.
        for (c, (graph, mode)) in runs.iter().enumerate() {
            let per_rank: Vec<_> = r
                .iter()
                .map(|x| x.passes.get(c).cloned().unwrap_or_default())
                .collect();
            let ok_rank = |p: &Vec<crate::launch::timeline::PassIteration>| {
                p.len() == 2
                    && p.iter().all(|it| {
                        it.collectives.len() as u64 == s.n_collectives()
                            && it
                                .collectives
                                .iter()
                                .all(|t| t.dur_us > 0.0 && t.start_us >= 0.0)
                    })
            };
            let a = crate::launch::timeline::attribute_pass(&per_rank, String::new());
            checks.push(Check {
                name: format!(
                    "per-collective pass {} {}",
                    mode.name(),
                    if *graph { "graph" } else { "eager" }
                ),
                launcher: launcher.name().into(),
                pass: per_rank.iter().all(ok_rank)
                    && a.as_ref().is_some_and(|a| a.transfer_us > 0.0),
                detail: a.map_or("no attribution".into(), |a| {
                    format!(
                        "in collectives {:.0} us = transfer {:.0} + waiting {:.0} us per verify",
                        a.in_collective_us, a.transfer_us, a.waiting_us
                    )
                }),
            });
        }
    }
    match results.and_then(|r| combine(&r, runs.len(), RankTime::Max)) {
        Ok(c) => {
            for ((graph, mode), (sum, wrong)) in runs.iter().zip(c) {
                checks.push(Check {
                    name: format!(
                        "verify kimi-k2.5 {} {}",
                        mode.name(),
                        if *graph { "graph" } else { "eager" }
                    ),
                    launcher: launcher.name().into(),
                    pass: wrong == 0,
                    detail: format!(
                        "{} collectives, {wrong} wrong elements, {:.0} us per verify",
                        s.n_collectives(),
                        sum.median_us
                    ),
                });
            }
        }
        Err(e) => checks.push(Check {
            name: "verify kimi-k2.5".into(),
            launcher: launcher.name().into(),
            pass: false,
            detail: format!("{e:#}"),
        }),
    }
}

/// The schedule a trace exports when its step holds a broadcast and an all-to-all
/// (`trace --export-schedule`): an all-reduce, a broadcast from rank 0 and an all-to-all of
/// grouped sends and receives, replayed by `verify --schedule`'s job, eager and from a CUDA
/// graph, every element checked exactly.
fn exported_ops(devices: &[usize], launcher: Launcher, checks: &mut Vec<Check>) {
    let n = devices.len();
    let coll = |kind: CollectiveKind, count: u64| model::Op::Collective {
        kind,
        dtype: DType::Bf16,
        count,
        bytes_per_rank: count * DType::Bf16.size(),
        site: "trace".into(),
        layer: None,
    };
    let schedule = model::Schedule {
        model: "selftest:exported".into(),
        phase: Phase::Verify,
        tp: n as u64,
        tokens: 0,
        dtype: DType::Bf16,
        routing: model::Routing::Uniform,
        experts_per_layer: 0.0,
        ops: vec![
            coll(CollectiveKind::AllReduce, 21504),
            coll(CollectiveKind::Broadcast, 21504),
            coll(CollectiveKind::AllToAll, 2688),
        ],
        config_reading: None,
    };
    let runs = vec![(false, Mode::Comm), (true, Mode::Comm)];
    let job = Job::Verify {
        schedule,
        runs: runs.clone(),
        iters: 3,
        warmup: 1,
        launches_per_layer: 2,
        run_impls: vec![],
        host_gaps: Default::default(),
        timing_pass: 0,
        pdl: false,
    };
    let res = run_job(&spec(devices, launcher, 120.0), &job)
        .and_then(|r| combine(&r, runs.len(), RankTime::Max));
    match res {
        Ok(c) => {
            for ((graph, _), (_, wrong)) in runs.iter().zip(c) {
                checks.push(Check {
                    name: format!("exported broadcast + all-to-all {}", eager_or_graph(*graph)),
                    launcher: launcher.name().into(),
                    pass: wrong == 0,
                    detail: format!("3 collectives, {wrong} wrong elements"),
                });
            }
        }
        Err(e) => checks.push(Check {
            name: "exported broadcast + all-to-all".into(),
            launcher: launcher.name().into(),
            pass: false,
            detail: format!("{e:#}"),
        }),
    }
}

/// A variable set for the workers only must arrive in every worker.
fn env_round_trip(devices: &[usize], checks: &mut Vec<Check>) {
    let token = format!("selftest-{}", std::process::id());
    let mut sp = spec(devices, Launcher::Processes, 60.0);
    sp.env_overrides
        .insert("NCCL_VERIFYBENCH_SELFTEST".into(), token.clone());
    let res = run_job(&sp, &Job::Env);
    let (pass, detail) = match res {
        Ok(r) => {
            let seen: Vec<String> = r
                .iter()
                .map(|w| {
                    format!(
                        "rank {}: {}",
                        w.rank,
                        w.nccl_env
                            .get("NCCL_VERIFYBENCH_SELFTEST")
                            .map(String::as_str)
                            .unwrap_or("missing")
                    )
                })
                .collect();
            let ok = r.len() == devices.len()
                && r.iter()
                    .all(|w| w.nccl_env.get("NCCL_VERIFYBENCH_SELFTEST") == Some(&token));
            let nvls_ok = match std::env::var("NCCL_NVLS_ENABLE") {
                Ok(v) => r
                    .iter()
                    .all(|w| w.nccl_env.get("NCCL_NVLS_ENABLE") == Some(&v)),
                Err(_) => true,
            };
            (ok && nvls_ok, seen.join("; "))
        }
        Err(e) => (false, format!("{e:#}")),
    };
    checks.push(Check {
        name: "worker environment round trip".into(),
        launcher: "processes".into(),
        pass,
        detail,
    });
}

/// Processes of ours still alive whose parent is this process (there should be none).
fn live_children() -> Vec<u32> {
    let me = std::process::id();
    let mut out = vec![];
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
                // ppid is the 2nd field after the ')' that closes the command name
                if let Some(rest) = stat.rsplit_once(')').map(|x| x.1) {
                    let f: Vec<&str> = rest.split_whitespace().collect();
                    if f.get(2).and_then(|p| p.parse::<u32>().ok()) == Some(me) {
                        out.push(pid);
                    }
                }
            }
        }
    }
    out
}

/// A rank that exits (or hangs) after joining must end the run with an error naming it, within
/// the timeout plus 5 s, and leave no worker behind.
fn fault(devices: &[usize], kind: FaultKind, checks: &mut Vec<Check>) {
    let timeout = 8.0;
    let mut sp = spec(devices, Launcher::Processes, timeout);
    sp.fault = Some(Fault { kind, rank: 1 });
    let s = model::build(
        &model::presets::preset("kimi-k2.5").expect("preset"),
        &ScheduleOptions {
            tp: devices.len() as u64,
            ..Default::default()
        },
        Phase::Verify,
    )
    .expect("schedule");
    let job = Job::Verify {
        schedule: s,
        runs: vec![(true, Mode::Comm)],
        iters: 5,
        warmup: 1,
        launches_per_layer: 0,
        run_impls: vec![],
        host_gaps: Default::default(),
        timing_pass: 0,
        pdl: false,
    };
    // An exiting rank is named; a hung rank stalls every rank, so the timeout names all silent
    // ranks.
    let names = |msg: &str| match kind {
        FaultKind::Hang => msg.contains("made no progress"),
        _ => msg.contains("rank 1"),
    };
    checks.push(failing_run(
        &sp,
        &job,
        format!("rank 1 {:?}s: run ends cleanly", kind).to_lowercase(),
        "the run succeeded although rank 1 failed",
        names,
        timeout + 5.0,
        format!(" (limit {:.0} s)", timeout + 5.0),
    ));
}

/// Runs `job` with a rank that fails on purpose: the check passes when the run fails with an
/// error that `names` accepts, within `limit_s` seconds, and leaves no worker behind. The
/// detail says how long it took (`limit_note` after it), how many workers were left and the
/// error's first line.
fn failing_run(
    sp: &LaunchSpec,
    job: &Job,
    name: String,
    succeeded: &str,
    names: impl Fn(&str) -> bool,
    limit_s: f64,
    limit_note: String,
) -> Check {
    let t0 = Instant::now();
    let res = run_job(sp, job);
    let took = t0.elapsed().as_secs_f64();
    let orphans = live_children();
    let (pass, detail) = match res {
        Ok(_) => (false, succeeded.to_string()),
        Err(e) => {
            let msg = format!("{e:#}");
            (
                names(&msg) && took <= limit_s && orphans.is_empty(),
                format!(
                    "ended in {took:.1} s{limit_note}, {} left behind: {}",
                    orphans.len(),
                    msg.lines().next().unwrap_or("")
                ),
            )
        }
    };
    Check {
        name,
        launcher: "processes".into(),
        pass,
        detail,
    }
}

/// The P2P all-reduce protocol on 2, 4 and 8 virtual ranks of one GPU (`comm::p2p`), and the
/// one-shot's per-call time there (43,008 B bf16), returned as lines that say what it is: not a
/// P2P measurement.
fn p2p_virtual_ranks(device: usize, checks: &mut Vec<Check>) -> Vec<String> {
    let ranks = [2, 4, 8];
    let failed = |name: &str, e: anyhow::Error| Check {
        name: name.into(),
        launcher: "virtual".into(),
        pass: false,
        detail: format!("{e:#}"),
    };
    match comm::p2p::virtual_rank_checks(device, &ranks) {
        Ok(v) => checks.extend(v.into_iter().map(|c| Check {
            name: c.name,
            launcher: "virtual".into(),
            pass: c.pass,
            detail: c.detail,
        })),
        Err(e) => checks.push(failed("p2p virtual ranks", e)),
    }
    match comm::p2p::virtual_rank_timings(device, &ranks, comm::p2p::Impl::OneShot, 21504) {
        Ok(t) => t.iter().map(ToString::to_string).collect(),
        Err(e) => {
            checks.push(failed("p2p virtual ranks: one-shot timing", e));
            vec![]
        }
    }
}

/// The threads launcher's abort path on virtual P2P ranks of one GPU
/// ([`crate::launch::run::threads_drill`], 4 rank threads, 3 of them spinning in a one-shot
/// kernel on the last one's signal): when the last rank fails, the run must end with its error,
/// and when it hangs, with the others' `--timeout` deadline; both within the timeout plus 2 s,
/// every rank thread joined (the exchange's last holder is the drill) and every connection kept
/// until then.
fn threads_abort(device: usize, checks: &mut Vec<Check>) {
    use crate::launch::fault::{Drill, DRILL_FAILURE};
    use crate::launch::run::threads_drill;
    let (n, timeout) = (4, std::time::Duration::from_secs(5));
    let limit = timeout.as_secs_f64() + 2.0;
    for drill in [Drill::Fail, Drill::Hang] {
        let o = threads_drill(device, n, drill, timeout);
        let msg = o.error.clone().unwrap_or_default();
        let named = match drill {
            Drill::Fail => msg.contains(DRILL_FAILURE),
            // the run's error names the silent ranks and the timeout, whether the launcher's
            // watch or a rank's own wait saw the deadline first (both end the run at 5 s)
            Drill::Hang => msg.contains("made no progress for 5 s (--timeout)"),
        };
        let took = o.took.as_secs_f64();
        let pass = o.error.is_some()
            && named
            && took <= limit
            && o.kept == n
            && o.holders == 1
            && !msg.contains("did not leave");
        checks.push(Check {
            name: format!(
                "threads abort: last rank {}s, peers spin",
                format!("{drill:?}").to_lowercase()
            ),
            launcher: "threads".into(),
            pass,
            detail: match &o.error {
                None => "the run succeeded although a rank failed".into(),
                Some(e) => format!(
                    "ended in {took:.1} s (limit {limit:.0} s), {} of {n} connections kept, {} holder(s) left: {}",
                    o.kept,
                    o.holders,
                    e.lines().next().unwrap_or("")
                ),
            },
        });
    }
}

/// Runs every check the machine allows, writes the record (`export_json`, and stdout in json
/// format) and prints the table; 0 when every check passed, 1 otherwise.
pub fn run(a: &SelftestRequest) -> anyhow::Result<i32> {
    let started = crate::util::now_utc();
    // The P2P checks on virtual ranks run up to 8 kernels that wait for each other on 8
    // streams of one GPU: with CUDA's default of 8 hardware queues two of those streams can
    // share a queue, and a kernel then waits behind a peer that waits for it. 32 queues (CUDA's
    // maximum) keep them apart. Set before any CUDA call, while this process has one thread;
    // a value the user set is kept.
    if std::env::var_os("CUDA_DEVICE_MAX_CONNECTIONS").is_none() {
        std::env::set_var("CUDA_DEVICE_MAX_CONNECTIONS", "32");
    }
    crate::launch::run::check_gpu_flags(&a.gpu, None)?;
    if let Some(p) = &a.export_json {
        crate::util::check_outputs(&[("--export-json", p)], &[])?;
    }
    comm::libs::prepare(a.gpu.nccl_lib.as_deref())?;
    // One GPU proves what one GPU can: the streaming kernel and the P2P protocol on virtual ranks.
    let one_gpu = comm::device_count() == 1 && a.gpu.gpus.is_none() && a.gpu.devices.is_none();
    let devices = if one_gpu {
        vec![0]
    } else {
        select_devices(&a.gpu, None, comm::device_count())?
    };
    let mut checks = vec![];
    crate::note!(
        "selftest on GPUs {:?} (NCCL {})",
        devices,
        comm::nccl::version().unwrap_or_default()
    );
    if !one_gpu {
        let (access, p2p) = super::selftest_stress::p2p_access(&devices);
        checks.extend(access.map(Check::from));
        for l in [Launcher::Threads, Launcher::Processes] {
            collectives(&devices, l, &mut checks);
            if p2p {
                p2p_collectives(&devices, l, &mut checks);
            }
            verify(&devices, l, &mut checks);
            exported_ops(&devices, l, &mut checks);
        }
        env_round_trip(&devices, &mut checks);
        if !a.no_faults {
            fault(&devices, FaultKind::Exit, &mut checks);
            fault(&devices, FaultKind::Hang, &mut checks);
            if p2p {
                p2p_fault(&devices, &mut checks);
            }
        }
        if p2p && !a.no_stress {
            checks.extend(
                super::selftest_stress::p2p_stress(&devices)
                    .into_iter()
                    .map(Check::from),
            );
        }
    } else {
        // NCCL's own path on a communicator of one rank: every collective, dtype and size
        // exact, eager and from a CUDA graph, and the verify replay with its per-collective
        // pass, in threads and in processes. No transfer happens: the names say so.
        let from = checks.len();
        for l in [Launcher::Threads, Launcher::Processes] {
            collectives(&devices, l, &mut checks);
            verify(&devices, l, &mut checks);
            exported_ops(&devices, l, &mut checks);
        }
        for c in &mut checks[from..] {
            c.name = format!("1 rank: {}", c.name);
        }
        crate::note!(
            "{}: the NCCL checks run on a communicator of size 1",
            crate::launch::run::ONE_RANK
        );
    }
    checks.push(streaming_kernel(devices[0]));
    let p2p_times = p2p_virtual_ranks(devices[0], &mut checks);
    if one_gpu && !a.no_stress {
        checks.extend(
            super::selftest_stress::p2p_stress(&devices)
                .into_iter()
                .map(Check::from),
        );
    }
    if !a.no_faults {
        threads_abort(devices[0], &mut checks);
    }
    checks.push(clocks_and_affinity(devices[0]));
    let failed = checks.iter().filter(|c| !c.pass).count();
    let mut prov = crate::machine::provenance("nccl", started, &devices);
    if !one_gpu {
        prov.launcher = Some("threads, processes".into());
    }
    let rec = crate::record::Record::other(
        crate::record::Source::Measured,
        prov,
        crate::record::kinds::SELFTEST,
        &checks,
    )?;
    crate::output::write_and_print(
        &rec.to_json_pretty(),
        a.export_json.as_deref(),
        a.format.is_json(),
    )?;
    if a.format.is_json() {
        return Ok(if failed == 0 { 0 } else { 1 });
    }
    println!("  {:<46} {:<10} {:<5} detail", "check", "launcher", "");
    for c in &checks {
        println!(
            "  {:<46} {:<10} {:<5} {}",
            c.name,
            c.launcher,
            if c.pass { "PASS" } else { "FAIL" },
            c.detail
        );
    }
    for line in &p2p_times {
        println!("{line}");
    }
    println!(
        "selftest: {} passed, {} failed",
        checks.len() - failed,
        failed
    );
    Ok(if failed == 0 { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(r: usize, checked: &[u64]) -> RankResult {
        serde_json::from_value(serde_json::json!({
            "rank": r, "pid": 1, "device": r, "gpu": null, "nccl_env": {},
            "nccl_version": null, "nccl_library": null, "samples": [[1.0], [1.0]],
            "wrong": [0, 0], "checked": checked, "init_s": 0.1
        }))
        .unwrap()
    }

    /// An output of 16 elements per configuration: 3 slots x 16 = 48 checked on every rank
    /// passes; a rank that checked one slot fewer, or a worker that reports no count, fails
    /// and is named.
    #[test]
    fn slot_coverage_wants_every_slot_on_every_rank() {
        let want = [3 * 16, 3 * 16];
        let ok = slot_coverage(
            &[rank(0, &[48, 48]), rank(1, &[48, 48])],
            &want,
            "collectives",
            Launcher::Threads,
        );
        assert!(ok.pass, "{}", ok.detail);
        assert_eq!(ok.name, "collectives: every buffer slot checked");
        assert!(ok.detail.contains("96 elements"), "{}", ok.detail);
        let short = slot_coverage(
            &[rank(0, &[48, 48]), rank(1, &[48, 32])],
            &want,
            "collectives",
            Launcher::Threads,
        );
        assert!(!short.pass);
        assert!(
            short.detail.contains("rank 1 configuration 1: Some(32)"),
            "{}",
            short.detail
        );
        let old = slot_coverage(&[rank(0, &[])], &want, "x", Launcher::Processes);
        assert!(!old.pass);
        assert!(
            old.detail.contains("rank 0 configuration 0: None"),
            "{}",
            old.detail
        );
        assert!(!slot_coverage(&[], &want, "x", Launcher::Threads).pass);
    }
}
