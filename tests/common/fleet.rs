//! A fleet of rendezvous replicas on 127.0.0.1 behind the real HAProxy,
//! configured as deployments are (`balance uri depth 3`, `hash-type
//! consistent`, health checks, `timeout tunnel`): the replicas share one
//! signing key file and one token file, and each can be killed (`kill -9`)
//! and started again on its own address. Executors and harnesses reach the
//! fleet only through HAProxy.
#![allow(dead_code)]

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::client::WAIT;
use super::host::{host_has, runs};
use super::relay::{Executor, Rendezvous};

/// The HAProxy binary (Debian's package).
pub const HAPROXY: &str = "haproxy";

/// Whether HAProxy can run here (the skip rule applies).
pub fn haproxy_available() -> bool {
    host_has("haproxy", runs(HAPROXY, &["-v"]))
}

/// A free loopback address (bound and released).
pub fn free_addr() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr")
}

/// Waits (bounded) until something accepts connections on `addr`.
pub fn wait_listening(addr: SocketAddr) {
    let deadline = Instant::now() + WAIT;
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {addr}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Log text without its terminal colour sequences (`ESC [ … m`).
fn plain(log: &str) -> String {
    let mut out = String::with_capacity(log.len());
    let mut rest = log;
    while let Some(at) = rest.find('\x1b') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        rest = rest.find('m').map_or("", |end| &rest[end + 1..]);
    }
    out.push_str(rest);
    out
}

/// A running HAProxy, killed on drop.
pub struct Haproxy {
    child: Child,
    pub addr: SocketAddr,
    /// Its statistics page (CSV at `/;csv`).
    pub stats: SocketAddr,
}

impl Haproxy {
    /// The health-check status (`UP`, `DOWN`, …) HAProxy gives each server.
    pub fn statuses(&self) -> Vec<String> {
        let Ok(mut socket) = std::net::TcpStream::connect(self.stats) else {
            return Vec::new();
        };
        let _ = socket.set_read_timeout(Some(WAIT));
        let _ = socket.write_all(b"GET /;csv HTTP/1.0\r\n\r\n");
        let mut answer = String::new();
        let _ = socket.read_to_string(&mut answer);
        // Columns: pxname, svname, …, status is the 18th.
        answer
            .lines()
            .filter(|line| line.starts_with("rendezvous,r"))
            .map(|line| line.split(',').nth(17).unwrap_or_default().to_owned())
            .collect()
    }

