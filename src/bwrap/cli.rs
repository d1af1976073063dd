//! The bubblewrap command line: argv (and `--args FD` data) into a [`Config`].
//!
//! Phase one of two: this module only parses and validates. Every cross-option
//! check runs here, before any namespace exists, so a bad command line never
//! gets as far as `clone`. Messages and exit codes follow bubblewrap's
//! (`bwrap: …`, exit 1). Nothing here touches the system except reading the
//! fd given to `--args`.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;

use super::caps::{self, CapEdit};
use super::ops::{EnvOp, SetupOp};
use crate::sys::{errno_text, fds};

/// Which namespaces the command line asked for. A user namespace is always
/// created by the built-in mode; `user` records whether it was asked for,
/// because bubblewrap's option checks depend on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unshare {
    pub user: bool,
    pub pid: bool,
    pub net: bool,
    pub ipc: bool,
    pub uts: bool,
    pub cgroup: bool,
    pub cgroup_try: bool,
}

/// Everything the command line asked for.
#[derive(Debug, Clone, Default)]
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
    pub seccomp_fds: Vec<RawFd>,
    pub cap_edits: Vec<CapEdit>,
    pub ops: Vec<SetupOp>,
    pub command: Vec<OsString>,
}

/// What to do after parsing.
#[derive(Debug)]
pub enum Parsed {
    Run(Box<Config>),
    Help,
    Version,
}

