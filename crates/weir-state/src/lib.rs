//! Keyed and operator state for Weir: the backend contract, the heap backend,
//! epoch versions and operator state.
//!
//! A [`KeyedStateBackend`] holds the keyed state of one operator subtask: the
//! key groups of its [`KeyGroupRange`](weir_types::KeyGroupRange), every
//! registered state, and the epoch versions that make Spark task retries
//! harmless. Its synchronous snapshot part returns a [`FrozenKeyedState`] that
//! the asynchronous part (crate `weir-snapshot`) serializes while new epochs
//! keep writing. [`HeapKeyedStateBackend`] keeps everything in memory;
//! [`EpochLog`] is the epoch bookkeeping every backend shares, and
//! [`OperatorStateStore`] holds the non-keyed state of a subtask.
//! [`load_key_groups`] restores key groups of a backend that hands them out
//! (the heap) on several threads at once; [`LoadThreads`] shares the cores
//! among restores running at once.
//!
//! A retried epoch sees the state as it was before its first attempt:
//!
//! ```
//! use weir_state::{HeapKeyedStateBackend, KeyedStateBackend, StateKey};
//! use weir_types::{Attempt, Epoch, KeyGroup, MaxParallelism, StateDescriptor, StateKind, ValueType};
//!
//! let max = MaxParallelism::new(128)?;
//! let mut backend = HeapKeyedStateBackend::new(max, max.full_range())?;
//! let count = backend.register_state(&StateDescriptor::new("count", StateKind::Value, ValueType::Int64)?)?;
//! let key = StateKey::new(KeyGroup(7), b"user-1");
//!
//! backend.begin_epoch(Epoch(1), Attempt(0))?;
//! backend.put_value(count, key, b"1")?;
//! backend.commit_epoch(Epoch(1), Attempt(0))?;
//!
//! backend.begin_epoch(Epoch(2), Attempt(0))?;
//! backend.put_value(count, key, b"2")?;
//! backend.begin_epoch(Epoch(2), Attempt(1))?; // Spark retried the task
//! assert_eq!(backend.get_value(count, key)?.as_deref(), Some(&b"1"[..]));
//!
//! backend.commit_epoch(Epoch(2), Attempt(1))?;
//! backend.finalize_up_to(Epoch(2))?;
//! let view = backend.snapshot_sync()?; // shares the tables, copies nothing
//! # let _ = view;
//! # Ok::<(), weir_state::StateError>(())
//! ```
//!
//! This crate does no I/O and knows nothing of Python, Spark or storage.

mod backend;
mod bytes;
mod epoch;
mod error;
mod frozen;
mod heap;
mod key;
mod operator;
mod parallel_load;
mod registry;

pub use backend::{KeyGroupLoad, KeyedStateBackend, StateId, ValueUpdate, ValueUpdateFn};
pub use bytes::SmallBytes;
pub use epoch::{DiscardDecision, EpochLog, EpochStatus, FinalizeDecision, PendingEpoch};
pub use error::{Result, StateError};
pub use frozen::{EntryPayload, FrozenKeyedState, StateEntry};
pub use heap::{EntryHint, HeapKeyedStateBackend, PREFETCH_AHEAD};
pub use key::{StateKey, list_items, push_list_item};
pub use operator::{
    OPERATOR_STATE_VERSION, OperatorListSnapshot, OperatorStateSnapshot, OperatorStateStore,
    RedistributionMode, redistribute,
};
pub use parallel_load::{LoadThreads, load_key_groups};
pub use registry::{Access, StateRegistry, check_key_group};
