//! Integration tests of the RocksDB keyed state backend.

mod access;
mod epochs;
mod fixture;
mod native;
mod snapshot;
