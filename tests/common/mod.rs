#![allow(dead_code)]
pub mod fs;
