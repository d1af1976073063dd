//! Prometheus metrics of the long-running modes: one registry per server
//! instance (never a process-wide static), owned by the state of the
//! rendezvous ([`rendezvous::RendezvousMetrics`]) or of the exec-server
//! ([`exec::ExecMetrics`]) and handed down to where things happen, and its
//! rendering as the Prometheus text exposition format (version 0.0.4) for
//! `GET /metrics`. Names carry the `codexbox_` prefix, counters end in
//! `_total`, units are base units, and every label value is a
//! `&'static str` chosen by codexbox, never a path, an id or a host.

pub mod exec;
pub mod rendezvous;

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// The path the figures are served at.
pub const PATH: &str = "/metrics";

/// Makes the series `labels` of `family` exist, at zero, so that its first
/// increment is a change a rate can see.
fn declare<S: Clone + std::hash::Hash + Eq, M>(family: &Family<S, M>, labels: S) {
    let _created = family.get_or_create(&labels);
}

/// `registry` in the text exposition format.
pub fn render(registry: &Registry) -> String {
    let mut text = String::new();
    // Writing to a String cannot fail; an encoder error would leave a
    // partial page, which is still better than none.
    if prometheus_text::encode(&mut text, registry).is_err() {
        tracing::warn!("a metric could not be encoded");
    }
    text
}

/// The HTTP answer carrying `exposition`.
pub fn http_response(exposition: String) -> http::Response<crate::net::http_server::Body> {
    let mut response = http::Response::new(exposition.into());
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(prometheus_text::CONTENT_TYPE),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    response
}
