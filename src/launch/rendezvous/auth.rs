//! Who may join a run: the shared secret of the rendezvous and the proofs each side gives of it.
//!
//! Rank 0 opens every connection with a fresh random nonce (a [`Kind::Challenge`] frame); a
//! rank that holds the run's secret answers with a fresh nonce of its own, its hello and
//! HMAC-SHA256(secret, "hello" | both nonces | hello). Rank 0 answers with the NCCL id and
//! HMAC-SHA256(secret, "id" | both nonces | hello | id), which the rank checks before it takes
//! the id. The secret itself never travels; each proof holds for its own connection only (the
//! other side's nonce is fresh on every connection), so a proof captured on one connection, or
//! in an earlier run, is worthless on the next; and the two proofs are told apart by their
//! domains, so neither can be reflected as the other. Without a secret the rendezvous is open:
//! any host that reaches the port may take a free rank, and whatever holds the port may hand
//! out an id, as with torchrun's store and NCCL's own bootstrap; the launcher's job id still
//! keeps two jobs' ranks apart, by accident only.
//!
//! [`Kind::Challenge`]: super::frame::Kind::Challenge

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use anyhow::Result;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::ID_BYTES;
use crate::error::usage;

/// The variable that holds the secret when no `--rendezvous-token-file` is given.
pub(crate) const TOKEN_ENV: &str = "VERIFYBENCH_RENDEZVOUS_TOKEN";
/// The flag that names a file holding the secret.
pub(crate) const TOKEN_FLAG: &str = "--rendezvous-token-file";
/// The shortest secret accepted: 16 bytes, so that a proof seen on the wire cannot be turned
/// back into the secret by trying short guesses.
pub(crate) const MIN_SECRET_BYTES: usize = 16;
/// Bytes of the nonce rank 0 sends on every connection.
pub(crate) const NONCE_BYTES: usize = 32;
/// Bytes of an HMAC-SHA256 proof.
pub(crate) const MAC_BYTES: usize = 32;
/// Prefixed to what each proof covers, so that it proves nothing in any other protocol, and
/// a rank's proof is never taken for rank 0's or the other way round.
const HELLO_DOMAIN: &[u8] = b"verifybench rendezvous hello v3\0";
const ID_DOMAIN: &[u8] = b"verifybench rendezvous id v3\0";

type HmacSha256 = Hmac<Sha256>;

/// The run's shared secret. Its bytes are never printed: `Debug` hides them, and nothing
/// formats them anywhere else.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes, hidden)", self.0.len())
    }
}

impl Secret {
    /// A secret of `bytes` (surrounding whitespace, such as a file's last newline, removed);
    /// `origin` names where it came from in the refusal of an empty or short one.
    pub fn new(bytes: &[u8], origin: &str) -> Result<Secret> {
        let t = bytes.trim_ascii();
        if t.is_empty() {
            return Err(usage(format!(
                "{origin} is empty: put a long random token there (e.g. `openssl rand -hex 32`), \
                 the same for every rank"
            )));
        }
        if t.len() < MIN_SECRET_BYTES {
            return Err(usage(format!(
                "{origin} holds a token of {} bytes: use at least {MIN_SECRET_BYTES} \
                 (e.g. `openssl rand -hex 32`)",
                t.len()
            )));
        }
        Ok(Secret(t.to_vec()))
    }

    /// The secret in the file at `path`, which only its owner may read or write (mode 0600 or
    /// stricter): a file that others can read is refused naming the file and `chmod 600`.
    pub(crate) fn from_file(path: &Path) -> Result<Secret> {
        use std::os::unix::fs::PermissionsExt;
        let shown = path.display();
        let meta = std::fs::metadata(path)
            .map_err(|e| usage(format!("{TOKEN_FLAG} '{shown}': cannot read it: {e}")))?;
        if !meta.is_file() {
            return Err(usage(format!(
                "{TOKEN_FLAG} '{shown}' is not a file: name the file that holds the token"
            )));
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(usage(format!(
                "{TOKEN_FLAG} '{shown}' has mode {mode:04o}, so other users can reach the token: \
                 run `chmod 600 '{shown}'` (the owner alone may read it)"
            )));
        }
        let bytes = crate::util::read::read(path, TOKEN_FLAG, crate::util::read::TOKEN)?;
        Secret::new(&bytes, &format!("{TOKEN_FLAG} '{shown}'"))
    }

