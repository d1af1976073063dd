//! The Noise channel of a relay stream: `Noise_hybridIK_25519+MLKEM768_AESGCM_SHA256`
//! through `clatter` (so every handshake byte matches the reference), the
//! identities and their JSON key encoding, the prologue, the two handshake
//! messages and the transport ciphers that come out of them.
//!
//! Every length that `clatter` would panic on is checked here first. Record
//! sequencing, framing and retransmission live in [`super::channel`]; this
//! module only turns bytes into ciphertext and back.

use base64::Engine as _;
use clatter::bytearray::ByteArray;
use clatter::cipherstate::CipherState;
use clatter::crypto::cipher::AesGcm;
use clatter::crypto::dh::X25519;
use clatter::crypto::hash::Sha256;
use clatter::crypto::kem::rust_crypto_ml_kem::MlKem768;
use clatter::handshakepattern::noise_hybrid_ik;
use clatter::traits::{Dh, Handshaker, Kem};
use clatter::{HybridHandshake, HybridHandshakeParams, KeyPair};
use serde::{Deserialize, Serialize};

/// The JSON suite tag of a public key.
pub const KEY_SUITE: &str = "Noise_hybridIK_X25519+MLKEM768_AESGCM_SHA256";
/// First part of every prologue.
pub const PROLOGUE_DOMAIN: &str = "codex-exec-server-relay-noise/v1";
/// Largest Noise message (handshake or transport).
pub const MAX_NOISE_MESSAGE: usize = 65535;
/// AES-GCM tag length.
pub const TAG_LEN: usize = 16;
/// X25519 public key length.
const X25519_LEN: usize = 32;
/// ML-KEM-768 encapsulation key length.
const MLKEM768_EK_LEN: usize = 1184;
/// msg1 without its payload: 1088 (skem ct) + 32 + 1184 (e) + 48 + 1200 (s) + 16.
pub const MSG1_OVERHEAD: usize = 3568;
/// msg2 (its payload is empty): 1088 + 1104 + 32 + 1184 + 16.
pub const MSG2_LEN: usize = 3424;

type Handshake = HybridHandshake<X25519, MlKem768, MlKem768, AesGcm, Sha256>;
type DhPair = KeyPair<<X25519 as Dh>::PubKey, <X25519 as Dh>::PrivateKey>;
type KemPair = KeyPair<<MlKem768 as Kem>::PubKey, <MlKem768 as Kem>::SecretKey>;

/// Why a Noise operation failed.
#[derive(Debug, thiserror::Error)]
pub enum NoiseError {
    #[error("invalid Noise channel public key: unsupported Noise channel suite")]
    UnsupportedSuite,
    #[error("invalid X25519 public key")]
    InvalidX25519,
    #[error("invalid X25519 public key length")]
    X25519Length,
    #[error("invalid ML-KEM-768 public key")]
    InvalidMlKem,
    #[error("invalid ML-KEM-768 public key length")]
    MlKemLength,
    #[error("cannot generate a Noise identity: {0}")]
    KeyGeneration(String),
    #[error("handshake payload is too large")]
    PayloadTooLarge,
    #[error("handshake request is too large")]
    RequestTooLarge,
    #[error("handshake response is too large")]
    ResponseTooLarge,
    #[error("handshake response payload must be empty")]
    ResponsePayloadNotEmpty,
    /// (clatter's errors are not `std::error::Error` without its `std`
    /// feature, which the reference does not enable: kept as their text.)
    #[error("Noise handshake failed: {0}")]
    Handshake(String),
    #[error("the handshake did not reveal the initiator's static key")]
    MissingRemoteStatic,
    #[error("transport ciphertext is too short")]
    CiphertextTooShort,
    #[error("transport ciphertext is too long")]
    CiphertextTooLong,
    #[error("transport plaintext is too long")]
    PlaintextTooLong,
    #[error("Noise transport failed: {0}")]
    Cipher(String),
}

impl From<clatter::error::HandshakeError> for NoiseError {
    fn from(err: clatter::error::HandshakeError) -> Self {
        Self::Handshake(err.to_string())
    }
}

