//! Short-lived signatures issued by the registry and checked by the
//! rendezvous: WebSocket URLs (role, environment, registration, harness key,
//! caller, expiry) and harness key authorizations (bound to the harness key, the
//! environment and the executor registration). HMAC-SHA256 under a key made
//! at start-up, so a restart invalidates every URL (executors re-register
//! on the 401, harnesses fetch a new bundle), or read from a key file that
//! every replica of a fleet shares, so any replica verifies what another
//! signed.

use std::io::Read as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use hmac::{Hmac, Mac};
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS, NON_ALPHANUMERIC};
use sha2::Sha256;

/// Prefix of a harness key authorization.
const AUTHORIZATION_PREFIX: &str = "hka1";

/// Which side a rendezvous URL is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Environment,
    Harness,
}

impl Role {
    /// The `role=` query value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Environment => "environment",
            Self::Harness => "harness",
        }
    }
}

/// What a rendezvous URL grants (signed into it, and read back from it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlGrant {
    pub role: Role,
    pub environment_id: String,
    pub registration_id: String,
    /// Fingerprint of the harness key (harness URLs only), base64url.
    pub harness_key: Option<String>,
    /// Who asked for it: the [`Signer::caller_id`] of the bearer token of
    /// the registry call (harness URLs, with a token file only).
    pub caller: Option<String>,
}

/// Why a URL or authorization was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the URL lacks a required parameter")]
    Missing,
    #[error("the signature does not match")]
    Forged,
    #[error("the URL or authorization has expired")]
    Expired,
}

/// Fewest key bytes a signing key file must hold.
pub const MIN_KEY_BYTES: usize = 32;
/// Largest signing key file read.
const MAX_KEY_FILE_BYTES: u64 = 4096;

/// Why a signing key file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("cannot read the signing key file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the signing key file {path} is not a regular file")]
    NotAFile { path: PathBuf },
    #[error("the signing key file {path} may be read by other users (mode {mode:o}); make it private, e.g. chmod 600")]
    Readable { path: PathBuf, mode: u32 },
    #[error("the signing key file {path} is larger than {MAX_KEY_FILE_BYTES} bytes")]
    TooLarge { path: PathBuf },
    #[error("the signing key in {path} has {bytes} bytes; it needs at least {MIN_KEY_BYTES} (e.g. `head -c 32 /dev/urandom | base64 > {path}`)")]
    Short { path: PathBuf, bytes: usize },
}

/// Signs and checks.
pub struct Signer {
    key: Vec<u8>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer(<key>)")
    }
}

fn b64url() -> &'static base64::engine::GeneralPurpose {
    &base64::engine::general_purpose::URL_SAFE_NO_PAD
}

/// The key a key file holds: its base64 text decoded, else its raw bytes.
fn decode_key(contents: &[u8]) -> Vec<u8> {
    let text = contents.trim_ascii();
    let unpadded = text
        .strip_suffix(b"==")
        .or_else(|| text.strip_suffix(b"="))
        .unwrap_or(text);
    let engines = [
        base64::engine::general_purpose::STANDARD_NO_PAD,
        base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ];
    engines
        .iter()
        .find_map(|engine| engine.decode(unpadded).ok())
        .filter(|decoded| !decoded.is_empty())
        .unwrap_or_else(|| contents.to_vec())
}

/// What a path segment escapes: every byte that would end or split it
/// (`/`, `?`, `#`), and every byte outside printable ASCII; `%` itself
/// stays, so a segment that arrived in a request path comes out as it came.
const PATH_SEGMENT_ESCAPED: &AsciiSet = &CONTROLS.add(b' ').add(b'/').add(b'?').add(b'#');

/// Percent-encodes a path segment (see `PATH_SEGMENT_ESCAPED`).
pub fn path_segment(value: &str) -> String {
    utf8_percent_encode(value, PATH_SEGMENT_ESCAPED).to_string()
}

/// What a query value keeps unescaped: RFC 3986's unreserved characters.
const QUERY_VALUE_ESCAPED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-encodes a query value (unreserved characters stay).
pub fn percent_encode(value: &str) -> String {
    utf8_percent_encode(value, QUERY_VALUE_ESCAPED).to_string()
}

/// Decodes a query component: `+` as space, then `%XX` escapes; `None` on
/// a bad escape or bad UTF-8.
pub fn percent_decode(value: &str) -> Option<String> {
    let bytes = crate::wire_path::percent_decode(&value.replace('+', " "))?;
    String::from_utf8(bytes).ok()
}

/// The decoded `key=value` pairs of a query string.
pub fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .filter_map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            Some((percent_decode(key)?, percent_decode(value)?))
        })
        .collect()
}

