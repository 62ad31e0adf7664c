//! The evidence checked against the workload being priced, before any of it is priced: a
//! trace's step against the schedule (what ran, how many collectives of each kind, their
//! sizes, the group they ran on), an NCCL log's machine against the GPUs and the link, the
//! model a server log names against the model priced. Evidence of another job is refused
//! (exit 2, with what it is and what to give instead); evidence of another machine that is
//! only read for the traps is named in a note.

use std::path::Path;

use super::nccl::NcclMachine;
use super::{tally, tally_words};
use crate::model::{Op, Schedule};

/// More than this share of a step's collectives without a counterpart of the same kind on
/// the other side (404 all-reduces against 124 collectives: 70%) is another workload.
const UNMATCHED_SHARE: f64 = 0.5;
/// Sizes further apart than this factor (median of one kind) are another workload.
const SIZE_FACTOR: f64 = 2.0;

/// One group of a traced step's collectives (one kind, one size).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TracedGroup {
    /// `all_reduce`, `send_recv`, ... (the names of the schedule's kinds where they overlap).
    pub(crate) op: String,
    pub(crate) per_step: usize,
    /// Bytes per rank of each; `None` when the trace does not give them.
    pub(crate) bytes: Option<u64>,
    /// Ranks of the group it ran on, when the trace gives it.
    pub(crate) group_size: Option<u64>,
}

/// One step of a trace, as the checks read it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TracedStep {
    /// The trace as a message names it (its folder, or its files).
    pub(crate) name: String,
    pub(crate) groups: Vec<TracedGroup>,
    /// A kernel whose name says training (backward, optimizer), when one ran.
    pub(crate) training: Option<String>,
    /// The job's world size, when the trace gives it (`distributedInfo.world_size`).
    pub(crate) world_size: Option<usize>,
}

impl TracedStep {
    fn count(&self) -> usize {
        self.groups.iter().map(|g| g.per_step).sum()
    }
}

/// `(kind, count)` in order of first appearance, largest first.
fn by_kind<'a>(items: impl Iterator<Item = (&'a str, usize)>) -> Vec<(&'a str, usize)> {
    let mut v = tally(items);
    v.sort_by_key(|x| std::cmp::Reverse(x.1));
    v
}

/// The schedule's collectives: (kind, bytes per rank), in order.
fn scheduled(s: &Schedule) -> Vec<(&'static str, u64)> {
    s.ops
        .iter()
        .filter_map(|o| match o {
            Op::Collective {
                kind,
                bytes_per_rank,
                ..
            } => Some((kind.name(), *bytes_per_rank)),
            _ => None,
        })
        .collect()
}

/// The median of `(value, weight)` pairs.
fn weighted_median(mut v: Vec<(u64, usize)>) -> Option<u64> {
    v.sort_unstable();
    let total: usize = v.iter().map(|x| x.1).sum();
    let mut seen = 0;
    for (x, w) in v {
        seen += w;
        if 2 * seen >= total && total > 0 {
            return Some(x);
        }
    }
    None
}

/// The kinds whose sizes are compared: those whose bytes mean the same on both sides (a
/// reduce-scatter's and an all-to-all's input is the whole buffer in a trace, a share of it in
/// a schedule).
fn sized(kind: &str) -> bool {
    matches!(kind, "all_reduce" | "all_gather" | "broadcast")
}

/// The words the schedule goes by: `kimi-k2.5 verify, TP=8, 3 tokens`.
fn schedule_words(s: &Schedule) -> String {
    format!(
        "{} {}, TP={}, {} tokens",
        s.model,
        s.phase.name(),
        s.tp,
        s.tokens
    )
}

const MODEL_FLAGS: &str = "--model NAME or --model-config config.json of the model the server ran, so that the schedule priced is the one that ran";

/// What to give instead of a trace that is not a verify (of this workload, or at all).
pub(crate) const GIVE_VERIFY: &str = "the traces of the serving engine's verify steps (every rank of the tensor-parallel group), or what a profiler shows in one verify (--observed 122x0.2ms --verify-ms 30)";

