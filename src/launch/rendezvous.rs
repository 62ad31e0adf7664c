//! TCP rendezvous of ranks started by an external launcher: rank 0 hands the 128-byte NCCL
//! unique id to every other rank, and after the run gathers their results.
//!
//! Plain `std::net` with blocking sockets and per-call timeouts: the exchange is a handful of
//! small messages per rank, so threads or an async runtime would add nothing but weight.
//!
//! The protocol, one TCP connection per rank > 0, kept open from the id exchange to the end:
//!
//! ```text
//! rank r -> rank 0   HELLO   {version, workload_hash, rank, world_size, host, pid} (JSON)
//! rank 0 -> rank r   ID      128 bytes                 once all world_size-1 ranks said hello
//!                  | REFUSED why                       this rank does not fit (version, ...)
//!                  | ABORT   why                       another rank did not fit, or one never came
//! rank r -> rank 0   RESULT  bytes | FAILED why        after the run, any number of times
//! rank 0 -> rank r   ACK     (empty)                   rank 0 has the result
//! ```
//!
//! Every frame is `"VBRZ" | protocol u16 | kind u8 | length u32 | payload`, big-endian. The
//! header never changes, so two different builds still understand each other enough for the
//! handshake to name the mismatch. Every read and write has a deadline: nothing hangs.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};

use crate::error::usage;
pub use crate::request::Endpoint;

/// Size of an NCCL unique id (`ncclUniqueId`, `NCCL_UNIQUE_ID_BYTES`).
pub const ID_BYTES: usize = 128;

const MAGIC: [u8; 4] = *b"VBRZ";
/// Version of the frame layout and message kinds (not of the crate).
const PROTOCOL: u16 = 1;
const HEADER_BYTES: usize = 11;
/// Largest frame accepted: a result of per-rank timings is far smaller; anything bigger is
/// not our peer.
const MAX_FRAME_BYTES: u32 = 64 << 20;
/// How long an accepted connection may take to say hello before it is dropped as a stranger.
const HELLO_WAIT: Duration = Duration::from_secs(10);

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
    pub fn listen_addr(&self) -> SocketAddr {
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
pub fn endpoint_arg(s: &str) -> Result<Endpoint, String> {
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
        }
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Hello = 1,
    Id = 2,
    Refused = 3,
    Abort = 4,
    Result = 5,
    Failed = 6,
    Ack = 7,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Hello,
            2 => Kind::Id,
            3 => Kind::Refused,
            4 => Kind::Abort,
            5 => Kind::Result,
            6 => Kind::Failed,
            7 => Kind::Ack,
            _ => return None,
        })
    }
}

/// Why a frame could not be read or written.
#[derive(Debug)]
enum FrameError {
    Timeout,
    Closed,
    Io(io::Error),
    NotOurs([u8; 4]),
    Protocol(u16),
    BadKind(u8),
    TooLarge(u32),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Timeout => f.write_str("timed out"),
            FrameError::Closed => f.write_str("the connection was closed"),
            FrameError::Io(e) => write!(f, "{e}"),
            FrameError::NotOurs(m) => write!(
                f,
                "the other side is not a verifybench rendezvous (it sent {:?}): is the port used by another program?",
                String::from_utf8_lossy(m)
            ),
            FrameError::Protocol(p) => write!(
                f,
                "the other side speaks rendezvous protocol {p}, this build {PROTOCOL}: start every rank with the same binary"
            ),
            FrameError::BadKind(k) => write!(f, "unknown message kind {k}"),
            FrameError::TooLarge(n) => write!(f, "a {n}-byte message is larger than any rendezvous message"),
        }
    }
}

fn io_err(e: io::Error) -> FrameError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => FrameError::Timeout,
        io::ErrorKind::UnexpectedEof
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe => FrameError::Closed,
        _ => FrameError::Io(e),
    }
}

fn remaining(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
}

fn read_exact_by(
    s: &mut TcpStream,
    mut buf: &mut [u8],
    deadline: Instant,
) -> Result<(), FrameError> {
    while !buf.is_empty() {
        let left = remaining(deadline).ok_or(FrameError::Timeout)?;
        s.set_read_timeout(Some(left)).map_err(FrameError::Io)?;
        match s.read(buf) {
            Ok(0) => return Err(FrameError::Closed),
            Ok(n) => buf = &mut buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err(e)),
        }
    }
    Ok(())
}

