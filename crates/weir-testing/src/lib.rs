//! Test support shared by Weir's crates: a plain reference model of keyed
//! state, random operation sequences, and a runner that checks several
//! backends agree step by step. Not shipped; used by tests and benches.

pub mod model;
pub mod ops;

pub use model::{Content, Dump, ModelBackend, dump};
pub use ops::{Driver, Op, Outcome, descriptors, op, run_and_compare};
