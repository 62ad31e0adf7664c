//! `verifybench verify`: replay the verify schedule, eager and as a CUDA graph.

use crate::cli::args::{Backend, GpuArgs, GraphChoice, RepeatArgs, WorkloadArgs};
use crate::costmodel::ModelArgs;
use crate::record::{Body, Mode, Provenance, Record, Source};
use crate::report::{text, ExportArgs};

#[derive(Debug, Clone, clap::Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Eager launches, CUDA-graph replay, or both.
    #[arg(short = 'G', long, value_enum, default_value_t = GraphChoice::Both)]
    pub graph: GraphChoice,
    /// What to replay: the collectives only, the compute only, or both interleaved.
    /// Repeat or comma-separate to get several (e.g. comm,compute,full gives the split).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "comm")]
    pub mode: Vec<Mode>,
    /// Tiny kernels launched per layer to model a real layer's many small kernels (norms,
    /// rotary, router, quantization): eager mode pays their launch cost, graph mode does not.
    #[arg(long, default_value_t = 0)]
    pub launches_per_layer: u32,
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,
    #[command(flatten)]
    pub gpu: GpuArgs,
    #[command(flatten)]
    pub repeat: RepeatArgs,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub export: ExportArgs,
    /// Print nothing but errors (the JSON export still happens).
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Testing only: make a rank fail ("exit", "hang" or "abort", optionally ":RANK").
    #[arg(long, hide = true)]
    pub inject_fault: Option<String>,
}

/// The (graph, mode) runs requested, eager first, in mode order.
pub fn runs(a: &VerifyArgs) -> Vec<(bool, Mode)> {
    let mut modes = a.mode.clone();
    modes.dedup();
    let mut v = vec![];
    for m in modes {
        for g in a.graph.modes() {
            if !v.contains(&(g, m)) {
                v.push((g, m));
            }
        }
    }
    v
}

pub fn run(a: &VerifyArgs) -> anyhow::Result<i32> {
    if a.launches_per_layer > 10_000 {
        crate::usage_bail!(
            "--launches-per-layer {} is absurd: a real layer launches tens of kernels; use at most 10000",
            a.launches_per_layer
        );
    }
    let started = crate::util::now_utc();
    let backend = crate::cli::resolve_backend(a.backend, a.quiet)?;
    let record = match backend {
        Backend::Model => {
            // Testing only (sweep's fault tests): the model backend has no worker to break, so
            // the whole process fails the way a crashed or stuck worker would. The NCCL backend
            // injects the fault into one rank instead.
            match a
                .inject_fault
                .as_deref()
                .map(|f| f.split(':').next().unwrap_or(f))
            {
                Some("exit") => {
                    eprintln!("verifybench: injected fault: exit");
                    std::process::exit(3);
                }
                Some("hang") => loop {
                    std::thread::sleep(std::time::Duration::from_secs(3600));
                },
                Some("abort") => std::process::abort(),
                _ => {}
            }
            let s = a
                .workload
                .schedule(a.gpu.gpus.map(|g| g as u64).unwrap_or(8))?;
            let m =
                crate::costmodel::verify(&s, s.tp as usize, &runs(a), a.gpu.launcher, &a.model)?;
            let mut p = Provenance::here("model", started);
            p.launcher = Some(a.gpu.launcher.name().into());
            p.model_profile = Some(m.profile);
            p.notes = m.notes;
            Record::new(Source::Modeled, p, Body::Verify(m.result))
        }
        _ => crate::cli::nccl_verify(a, started)?,
    };
    a.export.write(std::slice::from_ref(&record))?;
    if !a.quiet {
        print!("{}", text::verify_table(&record));
    }
    let Body::Verify(v) = &record.body else {
        unreachable!("verify produces verify records")
    };
    let wrong: u64 = v.runs.iter().map(|r| r.wrong).sum();
    if wrong > 0 {
        anyhow::bail!("{wrong} elements of the collectives' results were wrong");
    }
    Ok(0)
}
