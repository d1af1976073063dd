//! The Codex JSON-RPC envelope (docs/protocol.md): decoding inbound messages with the
//! input hardening of the reference (duplicate keys, value-count limit, bounded
//! nesting), the shared [`RpcError`] type, and the encoders for responses,
//! errors and notifications. No `"jsonrpc"` member is ever emitted; ids are
//! echoed with their JSON type; an error object is emitted before its id.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::Serialize;
use serde_json::{Map, Value};

/// The error of params given by position (an array).
pub const POSITIONAL_PARAMS: &str = "invalid type: sequence, expected params as an object";

/// At most this many JSON values in one inbound message.
pub const MAX_JSON_VALUES: usize = 256 * 1024;

/// JSON-RPC error codes used by the exec-server.
pub mod code {
    /// Malformed message, handshake gating, bad state.
    pub const INVALID_REQUEST: i64 = -32600;
    /// Unknown request method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Params that do not decode or validate.
    pub const INVALID_PARAMS: i64 = -32602;
    /// Spawn failures and other server-side errors.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// A filesystem object or handle that does not exist.
    pub const NOT_FOUND: i64 = -32004;
    /// Resume of a session attached to another connection.
    pub const SESSION_ALREADY_ATTACHED: i64 = -32010;
}

/// An error answered to a request: `{"code","message"}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} ({code})")]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl RpcError {
    /// An error with an explicit code.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
    /// ‑32600.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(code::INVALID_REQUEST, message)
    }
    /// ‑32601.
    pub fn method_not_found(message: impl Into<String>) -> Self {
        Self::new(code::METHOD_NOT_FOUND, message)
    }
    /// ‑32602.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(code::INVALID_PARAMS, message)
    }
    /// ‑32603.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(code::INTERNAL_ERROR, message)
    }
    /// ‑32004.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(code::NOT_FOUND, message)
    }
    /// ‑32010.
    pub fn session_already_attached(message: impl Into<String>) -> Self {
        Self::new(code::SESSION_ALREADY_ATTACHED, message)
    }
    /// The unknown-method error for `method`, worded as the reference words it.
    pub fn unknown_method(method: &str) -> Self {
        Self::method_not_found(format!(
            "exec-server stub does not implement `{method}` yet"
        ))
    }
}

/// The family of the method a path arrived in. A path this host cannot use
/// (a non-native URI as the fs path, the process cwd, or anywhere in a
/// `sandbox`: an entry, its cwd, a workspace root) is answered, as the
/// reference answers it, with ‑32600 in the `fs/*` methods and ‑32602 in
/// `process/start`. This is the one place that choice is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestFamily {
    /// `fs/*`.
    Filesystem,
    /// `process/start`.
    Process,
}

impl RequestFamily {
    /// The JSON-RPC code of a path error in this family.
    pub const fn path_error_code(self) -> i64 {
        match self {
            RequestFamily::Filesystem => code::INVALID_REQUEST,
            RequestFamily::Process => code::INVALID_PARAMS,
        }
    }

    /// A path error in this family.
    pub fn path_error(self, message: impl Into<String>) -> RpcError {
        RpcError::new(self.path_error_code(), message)
    }
}

/// A request id: a string or a 64-bit integer, echoed with its JSON type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RequestId {
    Int(i64),
    Str(String),
}

impl RequestId {
    /// The id used for errors about messages that could not be parsed.
    pub const MALFORMED: RequestId = RequestId::Int(-1);
}

impl Serialize for RequestId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            RequestId::Int(n) => serializer.serialize_i64(*n),
            RequestId::Str(s) => serializer.serialize_str(s),
        }
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Int(n) => write!(f, "{n}"),
            RequestId::Str(s) => write!(f, "{s:?}"),
        }
    }
}

/// One decoded inbound message.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    Request {
        id: RequestId,
        method: String,
        /// `None` when the member is absent.
        params: Option<Value>,
    },
    Notification {
        method: String,
        params: Option<Value>,
    },
    /// A response or error sent by the client: ignored by the server.
    Response,
}

/// Why an inbound message was malformed; displayed like serde_json errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    #[error("{0}")]
    Json(String),
    #[error("expected a JSON-RPC object, found {0}")]
    NotAnObject(&'static str),
    #[error("invalid type for `{field}`: expected {expected}")]
    BadField {
        field: &'static str,
        expected: &'static str,
    },
    #[error("missing field `error`")]
    MissingError,
    #[error("JSON-RPC message of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
}

