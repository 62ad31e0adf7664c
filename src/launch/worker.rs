//! The protocol between `--launcher processes` and its workers (`verifybench __rank ...`,
//! hidden; run by `commands::rank`).
//!
//! Protocol on stdout, one JSON object per line: `{"progress": k}` after each configuration,
//! then `{"result": RankResult}` or `{"error": "..."}`. Everything else goes to stderr.

use serde::{Deserialize, Serialize};

use super::job::RankResult;

/// The `--timeout` of the run, in seconds, as the parent hands it to every worker it starts
/// (set in the environment it builds for them): each wait of the worker's rank polls the
/// deadline it gives.
pub(crate) const RANK_TIMEOUT_ENV: &str = "VERIFYBENCH_RANK_TIMEOUT_S";

/// The worker's [`crate::comm::nccl::Watch`]: its own stop flag (the parent ends the other
/// workers) and the deadline of `timeout` (the value of [`RANK_TIMEOUT_ENV`]; none when unset
/// or not a positive number of seconds).
pub(crate) fn watch_of(timeout: Option<&str>) -> crate::comm::nccl::Watch {
    let t = timeout
        .and_then(|t| t.trim().parse::<f64>().ok())
        .filter(|t| t.is_finite() && *t > 0.0)
        .map(std::time::Duration::from_secs_f64);
    crate::comm::nccl::Watch::new(t)
}

/// One line of the worker protocol.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Message {
    Progress(usize),
    Result(Box<RankResult>),
    Error(String),
}

pub(crate) fn unhex(s: &str) -> anyhow::Result<[u8; 128]> {
    let mut out = [0u8; 128];
    if s.len() != 256 {
        anyhow::bail!("NCCL id must be 256 hex digits");
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_hex_round_trip() {
        let mut id = [0u8; 128];
        for (i, b) in id.iter_mut().enumerate() {
            *b = (i * 7) as u8;
        }
        assert_eq!(unhex(&crate::comm::p2p::to_hex(&id)).unwrap(), id);
        assert!(unhex("abc").is_err());
    }

    #[test]
    fn the_rank_timeout_comes_from_the_parents_variable() {
        let w = watch_of(Some("2.5"));
        assert_eq!(w.timeout(), Some(std::time::Duration::from_millis(2500)));
        // the deadline counts from the worker's start: 2.5 s later, not before
        let now = std::time::Instant::now();
        assert!(!w.past_deadline(now));
        assert!(w.past_deadline(now + std::time::Duration::from_millis(2501)));
        for bad in [
            None,
            Some(""),
            Some("0"),
            Some("-1"),
            Some("inf"),
            Some("ten"),
        ] {
            assert_eq!(watch_of(bad).timeout(), None, "{bad:?}");
        }
    }

    #[test]
    fn protocol_lines_round_trip() {
        let s = serde_json::to_string(&Message::Progress(3)).unwrap();
        assert!(matches!(
            serde_json::from_str(&s).unwrap(),
            Message::Progress(3)
        ));
        let s = serde_json::to_string(&Message::Error("x".into())).unwrap();
        assert!(matches!(serde_json::from_str(&s).unwrap(), Message::Error(e) if e == "x"));
    }
}
