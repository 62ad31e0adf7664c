//! A rank > 0's side of the rendezvous: its connection to rank 0, kept open for the results.

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};

use super::auth::{self, Secret};
use super::frame::*;
use super::{secs, Hello, ID_BYTES};
use crate::error::usage;
use crate::request::Endpoint;

/// A rank > 0's side: its connection to rank 0, kept open for the results.
#[derive(Debug)]
pub struct Client {
    stream: TcpStream,
    server: SocketAddr,
    id: [u8; ID_BYTES],
}

impl Client {
    /// Connects to rank 0 at `addr`, retrying with backoff while nobody listens, answers its
    /// challenge with the hello and the proof of `secret` (none: an open rendezvous), and
    /// waits for the id, all within `timeout`. Rank 0's refusal (another version or workload,
    /// world size, a rank taken, no valid proof) comes back as this error.
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
        let nonce = match read_frame(&mut stream, deadline) {
            Ok((Kind::Challenge, p)) => auth::read_challenge(&p).map(|(n, _)| n).ok_or_else(|| {
                anyhow!("rank 0 at {addr} sent a challenge this build cannot read: start every rank with the same binary")
            })?,
            Ok((k, _)) => {
                return Err(anyhow!(
                    "rank 0 at {addr} sent {k:?} instead of its challenge"
                ))
            }
            Err(FrameError::Timeout) => {
                return Err(anyhow!(
                    "rank 0 at {addr} sent no challenge within {}: is rank 0 stuck before its \
                     rendezvous, or is the port held by another program or by a verifybench \
                     build older than this one?",
                    secs(timeout)
                ))
            }
            Err(FrameError::Closed) => {
                return Err(anyhow!(
                    "rank 0 at {addr} closed the connection before its challenge: did rank 0 \
                     exit, or does another program (a torchrun agent? a verifybench build older \
                     than this one?) hold that port?"
                ))
            }
            Err(e) => return Err(anyhow!("waiting for the challenge of rank 0 at {addr}: {e}")),
        };
        let payload = auth::seal(&payload, secret.map(|s| s.prove(&nonce, &payload)));
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