/// A command line bubblewrap would refuse. `Display` is the text after `bwrap: `.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CliError {
    #[error("Unknown option {0}")]
    UnknownOption(String),
    #[error("{0} takes an argument")]
    MissingArgument(&'static str),
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
    #[error("--size takes a non-zero number of bytes")]
    InvalidSize,
    #[error("unknown cap: {0}")]
    UnknownCap(String),
    #[error("--perms must be followed by an option that creates a file")]
    DanglingPerms,
    #[error("--size must be followed by --tmpfs")]
    DanglingSize,
    #[error("--add-seccomp-fd cannot be combined with --seccomp")]
    SeccompCombined,
    #[error("--seccomp cannot be combined with --add-seccomp-fd")]
    SeccompCombinedReverse,
    #[error("Specifying {option} requires {requires}")]
    Requires {
        option: &'static str,
        requires: &'static str,
    },
    #[error("{0} requires --unshare-user")]
    RequiresUserns(&'static str),
    #[error("Can't read --args data: {0}")]
    ArgsRead(String),
    #[error("{0} is not supported by the built-in bwrap")]
    Unsupported(String),
    /// No command: bubblewrap prints its usage on stderr and exits 1.
    #[error("No command specified")]
    NoCommand,
}

/// Options that exist in bubblewrap 0.11 but are not implemented here.
const UNSUPPORTED: [&str; 13] = [
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
    "--level-prefix",
];

/// The usage text, with `prog` as bubblewrap prints its own argv[0].
pub fn usage(prog: &str) -> String {
    format!(
        "usage: {prog} [OPTIONS...] [--] COMMAND [ARGS...]

    --help                       Print this help
    --version                    Print version
    --args FD                    Parse NUL-separated args from FD
    --argv0 VALUE                Set argv[0] to the value VALUE before running the program
    --unshare-all                Unshare every namespace we support by default
    --share-net                  Retain the network namespace (can only combine with --unshare-all)
    --unshare-user               Create new user namespace (may be automatically implied if not setuid)
    --unshare-user-try           Create new user namespace if possible else continue by skipping it
    --unshare-ipc                Create new ipc namespace
    --unshare-pid                Create new pid namespace
    --unshare-net                Create new network namespace
    --unshare-uts                Create new uts namespace
    --unshare-cgroup             Create new cgroup namespace
    --unshare-cgroup-try         Create new cgroup namespace if possible else continue by skipping it
    --disable-userns             Disable further use of user namespaces inside sandbox
    --uid UID                    Custom uid in the sandbox (requires --unshare-user or --userns)
    --gid GID                    Custom gid in the sandbox (requires --unshare-user or --userns)
    --hostname NAME              Custom hostname in the sandbox (requires --unshare-uts)
    --chdir DIR                  Change directory to DIR
    --clearenv                   Unset all environment variables
    --setenv VAR VALUE           Set an environment variable
    --unsetenv VAR               Unset an environment variable
    --sync-fd FD                 Keep this fd open while sandbox is running
    --bind SRC DEST              Bind mount the host path SRC on DEST
    --bind-try SRC DEST          Equal to --bind but ignores non-existent SRC
    --dev-bind SRC DEST          Bind mount the host path SRC on DEST, allowing device access
    --dev-bind-try SRC DEST      Equal to --dev-bind but ignores non-existent SRC
    --ro-bind SRC DEST           Bind mount the host path SRC readonly on DEST
    --ro-bind-try SRC DEST       Equal to --ro-bind but ignores non-existent SRC
    --bind-fd FD DEST            Bind open directory or path fd on DEST
    --ro-bind-fd FD DEST         Bind open directory or path fd read-only on DEST
    --remount-ro DEST            Remount DEST as readonly; does not recursively remount
    --proc DEST                  Mount new procfs on DEST
    --dev DEST                   Mount new dev on DEST
    --tmpfs DEST                 Mount new tmpfs on DEST
    --mqueue DEST                Mount new mqueue on DEST
    --dir DEST                   Create dir at DEST
    --file FD DEST               Copy from FD to destination DEST
    --bind-data FD DEST          Copy from FD to file which is bind-mounted on DEST
    --ro-bind-data FD DEST       Copy from FD to file which is readonly bind-mounted on DEST
    --symlink SRC DEST           Create symlink at DEST with target SRC
    --seccomp FD                 Load and use seccomp rules from FD (not repeatable)
    --add-seccomp-fd FD          Load and use seccomp rules from FD (repeatable)
    --block-fd FD                Block on FD until some data to read is available
    --info-fd FD                 Write information about the running container to FD
    --json-status-fd FD          Write container status to FD as multiple JSON documents
    --new-session                Create a new terminal session
    --die-with-parent            Kills with SIGKILL child process (COMMAND) when bwrap or bwrap's parent dies.
    --as-pid-1                   Do not install a reaper process with PID=1
    --cap-add CAP                Add cap CAP when running as privileged user
    --cap-drop CAP               Drop cap CAP when running as privileged user
    --perms OCTAL                Set permissions of next argument (--bind-data, --file, etc.)
    --size BYTES                 Set size of next argument (only for --tmpfs)
    --chmod OCTAL PATH           Change permissions of PATH (must already exist)
"
    )
}

/// Parses the arguments after argv[0]. `caller_is_root` decides whether a user
/// namespace is implied, which bubblewrap's option checks depend on.
pub fn parse(args: &[OsString], caller_is_root: bool) -> Result<Parsed, CliError> {
    let mut queue: VecDeque<OsString> = args.iter().cloned().collect();
    let mut config = Config::default();
    let mut next_perms: Option<u32> = None;
    let mut next_size: Option<u64> = None;
    let mut seccomp_single = false;
    let mut seccomp_added = false;
    let mut unshare_user_try = false;

    while let Some(arg) = queue.pop_front() {
        if arg == "--" {
            break;
        }
        if !arg.as_bytes().starts_with(b"-") {
            queue.push_front(arg);
            break;
        }
        let name = arg.to_string_lossy().into_owned();
        let mut take_one = |option: &'static str| -> Result<OsString, CliError> {
            queue.pop_front().ok_or(CliError::MissingArgument(option))
        };
        let mut op: Option<SetupOp> = None;
        match name.as_str() {
            "--help" => return Ok(Parsed::Help),
            "--version" => return Ok(Parsed::Version),
            "--args" => {
                let fd = parse_fd(&take_one("--args")?)?;
                let data = fds::read_all(fd).map_err(|err| CliError::ArgsRead(errno_text(&err)))?;
                fds::close(fd);
                let mut injected: Vec<OsString> = data
                    .split(|byte| *byte == 0)
                    .map(|chunk| OsStr::from_bytes(chunk).to_owned())
                    .collect();
                // The data is NUL-terminated: the last split is empty.
                if data.last() == Some(&0) || data.is_empty() {
                    injected.pop();
                }
                for item in injected.into_iter().rev() {
                    queue.push_front(item);
                }
            }
            "--argv0" => config.argv0 = Some(take_one("--argv0")?),
            "--unshare-all" => {
                unshare_user_try = true;
                config.unshare.ipc = true;
                config.unshare.pid = true;
                config.unshare.net = true;
                config.unshare.uts = true;
                config.unshare.cgroup_try = true;
            }
            "--share-net" => config.unshare.net = false,
            "--unshare-user" => config.unshare.user = true,
            "--unshare-user-try" => unshare_user_try = true,
            "--unshare-ipc" => config.unshare.ipc = true,
            "--unshare-pid" => config.unshare.pid = true,
            "--unshare-net" => config.unshare.net = true,
            "--unshare-uts" => config.unshare.uts = true,
            "--unshare-cgroup" => config.unshare.cgroup = true,
            "--unshare-cgroup-try" => config.unshare.cgroup_try = true,
            "--disable-userns" => config.disable_userns = true,
            "--uid" => {
                let value = take_one("--uid")?;
                config.uid =
                    Some(parse_id(&value).ok_or_else(|| CliError::InvalidUid(lossy(&value)))?);
            }
            "--gid" => {
                let value = take_one("--gid")?;
                config.gid =
                    Some(parse_id(&value).ok_or_else(|| CliError::InvalidGid(lossy(&value)))?);
            }
            "--hostname" => config.hostname = Some(take_one("--hostname")?),
            "--chdir" => config.chdir = Some(take_one("--chdir")?),
            "--clearenv" => config.env.push(EnvOp::Clear),
            "--setenv" => {
                let (var, value) = take_two(&mut queue, "--setenv")?;
                config.env.push(EnvOp::Set(var, value));
            }
            "--unsetenv" => config.env.push(EnvOp::Unset(take_one("--unsetenv")?)),
            "--sync-fd" => config.sync_fd = Some(parse_fd(&take_one("--sync-fd")?)?),
            "--block-fd" => config.block_fd = Some(parse_fd(&take_one("--block-fd")?)?),
            "--info-fd" => config.info_fd = Some(parse_fd(&take_one("--info-fd")?)?),
            "--json-status-fd" => {
                config.json_status_fd = Some(parse_fd(&take_one("--json-status-fd")?)?)
            }
            "--seccomp" => {
                let fd = parse_fd(&take_one("--seccomp")?)?;
                if seccomp_added {
                    return Err(CliError::SeccompCombinedReverse);
                }
                seccomp_single = true;
                config.seccomp_fds = vec![fd];
            }
            "--add-seccomp-fd" => {
                let fd = parse_fd(&take_one("--add-seccomp-fd")?)?;
                if seccomp_single {
                    return Err(CliError::SeccompCombined);
                }
                seccomp_added = true;
                config.seccomp_fds.push(fd);
            }
            "--new-session" => config.new_session = true,
            "--die-with-parent" => config.die_with_parent = true,
            "--as-pid-1" => config.as_pid_1 = true,
            "--cap-add" | "--cap-drop" => {
                let option = if name == "--cap-add" {
                    "--cap-add"
                } else {
                    "--cap-drop"
                };
                let value = take_one(option)?;
                let set = caps::parse_cap(&value.to_string_lossy())
                    .ok_or_else(|| CliError::UnknownCap(lossy(&value)))?;
                config.cap_edits.push(if option == "--cap-add" {
                    CapEdit::Add(set)
                } else {
                    CapEdit::Drop(set)
                });
            }
            "--perms" => {
                let value = take_one("--perms")?;
                next_perms = Some(parse_octal(&value).ok_or(CliError::InvalidOctal("--perms"))?);
                continue;
            }
            "--size" => {
                let value = take_one("--size")?;
                let size = value
                    .to_str()
                    .and_then(|text| text.parse::<u64>().ok())
                    .filter(|size| *size > 0)
                    .ok_or(CliError::InvalidSize)?;
                next_size = Some(size);
                continue;
            }
            "--chmod" => {
                let (mode, dest) = take_two(&mut queue, "--chmod")?;
                let mode = parse_octal(&mode).ok_or(CliError::InvalidOctal("--chmod"))?;
                op = Some(SetupOp::Chmod { dest, mode });
            }
            "--bind" | "--bind-try" | "--ro-bind" | "--ro-bind-try" | "--dev-bind"
            | "--dev-bind-try" => {
                let option = static_name(&name);
                let (source, dest) = take_two(&mut queue, option)?;
                op = Some(SetupOp::Bind {
                    source,
                    dest,
                    readonly: name.starts_with("--ro-"),
                    devices: name.starts_with("--dev-"),
                    allow_missing: name.ends_with("-try"),
                });
            }
            "--bind-fd" | "--ro-bind-fd" => {
                let option = static_name(&name);
                let (fd, dest) = take_two(&mut queue, option)?;
                op = Some(SetupOp::BindFd {
                    fd: parse_fd(&fd)?,
                    dest,
                    readonly: name == "--ro-bind-fd",
                });
            }
            "--remount-ro" => {
                op = Some(SetupOp::RemountRo {
                    dest: take_one("--remount-ro")?,
                })
            }
            "--proc" => {
                op = Some(SetupOp::Proc {
                    dest: take_one("--proc")?,
                })
            }
            "--dev" => {
                op = Some(SetupOp::Dev {
                    dest: take_one("--dev")?,
                })
            }
            "--tmpfs" => {
                op = Some(SetupOp::Tmpfs {
                    dest: take_one("--tmpfs")?,
                    perms: next_perms.take(),
                    size: next_size.take(),
                })
            }
            "--mqueue" => {
                op = Some(SetupOp::Mqueue {
                    dest: take_one("--mqueue")?,
                })
            }
            "--dir" => {
                op = Some(SetupOp::Dir {
                    dest: take_one("--dir")?,
                    perms: next_perms.take(),
                })
            }
            "--symlink" => {
                let (target, dest) = take_two(&mut queue, "--symlink")?;
                op = Some(SetupOp::Symlink { target, dest });
            }
            "--file" | "--bind-data" | "--ro-bind-data" => {
                let option = static_name(&name);
                let (fd, dest) = take_two(&mut queue, option)?;
                let fd = parse_fd(&fd)?;
                op = Some(if name == "--file" {
                    SetupOp::File {
                        fd,
                        dest,
                        perms: next_perms.take(),
                    }
                } else {
                    SetupOp::BindData {
                        fd,
                        dest,
                        readonly: name == "--ro-bind-data",
                        perms: next_perms.take(),
                    }
                });
            }
            other if UNSUPPORTED.contains(&other) => {
                return Err(CliError::Unsupported(other.to_owned()))
            }
            _ => return Err(CliError::UnknownOption(name)),
        }
        if let Some(op) = op {
            config.ops.push(op);
        }
        // --perms / --size apply to the option right after them only.
        if next_perms.is_some() {
            return Err(CliError::DanglingPerms);
        }
        if next_size.is_some() {
            return Err(CliError::DanglingSize);
        }
    }

    config.command = queue.into_iter().collect();
    validate(&mut config, caller_is_root, unshare_user_try)?;
    Ok(Parsed::Run(Box::new(config)))
}