/// Decodes one message, enforcing the size limit, duplicate-key rejection, the
/// value-count limit and serde_json's nesting limit.
pub fn decode(bytes: &[u8], max_bytes: usize) -> Result<Incoming, EnvelopeError> {
    if bytes.len() > max_bytes {
        return Err(EnvelopeError::TooLarge {
            size: bytes.len(),
            limit: max_bytes,
        });
    }
    let value = parse_limited(bytes).map_err(|e| EnvelopeError::Json(e.to_string()))?;
    classify(value)
}

/// The id the error about an undecodable message carries (docs/protocol.md): the
/// request's own id when the message was refused only for its size and a
/// scan finds one ([`scan_request_id`]), else [`RequestId::MALFORMED`].
pub fn error_id(bytes: &[u8], err: &EnvelopeError) -> RequestId {
    match err {
        EnvelopeError::TooLarge { .. } => scan_request_id(bytes).unwrap_or(RequestId::MALFORMED),
        _ => RequestId::MALFORMED,
    }
}

/// The `id` of a request that is not decoded in full (it is over the size
/// limit), so that its error can carry it. A single pass over the text that
/// builds nothing: every value but the top-level `id` and `method` is
/// skipped as it is read. `None` unless the text is one JSON object with a
/// string `method` and exactly one `id` that is a string or a 64-bit integer
/// (the values it skips are not checked, neither the UTF-8 of strings nor
/// the range of numbers: the message is refused all the same, only its id
/// is wanted).
pub fn scan_request_id(bytes: &[u8]) -> Option<RequestId> {
    scan_top_level(bytes)
        .filter(|top| top.ids == 1 && top.has_method)
        .and_then(|top| top.id)
}

/// The `id` of a response (one `id`, no `method`), found by the same scan
/// as [`scan_request_id`].
pub fn scan_response_id(bytes: &[u8]) -> Option<RequestId> {
    scan_top_level(bytes)
        .filter(|top| top.ids == 1 && !top.has_method)
        .and_then(|top| top.id)
}

fn scan_top_level(bytes: &[u8]) -> Option<TopLevel> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let top = de::Deserializer::deserialize_map(&mut de, RequestScan).ok()?;
    de.end().ok()?;
    Some(top)
}

/// The answer to a message too large for the transport that would carry it
/// (at most `limit` bytes), e.g. a relay stream: `-32600` with the
/// request's own id when [`scan_request_id`] finds one, else
/// [`RequestId::MALFORMED`], as the server answers what exceeds its own cap.
pub fn refuse_oversize_request(bytes: &[u8], limit: usize, context: &str) -> String {
    let err = EnvelopeError::TooLarge {
        size: bytes.len(),
        limit,
    };
    let id = error_id(bytes, &err);
    encode_error(&id, &RpcError::invalid_request(format!("{context}: {err}")))
}

/// What goes instead of a response too large for the transport that would
/// carry it: an error (`-32603`) for the same id. `None` when the message
/// is no response (nobody waits for it).
pub fn replace_oversize_response(bytes: &[u8], limit: usize, context: &str) -> Option<String> {
    let id = scan_response_id(bytes)?;
    let error = RpcError::internal(format!(
        "{context}: the answer of {} bytes exceeds the limit of {limit} bytes",
        bytes.len()
    ));
    Some(encode_error(&id, &error))
}

/// The top-level members [`scan_request_id`] looks at.
enum ScannedKey {
    Id,
    Method,
    Other,
}

