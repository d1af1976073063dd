#![allow(dead_code)]
pub mod client;
pub mod fs;
