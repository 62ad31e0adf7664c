//! Known traps between "I set it" and "the verify got faster", each with the evidence that
//! shows it and where its rule comes from. A trap is `found` only when its evidence is in what
//! the user gave; otherwise `not found` (the evidence is there and clean) or `not checked`
//! (with what to give; also where the evidence is of another machine than the one priced).
//! The table lives beside the trace analysis that proves some of them
//! ([`in_trace`], for `verifybench trace`); `verifybench explain` checks them all ([`check`]).

use serde::Serialize;

use super::analysis::{Analysis, TrapFound};
use crate::evidence::checks::other_machine;
use crate::evidence::nccl::{env_lines, graph_lines, machine, sys_graph_line};
use crate::evidence::{CustomAllReduce, LaunchMode, NcclLogText, ServerLog};

/// One trap: its rule, and where the rule comes from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Rule {
    pub(crate) id: &'static str,
    pub(crate) name: &'static str,
    /// What shows it.
    pub(crate) evidence: &'static str,
    /// Where the rule comes from (engine or library source, or a published measurement).
    pub(crate) source: &'static str,
    /// What to give when it cannot be checked.
    pub(crate) give: &'static str,
}

/// The table of traps.
pub(crate) const RULES: &[Rule] = &[
    Rule {
        id: "settings-not-applied",
        name: "NCCL settings that never reached the workers",
        evidence: "the server's NCCL log (NCCL_DEBUG=INFO) prints `NCCL_X set by environment to V` for every variable a worker read; a variable of the chosen setting missing there was not seen by NCCL",
        source: "NCCL reads its variables in the process that creates the communicator and says so: NVIDIA/nccl src/misc/param.cc (integer parameters) and src/graph/tuning.cc (NCCL_PROTO, NCCL_ALGO) print `set by environment to`; serving engines spawn their workers with Python multiprocessing",
        give: "the server's NCCL log (--nccl-log, NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV), or check the running server with `verifybench inspect --pid PID --expect NAME=VALUE`",
    },
    Rule {
        id: "eager-verify",
        name: "the verify ran eagerly (no CUDA graph)",
        evidence: "no cudaGraphLaunch in the verify steps of the trace; SGLang's decode lines with `cuda graph: False`; vLLM's cudagraph_mode lowered to PIECEWISE (attention eager between the graph pieces), FULL_DECODE_ONLY (a verify batch that is not uniform runs without a graph) or NONE (`setting cudagraph_mode=`, `Overriding cudagraph_mode`), and `Cudagraph is disabled under eager mode` / `enforce_eager=True` / `Skipping CUDA graph capture`",
        source: "SGLang python/sglang/srt/managers/scheduler.py logs `cuda graph:` per decode batch (python/sglang/srt/server_args.py: --disable-cuda-graph, --cuda-graph-max-bs); vLLM vllm/config/compilation.py (cudagraph_mode) and --enforce-eager; vllm/v1/worker/gpu_model_runner.py and vllm/config/vllm.py lower cudagraph_mode to what the attention backend and the features in use support, and log it",
        give: "the server's traces (--trace) or its log (--server-log)",
    },
    Rule {
        id: "nccl-graph-search-sys",
        name: "NCCL's topology search fell to its slowest graph (dual-socket hosts)",
        evidence: "an NCCL INIT/GRAPH log line `Pattern .., nChannels 2, bw 0.1/0.1, type SYS/SYS`: the rings cross the CPU sockets at the lowest bandwidth NCCL searches for",
        source: "NVIDIA/nccl src/graph/search.cc (ncclTopoCompute lowers the bandwidth target until a graph fits, then prints the pattern, channels, bw and path type); published fix on 8 PCIe GPUs under two AMD sockets: an NCCL_GRAPH_FILE topology, 48 -> 26 us at 32 KB (the pcie-gen5-dual-socket profile of src/costmodel/profile.rs)",
        give: "the server's NCCL log with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH (--nccl-log)",
    },
    Rule {
        id: "custom-ar-slow",
        name: "a custom all-reduce far slower than the P2P model expects",
        evidence: "the trace's custom all-reduce kernels take more than 3x the modeled one-shot time per collective (transfer, the last rank's kernel)",
        source: "the P2P model of src/costmodel/custom.rs (signal round + (n-1) peer reads); published measurements gathered in issue 28: a 64 KB one-shot at 503.9 us against NCCL's 67.8 us behind PCIe switches with a posted-write arbitration bug, 242 us against ~17 us where the driver stages P2P through system memory",
        give: "the server's traces with its custom all-reduce kernels (--trace)",
    },
    Rule {
        id: "engine-custom-ar-off",
        name: "SGLang and vLLM turn their custom all-reduce off on more than two PCIe GPUs",
        evidence: "the server log's `Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs` in its workers; against it, the lines of a build that turns it on (`PCIe custom allreduce enabled via VLLM_ENABLE_PCIE_ALLREDUCE=1 ...`, `Registering N cuda graph addresses`), each worker as its last line says",
        source: "sgl-project/sglang python/sglang/srt/distributed/device_communicators/custom_all_reduce.py and vllm-project/vllm vllm/distributed/device_communicators/custom_all_reduce.py: `world_size > 2 and not full_nvlink` disables it, and should_custom_ar keeps it for world size 2 or full NVLink only; the RTX PRO 6000 community's vLLM build allows it on PCIe with VLLM_ENABLE_PCIE_ALLREDUCE=1 (vllm-project/vllm pull requests 39040 and 39633)",
        give: "the server log (--server-log)",
    },
];

