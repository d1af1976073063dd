//! The Linux sandbox: policy model, bubblewrap argv, launcher selection, seccomp, Landlock, and the `linux-sandbox`, `sandbox` and `doctor` front ends.
pub mod cli;
pub mod confine;
pub mod debug;
pub mod doctor;
pub mod landlock;
pub mod policy;
pub mod probe;
pub mod seccomp;
