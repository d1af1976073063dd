pub mod confine;
pub mod sandbox;
