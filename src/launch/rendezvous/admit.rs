//! Rank 0's lobby: the connections accepted and not yet proven, each read without blocking and
//! against its own deadline, so that a silent or slow connection never delays the ranks that
//! speak.
//!
//! At most [`MAX_PENDING`] connections wait for their hello at once. When another one comes,
//! the one that has waited longest is dropped to make room if it has waited [`EVICT_AFTER`]
//! (far longer than a rank takes to answer its challenge); otherwise the newcomer waits in the
//! listen queue until a slot frees. Before its proof a hello is at most
//! [`HANDSHAKE_MAX_BYTES`]: a bigger one is refused from its header, unread, and its
//! connection named by its address alone. What a hello claims is read only to name it in a
//! refusal, escaped and cut; nothing of it is kept unless its proof holds.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::Result;

use super::auth::{self, Claim, Secret, Transcript, NONCE_BYTES};
use super::frame::*;
use super::{secs, shown, Hello, Tally};

/// How long an accepted connection may take to say hello before it is dropped as a stranger.
pub(super) const HELLO_WAIT: Duration = Duration::from_secs(10);
/// The most connections that wait for their hello at once.
pub(super) const MAX_PENDING: usize = 64;
/// How long the oldest waiting connection keeps its slot against newcomers.
pub(super) const EVICT_AFTER: Duration = Duration::from_millis(250);
/// How many connections that never said hello are named in a timeout (the rest are counted).
const STRANGERS_NAMED: usize = 8;

/// A connection whose hello proved the secret (any well-formed hello, in an open rendezvous)
/// and runs in the same launcher job: a rank, whose fit with the others is checked next.
#[derive(Debug)]
pub(super) struct Admitted {
    pub(super) hello: Hello,
    pub(super) addr: SocketAddr,
    /// Blocking again, for the id and the results.
    pub(super) stream: TcpStream,
    /// Rank 0's nonce, the rank's nonce and the hello's bytes: what rank 0's proof covers.
    pub(super) challenge: [u8; NONCE_BYTES],
    pub(super) answer: [u8; NONCE_BYTES],
    pub(super) bytes: Vec<u8>,
}

impl Admitted {
    /// The id frame's payload for this rank: the id, and rank 0's proof of `secret` over this
    /// connection's transcript and the id.
    pub(super) fn id_payload(
        &self,
        id: &[u8; super::ID_BYTES],
        secret: Option<&Secret>,
    ) -> Vec<u8> {
        let t = Transcript {
            challenge: &self.challenge,
            answer: &self.answer,
            hello: &self.bytes,
        };
        auth::id_payload(id, secret.map(|s| s.prove(&t, Claim::Id(id))))
    }
}

/// What came of a connection that finished its hello.
#[derive(Debug)]
pub(super) enum Outcome {
    Joined(Box<Admitted>),
    /// Refused or dropped (it was told, and closed): the line that names it, from where and why.
    Refused(String),
    /// A rank that proved the secret sent a hello this build cannot read: the run cannot go on
    /// (it was told).
    Fatal(String),
}

/// A connection waiting for its hello.
#[derive(Debug)]
struct Pending {
    stream: TcpStream,
    addr: SocketAddr,
    nonce: [u8; NONCE_BYTES],
    since: Instant,
    /// Bytes of the challenge not yet written.
    out: Vec<u8>,
    hello: Incoming,
}

/// What one look at a waiting connection found.
enum Step {
    Waiting,
    Hello(Vec<u8>),
    /// Never said a hello (closed, timed out): named in a timeout, not printed.
    Gone(String),
    /// Sent something that is not a hello: refused and named.
    Bad(String),
}

/// The connections accepted and not yet proven.
#[derive(Debug)]
pub(super) struct Lobby {
    pending: VecDeque<Pending>,
    secret: Option<Secret>,
    job: Option<String>,
    /// Connections that never said hello.
    pub(super) strangers: Tally,
    /// The first accept that failed (a full file table), for the timeout's message.
    pub(super) accept_error: Option<String>,
}

