//! TCP rendezvous of ranks started by an external launcher: rank 0 hands the 128-byte NCCL
//! unique id to every other rank, and after the run gathers their results.
//!
//! Plain `std::net`: rank 0 reads the connections still in their handshake without blocking,
//! each against its own deadline ([`admit`]); after it, every exchange is a blocking call with
//! a deadline. The exchange is a handful of small messages per rank, so threads or an async
//! runtime would add nothing but weight.
//!
//! The protocol, one TCP connection per rank > 0, kept open from the id exchange to the end:
//!
//! ```text
//! rank 0 -> rank r   CHALLENGE nonce0 (32 random bytes) | token required (1 byte)
//! rank r -> rank 0   HELLO   proof_r | nonce_r (32 random bytes) |
//!                            {version, workload_hash, rank, world_size, host, pid, job}
//! rank 0 -> rank r   ID      128 bytes | proof_0        once all world_size-1 ranks said hello
//!                  | REFUSED why                       this rank does not fit (version, ...),
//!                                                      or gave no valid proof of the secret
//!                  | ABORT   why                       another rank did not fit, or one never came
//! rank r -> rank 0   RESULT  bytes | FAILED why        after the run, any number of times
//! rank 0 -> rank r   ACK     (empty)                   rank 0 has the result
//! ```
//!
//! With a secret, proof_r is HMAC-SHA256 over nonce0, nonce_r and the hello, and proof_0 over
//! the same and the id, each under its own domain ([`auth`]); in an open rendezvous both are
//! empty. A connection whose proof fails (no secret, a wrong one, a hello replayed from another
//! connection), whose launcher job is another, or that sends anything but a small hello is
//! refused and named on stderr, and the rendezvous goes on waiting for the right ranks; a rank
//! that proves the secret but does not fit (another version, workload or world size) ends it,
//! as a mistake of the job's own command lines. A rank takes the id only with rank 0's proof,
//! so whatever holds the port without the secret cannot hand it a false one.
//!
//! Every frame is `"VBRZ" | protocol u16 | kind u8 | length u32 | payload`, big-endian. The
//! header never changes, so two different builds still understand each other enough for the
//! handshake to name the mismatch. Frames of the handshake hold at most
//! [`frame::HANDSHAKE_MAX_BYTES`]. Every read and write has a deadline: nothing hangs. Text a
//! peer sent is printed only through [`crate::util::escaped`].

mod admit;
mod auth;
mod client;
mod frame;
mod server;

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::error::usage;
pub use crate::request::Endpoint;

pub use auth::Secret;
pub(crate) use auth::{TOKEN_ENV, TOKEN_FLAG};
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
    pub(crate) fn parse(s: &str) -> Result<Endpoint> {
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

    /// `rank 1 on hostB` (the host escaped: it is the peer's claim)
    fn who(&self) -> String {
        format!("rank {} on {}", self.rank, shown(&self.host))
    }
}

/// A rank that joined, as rank 0 saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    pub hello: Hello,
    /// The peer's address as rank 0 sees the connection.
    pub(crate) addr: SocketAddr,
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

/// Text a peer sent (a host name, a version, a reason), escaped and cut for a message.
fn shown(text: &str) -> String {
    crate::util::escaped(text, 256)
}

/// A message a peer sent (a refusal, a failure), escaped, as long as a handshake frame.
fn said(bytes: &[u8]) -> String {
    crate::util::escaped(
        &String::from_utf8_lossy(bytes),
        frame::HANDSHAKE_MAX_BYTES as usize,
    )
}

/// Lines about connections: the first few kept word for word, the rest counted.
#[derive(Debug)]
struct Tally {
    lines: Vec<String>,
    count: usize,
    keep: usize,
}

impl Tally {
    fn new(keep: usize) -> Tally {
        Tally {
            lines: Vec::new(),
            count: 0,
            keep,
        }
    }

    /// Adds `line`; returns whether it was kept.
    fn add(&mut self, line: String) -> bool {
        self.count += 1;
        let kept = self.lines.len() < self.keep;
        if kept {
            self.lines.push(line);
        }
        kept
    }

    /// `a, b, c` or `a, b, and 7 more`.
    fn list(&self) -> String {
        let mut s = self.lines.join(", ");
        if self.count > self.lines.len() {
            s.push_str(&format!(", and {} more", self.count - self.lines.len()));
        }
        s
    }
}

fn secs(d: Duration) -> String {
    format!("{:.0} s", d.as_secs_f64().max(1.0))
}

