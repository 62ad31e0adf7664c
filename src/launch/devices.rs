//! Which GPUs the ranks run on: the GPU flags checked against each other and the workload's
//! `--tp` before any work, then against the machine ([`select_devices`]).

use crate::comm;
use crate::error::usage;
use crate::request::{ranks, GpuSpec, RankInputs, DEFAULT_RANKS, GPU_FLAGS};

/// Checks the GPU flags against each other and the workload's `tp`, before any work and on
/// any backend: `--gpus` at least 1, no GPU twice in `--devices`, `--gpus` and `--devices`
/// (and `--tp`) naming the same number of ranks ([`crate::request::ranks`]), `--nccl-lib` an
/// existing library or folder. Returns the rank count of a run that counts no GPUs: the
/// flags', else `tp`, else [`DEFAULT_RANKS`] (the NCCL backend selects the machine's GPUs
/// instead, [`select_devices`]).
pub(crate) fn check_gpu_flags(g: &GpuSpec, tp: Option<u64>) -> anyhow::Result<usize> {
    if g.gpus == Some(0) {
        return Err(usage("--gpus 0: give at least 1 GPU (2 or more for NCCL)"));
    }
    let max = crate::request::MAX_RANKS;
    if let Some(n) = g.gpus.filter(|&n| n > max) {
        return Err(usage(format!("--gpus {n}: give 1 to {max} GPUs")));
    }
    if let Some(d) = g.devices.as_ref().filter(|d| d.len() > max) {
        return Err(usage(format!(
            "--devices lists {} GPUs: give 1 to {max}",
            d.len()
        )));
    }
    if let Some(d) = &g.devices {
        if d.is_empty() {
            return Err(usage(
                "--devices is empty: list GPU ordinals, e.g. --devices 0,1",
            ));
        }
        let mut seen = d.clone();
        seen.sort_unstable();
        if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
            return Err(usage(format!(
                "--devices lists GPU {} twice: each rank needs its own GPU",
                w[0]
            )));
        }
    }
    let n = ranks(&RankInputs::of(g, tp), DEFAULT_RANKS, &GPU_FLAGS)?;
    if let Some(p) = &g.nccl_lib {
        comm::libs::find_nccl(Some(p))?;
    }
    Ok(n)
}

/// The checks `verify` makes before it starts workers, for commands that start them later
/// (`sweep` runs each point in child processes): a CUDA driver, and enough GPUs for the ranks.
pub(crate) fn preflight(g: &GpuSpec, wanted: Option<usize>) -> anyhow::Result<Vec<usize>> {
    check_gpu_flags(g, wanted.map(|w| w as u64))?;
    if !comm::libs::cuda_present() {
        return Err(usage(
            "no CUDA driver library (libcuda.so) found: --backend nccl needs GPUs with their driver; use --backend model for the cost model",
        ));
    }
    let min = if g.ranks() == Some(1) { 1 } else { 2 };
    select_devices_min(g, wanted, comm::device_count(), min)
}

/// Checks the GPU flags against a machine with `present` GPUs (usually
/// [`comm::device_count`]) and returns the device ordinals to use.
/// `wanted` is the rank count the workload needs (its --tp), if fixed.
pub(crate) fn select_devices(
    g: &GpuSpec,
    wanted: Option<usize>,
    present: usize,
) -> anyhow::Result<Vec<usize>> {
    select_devices_min(g, wanted, present, 2)
}

