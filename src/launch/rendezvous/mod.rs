//! TCP rendezvous of ranks started by an external launcher: rank 0 hands the 128-byte NCCL
//! unique id to every other rank, and after the run gathers their results.
//!
//! Plain `std::net` with blocking sockets and per-call timeouts: the exchange is a handful of
//! small messages per rank, so threads or an async runtime would add nothing but weight.
//!
//! The protocol, one TCP connection per rank > 0, kept open from the id exchange to the end:
//!
//! ```text
//! rank 0 -> rank r   CHALLENGE nonce (32 random bytes) | token required (1 byte)
//! rank r -> rank 0   HELLO   proof | {version, workload_hash, rank, world_size, host, pid, job}
//! rank 0 -> rank r   ID      128 bytes                 once all world_size-1 ranks said hello
//!                  | REFUSED why                       this rank does not fit (version, ...),
//!                                                      or gave no valid proof of the secret
//!                  | ABORT   why                       another rank did not fit, or one never came
//! rank r -> rank 0   RESULT  bytes | FAILED why        after the run, any number of times
//! rank 0 -> rank r   ACK     (empty)                   rank 0 has the result
//! ```
//!
//! The proof is HMAC-SHA256 of the connection's nonce and the hello under the run's secret
//! ([`auth`]), or nothing in an open rendezvous. A connection whose proof fails (no secret, a
//! wrong one, a hello replayed from another connection) or whose launcher job is another is
//! refused and named on stderr, and the rendezvous goes on waiting for the right ranks; a rank
//! that proves the secret but does not fit (another version, workload or world size) ends it,
//! as a mistake of the job's own command lines.
//!
//! Every frame is `"VBRZ" | protocol u16 | kind u8 | length u32 | payload`, big-endian. The
//! header never changes, so two different builds still understand each other enough for the
//! handshake to name the mismatch. Every read and write has a deadline: nothing hangs.

mod auth;
mod client;
mod frame;
mod server;

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::error::usage;
pub use crate::request::Endpoint;

pub use auth::{Secret, TOKEN_ENV, TOKEN_FLAG};
pub use client::Client;
pub use server::Server;

/// Size of an NCCL unique id (`ncclUniqueId`, `NCCL_UNIQUE_ID_BYTES`).
pub const ID_BYTES: usize = 128;

impl Endpoint {
    pub fn new(host: impl Into<String>, port: u16) -> Endpoint {
        Endpoint {
            host: host.into(),
            port,
        }
    }

    /// Parses `HOST:PORT`, `[IPv6]:PORT`; a usage error says what is wrong.
    pub fn parse(s: &str) -> Result<Endpoint> {
        let bad = |why: &str| {
            usage(format!(
                "--rendezvous '{s}' {why}: write HOST:PORT, e.g. node1:29500 or 10.0.0.1:29500"
            ))
        };
        let t = s.trim();
        let (host, port) = t.rsplit_once(':').ok_or_else(|| bad("has no port"))?;
        let host = match host.strip_prefix('[') {
            Some(h) => h
                .strip_suffix(']')
                .ok_or_else(|| bad("has an unclosed '['"))?,
            None if host.contains(':') => {
                return Err(bad("is an IPv6 address without brackets ([ADDR]:PORT)"))
            }
            None => host,
        };
        if host.is_empty() {
            return Err(bad("has no host"));
        }
        let port: u16 = port
            .parse()
            .map_err(|_| bad("has a port that is not a number from 1 to 65535"))?;
        if port == 0 {
            return Err(bad("has port 0"));
        }
        Ok(Endpoint::new(host, port))
    }

