//! The frames of the rendezvous protocol (see the parent module): the fixed header, the
//! message kinds, and reads and writes that each keep a deadline.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

pub(super) const MAGIC: [u8; 4] = *b"VBRZ";
/// Version of the frame layout and message kinds (not of the crate). 2: rank 0 opens every
/// connection with a challenge, and the hello carries the proof of the run's secret. 3: the
/// hello carries the rank's own nonce, and rank 0 proves the secret with the id.
pub(super) const PROTOCOL: u16 = 3;
pub(super) const HEADER_BYTES: usize = 11;
/// Largest frame accepted after the handshake: a result of per-rank timings is far smaller;
/// anything bigger is not our peer.
pub(super) const MAX_FRAME_BYTES: u32 = 64 << 20;
/// Largest frame of the handshake, read before the other side has proved anything: rank 0's
/// challenge, a hello (a host name and a launcher's job id are far shorter), the id with its
/// proof, a refusal. A bigger one is not read at all.
pub(super) const HANDSHAKE_MAX_BYTES: u32 = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Hello = 1,
    Id = 2,
    Refused = 3,
    Abort = 4,
    Result = 5,
    Failed = 6,
    Ack = 7,
    Challenge = 8,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        use Kind::*;
        [Hello, Id, Refused, Abort, Result, Failed, Ack, Challenge]
            .into_iter()
            .find(|k| *k as u8 == b)
    }
}

/// Why a frame could not be read or written.
#[derive(Debug)]
pub(super) enum FrameError {
    Timeout,
    Closed,
    Io(io::Error),
    NotOurs([u8; 4]),
    Protocol(u16),
    BadKind(u8),
    /// A known kind where another was due (a result instead of a hello).
    Unexpected(Kind),
    TooLarge {
        len: u32,
        max: u32,
    },
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
            FrameError::Unexpected(k) => write!(f, "sent {k:?} where a hello was due"),
            FrameError::TooLarge { len, max } if *max == MAX_FRAME_BYTES => {
                write!(f, "a {len}-byte message is larger than any rendezvous message")
            }
            FrameError::TooLarge { len, max } => write!(
                f,
                "a {len}-byte message in the handshake, past its limit of {max} bytes (not read)"
            ),
        }
    }
}

pub(super) fn io_err(e: io::Error) -> FrameError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => FrameError::Timeout,
        io::ErrorKind::UnexpectedEof
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe => FrameError::Closed,
        _ => FrameError::Io(e),
    }
}

pub(super) fn remaining(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
}

pub(super) fn read_exact_by(
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

pub(super) fn write_all_by(
    s: &mut TcpStream,
    mut buf: &[u8],
    deadline: Instant,
) -> Result<(), FrameError> {
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

pub(super) fn encode(kind: Kind, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_BYTES + payload.len());
    v.extend_from_slice(&MAGIC);
    v.extend_from_slice(&PROTOCOL.to_be_bytes());
    v.push(kind as u8);
    v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    v.extend_from_slice(payload);
    v
}

pub(super) fn write_frame(
    s: &mut TcpStream,
    kind: Kind,
    payload: &[u8],
    deadline: Instant,
) -> Result<(), FrameError> {
    if payload.len() > MAX_FRAME_BYTES as usize {
        return Err(FrameError::TooLarge {
            len: payload.len().try_into().unwrap_or(u32::MAX),
            max: MAX_FRAME_BYTES,
        });
    }
    write_all_by(s, &encode(kind, payload), deadline)
}

/// The kind and payload length a frame's header announces, if it is one of ours of at most
/// `max` bytes.
pub(super) fn parse_header(h: &[u8], max: u32) -> Result<(Kind, u32), FrameError> {
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
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    Ok((kind, len))
}

/// Reads one frame of at most `max` bytes of payload by `deadline`; a bigger one is refused
/// from its header, before any of its payload is read.
pub(super) fn read_frame(
    s: &mut TcpStream,
    deadline: Instant,
    max: u32,
) -> Result<(Kind, Vec<u8>), FrameError> {
    let mut h = [0u8; HEADER_BYTES];
    read_exact_by(s, &mut h, deadline)?;
    let (kind, len) = parse_header(&h, max)?;
    let mut payload = vec![0u8; len as usize];
    read_exact_by(s, &mut payload, deadline)?;
    Ok((kind, payload))
}

/// A frame on its way in through a non-blocking socket: its header, then its payload, never a
/// byte past the frame (what follows stays in the socket for whoever reads next).
#[derive(Debug)]
pub(super) struct Incoming {
    /// Kind and length, once the header is in.
    head: Option<(Kind, usize)>,
    buf: Vec<u8>,
    /// The only kind accepted, and the largest payload.
    want: Kind,
    max: u32,
}

impl Incoming {
    pub(super) fn new(want: Kind, max: u32) -> Incoming {
        Incoming {
            head: None,
            buf: Vec::with_capacity(HEADER_BYTES),
            want,
            max,
        }
    }

    /// Reads what has come: the payload once the whole frame is in, `None` while it is not.
    /// A header of another kind, or announcing more than the limit, is an error at once.
    pub(super) fn poll(&mut self, s: &mut TcpStream) -> Result<Option<Vec<u8>>, FrameError> {
        loop {
            let need = match self.head {
                None => HEADER_BYTES,
                Some((_, len)) => HEADER_BYTES + len,
            };
            if self.buf.len() == need {
                if self.head.is_some() {
                    return Ok(Some(self.buf.split_off(HEADER_BYTES)));
                }
                let (kind, len) = parse_header(&self.buf, self.max)?;
                if kind != self.want {
                    return Err(FrameError::Unexpected(kind));
                }
                self.head = Some((kind, len as usize));
                self.buf.reserve_exact(len as usize);
                continue;
            }
            let mut chunk = [0u8; 1024];
            let n = (need - self.buf.len()).min(chunk.len());
            match s.read(&mut chunk[..n]) {
                Ok(0) => return Err(FrameError::Closed),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) => return Err(io_err(e)),
            }
        }
    }
}

/// Best effort: tell a peer why the rendezvous ended or refused it, without waiting long for it
/// (on a non-blocking socket: what the socket takes at once). The message is cut to what a
/// handshake frame may hold, so that a rank still in its handshake reads it whole.
pub(super) fn send_quietly(s: &mut TcpStream, kind: Kind, msg: &str) {
    let max = HANDSHAKE_MAX_BYTES as usize;
    let mut cut = msg.len().min(max);
    if cut < msg.len() {
        cut = max - 4;
        while !msg.is_char_boundary(cut) {
            cut -= 1;
        }
    }
    let mut bytes = msg.as_bytes()[..cut].to_vec();
    if cut < msg.len() {
        bytes.extend_from_slice(b" ...");
    }
    let _ = write_frame(s, kind, &bytes, Instant::now() + Duration::from_secs(2));
}
