//! The fleet manifests (`deploy/kubernetes`): rendered (`kubectl kustomize`
//! when installed, and always the built-in renderer of
//! `scripts/check-manifests`, which must agree with it), every object
//! validated offline against the Kubernetes schemas (kubernetes-validate,
//! strict; the ServiceMonitor against the script's subset of its CRD), the
//! Pod Security `restricted` rules checked object by object, the
//! replicas, rollout, disruption budget, hashing and scraping settings, and
//! the manifests' own command lines and Secret run for real: a rendezvous
//! with the Secret's token file and the Deployment's flags, an executor
//! with the executors' token and flags, a command through them with the
//! harness token, and a scrape with the metrics token. The plain HAProxy
//! and nginx configurations (`deploy/haproxy`, `deploy/nginx`) pass their
//! own checkers (`haproxy -c`, `nginx -t`).

use std::process::Command;

use crate::common::client::BIN;
use crate::common::relay::{Executor, Rendezvous};
use crate::common::shell::run;
use serde_json::Value;

const BASE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/kubernetes");
const BUBBLEWRAP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/kubernetes/bubblewrap");
const MONITORING: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/kubernetes/monitoring");
const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy");

/// The rendered and validated objects, or `None` (a loud skip) when the
/// validator is not installed. CI installs it, so there a missing
/// validator fails.
fn check(directory: &str, renderer: &str) -> Option<Vec<Value>> {
    let out = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/check-manifests"
    ))
    .args([directory, "--renderer", renderer])
    .output()
    .expect("run scripts/check-manifests (python3)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => {}
        Some(3) => {
            crate::common::host::host_has("the manifest validator", Err(stderr.trim().to_owned()));
            return None;
        }
        other => panic!("check-manifests {directory} --renderer {renderer}: {other:?}\n{stderr}"),
    }
    let objects: Vec<Value> = serde_json::from_slice(&out.stdout).expect("a JSON array");
    Some(objects)
}

fn have_kubectl() -> bool {
    Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|out| out.status.success())
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind}/{name}"))
}

fn sorted(mut objects: Vec<Value>) -> Vec<Value> {
    objects.sort_by_key(|o| format!("{}/{}", o["kind"], o["metadata"]["name"]));
    objects
}

fn args_of(deployment: &Value) -> Vec<String> {
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string arg").to_owned())
        .collect()
}

fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .find_map(|a| a.strip_prefix(&format!("{name}=")))
}

/// The `restricted` Pod Security Standard, as far as these pods go.
fn assert_restricted(pod: &Value, what: &str, seccomp: bool) {
    let security = &pod["securityContext"];
    assert_eq!(security["runAsNonRoot"], true, "{what}");
    assert_ne!(security["runAsUser"], 0, "{what}");
    if seccomp {
        assert_eq!(
            security["seccompProfile"]["type"], "RuntimeDefault",
            "{what}"
        );
    } else {
        assert!(security.get("seccompProfile").is_none(), "{what}");
    }
    for forbidden in ["hostNetwork", "hostPID", "hostIPC"] {
        assert!(pod.get(forbidden).is_none(), "{what}: {forbidden}");
    }
    for volume in pod["volumes"].as_array().expect("volumes") {
        assert!(
            volume.get("secret").is_some() || volume.get("emptyDir").is_some(),
            "{what}: volume {volume}"
        );
    }
    for container in pod["containers"].as_array().expect("containers") {
        let security = &container["securityContext"];
        assert_eq!(security["allowPrivilegeEscalation"], false, "{what}");
        assert_eq!(
            security["capabilities"]["drop"],
            serde_json::json!(["ALL"]),
            "{what}"
        );
        assert!(security.get("privileged").is_none(), "{what}");
        assert!(security["capabilities"].get("add").is_none(), "{what}");
    }
}

