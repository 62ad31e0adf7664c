//! What a decision means for the serving engines: which flag or variable turns their custom
//! all-reduce on or off, what bounds its size, where they refuse it, and what an NCCL setting
//! chosen for the larger shapes takes. Each line names the engine file it comes from (read at
//! vllm-project/vllm and sgl-project/sglang main, 2026):
//!
//! - vLLM `vllm/config/parallel.py`: `ParallelConfig.disable_custom_all_reduce` (the
//!   `--disable-custom-all-reduce` flag), "Disable the custom all-reduce kernel and fall back to
//!   NCCL".
//! - vLLM `vllm/distributed/device_communicators/custom_all_reduce.py`: `CustomAllreduce`
//!   takes world sizes 2, 4, 6, 8; `max_size` defaults to 8 MiB (no flag sets it); it is
//!   disabled with "not supported on more than two PCIe-only GPUs" when the world is larger
//!   than 2 and the GPUs are not fully connected by NVLink, and `should_custom_ar` takes only
//!   messages that are a multiple of 16 bytes and smaller than `max_size`, and, above two GPUs,
//!   only on full NVLink.
//! - vLLM `vllm/distributed/device_communicators/all_reduce_utils.py`:
//!   `CUSTOM_ALL_REDUCE_MAX_SIZES` caps `max_size` per compute capability and world size when
//!   symmetric memory is enabled (`VLLM_ALLREDUCE_USE_SYMM_MEM`, on by default in
//!   `vllm/envs.py`); `gpu_p2p_access_check` is the real peer-access test, skipped while
//!   `VLLM_SKIP_P2P_CHECK` is 1, its default (`vllm/envs.py`), which trusts the driver.
//! - vLLM `csrc/custom_all_reduce.cuh`: the kernel picks one-shot (`cross_device_reduce_1stage`)
//!   at two GPUs, and on full NVLink below 512 KiB (up to 4 GPUs) or 256 KiB (up to 8), two-shot
//!   above.
//! - SGLang `python/sglang/srt/server_args.py`: `--disable-custom-all-reduce`, "Disable the
//!   custom all-reduce kernel and fall back to NCCL"; `--enable-mscclpp` and
//!   `--enable-torch-symm-mem`, other all-reduce paths.
//! - SGLang `python/sglang/srt/distributed/device_communicators/custom_all_reduce.py`:
//!   `CustomAllreduce._MAX_CAR_SIZE` 8 MiB on CUDA (no flag), the same refusal on more than two
//!   PCIe-only GPUs (`is_full_nvlink`), the same 16-byte and size rule in `should_custom_ar`,
//!   and `SGLANG_SKIP_P2P_CHECK` (default 0: the real check runs).

use serde::{Deserialize, Serialize};

use super::decide::Band;
use super::measure::Candidate;
use crate::comm::p2p::Impl;

/// One engine setting and what the decision makes of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct EngineSetting {
    /// `vLLM` or `SGLang`.
    pub(crate) engine: String,
    /// The flag, variable or constant.
    pub(crate) setting: String,
    /// What to do with it for this decision.
    pub(crate) advice: String,
    /// The engine file it comes from.
    pub(crate) source: String,
}

/// How the GPUs of the decision are linked, as far as it is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Links {
    /// PCIe only (a modeled PCIe profile).
    Pcie,
    /// Every pair over NVLink (a modeled NVLink profile).
    Nvlink,
    /// Measured GPUs: the engines ask NVML, which this run does not.
    Unknown,
}

/// What the crossover asks of an engine.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ask {
    /// The largest all-reduce, bytes per rank, up to which a P2P kernel is chosen at every
    /// shape (`None`: at none of the smallest).
    pub(crate) custom_upto: Option<u64>,
    /// The smallest all-reduce above that (NCCL's), where a size bound must stop.
    pub(crate) nccl_from: Option<u64>,
    /// Larger shapes where a P2P kernel wins again after NCCL (a bound cannot express them).
    pub(crate) custom_again: Vec<u64>,
    /// The kernels chosen below the bound (`one-shot`, `two-shot`).
    pub(crate) kernels: Vec<String>,
    /// An NCCL setting chosen for some shape (`NCCL_PROTO=LL`), with the candidate's label.
    pub(crate) nccl_setting: Option<(String, String)>,
}