impl Signer {
    /// A signer with a fresh random key.
    pub fn generate() -> Result<Self, getrandom::Error> {
        let mut key = vec![0u8; MIN_KEY_BYTES];
        getrandom::fill(&mut key)?;
        Ok(Self { key })
    }

    /// A signer with the key of a file every replica shares: base64 text
    /// (standard or URL-safe alphabet, padding optional, surrounding
    /// whitespace ignored) of at least [`MIN_KEY_BYTES`] bytes, or else the
    /// file's raw bytes, at least as many. The file must be a regular file
    /// that other users cannot read.
    pub fn from_key_file(path: &Path) -> Result<Self, KeyFileError> {
        let read_error = |source| KeyFileError::Read {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(read_error)?;
        let metadata = file.metadata().map_err(read_error)?;
        if !metadata.is_file() {
            return Err(KeyFileError::NotAFile {
                path: path.to_owned(),
            });
        }
        let mode = metadata.mode() & 0o7777;
        if mode & 0o007 != 0 {
            return Err(KeyFileError::Readable {
                path: path.to_owned(),
                mode,
            });
        }
        let mut contents = Vec::new();
        file.take(MAX_KEY_FILE_BYTES + 1)
            .read_to_end(&mut contents)
            .map_err(read_error)?;
        if contents.len() as u64 > MAX_KEY_FILE_BYTES {
            return Err(KeyFileError::TooLarge {
                path: path.to_owned(),
            });
        }
        let key = decode_key(&contents);
        if key.len() < MIN_KEY_BYTES {
            return Err(KeyFileError::Short {
                path: path.to_owned(),
                bytes: key.len(),
            });
        }
        Ok(Self { key })
    }

    fn mac(&self, parts: &[&str]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        for part in parts {
            mac.update(&u64::try_from(part.len()).unwrap_or(u64::MAX).to_be_bytes());
            mac.update(part.as_bytes());
        }
        mac
    }

    fn sign(&self, parts: &[&str]) -> String {
        b64url().encode(self.mac(parts).finalize().into_bytes())
    }

    fn verify(&self, parts: &[&str], signature: &str) -> Result<(), SignatureError> {
        let signature = b64url()
            .decode(signature)
            .map_err(|_| SignatureError::Forged)?;
        self.mac(parts)
            .verify_slice(&signature)
            .map_err(|_| SignatureError::Forged)
    }

    /// An opaque, stable name for a bearer token, so limits can be kept per
    /// token without the token itself appearing in URLs or logs.
    pub fn caller_id(&self, token: &str) -> String {
        let digest = self.mac(&["caller", token]).finalize().into_bytes();
        b64url().encode(digest.get(..16).unwrap_or_default())
    }

    /// `{base}/cloud/environment/{id}/relay?role=…&env=…&reg=…[&hk=…][&cl=…]&exp=…&sig=…`:
    /// the path begins as the environment's registry calls do, so a load
    /// balancer hashing on the first three path segments sends the relay
    /// sockets to the replica that holds the environment.
    pub fn url(&self, ws_base: &str, grant: &UrlGrant, expires_at: u64) -> String {
        let exp = expires_at.to_string();
        let hk = grant.harness_key.as_deref().unwrap_or("");
        let cl = grant.caller.as_deref().unwrap_or("");
        let sig = self.sign(&[
            grant.role.as_str(),
            &grant.environment_id,
            &grant.registration_id,
            hk,
            cl,
            &exp,
        ]);
        let mut url = format!(
            "{ws_base}/cloud/environment/{}/relay?role={}&env={}&reg={}",
            path_segment(&grant.environment_id),
            grant.role.as_str(),
            percent_encode(&grant.environment_id),
            percent_encode(&grant.registration_id)
        );
        if let Some(hk) = &grant.harness_key {
            url.push_str("&hk=");
            url.push_str(hk);
        }
        if let Some(cl) = &grant.caller {
            url.push_str("&cl=");
            url.push_str(cl);
        }
        url.push_str(&format!("&exp={exp}&sig={sig}"));
        url
    }

    /// Checks the query of a rendezvous URL at `now` (Unix seconds).
    pub fn verify_url(&self, query: &str, now: u64) -> Result<UrlGrant, SignatureError> {
        let pairs = query_pairs(query);
        let get = |name: &str| {
            pairs
                .iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.as_str())
        };
        let role = match get("role") {
            Some("environment") => Role::Environment,
            Some("harness") => Role::Harness,
            _ => return Err(SignatureError::Missing),
        };
        let (Some(env), Some(reg), Some(exp), Some(sig)) =
            (get("env"), get("reg"), get("exp"), get("sig"))
        else {
            return Err(SignatureError::Missing);
        };
        let (hk, cl) = (get("hk"), get("cl"));
        if role == Role::Harness && hk.is_none() {
            return Err(SignatureError::Missing);
        }
        let signed = [
            role.as_str(),
            env,
            reg,
            hk.unwrap_or(""),
            cl.unwrap_or(""),
            exp,
        ];
        self.verify(&signed, sig)?;
        let expires_at: u64 = exp.parse().map_err(|_| SignatureError::Forged)?;
        if expires_at <= now {
            return Err(SignatureError::Expired);
        }
        Ok(UrlGrant {
            role,
            environment_id: env.to_owned(),
            registration_id: reg.to_owned(),
            harness_key: hk.map(str::to_owned),
            caller: cl.map(str::to_owned),
        })
    }