/// Whether a trap's evidence was there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status {
    Found,
    NotFound,
    NotChecked,
}

impl Status {
    pub(crate) fn words(self) -> &'static str {
        match self {
            Status::Found => "found",
            Status::NotFound => "not found",
            Status::NotChecked => "not checked",
        }
    }
}

/// One trap as checked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct TrapCheck {
    pub(crate) rule: Rule,
    pub(crate) status: Status,
    /// The evidence (found, not found) or what to give (not checked).
    pub(crate) detail: String,
}

/// What the traps look at.
#[derive(Clone, Copy)]
pub(crate) struct Inputs<'a> {
    pub(crate) trace: Option<&'a Analysis>,
    pub(crate) server_log: Option<&'a ServerLog>,
    pub(crate) nccl_logs: &'a [NcclLogText],
    /// A sweep's best setting, when it is not NCCL's defaults.
    pub(crate) sweep_best: Option<&'a str>,
    /// The NCCL settings the user gave the server.
    pub(crate) expect: &'a [(String, String)],
    /// The cost model's one-shot all-reduce, us per collective, and its profile.
    pub(crate) oneshot_us: Option<f64>,
    pub(crate) profile: &'a str,
    /// The machine priced: its GPUs (one tensor-parallel group) and the kind of its link
    /// (`nvlink`, `pci`, `shm`): the evidence of another machine is not checked.
    pub(crate) ranks: usize,
    pub(crate) link_kind: &'a str,
}

fn rule(id: &str) -> Rule {
    *RULES.iter().find(|r| r.id == id).expect("a known trap")
}

fn checked(id: &str, status: Status, detail: String) -> TrapCheck {
    let r = rule(id);
    let detail = if status == Status::NotChecked && detail.is_empty() {
        format!("give {}", r.give)
    } else {
        detail
    };
    TrapCheck {
        rule: r,
        status,
        detail,
    }
}

/// What a trace's steps say of the eager-verify trap: (launched eagerly, ran from graphs).
fn trace_launches(a: &Analysis) -> (Option<String>, Option<String>) {
    match a.step.as_ref() {
        Some(s) if s.eager_steps > 0 => (
            Some(format!(
                "{} of {} traced steps launched kernel by kernel (no cudaGraphLaunch)",
                s.eager_steps, s.steps
            )),
            None,
        ),
        Some(s) if s.graph_steps > 0 => (
            None,
            Some(format!(
                "all {} traced steps ran from cudaGraphLaunch",
                s.graph_steps
            )),
        ),
        _ => (None, None),
    }
}

/// The traps of [`RULES`] that a trace's own evidence proves, for `verifybench trace`: only
/// those found (the others need what a trace does not hold: the server's logs, a cost model).
/// A training job runs no verify, so its eager steps are no verify trap.
pub(crate) fn in_trace(a: &Analysis) -> Vec<TrapFound> {
    let training = a.rank_traces.iter().any(|r| r.training.is_some());
    let mut out = vec![];
    if let (Some(detail), false) = (trace_launches(a).0, training) {
        let r = rule("eager-verify");
        out.push(TrapFound {
            id: r.id.into(),
            name: r.name.into(),
            detail,
            source: r.source.into(),
        });
    }
    out
}