impl<'de> de::Deserialize<'de> for ScannedKey {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = ScannedKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<ScannedKey, E> {
                Ok(match key {
                    "id" => ScannedKey::Id,
                    "method" => ScannedKey::Method,
                    _ => ScannedKey::Other,
                })
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// A request id as [`classify`] accepts it.
struct ScannedId(RequestId);

impl<'de> de::Deserialize<'de> for ScannedId {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct IdVisitor;
        impl Visitor<'_> for IdVisitor {
            type Value = ScannedId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a 64-bit integer")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ScannedId, E> {
                Ok(ScannedId(RequestId::Int(v)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ScannedId, E> {
                i64::try_from(v)
                    .map(|v| ScannedId(RequestId::Int(v)))
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ScannedId, E> {
                Ok(ScannedId(RequestId::Str(v.to_owned())))
            }
        }
        deserializer.deserialize_any(IdVisitor)
    }
}

/// Whether a value is a string, read without keeping it.
struct IsString;

impl<'de> de::Deserialize<'de> for IsString {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StrVisitor;
        impl Visitor<'_> for StrVisitor {
            type Value = IsString;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<IsString, E> {
                Ok(IsString)
            }
        }
        deserializer.deserialize_str(StrVisitor)
    }
}

/// What [`scan_top_level`] found at the top level of a message.
struct TopLevel {
    /// The last `id` seen.
    id: Option<RequestId>,
    /// How many `id` members there were.
    ids: usize,
    has_method: bool,
}

/// The visitor of [`scan_top_level`]'s object.
struct RequestScan;

impl<'de> Visitor<'de> for RequestScan {
    type Value = TopLevel;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut id, mut ids, mut has_method) = (None, 0usize, false);
        while let Some(key) = map.next_key::<ScannedKey>()? {
            match key {
                ScannedKey::Id => {
                    ids += 1;
                    id = Some(map.next_value::<ScannedId>()?.0);
                }
                ScannedKey::Method => {
                    map.next_value::<IsString>()?;
                    has_method = true;
                }
                ScannedKey::Other => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        Ok(TopLevel {
            id,
            ids,
            has_method,
        })
    }
}

/// Parses JSON text into a [`Value`] with the hardening rules.
pub fn parse_limited(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    let counter = Cell::new(0usize);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = LimitedValue { counter: &counter }.deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

fn classify(value: Value) -> Result<Incoming, EnvelopeError> {
    let mut object = match value {
        Value::Object(object) => object,
        Value::Null => return Err(EnvelopeError::NotAnObject("null")),
        Value::Bool(_) => return Err(EnvelopeError::NotAnObject("a boolean")),
        Value::Number(_) => return Err(EnvelopeError::NotAnObject("a number")),
        Value::String(_) => return Err(EnvelopeError::NotAnObject("a string")),
        Value::Array(_) => return Err(EnvelopeError::NotAnObject("an array")),
    };
    let id = match object.remove("id") {
        None => None,
        Some(Value::String(s)) => Some(RequestId::Str(s)),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(n) => Some(RequestId::Int(n)),
            None => {
                return Err(EnvelopeError::BadField {
                    field: "id",
                    expected: "a string or a 64-bit integer",
                })
            }
        },
        Some(_) => {
            return Err(EnvelopeError::BadField {
                field: "id",
                expected: "a string or a 64-bit integer",
            })
        }
    };
    let params = object.remove("params");
    match object.remove("method") {
        Some(Value::String(method)) => Ok(match id {
            Some(id) => Incoming::Request { id, method, params },
            None => Incoming::Notification { method, params },
        }),
        Some(_) => Err(EnvelopeError::BadField {
            field: "method",
            expected: "a string",
        }),
        None if object.contains_key("result") || object.contains_key("error") => {
            Ok(Incoming::Response)
        }
        None => Err(EnvelopeError::MissingError),
    }
}

/// A [`Value`] deserializer that counts values and refuses duplicate keys.
struct LimitedValue<'a> {
    counter: &'a Cell<usize>,
}

impl LimitedValue<'_> {
    fn count<E: de::Error>(&self) -> Result<(), E> {
        let n = self.counter.get() + 1;
        if n > MAX_JSON_VALUES {
            return Err(E::custom(format_args!(
                "JSON-RPC message exceeds the limit of {MAX_JSON_VALUES} JSON values"
            )));
        }
        self.counter.set(n);
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for LimitedValue<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for LimitedValue<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.count()?;
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.count()?;
        Ok(Value::from(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.count()?;
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.count()?;
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.count()?;
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.count()?;
        Ok(Value::String(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.count()?;
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.count()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(LimitedValue {
            counter: self.counter,
        })? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.count()?;
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "duplicate JSON object key `{key}`"
                )));
            }
            let value = map.next_value_seed(LimitedValue {
                counter: self.counter,
            })?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// `{"id":…,"result":…}` as compact JSON text.
pub fn encode_response(id: &RequestId, result: &Value) -> String {
    #[derive(Serialize)]
    struct Response<'a> {
        id: &'a RequestId,
        result: &'a Value,
    }
    to_text(&Response { id, result })
}