/// Refuses a traced step that is no forward of a serving engine: one whose kernels say that
/// it trained (backward, optimizer). `flag` names the input as the message names it
/// (`--trace` or `--from-trace verify=`), `step` the forward it was given as (`verify`,
/// `decode`, `draft`), `instead` what to give instead. Runs before anything else is read from
/// the trace, so that no figure of another job is priced.
pub(crate) fn serving_step(
    t: &TracedStep,
    flag: &str,
    step: &str,
    instead: &str,
) -> anyhow::Result<()> {
    let Some(kernel) = &t.training else {
        return Ok(());
    };
    let shown: String = kernel.chars().take(100).collect();
    let traced = by_kind(t.groups.iter().map(|g| (g.op.as_str(), g.per_step)));
    let colls = match t.count() {
        0 => "no collective".to_string(),
        n => format!("{n} collectives per step ({})", tally_words(&traced)),
    };
    let world = t
        .world_size
        .map(|w| format!(" in a world of {w} ranks"))
        .unwrap_or_default();
    // `--trace DIR`, `--from-trace verify=DIR`
    let sep = if flag.ends_with('=') { "" } else { " " };
    crate::usage_bail!(
        "{flag}{sep}{}: a training trace, not a {step}: {colls}{world} and backward or optimizer kernels (`{shown}`), where a {step} step is one forward pass of the served model. Give {instead}",
        t.name
    );
}

/// Checks one traced step against the schedule priced at `ranks` (after [`serving_step`]):
/// counts per kind that differ by more than half, sizes more than a factor of 2 apart or a
/// group of another size are refused (a usage error naming the trace, what it is and what to
/// give); smaller differences come back as notes.
pub(crate) fn trace_against_schedule(
    t: &TracedStep,
    s: &Schedule,
    ranks: usize,
) -> anyhow::Result<Vec<String>> {
    let traced = by_kind(t.groups.iter().map(|g| (g.op.as_str(), g.per_step)));
    let sched = scheduled(s);
    let planned = by_kind(sched.iter().map(|(k, _)| (*k, 1)));
    let (nt, ns) = (t.count(), sched.len());
    // Collectives without a counterpart of the same kind, over the larger side.
    let count_of = |v: &[(&str, usize)], k: &str| v.iter().find(|x| x.0 == k).map_or(0, |x| x.1);
    let unmatched: usize = traced
        .iter()
        .map(|(k, n)| n.saturating_sub(count_of(&planned, k)))
        .chain(
            planned
                .iter()
                .map(|(k, n)| n.saturating_sub(count_of(&traced, k))),
        )
        .sum();
    let larger = nt.max(ns).max(1);
    if unmatched as f64 > UNMATCHED_SHARE * larger as f64 {
        crate::usage_bail!(
            "--trace {}: its step is not the verify priced: {nt} collectives per step ({}) against the schedule's {ns} ({}; {}): {unmatched} of {larger} have no counterpart of the same kind. Give {MODEL_FLAGS}, or give {GIVE_VERIFY}",
            t.name,
            tally_words(&traced),
            tally_words(&planned),
            schedule_words(s)
        );
    }
    if let Some(g) = t
        .groups
        .iter()
        .find(|g| g.group_size.is_some_and(|n| n > 1 && n != ranks as u64))
    {
        crate::usage_bail!(
            "--trace {}: its {} ran on groups of {} ranks, but the verify is priced over one tensor-parallel group of {ranks}: give the traces of one group's ranks (with --gpus {})",
            t.name,
            g.op,
            g.group_size.unwrap_or(0),
            g.group_size.unwrap_or(0)
        );
    }
    let mut notes = vec![];
    if unmatched > 0 {
        notes.push(format!(
            "the trace's step has {nt} collectives ({}), the schedule {ns} ({}): engines fuse or add some (the draft's, the embedding's); the measured figures are the trace's, the modeled ratios (NCCL setting, one-shot) the schedule's",
            tally_words(&traced),
            tally_words(&planned)
        ));
    }
    let mut no_sizes = false;
    for (kind, _) in planned.iter().filter(|(k, _)| sized(k)) {
        let mine: Vec<(u64, usize)> = t
            .groups
            .iter()
            .filter(|g| g.op == *kind)
            .filter_map(|g| Some((g.bytes?, g.per_step)))
            .collect();
        if mine.is_empty() {
            no_sizes |= t.groups.iter().any(|g| g.op == *kind);
            continue;
        }
        let theirs: Vec<(u64, usize)> = sched
            .iter()
            .filter(|(k, _)| k == kind)
            .map(|(_, b)| (*b, 1))
            .collect();
        let (Some(tb), Some(sb)) = (weighted_median(mine), weighted_median(theirs)) else {
            continue;
        };
        if tb == sb || tb == 0 || sb == 0 {
            continue;
        }
        // The schedule's bytes are the tokens' (hidden x tokens x dtype for an all-reduce): a
        // traced size that is a whole number of its per-token bytes is another token count.
        let per_token = sb / s.tokens.max(1);
        let tokens = (per_token > 0 && sb % s.tokens.max(1) == 0 && tb % per_token == 0)
            .then(|| tb / per_token);
        let fix = match tokens {
            Some(n) if *kind == "all_reduce" => {
                format!("--tokens {n} (the trace's all-reduces carry {n} tokens of {per_token} B)")
            }
            _ => MODEL_FLAGS.to_string(),
        };
        let ratio = tb.max(sb) as f64 / tb.min(sb) as f64;
        if ratio > SIZE_FACTOR {
            crate::usage_bail!(
                "--trace {}: its step is not the verify priced: its {kind} carry {tb} B per rank (median) against the schedule's {sb} B ({}), {ratio:.2}x apart. Give {fix}, or give {GIVE_VERIFY}",
                t.name,
                schedule_words(s)
            );
        }
        notes.push(format!(
            "the trace's {kind} carry {tb} B per rank (median), the schedule's {sb} B ({}): give {fix}",
            schedule_words(s)
        ));
    }
    if no_sizes {
        notes.push("the trace gives no sizes for its collectives (no record_param_comms arguments): their counts were checked against the schedule, not their sizes".into());
    }
    Ok(notes)
}

