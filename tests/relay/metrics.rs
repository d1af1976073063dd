//! `GET /metrics` of the real `codexbox rendezvous`: the figures move by
//! exactly what a registration, a command through the relay and refused
//! relay sockets did; the page follows the text exposition grammar; and
//! only the tokens it names read it: a `* metrics` line of a token file,
//! or else one of the tokens it generated for the user's own peers.

use crate::common::metrics::{get, request, scrape, scrape_until, Exposition};
use crate::common::relay::{Executor, Rendezvous};
use crate::common::shell::run;

const CALLS: &str = "codexbox_rendezvous_registry_calls_total";
const HANDSHAKE_FAILURES: &str = "codexbox_rendezvous_handshake_failures_total";

fn calls(page: &Exposition, call: &str, result: &str) -> f64 {
    page.value(CALLS, &[("call", call), ("result", result)])
}

/// The harness token the rendezvous generated and published.
fn generated_token(rendezvous: &Rendezvous) -> String {
    use codexbox::listener_token::{find_for, Holder};
    find_for(rendezvous.addr(), Holder::Harness).expect("a published harness token")
}

#[test]
fn the_rendezvous_counts_registrations_streams_and_refusals() {
    let rendezvous = Rendezvous::start(&[]);
    let token = generated_token(&rendezvous);
    let token = Some(token.as_str());
    assert_eq!(get(rendezvous.addr(), "/metrics", None).0, 401);
    let empty = scrape(rendezvous.addr(), token);
    assert_eq!(empty.type_of(CALLS), Some("counter"));
    assert_eq!(
        empty.type_of("codexbox_rendezvous_executors_connected"),
        Some("gauge")
    );
    assert_eq!(calls(&empty, "register", "ok"), 0.0);

    let _executor = Executor::start(&rendezvous.url, "env-m", &[], &[]);
    let registered = scrape_until(rendezvous.addr(), token, |page| {
        page.value("codexbox_rendezvous_executors_connected", &[]) == 1.0
    });
    assert_eq!(calls(&registered, "register", "ok"), 1.0);
    assert_eq!(
        registered.value("codexbox_rendezvous_environments", &[]),
        1.0
    );

    let through = run(
        &[
            "exec",
            "--registry",
            &rendezvous.url,
            "--environment-id",
            "env-m",
            "--",
            "printf",
            "hello",
        ],
        None,
    );
    assert_eq!(through.code, 0, "{through:?}");
    assert_eq!(through.stdout_text(), "hello");
    // The harness is gone once its stream is: nothing active or held.
    let after = scrape_until(rendezvous.addr(), token, |page| {
        page.value("codexbox_rendezvous_streams", &[("state", "active")]) == 0.0
            && page.value("codexbox_rendezvous_streams", &[("state", "held")]) == 0.0
    });
    assert_eq!(calls(&after, "register", "ok"), 1.0);
    assert_eq!(calls(&after, "connect", "ok"), 1.0);
    // The executor checked the one harness key it was shown.
    assert_eq!(calls(&after, "validate", "ok"), 1.0);
    let bytes = |direction| {
        after.value(
            "codexbox_rendezvous_relay_bytes_total",
            &[("direction", direction)],
        )
    };
    assert!(bytes("to_executor") > 0.0, "{}", after.text());
    // The output came back, inside Noise records.
    assert!(
        bytes("to_harness") > "hello".len() as f64,
        "{}",
        after.text()
    );

    // A connect whose body is not JSON.
    let (status, _) = request(
        rendezvous.addr(),
        "POST",
        "/cloud/environment/env-m/connect",
        token,
        "{",
    );
    assert_eq!(status, 400);
    let refused = scrape(rendezvous.addr(), token);
    assert_eq!(calls(&refused, "connect", "invalid_request"), 1.0);
    assert_eq!(calls(&refused, "connect", "ok"), 1.0);

    // Relay sockets with a missing or a forged signature.
    let (status, _) = get(rendezvous.addr(), "/relay", None);
    assert_eq!(status, 400);
    let forged = "/relay?role=environment&env=env-m&reg=r&exp=99999999999&sig=AAAA";
    let (status, _) = get(rendezvous.addr(), forged, None);
    assert_eq!(status, 401);
    let failures = scrape(rendezvous.addr(), token);
    assert_eq!(
        failures.value(HANDSHAKE_FAILURES, &[("reason", "url_missing")]),
        1.0
    );
    assert_eq!(
        failures.value(HANDSHAKE_FAILURES, &[("reason", "url_forged")]),
        1.0
    );
    assert_eq!(
        failures.value("codexbox_rendezvous_executors_connected", &[]),
        1.0
    );
}

#[test]
fn without_any_token_the_figures_are_open_like_every_call() {
    let rendezvous = Rendezvous::start(&["--insecure-no-auth"]);
    let page = scrape(rendezvous.addr(), None);
    assert_eq!(page.value("codexbox_rendezvous_environments", &[]), 0.0);
}

#[test]
fn with_a_token_file_only_a_metrics_token_reads_the_figures() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        "exec-tok * executor\nops-tok * both\nscoped env-1 metrics\nscrape-tok * metrics\n",
    )
    .expect("write tokens");
    let rendezvous = Rendezvous::start(&["--tokens", tokens.to_str().expect("utf-8")]);
    let addr = rendezvous.addr();
    assert_eq!(get(addr, "/metrics", None).0, 401);
    assert_eq!(get(addr, "/metrics", Some("nobody")).0, 401);
    assert_eq!(get(addr, "/metrics", Some("exec-tok")).0, 403);
    assert_eq!(get(addr, "/metrics", Some("ops-tok")).0, 403);
    assert_eq!(get(addr, "/metrics", Some("scoped")).0, 403);
    let page = scrape(addr, Some("scrape-tok"));
    assert_eq!(page.value("codexbox_rendezvous_environments", &[]), 0.0);
    // The readiness probe stays open.
    assert_eq!(get(addr, "/readyz", None).0, 200);
    // A metrics token registers nothing.
    let (status, _) = request(
        addr,
        "POST",
        "/cloud/environment/env-1/register",
        Some("scrape-tok"),
        "{}",
    );
    assert_eq!(status, 403);
    let after = scrape(addr, Some("scrape-tok"));
    assert_eq!(
        calls(&after, "register", "forbidden"),
        1.0,
        "{}",
        after.text()
    );
}

#[test]
fn the_exposition_reader_refuses_what_the_grammar_refuses() {
    let good = "# HELP codexbox_x_total X.\n# TYPE codexbox_x_total counter\ncodexbox_x_total{a=\"q\\\"\\\\\"} 2\n";
    let parsed = Exposition::parse(good);
    assert_eq!(parsed.value("codexbox_x_total", &[("a", "q\"\\")]), 2.0);
    for bad in [
        "codexbox_x_total 1\n# TYPE codexbox_x_total counter\n",
        "# TYPE codexbox_x counter\n",
        "# TYPE codexbox_x_total counter\ncodexbox_x_total{a=\"1} 1\n",
        "# TYPE codexbox_x_total counter\ncodexbox_x_total one\n",
        "# TYPE codexbox_x_total counter\ncodexbox_x_total{0a=\"1\"} 1\n",
    ] {
        assert!(
            std::panic::catch_unwind(|| Exposition::parse(bad)).is_err(),
            "accepted {bad:?}"
        );
    }
}