/// `{"id":…,"result":<raw>}` where `raw` is already JSON text (keeps the
/// result's own key order).
pub fn encode_response_raw(id: &RequestId, raw_result: &str) -> String {
    let id = to_text(id);
    let mut out = String::with_capacity(raw_result.len() + id.len() + 20);
    out.push_str("{\"id\":");
    out.push_str(&id);
    out.push_str(",\"result\":");
    out.push_str(raw_result);
    out.push('}');
    out
}

/// `{"error":{"code","message"},"id":…}` as compact JSON text.
pub fn encode_error(id: &RequestId, error: &RpcError) -> String {
    #[derive(Serialize)]
    struct ErrorObject<'a> {
        code: i64,
        message: &'a str,
    }
    #[derive(Serialize)]
    struct ErrorMessage<'a> {
        error: ErrorObject<'a>,
        id: &'a RequestId,
    }
    to_text(&ErrorMessage {
        error: ErrorObject {
            code: error.code,
            message: &error.message,
        },
        id,
    })
}

/// `{"method":…,"params":…}` as compact JSON text.
pub fn encode_notification<P: Serialize>(method: &str, params: &P) -> String {
    #[derive(Serialize)]
    struct Notification<'a, P> {
        method: &'a str,
        params: &'a P,
    }
    to_text(&Notification { method, params })
}

fn to_text<T: Serialize>(value: &T) -> String {
    // Serializing these types into a String cannot fail: every map key is a string.
    serde_json::to_string(value).unwrap_or_else(|_| String::from("{}"))
}