/// Checks every trap of [`RULES`] against the evidence; the NCCL logs of another machine
/// than the one priced ([`other_machine`]) are left out, and a trap that only they would
/// check is `not checked`, with why.
pub(crate) fn check(i: &Inputs) -> Vec<TrapCheck> {
    let (mut own, mut foreign) = (vec![], vec![]);
    for l in i.nccl_logs {
        match other_machine(&machine(l), i.ranks, i.link_kind, i.profile) {
            Some(why) => foreign.push(format!("{} ({why})", l.name)),
            None => own.push(l.clone()),
        }
    }
    let own_logs = Inputs {
        nccl_logs: &own,
        ..*i
    };
    let of_another = (own.is_empty() && !foreign.is_empty()).then(|| {
        format!(
            "the NCCL log given is of another machine than the {} GPUs over {} priced: {}; give the server's own NCCL log",
            i.ranks,
            i.profile,
            foreign.join("; ")
        )
    });
    let nccl = |id: &str, f: fn(&Inputs) -> TrapCheck| match &of_another {
        Some(why) => checked(id, Status::NotChecked, why.clone()),
        None => f(&own_logs),
    };
    vec![
        nccl("settings-not-applied", settings_not_applied),
        eager_verify(i),
        nccl("nccl-graph-search-sys", graph_search_sys),
        custom_ar_slow(i),
        engine_custom_ar_off(i),
    ]
}