    /// The run's secret: the file of `--rendezvous-token-file` if given, else
    /// `VERIFYBENCH_RENDEZVOUS_TOKEN` from `env`, else none (an open rendezvous). Returns the
    /// secret with the name of where it came from.
    pub(crate) fn resolve(
        file: Option<&Path>,
        env: &BTreeMap<String, String>,
    ) -> Result<Option<(Secret, String)>> {
        if let Some(p) = file {
            let mut from = format!("{TOKEN_FLAG} '{}'", p.display());
            if env.contains_key(TOKEN_ENV) {
                from.push_str(&format!(", which wins over {TOKEN_ENV}"));
            }
            return Ok(Some((Secret::from_file(p)?, from)));
        }
        match env.get(TOKEN_ENV) {
            Some(v) => Ok(Some((
                Secret::new(v.as_bytes(), &format!("{TOKEN_ENV} (from the environment)"))?,
                TOKEN_ENV.to_string(),
            ))),
            None => Ok(None),
        }
    }

    fn hmac(&self, t: &Transcript<'_>, what: Claim<'_>) -> HmacSha256 {
        let mut m = HmacSha256::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        let (domain, id): (&[u8], &[u8]) = match what {
            Claim::Hello => (HELLO_DOMAIN, &[]),
            Claim::Id(id) => (ID_DOMAIN, id),
        };
        m.update(domain);
        // each part with its length, so that no two transcripts read the same
        for part in [&t.challenge[..], &t.answer[..], t.hello, id] {
            m.update(&(part.len() as u32).to_be_bytes());
            m.update(part);
        }
        m
    }

    /// The proof of this secret for `what` on the connection of transcript `t`.
    pub(super) fn prove(&self, t: &Transcript<'_>, what: Claim<'_>) -> [u8; MAC_BYTES] {
        self.hmac(t, what).finalize().into_bytes().into()
    }

    /// Whether `mac` proves this secret for `what` on the connection of transcript `t`
    /// (compared in constant time).
    pub(super) fn verify(&self, t: &Transcript<'_>, what: Claim<'_>, mac: &[u8]) -> bool {
        self.hmac(t, what).verify_slice(mac).is_ok()
    }
}

/// What both proofs of one connection cover.
#[derive(Debug, Clone, Copy)]
pub(super) struct Transcript<'a> {
    /// Rank 0's nonce, fresh on every connection.
    pub(super) challenge: &'a [u8; NONCE_BYTES],
    /// The rank's nonce, fresh on every connection.
    pub(super) answer: &'a [u8; NONCE_BYTES],
    /// The rank's hello, its bytes as sent (its rank, world size, workload, job).
    pub(super) hello: &'a [u8],
}

/// What a proof vouches for.
#[derive(Debug, Clone, Copy)]
pub(super) enum Claim<'a> {
    /// The rank's hello: the rank holds the secret.
    Hello,
    /// The NCCL id rank 0 hands out: rank 0 holds the secret.
    Id(&'a [u8; ID_BYTES]),
}

/// A fresh nonce from the operating system's random source.
pub(super) fn nonce() -> Result<[u8; NONCE_BYTES]> {
    use rand::TryRngCore;
    let mut n = [0u8; NONCE_BYTES];
    rand::rngs::OsRng
        .try_fill_bytes(&mut n)
        .map_err(|e| anyhow::anyhow!("no random numbers from the operating system: {e}"))?;
    Ok(n)
}

