//! Integration tests of weir-snapshot against the heap backend and real
//! object stores (local file system and in-memory).

mod cancel;
mod common;
mod corrupt;
mod incremental;
mod operator;
mod rescale;
