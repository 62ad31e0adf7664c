//! Rank 0's side of the rendezvous: listens, hands out the id, gathers results.

use std::collections::BTreeMap;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};

use super::admit::{Admitted, Lobby, Outcome};
use super::auth::Secret;
use super::frame::*;
use super::{mismatch, rank_list, said, secs, Hello, PeerInfo, Tally, ID_BYTES};
use crate::error::usage;

/// How many refused connections are printed and kept (the rest are counted).
const REFUSED_NAMED: usize = 32;

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
    /// The connections refused or dropped so far, one line each (also printed on stderr).
    refused: Tally,
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
            refused: Tally::new(REFUSED_NAMED),
        })
    }

    /// The connections refused or dropped so far, one line each: who they claimed to be
    /// (escaped), from which address, and why (the lines printed on stderr as they came). The
    /// first 32 are kept and printed; the others are counted in a timeout's message.
    pub fn refused(&self) -> &[String] {
        &self.refused.lines
    }

    /// The address actually bound (its port is the real one when bound with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Waits up to `timeout` for the other `world_size - 1` ranks, checks each one's hello
    /// against rank 0's, and once all are in sends each of them `id` with rank 0's proof of
    /// the secret. Returns the peers in rank order. Connections are admitted side by side,
    /// each with its own deadline for its hello ([`super::admit`]).
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
        let mut joined: BTreeMap<usize, Admitted> = BTreeMap::new();
        let mut lobby = Lobby::new(self.secret.clone(), self.hello.job.clone());
        self.listener.set_nonblocking(true)?;
        while joined.len() < want {
            let came = lobby.accept(&self.listener)?;
            let (busy, outcomes) = lobby.poll(deadline);
            for outcome in outcomes {
                let fatal = match outcome {
                    Outcome::Joined(a) => self.seat(*a, &mut joined).err(),
                    Outcome::Refused(line) => {
                        self.note_refused(line);
                        None
                    }
                    Outcome::Fatal(msg) => Some(msg),
                };
                if let Some(msg) = fatal {
                    for a in joined.values_mut() {
                        send_quietly(&mut a.stream, Kind::Abort, &msg);
                    }
                    return Err(usage(msg));
                }
            }
            if joined.len() < want && remaining(deadline).is_none() {
                lobby.close();
                let err = self.missing_error(&joined, &lobby, timeout);
                for a in joined.values_mut() {
                    send_quietly(&mut a.stream, Kind::Abort, &err);
                }
                return Err(anyhow!(err));
            }
            if !came && !busy {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let peers: Vec<PeerInfo> = joined
            .values()
            .map(|a| PeerInfo {
                hello: a.hello.clone(),
                addr: a.addr,
            })
            .collect();
        let by = deadline.max(Instant::now() + Duration::from_secs(5));
        for (rank, mut a) in joined {
            let payload = a.id_payload(id, self.secret.as_ref());
            if let Err(e) = write_frame(&mut a.stream, Kind::Id, &payload, by) {
                let msg = format!(
                    "rank 0 could not send the NCCL id to {}: {e}",
                    a.hello.who()
                );
                for (_, s) in self.peers.values_mut() {
                    send_quietly(s, Kind::Abort, &msg);
                }
                return Err(anyhow!(msg));
            }
            let info = PeerInfo {
                hello: a.hello,
                addr: a.addr,
            };
            self.peers.insert(rank, (info, a.stream));
        }
        Ok(peers)
    }

    /// Seats an admitted rank among `joined`, or says why it does not fit (it was told).
    fn seat(&self, mut a: Admitted, joined: &mut BTreeMap<usize, Admitted>) -> Result<(), String> {
        let taken = joined.get(&a.hello.rank).map(|first| &first.hello);
        if let Some(msg) = mismatch(&self.hello, &a.hello, taken) {
            send_quietly(&mut a.stream, Kind::Refused, &msg);
            return Err(msg);
        }
        joined.insert(a.hello.rank, a);
        Ok(())
    }

    /// Prints a refused or dropped connection's line and keeps it (the first few).
    fn note_refused(&mut self, line: String) {
        let n = self.refused.count;
        if self.refused.add(line.clone()) {
            eprintln!("verifybench rendezvous: {line}");
        } else if n == REFUSED_NAMED {
            eprintln!(
                "verifybench rendezvous: more connections refused; they are counted, not printed"
            );
        }
    }

    fn missing_error(
        &self,
        joined: &BTreeMap<usize, Admitted>,
        lobby: &Lobby,
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
        if lobby.strangers.count > 0 {
            msg.push_str(&format!(
                "; dropped connections that never said hello: {}",
                lobby.strangers.list()
            ));
        }
        if let Some(e) = &lobby.accept_error {
            msg.push_str(&format!("; accepting a connection failed: {e}"));
        }
        let refused = self.refused.count;
        if refused > 0 {
            msg.push_str(&format!(
                "; refused {refused} connection{} (see above)",
                if refused == 1 { "" } else { "s" }
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
            match read_frame(stream, deadline, MAX_FRAME_BYTES) {
                Ok((Kind::Result, bytes)) => {
                    let ack_by = Instant::now() + Duration::from_secs(5);
                    if let Err(e) = write_frame(stream, Kind::Ack, &[], ack_by) {
                        problems.push(format!("{who}: could not acknowledge its result: {e}"));
                    }
                    got.push((*rank, bytes));
                }
                Ok((Kind::Failed, why)) => problems.push(format!("{who} failed: {}", said(&why))),
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