fn write_all_by(s: &mut TcpStream, mut buf: &[u8], deadline: Instant) -> Result<(), FrameError> {
    while !buf.is_empty() {
        let left = remaining(deadline).ok_or(FrameError::Timeout)?;
        s.set_write_timeout(Some(left)).map_err(FrameError::Io)?;
        match s.write(buf) {
            Ok(0) => return Err(FrameError::Closed),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err(e)),
        }
    }
    Ok(())
}

fn encode(kind: Kind, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_BYTES + payload.len());
    v.extend_from_slice(&MAGIC);
    v.extend_from_slice(&PROTOCOL.to_be_bytes());
    v.push(kind as u8);
    v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    v.extend_from_slice(payload);
    v
}

fn write_frame(
    s: &mut TcpStream,
    kind: Kind,
    payload: &[u8],
    deadline: Instant,
) -> Result<(), FrameError> {
    if payload.len() > MAX_FRAME_BYTES as usize {
        return Err(FrameError::TooLarge(payload.len() as u32));
    }
    write_all_by(s, &encode(kind, payload), deadline)
}

fn read_frame(s: &mut TcpStream, deadline: Instant) -> Result<(Kind, Vec<u8>), FrameError> {
    let mut h = [0u8; HEADER_BYTES];
    read_exact_by(s, &mut h, deadline)?;
    let magic = [h[0], h[1], h[2], h[3]];
    if magic != MAGIC {
        return Err(FrameError::NotOurs(magic));
    }
    let proto = u16::from_be_bytes([h[4], h[5]]);
    if proto != PROTOCOL {
        return Err(FrameError::Protocol(proto));
    }
    let kind = Kind::from_u8(h[6]).ok_or(FrameError::BadKind(h[6]))?;
    let len = u32::from_be_bytes([h[7], h[8], h[9], h[10]]);
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge(len));
    }
    let mut payload = vec![0u8; len as usize];
    read_exact_by(s, &mut payload, deadline)?;
    Ok((kind, payload))
}

/// Best effort: tell a peer why the rendezvous ended, without waiting long for it.
fn send_quietly(s: &mut TcpStream, kind: Kind, msg: &str) {
    let _ = write_frame(
        s,
        kind,
        msg.as_bytes(),
        Instant::now() + Duration::from_secs(2),
    );
}

/// `1, 2, 5-9` for a sorted list of ranks.
pub fn rank_list(ranks: &[usize]) -> String {
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

/// Rank 0's side: listens, hands out the id, gathers results.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    local_addr: SocketAddr,
    hello: Hello,
    /// Connections of the ranks that joined, by rank; empty before [`Server::serve_id`].
    peers: BTreeMap<usize, (PeerInfo, TcpStream)>,
    served: bool,
}

impl Server {
    /// Listens on `addr` (rank 0; `hello.rank` must be 0). Port 0 picks a free port (see
    /// [`Server::local_addr`]). A port in use is a usage error that says what to do.
    pub fn bind(addr: SocketAddr, world_size: usize, hello: Hello) -> Result<Server> {
        if world_size == 0 {
            return Err(usage("world size 0: a job needs at least one rank"));
        }
        if hello.rank != 0 || hello.world_size != world_size {
            return Err(anyhow!(
                "the rendezvous is served by rank 0 of {world_size}, not rank {} of {}",
                hello.rank,
                hello.world_size
            ));
        }
        let listener = TcpListener::bind(addr).map_err(|e| {
            let (ip, port) = (addr.ip(), addr.port());
            match e.kind() {
                io::ErrorKind::AddrInUse => usage(format!(
                    "port {port} on {ip} is in use: pick another --rendezvous port or stop the process holding it"
                )),
                io::ErrorKind::AddrNotAvailable => usage(format!(
                    "{ip} is not an address of this host: rank 0 cannot listen on {addr}"
                )),
                io::ErrorKind::PermissionDenied => usage(format!(
                    "no permission to listen on port {port} on {ip}: pick a port above 1023"
                )),
                _ => anyhow!("cannot listen on {addr} for the rendezvous: {e}"),
            }
        })?;
        let local_addr = listener.local_addr()?;
        Ok(Server {
            listener,
            local_addr,
            hello,
            peers: BTreeMap::new(),
            served: false,
        })
    }

