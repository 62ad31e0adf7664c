//! `selftest`'s P2P access check and stress test (`comm::p2p::access`, `comm::p2p::stress`), as
//! lines of its table.

use crate::comm;

use super::Check;

/// The real access check of every ordered pair of `devices` (distinct GPUs only): a line that
/// says how many pairs read back (probed now or from this boot's cache), or the refusal naming
/// the failed pairs and their likely causes; no line where the driver already says no (the
/// P2P lines say why). Also whether the P2P checks may run.
pub(super) fn p2p_access(devices: &[usize]) -> (Option<Check>, bool) {
    if comm::p2p::check_topology(devices).is_err() {
        return (None, false);
    }
    let r = comm::p2p::check_access(devices);
    let (pass, detail) = match &r {
        Ok((pairs, _)) => {
            let cached = pairs.iter().filter(|p| p.cached).count();
            (
                true,
                format!(
                    "{} ordered GPU pairs: writes through the peer mapping read back and lay in the peer's memory ({} probed now, {cached} from this boot's cache)",
                    pairs.len(),
                    pairs.len() - cached
                ),
            )
        }
        Err(e) => (false, format!("{e:#}")),
    };
    let line = Check::new("p2p access check, every ordered pair", "-", pass, detail);
    (Some(line), r.is_ok())
}

/// The stress test and its negative controls on `devices` (one rank per GPU where they are
/// distinct, virtual ranks of one GPU otherwise).
pub(super) fn p2p_stress(devices: &[usize]) -> Vec<Check> {
    let distinct = devices.iter().any(|&d| d != devices[0]);
    comm::p2p::stress::stress_checks(devices)
        .into_iter()
        .map(|c| {
            let launcher = if distinct { "threads" } else { "virtual" };
            Check::new(c.name, launcher, c.pass, c.detail)
        })
        .collect()
}