/// [`select_devices`] for a job that needs at least `min` GPUs. With `min` 1 (one rank's
/// compute, no collectives), a single GPU replays one rank's share of a workload of any
/// --tp, so `wanted` is not checked then.
pub(crate) fn select_devices_min(
    g: &GpuSpec,
    wanted: Option<usize>,
    present: usize,
    min: usize,
) -> anyhow::Result<Vec<usize>> {
    if present == 0 {
        return Err(usage(
            "no GPU found (no CUDA driver or no device): this needs a GPU (verify, collective and sweep can run the cost model instead: --backend model)",
        ));
    }
    let devices: Vec<usize> = if let Some(d) = &g.devices {
        if let Some(bad) = d.iter().find(|&&x| x >= present) {
            return Err(usage(format!(
                "--devices names GPU {bad}, but this machine has {present} GPU{} (0..{})",
                if present == 1 { "" } else { "s" },
                present - 1
            )));
        }
        let mut seen = d.clone();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != d.len() {
            return Err(usage("--devices lists a GPU twice"));
        }
        d.clone()
    } else {
        let n = g.gpus.or(wanted).unwrap_or(present);
        if n > present {
            let flag = if g.gpus.is_some() { "--gpus" } else { "--tp" };
            return Err(usage(format!(
                "{flag} {n} needs {n} GPUs, but this machine has {present}"
            )));
        }
        (0..n).collect()
    };
    if min == 1 && devices.len() == 1 {
        return Ok(devices);
    }
    if devices.len() < 2 {
        return Err(usage(format!(
            "the NCCL backend needs at least 2 GPUs (got {}); verify, collective and sweep can run the cost model instead (--backend model)",
            devices.len()
        )));
    }
    if let Some(w) = wanted {
        if w != devices.len() {
            return Err(usage(format!(
                "--tp {w} needs {w} ranks, but {} GPUs were selected; make --tp match --gpus/--devices",
                devices.len()
            )));
        }
    }
    Ok(devices)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(gpus: Option<usize>, devices: Option<Vec<usize>>) -> GpuSpec {
        GpuSpec {
            gpus,
            devices,
            ..Default::default()
        }
    }

    #[test]
    fn select_devices_checks_the_flags_against_the_machine() {
        let usage = |r: anyhow::Result<Vec<usize>>| {
            let e = r.unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{e}");
            e.to_string()
        };
        assert_eq!(
            select_devices(&gpus(None, None), None, 4).unwrap(),
            vec![0, 1, 2, 3]
        );
        assert_eq!(
            select_devices(&gpus(Some(2), None), None, 4).unwrap(),
            vec![0, 1]
        );
        assert_eq!(
            select_devices(&gpus(None, None), Some(2), 8).unwrap(),
            vec![0, 1]
        );
        assert_eq!(
            select_devices(&gpus(None, Some(vec![3, 1])), Some(2), 4).unwrap(),
            vec![3, 1]
        );
        assert!(usage(select_devices(&gpus(None, None), None, 0)).contains("no GPU found"));
        assert!(
            usage(select_devices(&gpus(None, Some(vec![0, 4])), None, 4))
                .contains("--devices names GPU 4, but this machine has 4 GPUs (0..3)")
        );
        assert!(usage(select_devices(&gpus(None, Some(vec![1, 1])), None, 4)).contains("twice"));
        assert!(usage(select_devices(&gpus(Some(8), None), None, 4)).starts_with("--gpus 8"));
        assert!(usage(select_devices(&gpus(None, None), Some(8), 4)).starts_with("--tp 8"));
        assert!(usage(select_devices(&gpus(None, None), None, 1)).contains("at least 2 GPUs"));
        // one rank's compute: one GPU for a workload of any --tp
        assert_eq!(
            select_devices_min(&gpus(Some(1), None), Some(8), 1, 1).unwrap(),
            vec![0]
        );
        assert_eq!(
            select_devices_min(&gpus(None, Some(vec![3])), Some(8), 4, 1).unwrap(),
            vec![3]
        );
        assert!(
            usage(select_devices_min(&gpus(Some(1), None), Some(8), 1, 2))
                .contains("at least 2 GPUs")
        );
        assert!(
            usage(select_devices_min(&gpus(Some(2), None), Some(8), 2, 1)).starts_with("--tp 8")
        );
        assert!(usage(select_devices(&gpus(Some(2), None), Some(4), 8))
            .contains("--tp 4 needs 4 ranks, but 2 GPUs were selected"));
    }
}
