//! Params, results and notifications of the `process/*` methods (docs/protocol.md),
//! in the reference's camelCase shapes and key order.

use std::collections::BTreeMap;

use base64::Engine;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::wire_path::WirePath;

/// `process/start`.
pub const METHOD_START: &str = "process/start";
/// `process/read`.
pub const METHOD_READ: &str = "process/read";
/// `process/write`.
pub const METHOD_WRITE: &str = "process/write";
/// `process/signal`.
pub const METHOD_SIGNAL: &str = "process/signal";
/// `process/terminate`.
pub const METHOD_TERMINATE: &str = "process/terminate";
/// `process/resize`.
pub const METHOD_RESIZE: &str = "process/resize";
/// Notification: a chunk of output.
pub const NOTIFY_OUTPUT: &str = "process/output";
/// Notification: the process exited.
pub const NOTIFY_EXITED: &str = "process/exited";
/// Notification: exit known and every output stream at EOF; always last.
pub const NOTIFY_CLOSED: &str = "process/closed";

/// Which stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum StreamKind {
    Stdout,
    Stderr,
    Pty,
}

impl StreamKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            StreamKind::Stdout => "stdout",
            StreamKind::Stderr => "stderr",
            StreamKind::Pty => "pty",
        }
    }
}

/// Terminal size of a PTY process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PtySize {
    pub rows: u16,
    pub cols: u16,
}

impl Default for PtySize {
    fn default() -> Self {
        Self { rows: 24, cols: 80 }
    }
}

/// Which variables of the server's environment a child inherits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum EnvInherit {
    #[default]
    Core,
    All,
    None,
}

/// `envPolicy` of `process/start` (reference `ExecEnvPolicy`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct EnvPolicy {
    #[serde(default)]
    pub inherit: EnvInherit,
    #[serde(default)]
    pub ignore_default_excludes: bool,
    #[serde(default)]
    pub exclude: Vec<String>,
    #[serde(default)]
    pub set: BTreeMap<String, String>,
    #[serde(default)]
    pub include_only: Vec<String>,
}

/// `process/start` params.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct StartParams {
    pub process_id: String,
    #[cfg_attr(feature = "schema", schemars(length(min = 1)))]
    pub argv: Vec<String>,
    pub cwd: WirePath,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_policy: Option<EnvPolicy>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub tty: bool,
    #[serde(default, deserialize_with = "null_as_default")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<bool>"))]
    pub pipe_stdin: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arg0: Option<String>,
    /// FileSystemSandboxContext, interpreted by `server::process_sandbox`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "schema",
        schemars(with = "Option<super::sandbox::FileSystemSandboxContext>")
    )]
    pub sandbox: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<PtySize>,
    /// Confine the sandboxed command to the managed proxy.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "std::ops::Not::not"
    )]
    #[cfg_attr(feature = "schema", schemars(with = "Option<bool>"))]
    pub enforce_managed_network: bool,
    /// Loopback ports of an already running proxy (used by macOS sandboxes;
    /// replaced by the server's own when `networkProxy` is given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_network: Option<super::network::ManagedNetworkSandboxContext>,
    /// Start a proxy for this process, living until its `process/closed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_proxy: Option<super::network::RemoteNetworkProxyLaunchConfig>,
}

/// `process/start` result.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct StartResult {
    pub process_id: String,
}

/// `process/read` params.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ReadParams {
    pub process_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_seq: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

/// One retained chunk in a `process/read` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ReadChunk {
    pub seq: u64,
    pub stream: StreamKind,
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("contentEncoding" = "base64")))]
    #[serde(serialize_with = "as_base64", deserialize_with = "from_base64")]
    pub chunk: Vec<u8>,
}

/// `process/read` result.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ReadResult {
    pub chunks: Vec<ReadChunk>,
    pub next_seq: u64,
    pub exited: bool,
    pub exit_code: Option<i32>,
    pub closed: bool,
    pub failure: Option<String>,
    #[serde(default)]
    pub sandbox_denied: bool,
    #[serde(default)]
    pub truncated: bool,
    /// Destinations the process's managed proxy refused (last 200; absent
    /// when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_denials: Vec<super::network::NetworkDenial>,
}