impl Lobby {
    pub(super) fn new(secret: Option<Secret>, job: Option<String>) -> Lobby {
        Lobby {
            pending: VecDeque::new(),
            secret,
            job,
            strangers: Tally::new(STRANGERS_NAMED),
            accept_error: None,
        }
    }

    /// Accepts what waits on `listener` (non-blocking) while there is room, and opens each new
    /// connection with its challenge. Returns whether any came.
    pub(super) fn accept(&mut self, listener: &TcpListener) -> Result<bool> {
        let mut any = false;
        for _ in 0..MAX_PENDING {
            let full = self.pending.len() >= MAX_PENDING;
            if full && self.pending[0].since.elapsed() < EVICT_AFTER {
                break;
            }
            let (stream, addr) = match listener.accept() {
                Ok(c) => c,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                    ) =>
                {
                    continue
                }
                Err(e) => {
                    self.accept_error.get_or_insert(e.to_string());
                    break;
                }
            };
            any = true;
            if full {
                if let Some(old) = self.pending.pop_front() {
                    self.strangers.add(format!(
                        "{} (dropped unproven after {:.1} s: {MAX_PENDING} connections were \
                         waiting and it had waited longest)",
                        old.addr,
                        old.since.elapsed().as_secs_f64()
                    ));
                }
            }
            stream.set_nonblocking(true)?;
            let _ = stream.set_nodelay(true);
            let nonce = auth::nonce()?;
            let challenge = auth::challenge(&nonce, self.secret.is_some());
            self.pending.push_back(Pending {
                stream,
                addr,
                nonce,
                since: Instant::now(),
                out: encode(Kind::Challenge, &challenge),
                hello: Incoming::new(Kind::Hello, HANDSHAKE_MAX_BYTES),
            });
        }
        Ok(any)
    }

    /// Looks once at every waiting connection (none blocks), by the rendezvous' own
    /// `deadline` as well as each one's. Returns whether anything happened, and what came of
    /// the connections that finished.
    pub(super) fn poll(&mut self, deadline: Instant) -> (bool, Vec<Outcome>) {
        let mut busy = false;
        let mut done = Vec::new();
        let mut i = 0;
        while i < self.pending.len() {
            let p = &mut self.pending[i];
            let by = deadline.min(p.since + HELLO_WAIT);
            let step = p.step(by);
            if matches!(step, Step::Waiting) {
                i += 1;
                continue;
            }
            busy = true;
            let Some(mut p) = self.pending.remove(i) else {
                break;
            };
            match step {
                Step::Waiting => {}
                Step::Gone(why) => {
                    self.strangers.add(format!("{} ({why})", p.addr));
                }
                Step::Bad(why) => {
                    let line = format!("dropped a connection from {}: {why}", p.addr);
                    send_quietly(&mut p.stream, Kind::Refused, &line);
                    done.push(Outcome::Refused(line));
                }
                Step::Hello(payload) => done.push(self.judge(p, &payload)),
            }
        }
        (busy, done)
    }

    /// Counts the connections still waiting as strangers (the rendezvous ended) and closes them.
    pub(super) fn close(&mut self) {
        for p in self.pending.drain(..) {
            self.strangers.add(format!("{} (no hello yet)", p.addr));
        }
    }

    /// Checks the hello of `p`: its layout, the proof of the secret, the launcher's job.
    fn judge(&self, mut p: Pending, payload: &[u8]) -> Outcome {
        let addr = p.addr;
        let mut refuse = |line: String| {
            send_quietly(&mut p.stream, Kind::Refused, &line);
            Outcome::Refused(line)
        };
        let Some(sealed) = auth::unseal(payload) else {
            return refuse(format!(
                "refused a connection from {addr}: its hello is not laid out as this build's \
                 (start every rank with the same binary)"
            ));
        };
        // The claim is read before the proof is checked, to name it in a refusal only.
        let claim = serde_json::from_slice::<Hello>(sealed.hello);
        let who = match &claim {
            Ok(h) => format!(
                "a connection from {addr} claiming {} (pid {})",
                h.who(),
                h.pid
            ),
            Err(_) => format!("a connection from {addr}"),
        };
        let t = Transcript {
            challenge: &p.nonce,
            answer: &sealed.nonce,
            hello: sealed.hello,
        };
        match (&self.secret, sealed.proof) {
            (Some(s), Some(mac)) if s.verify(&t, Claim::Hello, mac) => {}
            (Some(_), Some(_)) => {
                return refuse(format!(
                    "refused {who}: its proof does not match this run's token (a wrong token, \
                     or a hello replayed from another connection)"
                ))
            }
            (Some(_), None) => {
                return refuse(format!(
                    "refused {who}: it gave no token, and this run requires one \
                     (the same {} or {} on every rank)",
                    auth::TOKEN_ENV,
                    auth::TOKEN_FLAG
                ))
            }
            (None, Some(_)) => {
                return refuse(format!(
                    "refused {who}: it proves a rendezvous token, but rank 0 has none: \
                     give every rank the same token, or none"
                ))
            }
            (None, None) => {}
        }
        let hello = match claim {
            Ok(h) => h,
            // With a secret, the proof says a rank of this run sent it: the run cannot go on.
            Err(e) if self.secret.is_some() => {
                let msg = format!(
                    "the rank at {addr} sent a hello this build cannot read ({}): \
                     start every rank with the same binary",
                    shown(&e.to_string())
                );
                send_quietly(&mut p.stream, Kind::Refused, &msg);
                return Outcome::Fatal(msg);
            }
            // Open: anyone may have sent it, and the run goes on without it.
            Err(e) => {
                return refuse(format!(
                    "dropped a connection from {addr}: its hello is not one this build can read \
                     ({}): a rank of another build, or no rank at all",
                    shown(&e.to_string())
                ))
            }
        };
        if hello.job != self.job {
            let job = |j: &Option<String>| match j {
                Some(j) => format!("launcher job {}", shown(j)),
                None => "no launcher job".to_string(),
            };
            return refuse(format!(
                "refused {who}: it runs in {}, rank 0 in {}: another job's rank, or a rank \
                 started outside the launcher",
                job(&hello.job),
                job(&self.job)
            ));
        }
        if let Err(e) = p.stream.set_nonblocking(false) {
            return Outcome::Refused(format!("dropped {who}: {e}"));
        }
        Outcome::Joined(Box::new(Admitted {
            hello,
            addr,
            stream: p.stream,
            challenge: p.nonce,
            answer: sealed.nonce,
            bytes: sealed.hello.to_vec(),
        }))
    }
}

