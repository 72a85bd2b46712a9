//! End-to-end tests of the `weir` binary on real checkpoints and savepoints
//! built with the library crates in temporary directories.

mod common;
mod dispose;
mod dump;
mod errors;
mod incremental;
mod info;
mod list;
mod verify;