/// Why `theirs` cannot join the run of `ours` (rank 0), if it cannot; `taken` is the hello of
/// the rank that already holds the rank `theirs` claims, if one does.
fn mismatch(ours: &Hello, theirs: &Hello, taken: Option<&Hello>) -> Option<String> {
    if theirs.version != ours.version || theirs.workload_hash != ours.workload_hash {
        return Some(format!(
            "{} runs verifybench {} with workload {}, {} runs {} with workload {}: \
             start every rank with the same binary and flags",
            theirs.who(),
            shown(&theirs.version),
            shown(&theirs.workload_hash),
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
    if let Some(first) = taken {
        return Some(format!(
            "{} (pid {}) duplicates {} (pid {}): give each process its own rank",
            theirs.who(),
            theirs.pid,
            first.who(),
            first.pid
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
        let (k, p) = read_frame(&mut b, by, MAX_FRAME_BYTES).unwrap();
        assert_eq!((k, p.as_slice()), (Kind::Result, &b"timings"[..]));
        a.write_all(b"GET / HTTP/1.1\r\n").unwrap();
        let e = read_frame(&mut b, by, MAX_FRAME_BYTES).unwrap_err();
        assert!(
            e.to_string().contains("not a verifybench rendezvous"),
            "{e}"
        );
        // Nothing more comes: the read gives up at the deadline instead of hanging (a ceiling
        // of 100 times the deadline, for a loaded machine).
        let t = Instant::now();
        let e = read_frame(
            &mut b,
            Instant::now() + Duration::from_millis(100),
            MAX_FRAME_BYTES,
        )
        .unwrap_err();
        assert!(matches!(e, FrameError::Timeout), "{e}");
        assert!(t.elapsed() < Duration::from_secs(10));
    }

    /// Polls `inc` until it has a frame or fails, at most 20 s.
    fn poll_until(inc: &mut Incoming, s: &mut TcpStream) -> Result<Vec<u8>, FrameError> {
        let by = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(p) = inc.poll(s)? {
                return Ok(p);
            }
            assert!(Instant::now() < by, "no frame came");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn a_frame_read_without_blocking_comes_whole_and_nothing_past_it() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut b, _) = l.accept().unwrap();
        b.set_nonblocking(true).unwrap();
        let mut inc = Incoming::new(Kind::Hello, HANDSHAKE_MAX_BYTES);
        assert!(inc.poll(&mut b).unwrap().is_none(), "nothing came yet");
        // a hello dripped a byte at a time, then the start of the next frame
        let mut bytes = encode(Kind::Hello, b"drip");
        bytes.extend_from_slice(&encode(Kind::Result, b"next"));
        let mut got = None;
        for byte in &bytes[..HEADER_BYTES + 4] {
            a.write_all(&[*byte]).unwrap();
            std::thread::sleep(Duration::from_millis(1));
            assert!(got.is_none(), "a frame came before its last byte");
            got = inc.poll(&mut b).unwrap();
        }
        a.write_all(&bytes[HEADER_BYTES + 4..]).unwrap();
        let got = match got {
            Some(p) => p,
            None => poll_until(&mut inc, &mut b).unwrap(),
        };
        assert_eq!(got, b"drip");
        // the next frame is still in the socket, for the next reader
        b.set_nonblocking(false).unwrap();
        let by = Instant::now() + Duration::from_secs(20);
        let (k, p) = read_frame(&mut b, by, MAX_FRAME_BYTES).unwrap();
        assert_eq!((k, p.as_slice()), (Kind::Result, &b"next"[..]));
        b.set_nonblocking(true).unwrap();
        // a header past the limit is refused as it stands, before its payload comes
        let mut big = Incoming::new(Kind::Hello, HANDSHAKE_MAX_BYTES);
        let mut h = encode(Kind::Hello, &[]);
        h[7..11].copy_from_slice(&(64u32 << 20).to_be_bytes());
        a.write_all(&h).unwrap();
        let e = poll_until(&mut big, &mut b).unwrap_err();
        assert!(
            matches!(
                e,
                FrameError::TooLarge {
                    len: 67108864,
                    max: 4096
                }
            ),
            "{e}"
        );
        // another kind where a hello is due: refused from its header
        let mut inc = Incoming::new(Kind::Hello, HANDSHAKE_MAX_BYTES);
        a.write_all(&encode(Kind::Result, b"x")).unwrap();
        let e = poll_until(&mut inc, &mut b).unwrap_err();
        assert!(matches!(e, FrameError::Unexpected(Kind::Result)), "{e}");
    }

    #[test]
    fn a_tally_keeps_the_first_lines_and_counts_the_rest() {
        let mut t = Tally::new(2);
        assert!(t.add("a".into()) && t.add("b".into()));
        assert!(!t.add("c".into()));
        t.add("d".into());
        assert_eq!((t.lines.len(), t.count), (2, 4));
        assert_eq!(t.list(), "a, b, and 2 more");
    }

    #[test]
    fn mismatches_name_both_sides() {
        let ours = hello(0, 2);
        assert_eq!(mismatch(&ours, &hello(1, 2), None), None);
        let mut v = hello(1, 2);
        v.version = "0.2.0".into();
        v.workload_hash = "9f3c".into();
        assert_eq!(
            mismatch(&ours, &v, None).unwrap(),
            "rank 1 on host1 runs verifybench 0.2.0 with workload 9f3c, rank 0 on host0 runs \
             0.1.0 with workload 2b1b: start every rank with the same binary and flags"
        );
        let w = mismatch(&ours, &hello(1, 3), None).unwrap();
        assert!(
            w.contains("world size 3, rank 0 on host0 with world size 2"),
            "{w}"
        );
        let r = mismatch(&ours, &hello(0, 2), None).unwrap();
        assert!(r.contains("duplicates rank 0 on host0"), "{r}");
        let mut dup = hello(1, 2);
        dup.host = "hostX".into();
        let d = mismatch(&ours, &dup, Some(&hello(1, 2))).unwrap();
        assert_eq!(
            d,
            "rank 1 on hostX (pid 101) duplicates rank 1 on host1 (pid 101): give each process its own rank"
        );
        // what a peer claims is printed escaped: no line of its own, no terminal control
        let mut evil = hello(1, 2);
        evil.host = "h\u{1b}[2J\nverifybench: all ranks joined".into();
        evil.version = "9\u{202e}".into();
        let e = mismatch(&ours, &evil, None).unwrap();
        assert!(
            e.starts_with(
                "rank 1 on h\\u{1b}[2J\\nverifybench: all ranks joined runs verifybench 9\\u{202e} "
            ),
            "{e}"
        );
        assert!(!e.chars().any(char::is_control), "{e}");
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