/// Decodes request params: absent means `null`, and a failure on exactly `{}`
/// is retried as `null`, so unit-param methods accept absent, `null` and `{}`.
/// Params by position (an array) are refused: every method's params are an
/// object, as the schemas say (serde's derived structs would take them).
pub fn decode_params<T: serde::de::DeserializeOwned>(params: Option<Value>) -> Result<T, RpcError> {
    let params = params.unwrap_or(Value::Null);
    if params.is_array() {
        return Err(RpcError::invalid_params(POSITIONAL_PARAMS));
    }
    let is_empty_object = matches!(&params, Value::Object(o) if o.is_empty());
    match serde_json::from_value::<T>(params) {
        Ok(value) => Ok(value),
        Err(err) if is_empty_object => serde_json::from_value::<T>(Value::Null)
            .map_err(|_| RpcError::invalid_params(err.to_string())),
        Err(err) => Err(RpcError::invalid_params(err.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 1 << 20;

    #[test]
    fn requests_and_notifications_are_classified() {
        assert_eq!(
            decode(br#"{"jsonrpc":"2.0","id":"a","method":"m"}"#, MAX).unwrap(),
            Incoming::Request {
                id: RequestId::Str("a".into()),
                method: "m".into(),
                params: None
            }
        );
        assert_eq!(
            decode(br#"{"method":"initialized","params":{}}"#, MAX).unwrap(),
            Incoming::Notification {
                method: "initialized".into(),
                params: Some(serde_json::json!({}))
            }
        );
        assert_eq!(
            decode(br#"{"id":3,"result":{}}"#, MAX).unwrap(),
            Incoming::Response
        );
    }

    #[test]
    fn duplicate_keys_are_rejected_with_position() {
        let err = decode(br#"{"id":1,"method":"a","method":"b"}"#, MAX).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("duplicate JSON object key `method` at line 1 column"),
            "{err}"
        );
    }

    #[test]
    fn value_limit_is_enforced() {
        let mut text = String::from("[");
        for _ in 0..MAX_JSON_VALUES {
            text.push_str("0,");
        }
        text.push_str("0]");
        let err = decode(text.as_bytes(), usize::MAX).unwrap_err();
        assert!(err
            .to_string()
            .contains("exceeds the limit of 262144 JSON values"));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let text = "[".repeat(100_000);
        let err = decode(text.as_bytes(), MAX).unwrap_err();
        assert!(err.to_string().contains("recursion limit"), "{err}");
    }

    #[test]
    fn float_null_and_huge_ids_are_malformed() {
        for text in [
            r#"{"id":1.5,"method":"m"}"#,
            r#"{"id":null,"method":"m"}"#,
            r#"{"id":18446744073709551615,"method":"m"}"#,
        ] {
            assert!(decode(text.as_bytes(), MAX).is_err(), "{text}");
        }
        assert!(decode(b"not-json", MAX).is_err());
        assert!(decode(b"[1]", MAX).is_err());
        assert_eq!(decode(b"{}", MAX).unwrap_err(), EnvelopeError::MissingError);
        assert!(matches!(
            decode(b"{}", 1),
            Err(EnvelopeError::TooLarge { .. })
        ));
    }

    #[test]
    fn the_id_of_an_undecoded_request_is_found_by_a_scan() {
        let big = "A".repeat(100_000);
        let scan = |text: String| scan_request_id(text.as_bytes());
        assert_eq!(
            scan(format!(
                r#"{{"method":"fs/writeFile","params":{{"dataBase64":"{big}","x":[1,{{"id":9}}]}},"id":"req-7"}}"#
            )),
            Some(RequestId::Str("req-7".into()))
        );
        assert_eq!(
            scan(format!(
                r#"{{"id":42,"params":{{"d":"{big}"}},"method":"m"}}"#
            )),
            Some(RequestId::Int(42))
        );
        assert_eq!(
            scan(r#"{"\u0069d":-3,"method":"m"}"#.to_owned()),
            Some(RequestId::Int(-3))
        );
        for bad in [
            r#"{"id":1,"params":{}}"#,             // a notification-less response
            r#"{"method":"m","params":{"id":1}}"#, // only a nested id
            r#"{"id":1,"id":2,"method":"m"}"#,     // duplicate
            r#"{"id":1.5,"method":"m"}"#,          // not an id
            r#"{"id":18446744073709551615,"method":"m"}"#,
            r#"{"id":null,"method":"m"}"#,
            r#"{"id":1,"method":7}"#,
            r#"{"id":1,"method":"m","params":"#, // truncated
            r#"{"id":1,"method":"m"} trailing"#,
            r#"[{"id":1,"method":"m"}]"#,
        ] {
            assert_eq!(scan(bad.to_owned()), None, "{bad}");
        }
    }

    #[test]
    fn oversize_requests_and_responses_become_errors_for_their_ids() {
        let big = "A".repeat(1000);
        let request = format!(r#"{{"id":"w-1","method":"fs/writeFile","params":{{"d":"{big}"}}}}"#);
        let refused = refuse_oversize_request(request.as_bytes(), 100, "relay");
        let refused: Value = serde_json::from_str(&refused).unwrap();
        assert_eq!(refused["id"], "w-1");
        assert_eq!(refused["error"]["code"], code::INVALID_REQUEST);
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("relay: JSON-RPC message of"),
            "{message}"
        );
        assert!(
            message.contains("exceeds the limit of 100 bytes"),
            "{message}"
        );
        let unknown = refuse_oversize_request(big.as_bytes(), 100, "relay");
        assert!(unknown.ends_with(r#""id":-1}"#), "{unknown}");

        let response = format!(r#"{{"id":7,"result":{{"dataBase64":"{big}"}}}}"#);
        let replaced = replace_oversize_response(response.as_bytes(), 100, "relay").unwrap();
        let replaced: Value = serde_json::from_str(&replaced).unwrap();
        assert_eq!(replaced["id"], 7);
        assert_eq!(replaced["error"]["code"], code::INTERNAL_ERROR);
        assert_eq!(scan_response_id(request.as_bytes()), None, "a request");
        let notification = format!(r#"{{"method":"process/output","params":{{"d":"{big}"}}}}"#);
        assert_eq!(
            replace_oversize_response(notification.as_bytes(), 100, "relay"),
            None
        );
    }

    #[test]
    fn errors_are_emitted_error_first_and_ids_keep_their_type() {
        assert_eq!(
            encode_error(&RequestId::MALFORMED, &RpcError::invalid_request("x")),
            r#"{"error":{"code":-32600,"message":"x"},"id":-1}"#
        );
        assert_eq!(
            encode_response(&RequestId::Str("7".into()), &serde_json::json!({})),
            r#"{"id":"7","result":{}}"#
        );
    }

    #[test]
    fn empty_object_params_fall_back_to_null() {
        let unit: Option<u8> = decode_params(Some(serde_json::json!({}))).unwrap();
        assert_eq!(unit, None);
        let err = decode_params::<u8>(None).unwrap_err();
        assert_eq!(err.code, code::INVALID_PARAMS);
    }
}
