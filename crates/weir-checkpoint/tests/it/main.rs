//! Integration tests of weir-checkpoint against real stores: the local file
//! system, an in-process store, and S3 through a moto server on loopback.

mod common;
mod crash;
mod fuzz;
mod lease;
mod retention;
mod s3;
mod savepoint;
mod storage;
#[cfg(unix)]
mod symlink;
mod timeline;

/// Counts what each test thread allocates (see `fuzz`).
#[global_allocator]
static ALLOCATOR: weir_testing::CountingAllocator = weir_testing::CountingAllocator;