    /// The address actually bound (its port is the real one when bound with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Waits up to `timeout` for the other `world_size - 1` ranks, checks each one's hello
    /// against rank 0's, and once all are in sends each of them `id`. Returns the peers in
    /// rank order.
    ///
    /// A rank that does not fit (another version or workload, another world size, a rank out
    /// of range or already taken) ends the rendezvous at once: that rank gets the reason as a
    /// refusal, the ranks already in get it as an abort, and rank 0 returns it as a usage
    /// error. If ranks are still missing at the deadline the error lists them.
    pub fn serve_id(&mut self, id: &[u8; ID_BYTES], timeout: Duration) -> Result<Vec<PeerInfo>> {
        if self.served {
            return Err(anyhow!("the rendezvous id was already served"));
        }
        self.served = true;
        let deadline = Instant::now() + timeout;
        let want = self.hello.world_size - 1;
        let mut joined: BTreeMap<usize, PeerInfo> = BTreeMap::new();
        let mut streams: BTreeMap<usize, TcpStream> = BTreeMap::new();
        let mut strangers: Vec<String> = Vec::new();
        self.listener.set_nonblocking(true)?;
        while joined.len() < want {
            let (mut stream, addr) = match self.listener.accept() {
                Ok(c) => c,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if remaining(deadline).is_none() {
                        let err = self.missing_error(&joined, &strangers, timeout);
                        for s in streams.values_mut() {
                            send_quietly(s, Kind::Abort, &err);
                        }
                        return Err(anyhow!(err));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(anyhow!(
                        "rendezvous on {}: accept failed: {e}",
                        self.local_addr
                    ))
                }
            };
            stream.set_nonblocking(false)?;
            let _ = stream.set_nodelay(true);
            let hello_deadline = deadline.min(Instant::now() + HELLO_WAIT);
            let hello = match read_frame(&mut stream, hello_deadline) {
                Ok((Kind::Hello, payload)) => match serde_json::from_slice::<Hello>(&payload) {
                    Ok(h) => h,
                    Err(e) => {
                        let msg = format!(
                            "the rank at {addr} sent a hello this build cannot read ({e}): \
                             start every rank with the same binary"
                        );
                        send_quietly(&mut stream, Kind::Refused, &msg);
                        for s in streams.values_mut() {
                            send_quietly(s, Kind::Abort, &msg);
                        }
                        return Err(usage(msg));
                    }
                },
                Ok((k, _)) => {
                    strangers.push(format!("{addr} (sent {k:?} before hello)"));
                    continue;
                }
                Err(e) => {
                    // A port scanner, a health check, an earlier attempt of a retrying rank:
                    // not fatal, but worth naming if the rendezvous times out.
                    strangers.push(format!("{addr} ({e})"));
                    continue;
                }
            };
            if let Some(msg) = mismatch(&self.hello, &hello, &joined) {
                send_quietly(&mut stream, Kind::Refused, &msg);
                for s in streams.values_mut() {
                    send_quietly(s, Kind::Abort, &msg);
                }
                return Err(usage(msg));
            }
            streams.insert(hello.rank, stream);
            joined.insert(hello.rank, PeerInfo { hello, addr });
        }
        for (rank, mut stream) in streams {
            if let Err(e) = write_frame(
                &mut stream,
                Kind::Id,
                id,
                deadline.max(Instant::now() + Duration::from_secs(5)),
            ) {
                let who = joined[&rank].hello.who();
                let msg = format!("rank 0 could not send the NCCL id to {who}: {e}");
                for (_, s) in self.peers.values_mut() {
                    send_quietly(s, Kind::Abort, &msg);
                }
                return Err(anyhow!(msg));
            }
            let info = joined[&rank].clone();
            self.peers.insert(rank, (info, stream));
        }
        Ok(joined.into_values().collect())
    }

    fn missing_error(
        &self,
        joined: &BTreeMap<usize, PeerInfo>,
        strangers: &[String],
        timeout: Duration,
    ) -> String {
        let n = self.hello.world_size;
        let missing: Vec<usize> = (1..n).filter(|r| !joined.contains_key(r)).collect();
        let mut msg = format!(
            "rendezvous on {} timed out after {}: {} {} of {n} never connected",
            self.local_addr,
            secs(timeout),
            if missing.len() == 1 { "rank" } else { "ranks" },
            rank_list(&missing),
        );
        if joined.is_empty() {
            msg.push_str(" (no rank connected)");
        } else {
            let got: Vec<String> = joined
                .values()
                .map(|p| format!("{} pid {}", p.hello.who(), p.hello.pid))
                .collect();
            msg.push_str(&format!(" (joined: {})", got.join(", ")));
        }
        if !strangers.is_empty() {
            msg.push_str(&format!(
                "; dropped connections that never said hello: {}",
                strangers.join(", ")
            ));
        }
        msg.push_str(
            "; check that every rank was started, points at this host and port, \
             and that no firewall blocks the port",
        );
        msg
    }

