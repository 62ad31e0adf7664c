//! Rank 0's side of the rendezvous: listens, hands out the id, gathers results.

use std::collections::BTreeMap;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};

use super::auth::{self, Secret};
use super::frame::*;
use super::{mismatch, rank_list, secs, Hello, PeerInfo, ID_BYTES};
use crate::error::usage;

/// How long an accepted connection may take to say hello before it is dropped as a stranger.
const HELLO_WAIT: Duration = Duration::from_secs(10);

/// Rank 0's side: listens, hands out the id, gathers results.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    local_addr: SocketAddr,
    hello: Hello,
    /// Connections of the ranks that joined, by rank; empty before [`Server::serve_id`].
    peers: BTreeMap<usize, (PeerInfo, TcpStream)>,
    served: bool,
    /// The run's secret; none: an open rendezvous.
    secret: Option<Secret>,
    /// Every connection refused so far, one line each (also printed on stderr).
    refused: Vec<String>,
}

/// What came of one accepted connection.
enum Admission {
    /// A rank with a valid proof (or any rank, in an open rendezvous) of the same job.
    Hello(Hello),
    /// Refused: the line that says who, from where and why.
    Refused(String),
    /// Never said a readable hello (a port scanner, a health check, a retrying rank).
    Stranger(String),
    /// A rank of this run sent a hello this build cannot read: the run cannot go on.
    Unreadable(String),
}

impl Server {
    /// Listens on `addr` (rank 0; `hello.rank` must be 0). Port 0 picks a free port (see
    /// [`Server::local_addr`]). A port in use is a usage error that says what to do. With a
    /// `secret`, only ranks that prove it join; without, any host that reaches the port may.
    pub fn bind(
        addr: SocketAddr,
        world_size: usize,
        hello: Hello,
        secret: Option<Secret>,
    ) -> Result<Server> {
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
            secret,
            refused: vec![],
        })
    }

    /// The connections refused so far, one line each: who they claimed to be, from which
    /// address, and why (the lines printed on stderr as they came).
    pub fn refused(&self) -> &[String] {
        &self.refused
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
            let hello = match self.admit(&mut stream, addr, hello_deadline) {
                Admission::Hello(h) => h,
                Admission::Refused(line) => {
                    eprintln!("verifybench rendezvous: {line}");
                    send_quietly(&mut stream, Kind::Refused, &line);
                    self.refused.push(line);
                    continue;
                }
                Admission::Stranger(why) => {
                    strangers.push(why);
                    continue;
                }
                Admission::Unreadable(msg) => {
                    send_quietly(&mut stream, Kind::Refused, &msg);
                    for s in streams.values_mut() {
                        send_quietly(s, Kind::Abort, &msg);
                    }
                    return Err(usage(msg));
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

    /// Challenges the connection from `addr` with a fresh nonce, reads its hello by
    /// `deadline`, and checks the proof of the secret and the launcher's job.
    fn admit(&self, stream: &mut TcpStream, addr: SocketAddr, deadline: Instant) -> Admission {
        let nonce = match auth::nonce() {
            Ok(n) => n,
            Err(e) => return Admission::Stranger(format!("{addr} (no nonce for it: {e})")),
        };
        let challenge = auth::challenge(&nonce, self.secret.is_some());
        if let Err(e) = write_frame(stream, Kind::Challenge, &challenge, deadline) {
            return Admission::Stranger(format!("{addr} ({e})"));
        }
        let payload = match read_frame(stream, deadline) {
            Ok((Kind::Hello, p)) => p,
            Ok((k, _)) => return Admission::Stranger(format!("{addr} (sent {k:?} before hello)")),
            Err(e) => return Admission::Stranger(format!("{addr} ({e})")),
        };
        let Some((proof, json)) = auth::unseal(&payload) else {
            return Admission::Refused(format!(
                "refused a connection from {addr}: its hello is not laid out as this build's \
                 (start every rank with the same binary)"
            ));
        };
        // The claim is read before the proof is checked, to name it in a refusal only.
        let claim = serde_json::from_slice::<Hello>(json);
        let who = match &claim {
            Ok(h) => format!(
                "a connection from {addr} claiming {} (pid {})",
                h.who(),
                h.pid
            ),
            Err(_) => format!("a connection from {addr}"),
        };
        match (&self.secret, proof) {
            (Some(s), Some(mac)) if s.verify(&nonce, json, mac) => {}
            (Some(_), Some(_)) => {
                return Admission::Refused(format!(
                    "refused {who}: its proof does not match this run's token (a wrong token, \
                     or a hello replayed from another connection)"
                ))
            }
            (Some(_), None) => {
                return Admission::Refused(format!(
                    "refused {who}: it gave no token, and this run requires one \
                     (the same {} or {} on every rank)",
                    auth::TOKEN_ENV,
                    auth::TOKEN_FLAG
                ))
            }
            (None, Some(_)) => {
                return Admission::Refused(format!(
                    "refused {who}: it proves a rendezvous token, but rank 0 has none: \
                     give every rank the same token, or none"
                ))
            }
            (None, None) => {}
        }
        let hello = match claim {
            Ok(h) => h,
            Err(e) => {
                return Admission::Unreadable(format!(
                    "the rank at {addr} sent a hello this build cannot read ({e}): \
                     start every rank with the same binary"
                ))
            }
        };
        if hello.job != self.hello.job {
            let job = |j: &Option<String>| match j {
                Some(j) => format!("launcher job {j}"),
                None => "no launcher job".to_string(),
            };
            return Admission::Refused(format!(
                "refused {who}: it runs in {}, rank 0 in {}: another job's rank, or a rank \
                 started outside the launcher",
                job(&hello.job),
                job(&self.hello.job)
            ));
        }
        Admission::Hello(hello)
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
        if !self.refused.is_empty() {
            msg.push_str(&format!(
                "; refused {} connection{} (see above)",
                self.refused.len(),
                if self.refused.len() == 1 { "" } else { "s" }
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
