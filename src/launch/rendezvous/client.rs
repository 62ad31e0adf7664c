//! A rank > 0's side of the rendezvous: its connection to rank 0, kept open for the results.

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};

use super::auth::{self, Claim, Secret, Transcript, MAC_BYTES, NONCE_BYTES};
use super::frame::*;
use super::{said, secs, Hello, ID_BYTES};
use crate::error::usage;
use crate::request::Endpoint;

/// A rank > 0's side: its connection to rank 0, kept open for the results.
#[derive(Debug)]
pub struct Client {
    stream: TcpStream,
    server: SocketAddr,
    id: [u8; ID_BYTES],
}

/// One handshake with rank 0: where, and by when.
struct Call<'a> {
    ep: &'a Endpoint,
    server: SocketAddr,
    deadline: Instant,
    timeout: Duration,
}

impl Client {
    /// Connects to rank 0 at `addr`, retrying with backoff while nobody listens, answers its
    /// challenge with the hello and the proof of `secret` (none: an open rendezvous), and
    /// waits for the id, all within `timeout`. With a secret, the id is taken only with rank
    /// 0's proof of it over this connection; without one, the error names the address that
    /// failed. Rank 0's refusal (another version or workload, world size, a rank taken, no
    /// valid proof) comes back as this error.
    pub fn fetch_id(
        addr: &Endpoint,
        hello: &Hello,
        secret: Option<&Secret>,
        timeout: Duration,
    ) -> Result<Client> {
        if hello.rank == 0 {
            return Err(anyhow!(
                "rank 0 serves the rendezvous; it does not fetch the id"
            ));
        }
        let deadline = Instant::now() + timeout;
        let json = serde_json::to_vec(hello)?;
        let size = 1 + MAC_BYTES + NONCE_BYTES + json.len();
        if size > HANDSHAKE_MAX_BYTES as usize {
            return Err(usage(format!(
                "this rank's hello is {size} bytes, more than the {HANDSHAKE_MAX_BYTES} a hello \
                 may have: is its host name or the launcher's job id unusually long?"
            )));
        }
        let mine = auth::nonce()?;
        let (mut stream, server) = connect(addr, deadline, timeout)?;
        let _ = stream.set_nodelay(true);
        let call = Call {
            ep: addr,
            server,
            deadline,
            timeout,
        };
        let challenge = call.challenge(&mut stream)?;
        let t = Transcript {
            challenge: &challenge,
            answer: &mine,
            hello: &json,
        };
        let payload = auth::seal(&mine, &json, secret.map(|s| s.prove(&t, Claim::Hello)));
        write_frame(&mut stream, Kind::Hello, &payload, deadline)
            .map_err(|e| anyhow!("saying hello to rank 0 at {addr}: {e}"))?;
        let id = call.id(&mut stream, hello, secret, &t)?;
        Ok(Client { stream, server, id })
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
        match read_frame(&mut self.stream, deadline, MAX_FRAME_BYTES) {
            Ok((Kind::Ack, _)) => Ok(()),
            Ok((Kind::Abort, why)) => Err(anyhow!("{}", said(&why))),
            Ok((k, _)) => Err(anyhow!("rank 0 at {server} sent {k:?} instead of an ack")),
            Err(FrameError::Timeout) => Err(anyhow!(
                "rank 0 at {server} did not confirm the result within {}",
                secs(timeout)
            )),
            Err(e) => Err(anyhow!("waiting for rank 0 at {server} to confirm: {e}")),
        }
    }
}

/// Connects to rank 0 at `addr`, retrying with backoff while nobody listens, until `deadline`.
fn connect(
    addr: &Endpoint,
    deadline: Instant,
    timeout: Duration,
) -> Result<(TcpStream, SocketAddr)> {
    let mut backoff = Duration::from_millis(50);
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let last_err = match connect_once(addr, deadline) {
            Ok(c) => return Ok(c),
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
    }
}

