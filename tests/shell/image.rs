//! The container image (Containerfile, scripts/image): where podman or
//! docker works, pack the binary under test onto the image's base
//! (`--binary`: the Containerfile's final stage, without compiling again in
//! the Rust image) and run a rendezvous and a remote executor from it, with
//! a command through them from the host's binary. Where no engine works, or
//! the base cannot be pulled, the test says so and skips (CI hosts have no
//! engine). `CODEXBOX_IMAGE_BASE` names another base (e.g. a local one on a
//! host without registry access).

use std::process::Command;

#[test]
fn the_image_runs_a_rendezvous_and_an_executor() {
    let mut command = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/image"));
    command.args(["smoke", "--binary", env!("CARGO_BIN_EXE_codexbox")]);
    if let Some(base) = std::env::var_os("CODEXBOX_IMAGE_BASE") {
        command.arg("--base").arg(base);
    }
    let out = command
        .env("CODEXBOX_BIN", env!("CARGO_BIN_EXE_codexbox"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run scripts/image");
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => assert!(stderr.contains("smoke test passed"), "{stderr}"),
        Some(77) => crate::common::host::not_applicable(stderr.trim()),
        other => panic!("scripts/image smoke failed ({other:?}):\n{stderr}"),
    }
}