    /// Waits (bounded) until HAProxy sees server `i` as `status`.
    pub fn wait_status(&self, i: usize, status: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            let statuses = self.statuses();
            if statuses.get(i).is_some_and(|s| s == status) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "server r{i} is not {status}: {statuses:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The configuration the docs recommend, for `servers` on loopback.
pub fn haproxy_config(
    listen: SocketAddr,
    stats: SocketAddr,
    servers: &[SocketAddr],
    maxconn: usize,
) -> String {
    let mut config = format!(
        "global\n  maxconn {maxconn}\n\
         defaults\n  mode http\n  timeout connect 1s\n  timeout client 90s\n  timeout server 90s\n  timeout tunnel 1h\n  retries 3\n  option redispatch\n\
         listen stats\n  bind {stats}\n  stats enable\n  stats uri /\n\
         frontend fleet\n  bind {listen}\n  default_backend rendezvous\n\
         backend rendezvous\n  balance uri depth 3\n  hash-type consistent\n  default-server check inter 100ms fall 1 rise 1\n"
    );
    for (i, server) in servers.iter().enumerate() {
        config.push_str(&format!("  server r{i} {server}\n"));
    }
    config
}

/// The fleet: HAProxy, the replicas, and the files they share.
pub struct Fleet {
    pub haproxy: Haproxy,
    /// `None` while a replica is down.
    pub replicas: Vec<Option<Rendezvous>>,
    pub addrs: Vec<SocketAddr>,
    /// The token every executor and harness presents.
    pub token: String,
    dir: tempfile::TempDir,
    key_file: PathBuf,
    tokens_file: PathBuf,
}

impl Fleet {
    /// `total` replica addresses behind HAProxy, of which the first
    /// `started` are started now (the others are down until [`Fleet::start`]).
    pub fn new(total: usize, started: usize) -> Fleet {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let key_file = dir.path().join("signing.key");
        let key: String = (0..64)
            .map(|i| char::from(b'A' + (i * 7 % 26) as u8))
            .collect();
        std::fs::write(&key_file, key).expect("write key");
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let token = format!("fleet-token-{}", std::process::id());
        let tokens_file = dir.path().join("tokens");
        std::fs::write(&tokens_file, format!("{token} * both\n")).expect("write tokens");
        let addrs: Vec<SocketAddr> = (0..total).map(|_| free_addr()).collect();
        let (listen, stats) = (free_addr(), free_addr());
        let config = dir.path().join("haproxy.cfg");
        std::fs::write(&config, haproxy_config(listen, stats, &addrs, 1000))
            .expect("write haproxy.cfg");
        let log = std::fs::File::create(dir.path().join("haproxy.log")).expect("log");
        let child = Command::new(HAPROXY)
            .arg("-db")
            .arg("-f")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn haproxy");
        let mut haproxy = Haproxy {
            child,
            addr: listen,
            stats,
        };
        let deadline = Instant::now() + WAIT;
        while std::net::TcpStream::connect(listen).is_err() {
            if let Ok(Some(status)) = haproxy.child.try_wait() {
                let log =
                    std::fs::read_to_string(dir.path().join("haproxy.log")).unwrap_or_default();
                panic!("haproxy exited with {status}:\n{log}");
            }
            assert!(
                Instant::now() < deadline,
                "haproxy does not listen on {listen}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut fleet = Fleet {
            haproxy,
            replicas: (0..total).map(|_| None).collect(),
            addrs,
            token,
            dir,
            key_file,
            tokens_file,
        };
        for i in 0..started {
            fleet.start(i);
        }
        for i in 0..total {
            fleet
                .haproxy
                .wait_status(i, if i < started { "UP" } else { "DOWN" });
        }
        fleet
    }

    /// `http://` of HAProxy: the registry of every executor and harness.
    pub fn url(&self) -> String {
        format!("http://{}", self.haproxy.addr)
    }

    /// Starts replica `i` on its address.
    pub fn start(&mut self, i: usize) {
        let key_file = self.key_file.to_string_lossy().into_owned();
        let tokens_file = self.tokens_file.to_string_lossy().into_owned();
        let url = self.url();
        let replica = Rendezvous::start_on(
            &self.addrs[i].to_string(),
            &[
                "--signing-key-file",
                &key_file,
                "--tokens",
                &tokens_file,
                "--public-url",
                &url,
            ],
        );
        self.replicas[i] = Some(replica);
        self.haproxy.wait_status(i, "UP");
    }

    /// `kill -9` of replica `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut replica) = self.replicas[i].take() {
            replica.proc.kill();
        }
    }

    /// Which running replica registered `environment` most recently (from
    /// their logs), if any.
    pub fn holder(&self, environment: &str) -> Option<usize> {
        let needle = format!("executor registered environment={environment} ");
        self.replicas
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().map(|r| (i, plain(&r.proc.stderr()))))
            .filter(|(_, log)| log.contains(&needle))
            .max_by_key(|(_, log)| log.matches(&needle).count())
            .map(|(i, _)| i)
    }

    /// How often replica `i` registered `environment`.
    pub fn registrations(&self, i: usize, environment: &str) -> usize {
        let needle = format!("executor registered environment={environment} ");
        self.replicas[i]
            .as_ref()
            .map_or(0, |r| plain(&r.proc.stderr()).matches(&needle).count())
    }

    /// An executor for `environment` registering through HAProxy, with a
    /// short re-registration period; waits until it is connected.
    pub fn executor(&self, environment: &str, register_interval_secs: u64) -> Executor {
        let interval = register_interval_secs.to_string();
        Executor::start(
            &self.url(),
            environment,
            &["--register-interval-secs", &interval],
            &[("CODEX_API_KEY", &self.token)],
        )
    }
}