impl Call<'_> {
    /// `node1:29500 (10.0.0.5:29500)`, or the address alone where the two read the same.
    fn at(&self) -> String {
        let ep = self.ep.to_string();
        let server = self.server.to_string();
        if ep == server {
            ep
        } else {
            format!("{ep} ({server})")
        }
    }

    /// Rank 0's nonce, from its challenge.
    fn challenge(&self, stream: &mut TcpStream) -> Result<[u8; NONCE_BYTES]> {
        let addr = self.ep;
        match read_frame(stream, self.deadline, HANDSHAKE_MAX_BYTES) {
            Ok((Kind::Challenge, p)) => auth::read_challenge(&p).map(|(n, _)| n).ok_or_else(|| {
                anyhow!("rank 0 at {addr} sent a challenge this build cannot read: start every rank with the same binary")
            }),
            Ok((k, _)) => Err(anyhow!(
                "rank 0 at {addr} sent {k:?} instead of its challenge"
            )),
            Err(FrameError::Timeout) => Err(anyhow!(
                "rank 0 at {addr} sent no challenge within {}: is rank 0 stuck before its \
                 rendezvous, or is the port held by another program or by a verifybench \
                 build older than this one?",
                secs(self.timeout)
            )),
            Err(FrameError::Closed) => Err(anyhow!(
                "rank 0 at {addr} closed the connection before its challenge: did rank 0 \
                 exit, or does another program (a torchrun agent? a verifybench build older \
                 than this one?) hold that port?"
            )),
            Err(e) => Err(anyhow!("waiting for the challenge of rank 0 at {addr}: {e}")),
        }
    }

    /// The id, once rank 0 proved `secret` over the transcript `t` (with a secret).
    fn id(
        &self,
        stream: &mut TcpStream,
        hello: &Hello,
        secret: Option<&Secret>,
        t: &Transcript<'_>,
    ) -> Result<[u8; ID_BYTES]> {
        let addr = self.ep;
        let bytes = match read_frame(stream, self.deadline, HANDSHAKE_MAX_BYTES) {
            Ok((Kind::Id, bytes)) => bytes,
            Ok((Kind::Refused, why)) => {
                return Err(usage(format!(
                    "rank 0 at {addr} refused {}: {}",
                    hello.who(),
                    said(&why)
                )))
            }
            Ok((Kind::Abort, why)) => {
                return Err(anyhow!(
                    "rank 0 at {addr} ended the rendezvous: {}",
                    said(&why)
                ))
            }
            Ok((k, _)) => return Err(anyhow!("rank 0 at {addr} sent {k:?} instead of the id")),
            Err(FrameError::Timeout) => {
                return Err(anyhow!(
                    "rank 0 at {addr} did not hand out the id within {} (it waits for all {} \
                     ranks): were all ranks started?",
                    secs(self.timeout),
                    hello.world_size
                ))
            }
            Err(FrameError::Closed) => {
                return Err(anyhow!(
                    "rank 0 at {addr} closed the connection before sending the id: did rank 0 \
                     exit, or does another program (a torchrun agent?) hold that port?"
                ))
            }
            Err(e) => return Err(anyhow!("waiting for the id from rank 0 at {addr}: {e}")),
        };
        let Some((id, proof)) = auth::read_id(&bytes) else {
            return Err(anyhow!(
                "rank 0 at {addr} sent a {}-byte id, not {ID_BYTES} ({} with its proof)",
                bytes.len(),
                ID_BYTES + MAC_BYTES
            ));
        };
        match (secret, proof) {
            (Some(s), Some(mac)) if s.verify(t, Claim::Id(&id), mac) => Ok(id),
            (Some(_), Some(_)) => Err(anyhow!(
                "rank 0 at {} sent the NCCL id with a proof that does not match this rank's \
                 token: whatever answers on that port does not hold this run's token, or \
                 replays a proof of another connection; this rank refuses the id",
                self.at()
            )),
            (Some(_), None) => Err(anyhow!(
                "rank 0 at {} sent the NCCL id without proving the rendezvous token, which this \
                 rank requires: whatever answers on that port does not hold this run's token; \
                 this rank refuses the id",
                self.at()
            )),
            (None, _) => Ok(id),
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
