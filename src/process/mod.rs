//! Managed processes: spawning (pipes or PTY), output capture, retention, signals and tree-wide termination.