    /// `hka1.{exp}.{sig}` over (environment, registration, harness key, exp).
    pub fn authorization(
        &self,
        environment_id: &str,
        registration_id: &str,
        harness_key: &str,
        expires_at: u64,
    ) -> String {
        let exp = expires_at.to_string();
        let sig = self.sign(&[
            AUTHORIZATION_PREFIX,
            environment_id,
            registration_id,
            harness_key,
            &exp,
        ]);
        format!("{AUTHORIZATION_PREFIX}.{exp}.{sig}")
    }

    /// Checks an authorization against the key and registration it must be bound to.
    pub fn verify_authorization(
        &self,
        authorization: &str,
        environment_id: &str,
        registration_id: &str,
        harness_key: &str,
        now: u64,
    ) -> Result<(), SignatureError> {
        let mut parts = authorization.split('.');
        let (Some(AUTHORIZATION_PREFIX), Some(exp), Some(sig), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(SignatureError::Forged);
        };
        self.verify(
            &[
                AUTHORIZATION_PREFIX,
                environment_id,
                registration_id,
                harness_key,
                exp,
            ],
            sig,
        )?;
        let expires_at: u64 = exp.parse().map_err(|_| SignatureError::Forged)?;
        if expires_at <= now {
            return Err(SignatureError::Expired);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> Signer {
        Signer::generate().unwrap()
    }

    fn query(url: &str) -> &str {
        url.split_once('?').map(|(_, q)| q).unwrap_or("")
    }

    #[test]
    fn signed_urls_verify_until_they_expire() {
        let s = signer();
        let grant = UrlGrant {
            role: Role::Harness,
            environment_id: "env 1".into(),
            registration_id: "reg-1".into(),
            harness_key: Some("KEY".into()),
            caller: Some("CALLER".into()),
        };
        let url = s.url("ws://h:1", &grant, 100);
        assert!(url.starts_with(
            "ws://h:1/cloud/environment/env%201/relay?role=harness&env=env%201&reg=reg-1&hk=KEY&cl=CALLER&exp=100&sig="
        ));
        assert_eq!(s.verify_url(query(&url), 99), Ok(grant));
        assert_eq!(s.verify_url(query(&url), 100), Err(SignatureError::Expired));
        // The caller is signed: it can be neither changed nor dropped.
        let other_caller = url.replace("cl=CALLER", "cl=OTHER");
        assert_eq!(
            s.verify_url(query(&other_caller), 1),
            Err(SignatureError::Forged)
        );
        let no_caller = url.replace("&cl=CALLER", "");
        assert_eq!(
            s.verify_url(query(&no_caller), 1),
            Err(SignatureError::Forged)
        );
    }

    #[test]
    fn forged_or_altered_urls_are_refused() {
        let s = signer();
        let grant = UrlGrant {
            role: Role::Environment,
            environment_id: "env".into(),
            registration_id: "reg".into(),
            harness_key: None,
            caller: None,
        };
        let url = s.url("ws://h", &grant, 100);
        let altered = url.replace("env=env", "env=other");
        assert_eq!(
            s.verify_url(query(&altered), 1),
            Err(SignatureError::Forged)
        );
        let promoted = url.replace("role=environment", "role=harness&hk=x");
        assert_eq!(
            s.verify_url(query(&promoted), 1),
            Err(SignatureError::Forged)
        );
        let other = signer();
        assert_eq!(
            other.verify_url(query(&url), 1),
            Err(SignatureError::Forged)
        );
        assert_eq!(
            s.verify_url("role=harness", 1),
            Err(SignatureError::Missing)
        );
        let later = url.replace("exp=100", "exp=999");
        assert_eq!(s.verify_url(query(&later), 1), Err(SignatureError::Forged));
    }

    #[test]
    fn authorizations_are_bound_to_key_and_registration() {
        let s = signer();
        let a = s.authorization("env", "reg", "key-a", 50);
        assert!(s
            .verify_authorization(&a, "env", "reg", "key-a", 10)
            .is_ok());
        assert_eq!(
            s.verify_authorization(&a, "env", "reg", "key-b", 10),
            Err(SignatureError::Forged)
        );
        assert_eq!(
            s.verify_authorization(&a, "env", "reg-2", "key-a", 10),
            Err(SignatureError::Forged)
        );
        assert_eq!(
            s.verify_authorization(&a, "env", "reg", "key-a", 50),
            Err(SignatureError::Expired)
        );
        assert!(s
            .verify_authorization("garbage", "env", "reg", "key-a", 1)
            .is_err());
    }

    #[test]
    fn caller_ids_are_stable_per_token_and_per_key() {
        let s = signer();
        assert_eq!(s.caller_id("tok"), s.caller_id("tok"));
        assert_ne!(s.caller_id("tok"), s.caller_id("tok2"));
        assert_ne!(s.caller_id("tok"), signer().caller_id("tok"));
        assert!(!s.caller_id("tok").contains("tok"));
    }

    fn key_file(dir: &Path, name: &str, contents: &[u8], mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn replicas_with_one_key_file_verify_each_others_signatures() {
        let dir = tempfile::tempdir().unwrap();
        let base64_key = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
        let shared = key_file(dir.path(), "k", format!("{base64_key}\n").as_bytes(), 0o600);
        let (a, b) = (
            Signer::from_key_file(&shared).unwrap(),
            Signer::from_key_file(&shared).unwrap(),
        );
        let grant = UrlGrant {
            role: Role::Harness,
            environment_id: "env".into(),
            registration_id: "reg".into(),
            harness_key: Some("KEY".into()),
            caller: None,
        };
        let url = a.url("ws://h", &grant, 100);
        assert_eq!(b.verify_url(query(&url), 1), Ok(grant));
        let authorization = a.authorization("env", "reg", "KEY", 100);
        assert!(b
            .verify_authorization(&authorization, "env", "reg", "KEY", 1)
            .is_ok());
        assert_eq!(a.caller_id("tok"), b.caller_id("tok"));
        // The same key as raw bytes is the same key.
        let raw = key_file(dir.path(), "raw", &[7u8; 32], 0o400);
        let c = Signer::from_key_file(&raw).unwrap();
        assert_eq!(
            c.verify_url(query(&url), 1).map(|g| g.role),
            Ok(Role::Harness)
        );
        // Another key refuses both.
        let other = key_file(dir.path(), "other", &[8u8; 40], 0o600);
        let d = Signer::from_key_file(&other).unwrap();
        assert_eq!(d.verify_url(query(&url), 1), Err(SignatureError::Forged));
        assert_eq!(
            d.verify_authorization(&authorization, "env", "reg", "KEY", 1),
            Err(SignatureError::Forged)
        );
    }

    #[test]
    fn key_files_others_may_read_short_keys_and_non_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let readable = key_file(dir.path(), "open", &[1u8; 32], 0o644);
        assert!(matches!(
            Signer::from_key_file(&readable),
            Err(KeyFileError::Readable { mode: 0o644, .. })
        ));
        let short_text = base64::engine::general_purpose::STANDARD.encode([1u8; 31]);
        let short = key_file(dir.path(), "short", short_text.as_bytes(), 0o600);
        assert!(matches!(
            Signer::from_key_file(&short),
            Err(KeyFileError::Short { bytes: 31, .. })
        ));
        let empty = key_file(dir.path(), "empty", b"", 0o600);
        assert!(matches!(
            Signer::from_key_file(&empty),
            Err(KeyFileError::Short { bytes: 0, .. })
        ));
        assert!(matches!(
            Signer::from_key_file(dir.path()),
            Err(KeyFileError::NotAFile { .. })
        ));
        assert!(matches!(
            Signer::from_key_file(&dir.path().join("missing")),
            Err(KeyFileError::Read { .. })
        ));
        let message = Signer::from_key_file(&readable).unwrap_err().to_string();
        assert!(message.contains("chmod 600"), "{message}");
    }

    #[test]
    fn relay_urls_begin_with_the_environments_registry_path() {
        let s = signer();
        for (id, segment) in [
            ("env-1", "env-1"),
            ("a b/c?d", "a%20b%2Fc%3Fd"),
            ("x%41", "x%41"),
        ] {
            let grant = UrlGrant {
                role: Role::Environment,
                environment_id: id.into(),
                registration_id: "reg".into(),
                harness_key: None,
                caller: None,
            };
            let url = s.url("ws://h/prefix", &grant, 100);
            let expected = format!("ws://h/prefix/cloud/environment/{segment}/relay?");
            assert!(url.starts_with(&expected), "{url}");
            assert_eq!(s.verify_url(query(&url), 1), Ok(grant));
        }
    }

    #[test]
    fn percent_coding_round_trips() {
        assert_eq!(
            percent_decode(&percent_encode("a b/ü?&=")).as_deref(),
            Some("a b/ü?&=")
        );
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%4"), None);
    }
}
