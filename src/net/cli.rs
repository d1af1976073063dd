//! `codexbox proxy` (docs/network.md): the proxy stand-alone. Prints its
//! `http://…` URL line (and `socks5h://…` with `--socks5-listen`) on stdout
//! once the listeners are bound, then serves until SIGINT/SIGTERM.
//!
//! [`PolicyArgs`] are the policy flags, shared with `codexbox sandbox
//! --allow-domain`.

use std::ffi::OsString;
use std::io::Write;
use std::net::SocketAddr;

use clap::{CommandFactory, Parser};

use super::audit::AuditSink;
use super::env::{http_proxy_url, socks5_proxy_url};
use super::policy::{HostPattern, Mode, Policy, PolicyError};
use super::proxy::{ProxyConfig, ProxyHandle};
use super::resolve::{ResolveError, Resolver};
use super::upstream::Upstream;
use crate::logging::{self, LogFormat};

const PREFIX: &str = "codexbox proxy";

/// `full` or `limited` on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ModeArg {
    #[default]
    Full,
    Limited,
}

impl From<ModeArg> for Mode {
    fn from(mode: ModeArg) -> Mode {
        match mode {
            ModeArg::Full => Mode::Full,
            ModeArg::Limited => Mode::Limited,
        }
    }
}

/// The policy flags of `codexbox proxy` and `codexbox sandbox`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PolicyArgs {
    /// Allow a destination: `host`, `*.domain` (subdomains), `**.domain`
    /// (apex and subdomains), `*` (every public host), an IP literal, each
    /// optionally `:PORT` (repeatable).
    #[arg(
        long = "allow",
        visible_alias = "allow-domain",
        value_name = "PATTERN",
        value_parser = allow_pattern
    )]
    pub allow: Vec<String>,
    /// Deny a destination (same forms except `*`; deny wins; repeatable).
    #[arg(
        long = "deny",
        visible_alias = "deny-domain",
        value_name = "PATTERN",
        value_parser = deny_pattern
    )]
    pub deny: Vec<String>,
    /// `full`, or `limited` (plain-HTTP GET, HEAD and OPTIONS only).
    #[arg(long, visible_alias = "network-mode", value_enum, default_value_t = ModeArg::Full)]
    pub mode: ModeArg,
    /// Let allowed names and wildcards reach local and private addresses.
    #[arg(long)]
    pub allow_local_binding: bool,
    /// Pin NAME to IP instead of asking DNS (repeatable, like curl's).
    #[arg(long, value_name = "NAME=IP", value_parser = resolve_entry)]
    pub resolve: Vec<String>,
    /// Write every decision as a JSON line to FILE (`-`: stdout).
    #[arg(long, value_name = "FILE|-")]
    pub audit_log: Option<String>,
}

/// Why policy flags are unusable.
#[derive(Debug, thiserror::Error)]
pub enum PolicyArgsError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(transparent)]
    Resolve(#[from] ResolveError),
}

/// An `--allow` pattern, checked as the policy reads it.
fn allow_pattern(text: &str) -> Result<String, String> {
    pattern(text, false)
}

/// A `--deny` pattern, checked as the policy reads it.
fn deny_pattern(text: &str) -> Result<String, String> {
    pattern(text, true)
}

fn pattern(text: &str, is_deny: bool) -> Result<String, String> {
    match HostPattern::parse(text, is_deny) {
        Ok(_) => Ok(text.to_owned()),
        Err(PolicyError::GlobalWildcardDenied(_)) => Err(
            "a deny pattern cannot cover every host; name hosts or scoped wildcards like *.example.com or **.example.com".into(),
        ),
        Err(PolicyError::InvalidHost(err)) => Err(err.to_string()),
        Err(err) => Err(err.to_string()),
    }
}

/// A `--resolve NAME=IP` entry, checked as the resolver reads it.
fn resolve_entry(text: &str) -> Result<String, String> {
    Resolver::with_overrides([text])
        .map(|_| text.to_owned())
        .map_err(|_| "expected NAME=IP (a DNS name and an IP address)".to_owned())
}

/// A listen address of the proxy: loopback only.
fn loopback_addr(text: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = text
        .parse()
        .map_err(|_| "expected IP:PORT (127.0.0.1:0 picks a free port)".to_owned())?;
    if !addr.ip().is_loopback() {
        return Err("not a loopback address: the proxy serves this host only".into());
    }
    Ok(addr)
}

impl PolicyArgs {
    /// Whether any destination policy was given (a proxy is wanted).
    pub fn is_set(&self) -> bool {
        !self.allow.is_empty() || !self.deny.is_empty()
    }

