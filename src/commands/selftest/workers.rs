//! What the launchers do with their workers: the environment they hand them, and a rank that
//! exits, hangs or never makes its P2P calls (processes), or fails or hangs while its peers spin
//! (threads): the run must end in time with an error that names it, leaving no worker behind.

use std::time::Instant;

use super::{spec, Check};
use crate::comm;
use crate::comm::p2p::Impl;
use crate::launch::job::{CollCase, Fault, FaultKind};
use crate::launch::run::run_job;
use crate::launch::{Job, LaunchSpec};
use crate::model::{self, CollectiveKind, DType, Phase, ScheduleOptions};
use crate::record::Mode;
use crate::request::Launcher;

/// A variable set for the workers only must arrive in every worker.
pub(super) fn env_round_trip(devices: &[usize], checks: &mut Vec<Check>) {
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
    checks.push(Check::new(
        "worker environment round trip",
        "processes",
        pass,
        detail,
    ));
}

/// A rank that exits (or hangs) after joining must end the run with an error naming it, within
/// the timeout plus 5 s, and leave no worker behind.
pub(super) fn fault(devices: &[usize], kind: FaultKind, checks: &mut Vec<Check>) {
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
        cycle: None,
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

/// A rank that never makes its P2P calls: its peers' waits must time out naming it (rank 1),
/// the run must end within the signal timeout plus the launcher's, and leave no worker behind.
pub(super) fn p2p_fault(devices: &[usize], checks: &mut Vec<Check>) {
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
    Check::new(name, "processes", pass, detail)
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

/// The threads launcher's abort path on virtual P2P ranks of one GPU
/// ([`crate::launch::run::threads_drill`], 4 rank threads, 3 of them spinning in a one-shot
/// kernel on the last one's signal): when the last rank fails, the run must end with its error,
/// and when it hangs, with the others' `--timeout` deadline; both within the timeout plus 2 s,
/// every rank thread joined (the exchange's last holder is the drill) and every connection kept
/// until then.
pub(super) fn threads_abort(device: usize, checks: &mut Vec<Check>) {
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