impl From<clatter::error::CipherError> for NoiseError {
    fn from(err: clatter::error::CipherError) -> Self {
        Self::Cipher(err.to_string())
    }
}

/// A public key as the registry carries it (unknown keys are refused).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoisePublicKey {
    pub suite: String,
    pub x25519_public_key: String,
    pub mlkem768_public_key: String,
}

/// A public key whose parts have been decoded and checked.
#[derive(Clone, PartialEq, Eq)]
pub struct DecodedPublicKey {
    x25519: [u8; X25519_LEN],
    mlkem: Vec<u8>,
}

impl std::fmt::Debug for DecodedPublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodedPublicKey")
            .field(
                "x25519",
                &base64::engine::general_purpose::STANDARD.encode(self.x25519),
            )
            .finish_non_exhaustive()
    }
}

fn b64() -> &'static base64::engine::GeneralPurpose {
    &base64::engine::general_purpose::STANDARD
}

impl NoisePublicKey {
    /// Decodes and checks the suite and both key lengths.
    pub fn decode(&self) -> Result<DecodedPublicKey, NoiseError> {
        if self.suite != KEY_SUITE {
            return Err(NoiseError::UnsupportedSuite);
        }
        let x25519 = b64()
            .decode(&self.x25519_public_key)
            .map_err(|_| NoiseError::InvalidX25519)?;
        let x25519: [u8; X25519_LEN] = x25519.try_into().map_err(|_| NoiseError::X25519Length)?;
        let mlkem = b64()
            .decode(&self.mlkem768_public_key)
            .map_err(|_| NoiseError::InvalidMlKem)?;
        if mlkem.len() != MLKEM768_EK_LEN {
            return Err(NoiseError::MlKemLength);
        }
        Ok(DecodedPublicKey { x25519, mlkem })
    }
}

impl DecodedPublicKey {
    /// The JSON form.
    pub fn encode(&self) -> NoisePublicKey {
        NoisePublicKey {
            suite: KEY_SUITE.to_owned(),
            x25519_public_key: b64().encode(self.x25519),
            mlkem768_public_key: b64().encode(&self.mlkem),
        }
    }

    /// SHA-256 over both parts: a short, stable name for the key.
    pub fn fingerprint(&self) -> [u8; 32] {
        use sha2::{Digest, Sha256 as Sha};
        let mut hash = Sha::new();
        hash.update(self.x25519);
        hash.update(&self.mlkem);
        hash.finalize().into()
    }
}

/// A static identity: an X25519 and an ML-KEM-768 key pair.
#[derive(Clone)]
pub struct NoiseIdentity {
    dh: DhPair,
    kem: KemPair,
}

impl std::fmt::Debug for NoiseIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NoiseIdentity")
            .field("public", &self.public_key())
            .finish_non_exhaustive()
    }
}

impl NoiseIdentity {
    /// Generates a fresh identity from the OS RNG.
    pub fn generate() -> Result<Self, NoiseError> {
        let dh = X25519::genkey().map_err(|e| NoiseError::KeyGeneration(e.to_string()))?;
        let kem = MlKem768::genkey().map_err(|e| NoiseError::KeyGeneration(e.to_string()))?;
        Ok(Self { dh, kem })
    }

    /// The public half, decoded.
    pub fn public_key(&self) -> DecodedPublicKey {
        DecodedPublicKey {
            x25519: self.dh.public,
            mlkem: self.kem.public.as_slice().to_vec(),
        }
    }
}

/// The prologue: four parts, each a u64 big-endian length and the bytes.
pub fn prologue(environment_id: &str, registration_id: &str, stream_id: &str) -> Vec<u8> {
    let parts = [
        PROLOGUE_DOMAIN.as_bytes(),
        environment_id.as_bytes(),
        registration_id.as_bytes(),
        stream_id.as_bytes(),
    ];
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.len() + 8).sum());
    for part in parts {
        out.extend_from_slice(&u64::try_from(part.len()).unwrap_or(u64::MAX).to_be_bytes());
        out.extend_from_slice(part);
    }
    out
}

/// The harness's half-done handshake: msg1 is out, msg2 is awaited.
pub struct Initiator {
    handshake: Handshake,
}

