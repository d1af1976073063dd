//! The namespace, /proc and working-directory options, and the inner
//! stage's command line (with `--argv0` when the launcher has it, the
//! argv[1] marker otherwise).

use std::path::{Path, PathBuf};

use super::*;

impl Builder<'_> {
    pub(super) fn namespace_args(&mut self) {
        let i = self.inputs;
        self.out.texts(&[
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
        ]);
        // A routed sandbox with a DNS stub starts inside the network
        // namespace the helper prepared for it (`sandbox::routed_netns`).
        let prepared_netns = i
            .managed_proxy
            .as_ref()
            .is_some_and(ProxyMounts::in_prepared_netns);
        if !i.network_enabled && !prepared_netns {
            self.out.text("--unshare-net");
        }
        if i.caps.disable_userns {
            self.out.text("--disable-userns");
        }
        if i.caps.cap_drop {
            self.out.texts(&["--cap-drop", "ALL"]);
        }
        if i.mount_proc {
            self.out.texts(&["--proc", "/proc"]);
            // bubblewrap covers the kernel's global knobs only for a setuid
            // launcher; a root caller could otherwise write /proc/sys (e.g.
            // kernel.core_pattern). Bind them read-only over the fresh /proc.
            self.out.path2("--ro-bind", Path::new("/proc/sys"));
            for p in PROC_READ_ONLY_EXTRAS {
                self.out.path2("--ro-bind-try", Path::new(p));
            }
            // The launcher's pid 1 has the same uid, no capabilities and is
            // dumpable: through /proc/1 the command could reach its fds (the
            // helper's stderr pipe among them). Hide it (pidfd_getfd is
            // denied by seccomp).
            self.out.texts(&[
                "--perms",
                "555",
                "--tmpfs",
                "/proc/1",
                "--remount-ro",
                "/proc/1",
            ]);
        } else {
            // Without a fresh procfs the host's /proc (bound with `/`) would
            // show every host process: hide it instead.
            self.out.texts(&[
                "--perms",
                "555",
                "--tmpfs",
                "/proc",
                "--remount-ro",
                "/proc",
            ]);
        }
        self.out.tail_start = self.out.args.len();
        self.out.text("--chdir");
        self.out.text(self.start_dir());
    }

    /// The directory the launcher starts the inner stage in: the command's
    /// cwd (canonical, as it is bound) when the sandbox shows it, `/`
    /// otherwise. A cwd outside every readable root, or under a denied
    /// path, is not there (bubblewrap would refuse to start: `Can't
    /// chdir`); the command then runs at `/`, as the reference's does. The
    /// inner stage still tries the cwd itself, so a directory that exists
    /// inside only as the way to a deeper mount is entered all the same.
    fn start_dir(&self) -> PathBuf {
        let i = self.inputs;
        let cwd = canonical_or_self(&i.command_cwd);
        let masked = i
            .glob_matches
            .iter()
            .chain(&i.extra_deny)
            .any(|denied| cwd.starts_with(denied));
        let readable = i.policy.full_read
            || i.policy.can_read(&cwd)
            || i.host.readable_roots.iter().any(|root| {
                cwd.starts_with(root)
                    && !i
                        .policy
                        .unreadable_roots()
                        .iter()
                        .any(|u| cwd.starts_with(u))
            });
        if readable && !masked {
            cwd
        } else {
            PathBuf::from("/")
        }
    }

    /// The resolv.conf of managed routing, last, so no earlier tmpfs or
    /// mask hides it.
    pub(super) fn proxy_mount_args(&mut self) {
        let Some(mounts) = &self.inputs.managed_proxy else {
            return;
        };
        if let Some((file, target)) = &mounts.resolv_conf {
            self.out.text("--ro-bind");
            self.out.text(file);
            self.out.text(target);
        }
    }

    pub(super) fn inner_args(&mut self) {
        let inner = &self.inputs.inner;
        if self.inputs.caps.argv0 {
            self.out.texts(&["--argv0", INNER_ARGV0, "--"]);
            self.out.text(&inner.exe);
        } else {
            // No --argv0 (bubblewrap < 0.9): the marker selects the mode
            // whatever the executable's basename is.
            self.out.text("--");
            self.out.text(&inner.exe);
            self.out.text(crate::mode::LINUX_SANDBOX_ARG1);
        }
        for f in &inner.flags {
            self.out.text(f);
        }
        self.out.text("--");
        for c in &inner.command {
            self.out.text(c);
        }
    }
}
