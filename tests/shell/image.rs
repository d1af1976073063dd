//! The container image (Containerfile, scripts/image): where podman or
//! docker works, build it and run a rendezvous and a remote executor from
//! it, with a command through them from the host's binary. Where no
//! engine works the test says so and skips (no CI host here has one).

use std::process::Command;

#[test]
fn the_image_runs_a_rendezvous_and_an_executor() {
    let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/image"))
        .arg("smoke")
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