/// How an NCCL log's machine differs from the one priced (`ranks` GPUs over a `link_kind`
/// link of the `profile`): `2 ranks, P2P/CUMEM over NVL, 2 GPUs (busId 70, 60): no
/// communicator of 8 ranks, NVLink where pcie-gen5 is PCIe`; `None` when it is that machine
/// as far as the log says (a communicator of `ranks`, the same kind of link).
pub(crate) fn other_machine(
    m: &NcclMachine,
    ranks: usize,
    link_kind: &str,
    profile: &str,
) -> Option<String> {
    let other_size = !m.nranks.is_empty() && !m.nranks.iter().any(|&n| n as usize == ranks);
    let other_link = m.link_kind().is_some_and(|k| k != link_kind);
    if !other_size && !other_link {
        return None;
    }
    let link_word = |k: &str| match k {
        "nvlink" => "NVLink",
        "pci" => "PCIe",
        "shm" => "host memory (no P2P)",
        _ => "the network",
    };
    let mut differs = vec![];
    if other_size {
        differs.push(format!("no communicator of {ranks} ranks"));
    }
    if let (true, Some(k)) = (other_link, m.link_kind()) {
        differs.push(format!(
            "{} where {profile} is {}",
            link_word(k),
            link_word(link_kind)
        ));
    }
    Some(format!("{}: {}", m.words(), differs.join(", ")))
}

/// A note when an NCCL log is of another machine than the one priced ([`other_machine`]).
/// Nothing is priced from an NCCL log, and the traps do not check one of another machine
/// (they give `not checked`), so it is named, not refused.
pub(crate) fn nccl_log_against(
    name: &str,
    m: &NcclMachine,
    ranks: usize,
    link_kind: &str,
    profile: &str,
) -> Option<String> {
    let why = other_machine(m, ranks, link_kind, profile)?;
    Some(format!(
        "{name} is the NCCL log of another machine ({why}) than the {ranks} GPUs over {profile} priced: nothing is priced from it, and its traps (the variables NCCL read, its topology search) are not checked, since they would describe that machine; give the server's own NCCL log"
    ))
}