/// The ask of the graph crossover `bands` (the engines capture their decode and verify in CUDA
/// graphs).
pub(crate) fn ask(bands: &[Band], cands: &[Candidate]) -> Ask {
    let imp = |b: &Band| {
        cands
            .iter()
            .find(|c| c.id == b.candidate)
            .map_or(Impl::Nccl, |c| c.imp)
    };
    let p2p = |b: &Band| !b.within_noise && imp(b).is_p2p();
    let lead: Vec<&Band> = bands.iter().take_while(|b| p2p(b)).collect();
    let rest = &bands[lead.len()..];
    let mut kernels: Vec<String> = lead.iter().map(|b| b.choice.clone()).collect();
    kernels.dedup();
    let nccl_setting = bands
        .iter()
        .filter(|b| !b.within_noise)
        .filter_map(|b| cands.iter().find(|c| c.id == b.candidate))
        .find(|c| c.imp == Impl::Nccl && !c.overrides.is_empty())
        .map(|c| {
            let s: Vec<String> = c
                .overrides
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            (s.join(" "), c.label.clone())
        });
    Ask {
        custom_upto: lead.last().map(|b| b.upto_bytes),
        nccl_from: rest.first().map(|b| b.from_bytes),
        custom_again: rest
            .iter()
            .filter(|b| p2p(b))
            .map(|b| b.from_bytes)
            .collect(),
        kernels,
        nccl_setting,
    }
}

const VLLM_PARALLEL: &str = "vllm/config/parallel.py";
const VLLM_CAR: &str = "vllm/distributed/device_communicators/custom_all_reduce.py";
const VLLM_UTILS: &str = "vllm/distributed/device_communicators/all_reduce_utils.py";
const VLLM_ENVS: &str = "vllm/envs.py";
const VLLM_KERNEL: &str = "csrc/custom_all_reduce.cuh";
const SGL_ARGS: &str = "python/sglang/srt/server_args.py";
const SGL_CAR: &str = "python/sglang/srt/distributed/device_communicators/custom_all_reduce.py";

fn bytes(b: u64) -> String {
    format!(
        "{} ({} B)",
        crate::units::human_bytes(b),
        crate::units::grouped(b)
    )
}

/// The refusal on more than two GPUs without full NVLink, as it applies to `world` GPUs linked
/// as `links` (the same rule in both engines).
fn refusal(world: usize, links: Links, engine: &str) -> String {
    let lift = format!(
        "no flag lifts it: it takes a change to {engine}'s CustomAllreduce (the world-size check at start and the one in should_custom_ar) and a kernel that is correct on PCIe"
    );
    match (world, links) {
        (2, _) => "does not apply at 2 GPUs: the custom all-reduce runs over PCIe too".into(),
        (_, Links::Nvlink) => "does not apply: every pair is on NVLink".into(),
        (_, Links::Pcie) => format!(
            "refused here ({world} GPUs over PCIe: \"not supported on more than two PCIe-only GPUs\"); {lift}"
        ),
        (_, Links::Unknown) => format!(
            "refused unless every pair of the {world} GPUs is on NVLink (the engine asks NVML); {lift}"
        ),
    }
}