/// What rank 0 sends first on every connection: the nonce, and whether it requires a proof.
pub(super) fn challenge(nonce: &[u8; NONCE_BYTES], required: bool) -> Vec<u8> {
    let mut v = nonce.to_vec();
    v.push(u8::from(required));
    v
}

/// The nonce and the requirement of a challenge frame's payload.
pub(super) fn read_challenge(p: &[u8]) -> Option<([u8; NONCE_BYTES], bool)> {
    if p.len() != NONCE_BYTES + 1 || p[NONCE_BYTES] > 1 {
        return None;
    }
    let mut n = [0u8; NONCE_BYTES];
    n.copy_from_slice(&p[..NONCE_BYTES]);
    Some((n, p[NONCE_BYTES] == 1))
}

/// A hello frame's payload: the proof's length (0 or [`MAC_BYTES`]), the proof, the rank's
/// nonce, the hello.
pub(super) fn seal(
    nonce: &[u8; NONCE_BYTES],
    json: &[u8],
    proof: Option<[u8; MAC_BYTES]>,
) -> Vec<u8> {
    let mut v = Vec::with_capacity(1 + MAC_BYTES + NONCE_BYTES + json.len());
    match proof {
        Some(m) => {
            v.push(MAC_BYTES as u8);
            v.extend_from_slice(&m);
        }
        None => v.push(0),
    }
    v.extend_from_slice(nonce);
    v.extend_from_slice(json);
    v
}

/// The parts of a hello frame's payload.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Sealed<'a> {
    pub(super) proof: Option<&'a [u8]>,
    pub(super) nonce: [u8; NONCE_BYTES],
    pub(super) hello: &'a [u8],
}

/// The proof (if any), the rank's nonce and the hello's bytes of a hello frame's payload;
/// `None` if it is not laid out as [`seal`] lays it.
pub(super) fn unseal(p: &[u8]) -> Option<Sealed<'_>> {
    let (proof, rest) = match *p.first()? {
        0 => (None, &p[1..]),
        n if n as usize == MAC_BYTES && p.len() > MAC_BYTES => {
            (Some(&p[1..=MAC_BYTES]), &p[1 + MAC_BYTES..])
        }
        _ => return None,
    };
    if rest.len() <= NONCE_BYTES {
        return None;
    }
    let (nonce, hello) = rest.split_at(NONCE_BYTES);
    Some(Sealed {
        proof,
        nonce: nonce.try_into().ok()?,
        hello,
    })
}

/// An id frame's payload: the id, then rank 0's proof of the secret (none in an open
/// rendezvous).
pub(super) fn id_payload(id: &[u8; ID_BYTES], proof: Option<[u8; MAC_BYTES]>) -> Vec<u8> {
    let mut v = id.to_vec();
    v.extend_from_slice(proof.as_ref().map_or(&[][..], |m| &m[..]));
    v
}

