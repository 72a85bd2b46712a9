//! Integration tests of `weir-state` through its public API.

mod heap;