#[test]
fn the_manifests_are_valid_kubernetes_objects_under_pod_security() {
    let Some(base) = check(BASE, "builtin") else {
        return;
    };
    let Some(bubblewrap) = check(BUBBLEWRAP, "builtin") else {
        return;
    };
    let Some(monitoring) = check(MONITORING, "builtin") else {
        return;
    };
    if have_kubectl() {
        // The built-in renderer is only trusted because it agrees with kustomize.
        for (directory, built) in [
            (BASE, &base),
            (BUBBLEWRAP, &bubblewrap),
            (MONITORING, &monitoring),
        ] {
            let by_kubectl = check(directory, "kubectl").expect("validator present");
            assert_eq!(sorted(by_kubectl), sorted(built.clone()), "{directory}");
        }
    } else {
        eprintln!("NOTE: kubectl is not installed; the built-in renderer alone was used");
    }
    let namespace = find(&base, "Namespace", "codexbox");
    assert_eq!(
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    for object in &base {
        if object["kind"] != "Namespace" {
            assert_eq!(object["metadata"]["namespace"], "codexbox", "{object}");
        }
    }

    // The rendezvous: replicas rolled one at a time without dropping below
    // the count, at least one kept through voluntary disruptions, ready on
    // /readyz at the port it listens on.
    let rendezvous = find(&base, "Deployment", "codexbox-rendezvous");
    assert!(rendezvous["spec"]["replicas"].as_u64() >= Some(2));
    let strategy = &rendezvous["spec"]["strategy"];
    assert_eq!(strategy["type"], "RollingUpdate");
    assert_eq!(strategy["rollingUpdate"]["maxSurge"], 1);
    assert!(
        [0, 1].contains(
            &strategy["rollingUpdate"]["maxUnavailable"]
                .as_u64()
                .unwrap_or(9)
        ),
        "{strategy}"
    );
    let budget = find(&base, "PodDisruptionBudget", "codexbox-rendezvous");
    assert_eq!(budget["spec"]["minAvailable"], 1);
    assert_eq!(budget["spec"]["selector"], rendezvous["spec"]["selector"]);
    let pod = &rendezvous["spec"]["template"]["spec"];
    assert_restricted(pod, "rendezvous", true);
    let container = &pod["containers"][0];
    let args = args_of(rendezvous);
    assert_eq!(args[0], "rendezvous");
    assert_eq!(flag(&args, "--listen"), Some("0.0.0.0:8080"));
    assert_eq!(container["ports"][0]["containerPort"], 8080);
    assert_eq!(container["ports"][0]["name"], "http");
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(container[probe]["httpGet"]["path"], "/readyz", "{probe}");
        assert_eq!(container[probe]["httpGet"]["port"], "http", "{probe}");
    }
    // Every replica signs with the key of one Secret, mounted as a file.
    assert_eq!(
        flag(&args, "--signing-key-file"),
        Some("/etc/codexbox/signing-key")
    );
    let mounted = |path: &str| {
        let mount = container["volumeMounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .find(|m| m["mountPath"] == path)
            .unwrap_or_else(|| panic!("nothing mounted at {path}"));
        let volume = pod["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .find(|v| v["name"] == mount["name"])
            .expect("the mount's volume");
        let secret = &volume["secret"];
        let found = find(
            &base,
            "Secret",
            secret["secretName"].as_str().expect("secret"),
        );
        for item in secret["items"].as_array().expect("items") {
            assert!(found["stringData"]
                .get(item["key"].as_str().expect("key"))
                .is_some());
        }
        (mount.clone(), secret.clone())
    };
    let (key_mount, key_secret) = mounted("/etc/codexbox/signing-key");
    assert_eq!(key_mount["subPath"], key_secret["items"][0]["path"]);
    let tokens_path = flag(&args, "--tokens").expect("--tokens");
    let (tokens_dir, tokens_file) = tokens_path.rsplit_once('/').expect("a path");
    let (_, tokens_secret) = mounted(tokens_dir);
    assert_eq!(tokens_secret["items"][0]["path"], tokens_file);
    // Scraped: by annotation, and by the ServiceMonitor with the metrics token.
    let annotations = &rendezvous["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/path"], "/metrics");
    assert_eq!(
        annotations["prometheus.io/port"],
        container["ports"][0]["containerPort"].to_string()
    );
    let monitor = find(&monitoring, "ServiceMonitor", "codexbox-rendezvous");
    assert_eq!(monitor["metadata"]["namespace"], "codexbox");
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], "http");
    assert_eq!(endpoint["path"], "/metrics");
    let credentials = &endpoint["authorization"]["credentials"];
    let tokens = find(&base, "Secret", credentials["name"].as_str().expect("name"));
    let metrics_token = tokens["stringData"][credentials["key"].as_str().expect("key")]
        .as_str()
        .expect("the metrics token");
    assert!(
        tokens["stringData"]["tokens"]
            .as_str()
            .expect("tokens")
            .lines()
            .any(|line| line.split_whitespace().collect::<Vec<_>>()
                == [metrics_token, "*", "metrics"]),
        "no `* metrics` line for the ServiceMonitor's token"
    );
    let service = find(&base, "Service", "codexbox-rendezvous");
    assert_eq!(
        service["spec"]["selector"],
        rendezvous["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(
        monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
        service["metadata"]["labels"]["app.kubernetes.io/name"]
    );
    assert_eq!(service["spec"]["ports"][0]["name"], "http");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
    let public = flag(&args, "--public-url").expect("--public-url");
    assert!(public.starts_with("https://"), "{public}");
    let ingress = find(&base, "Ingress", "codexbox-rendezvous");
    // ingress-nginx hashes on the variable the snippet sets to the first
    // three path segments.
    let ingress_annotations = &ingress["metadata"]["annotations"];
    let hashed = ingress_annotations["nginx.ingress.kubernetes.io/upstream-hash-by"]
        .as_str()
        .expect("upstream-hash-by");
    let snippet = ingress_annotations["nginx.ingress.kubernetes.io/configuration-snippet"]
        .as_str()
        .expect("configuration-snippet");
    assert!(snippet.contains(&format!("set {hashed} $1;")), "{snippet}");
    assert!(snippet.contains(r#""^(/[^/]*/[^/]*/[^/]*)""#), "{snippet}");
    assert_eq!(
        format!(
            "https://{}",
            ingress["spec"]["rules"][0]["host"].as_str().unwrap_or("")
        ),
        public
    );

    // Executors: registering with --remote over https, draining within
    // the pod's grace period, their token from the Secret.
    let executor = find(&base, "Deployment", "codexbox-executor");
    let pod = &executor["spec"]["template"]["spec"];
    assert_restricted(pod, "executor", true);
    let args = args_of(executor);
    assert_eq!(args[0], "exec-server");
    assert_eq!(flag(&args, "--remote"), Some(public));
    assert!(args.contains(&"--use-agent-identity-auth".to_owned()));
    assert_eq!(flag(&args, "--environment-id"), Some("$(POD_NAME)"));
    let drain: u64 = flag(&args, "--drain-grace-secs")
        .and_then(|s| s.parse().ok())
        .expect("--drain-grace-secs");
    let grace = pod["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("grace period");
    assert!(
        drain > 0 && grace > drain + 5,
        "drain {drain} s must fit in the pod's {grace} s"
    );
    let env = pod["containers"][0]["env"].as_array().expect("env");
    let token = env
        .iter()
        .find(|e| e["name"] == "CODEX_ACCESS_TOKEN")
        .expect("token variable");
    let secret_ref = &token["valueFrom"]["secretKeyRef"];
    let secret = find(
        &base,
        "Secret",
        secret_ref["name"].as_str().expect("secret name"),
    );
    assert!(secret["stringData"]
        .get(secret_ref["key"].as_str().expect("key"))
        .is_some());
    assert!(env
        .iter()
        .any(|e| e["name"] == "POD_NAME"
            && e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"));

    // The bubblewrap overlay: the same objects, but the executors without
    // a seccomp profile of their own, under `baseline`.
    let overlay_executor = find(&bubblewrap, "Deployment", "codexbox-executor");
    assert_restricted(
        &overlay_executor["spec"]["template"]["spec"],
        "bubblewrap executor",
        false,
    );
    assert_eq!(
        find(&bubblewrap, "Namespace", "codexbox")["metadata"]["labels"]
            ["pod-security.kubernetes.io/enforce"],
        "baseline"
    );
    assert_eq!(bubblewrap.len(), base.len());
}

/// The flags of a container with the cluster-only ones replaced.
fn local_args(args: &[String], replace: &[(&str, Option<String>)]) -> Vec<String> {
    args.iter()
        .skip(1)
        .filter_map(|arg| {
            for (name, value) in replace {
                if arg.starts_with(&format!("{name}=")) {
                    return value.as_ref().map(|v| format!("{name}={v}"));
                }
            }
            Some(arg.clone())
        })
        .collect()
}

#[test]
fn the_manifests_command_lines_and_secret_work_together() {
    let Some(base) = check(BASE, "builtin") else {
        return;
    };
    let secret = find(&base, "Secret", "codexbox-tokens");
    let tokens_text = secret["stringData"]["tokens"]
        .as_str()
        .expect("tokens file");
    let executor_token = secret["stringData"]["executor-token"]
        .as_str()
        .expect("executor token");
    let harness_token = tokens_text
        .lines()
        .find(|line| line.trim_end().ends_with(" harness"))
        .and_then(|line| line.split_whitespace().next())
        .expect("a harness line");
    codexbox::rendezvous::auth::TokenTable::parse(tokens_text, "secret.yaml")
        .expect("the rendezvous accepts the token file");

    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, tokens_text).expect("write tokens");
    // The rendezvous with the Deployment's flags, on loopback.
    let rendezvous_args = local_args(
        &args_of(find(&base, "Deployment", "codexbox-rendezvous")),
        &[
            // Rendezvous::start listens on 127.0.0.1:0.
            ("--listen", None),
            ("--tokens", Some(tokens.display().to_string())),
            ("--public-url", None),
            // The replicas' shared key; one replica here makes its own.
            ("--signing-key-file", None),
        ],
    );
    let rendezvous_args: Vec<&str> = rendezvous_args.iter().map(String::as_str).collect();
    let rendezvous = Rendezvous::start(&rendezvous_args);
    // An executor with the Deployment's flags and the Secret's token.
    let executor_args = local_args(
        &args_of(find(&base, "Deployment", "codexbox-executor")),
        &[
            // Executor::start gives both, pointing at the local rendezvous.
            ("--remote", None),
            ("--environment-id", None),
        ],
    );
    let executor_args: Vec<&str> = executor_args.iter().map(String::as_str).collect();
    let _executor = Executor::start(
        &rendezvous.url,
        "codexbox-executor-test",
        &executor_args,
        &[("CODEX_ACCESS_TOKEN", executor_token)],
    );
    // A harness with the harness token reaches it; none does not.
    let token_file = dir.path().join("harness-token");
    std::fs::write(&token_file, harness_token).expect("write token");
    let through = run(
        &[
            "exec",
            "--registry",
            &rendezvous.url,
            "--environment-id",
            "codexbox-executor-test",
            "--token-file",
            token_file.to_str().expect("utf-8"),
            "--",
            BIN,
            "--version",
        ],
        None,
    );
    assert_eq!(through.code, 0, "{through:?}");
    assert!(
        through.stdout_text().starts_with("codexbox "),
        "{through:?}"
    );
    let without = run(
        &[
            "exec",
            "--registry",
            &rendezvous.url,
            "--environment-id",
            "codexbox-executor-test",
            "--",
            "true",
        ],
        None,
    );
    assert_eq!(without.code, 255, "{without:?}");
    // Prometheus's token reads the figures.
    let metrics_token = secret["stringData"]["metrics-token"]
        .as_str()
        .expect("metrics token");
    let page = crate::common::metrics::scrape(rendezvous.addr(), Some(metrics_token));
    assert_eq!(
        page.value(
            "codexbox_rendezvous_registry_calls_total",
            &[("call", "register"), ("result", "ok")]
        ),
        1.0
    );
}

/// `tests/data/tls` as PEM files in `dir`: (certificate, key, both).
fn pem_files(dir: &std::path::Path) -> [std::path::PathBuf; 3] {
    use base64::Engine as _;
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tls");
    let pem = |label: &str, file: &str| {
        let der = std::fs::read(format!("{data}/{file}")).expect("read DER");
        let text = base64::engine::general_purpose::STANDARD.encode(der);
        let lines: Vec<&str> = text
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).expect("base64"))
            .collect();
        format!(
            "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
            lines.join("\n")
        )
    };
    let (cert, key) = (
        pem("CERTIFICATE", "server.der"),
        pem("PRIVATE KEY", "server.key.der"),
    );
    let paths = [
        dir.join("cert.pem"),
        dir.join("key.pem"),
        dir.join("both.pem"),
    ];
    for (path, text) in paths.iter().zip([cert.clone(), key.clone(), cert + &key]) {
        std::fs::write(path, text).expect("write PEM");
    }
    paths
}

/// Whether `program` runs (a loud skip otherwise; CI installs both).
fn installed(program: &str, version_flag: &str) -> bool {
    let found = Command::new(program)
        .arg(version_flag)
        .output()
        .map(|_| ())
        .map_err(|err| format!("{program}: {err}"));
    crate::common::host::host_has(program, found)
}

#[test]
fn the_plain_load_balancer_configurations_pass_their_checkers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let [cert, key, both] = pem_files(dir.path());
    if installed("haproxy", "-v") {
        let text = std::fs::read_to_string(format!("{DEPLOY}/haproxy/haproxy.cfg")).expect("read");
        for line in [
            "balance uri depth 3",
            "hash-type consistent",
            "timeout tunnel",
            "http-check send meth GET uri /readyz",
        ] {
            assert!(text.contains(line), "haproxy.cfg lacks {line:?}");
        }
        let config = dir.path().join("haproxy.cfg");
        let text = text.replace(
            "/etc/haproxy/certs/codexbox.example.com.pem",
            both.to_str().expect("utf-8"),
        );
        std::fs::write(&config, text).expect("write");
        let out = Command::new("haproxy")
            .arg("-c")
            .arg("-f")
            .arg(&config)
            .output()
            .expect("haproxy");
        assert!(
            out.status.success(),
            "haproxy -c: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    if installed("nginx", "-v") {
        let text = std::fs::read_to_string(format!("{DEPLOY}/nginx/nginx.conf")).expect("read");
        for line in [
            "hash $codexbox_environment consistent;",
            "proxy_set_header Upgrade $http_upgrade;",
            "proxy_read_timeout",
        ] {
            assert!(text.contains(line), "nginx.conf lacks {line:?}");
        }
        let config = dir.path().join("nginx.conf");
        let text = text
            .replace(
                "/etc/nginx/certs/codexbox.example.com.crt",
                cert.to_str().expect("utf-8"),
            )
            .replace(
                "/etc/nginx/certs/codexbox.example.com.key",
                key.to_str().expect("utf-8"),
            )
            .replace(
                "/run/nginx-codexbox.pid",
                dir.path().join("nginx.pid").to_str().expect("utf-8"),
            );
        std::fs::write(&config, text).expect("write");
        let out = Command::new("nginx")
            .args(["-t", "-q", "-e", "stderr", "-p"])
            .arg(dir.path())
            .arg("-c")
            .arg(&config)
            .output()
            .expect("nginx");
        assert!(
            out.status.success(),
            "nginx -t: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