    /// Reads one result from every peer (in rank order) within `timeout` and acknowledges it.
    /// Returns `(rank, bytes)` in rank order. A rank that reports a failure, closes its
    /// connection or sends nothing in time makes this an error naming every such rank.
    pub fn gather(&mut self, timeout: Duration) -> Result<Vec<(usize, Vec<u8>)>> {
        if !self.served && self.hello.world_size > 1 {
            return Err(anyhow!("gather before the id was served"));
        }
        let deadline = Instant::now() + timeout;
        let mut got = Vec::new();
        let mut problems = Vec::new();
        for (rank, (info, stream)) in self.peers.iter_mut() {
            let who = info.hello.who();
            match read_frame(stream, deadline) {
                Ok((Kind::Result, bytes)) => {
                    let ack_by = Instant::now() + Duration::from_secs(5);
                    if let Err(e) = write_frame(stream, Kind::Ack, &[], ack_by) {
                        problems.push(format!("{who}: could not acknowledge its result: {e}"));
                    }
                    got.push((*rank, bytes));
                }
                Ok((Kind::Failed, why)) => {
                    problems.push(format!("{who} failed: {}", String::from_utf8_lossy(&why)))
                }
                Ok((k, _)) => problems.push(format!("{who} sent {k:?} instead of its result")),
                Err(FrameError::Timeout) => {
                    problems.push(format!("{who} sent no result within {}", secs(timeout)))
                }
                Err(FrameError::Closed) => problems.push(format!(
                    "{who} closed its connection without a result (did it crash?)"
                )),
                Err(e) => problems.push(format!("{who}: {e}")),
            }
        }
        if problems.is_empty() {
            Ok(got)
        } else {
            Err(anyhow!("gathering results: {}", problems.join("; ")))
        }
    }

    /// Tells every joined rank that rank 0 gave up (best effort, a couple of seconds at most
    /// per rank): a rank waiting in [`Client::send_result`] gets `msg` as its error.
    pub fn abort(&mut self, msg: &str) {
        let msg = format!("rank 0 on {} failed: {msg}", self.hello.host);
        for (_, s) in self.peers.values_mut() {
            send_quietly(s, Kind::Abort, &msg);
        }
    }
}

/// A rank > 0's side: its connection to rank 0, kept open for the results.
#[derive(Debug)]
pub struct Client {
    stream: TcpStream,
    server: SocketAddr,
    id: [u8; ID_BYTES],
}

impl Client {
    /// Connects to rank 0 at `addr`, retrying with backoff while nobody listens, says hello,
    /// and waits for the id, all within `timeout`. Rank 0's refusal (another version or
    /// workload, world size, a rank taken) comes back as this error.
    pub fn fetch_id(addr: &Endpoint, hello: &Hello, timeout: Duration) -> Result<Client> {
        if hello.rank == 0 {
            return Err(anyhow!(
                "rank 0 serves the rendezvous; it does not fetch the id"
            ));
        }
        let start = Instant::now();
        let deadline = start + timeout;
        let payload = serde_json::to_vec(hello)?;
        let mut backoff = Duration::from_millis(50);
        let mut attempts = 0u32;
        let (mut stream, server) = loop {
            attempts += 1;
            let last_err = match connect_once(addr, deadline) {
                Ok(c) => break c,
                Err(e) => e,
            };
            let Some(left) = remaining(deadline) else {
                return Err(anyhow!(
                    "could not reach rank 0 at {addr} within {} ({attempts} attempts, last: {last_err}): \
                     is rank 0 running, and is {addr} its host and --rendezvous port?",
                    secs(timeout)
                ));
            };
            std::thread::sleep(backoff.min(left));
            backoff = (backoff * 2).min(Duration::from_secs(1));
        };
        let _ = stream.set_nodelay(true);
        write_frame(&mut stream, Kind::Hello, &payload, deadline)
            .map_err(|e| anyhow!("saying hello to rank 0 at {addr}: {e}"))?;
        match read_frame(&mut stream, deadline) {
            Ok((Kind::Id, bytes)) if bytes.len() == ID_BYTES => {
                let mut id = [0u8; ID_BYTES];
                id.copy_from_slice(&bytes);
                Ok(Client { stream, server, id })
            }
            Ok((Kind::Id, bytes)) => Err(anyhow!(
                "rank 0 at {addr} sent a {}-byte id, not {ID_BYTES}",
                bytes.len()
            )),
            Ok((Kind::Refused, why)) => Err(usage(format!(
                "rank 0 at {addr} refused {}: {}",
                hello.who(),
                String::from_utf8_lossy(&why)
            ))),
            Ok((Kind::Abort, why)) => Err(anyhow!(
                "rank 0 at {addr} ended the rendezvous: {}",
                String::from_utf8_lossy(&why)
            )),
            Ok((k, _)) => Err(anyhow!("rank 0 at {addr} sent {k:?} instead of the id")),
            Err(FrameError::Timeout) => Err(anyhow!(
                "rank 0 at {addr} did not hand out the id within {} (it waits for all {} ranks): \
                 were all ranks started?",
                secs(timeout),
                hello.world_size
            )),
            Err(FrameError::Closed) => Err(anyhow!(
                "rank 0 at {addr} closed the connection before sending the id: did rank 0 exit, \
                 or does another program (a torchrun agent?) hold that port?"
            )),
            Err(e) => Err(anyhow!("waiting for the id from rank 0 at {addr}: {e}")),
        }
    }

