//! The result of a snapshot's synchronous part: an immutable view of the state.

use weir_types::{KeyGroup, KeyGroupRange, MaxParallelism, StateDescriptor};

use crate::backend::StateId;
use crate::error::Result;

/// What one entry holds, in the canonical, backend-independent form that
/// snapshot files store (so a heap snapshot restores into RocksDB and back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryPayload<'a> {
    /// The encoded value of a value, reducing or aggregating state.
    Value(&'a [u8]),
    /// A list payload (see [`crate::push_list_item`]); never empty.
    List(&'a [u8]),
    /// One entry of a map state.
    MapEntry {
        /// The encoded user key.
        user_key: &'a [u8],
        /// The encoded value.
        value: &'a [u8],
    },
}

/// One entry of keyed state, as snapshots carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateEntry<'a> {
    /// Index into [`FrozenKeyedState::descriptors`] (the snapshot's own ids).
    pub state: StateId,
    /// The key group of `key`.
    pub key_group: KeyGroup,
    /// The encoded key.
    pub key: &'a [u8],
    /// The encoded namespace.
    pub namespace: &'a [u8],
    /// The data.
    pub payload: EntryPayload<'a>,
}

/// An immutable view of a backend's keyed state, taken by
/// [`KeyedStateBackend::snapshot_sync`](crate::KeyedStateBackend::snapshot_sync).
///
/// Contract: later writes to the backend never show through this view; the
/// view may be read from another thread while the backend keeps working.
pub trait FrozenKeyedState: Send + Sync {
    /// The states, indexed by [`StateId`].
    fn descriptors(&self) -> &[StateDescriptor];

    /// The key groups the view covers.
    fn key_group_range(&self) -> KeyGroupRange;

    /// The max parallelism of the state.
    fn max_parallelism(&self) -> MaxParallelism;

    /// Visits every entry of `key_group` (of every state, in no particular
    /// order); stops at the visitor's first error and returns it.
    fn for_each_entry(
        &self,
        key_group: KeyGroup,
        visit: &mut dyn FnMut(StateEntry<'_>) -> Result<()>,
    ) -> Result<()>;
}