impl Initiator {
    /// Starts a handshake towards `responder` and writes msg1 carrying `payload`.
    pub fn start(
        identity: &NoiseIdentity,
        responder: &DecodedPublicKey,
        prologue: &[u8],
        payload: &[u8],
    ) -> Result<(Self, Vec<u8>), NoiseError> {
        if payload.len() > MAX_NOISE_MESSAGE - MSG1_OVERHEAD {
            return Err(NoiseError::PayloadTooLarge);
        }
        let params = HybridHandshakeParams::new(noise_hybrid_ik(), true)
            .with_prologue(prologue)
            .with_s(identity.dh.clone())
            .with_s_kem(identity.kem.clone())
            .with_rs(responder.x25519)
            .with_rs_kem(ByteArray::from_slice(&responder.mlkem));
        let mut handshake = Handshake::new(params)?;
        let mut msg1 = vec![0; MSG1_OVERHEAD + payload.len()];
        let n = handshake.write_message(payload, &mut msg1)?;
        msg1.truncate(n);
        Ok((Self { handshake }, msg1))
    }

    /// Reads msg2 (whose payload must be empty) and yields the transport.
    pub fn finish(mut self, msg2: &[u8]) -> Result<Transport, NoiseError> {
        if msg2.len() > MAX_NOISE_MESSAGE {
            return Err(NoiseError::ResponseTooLarge);
        }
        let mut payload = vec![0; msg2.len()];
        let n = self.handshake.read_message(msg2, &mut payload)?;
        if n != 0 {
            return Err(NoiseError::ResponsePayloadNotEmpty);
        }
        Transport::from_handshake(self.handshake, true)
    }
}

/// The executor's half-done handshake: msg1 was read and authenticated;
/// msg2 is written once the registry has validated the harness key.
pub struct Responder {
    handshake: Handshake,
    remote: DecodedPublicKey,
    payload: Vec<u8>,
}

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder")
            .field("remote", &self.remote)
            .finish_non_exhaustive()
    }
}

impl Responder {
    /// Reads msg1 with `identity` under `prologue`.
    pub fn read_request(
        identity: &NoiseIdentity,
        prologue: &[u8],
        msg1: &[u8],
    ) -> Result<Self, NoiseError> {
        if msg1.len() > MAX_NOISE_MESSAGE {
            return Err(NoiseError::RequestTooLarge);
        }
        let params = HybridHandshakeParams::new(noise_hybrid_ik(), false)
            .with_prologue(prologue)
            .with_s(identity.dh.clone())
            .with_s_kem(identity.kem.clone());
        let mut handshake = Handshake::new(params)?;
        let mut payload = vec![0; msg1.len()];
        let n = handshake.read_message(msg1, &mut payload)?;
        payload.truncate(n);
        let remote = handshake
            .get_remote_static()
            .ok_or(NoiseError::MissingRemoteStatic)?;
        let remote = DecodedPublicKey {
            x25519: *remote.dh(),
            mlkem: remote.kem().as_slice().to_vec(),
        };
        Ok(Self {
            handshake,
            remote,
            payload,
        })
    }

    /// The initiator's static key, authenticated by msg1.
    pub fn remote_key(&self) -> &DecodedPublicKey {
        &self.remote
    }

    /// The msg1 payload (the harness key authorization).
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Writes msg2 (empty payload) and yields the transport.
    pub fn finish(mut self) -> Result<(Vec<u8>, Transport), NoiseError> {
        let mut msg2 = vec![0; MSG2_LEN];
        let n = self.handshake.write_message(&[], &mut msg2)?;
        msg2.truncate(n);
        Ok((msg2, Transport::from_handshake(self.handshake, false)?))
    }
}

/// Both directions of an established channel.
pub struct Transport {
    pub sealer: Sealer,
    pub opener: Opener,
}

impl Transport {
    fn from_handshake(handshake: Handshake, initiator: bool) -> Result<Self, NoiseError> {
        let states = handshake.finalize()?.take();
        let (send, receive) = if initiator {
            (states.initiator_to_responder, states.responder_to_initiator)
        } else {
            (states.responder_to_initiator, states.initiator_to_responder)
        };
        Ok(Self {
            sealer: Sealer { state: send },
            opener: Opener { state: receive },
        })
    }
}