/// The cross-option checks, in bubblewrap's order. A user namespace is implied
/// for a caller that is not root (bubblewrap's rule when not setuid).
fn validate(
    config: &mut Config,
    caller_is_root: bool,
    unshare_user_try: bool,
) -> Result<(), CliError> {
    if !caller_is_root || unshare_user_try {
        config.unshare.user = true;
    }
    if config.command.is_empty() {
        return Err(CliError::NoCommand);
    }
    if config.uid.is_some() && !config.unshare.user {
        return Err(CliError::Requires {
            option: "--uid",
            requires: "--unshare-user or --userns",
        });
    }
    if config.gid.is_some() && !config.unshare.user {
        return Err(CliError::Requires {
            option: "--gid",
            requires: "--unshare-user or --userns",
        });
    }
    if config.disable_userns && !config.unshare.user {
        return Err(CliError::RequiresUserns("--disable-userns"));
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

fn take_two(
    queue: &mut VecDeque<OsString>,
    option: &'static str,
) -> Result<(OsString, OsString), CliError> {
    if queue.len() < 2 {
        return Err(CliError::MissingArguments(option));
    }
    match (queue.pop_front(), queue.pop_front()) {
        (Some(first), Some(second)) => Ok((first, second)),
        _ => Err(CliError::MissingArguments(option)),
    }
}

/// The option names that take two arguments, as `'static` strings for errors.
fn static_name(name: &str) -> &'static str {
    const NAMES: [&str; 13] = [
        "--bind",
        "--bind-try",
        "--ro-bind",
        "--ro-bind-try",
        "--dev-bind",
        "--dev-bind-try",
        "--bind-fd",
        "--ro-bind-fd",
        "--file",
        "--bind-data",
        "--ro-bind-data",
        "--symlink",
        "--chmod",
    ];
    NAMES
        .into_iter()
        .find(|known| *known == name)
        .unwrap_or("option")
}

fn lossy(value: &OsStr) -> String {
    value.to_string_lossy().into_owned()
}

/// An fd number as bubblewrap accepts it: a non-negative decimal integer.
fn parse_fd(value: &OsStr) -> Result<RawFd, CliError> {
    value
        .to_str()
        .and_then(|text| text.parse::<RawFd>().ok())
        .filter(|fd| *fd >= 0)
        .ok_or_else(|| CliError::InvalidFd(lossy(value)))
}

fn parse_id(value: &OsStr) -> Option<u32> {
    value.to_str()?.parse::<u32>().ok()
}

/// An octal mode up to 07777.
fn parse_octal(value: &OsStr) -> Option<u32> {
    let text = value.to_str()?;
    if text.is_empty() {
        return None;
    }
    u32::from_str_radix(text, 8)
        .ok()
        .filter(|mode| *mode <= 0o7777)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    fn run(list: &[&str]) -> Result<Config, CliError> {
        match parse(&args(list), true)? {
            Parsed::Run(config) => Ok(*config),
            other => panic!("unexpected {other:?}"),
        }
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
                perms: Some(0o700),
                size: None
            }
        );
    }

    #[test]
    fn perms_before_an_option_that_creates_nothing_is_refused() {
        assert_eq!(
            run(&["--perms", "0700", "--ro-bind", "/", "/", "true"]).unwrap_err(),
            CliError::DanglingPerms
        );
    }

    #[test]
    fn cross_option_checks_run_before_anything() {
        let err = run(&["--as-pid-1", "true"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Specifying --as-pid-1 requires --unshare-pid"
        );
        assert_eq!(
            run(&["--uid", "5", "true"]).unwrap_err().to_string(),
            "Specifying --uid requires --unshare-user or --userns"
        );
        assert!(matches!(
            parse(&args(&["--uid", "5", "true"]), false),
            Ok(Parsed::Run(_))
        ));
    }

    #[test]
    fn missing_and_bad_arguments_name_the_option() {
        assert_eq!(
            run(&["--bind", "/tmp"]).unwrap_err().to_string(),
            "--bind takes two arguments"
        );
        assert_eq!(
            run(&["--uid"]).unwrap_err().to_string(),
            "--uid takes an argument"
        );
        assert_eq!(
            run(&["--foo"]).unwrap_err().to_string(),
            "Unknown option --foo"
        );
    }
}
