//! `verifybench env`: GPUs, links, driver, NCCL library and version, and the NCCL_* environment
//! each worker process really sees.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::cli::args::GpuArgs;
use crate::comm;
use crate::launch::{run::run_job, Job, LaunchSpec};
use crate::record::{GpuInfo, WorkerInfo};

#[derive(Debug, Clone, clap::Args)]
pub struct EnvArgs {
    #[command(flatten)]
    pub gpu: GpuArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = crate::cli::plan::Format::Table)]
    pub format: crate::cli::plan::Format,
}

/// What `env` found.
#[derive(Debug, Clone, Serialize)]
pub struct EnvReport {
    pub host: String,
    pub driver_version: Option<String>,
    pub cuda_driver_api: Option<String>,
    pub gpus: Vec<GpuInfo>,
    /// peer[i][j]: GPU i can access GPU j's memory directly.
    pub peer_access: Vec<Vec<bool>>,
    pub nccl_version: Option<String>,
    pub nccl_library: Option<String>,
    pub nvrtc_available: bool,
    pub nvrtc_library: Option<String>,
    /// NCCL_* variables of this process.
    pub nccl_env: BTreeMap<String, String>,
    /// What each worker process (started like a real run's workers) saw.
    pub workers: Vec<WorkerInfo>,
    pub problems: Vec<String>,
}

pub fn gather(a: &EnvArgs) -> anyhow::Result<EnvReport> {
    let mut r = EnvReport {
        host: crate::util::hostname(),
        driver_version: comm::device::driver_version(),
        cuda_driver_api: None,
        gpus: vec![],
        peer_access: vec![],
        nccl_version: None,
        nccl_library: None,
        nvrtc_available: false,
        nvrtc_library: None,
        nccl_env: crate::util::nccl_env(),
        workers: vec![],
        problems: vec![],
    };
    let n = comm::device_count();
    if n == 0 {
        r.problems
            .push("no CUDA driver or no GPU: only --backend model can run here".into());
        return Ok(r);
    }
    if let Err(e) = comm::libs::prepare(a.gpu.nccl_lib.as_deref()) {
        r.problems.push(format!("{e:#}"));
    }
    r.cuda_driver_api = comm::device::driver_cuda_version();
    for i in 0..n {
        match comm::device::info(i) {
            Ok(g) => r.gpus.push(g),
            Err(e) => r.problems.push(e.to_string()),
        }
    }
    r.peer_access = (0..n)
        .map(|i| {
            (0..n)
                .map(|j| i == j || comm::device::can_access_peer(i, j).unwrap_or(false))
                .collect()
        })
        .collect();
    r.nccl_version = comm::nccl::version();
    r.nccl_library = comm::libs::loaded_path("libnccl");
    r.nvrtc_available = comm::libs::nvrtc_present();
    if r.nvrtc_available {
        let _ = comm::kernels::nvrtc_version();
        r.nvrtc_library = comm::libs::loaded_path("libnvrtc");
    }
    if n >= 2 {
        let devices = crate::launch::run::select_devices(&(&a.gpu).into(), None, n)?;
        let spec = LaunchSpec::new(devices, a.gpu.launcher, a.gpu.timeout);
        let res = run_job(&spec, &Job::Env)?;
        r.workers = res
            .iter()
            .map(|x| WorkerInfo {
                rank: x.rank,
                pid: x.pid,
                device: x.device,
                nccl_env: x.nccl_env.clone(),
            })
            .collect();
        for w in &r.workers {
            if w.nccl_env != r.nccl_env {
                r.problems.push(format!(
                    "worker of rank {} sees different NCCL_* variables than this process",
                    w.rank
                ));
            }
        }
    }
    Ok(r)
}

pub fn render(r: &EnvReport) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "host            {}", r.host);
    let _ = writeln!(
        o,
        "driver          {}{}",
        r.driver_version.as_deref().unwrap_or("?"),
        r.cuda_driver_api
            .as_deref()
            .map(|c| format!(" (CUDA {c})"))
            .unwrap_or_default()
    );
    let _ = writeln!(
        o,
        "NCCL            {} from {}",
        r.nccl_version.as_deref().unwrap_or("not loaded"),
        r.nccl_library.as_deref().unwrap_or("?")
    );
    let _ = writeln!(
        o,
        "NVRTC           {}",
        if r.nvrtc_available {
            r.nvrtc_library.as_deref().unwrap_or("available")
        } else {
            "not found (needed only for --mode compute/full)"
        }
    );
    let _ = writeln!(o, "\nGPUs");
    for g in &r.gpus {
        let _ = writeln!(
            o,
            "  {:>2}  {:<24} {:<14} {:>8.1} GiB",
            g.index,
            g.name,
            g.pci_bus_id,
            g.memory_bytes as f64 / (1u64 << 30) as f64
        );
    }
    if r.peer_access.len() > 1 {
        let _ = writeln!(
            o,
            "\nPeer access (P2P) matrix: row can read column's memory"
        );
        let _ = write!(o, "     ");
        for j in 0..r.peer_access.len() {
            let _ = write!(o, "{j:>4}");
        }
        let _ = writeln!(o);
        for (i, row) in r.peer_access.iter().enumerate() {
            let _ = write!(o, "  {i:>2} ");
            for (j, &p) in row.iter().enumerate() {
                let _ = write!(
                    o,
                    "{:>4}",
                    if i == j {
                        "-"
                    } else if p {
                        "yes"
                    } else {
                        "no"
                    }
                );
            }
            let _ = writeln!(o);
        }
    }
    let env_line = |m: &BTreeMap<String, String>| {
        if m.is_empty() {
            "(none)".to_string()
        } else {
            m.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        }
    };
    let _ = writeln!(o, "\nNCCL_* in this process: {}", env_line(&r.nccl_env));
    for w in &r.workers {
        let _ = writeln!(
            o,
            "NCCL_* seen by the worker of rank {} (pid {}, GPU {}): {}",
            w.rank,
            w.pid,
            w.device,
            env_line(&w.nccl_env)
        );
    }
    for p in &r.problems {
        let _ = writeln!(o, "problem: {p}");
    }
    o
}

pub fn run(a: &EnvArgs) -> anyhow::Result<i32> {
    let r = gather(a)?;
    match a.format {
        crate::cli::plan::Format::Json => println!("{}", serde_json::to_string_pretty(&r)?),
        crate::cli::plan::Format::Table => print!("{}", render(&r)),
    }
    Ok(0)
}