/// Encrypts records; the nonce advances by one per record.
pub struct Sealer {
    state: CipherState<AesGcm>,
}

impl Sealer {
    /// The nonce the next record gets.
    pub fn next_nonce(&self) -> u64 {
        self.state.get_nonce()
    }

    /// Encrypts one record (transport AD is empty).
    pub fn seal(&mut self, plaintext: &[u8]) -> Result<Vec<u8>, NoiseError> {
        if plaintext.len() > MAX_NOISE_MESSAGE - TAG_LEN {
            return Err(NoiseError::PlaintextTooLong);
        }
        let mut out = vec![0; plaintext.len() + TAG_LEN];
        self.state.encrypt_with_ad(&[], plaintext, &mut out)?;
        Ok(out)
    }
}

/// Decrypts records in nonce order.
pub struct Opener {
    state: CipherState<AesGcm>,
}

impl Opener {
    /// Decrypts the next record.
    pub fn open(&mut self, ciphertext: &[u8]) -> Result<Vec<u8>, NoiseError> {
        if ciphertext.len() < TAG_LEN {
            return Err(NoiseError::CiphertextTooShort);
        }
        if ciphertext.len() > MAX_NOISE_MESSAGE {
            return Err(NoiseError::CiphertextTooLong);
        }
        let mut out = vec![0; ciphertext.len() - TAG_LEN];
        self.state.decrypt_with_ad(&[], ciphertext, &mut out)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (NoiseIdentity, NoiseIdentity) {
        (
            NoiseIdentity::generate().unwrap(),
            NoiseIdentity::generate().unwrap(),
        )
    }

    #[test]
    fn prologue_encoding_is_stable_and_unambiguous() {
        let mut expected = Vec::new();
        for part in [
            &b"codex-exec-server-relay-noise/v1"[..],
            b"env-1",
            b"registration-1",
            b"stream-1",
        ] {
            expected.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, part.len() as u8]);
            expected.extend_from_slice(part);
        }
        assert_eq!(prologue("env-1", "registration-1", "stream-1"), expected);
        assert_eq!(expected[7], 0x20);
        assert_ne!(prologue("ab", "c", "s"), prologue("a", "bc", "s"));
    }

    #[test]
    fn hybrid_ik_roundtrip_authenticates_both_endpoints_with_reference_sizes() {
        let (harness, executor) = pair();
        let p = prologue("env-1", "reg-1", "stream-1");
        let authorization = b"hka--084-ytZuuBAiooSIXDDJAvqmAbxIWal";
        let (initiator, msg1) =
            Initiator::start(&harness, &executor.public_key(), &p, authorization).unwrap();
        assert_eq!(msg1.len(), MSG1_OVERHEAD + authorization.len());
        assert_eq!(msg1.len(), 3604);
        let responder = Responder::read_request(&executor, &p, &msg1).unwrap();
        assert_eq!(responder.payload(), authorization);
        assert_eq!(responder.remote_key(), &harness.public_key());
        let (msg2, mut executor_side) = responder.finish().unwrap();
        assert_eq!(msg2.len(), MSG2_LEN);
        let mut harness_side = initiator.finish(&msg2).unwrap();
        for round in 0..3u8 {
            let ct = harness_side.sealer.seal(&[round; 10]).unwrap();
            assert_eq!(ct.len(), 26);
            assert_eq!(executor_side.opener.open(&ct).unwrap(), vec![round; 10]);
            let ct = executor_side.sealer.seal(b"back").unwrap();
            assert_eq!(harness_side.opener.open(&ct).unwrap(), b"back");
        }
        assert_eq!(harness_side.sealer.next_nonce(), 3);
    }

    #[test]
    fn responder_rejects_mismatched_prologue_and_wrong_key() {
        let (harness, executor) = pair();
        let other = NoiseIdentity::generate().unwrap();
        let (_, msg1) = Initiator::start(
            &harness,
            &executor.public_key(),
            &prologue("e", "r", "stream-1"),
            b"a",
        )
        .unwrap();
        assert!(
            Responder::read_request(&executor, &prologue("e", "r", "stream-2"), &msg1).is_err()
        );
        assert!(Responder::read_request(&other, &prologue("e", "r", "stream-1"), &msg1).is_err());
        assert!(Responder::read_request(&executor, &prologue("e", "r", "stream-1"), &msg1).is_ok());
    }

    #[test]
    fn transport_rejects_tampered_replayed_and_malformed_ciphertext() {
        let (harness, executor) = pair();
        let p = prologue("e", "r", "s");
        let (initiator, msg1) =
            Initiator::start(&harness, &executor.public_key(), &p, b"x").unwrap();
        let (msg2, mut exec) = Responder::read_request(&executor, &p, &msg1)
            .unwrap()
            .finish()
            .unwrap();
        let mut harn = initiator.finish(&msg2).unwrap();
        let mut ct = harn.sealer.seal(b"hello").unwrap();
        let last = ct.len() - 1;
        ct[last] ^= 1;
        assert!(exec.opener.open(&ct).is_err());
        let (initiator, msg1) =
            Initiator::start(&harness, &executor.public_key(), &p, b"x").unwrap();
        let (msg2, mut exec) = Responder::read_request(&executor, &p, &msg1)
            .unwrap()
            .finish()
            .unwrap();
        let mut harn = initiator.finish(&msg2).unwrap();
        let ct = harn.sealer.seal(b"hello").unwrap();
        assert!(exec.opener.open(&ct).is_ok());
        assert!(
            exec.opener.open(&ct).is_err(),
            "a replayed record must fail"
        );
        assert!(matches!(
            exec.opener.open(&[0; 15]),
            Err(NoiseError::CiphertextTooShort)
        ));
        assert!(matches!(
            exec.opener.open(&vec![0; 65536]),
            Err(NoiseError::CiphertextTooLong)
        ));
        assert!(matches!(
            harn.sealer.seal(&vec![0; 65520]),
            Err(NoiseError::PlaintextTooLong)
        ));
    }

    #[test]
    fn oversized_handshake_inputs_are_errors_not_panics() {
        let (harness, executor) = pair();
        let p = prologue("e", "r", "s");
        assert!(matches!(
            Initiator::start(&harness, &executor.public_key(), &p, &vec![0; 65535]),
            Err(NoiseError::PayloadTooLarge)
        ));
        assert!(matches!(
            Responder::read_request(&executor, &p, &vec![0; 65536]),
            Err(NoiseError::RequestTooLarge)
        ));
        assert!(Responder::read_request(&executor, &p, &[0; 10]).is_err());
        let (initiator, _) = Initiator::start(&harness, &executor.public_key(), &p, b"x").unwrap();
        assert!(matches!(
            initiator.finish(&vec![0; 65536]),
            Err(NoiseError::ResponseTooLarge)
        ));
    }

    #[test]
    fn public_keys_round_trip_and_bad_ones_are_named() {
        let identity = NoiseIdentity::generate().unwrap();
        let json = serde_json::to_value(identity.public_key().encode()).unwrap();
        assert_eq!(json["suite"], KEY_SUITE);
        assert_eq!(json["x25519_public_key"].as_str().unwrap().len(), 44);
        assert_eq!(json["mlkem768_public_key"].as_str().unwrap().len(), 1580);
        let key: NoisePublicKey = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(key.decode().unwrap(), identity.public_key());
        let mut extra = json.clone();
        extra["more"] = serde_json::json!(1);
        assert!(serde_json::from_value::<NoisePublicKey>(extra).is_err());
        let bad = NoisePublicKey {
            suite: "Noise_XX".into(),
            ..key.clone()
        };
        assert_eq!(
            bad.decode().unwrap_err().to_string(),
            "invalid Noise channel public key: unsupported Noise channel suite"
        );
        let bad = NoisePublicKey {
            x25519_public_key: b64().encode([0u8; 31]),
            ..key.clone()
        };
        assert!(matches!(bad.decode(), Err(NoiseError::X25519Length)));
        let bad = NoisePublicKey {
            mlkem768_public_key: "!!".into(),
            ..key
        };
        assert!(matches!(bad.decode(), Err(NoiseError::InvalidMlKem)));
    }
}