/// `process/write` params (both dialects).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct WriteParams {
    pub process_id: String,
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>", extend("contentEncoding" = "base64")))]
    #[serde(
        default,
        serialize_with = "as_base64",
        deserialize_with = "from_base64"
    )]
    pub chunk: Vec<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(extend("default" = null)))]
    pub write_id: Option<String>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "std::ops::Not::not"
    )]
    #[cfg_attr(feature = "schema", schemars(with = "Option<bool>", extend("default" = false)))]
    pub close_stdin: bool,
}

/// `process/write` status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum WriteStatus {
    Accepted,
    UnknownProcess,
    StdinClosed,
    Starting,
}

/// `process/write` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WriteResult {
    pub status: WriteStatus,
}

/// `process/signal` params.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SignalParams {
    pub process_id: String,
    pub signal: String,
}

/// `process/resize` params.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ResizeParams {
    pub process_id: String,
    pub rows: u16,
    pub cols: u16,
}

/// `process/terminate` params.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TerminateParams {
    pub process_id: String,
}

/// `process/terminate` result.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TerminateResult {
    pub running: bool,
}

// The server writes these params by hand (`encode_output_notification`);
// a unit test of `protocol::schema` keeps this type in step with it.
/// `process/output` notification params: one chunk of output.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct OutputNotification {
    pub process_id: String,
    /// Per-process sequence number, starting at 1.
    pub seq: u64,
    pub stream: StreamKind,
    /// Base64 (standard alphabet, padded).
    #[cfg_attr(feature = "schema", schemars(extend("contentEncoding" = "base64")))]
    pub chunk: String,
}

/// `process/exited` notification params.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ExitedNotification<'a> {
    pub process_id: &'a str,
    pub seq: u64,
    pub exit_code: i32,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub signal: Option<&'a str>,
    #[serde(default)]
    pub sandbox_denied: bool,
}

/// `process/closed` notification params.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ClosedNotification<'a> {
    pub process_id: &'a str,
    #[serde(default)]
    pub seq: u64,
}

/// Appends a `process/output` notification to `out` with the base64 chunk
/// encoded straight into the JSON text.
pub fn encode_output_notification(
    out: &mut String,
    process_id: &str,
    seq: u64,
    stream: StreamKind,
    chunk: &[u8],
) {
    use std::fmt::Write;
    let encoded_len = chunk.len().div_ceil(3) * 4;
    out.reserve(96 + process_id.len() + encoded_len);
    out.push_str(r#"{"method":"process/output","params":{"processId":"#);
    push_json_string(out, process_id);
    let _ = write!(
        out,
        r#","seq":{seq},"stream":"{}","chunk":""#,
        stream.as_str()
    );
    // Encode straight into the message buffer with the SIMD engine.
    let mut bytes = std::mem::take(out).into_bytes();
    let start = bytes.len();
    bytes.resize(start + encoded_len, 0);
    let written = bytes.get_mut(start..).map_or(0, |slot| {
        super::base64().encode_slice(chunk, slot).unwrap_or(0)
    });
    bytes.truncate(start + written);
    bytes.extend_from_slice(b"\"}}");
    // SAFETY: `bytes` was a valid String; what follows `start` is ASCII
    // only (the base64 alphabet, cut after a whole encoded output, then
    // `"}}`), so the whole is still valid UTF-8. Skipping the check saves a
    // pass over every streamed byte.
    *out = unsafe { String::from_utf8_unchecked(bytes) };
}

fn push_json_string(out: &mut String, text: &str) {
    // A &str always serializes.
    if let Ok(quoted) = serde_json::to_string(text) {
        out.push_str(&quoted);
    }
}

fn as_base64<S: serde::Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&super::base64().encode(bytes))
}

fn from_base64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
    let text = Option::<String>::deserialize(deserializer)?.unwrap_or_default();
    base64::engine::general_purpose::STANDARD
        .decode(text.as_bytes())
        .map_err(|err| serde::de::Error::custom(format_args!("invalid base64 chunk: {err}")))
}