    /// Where rank 0 listens: every interface on the rendezvous port (the host name others use
    /// may not be an address rank 0 can bind, e.g. behind NAT or with several interfaces).
    pub(crate) fn listen_addr(&self) -> SocketAddr {
        match self.host.parse::<IpAddr>() {
            Ok(IpAddr::V6(_)) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), self.port),
            _ => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), self.port),
        }
    }

    fn resolve(&self) -> io::Result<Vec<SocketAddr>> {
        (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map(|a| a.collect())
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// clap value parser for `--rendezvous`.
pub(crate) fn endpoint_arg(s: &str) -> Result<Endpoint, String> {
    Endpoint::parse(s).map_err(|e| e.to_string())
}

/// What each rank tells rank 0 about itself; rank 0 checks every field against its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// verifybench version (crate version) of the process.
    pub version: String,
    /// Schedule hash of the workload the rank will replay.
    pub workload_hash: String,
    pub rank: usize,
    pub world_size: usize,
    pub host: String,
    pub pid: u32,
    /// The launcher's job (Slurm's job and step, torchrun's run id), if it names one: ranks of
    /// another job are refused, so that two jobs on one port never meet by accident. Not a
    /// secret: anyone can read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
}

impl Hello {
    /// The hello of this process: this build's version, this host, this pid.
    pub fn here(workload_hash: impl Into<String>, rank: usize, world_size: usize) -> Hello {
        Hello {
            version: env!("CARGO_PKG_VERSION").into(),
            workload_hash: workload_hash.into(),
            rank,
            world_size,
            host: crate::util::hostname(),
            pid: std::process::id(),
            job: None,
        }
    }

    /// This hello in the launcher's job `job` (see [`Hello::job`]).
    pub fn in_job(self, job: Option<String>) -> Hello {
        Hello { job, ..self }
    }

    /// `rank 1 on hostB`
    fn who(&self) -> String {
        format!("rank {} on {}", self.rank, self.host)
    }
}

/// A rank that joined, as rank 0 saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    pub hello: Hello,
    /// The peer's address as rank 0 sees the connection.
    pub addr: SocketAddr,
}

/// `1, 2, 5-9` for a sorted list of ranks.
pub(crate) fn rank_list(ranks: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        parts.push(if j >= i + 2 {
            format!("{}-{}", ranks[i], ranks[j])
        } else if j == i + 1 {
            format!("{}, {}", ranks[i], ranks[j])
        } else {
            ranks[i].to_string()
        });
        i = j + 1;
    }
    parts.join(", ")
}

fn secs(d: Duration) -> String {
    format!("{:.0} s", d.as_secs_f64().max(1.0))
}

