pub mod bwrap;