    /// The flags given that shape how allowed destinations are reached or
    /// recorded: without an allowed destination they do nothing.
    pub fn refinements_given(&self) -> Vec<&'static str> {
        let given = [
            ("--mode", self.mode != ModeArg::Full),
            ("--allow-local-binding", self.allow_local_binding),
            ("--resolve", !self.resolve.is_empty()),
            ("--audit-log", self.audit_log.is_some()),
        ];
        given
            .into_iter()
            .filter_map(|(flag, given)| given.then_some(flag))
            .collect()
    }

    /// A proxy configuration on ephemeral loopback ports with these flags,
    /// chaining through the upstream proxies of this process's environment.
    pub fn to_config(&self) -> Result<ProxyConfig, PolicyArgsError> {
        let policy = Policy::new(
            &self.allow,
            &self.deny,
            self.mode.into(),
            self.allow_local_binding,
        )?;
        let mut config = ProxyConfig::new(policy);
        config.resolver = Resolver::with_overrides(&self.resolve)?;
        config.audit_sink = self.audit_log.as_deref().map(AuditSink::parse);
        config.upstream = Upstream::from_process_env();
        Ok(config)
    }
}

/// Command line of `codexbox proxy`.
#[derive(Debug, Parser)]
#[command(
    name = "codexbox proxy",
    about = "A network proxy (HTTP forward, CONNECT, SOCKS5) that lets through only the allowed destinations",
    after_help = "Prints its http:// URL (and socks5h:// URL) on stdout, then serves until SIGINT/SIGTERM.\n\
                  Example: codexbox proxy --allow pypi.org --allow '**.pythonhosted.org' --audit-log -"
)]
struct Args {
    /// HTTP proxy listener (loopback only).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0", value_parser = loopback_addr)]
    listen: SocketAddr,
    /// Also serve SOCKS5 here (loopback only).
    #[arg(long = "socks5-listen", value_name = "ADDR", value_parser = loopback_addr)]
    socks5_listen: Option<SocketAddr>,
    /// Refuse SOCKS5 UDP ASSOCIATE.
    #[arg(long)]
    no_socks5_udp: bool,
    /// Never chain to the upstream proxy named by HTTP_PROXY/HTTPS_PROXY/ALL_PROXY.
    #[arg(long)]
    no_upstream_proxy: bool,
    #[command(flatten)]
    policy: PolicyArgs,
    /// Log line format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// The clap definition of this mode (for help, completions, man pages).
pub fn command() -> clap::Command {
    Args::command()
}

/// Entry point of this mode.
pub fn main(argv: Vec<OsString>) -> i32 {
    let args = match crate::cli::parse::<Args>(&argv, PREFIX) {
        Ok(args) => args,
        Err(exit) => return exit.report(),
    };
    if args.policy.allow.is_empty() {
        let idle = (!args.policy.deny.is_empty()).then_some("--deny");
        if let Some(flag) = idle
            .into_iter()
            .chain(args.policy.refinements_given())
            .find(|flag| *flag != "--audit-log")
        {
            eprintln!(
                "{PREFIX}: {flag} has no effect without --allow: the proxy refuses every destination"
            );
            return crate::cli::EXIT_USAGE;
        }
    }
    logging::init(args.log_format);
    let mut config = match args.policy.to_config() {
        Ok(config) => config,
        Err(err) => {
            eprintln!("{PREFIX}: {err}");
            return crate::cli::EXIT_USAGE;
        }
    };
    config.http_listen = args.listen;
    config.socks5_listen = args.socks5_listen;
    config.socks5_udp = !args.no_socks5_udp;
    if args.no_upstream_proxy {
        config.upstream = Upstream::default();
    }
    let Some(runtime) = crate::startup::runtime(PREFIX, crate::startup::Threads::PerCpu) else {
        return 1;
    };
    runtime.block_on(async move {
        let handle = match ProxyHandle::start(config).await {
            Ok(handle) => handle,
            Err(err) => {
                eprintln!("{PREFIX}: {err}");
                return 1;
            }
        };
        // Handlers first: a SIGTERM right after the URL line must not kill
        // the proxy before the audit log is flushed.
        let stop = crate::startup::stop_signal();
        announce(&handle);
        stop.await;
        handle.shutdown().await;
        0
    })
}

fn announce(handle: &ProxyHandle) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{}", http_proxy_url(handle.http_addr()));
    if let Some(socks) = handle.socks5_addr() {
        let _ = writeln!(stdout, "{}", socks5_proxy_url(socks));
    }
    let _ = stdout.flush();
}