/// Settings that never reached the workers: what the user set (--expect) against the
/// variables NCCL says it read.
fn settings_not_applied(i: &Inputs) -> TrapCheck {
    let env = env_lines(i.nccl_logs);
    let wanted: Vec<(String, String)> = i.expect.to_vec();
    let words = |v: &[(String, String)]| {
        v.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    if wanted.is_empty() {
        let seen = words(&env);
        let best = i
            .sweep_best
            .map(|s| format!(" (the sweep's best: {s})"))
            .unwrap_or_default();
        checked(
            "settings-not-applied",
            Status::NotChecked,
            format!(
                "give the settings the server was started with, --expect NAME=VALUE{best}, with the server's NCCL log (--nccl-log){}, or check the running server with `verifybench inspect --pid PID --expect NAME=VALUE`",
                if i.nccl_logs.is_empty() {
                    String::new()
                } else if seen.is_empty() {
                    "; the log given shows no `set by environment` line".to_string()
                } else {
                    format!("; the log given shows {seen}")
                }
            ),
        )
    } else if i.nccl_logs.is_empty() {
        checked(
            "settings-not-applied",
            Status::NotChecked,
            format!(
                "give the server's NCCL log (--nccl-log, NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV) to check {}, or run `verifybench inspect --pid PID --expect {}`",
                words(&wanted),
                words(&wanted[..1])
            ),
        )
    } else {
        let missing: Vec<(String, String)> = wanted
            .iter()
            .filter(|(k, v)| {
                !env.iter()
                    .any(|(ek, ev)| ek == k && ev.eq_ignore_ascii_case(v))
            })
            .cloned()
            .collect();
        if missing.is_empty() {
            checked(
                "settings-not-applied",
                Status::NotFound,
                format!("the NCCL log shows every setting given: {}", words(&wanted)),
            )
        } else {
            let instead: Vec<(String, String)> = env
                .iter()
                .filter(|(k, _)| missing.iter().any(|(m, _)| m == k))
                .cloned()
                .collect();
            checked(
                "settings-not-applied",
                Status::Found,
                format!(
                    "{} not in the NCCL log's `set by environment` lines{}: NCCL in the server did not read it; check the workers with `verifybench inspect --pid PID --expect {}`",
                    words(&missing),
                    if instead.is_empty() {
                        String::new()
                    } else {
                        format!(" (it read {})", words(&instead))
                    },
                    words(&missing[..1])
                ),
            )
        }
    }
}

/// The verify ran eagerly.
fn eager_verify(i: &Inputs) -> TrapCheck {
    let mut eager_evidence = vec![];
    let mut graph_evidence = vec![];
    if let Some(a) = i.trace {
        let (eager, graph) = trace_launches(a);
        eager_evidence.extend(eager);
        graph_evidence.extend(graph);
    }
    if let Some((l, launch)) = i.server_log.and_then(|l| Some((l, l.launch.as_ref()?))) {
        let said = format!("{}: `{}`: {}", l.file, launch.line, launch.meaning);
        match launch.mode {
            LaunchMode::Eager | LaunchMode::PartlyEager => eager_evidence.push(said),
            LaunchMode::Graph => graph_evidence.push(said),
        }
    }
    if !eager_evidence.is_empty() {
        checked("eager-verify", Status::Found, eager_evidence.join("; "))
    } else if !graph_evidence.is_empty() {
        checked("eager-verify", Status::NotFound, graph_evidence.join("; "))
    } else {
        checked("eager-verify", Status::NotChecked, String::new())
    }
}

/// NCCL's graph search at its floor across sockets.
fn graph_search_sys(i: &Inputs) -> TrapCheck {
    match sys_graph_line(i.nccl_logs) {
        Some((file, line)) => checked(
            "nccl-graph-search-sys",
            Status::Found,
            format!("{file}: `{line}`; give NCCL a topology file (NCCL_GRAPH_FILE) and price it with --link pcie-gen5-dual-socket against pcie-gen5"),
        ),
        None if graph_lines(i.nccl_logs) > 0 => checked(
            "nccl-graph-search-sys",
            Status::NotFound,
            format!(
                "{} graph-search lines, none at bw 0.1 across SYS",
                graph_lines(i.nccl_logs)
            ),
        ),
        None => checked(
            "nccl-graph-search-sys",
            Status::NotChecked,
            if i.nccl_logs.is_empty() {
                String::new()
            } else {
                "the NCCL log has no graph-search lines (`Pattern .., nChannels ..`): give one with NCCL_DEBUG_SUBSYS=INIT,GRAPH".into()
            },
        ),
    }
}

/// A custom all-reduce far slower than the model.
fn custom_ar_slow(i: &Inputs) -> TrapCheck {
    let custom = i.trace.and_then(|a| {
        let g = a
            .sequence
            .iter()
            .find(|g| g.op == "all_reduce" && g.implementation != "nccl")?;
        Some((a, g.implementation.clone()))
    });
    match custom {
        None if i.trace.is_some() => checked(
            "custom-ar-slow",
            Status::NotFound,
            "the trace's all-reduces ran through NCCL (no custom all-reduce kernel)".into(),
        ),
        None => checked("custom-ar-slow", Status::NotChecked, String::new()),
        Some((a, kernel)) => {
            let per_coll = a
                .attribution
                .as_ref()
                .filter(|t| t.matched > 0)
                .map(|t| t.total.transfer_us / t.matched as f64);
            match (per_coll, i.oneshot_us) {
                (Some(m), Some(e)) if m > 3.0 * e => checked(
                    "custom-ar-slow",
                    Status::Found,
                    format!("{kernel}: {m:.1} us per collective measured (transfer) against {e:.1} us modeled for the one-shot ({}): measure the links with `verifybench collective --impl nccl,oneshot` on the machine", i.profile),
                ),
                (Some(m), Some(e)) => checked(
                    "custom-ar-slow",
                    Status::NotFound,
                    format!("{kernel}: {m:.1} us per collective measured, within 3x of the modeled {e:.1} us"),
                ),
                _ => checked(
                    "custom-ar-slow",
                    Status::NotChecked,
                    format!("{kernel} ran, but its transfer needs every rank's trace (or the profile has no P2P model)"),
                ),
            }
        }
    }
}

/// The engines' custom all-reduce off on more than two PCIe GPUs: found where a worker says
/// it is off, not found where every worker that says it says it is on (or none says either);
/// not checked on the log of a server of another tensor-parallel size.
fn engine_custom_ar_off(i: &Inputs) -> TrapCheck {
    let id = "engine-custom-ar-off";
    let Some(l) = i.server_log else {
        return checked(id, Status::NotChecked, String::new());
    };
    if let Some(tp) = l.tensor_parallel.filter(|&tp| tp as usize != i.ranks) {
        return checked(
            id,
            Status::NotChecked,
            format!(
                "{} is the log of a server of tensor-parallel size {tp}, not of the {} GPUs priced: its custom all-reduce lines describe that server; give the log of the server whose verify is explained",
                l.file, i.ranks
            ),
        );
    }
    let (on, off) = l.custom_ar_split();
    let names = |v: &[&CustomAllReduce]| {
        v.iter()
            .map(|w| w.worker.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (off.first(), on.first()) {
        (Some(w), _) => checked(
            id,
            Status::Found,
            format!(
                "{}: `{}` in {} of {} workers ({}){}: the one-shot rows need an engine built to allow it on PCIe",
                l.file,
                w.line,
                off.len(),
                off.len() + on.len(),
                names(&off),
                match on.first() {
                    Some(x) => format!("; on in {} (`{}`)", names(&on), x.line),
                    None => String::new(),
                }
            ),
        ),
        (None, Some(w)) => checked(
            id,
            Status::NotFound,
            format!(
                "{}: on in all {} workers that say it ({}): `{}`",
                l.file,
                on.len(),
                names(&on),
                w.line
            ),
        ),
        (None, None) => checked(
            id,
            Status::NotFound,
            format!("{}: no `Custom allreduce is disabled` line", l.file),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_cites_a_source_and_says_what_to_give() {
        for r in RULES {
            assert!(r.source.len() > 20, "{}", r.id);
            assert!(!r.give.is_empty(), "{}", r.id);
        }
    }

    fn inputs<'a>(logs: &'a [NcclLogText], ranks: usize, link_kind: &'a str) -> Inputs<'a> {
        Inputs {
            trace: None,
            server_log: None,
            nccl_logs: logs,
            sweep_best: None,
            expect: &[],
            oneshot_us: None,
            profile: if link_kind == "nvlink" {
                "nvlink-h200"
            } else {
                "pcie-gen5"
            },
            ranks,
            link_kind,
        }
    }

    /// The real NCCL log of 2 H200s over NVLink (tests/data) checks the NCCL traps of those 2
    /// GPUs (its graph search is clean: not found), and of no other machine: for 8 PCIe GPUs
    /// they are not checked, with why.
    #[test]
    fn an_nccl_log_of_another_machine_checks_nothing() {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/nccl-2.28.3-h200x2-procs-default.log");
        let logs = crate::evidence::read_nccl_logs(&[p]).unwrap();
        let status =
            |f: &[TrapCheck], id: &str| f.iter().find(|t| t.rule.id == id).unwrap().clone();
        let own = check(&inputs(&logs, 2, "nvlink"));
        assert_eq!(
            status(&own, "nccl-graph-search-sys").status,
            Status::NotFound
        );
        let other = check(&inputs(&logs, 8, "pci"));
        for id in ["nccl-graph-search-sys", "settings-not-applied"] {
            let t = status(&other, id);
            assert_eq!(t.status, Status::NotChecked, "{id}: {t:?}");
            assert!(
                t.detail.contains("the NCCL log given is of another machine than the 8 GPUs over pcie-gen5 priced: nccl-2.28.3-h200x2-procs-default.log (2 ranks, P2P/CUMEM over NVL, 2 GPUs (busId 70, 60): no communicator of 8 ranks, NVLink where pcie-gen5 is PCIe)"),
                "{}",
                t.detail
            );
        }
    }

    /// The custom all-reduce as the built vLLM log says it (tests/data/README.md): on in all 8
    /// workers, so the trap is not found there; for another tensor-parallel size, not checked.
    #[test]
    fn the_custom_all_reduce_of_the_server_log() {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/vllm-glm51-mtp3-tp8.log");
        let l = crate::evidence::read_server_log(&p).unwrap();
        let t = engine_custom_ar_off(&Inputs {
            server_log: Some(&l),
            ..inputs(&[], 8, "pci")
        });
        assert_eq!(t.status, Status::NotFound, "{t:?}");
        assert!(
            t.detail.starts_with(
                "vllm-glm51-mtp3-tp8.log: on in all 8 workers that say it (Worker_TP0 pid=412, "
            ),
            "{}",
            t.detail
        );
        let t = engine_custom_ar_off(&Inputs {
            server_log: Some(&l),
            ..inputs(&[], 4, "pci")
        });
        assert_eq!(t.status, Status::NotChecked, "{t:?}");
        assert!(t
            .detail
            .contains("tensor-parallel size 8, not of the 4 GPUs priced"));
    }
}
