//! Test support shared by Weir's crates: a plain reference model of keyed
//! state, random operation sequences, a runner that checks several
//! backends agree step by step, an allocator that measures what code
//! allocates, and the settings of fuzz-style tests. Not shipped; used by tests and benches.

pub mod alloc;
pub mod fuzz;
pub mod model;
pub mod ops;

pub use alloc::{CountingAllocator, peak_allocated};
pub use fuzz::{Mutation, fuzz_cases};
pub use model::{Content, Dump, ModelBackend, dump};
pub use ops::{Driver, Op, Outcome, descriptors, op, run_and_compare};