/// The id and the proof (if any) of an id frame's payload; `None` if it has another length.
pub(super) fn read_id(p: &[u8]) -> Option<([u8; ID_BYTES], Option<&[u8]>)> {
    let id: [u8; ID_BYTES] = p.get(..ID_BYTES)?.try_into().ok()?;
    match p.len() - ID_BYTES {
        0 => Some((id, None)),
        MAC_BYTES => Some((id, Some(&p[ID_BYTES..]))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::exit_code;

    fn secret() -> Secret {
        Secret::new(b"0123456789abcdef0123\n", "test").unwrap()
    }

    #[test]
    fn a_proof_holds_for_its_connection_and_its_side_only() {
        let s = secret();
        let (n1, n2, r1, r2) = (
            nonce().unwrap(),
            nonce().unwrap(),
            nonce().unwrap(),
            nonce().unwrap(),
        );
        assert_ne!(n1, n2, "two nonces of 256 random bits differ");
        let t = Transcript {
            challenge: &n1,
            answer: &r1,
            hello: b"{\"rank\":1}",
        };
        let m = s.prove(&t, Claim::Hello);
        assert!(s.verify(&t, Claim::Hello, &m));
        // another connection's nonce (either side's), another hello, another secret, a cut
        // proof: refused
        assert!(!s.verify(
            &Transcript {
                challenge: &n2,
                ..t
            },
            Claim::Hello,
            &m
        ));
        assert!(!s.verify(&Transcript { answer: &r2, ..t }, Claim::Hello, &m));
        assert!(!s.verify(
            &Transcript {
                hello: b"{\"rank\":2}",
                ..t
            },
            Claim::Hello,
            &m
        ));
        let other = Secret::new(b"0123456789abcdeX0123", "test").unwrap();
        assert!(!other.verify(&t, Claim::Hello, &m));
        assert!(!s.verify(&t, Claim::Hello, &m[..16]));
        // rank 0's proof covers the id as well, and is not the rank's proof reflected
        let (id, id2) = ([7u8; ID_BYTES], [8u8; ID_BYTES]);
        let back = s.prove(&t, Claim::Id(&id));
        assert!(s.verify(&t, Claim::Id(&id), &back));
        assert!(!s.verify(&t, Claim::Id(&id2), &back));
        assert!(!s.verify(&t, Claim::Id(&id), &m));
        assert!(!s.verify(&t, Claim::Hello, &back));
        assert!(!s.verify(&Transcript { answer: &r2, ..t }, Claim::Id(&id), &back));
        // the trailing newline of a file is not part of the secret
        assert_eq!(s, Secret::new(b"0123456789abcdef0123", "test").unwrap());
    }

    #[test]
    fn the_proofs_are_hmac_sha256_of_the_transcript_with_lengths() {
        // The proof recomputed by hand through the primitive: domain, then each part with its
        // length as 4 big-endian bytes.
        let s = secret();
        let (n, r) = ([1u8; NONCE_BYTES], [2u8; NONCE_BYTES]);
        let t = Transcript {
            challenge: &n,
            answer: &r,
            hello: b"{}",
        };
        let mut m = HmacSha256::new_from_slice(b"0123456789abcdef0123").unwrap();
        m.update(b"verifybench rendezvous hello v3\0");
        m.update(&[0, 0, 0, 32]);
        m.update(&n);
        m.update(&[0, 0, 0, 32]);
        m.update(&r);
        m.update(&[0, 0, 0, 2]);
        m.update(b"{}");
        m.update(&[0, 0, 0, 0]);
        let want: [u8; MAC_BYTES] = m.finalize().into_bytes().into();
        assert_eq!(s.prove(&t, Claim::Hello), want);
    }

    #[test]
    fn the_proof_is_rfc_4231_hmac_sha256() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?"; the DOMAIN
        // and nonce are prefixed here, so check the primitive itself through the same crate.
        let mut m = HmacSha256::new_from_slice(b"Jefe").unwrap();
        m.update(b"what do ya want for nothing?");
        let hex: String = m
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn frames_of_the_handshake_round_trip() {
        let n = nonce().unwrap();
        assert_eq!(read_challenge(&challenge(&n, true)), Some((n, true)));
        assert_eq!(read_challenge(&challenge(&n, false)), Some((n, false)));
        assert_eq!(read_challenge(&n), None);
        let sealed = seal(&n, b"{}", Some([7; MAC_BYTES]));
        assert_eq!(sealed.len(), 1 + 32 + 32 + 2);
        assert_eq!(
            unseal(&sealed),
            Some(Sealed {
                proof: Some(&[7u8; MAC_BYTES][..]),
                nonce: n,
                hello: &b"{}"[..]
            })
        );
        let open = seal(&n, b"{}", None);
        assert_eq!(open.len(), 1 + 32 + 2);
        assert_eq!(
            unseal(&open),
            Some(Sealed {
                proof: None,
                nonce: n,
                hello: &b"{}"[..]
            })
        );
        // a hello of protocol 2 (no nonce of the rank's own), bare JSON, nothing: not ours
        assert_eq!(unseal(&[&[0u8][..], b"{}"].concat()), None);
        assert_eq!(unseal(b"{\"version\":1}"), None);
        assert_eq!(unseal(&[]), None);
        let id = [9u8; ID_BYTES];
        assert_eq!(read_id(&id_payload(&id, None)), Some((id, None)));
        assert_eq!(
            read_id(&id_payload(&id, Some([3; MAC_BYTES]))),
            Some((id, Some(&[3u8; MAC_BYTES][..])))
        );
        assert_eq!(read_id(&id[..100]), None);
        assert_eq!(read_id(&[0u8; ID_BYTES + 5]), None);
    }

    #[test]
    fn secrets_come_from_the_file_first_then_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("token");
        std::fs::write(&f, "from-the-file-0123456789\n").unwrap();
        set_mode(&f, 0o600);
        let env: BTreeMap<String, String> = [(
            TOKEN_ENV.to_string(),
            "from-the-environment-0123".to_string(),
        )]
        .into();
        let (s, from) = Secret::resolve(Some(&f), &env).unwrap().unwrap();
        assert_eq!(s, Secret::new(b"from-the-file-0123456789", "t").unwrap());
        assert!(
            from.ends_with(&format!("which wins over {TOKEN_ENV}")),
            "{from}"
        );
        let (s, from) = Secret::resolve(None, &env).unwrap().unwrap();
        assert_eq!(s, Secret::new(b"from-the-environment-0123", "t").unwrap());
        assert_eq!(from, TOKEN_ENV);
        assert!(Secret::resolve(None, &BTreeMap::new()).unwrap().is_none());
        // the secret's bytes never show in its Debug form
        let dbg = format!("{s:?}");
        assert!(!dbg.contains("environment"), "{dbg}");
        assert_eq!(dbg, "Secret(25 bytes, hidden)");
    }

    fn set_mode(p: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_file_others_can_reach_an_empty_or_short_token_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("token");
        std::fs::write(&f, "a-long-enough-token-0123\n").unwrap();
        let shown = f.display().to_string();
        for (mode, ok) in [
            (0o600, true),
            (0o400, true),
            (0o640, false),
            (0o604, false),
            (0o660, false),
        ] {
            set_mode(&f, mode);
            match Secret::from_file(&f) {
                Ok(_) => assert!(ok, "{mode:o} was accepted"),
                Err(e) => {
                    assert!(!ok, "{mode:o}: {e}");
                    assert_eq!(exit_code(&e), 2);
                    assert_eq!(
                        e.to_string(),
                        format!(
                            "{TOKEN_FLAG} '{shown}' has mode {mode:04o}, so other users can reach \
                             the token: run `chmod 600 '{shown}'` (the owner alone may read it)"
                        )
                    );
                }
            }
        }
        set_mode(&f, 0o600);
        std::fs::write(&f, "short\n").unwrap();
        let e = Secret::from_file(&f).unwrap_err();
        assert_eq!(exit_code(&e), 2);
        assert!(
            e.to_string()
                .contains("a token of 5 bytes: use at least 16"),
            "{e}"
        );
        assert!(
            !e.to_string().contains("short"),
            "the token is not shown: {e}"
        );
        std::fs::write(&f, "\n").unwrap();
        assert!(Secret::from_file(&f)
            .unwrap_err()
            .to_string()
            .contains("is empty"));
        let e = Secret::from_file(&dir.path().join("missing")).unwrap_err();
        assert_eq!(exit_code(&e), 2);
        assert!(e.to_string().contains("cannot read it"), "{e}");
        let env: BTreeMap<String, String> = [(TOKEN_ENV.to_string(), String::new())].into();
        let e = Secret::resolve(None, &env).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("VERIFYBENCH_RENDEZVOUS_TOKEN (from the environment) is empty"),
            "{e}"
        );
    }
}