    /// The NCCL unique id rank 0 created.
    pub fn id(&self) -> &[u8; ID_BYTES] {
        &self.id
    }

    /// Sends this rank's result to rank 0 and waits (up to `timeout`) until rank 0 has it.
    pub fn send_result(&mut self, bytes: &[u8], timeout: Duration) -> Result<()> {
        self.send(Kind::Result, bytes, timeout)
    }

    /// Tells rank 0 this rank failed and why, so rank 0's error names it; waits for the ack.
    pub fn send_failure(&mut self, why: &str, timeout: Duration) -> Result<()> {
        self.send(Kind::Failed, why.as_bytes(), timeout)
    }

    fn send(&mut self, kind: Kind, bytes: &[u8], timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let server = self.server;
        write_frame(&mut self.stream, kind, bytes, deadline)
            .map_err(|e| anyhow!("sending to rank 0 at {server}: {e}"))?;
        if kind == Kind::Failed {
            // Rank 0 does not acknowledge a failure report (it stops gathering); best effort.
            return Ok(());
        }
        match read_frame(&mut self.stream, deadline) {
            Ok((Kind::Ack, _)) => Ok(()),
            Ok((Kind::Abort, why)) => Err(anyhow!("{}", String::from_utf8_lossy(&why))),
            Ok((k, _)) => Err(anyhow!("rank 0 at {server} sent {k:?} instead of an ack")),
            Err(FrameError::Timeout) => Err(anyhow!(
                "rank 0 at {server} did not confirm the result within {}",
                secs(timeout)
            )),
            Err(e) => Err(anyhow!("waiting for rank 0 at {server} to confirm: {e}")),
        }
    }
}

/// One connection attempt to every address `addr` resolves to; the error says why none worked.
fn connect_once(addr: &Endpoint, deadline: Instant) -> Result<(TcpStream, SocketAddr), String> {
    let addrs = addr
        .resolve()
        .map_err(|e| format!("cannot resolve {}: {e}", addr.host))?;
    let mut last = format!("{} resolves to no address", addr.host);
    for a in addrs {
        let Some(left) = remaining(deadline) else {
            break;
        };
        match TcpStream::connect_timeout(&a, left.min(Duration::from_secs(5))) {
            Ok(s) => return Ok((s, a)),
            Err(e) => last = format!("{a}: {e}"),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(rank: usize, world: usize) -> Hello {
        Hello {
            version: "0.1.0".into(),
            workload_hash: "2b1b".into(),
            rank,
            world_size: world,
            host: format!("host{rank}"),
            pid: 100 + rank as u32,
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
        assert!(Server::bind(a, 2, hello(1, 2)).is_err());
        assert!(Server::bind(a, 3, hello(0, 2)).is_err());
        assert!(Server::bind(a, 0, hello(0, 0)).is_err());
        // A world of one: nobody to wait for.
        let mut s = Server::bind(a, 1, hello(0, 1)).unwrap();
        assert!(s
            .serve_id(&[7; ID_BYTES], Duration::from_millis(10))
            .unwrap()
            .is_empty());
        assert!(s.gather(Duration::from_millis(10)).unwrap().is_empty());
    }
}
