//! The bubblewrap command line: argv (and `--args FD` data) into a [`Config`].
//!
//! Phase one of two: this module only parses ([`parse`]) and checks options
//! against each other and the caller ([`validate`]), both before any
//! namespace exists, so a bad command line never gets as far as `clone`.
//! Options are read in bubblewrap 0.11's order with its messages, warnings
//! (`Only the last --uid option will take effect`) and number syntax
//! (`numbers`); every refusal is a [`CliError`], never a panic. Nothing
//! here touches the system except reading the fds given to `--args` and
//! `--add-seccomp-fd`, which bubblewrap reads while parsing too.

mod usage;

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;

pub use usage::{command, usage};

use super::caps::{self, CapEdit};
use super::log::Log;
use super::numbers;
use super::ops::{BindKind, EnvOp, SetupOp};
use super::seccomp_fd::{self, Program, SeccompError};
use crate::sys::{errno_text, fds};

/// Which namespaces the command line asked for. The built-in mode always
/// creates a user namespace; `user` records whether bubblewrap would, since
/// its option checks depend on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unshare {
    pub user: bool,
    pub user_try: bool,
    pub pid: bool,
    pub net: bool,
    pub ipc: bool,
    pub uts: bool,
    pub cgroup: bool,
    pub cgroup_try: bool,
}

/// The seccomp programs to install last before exec.
#[derive(Debug, Default)]
pub enum Seccomp {
    #[default]
    None,
    /// `--seccomp FD`: read after setup, as bubblewrap does.
    Fd(RawFd),
    /// `--add-seccomp-fd FD…`: read while parsing, in order.
    Programs(Vec<Program>),
}

/// Everything the command line asked for.
#[derive(Debug, Default)]
pub struct Config {
    pub unshare: Unshare,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub hostname: Option<OsString>,
    pub chdir: Option<OsString>,
    pub env: Vec<EnvOp>,
    pub argv0: Option<OsString>,
    pub new_session: bool,
    pub die_with_parent: bool,
    pub as_pid_1: bool,
    pub disable_userns: bool,
    pub sync_fd: Option<RawFd>,
    pub block_fd: Option<RawFd>,
    pub info_fd: Option<RawFd>,
    pub json_status_fd: Option<RawFd>,
    pub seccomp: Seccomp,
    pub cap_edits: Vec<CapEdit>,
    pub ops: Vec<SetupOp>,
    pub command: Vec<OsString>,
}

impl Config {
    /// The highest fd number an option will read, write or close after
    /// parsing (`--sync-fd`, `--block-fd`, the status fds, the data and
    /// bind fds): the launcher keeps its own descriptors above it.
    pub fn highest_named_fd(&self) -> Option<RawFd> {
        [
            self.sync_fd,
            self.block_fd,
            self.info_fd,
            self.json_status_fd,
        ]
        .into_iter()
        .flatten()
        .chain(self.ops.iter().filter_map(SetupOp::fd))
        .max()
    }

    /// `--dev` was given: bubblewrap then sets up as uid 0 (devpts needs it).
    pub fn needs_devpts(&self) -> bool {
        self.ops.iter().any(|op| matches!(op, SetupOp::Dev { .. }))
    }
}

/// What to do after parsing.
#[derive(Debug)]
pub enum Parsed {
    Run(Box<Config>),
    Help,
    Version,
}

/// Who runs bwrap, as the option checks need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallerIds {
    pub uid: u32,
    pub gid: u32,
}

