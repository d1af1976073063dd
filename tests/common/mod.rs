pub mod bwrap;
pub mod confine;
pub mod sandbox;
