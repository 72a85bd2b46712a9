//! Keyed and operator state for Weir: the backend contract, the heap backend,
//! epoch versions and operator state.
//!
//! A [`KeyedStateBackend`] holds the keyed state of one operator subtask: the
//! key groups of its [`KeyGroupRange`](weir_types::KeyGroupRange), every
//! registered state, and the epoch versions that make Spark task retries
//! harmless. Its synchronous snapshot part returns a [`FrozenKeyedState`] that
//! the asynchronous part (crate `weir-snapshot`) serializes while new epochs
//! keep writing.
//!
//! This crate does no I/O and knows nothing of Python, Spark or storage.

mod backend;
mod epoch;
mod error;
mod frozen;
mod heap;
mod key;
mod operator;

pub use backend::{KeyedStateBackend, StateId};
pub use epoch::{DiscardDecision, EpochLog, EpochStatus, FinalizeDecision, PendingEpoch};
pub use error::{Result, StateError};
pub use frozen::{EntryPayload, FrozenKeyedState, StateEntry};
pub use heap::HeapKeyedStateBackend;
pub use key::{StateKey, list_items, push_list_item};
pub use operator::{
    OPERATOR_STATE_VERSION, OperatorListSnapshot, OperatorStateSnapshot, OperatorStateStore,
    RedistributionMode, redistribute,
};