impl Pending {
    /// Writes what is left of the challenge and reads what has come of the hello, without
    /// blocking; past `by`, the connection is given up.
    fn step(&mut self, by: Instant) -> Step {
        while !self.out.is_empty() {
            match self.stream.write(&self.out) {
                Ok(0) => return Step::Gone("closed before its challenge".into()),
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Step::Gone(io_err(e).to_string()),
            }
        }
        match self.hello.poll(&mut self.stream) {
            Ok(Some(payload)) => Step::Hello(payload),
            Ok(None) if Instant::now() >= by => Step::Gone(format!(
                "no hello within {}",
                secs(by.saturating_duration_since(self.since))
            )),
            Ok(None) => Step::Waiting,
            Err(FrameError::Closed) => Step::Gone("closed before its hello".into()),
            Err(e @ (FrameError::Timeout | FrameError::Io(_))) => Step::Gone(e.to_string()),
            Err(e) => Step::Bad(bad_frame(&e)),
        }
    }
}

/// Why a frame that came where a hello was due is refused, as rank 0 tells it.
fn bad_frame(e: &FrameError) -> String {
    match e {
        FrameError::NotOurs(m) => format!(
            "it is no verifybench rank (it sent \"{}\")",
            shown(&String::from_utf8_lossy(m))
        ),
        FrameError::Protocol(p) => format!(
            "it speaks rendezvous protocol {p}, this build {PROTOCOL}: start every rank with the \
             same binary"
        ),
        FrameError::TooLarge { len, max } => format!(
            "it announced a {len}-byte hello, past the {max}-byte limit of a hello before its \
             proof (not read)"
        ),
        FrameError::BadKind(k) => format!("it sent a message of unknown kind {k}"),
        FrameError::Unexpected(k) => format!("it sent {k:?} where a hello was due"),
        other => other.to_string(),
    }
}