fn null_as_default<'de, D: Deserializer<'de>, T: Default + Deserialize<'de>>(
    deserializer: D,
) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_params_a_client_sends_read_back_as_sent() {
        let bare = WriteParams {
            process_id: "p".into(),
            chunk: b"hi\n".to_vec(),
            write_id: None,
            close_stdin: false,
        };
        let wire = serde_json::to_value(&bare).unwrap();
        assert_eq!(wire, serde_json::json!({"processId": "p", "chunk": "aGkK"}));
        let full = WriteParams {
            write_id: Some("7".into()),
            close_stdin: true,
            ..bare
        };
        let back: WriteParams =
            serde_json::from_value(serde_json::to_value(&full).unwrap()).unwrap();
        assert_eq!(
            (back.chunk, back.write_id, back.close_stdin),
            (b"hi\n".to_vec(), Some("7".to_owned()), true)
        );
    }

    #[test]
    fn simd_base64_matches_the_standard_engine_at_every_length() {
        let data: Vec<u8> = (0..=255u8).cycle().take(3 * 1024 + 7).collect();
        for len in (0..64).chain([1023, 1024, 1025, 3000, data.len()]) {
            let mut text = String::new();
            encode_output_notification(&mut text, "p", 1, StreamKind::Pty, &data[..len]);
            let value: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(
                value["params"]["chunk"],
                base64::engine::general_purpose::STANDARD.encode(&data[..len]),
                "{len}"
            );
        }
    }

    #[test]
    fn output_notification_is_valid_json_with_padded_base64() {
        let mut text = String::new();
        encode_output_notification(&mut text, "p\"1", 3, StreamKind::Stdout, b"hello\n");
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"method":"process/output","params":{
                "processId":"p\"1","seq":3,"stream":"stdout","chunk":"aGVsbG8K"}})
        );
    }

    #[test]
    fn start_params_accept_both_dialects_and_reference_nulls() {
        let params: StartParams = serde_json::from_value(serde_json::json!({
            "processId":"p","argv":["true"],"cwd":"file:///tmp","env":{},"tty":false,
            "pipeStdin":null,"arg0":null,"sandbox":null,"envPolicy":null,"managedNetwork":null
        }))
        .unwrap();
        assert_eq!(params.cwd.path(), std::path::Path::new("/tmp"));
        assert!(!params.pipe_stdin);
        let err = serde_json::from_value::<StartParams>(serde_json::json!({
            "processId":"p","argv":["true"],"cwd":"tmp"}))
        .unwrap_err();
        assert!(err.to_string().contains("path `tmp` is not absolute"));
    }

    fn required(schema: &str) -> Vec<String> {
        let schema: Value = serde_json::from_str(schema).unwrap();
        serde_json::from_value(schema["required"].clone()).unwrap()
    }

    fn keys(value: &impl Serialize) -> Vec<String> {
        let text = serde_json::to_string(value).unwrap();
        let object: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
        let mut keys: Vec<String> = object.keys().cloned().collect();
        keys.sort();
        keys
    }

    #[test]
    fn shipped_schemas_match_the_emitted_shapes() {
        let read = ReadResult {
            chunks: vec![],
            next_seq: 1,
            exited: false,
            exit_code: None,
            closed: false,
            failure: None,
            sandbox_denied: false,
            truncated: false,
            network_denials: Vec::new(),
        };
        let mut want = required(include_str!(
            "../../resources/schema/process.read.result.json"
        ));
        want.sort();
        assert_eq!(keys(&read), want);
        let exited = ExitedNotification {
            process_id: "p",
            seq: 1,
            exit_code: 0,
            signal: None,
            sandbox_denied: false,
        };
        let mut want = required(include_str!(
            "../../resources/schema/process.exited.notification.json"
        ));
        want.sort();
        assert_eq!(keys(&exited), want);
    }

    #[test]
    fn write_rejects_invalid_base64() {
        let err = serde_json::from_value::<WriteParams>(
            serde_json::json!({"processId":"p","chunk":"!!"}),
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("invalid base64 chunk"));
    }
}
