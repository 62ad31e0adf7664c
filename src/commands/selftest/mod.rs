//! `verifybench selftest`: exact-result checks of every collective, dtype, launcher and graph
//! mode on this machine's GPUs (every buffer slot of every collective written and checked), the
//! worker environment round trip, clean failure of a dead or hung rank, the streaming kernel
//! against a CPU reference, the P2P all-reduce protocol on virtual ranks of one GPU, and the P2P
//! access check and stress test. Prints a pass/fail table; exits 1 when anything fails. On a
//! machine with one GPU the NCCL checks run on a communicator of one rank (no transfer), beside
//! the streaming kernel and the P2P virtual ranks. Here the request, the order of the checks,
//! the record and the table; the checks themselves are in [`exact`], [`kernels`], [`stress`] and
//! [`workers`].

use std::path::PathBuf;

use crate::comm;
use crate::launch::job::FaultKind;
use crate::launch::run::select_devices;
use crate::launch::LaunchSpec;
use crate::output::Format;
use crate::request::{GpuSpec, Launcher};

mod exact;
mod kernels;
mod stress;
mod workers;

/// What to check.
#[derive(Debug, Clone)]
pub(crate) struct SelftestRequest {
    /// The GPUs, launcher, NCCL library and timeout (`--gpus`, `--devices`, ...).
    pub(crate) gpu: GpuSpec,
    /// Skip the fault checks (a worker that exits or hangs on purpose).
    pub(crate) no_faults: bool,
    /// Skip the P2P stress test and its negative controls.
    pub(crate) no_stress: bool,
    /// Only the P2P access check and the stress test.
    pub(crate) stress_only: bool,
    /// Where to write the table as JSON.
    pub(crate) export_json: Option<PathBuf>,
    /// What stdout gets: the table, or (json) the record `export_json` gets.
    pub(crate) format: Format,
}

/// One line of the selftest table.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Check {
    pub(crate) name: String,
    pub(crate) launcher: String,
    pub(crate) pass: bool,
    pub(crate) detail: String,
}

impl Check {
    /// The check `name` through `launcher`: it passed when `pass`, `detail` says what it saw.
    pub(super) fn new(
        name: impl Into<String>,
        launcher: &str,
        pass: bool,
        detail: String,
    ) -> Check {
        let (name, launcher) = (name.into(), launcher.into());
        Check {
            name,
            launcher,
            pass,
            detail,
        }
    }

    /// A check that passed with `r`'s line, or failed with its error.
    fn of(name: impl Into<String>, launcher: &str, r: anyhow::Result<String>) -> Check {
        let pass = r.is_ok();
        Check::new(name, launcher, pass, r.unwrap_or_else(|e| format!("{e:#}")))
    }
}

/// The launch of the checks on `devices`: the workers' stderr kept off the terminal.
fn spec(devices: &[usize], launcher: Launcher, timeout_s: f64) -> LaunchSpec {
    LaunchSpec {
        echo_stderr: false,
        ..LaunchSpec::new(devices.to_vec(), launcher, timeout_s)
    }
}

fn eager_or_graph(graph: bool) -> &'static str {
    if graph {
        "graph"
    } else {
        "eager"
    }
}

/// Runs every check the machine allows, writes the record (`export_json`, and stdout in json
/// format) and prints the table; 0 when every check passed, 1 otherwise.
pub(crate) fn run(a: &SelftestRequest) -> anyhow::Result<i32> {
    let started = crate::util::now_utc();
    // The P2P checks on virtual ranks run up to 8 kernels that wait for each other on 8
    // streams of one GPU: with CUDA's default of 8 hardware queues two of those streams can
    // share a queue, and a kernel then waits behind a peer that waits for it. 32 queues (CUDA's
    // maximum) keep them apart. Set before any CUDA call, while this process has one thread;
    // a value the user set is kept.
    if std::env::var_os("CUDA_DEVICE_MAX_CONNECTIONS").is_none() {
        std::env::set_var("CUDA_DEVICE_MAX_CONNECTIONS", "32");
    }
    let mut files = crate::util::Files::new();
    a.gpu.add_to(&mut files);
    files
        .output("--export-json", a.export_json.as_deref())
        .check()?;
    crate::launch::run::check_gpu_flags(&a.gpu, None)?;
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
    if a.stress_only {
        let (access, p2p) = if one_gpu {
            (None, true)
        } else {
            stress::p2p_access(&devices)
        };
        checks.extend(access);
        if p2p {
            checks.extend(stress::p2p_stress(&devices));
        }
    } else if !one_gpu {
        let (access, p2p) = stress::p2p_access(&devices);
        checks.extend(access);
        for l in [Launcher::Threads, Launcher::Processes] {
            exact::collectives(&devices, l, &mut checks);
            if p2p {
                exact::p2p_collectives(&devices, l, &mut checks);
            }
            exact::verify(&devices, l, &mut checks);
            exact::exported_ops(&devices, l, &mut checks);
        }
        workers::env_round_trip(&devices, &mut checks);
        if !a.no_faults {
            workers::fault(&devices, FaultKind::Exit, &mut checks);
            workers::fault(&devices, FaultKind::Hang, &mut checks);
            if p2p {
                workers::p2p_fault(&devices, &mut checks);
            }
        }
        if p2p && !a.no_stress {
            checks.extend(stress::p2p_stress(&devices));
        }
    } else {
        // NCCL's own path on a communicator of one rank: every collective, dtype and size
        // exact, eager and from a CUDA graph, and the verify replay with its per-collective
        // pass, in threads and in processes. No transfer happens: the names say so.
        let from = checks.len();
        for l in [Launcher::Threads, Launcher::Processes] {
            exact::collectives(&devices, l, &mut checks);
            exact::verify(&devices, l, &mut checks);
            exact::exported_ops(&devices, l, &mut checks);
        }
        for c in &mut checks[from..] {
            c.name = format!("1 rank: {}", c.name);
        }
        crate::note!(
            "{}: the NCCL checks run on a communicator of size 1",
            crate::launch::run::ONE_RANK
        );
    }
    let mut p2p_times = vec![];
    if !a.stress_only {
        checks.extend(kernels::streaming_kernels(devices[0]));
        p2p_times = kernels::p2p_virtual_ranks(devices[0], &mut checks);
        if one_gpu && !a.no_stress {
            checks.extend(stress::p2p_stress(&devices));
        }
        if !a.no_faults {
            workers::threads_abort(devices[0], &mut checks);
        }
    }
    checks.push(kernels::clocks_and_affinity(devices[0]));
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