/// A command line bubblewrap would refuse. `Display` is the text after `bwrap: `.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("Unknown option {0}")]
    UnknownOption(String),
    #[error("{0} takes an argument")]
    MissingArgument(&'static str),
    #[error("{0} takes one argument")]
    MissingOneArgument(&'static str),
    #[error("{0} takes two arguments")]
    MissingArguments(&'static str),
    #[error("Invalid fd: {0}")]
    InvalidFd(String),
    #[error("Invalid uid: {0}")]
    InvalidUid(String),
    #[error("Invalid gid: {0}")]
    InvalidGid(String),
    #[error("{0} takes an octal argument <= 07777")]
    InvalidOctal(&'static str),
    #[error("--perms given twice for the same action")]
    PermsTwice,
    #[error("--size given twice for the same action")]
    SizeTwice,
    #[error("--size takes a non-zero number of bytes")]
    InvalidSize,
    #[error("--size (for tmpfs) is limited to {MAX_TMPFS_BYTES}")]
    SizeTooLarge,
    #[error("unknown cap: {0}")]
    UnknownCap(String),
    #[error("--perms must be followed by an option that creates a file")]
    DanglingPerms,
    #[error("--size must be followed by --tmpfs")]
    DanglingSize,
    #[error("--add-seccomp-fd cannot be combined with --seccomp")]
    AddSeccompAfterSeccomp,
    #[error("--seccomp cannot be combined with --add-seccomp-fd")]
    SeccompAfterAddSeccomp,
    #[error(transparent)]
    Seccomp(#[from] SeccompError),
    #[error("--argv0 used multiple times")]
    Argv0Twice,
    #[error("setenv failed")]
    Setenv,
    #[error("unsetenv failed")]
    Unsetenv,
    #[error("Specifying {option} requires {requires}")]
    Requires {
        option: &'static str,
        requires: &'static str,
    },
    #[error("--disable-userns requires --unshare-user")]
    DisableUsernsWithoutUserns,
    #[error("--args not supported in arguments file")]
    NestedArgs,
    #[error("Exceeded maximum number of arguments {MAX_ARGS}")]
    TooManyArguments,
    #[error("Can't read --args data: {}", errno_text(.0))]
    ArgsRead(#[source] std::io::Error),
    #[error("{0} is not supported by the built-in bwrap")]
    Unsupported(String),
    /// No command: bubblewrap prints its usage on stderr and exits 1.
    #[error("No command specified")]
    NoCommand,
}

/// bubblewrap's cap on the number of arguments, `--args` data included.
const MAX_ARGS: usize = 9000;

/// The largest `--size` bubblewrap takes (`SIZE_MAX >> 1`).
pub const MAX_TMPFS_BYTES: u64 = (usize::MAX >> 1) as u64;

/// Options that exist in bubblewrap 0.11 but are not implemented here.
const UNSUPPORTED: [&str; 12] = [
    "--userns",
    "--userns2",
    "--pidns",
    "--userns-block-fd",
    "--assert-userns-disabled",
    "--lock-file",
    "--exec-label",
    "--file-label",
    "--overlay-src",
    "--overlay",
    "--tmp-overlay",
    "--ro-overlay",
];

/// Options that only modify the next one.
fn is_modifier(option: &str) -> bool {
    option == "--perms" || option == "--size"
}

/// Options that take two arguments, as `'static` names for messages.
const TWO_ARGUMENT_OPTIONS: [&str; 12] = [
    "--bind",
    "--bind-try",
    "--ro-bind",
    "--ro-bind-try",
    "--dev-bind",
    "--dev-bind-try",
    "--file",
    "--bind-data",
    "--ro-bind-data",
    "--symlink",
    "--setenv",
    "--chmod",
];

/// Options that take one argument (bubblewrap says "takes an argument").
const ONE_ARGUMENT_OPTIONS: [&str; 22] = [
    "--args",
    "--proc",
    "--dev",
    "--tmpfs",
    "--mqueue",
    "--dir",
    "--sync-fd",
    "--block-fd",
    "--info-fd",
    "--json-status-fd",
    "--seccomp",
    "--add-seccomp-fd",
    "--unsetenv",
    "--uid",
    "--gid",
    "--hostname",
    "--cap-add",
    "--cap-drop",
    "--perms",
    "--size",
    "--chmod",
    "--setenv",
];

/// The `'static` spelling of a known option name.
fn static_name(name: &str) -> &'static str {
    TWO_ARGUMENT_OPTIONS
        .iter()
        .chain(ONE_ARGUMENT_OPTIONS.iter())
        .copied()
        .find(|known| *known == name)
        .unwrap_or("option")
}

/// State carried across options (and into `--args` data).
#[derive(Default)]
struct State {
    config: Config,
    next_perms: Option<u32>,
    next_size: Option<u64>,
    total_args: usize,
}

/// Parses the arguments after `argv[0]`. Warnings go to `log` as they arise;
/// `--level-prefix` switches `log` to prefixed lines from then on.
pub fn parse(args: &[OsString], log: &mut Log) -> Result<Parsed, CliError> {
    let mut state = State {
        total_args: args.len(),
        ..State::default()
    };
    if state.total_args > MAX_ARGS {
        return Err(CliError::TooManyArguments);
    }
    let mut queue: VecDeque<OsString> = args.iter().cloned().collect();
    if let Some(early) = parse_options(&mut queue, false, &mut state, log)? {
        return Ok(early);
    }
    let mut config = state.config;
    config.command = queue.into_iter().collect();
    Ok(Parsed::Run(Box::new(config)))
}

/// One level of options: argv, or the data of one `--args`. Stops at `--`
/// (consumed) or at the first word that is not an option (left in `queue`).
/// In `--args` data, what follows such a stop is dropped, as in bubblewrap.
fn parse_options(
    queue: &mut VecDeque<OsString>,
    in_file: bool,
    state: &mut State,
    log: &mut Log,
) -> Result<Option<Parsed>, CliError> {
    while let Some(arg) = queue.pop_front() {
        if arg == "--" {
            break;
        }
        if !arg.as_bytes().starts_with(b"-") {
            queue.push_front(arg);
            break;
        }
        let name = arg.to_string_lossy().into_owned();
        if let Some(early) = parse_option(&name, queue, in_file, state, log)? {
            return Ok(Some(early));
        }
        // --perms / --size apply to the option right after them only.
        if !is_modifier(&name) && state.next_perms.is_some() {
            return Err(CliError::DanglingPerms);
        }
        if !is_modifier(&name) && state.next_size.is_some() {
            return Err(CliError::DanglingSize);
        }
    }
    Ok(None)
}

/// The values an option takes, or its "takes … argument(s)" refusal.
fn take(
    queue: &mut VecDeque<OsString>,
    count: usize,
    missing: CliError,
) -> Result<Vec<OsString>, CliError> {
    if queue.len() < count {
        return Err(missing);
    }
    Ok(queue.drain(..count).collect())
}

fn take_one(queue: &mut VecDeque<OsString>, option: &str) -> Result<OsString, CliError> {
    let mut values = take(queue, 1, CliError::MissingArgument(static_name(option)))?;
    values
        .pop()
        .ok_or(CliError::MissingArgument(static_name(option)))
}

fn take_two(
    queue: &mut VecDeque<OsString>,
    missing: CliError,
) -> Result<(OsString, OsString), CliError> {
    let mut values = take(queue, 2, missing)?.into_iter();
    match (values.next(), values.next()) {
        (Some(first), Some(second)) => Ok((first, second)),
        _ => Err(CliError::MissingArguments("option")),
    }
}

fn warn_only_last(log: &Log, option: &str) {
    log.warn(&format_args!(
        "Only the last {option} option will take effect"
    ));
}

/// One option (`name`, already taken from `queue`).
fn parse_option(
    name: &str,
    queue: &mut VecDeque<OsString>,
    in_file: bool,
    state: &mut State,
    log: &mut Log,
) -> Result<Option<Parsed>, CliError> {
    let config = &mut state.config;
    match name {
        "--help" => return Ok(Some(Parsed::Help)),
        "--version" => return Ok(Some(Parsed::Version)),
        "--args" => {
            if in_file {
                return Err(CliError::NestedArgs);
            }
            let fd = parse_fd(&take_one(queue, name)?)?;
            let data = fds::read_all(fd).map_err(CliError::ArgsRead)?;
            fds::close(fd);
            let mut injected: VecDeque<OsString> = VecDeque::new();
            let mut rest = data.as_slice();
            while !rest.is_empty() {
                state.total_args += 1;
                if state.total_args > MAX_ARGS {
                    return Err(CliError::TooManyArguments);
                }
                let end = rest.iter().position(|b| *b == 0).unwrap_or(rest.len());
                let (item, tail) = rest.split_at(end);
                injected.push_back(OsStr::from_bytes(item).to_owned());
                rest = tail.get(1..).unwrap_or_default();
            }
            if let Some(early) = parse_options(&mut injected, true, state, log)? {
                return Ok(Some(early));
            }
        }
        "--argv0" => {
            let value =
                take_one(queue, name).map_err(|_| CliError::MissingOneArgument("--argv0"))?;
            if config.argv0.is_some() {
                return Err(CliError::Argv0Twice);
            }
            config.argv0 = Some(value);
        }
        "--level-prefix" => log.level_prefix = true,
        "--unshare-all" => {
            config.unshare.user_try = true;
            config.unshare.ipc = true;
            config.unshare.pid = true;
            config.unshare.uts = true;
            config.unshare.cgroup_try = true;
            config.unshare.net = true;
        }
        "--unshare-user" => config.unshare.user = true,
        "--unshare-user-try" => config.unshare.user_try = true,
        "--unshare-ipc" => config.unshare.ipc = true,
        "--unshare-pid" => config.unshare.pid = true,
        "--unshare-net" => config.unshare.net = true,
        "--unshare-uts" => config.unshare.uts = true,
        "--unshare-cgroup" => config.unshare.cgroup = true,
        "--unshare-cgroup-try" => config.unshare.cgroup_try = true,
        "--share-net" => config.unshare.net = false,
        "--chdir" => {
            let value =
                take_one(queue, name).map_err(|_| CliError::MissingOneArgument("--chdir"))?;
            if config.chdir.is_some() {
                warn_only_last(log, name);
            }
            config.chdir = Some(value);
        }
        "--disable-userns" => config.disable_userns = true,
        "--remount-ro" => {
            let dest =
                take_one(queue, name).map_err(|_| CliError::MissingOneArgument("--remount-ro"))?;
            config.ops.push(SetupOp::RemountRo { dest });
        }
        "--bind" | "--bind-try" | "--ro-bind" | "--ro-bind-try" | "--dev-bind"
        | "--dev-bind-try" => {
            let (source, dest) = take_two(queue, CliError::MissingArguments(static_name(name)))?;
            let kind = if name.starts_with("--ro-") {
                BindKind::ReadOnly
            } else if name.starts_with("--dev-") {
                BindKind::Devices
            } else {
                BindKind::ReadWrite
            };
            config.ops.push(SetupOp::Bind {
                source,
                dest,
                kind,
                allow_missing: name.ends_with("-try"),
                fd: None,
            });
        }
        "--bind-fd" | "--ro-bind-fd" => {
            let (fd, dest) = take_two(queue, CliError::MissingArguments("--bind-fd"))?;
            let fd = parse_fd(&fd)?;
            config.ops.push(SetupOp::Bind {
                source: OsString::from(format!("/proc/self/fd/{fd}")),
                dest,
                kind: if name == "--ro-bind-fd" {
                    BindKind::ReadOnly
                } else {
                    BindKind::ReadWrite
                },
                allow_missing: false,
                fd: Some(fd),
            });
        }
        "--proc" => {
            let dest = take_one(queue, name)?;
            config.ops.push(SetupOp::Proc { dest });
        }
        "--dev" => {
            let dest = take_one(queue, name)?;
            config.ops.push(SetupOp::Dev { dest });
        }
        "--tmpfs" => {
            let dest = take_one(queue, name)?;
            config.ops.push(SetupOp::Tmpfs {
                dest,
                perms: state.next_perms.take().unwrap_or(0o755),
                size: state.next_size.take(),
            });
        }
        "--mqueue" => {
            let dest = take_one(queue, name)?;
            config.ops.push(SetupOp::Mqueue { dest });
        }
        "--dir" => {
            let dest = take_one(queue, name)?;
            config.ops.push(SetupOp::Dir {
                dest,
                perms: state.next_perms.take().unwrap_or(0o755),
            });
        }
        "--file" | "--bind-data" | "--ro-bind-data" => {
            let (fd, dest) = take_two(queue, CliError::MissingArguments(static_name(name)))?;
            let fd = parse_fd(&fd)?;
            config.ops.push(if name == "--file" {
                SetupOp::File {
                    fd,
                    dest,
                    perms: state.next_perms.take().unwrap_or(0o666),
                }
            } else {
                SetupOp::BindData {
                    fd,
                    dest,
                    readonly: name == "--ro-bind-data",
                    perms: state.next_perms.take().unwrap_or(0o600),
                }
            });
        }
        "--symlink" => {
            let (target, dest) = take_two(queue, CliError::MissingArguments("--symlink"))?;
            config.ops.push(SetupOp::Symlink { target, dest });
        }
        "--sync-fd" | "--block-fd" | "--info-fd" | "--json-status-fd" => {
            let value = take_one(queue, name)?;
            let slot = match name {
                "--sync-fd" => &mut config.sync_fd,
                "--block-fd" => &mut config.block_fd,
                "--info-fd" => &mut config.info_fd,
                _ => &mut config.json_status_fd,
            };
            if slot.is_some() {
                warn_only_last(log, name);
            }
            *slot = Some(parse_fd(&value)?);
        }
        "--seccomp" => {
            let value = take_one(queue, name)?;
            match config.seccomp {
                Seccomp::Programs(_) => return Err(CliError::SeccompAfterAddSeccomp),
                Seccomp::Fd(_) => warn_only_last(log, name),
                Seccomp::None => {}
            }
            config.seccomp = Seccomp::Fd(parse_fd(&value)?);
        }
        "--add-seccomp-fd" => {
            let value = take_one(queue, name)?;
            if matches!(config.seccomp, Seccomp::Fd(_)) {
                return Err(CliError::AddSeccompAfterSeccomp);
            }
            let program = seccomp_fd::read(parse_fd(&value)?)?;
            match &mut config.seccomp {
                Seccomp::Programs(programs) => programs.push(program),
                other => *other = Seccomp::Programs(vec![program]),
            }
        }
        "--clearenv" => config.env.push(EnvOp::Clear),
        "--setenv" => {
            let (var, value) = take_two(queue, CliError::MissingArguments("--setenv"))?;
            if !is_valid_env_name(&var) {
                return Err(CliError::Setenv);
            }
            config.env.push(EnvOp::Set(var, value));
        }
        "--unsetenv" => {
            let var = take_one(queue, name)?;
            if !is_valid_env_name(&var) {
                return Err(CliError::Unsetenv);
            }
            config.env.push(EnvOp::Unset(var));
        }
        "--uid" | "--gid" => {
            let value = take_one(queue, name)?;
            let is_uid = name == "--uid";
            let slot = if is_uid {
                &mut config.uid
            } else {
                &mut config.gid
            };
            if slot.is_some() {
                warn_only_last(log, name);
            }
            let id = numbers::c_int(value.as_bytes()).and_then(|id| u32::try_from(id).ok());
            *slot = Some(id.ok_or_else(|| {
                if is_uid {
                    CliError::InvalidUid(lossy(&value))
                } else {
                    CliError::InvalidGid(lossy(&value))
                }
            })?);
        }
        "--hostname" => {
            let value = take_one(queue, name)?;
            if config.hostname.is_some() {
                warn_only_last(log, name);
            }
            config.ops.push(SetupOp::SetHostname {
                name: value.clone(),
            });
            config.hostname = Some(value);
        }
        "--new-session" => config.new_session = true,
        "--die-with-parent" => config.die_with_parent = true,
        "--as-pid-1" => config.as_pid_1 = true,
        "--cap-add" | "--cap-drop" => {
            let value = take_one(queue, name)?;
            let set = if value.as_bytes().eq_ignore_ascii_case(b"ALL") {
                u64::MAX
            } else {
                caps::parse_cap(value.as_bytes())
                    .ok_or_else(|| CliError::UnknownCap(lossy(&value)))?
            };
            config.cap_edits.push(if name == "--cap-add" {
                CapEdit::Add(set)
            } else {
                CapEdit::Drop(set)
            });
        }
        "--perms" => {
            let value = take_one(queue, name)?;
            if state.next_perms.is_some() {
                return Err(CliError::PermsTwice);
            }
            state.next_perms = Some(parse_mode(&value).ok_or(CliError::InvalidOctal("--perms"))?);
        }
        "--size" => {
            let value = take_one(queue, name)?;
            if state.next_size.is_some() {
                return Err(CliError::SizeTwice);
            }
            let size = numbers::c_size(value.as_bytes()).ok_or(CliError::InvalidSize)?;
            if size > MAX_TMPFS_BYTES {
                return Err(CliError::SizeTooLarge);
            }
            state.next_size = Some(size);
        }
        "--chmod" => {
            let (mode, dest) = take_two(queue, CliError::MissingArguments("--chmod"))?;
            let mode = parse_mode(&mode).ok_or(CliError::InvalidOctal("--chmod"))?;
            config.ops.push(SetupOp::Chmod { dest, mode });
        }
        other if UNSUPPORTED.contains(&other) => {
            return Err(CliError::Unsupported(other.to_owned()))
        }
        _ => return Err(CliError::UnknownOption(name.to_owned())),
    }
    Ok(None)
}

/// The cross-option checks, in bubblewrap's order, for `caller`.
/// `userns_enabled` is asked only for `--unshare-user-try`.
pub fn validate(
    config: &mut Config,
    caller: CallerIds,
    userns_enabled: impl FnOnce() -> bool,
) -> Result<(), CliError> {
    // Checked before a non-root caller's user namespace is implied.
    if config.disable_userns && !config.unshare.user {
        return Err(CliError::DisableUsernsWithoutUserns);
    }
    if caller.uid != 0 {
        config.unshare.user = true;
    }
    if config.unshare.user_try && userns_enabled() {
        config.unshare.user = true;
    }
    if config.command.is_empty() {
        return Err(CliError::NoCommand);
    }
    let requires_userns = |option| CliError::Requires {
        option,
        requires: "--unshare-user or --userns",
    };
    if !config.unshare.user && config.uid.is_some_and(|uid| uid != caller.uid) {
        return Err(requires_userns("--uid"));
    }
    if !config.unshare.user && config.gid.is_some_and(|gid| gid != caller.gid) {
        return Err(requires_userns("--gid"));
    }
    if config.hostname.is_some() && !config.unshare.uts {
        return Err(CliError::Requires {
            option: "--hostname",
            requires: "--unshare-uts",
        });
    }
    if config.as_pid_1 && !config.unshare.pid {
        return Err(CliError::Requires {
            option: "--as-pid-1",
            requires: "--unshare-pid",
        });
    }
    Ok(())
}

/// What `setenv`/`unsetenv` accept as a name: not empty, no `=`.
fn is_valid_env_name(name: &OsStr) -> bool {
    !name.is_empty() && !name.as_bytes().contains(&b'=')
}

fn lossy(value: &OsStr) -> String {
    value.to_string_lossy().into_owned()
}

/// An fd number as bubblewrap reads it (`strtol` into an int, not negative).
fn parse_fd(value: &OsStr) -> Result<RawFd, CliError> {
    numbers::c_int(value.as_bytes())
        .filter(|fd| *fd >= 0)
        .ok_or_else(|| CliError::InvalidFd(lossy(value)))
}

/// An octal mode up to 07777, as bubblewrap reads `--perms` and `--chmod`.
fn parse_mode(value: &OsStr) -> Option<u32> {
    numbers::c_ulong(value.as_bytes(), 8)
        .filter(|mode| *mode <= 0o7777)
        .and_then(|mode| u32::try_from(mode).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    fn run(list: &[&str]) -> Result<Config, CliError> {
        let mut log = Log::default();
        match parse(&args(list), &mut log)? {
            Parsed::Run(config) => Ok(*config),
            other => panic!("unexpected {other:?}"),
        }
    }

    fn checked(list: &[&str], uid: u32) -> Result<Config, CliError> {
        let mut config = run(list)?;
        validate(&mut config, CallerIds { uid, gid: uid }, || true)?;
        Ok(config)
    }

    #[test]
    fn options_become_setup_ops_in_order() {
        let config = run(&[
            "--ro-bind",
            "/",
            "/",
            "--perms",
            "0700",
            "--tmpfs",
            "/t",
            "true",
        ])
        .unwrap();
        assert_eq!(config.command, args(&["true"]));
        assert_eq!(
            config.ops[1],
            SetupOp::Tmpfs {
                dest: "/t".into(),
                perms: 0o700,
                size: None
            }
        );
    }

    #[test]
    fn perms_before_an_option_that_creates_nothing_is_refused() {
        assert!(matches!(
            run(&["--perms", "0700", "--ro-bind", "/", "/", "true"]),
            Err(CliError::DanglingPerms)
        ));
        assert!(matches!(
            run(&["--perms", "0700", "--perms", "0700", "--dir", "/x", "true"]),
            Err(CliError::PermsTwice)
        ));
    }

    #[test]
    fn cross_option_checks_run_before_anything() {
        let err = checked(&["--as-pid-1", "true"], 0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Specifying --as-pid-1 requires --unshare-pid"
        );
        assert_eq!(
            checked(&["--uid", "5", "true"], 0).unwrap_err().to_string(),
            "Specifying --uid requires --unshare-user or --userns"
        );
        // The caller's own id needs no user namespace.
        assert!(checked(&["--uid", "0", "true"], 0).is_ok());
        assert!(checked(&["--uid", "5", "true"], 1000).is_ok());
        // --disable-userns is checked before the implied user namespace.
        assert!(matches!(
            checked(&["--disable-userns", "true"], 1000),
            Err(CliError::DisableUsernsWithoutUserns)
        ));
    }

    #[test]
    fn missing_and_bad_arguments_name_the_option() {
        for (argv, message) in [
            (&["--bind", "/tmp"][..], "--bind takes two arguments"),
            (&["--ro-bind-fd", "3"], "--bind-fd takes two arguments"),
            (&["--uid"], "--uid takes an argument"),
            (&["--chdir"], "--chdir takes one argument"),
            (&["--argv0"], "--argv0 takes one argument"),
            (&["--remount-ro"], "--remount-ro takes one argument"),
            (&["--foo"], "Unknown option --foo"),
            (&["-"], "Unknown option -"),
            (&["--setenv", "", "v", "true"], "setenv failed"),
            (&["--setenv", "a=b", "v", "true"], "setenv failed"),
            (&["--unsetenv", "", "true"], "unsetenv failed"),
            (
                &["--argv0", "a", "--argv0", "b", "true"],
                "--argv0 used multiple times",
            ),
            (
                &["--size", "1", "--size", "2"],
                "--size given twice for the same action",
            ),
            (
                &["--size", "9223372036854775808", "--tmpfs", "/t"],
                "--size (for tmpfs) is limited to 9223372036854775807",
            ),
            (&["--cap-drop", "sys_admin"], "unknown cap: sys_admin"),
        ] {
            assert_eq!(run(argv).unwrap_err().to_string(), message, "{argv:?}");
        }
    }

    #[test]
    fn repeated_options_warn_that_the_last_one_counts() {
        let mut log = Log::default();
        let parsed = parse(
            &args(&[
                "--uid", "1", "--uid", "2", "--chdir", "/", "--chdir", "/tmp", "true",
            ]),
            &mut log,
        );
        let Ok(Parsed::Run(config)) = parsed else {
            panic!("{parsed:?}");
        };
        assert_eq!(config.uid, Some(2));
        assert_eq!(config.chdir, Some("/tmp".into()));
    }

    #[test]
    fn too_many_arguments_are_refused() {
        let many = vec!["--unshare-pid"; MAX_ARGS + 1];
        assert!(matches!(run(&many), Err(CliError::TooManyArguments)));
    }
}
