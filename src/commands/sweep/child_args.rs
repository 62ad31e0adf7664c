//! What every child of a sweep is told: the `verify` command line of the workload, backend,
//! launcher, graph, mode, GPU and model flags, and the rank count when none is given.

use super::request::SweepRequest;
use crate::request::BackendKind;

pub(super) fn default_tp(a: &SweepRequest, backend: BackendKind) -> u64 {
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
/// GPU and model flags. The NCCL library is not among them: each point's children get theirs
/// through their environment ([`crate::sweep::library`]).
pub(crate) fn verify_args(a: &SweepRequest, backend: BackendKind, tp: u64) -> Vec<String> {
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
    v.extend(["--timeout".into(), a.gpu.timeout.to_string()]);
    v.extend(["--rank-time".into(), a.repeat.rank_time.name().into()]);
    v.extend(a.host_gaps.to_args());
    v.extend(["--cpu-affinity".into(), a.gpu.cpu_affinity.arg()]);
    // a fitted profile sets every parameter of the model: the link goes only without one
    // (the two together are refused)
    match &a.model.profile {
        Some(p) => v.extend(["--profile".into(), p.display().to_string()]),
        None => v.extend(["--link".into(), a.model.link.clone()]),
    }
    v
}
