//! `http/request` and its `http/request/bodyDelta` notification
//! (docs/protocol.md), in the reference's camelCase shapes.

use serde::{Deserialize, Serialize};

/// `http/request`.
pub const METHOD_HTTP_REQUEST: &str = "http/request";
/// Notification: the next piece of a streamed response body.
pub const NOTIFY_BODY_DELTA: &str = "http/request/bodyDelta";

/// One header, in order (repeats allowed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HttpHeader {
    pub name: String,
    pub value: String,
}

/// Whether redirects are followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum RedirectPolicy {
    /// Up to 10 hops.
    #[default]
    Follow,
    /// The 3xx is the result.
    Stop,
}

/// `http/request` params.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct HttpRequestParams {
    pub method: String,
    pub url: String,
    #[serde(default)]
    pub headers: Vec<HttpHeader>,
    /// Request body, base64; `null` = none.
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(extend("contentEncoding" = "base64")))]
    pub body_base64: Option<String>,
    /// Total deadline (connect, headers and body); absent or `null` = none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub redirect_policy: RedirectPolicy,
    pub request_id: String,
    /// Answer once the headers arrive and send the body as
    /// `http/request/bodyDelta` notifications.
    #[serde(default)]
    pub stream_response: bool,
}

/// `http/request` result.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct HttpRequestResult {
    pub status: u16,
    /// Lowercase names; values that are not UTF-8 are dropped.
    pub headers: Vec<HttpHeader>,
    /// The whole body, base64; `""` when streamed.
    #[cfg_attr(feature = "schema", schemars(extend("contentEncoding" = "base64")))]
    pub body_base64: String,
}

/// `http/request/bodyDelta` notification params.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct BodyDeltaNotification {
    pub request_id: String,
    /// Starts at 1 for each request, +1 per notification.
    pub seq: u64,
    /// At most 1 MiB decoded; `""` in the final notification.
    #[cfg_attr(feature = "schema", schemars(extend("contentEncoding" = "base64")))]
    pub delta_base64: String,
    #[serde(default)]
    pub done: bool,
    /// Why the body ended early (final notification only).
    #[serde(default)]
    pub error: Option<String>,
}
