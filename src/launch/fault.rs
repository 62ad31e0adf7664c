//! Fault injection for tests, in one place: the hidden `verify --inject-fault KIND[:RANK]`
//! (KIND exit, hang, abort, or p2p-silent: the rank makes none of its P2P all-reduce calls) and the environment hooks through which `sweep` hands it to
//! its children.
//!
//! With the NCCL backend the fault goes into one rank (the launchers carry it to the worker);
//! the model backend has no worker to break, so the whole process fails the way a crashed or
//! stuck worker would.

use super::job::Fault;
use crate::error::usage;

/// Extra arguments `sweep` appends to every child's command line (e.g. `--inject-fault exit`).
pub(crate) const SWEEP_EXTRA_ARGS_ENV: &str = "VERIFYBENCH_SWEEP_EXTRA_ARGS";
/// Restricts [`SWEEP_EXTRA_ARGS_ENV`] to the points with this override (`NAME=VALUE`).
pub(crate) const SWEEP_EXTRA_WHEN_ENV: &str = "VERIFYBENCH_SWEEP_EXTRA_ARGS_WHEN";

/// The rank fault of `--inject-fault` for the launchers (bad input is a usage error).
pub(crate) fn rank_fault(spec: Option<&str>) -> anyhow::Result<Option<Fault>> {
    spec.map(str::parse::<Fault>).transpose().map_err(usage)
}

/// Fails this process as `--inject-fault` asks (the model backend): `exit` exits with code 3,
/// `hang` sleeps forever, `abort` aborts. Anything else (or nothing) returns.
pub(crate) fn process_fault(spec: Option<&str>) {
    match spec.map(|f| f.split(':').next().unwrap_or(f)) {
        Some("exit") => {
            eprintln!("verifybench: injected fault: exit");
            std::process::exit(3);
        }
        Some("hang") => loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        },
        Some("abort") => std::process::abort(),
        Some("p2p-silent") => {
            let rank = spec
                .and_then(|f| f.split_once(':'))
                .map(|x| x.1)
                .unwrap_or("1");
            eprintln!(
                "Error: injected fault p2p-silent: rank {rank} never signalled its peers (model backend: no kernel ran, the process fails as the run would)"
            );
            std::process::exit(1);
        }
        _ => {}
    }
}

/// `--inject-fault p2p-silent` needs a P2P implementation to silence: a usage error otherwise
/// (the same on every backend).
pub(crate) fn check_p2p_fault(spec: Option<&str>, p2p_impls: usize) -> anyhow::Result<()> {
    if spec.is_some_and(|f| f.starts_with("p2p-silent")) && p2p_impls == 0 {
        crate::usage_bail!(
            "--inject-fault p2p-silent needs a P2P implementation that runs here in --impl (oneshot or twoshot)"
        );
    }
    Ok(())
}

/// The sweep's extra child arguments and their condition, from the environment.
pub(crate) fn sweep_extra_args() -> (Vec<String>, Option<(String, String)>) {
    let args = std::env::var(SWEEP_EXTRA_ARGS_ENV)
        .map(|s| s.split_whitespace().map(String::from).collect())
        .unwrap_or_default();
    let when = std::env::var(SWEEP_EXTRA_WHEN_ENV).ok().and_then(|s| {
        s.split_once('=')
            .map(|(k, v)| (k.to_string(), v.to_string()))
    });
    (args, when)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_faults_parse_and_bad_ones_are_usage_errors() {
        assert_eq!(rank_fault(None).unwrap(), None);
        let f = rank_fault(Some("hang:0")).unwrap().unwrap();
        assert_eq!(f.rank, 0);
        let e = rank_fault(Some("melt")).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
    }
}