/// Lower-case letters and digits only: `moonshotai/Kimi-K2.5` -> `moonshotaikimik25`.
fn plain(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// A note when the model a server log names is not the model priced: the preset's names
/// (`names`: as given and as the preset calls itself), or the config file's path. The log's
/// model is taken by the last part of its path (`moonshotai/Kimi-K2.5` -> `Kimi-K2.5`), and
/// matches when either name holds the other, letters and digits only (`kimi-k2.5` in
/// `Kimi-K2.5-Instruct`).
pub(crate) fn server_model_against(
    file: &str,
    logged: &str,
    names: &[&str],
    config: Option<&Path>,
) -> Option<String> {
    let last = logged
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or(logged);
    let l = plain(last);
    if l.is_empty() {
        return None;
    }
    if let Some(c) = config {
        let path = plain(&c.to_string_lossy());
        return (!path.contains(&l)).then(|| {
            format!(
                "{file}: the server ran {logged}, and the config priced ({}) does not name it: check that it is that model's config.json",
                c.display()
            )
        });
    }
    let matches = names
        .iter()
        .map(|n| plain(n))
        .any(|n| !n.is_empty() && (l.contains(&n) || n.contains(&l)));
    (!matches).then(|| {
        format!(
            "{file}: the server ran {logged}, but the model priced is {} (--model): give --model or --model-config for {logged}, or the log of the server whose verify is explained",
            names.first().copied().unwrap_or("?")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CollectiveKind, DType, Phase, Routing};

    /// A schedule of `ar` all-reduces of `ar_bytes` and one all-gather of `ag_bytes`, at
    /// `tokens` tokens on `tp` ranks.
    fn schedule(ar: usize, ar_bytes: u64, ag_bytes: u64, tokens: u64, tp: u64) -> Schedule {
        let coll = |kind, bytes: u64| Op::Collective {
            kind,
            dtype: DType::Bf16,
            count: bytes / 2,
            bytes_per_rank: bytes,
            site: "x".into(),
            layer: None,
        };
        let mut ops: Vec<Op> = (0..ar)
            .map(|_| coll(CollectiveKind::AllReduce, ar_bytes))
            .collect();
        ops.push(coll(CollectiveKind::AllGather, ag_bytes));
        Schedule {
            model: "kimi-k2.5".into(),
            phase: Phase::Verify,
            tp,
            tokens,
            dtype: DType::Bf16,
            routing: Routing::Uniform,
            experts_per_layer: 0.0,
            ops,
            config_reading: None,
            facts: Default::default(),
        }
    }

    fn group(op: &str, per_step: usize, bytes: Option<u64>) -> TracedGroup {
        TracedGroup {
            op: op.into(),
            per_step,
            bytes,
            group_size: None,
        }
    }

    fn step(groups: Vec<TracedGroup>) -> TracedStep {
        TracedStep {
            name: "t".into(),
            groups,
            training: None,
            world_size: None,
        }
    }

    /// Kimi-K2.5's verify at TP=8, 3 tokens: 123 all-reduces of 7168 x 3 x 2 B = 43,008 B and
    /// one all-gather of 163,840 x 3 / 8 x 2 B = 122,880 B.
    fn kimi() -> Schedule {
        schedule(123, 43_008, 122_880, 3, 8)
    }

    #[test]
    fn the_same_step_passes_without_a_note() {
        let t = step(vec![
            group("all_reduce", 123, Some(43_008)),
            group("all_gather", 1, Some(122_880)),
        ]);
        assert_eq!(
            trace_against_schedule(&t, &kimi(), 8).unwrap(),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_training_step_is_refused_as_what_it_is() {
        let mut t = step(vec![
            group("send_recv", 5, None),
            group("all_reduce", 3, None),
        ]);
        assert!(serving_step(&t, "--trace", "verify", GIVE_VERIFY).is_ok());
        t.training = Some("MulBackward0".into());
        t.world_size = Some(8);
        let e = serving_step(&t, "--trace", "verify", GIVE_VERIFY).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        let m = e.to_string();
        // 5 + 3 = 8 collectives, the larger kind first
        for want in [
            "--trace t: a training trace, not a verify",
            "8 collectives per step (5 send_recv + 3 all_reduce) in a world of 8 ranks and backward",
            "(`MulBackward0`)",
            "--observed",
        ] {
            assert!(m.contains(want), "{want}: {m}");
        }
        // a training trace without collectives is still one
        let mut t = step(vec![]);
        t.training = Some("adam_kernel".into());
        let m = serving_step(&t, "--from-trace decode=", "decode", "--decode-ms")
            .unwrap_err()
            .to_string();
        assert!(
            m.starts_with("--from-trace decode=t: a training trace, not a decode:"),
            "{m}"
        );
        assert!(m.contains("no collective and backward"), "{m}");
    }

    #[test]
    fn far_more_collectives_than_the_schedule_are_refused() {
        // 404 all-reduces against 123 + 1: 281 all-reduces and the all-gather unmatched,
        // 282 of 404 = 70% > 50%.
        let t = step(vec![group("all_reduce", 404, None)]);
        let m = trace_against_schedule(&t, &kimi(), 8)
            .unwrap_err()
            .to_string();
        assert!(m.contains("282 of 404"), "{m}");
        assert!(m.contains("--model NAME or --model-config"), "{m}");
        // 248 against 124 (one kind each side): 124 of 248 unmatched, 50%: not refused, noted.
        let t = step(vec![
            group("all_reduce", 247, None),
            group("all_gather", 1, None),
        ]);
        let notes = trace_against_schedule(&t, &kimi(), 8).unwrap();
        assert!(notes[0].contains("248 collectives"), "{notes:?}");
        assert!(notes[1].contains("no sizes"), "{notes:?}");
    }

    #[test]
    fn sizes_more_than_twice_apart_name_the_flag_that_fixes_them() {
        // 8 tokens of 14,336 B (7168 x 2 B) per all-reduce: 114,688 B, 2.67x the schedule's.
        let t = step(vec![
            group("all_reduce", 123, Some(8 * 14_336)),
            group("all_gather", 1, Some(8 * 40_960)),
        ]);
        let m = trace_against_schedule(&t, &kimi(), 8)
            .unwrap_err()
            .to_string();
        assert!(m.contains("--tokens 8"), "{m}");
        assert!(m.contains("2.67x apart"), "{m}");
        // gpt-oss-120b's 2880 x 3 x 2 B = 17,280 B: 2.49x below, not a whole number of
        // 14,336 B tokens: another model.
        let t = step(vec![group("all_reduce", 123, Some(17_280))]);
        let m = trace_against_schedule(&t, &kimi(), 8)
            .unwrap_err()
            .to_string();
        assert!(m.contains("--model NAME or --model-config"), "{m}");
        // 4 tokens (57,344 B, 1.33x): a note that names --tokens 4.
        let t = step(vec![
            group("all_reduce", 123, Some(4 * 14_336)),
            group("all_gather", 1, Some(122_880)),
        ]);
        let notes = trace_against_schedule(&t, &kimi(), 8).unwrap();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("--tokens 4"), "{notes:?}");
    }

    #[test]
    fn collectives_on_smaller_groups_are_refused() {
        let mut g = group("all_reduce", 123, Some(43_008));
        g.group_size = Some(4);
        let t = step(vec![g, group("all_gather", 1, Some(122_880))]);
        let m = trace_against_schedule(&t, &kimi(), 8)
            .unwrap_err()
            .to_string();
        assert!(m.contains("groups of 4 ranks"), "{m}");
    }

    fn machine(nranks: u32, path: &str, via: &str) -> NcclMachine {
        NcclMachine {
            nranks: vec![nranks],
            devices: vec!["60".into(), "70".into()],
            transports: vec![via.into()],
            gpu_path: Some(path.into()),
        }
    }

    #[test]
    fn an_nccl_log_of_another_machine_is_named() {
        let m = machine(2, "NVL", "P2P/CUMEM");
        let n = nccl_log_against("n.log", &m, 8, "pci", "pcie-gen5").unwrap();
        assert!(n.contains("no communicator of 8 ranks"), "{n}");
        assert!(n.contains("NVLink where pcie-gen5 is PCIe"), "{n}");
        assert!(
            n.contains("its traps (the variables NCCL read, its topology search) are not checked"),
            "{n}"
        );
        // the same log for 2 GPUs over NVLink: nothing to say
        assert_eq!(
            nccl_log_against("n.log", &m, 2, "nvlink", "nvlink-h200"),
            None
        );
        // 8 ranks over PCIe for 8 PCIe GPUs: nothing
        let p = machine(8, "PIX", "P2P/IPC");
        assert_eq!(nccl_log_against("p.log", &p, 8, "pci", "pcie-gen5"), None);
    }

    #[test]
    fn a_server_log_of_another_model_is_named() {
        let names = ["kimi-k2.5", "kimi-k2.5"];
        assert_eq!(
            server_model_against("s.log", "moonshotai/Kimi-K2.5", &names, None),
            None
        );
        assert_eq!(
            server_model_against("s.log", "/models/Kimi-K2.5-Instruct/", &names, None),
            None
        );
        let n = server_model_against("s.log", "Qwen/Qwen3-8B", &names, None).unwrap();
        assert!(
            n.contains("Qwen/Qwen3-8B") && n.contains("kimi-k2.5"),
            "{n}"
        );
        // a config named after the model matches; another does not
        let c = Path::new("tests/data/configs/openai--gpt-oss-120b_config.json");
        assert_eq!(
            server_model_against("s.log", "openai/gpt-oss-120b", &names, Some(c)),
            None
        );
        assert!(server_model_against("s.log", "Qwen/Qwen3-8B", &names, Some(c)).is_some());
    }
}
