//! Who may join a run: the shared secret of the rendezvous and the proof a rank gives of it.
//!
//! Rank 0 opens every connection with a fresh random nonce (a [`Kind::Challenge`] frame); a
//! rank that holds the run's secret answers with its hello and HMAC-SHA256(secret, domain |
//! nonce | hello). The secret itself never travels, and a hello captured on one connection is
//! worthless on the next (its nonce is another). Without a secret the rendezvous is open: any
//! host that reaches the port may take a free rank, as with torchrun's store and NCCL's own
//! bootstrap; the launcher's job id still keeps two jobs' ranks apart, by accident only.
//!
//! [`Kind::Challenge`]: super::frame::Kind::Challenge

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use anyhow::Result;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::error::usage;

/// The variable that holds the secret when no `--rendezvous-token-file` is given.
pub const TOKEN_ENV: &str = "VERIFYBENCH_RENDEZVOUS_TOKEN";
/// The flag that names a file holding the secret.
pub const TOKEN_FLAG: &str = "--rendezvous-token-file";
/// The shortest secret accepted: 16 bytes, so that a proof seen on the wire cannot be turned
/// back into the secret by trying short guesses.
pub const MIN_SECRET_BYTES: usize = 16;
/// Bytes of the nonce rank 0 sends on every connection.
pub const NONCE_BYTES: usize = 32;
/// Bytes of an HMAC-SHA256 proof.
pub const MAC_BYTES: usize = 32;
/// Prefixed to what the proof covers, so that it proves nothing in any other protocol.
const DOMAIN: &[u8] = b"verifybench rendezvous hello v2\0";

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
    pub fn from_file(path: &Path) -> Result<Secret> {
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
        let bytes = std::fs::read(path)
            .map_err(|e| usage(format!("{TOKEN_FLAG} '{shown}': cannot read it: {e}")))?;
        Secret::new(&bytes, &format!("{TOKEN_FLAG} '{shown}'"))
    }

    /// The run's secret: the file of `--rendezvous-token-file` if given, else
    /// `VERIFYBENCH_RENDEZVOUS_TOKEN` from `env`, else none (an open rendezvous). Returns the
    /// secret with the name of where it came from.
    pub fn resolve(
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

    fn hmac(&self, nonce: &[u8; NONCE_BYTES], hello: &[u8]) -> HmacSha256 {
        let mut m = HmacSha256::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        m.update(DOMAIN);
        m.update(nonce);
        m.update(hello);
        m
    }

    /// The proof of this secret for `hello` (its bytes as sent) on the connection of `nonce`.
    pub(super) fn prove(&self, nonce: &[u8; NONCE_BYTES], hello: &[u8]) -> [u8; MAC_BYTES] {
        self.hmac(nonce, hello).finalize().into_bytes().into()
    }

    /// Whether `mac` proves this secret for `hello` on the connection of `nonce` (compared in
    /// constant time).
    pub(super) fn verify(&self, nonce: &[u8; NONCE_BYTES], hello: &[u8], mac: &[u8]) -> bool {
        self.hmac(nonce, hello).verify_slice(mac).is_ok()
    }
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

/// A hello frame's payload: the proof's length (0 or [`MAC_BYTES`]), the proof, the hello.
pub(super) fn seal(json: &[u8], proof: Option<[u8; MAC_BYTES]>) -> Vec<u8> {
    let mut v = Vec::with_capacity(1 + MAC_BYTES + json.len());
    match proof {
        Some(m) => {
            v.push(MAC_BYTES as u8);
            v.extend_from_slice(&m);
        }
        None => v.push(0),
    }
    v.extend_from_slice(json);
    v
}

/// The proof (if any) and the hello's bytes of a hello frame's payload; `None` if it is not
/// laid out as [`seal`] lays it.
pub(super) fn unseal(p: &[u8]) -> Option<(Option<&[u8]>, &[u8])> {
    match p.first()? {
        0 => Some((None, &p[1..])),
        &n if n as usize == MAC_BYTES && p.len() > MAC_BYTES => {
            Some((Some(&p[1..=MAC_BYTES]), &p[1 + MAC_BYTES..]))
        }
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
    fn a_proof_holds_for_its_nonce_and_hello_only() {
        let s = secret();
        let (n1, n2) = (nonce().unwrap(), nonce().unwrap());
        assert_ne!(n1, n2, "two nonces of 256 random bits differ");
        let m = s.prove(&n1, b"{\"rank\":1}");
        assert!(s.verify(&n1, b"{\"rank\":1}", &m));
        // another connection's nonce, another hello, another secret, a cut proof: refused
        assert!(!s.verify(&n2, b"{\"rank\":1}", &m));
        assert!(!s.verify(&n1, b"{\"rank\":2}", &m));
        let other = Secret::new(b"0123456789abcdeX0123", "test").unwrap();
        assert!(!other.verify(&n1, b"{\"rank\":1}", &m));
        assert!(!s.verify(&n1, b"{\"rank\":1}", &m[..16]));
        // the trailing newline of a file is not part of the secret
        assert_eq!(s, Secret::new(b"0123456789abcdef0123", "test").unwrap());
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
        let sealed = seal(b"{}", Some([7; MAC_BYTES]));
        assert_eq!(sealed.len(), 1 + 32 + 2);
        assert_eq!(
            unseal(&sealed),
            Some((Some(&[7u8; MAC_BYTES][..]), &b"{}"[..]))
        );
        assert_eq!(unseal(&seal(b"{}", None)), Some((None, &b"{}"[..])));
        assert_eq!(unseal(b"{\"version\":1}"), None);
        assert_eq!(unseal(&[]), None);
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