/// The engines' settings for a decision of `world` GPUs linked as `links`.
pub(crate) fn settings(a: &Ask, world: usize, links: Links) -> Vec<EngineSetting> {
    let on_off = match a.custom_upto {
        Some(b) => format!(
            "leave it unset: the custom all-reduce ({}) wins up to {}",
            a.kernels.join(", "),
            bytes(b)
        ),
        None => "set it: no P2P kernel beats NCCL at the smallest shape of this cycle".into(),
    };
    // Where the engine refuses its kernel anyway, the flag changes nothing until that is lifted.
    let on_off = if world > 2 && links == Links::Pcie && a.custom_upto.is_some() {
        format!("no effect at {world} PCIe GPUs until the refusal below is lifted; then {on_off}")
    } else {
        on_off
    };
    let bound = match (a.custom_upto, a.nccl_from) {
        (Some(b), Some(n)) => format!(
            "above {} and at most {}: patch max_size to that (the 8 MiB default sends the shapes from {} to the custom kernel, where NCCL wins)",
            bytes(b),
            bytes(n),
            bytes(n)
        ),
        (Some(b), None) => format!("the 8 MiB default takes every shape of this cycle (largest {})", bytes(b)),
        (None, _) => "irrelevant while the custom all-reduce is off".into(),
    };
    let again = (!a.custom_again.is_empty()).then(|| {
        let s: Vec<String> = a.custom_again.iter().map(|b| bytes(*b)).collect();
        format!(
            "; a P2P kernel wins again from {}, which one size bound cannot express",
            s.join(", ")
        )
    });
    let bound = format!("{bound}{}", again.unwrap_or_default());
    let caps = format!("{VLLM_CAR}, {VLLM_UTILS}");
    let row = |engine: &str, setting: &str, advice: String, source: &str| EngineSetting {
        engine: engine.into(),
        setting: setting.into(),
        advice,
        source: source.into(),
    };
    let mut v = vec![
        row("vLLM", "--disable-custom-all-reduce", on_off.clone(), VLLM_PARALLEL),
        row(
            "vLLM",
            "CustomAllreduce max_size (8 MiB; capped by CUSTOM_ALL_REDUCE_MAX_SIZES while VLLM_ALLREDUCE_USE_SYMM_MEM=1)",
            bound.clone(),
            &caps,
        ),
        row("vLLM", "more than 2 GPUs without full NVLink", refusal(world, links, "vLLM"), VLLM_CAR),
        row(
            "vLLM",
            "VLLM_SKIP_P2P_CHECK (default 1: trusts the driver)",
            "0 runs the real peer-access test (gpu_p2p_access_check) before enabling it; verifybench's own access check of every pair is `verifybench selftest`".into(),
            VLLM_ENVS,
        ),
        row(
            "vLLM",
            "one-shot or two-shot inside the custom kernel",
            "chosen by the engine, not by a flag: one-shot at 2 GPUs, on full NVLink below 512 KiB (up to 4 GPUs) or 256 KiB (up to 8), two-shot above".into(),
            VLLM_KERNEL,
        ),
        row("SGLang", "--disable-custom-all-reduce", on_off, SGL_ARGS),
        row("SGLang", "CustomAllreduce._MAX_CAR_SIZE (8 MiB on CUDA)", bound, SGL_CAR),
        row("SGLang", "more than 2 GPUs without full NVLink", refusal(world, links, "SGLang"), SGL_CAR),
        row(
            "SGLang",
            "SGLANG_SKIP_P2P_CHECK (default 0: the real check runs)",
            "leave it at 0 where the platform may drop peer traffic".into(),
            SGL_CAR,
        ),
        row(
            "SGLang",
            "--enable-mscclpp, --enable-torch-symm-mem",
            "other all-reduce paths: not compared here".into(),
            SGL_ARGS,
        ),
    ];
    if let Some((setting, label)) = &a.nccl_setting {
        for engine in ["vLLM", "SGLang"] {
            v.push(row(
                engine,
                setting,
                format!("{label} is chosen for some shapes: export {setting} in the server's environment (NCCL reads it in every worker; `verifybench inspect --pid PID --expect {setting}` proves the workers got it)"),
                "NCCL's environment",
            ));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn band(cand: &str, label: &str, from: u64, upto: u64, within: bool) -> Band {
        Band {
            choice: label.into(),
            candidate: cand.into(),
            upto_bytes: upto,
            from_bytes: from,
            within_noise: within,
        }
    }

    #[test]
    fn the_bound_lies_between_the_last_kernel_shape_and_the_first_nccl_one() {
        let c = super::super::measure::candidates(&["LL".into()], &[]);
        let bands = [
            band("oneshot", "one-shot", 14_336, 57_344, false),
            band("twoshot", "two-shot", 114_688, 114_688, false),
            band("nccl:NCCL_PROTO=LL", "NCCL/LL", 458_752, 458_752, false),
        ];
        let a = ask(&bands, &c);
        assert_eq!(a.custom_upto, Some(114_688));
        assert_eq!(a.nccl_from, Some(458_752));
        assert_eq!(a.kernels, vec!["one-shot", "two-shot"]);
        assert_eq!(
            a.nccl_setting,
            Some(("NCCL_PROTO=LL".into(), "NCCL/LL".into()))
        );
        let s = settings(&a, 8, Links::Pcie);
        let vllm_bound = &s[1];
        assert!(
            vllm_bound
                .advice
                .starts_with("above 112.0 KiB (114,688 B) and at most 448.0 KiB (458,752 B)"),
            "{vllm_bound:?}"
        );
        assert!(
            s[2].advice.starts_with("refused here (8 GPUs over PCIe"),
            "{:?}",
            s[2]
        );
        assert_eq!(s.last().unwrap().setting, "NCCL_PROTO=LL");
        // At two GPUs the refusal does not apply.
        assert!(settings(&a, 2, Links::Pcie)[2]
            .advice
            .starts_with("does not apply at 2 GPUs"));
    }

    #[test]
    fn nothing_below_nccl_turns_the_custom_all_reduce_off() {
        let c = super::super::measure::candidates(&[], &[]);
        let bands = [
            band("nccl", "NCCL (Ring/LL)", 14_336, 57_344, false),
            band("oneshot", "one-shot", 114_688, 114_688, false),
        ];
        let a = ask(&bands, &c);
        assert_eq!((a.custom_upto, a.nccl_from), (None, Some(14_336)));
        assert_eq!(a.custom_again, vec![114_688]);
        let s = settings(&a, 4, Links::Unknown);
        assert!(s[0].advice.starts_with("set it"), "{:?}", s[0]);
        assert!(
            s[1].advice.contains("which one size bound cannot express"),
            "{:?}",
            s[1]
        );
        // A stretch where nothing beats NCCL beyond the noise is no reason for a kernel.
        let noise = [band("oneshot", "one-shot", 14_336, 14_336, true)];
        assert_eq!(ask(&noise, &c).custom_upto, None);
    }
}
