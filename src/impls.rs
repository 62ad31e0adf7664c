//! Which collective implementations a `collective` or `verify` request runs (`--impl`), and the
//! checks every backend makes the same way before anything runs: the custom P2P kernels
//! ([`crate::comm::p2p`]) are all-reduces of at most [`capacity`] bytes on 2 to 8 ranks; an
//! implementation the topology cannot run is skipped with a line that says why, never replaced
//! by another one in silence.

use crate::comm::p2p::{self, Impl, P2pConfig};
use crate::model::{CollectiveKind, DType, Schedule};

/// The largest message the P2P all-reduces take in this tool (one staging half of the
/// workspace): the P2P configuration's default capacity, 4 MiB.
pub(crate) fn capacity() -> usize {
    P2pConfig::default().capacity
}

/// The implementations of `impls` that are custom P2P kernels, in the order asked.
pub(crate) fn p2p(impls: &[Impl]) -> Vec<Impl> {
    impls.iter().copied().filter(|i| i.is_p2p()).collect()
}

/// Whether NCCL's own collective is among `impls` (an empty list means NCCL only).
pub(crate) fn has_nccl(impls: &[Impl]) -> bool {
    impls.is_empty() || impls.contains(&Impl::Nccl)
}

/// The `--impl` list of `collective`, checked against the collective, the sizes and the rank
/// count: a usage error (exit 2) naming `--impl` and what to do.
pub(crate) fn check_collective(
    impls: &[Impl],
    op: CollectiveKind,
    dtype: DType,
    sizes: &[u64],
    nranks: usize,
) -> anyhow::Result<()> {
    let custom = p2p(impls);
    if custom.is_empty() {
        return Ok(());
    }
    if op != CollectiveKind::AllReduce {
        crate::usage_bail!(
            "--impl {}: the P2P implementations are all-reduces; --op {} runs on NCCL only (use --op all_reduce, or --impl nccl)",
            names(&custom),
            op.name()
        );
    }
    let cfg = P2pConfig::default();
    for &imp in &custom {
        for &size in sizes {
            let count = (size / dtype.size()) as usize;
            if let Err(e) = p2p::supports(imp, count, dtype, nranks, &cfg) {
                crate::usage_bail!(
                    "--impl {imp}: {e} (sizes up to {} B; lower -e/--maxbytes or drop {imp})",
                    cfg.staging_bytes()
                );
            }
        }
    }
    Ok(())
}

/// The `--impl` list of `verify`, checked against the schedule's all-reduces (the
/// all-gather stays on NCCL whatever the list says).
pub(crate) fn check_verify(impls: &[Impl], s: &Schedule) -> anyhow::Result<()> {
    let custom = p2p(impls);
    if custom.is_empty() {
        return Ok(());
    }
    let cfg = P2pConfig::default();
    for g in s
        .collective_groups()
        .iter()
        .filter(|g| g.kind == CollectiveKind::AllReduce)
    {
        for &imp in &custom {
            if let Err(e) = p2p::supports(imp, g.count as usize, g.dtype, s.tp as usize, &cfg) {
                crate::usage_bail!(
                    "--impl {imp}: the schedule's all-reduce of {} B: {e}",
                    g.bytes_per_rank
                );
            }
        }
    }
    Ok(())
}

/// The largest all-reduce message of `s` in bytes (what a P2P workspace must hold).
pub(crate) fn largest_all_reduce(s: &Schedule) -> u64 {
    s.collective_groups()
        .iter()
        .filter(|g| g.kind == CollectiveKind::AllReduce)
        .map(|g| g.bytes_per_rank)
        .max()
        .unwrap_or(0)
}

/// The line that says which implementations were skipped and why.
pub(crate) fn skipped_line(skipped: &[Impl], why: &str) -> String {
    format!("{why}: {} skipped", names(skipped))
}

/// "oneshot, twoshot".
pub(crate) fn names(impls: &[Impl]) -> String {
    impls
        .iter()
        .map(|i| i.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Drops NCCL's own columns of a collective result when `impls` leaves NCCL out.
pub(crate) fn drop_unasked_nccl(impls: &[Impl], res: &mut crate::record::CollectiveResult) {
    if !has_nccl(impls) {
        for row in &mut res.rows {
            row.eager = None;
            row.graph = None;
        }
    }
}

/// Drops NCCL's own runs of a verify result when `impls` leaves NCCL out.
pub(crate) fn drop_unasked_nccl_runs(impls: &[Impl], res: &mut crate::record::VerifyResult) {
    if !has_nccl(impls) {
        res.runs.clear();
    }
}

/// What happens when the custom implementations cannot run (`why`): the skip line on stderr
/// and in `notes`; an error when nothing else is left to run.
pub(crate) fn skip(impls: &[Impl], why: &str, notes: &mut Vec<String>) -> anyhow::Result<()> {
    let line = skipped_line(&p2p(impls), why);
    if !has_nccl(impls) {
        return Err(crate::error::usage(format!(
            "--impl {}: {line}, and nothing else was asked (add nccl to --impl)",
            names(impls)
        )));
    }
    crate::note!("verifybench: {line}");
    notes.push(line);
    Ok(())
}

/// The note a verify record with P2P runs carries.
pub(crate) const VERIFY_NOTE: &str =
    "--impl: only the all-reduces go to a P2P implementation; the logits all-gather stays on NCCL";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_the_kernels_cannot_run() {
        let ar = CollectiveKind::AllReduce;
        let both = [Impl::Nccl, Impl::OneShot];
        assert!(check_collective(&both, ar, DType::Bf16, &[8, 4 << 20], 2).is_ok());
        // NCCL alone takes any size
        assert!(check_collective(&[Impl::Nccl], ar, DType::Bf16, &[1 << 30], 2).is_ok());
        let e = check_collective(&both, ar, DType::Bf16, &[8 << 20], 2).unwrap_err();
        assert!(crate::error::exit_code(&e) == 2, "{e:#}");
        let msg = format!("{e:#}");
        assert!(
            msg.contains("--impl oneshot") && msg.contains("4194304"),
            "{msg}"
        );
        let e =
            check_collective(&both, CollectiveKind::AllGather, DType::Bf16, &[8], 2).unwrap_err();
        assert!(format!("{e:#}").contains("--op all_gather"), "{e:#}");
        let e = check_collective(&both, ar, DType::Bf16, &[8192], 16).unwrap_err();
        assert!(format!("{e:#}").contains("2 to 8 ranks"), "{e:#}");
    }

    #[test]
    fn lists_and_lines() {
        assert!(has_nccl(&[]) && !has_nccl(&[Impl::TwoShot]));
        assert_eq!(
            p2p(&[Impl::TwoShot, Impl::Nccl, Impl::OneShot]),
            vec![Impl::TwoShot, Impl::OneShot]
        );
        assert_eq!(
            skipped_line(&[Impl::OneShot, Impl::TwoShot], "GPU 0 cannot access GPU 1"),
            "GPU 0 cannot access GPU 1: oneshot, twoshot skipped"
        );
    }
}
