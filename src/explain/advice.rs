//! What to run next (exact commands) and the engines' flags that decide CUDA-graph capture.

use serde::Serialize;

use super::figures::Base;
use super::fit::JitterFit;
use super::gather::Gathered;
use super::pricing::Pricing;
use super::request::ExplainRequest;
use crate::model::Engine;
use crate::request::Workload;

/// One command to run next.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct NextStep {
    pub(crate) why: String,
    pub(crate) command: String,
}

/// An engine flag that decides whether the verify runs from a CUDA graph, with its source.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct EngineFlag {
    pub(crate) engine: Engine,
    pub(crate) flag: &'static str,
    pub(crate) effect: &'static str,
    pub(crate) source: &'static str,
}

pub(crate) fn next_steps(
    req: &ExplainRequest,
    w: &Workload,
    ranks: usize,
    b: &Base,
    f: Option<&JitterFit>,
    g: &Gathered,
    p: &Pricing,
) -> Vec<NextStep> {
    let wl = format!("--model {} --tp {} --tokens {}", w.model, ranks, w.tokens);
    let mut out = vec![];
    let gaps = f
        .filter(|f| f.reached)
        .map(|f| format!(" --host-gap-us {:.0}:{:.0}", f.mean_us, f.jitter_us))
        .unwrap_or_default();
    if g.trace.is_none() {
        out.push(NextStep {
            why: "measure the split instead of inferring it: profile the server (every rank) and explain its traces".into(),
            command: format!(
                "verifybench explain --trace TRACE_DIR --decode-ms {}",
                req.cycle
                    .decode_ms
                    .map(crate::util::fmt_number)
                    .unwrap_or_else(|| "MS".into())
            ),
        });
    } else {
        out.push(NextStep {
            why: "replay the server's own collective sequence, eager and from a CUDA graph".into(),
            command: "verifybench trace TRACE_DIR --export-schedule server.json && verifybench verify --backend nccl --schedule server.json --graph both".into(),
        });
    }
    if !b.already_graph {
        out.push(NextStep {
            why: if gaps.is_empty() {
                "confirm on the real machine what a CUDA graph gives (eager against graph)".into()
            } else {
                "confirm the waiting and what a CUDA graph gives on the real machine: the fitted host gaps, eager against graph".into()
            },
            command: format!(
                "verifybench verify --backend nccl --gpus {ranks} {wl}{gaps} --graph both"
            ),
        });
    }
    out.push(NextStep {
        why: "find the best NCCL setting on the real machine, then explain with it".into(),
        command: format!(
            "verifybench sweep --backend nccl --gpus {ranks} {wl} -L NCCL_PROTO=LL,LL128,Simple -L NCCL_ALGO=Ring,Tree --graph both --results sweep.jsonl && verifybench explain --sweep sweep.jsonl ..."
        ),
    });
    let expect = req
        .expect
        .first()
        .or(g.sweep.as_ref().and_then(|s| s.overrides.first()))
        .map(|(k, v)| format!("{k}={v}"))
        .unwrap_or_else(|| "NCCL_PROTO=LL".into());
    out.push(NextStep {
        why: "check that the setting reached every worker of the running server".into(),
        command: format!("verifybench inspect --pid SERVER_PID --expect {expect}"),
    });
    if p.oneshot_transfer_us.is_ok() && ranks <= 8 {
        out.push(NextStep {
            why: "measure the one-shot custom all-reduce against NCCL on these GPUs".into(),
            command: format!(
                "verifybench verify --backend nccl --gpus {ranks} {wl} --impl nccl,oneshot --graph both"
            ),
        });
    }
    out
}

/// The engines' flags that decide whether the verify runs from a CUDA graph (and whether the
/// custom all-reduce runs), each with the file it is defined in.
pub(crate) const ENGINE_FLAGS: &[EngineFlag] = &[
    EngineFlag {
        engine: Engine::Sglang,
        flag: "--disable-cuda-graph",
        effect: "must be absent: with it every decode and verify step runs eagerly",
        source: "sgl-project/sglang python/sglang/srt/server_args.py",
    },
    EngineFlag {
        engine: Engine::Sglang,
        flag: "--cuda-graph-max-bs N / --cuda-graph-bs N..",
        effect: "the verify's batch (requests x (k+1) tokens with EAGLE) must be among the captured sizes, else it runs eagerly (`cuda graph: False` in the decode log)",
        source: "sgl-project/sglang python/sglang/srt/server_args.py",
    },
    EngineFlag {
        engine: Engine::Sglang,
        flag: "--disable-custom-all-reduce",
        effect: "NCCL for every all-reduce; on more than two PCIe GPUs the custom all-reduce is off anyway",
        source: "sgl-project/sglang python/sglang/srt/server_args.py; python/sglang/srt/distributed/device_communicators/custom_all_reduce.py",
    },
    EngineFlag {
        engine: Engine::Vllm,
        flag: "--enforce-eager",
        effect: "must be absent: with it no CUDA graph is captured",
        source: "vllm-project/vllm vllm/engine/arg_utils.py",
    },
    EngineFlag {
        engine: Engine::Vllm,
        flag: "--compilation-config '{\"cudagraph_mode\": \"FULL_AND_PIECEWISE\"}'",
        effect: "NONE runs eagerly; PIECEWISE leaves attention (and what sits between the pieces) outside the graph; the capture sizes (cudagraph_capture_sizes) must cover the verify's batch",
        source: "vllm-project/vllm vllm/config/compilation.py",
    },
    EngineFlag {
        engine: Engine::Vllm,
        flag: "--disable-custom-all-reduce",
        effect: "NCCL for every all-reduce; on more than two PCIe GPUs the custom all-reduce is off anyway",
        source: "vllm-project/vllm vllm/engine/arg_utils.py; vllm/distributed/device_communicators/custom_all_reduce.py",
    },
];

pub(crate) fn engine_flags(engine: Option<Engine>) -> Vec<EngineFlag> {
    ENGINE_FLAGS
        .iter()
        .filter(|f| engine.is_none_or(|x| x == f.engine))
        .cloned()
        .collect()
}