/// Why `theirs` cannot join the run of `ours` (rank 0), if it cannot.
fn mismatch(ours: &Hello, theirs: &Hello, joined: &BTreeMap<usize, PeerInfo>) -> Option<String> {
    if theirs.version != ours.version || theirs.workload_hash != ours.workload_hash {
        return Some(format!(
            "{} runs verifybench {} with workload {}, {} runs {} with workload {}: \
             start every rank with the same binary and flags",
            theirs.who(),
            theirs.version,
            theirs.workload_hash,
            ours.who(),
            ours.version,
            ours.workload_hash
        ));
    }
    if theirs.world_size != ours.world_size {
        return Some(format!(
            "{} was started with world size {}, {} with world size {}: \
             give every rank the same --world-size (or launcher task count)",
            theirs.who(),
            theirs.world_size,
            ours.who(),
            ours.world_size
        ));
    }
    if theirs.rank == ours.rank {
        return Some(format!(
            "{} (pid {}) duplicates {} (pid {}), which serves the rendezvous: give each process its own rank",
            theirs.who(),
            theirs.pid,
            ours.who(),
            ours.pid
        ));
    }
    if theirs.rank >= ours.world_size {
        return Some(format!(
            "{} is out of range: {} runs a world of {} ranks (0-{})",
            theirs.who(),
            ours.who(),
            ours.world_size,
            ours.world_size - 1
        ));
    }
    if let Some(first) = joined.get(&theirs.rank) {
        return Some(format!(
            "{} (pid {}) duplicates {} (pid {}): give each process its own rank",
            theirs.who(),
            theirs.pid,
            first.hello.who(),
            first.hello.pid
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::time::Instant;

    use super::frame::*;
    use super::*;

    fn hello(rank: usize, world: usize) -> Hello {
        Hello {
            version: "0.1.0".into(),
            workload_hash: "2b1b".into(),
            rank,
            world_size: world,
            host: format!("host{rank}"),
            pid: 100 + rank as u32,
            job: None,
        }
    }

    #[test]
    fn endpoints_parse_and_print() {
        assert_eq!(
            Endpoint::parse("node1:29500").unwrap(),
            Endpoint::new("node1", 29500)
        );
        let v6 = Endpoint::parse("[::1]:4000").unwrap();
        assert_eq!(v6, Endpoint::new("::1", 4000));
        assert_eq!(v6.to_string(), "[::1]:4000");
        assert!(v6.listen_addr().is_ipv6());
        assert_eq!(
            Endpoint::new("node1", 29500).listen_addr().to_string(),
            "0.0.0.0:29500"
        );
        for (bad, why) in [
            ("node1", "has no port"),
            (":29500", "has no host"),
            ("node1:0", "port 0"),
            ("node1:70000", "not a number from 1 to 65535"),
            ("::1:4000", "without brackets"),
        ] {
            let e = Endpoint::parse(bad).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2);
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn frames_round_trip_and_strangers_are_named() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut b, _) = l.accept().unwrap();
        let by = Instant::now() + Duration::from_secs(5);
        write_frame(&mut a, Kind::Result, b"timings", by).unwrap();
        let (k, p) = read_frame(&mut b, by).unwrap();
        assert_eq!((k, p.as_slice()), (Kind::Result, &b"timings"[..]));
        a.write_all(b"GET / HTTP/1.1\r\n").unwrap();
        let e = read_frame(&mut b, by).unwrap_err();
        assert!(
            e.to_string().contains("not a verifybench rendezvous"),
            "{e}"
        );
        // Nothing more comes: the read gives up at the deadline instead of hanging.
        let t = Instant::now();
        let e = read_frame(&mut b, Instant::now() + Duration::from_millis(100)).unwrap_err();
        assert!(matches!(e, FrameError::Timeout), "{e}");
        assert!(t.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn mismatches_name_both_sides() {
        let ours = hello(0, 2);
        let none = BTreeMap::new();
        assert_eq!(mismatch(&ours, &hello(1, 2), &none), None);
        let mut v = hello(1, 2);
        v.version = "0.2.0".into();
        v.workload_hash = "9f3c".into();
        assert_eq!(
            mismatch(&ours, &v, &none).unwrap(),
            "rank 1 on host1 runs verifybench 0.2.0 with workload 9f3c, rank 0 on host0 runs \
             0.1.0 with workload 2b1b: start every rank with the same binary and flags"
        );
        let w = mismatch(&ours, &hello(1, 3), &none).unwrap();
        assert!(
            w.contains("world size 3, rank 0 on host0 with world size 2"),
            "{w}"
        );
        let r = mismatch(&ours, &hello(0, 2), &none).unwrap();
        assert!(r.contains("duplicates rank 0 on host0"), "{r}");
        let mut joined = BTreeMap::new();
        joined.insert(
            1,
            PeerInfo {
                hello: hello(1, 2),
                addr: "127.0.0.1:1".parse().unwrap(),
            },
        );
        let mut dup = hello(1, 2);
        dup.host = "hostX".into();
        let d = mismatch(&ours, &dup, &joined).unwrap();
        assert_eq!(
            d,
            "rank 1 on hostX (pid 101) duplicates rank 1 on host1 (pid 101): give each process its own rank"
        );
    }

    #[test]
    fn rank_lists_are_compact() {
        assert_eq!(rank_list(&[1]), "1");
        assert_eq!(rank_list(&[1, 2]), "1, 2");
        assert_eq!(rank_list(&[1, 2, 3, 5, 7, 8, 9, 10]), "1-3, 5, 7-10");
        assert_eq!(rank_list(&[]), "");
    }

    #[test]
    fn bind_checks_its_own_hello() {
        let a: SocketAddr = "127.0.0.1:0".parse().unwrap();
        assert!(Server::bind(a, 2, hello(1, 2), None).is_err());
        assert!(Server::bind(a, 3, hello(0, 2), None).is_err());
        assert!(Server::bind(a, 0, hello(0, 0), None).is_err());
        // A world of one: nobody to wait for.
        let mut s = Server::bind(a, 1, hello(0, 1), None).unwrap();
        assert!(s
            .serve_id(&[7; ID_BYTES], Duration::from_millis(10))
            .unwrap()
            .is_empty());
        assert!(s.gather(Duration::from_millis(10)).unwrap().is_empty());
    }
}
