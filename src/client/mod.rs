//! `ExecServerClient`: an async Rust client for the exec-server.
