//! bubblewrap's `--help` text, printed with the caller's `argv[0]`, and a
//! clap definition read from it for completions and the man page (the mode
//! itself parses with its own bubblewrap-compatible parser).

/// The usage text, with `prog` as bubblewrap prints its own `argv[0]`.
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

/// bubblewrap's options as a clap definition, one argument per line of the
/// usage text (`--bind SRC DEST` takes two values, `--unshare-all` none),
/// and the command after them. Only for completions and the man page.
pub fn command() -> clap::Command {
    let text = usage("bwrap");
    let options = text.lines().filter_map(|line| {
        let line = line.trim_start();
        let (spec, help) = line.split_once("  ")?;
        let mut words = spec.split_whitespace();
        let long = words.next()?.strip_prefix("--")?.to_owned();
        let values: Vec<String> = words.map(str::to_owned).collect();
        let arg = clap::Arg::new(long.clone())
            .long(long)
            .help(help.trim().to_owned());
        Some(if values.is_empty() {
            arg.action(clap::ArgAction::SetTrue)
        } else {
            arg.num_args(values.len())
                .value_names(values)
                .action(clap::ArgAction::Append)
        })
    });
    clap::Command::new("bwrap")
        .about("Built-in bubblewrap-compatible launcher: unprivileged user namespaces, no setuid")
        .after_help(
            "Options, messages and exit statuses are bubblewrap 0.11's: a refused command line \
             prints `bwrap: …` and exits 1.",
        )
        .disable_help_flag(true)
        .disable_version_flag(true)
        .args(options)
        .arg(
            clap::Arg::new("COMMAND")
                .num_args(1..)
                .trailing_var_arg(true)
                .value_name("COMMAND"),
        )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_definition_holds_every_option_of_the_usage_text() {
        let command = super::command();
        let usage = super::usage("bwrap");
        let listed = usage
            .lines()
            .filter(|line| line.trim_start().starts_with("--"))
            .count();
        let defined = command
            .get_arguments()
            .filter(|a| a.get_long().is_some())
            .count();
        assert_eq!(listed, defined);
        let bind = command
            .get_arguments()
            .find(|a| a.get_long() == Some("bind"))
            .and_then(|a| a.get_num_args());
        assert_eq!(bind, Some(2.into()));
        command.debug_assert();
    }
}
