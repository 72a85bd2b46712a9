//! Integration tests of weir-snapshot against the heap backend and real
//! object stores (local file system and in-memory).

mod cancel;
mod common;
mod corrupt;
mod fuzz;
mod incremental;
mod limits;
mod operator;
mod rescale;

/// Counts what each test thread allocates (see `limits` and `fuzz`).
#[global_allocator]
static ALLOCATOR: weir_testing::CountingAllocator = weir_testing::CountingAllocator;
