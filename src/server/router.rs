//! Inbound messages and the method table: decodes each message (a message
//! refused only for its size still answers its own id when a scan finds
//! one), routes requests in arrival order, decodes params, applies the handshake gate in the
//! reference's order (unknown method, then params, then gate), runs the
//! handler and sends the answer. Params are decoded, and answers typed,
//! through the method table (`protocol::method`), the same types the
//! shipped schemas are generated from. `fs/*` methods go to `fs_methods`.

use std::sync::Arc;

use serde_json::Value;

use super::connection::Connection;
use super::fs_methods;
use super::handlers;
use super::reply::{to_json, Deferred};
use super::wire_trace;
use crate::fs::discovery;
use crate::protocol::capability::METHOD_DISCOVER;
use crate::protocol::envelope::{self, decode_params, encode_error, Incoming};
use crate::protocol::environment::{METHOD_INFO, METHOD_STATUS};
use crate::protocol::fs::EmptyResponse;
use crate::protocol::http::METHOD_HTTP_REQUEST;
use crate::protocol::method::{
    CapabilityRootsDiscover, EnvironmentInfo, EnvironmentStatus, HttpRequest, Initialize, Method,
    ProcessRead, ProcessResize, ProcessSignal, ProcessStart, ProcessTerminate, ProcessWrite,
    SessionList,
};
use crate::protocol::process::{
    METHOD_READ, METHOD_RESIZE, METHOD_SIGNAL, METHOD_START, METHOD_TERMINATE, METHOD_WRITE,
};
use crate::protocol::session::METHOD_LIST as METHOD_SESSION_LIST;
use crate::protocol::{RequestId, RpcError, METHOD_INITIALIZE};

/// Gate family of the process methods.
const FAMILY_EXEC: &str = "exec";
/// Gate family of `http/request`.
const FAMILY_HTTP: &str = "http";
/// Gate family of `fs/*`.
const FAMILY_FS: &str = "filesystem";
/// Gate family of `capabilityRoots/discoverV1`.
const FAMILY_CAPABILITY: &str = "capability discovery";
/// Gate family of `session/*`.
const FAMILY_SESSION: &str = "session";

/// Handles one inbound message. Returns when its effect has been applied
/// (requests that wait are answered later from their own task).
pub async fn handle_message(conn: &Arc<Connection>, bytes: &[u8]) {
    wire_trace::trace(conn.id, wire_trace::Direction::In, bytes);
    match envelope::decode(bytes, conn.shared.config.max_message_bytes) {
        Ok(Incoming::Request { id, method, params }) => dispatch(conn, id, method, params).await,
        Ok(Incoming::Notification { method, .. }) => conn.notification(&method).await,
        Ok(Incoming::Response) => {}
        // A message too large to decode still answers its sender's id.
        Err(err) => {
            let id = envelope::error_id(bytes, &err);
            let error = RpcError::invalid_request(format!("{}: {err}", conn.parse_error_prefix()));
            conn.send(encode_error(&id, &error)).await;
        }
    }
}

/// Handles one request and answers it (now, or later for a waiting request).
pub async fn dispatch(
    conn: &Arc<Connection>,
    id: RequestId,
    method: String,
    params: Option<Value>,
) {
    match route(conn, &id, &method, params).await {
        Ok(Deferred::Now(result)) => conn.reply_raw(&id, result).await,
        Ok(Deferred::Later) => {}
        Err(error) => conn.reply(&id, Err(error)).await,
    }
}

fn to_value<T: serde::Serialize>(value: T) -> Result<Deferred, RpcError> {
    to_json(&value).map(Deferred::Now)
}

/// The params of method `M`, decoded as the method table says.
fn decode<M: Method>(params: Option<Value>) -> Result<M::Params, RpcError> {
    decode_params::<M::Params>(params)
}

/// The answer of method `M`, of the type the method table says.
fn answer<M: Method>(result: M::Result) -> Result<Deferred, RpcError> {
    to_value(result)
}

async fn route(
    conn: &Arc<Connection>,
    id: &RequestId,
    method: &str,
    params: Option<Value>,
) -> Result<Deferred, RpcError> {
    match method {
        METHOD_INITIALIZE => {
            let params = decode::<Initialize>(params)?;
            answer::<Initialize>(handlers::initialize(conn, params).await?)
        }
        METHOD_SESSION_LIST => {
            decode::<SessionList>(params)?;
            conn.gate(FAMILY_SESSION)?;
            answer::<SessionList>(handlers::list_sessions(conn))
        }
        METHOD_INFO => {
            decode::<EnvironmentInfo>(params)?;
            conn.gate("environment info")?;
            answer::<EnvironmentInfo>(handlers::environment_info())
        }
        METHOD_STATUS => {
            decode::<EnvironmentStatus>(params)?;
            conn.gate("environment status")?;
            answer::<EnvironmentStatus>(handlers::environment_status())
        }
        METHOD_START => {
            let params = decode::<ProcessStart>(params)?;
            let (session, _) = conn.gate(FAMILY_EXEC)?;
            answer::<ProcessStart>(handlers::start(conn, &session, params).await?)
        }
        METHOD_READ => {
            let params = decode::<ProcessRead>(params)?;
            let (session, epoch) = conn.gate(FAMILY_EXEC)?;
            handlers::read(conn, id, session, epoch, params).await
        }
        METHOD_WRITE => {
            let params = decode::<ProcessWrite>(params)?;
            let (session, _) = conn.gate(FAMILY_EXEC)?;
            answer::<ProcessWrite>(handlers::write(&session, params).await?)
        }
        METHOD_SIGNAL => {
            let params = decode::<ProcessSignal>(params)?;
            let (session, _) = conn.gate(FAMILY_EXEC)?;
            handlers::signal(&session, params)?;
            answer::<ProcessSignal>(EmptyResponse {})
        }
        METHOD_RESIZE => {
            let params = decode::<ProcessResize>(params)?;
            let (session, _) = conn.gate(FAMILY_EXEC)?;
            handlers::resize(&session, params)?;
            answer::<ProcessResize>(EmptyResponse {})
        }
        METHOD_TERMINATE => {
            let params = decode::<ProcessTerminate>(params)?;
            let (session, _) = conn.gate(FAMILY_EXEC)?;
            answer::<ProcessTerminate>(handlers::terminate(&session, params))
        }
        METHOD_HTTP_REQUEST => {
            let params = decode::<HttpRequest>(params)?;
            conn.gate(FAMILY_HTTP)?;
            super::http_request::http_request(conn, id, params).await
        }
        METHOD_DISCOVER => {
            let params = decode::<CapabilityRootsDiscover>(params)?;
            conn.gate(FAMILY_CAPABILITY)?;
            let discovered = tokio::task::spawn_blocking(move || discovery::discover(params))
                .await
                .map_err(|err| RpcError::internal(format!("capability discovery failed: {err}")))?
                .map_err(|err| RpcError::invalid_request(err.to_string()))?;
            answer::<CapabilityRootsDiscover>(discovered)
        }
        method if fs_methods::is_fs_method(method) => {
            conn.gate(FAMILY_FS)?;
            let params = params.unwrap_or(Value::Null);
            let result = fs_methods::dispatch(&conn.fs, method, params).await;
            if let Some(&name) = fs_methods::METHODS.iter().find(|&&m| m == method) {
                conn.shared.metrics.fs_call(name, result.is_ok());
            }
            to_value(result?)
        }
        method => Err(RpcError::unknown_method(method)),
    }
}
