pub mod confine;
