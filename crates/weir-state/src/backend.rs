//! The contract every keyed state backend fulfils.
//!
//! # Epoch versions
//! Writes happen inside an epoch attempt. A backend keeps the *base* (all
//! finalized epochs) plus the writes of each newer, not yet final epoch,
//! stacked in epoch order; reads see the base and every open epoch.
//! - `begin_epoch(e, a)`: `e` must be newer than the last finalized epoch. Any
//!   writes of `e` or of later epochs are discarded first, so a new attempt of
//!   an epoch sees the state as it was before the first attempt. `e` becomes the
//!   epoch that writes go to.
//! - `commit_epoch(e, a)`: attempt `a` of `e` finished; its writes are kept but
//!   no more are accepted until the next `begin_epoch`.
//! - `finalize_up_to(e)`: every epoch `<= e` becomes part of the base; they must
//!   all be committed. Idempotent.
//! - `discard_from(e)`: drops the writes of `e` and every later epoch.
//!
//! # Snapshots
//! `snapshot_sync` is the synchronous part of a snapshot: cheap (no copy of
//! the data), and only allowed when no epoch is open or committed but not
//! final, so the view is exactly the base.
//!
//! # Restore
//! `ingest` writes canonical entries straight into the base, before the first
//! epoch; `weir-snapshot` drives it from snapshot files, inside
//! `begin_bulk_load`/`finish_bulk_load` so a backend can load them in bulk
//! (RocksDB writes sorted SST files and ingests them whole). A backend may
//! also hand out whole key groups (`detach_key_group`) that a restore fills
//! on several threads at once and gives back (`attach_key_group`); the heap
//! does.

use std::any::Any;
use std::borrow::Cow;

use weir_types::{Attempt, Epoch, KeyGroup, KeyGroupRange, MaxParallelism, StateDescriptor};

use crate::error::{Result, StateError};
use crate::frozen::{FrozenKeyedState, StateEntry};
use crate::key::StateKey;

/// A registered state of a backend: an index into its descriptor table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StateId(pub u32);

/// What [`KeyedStateBackend::update_value`] does with a value it has read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueUpdate {
    /// Leave the value as it is.
    Keep,
    /// Set it to the bytes the update wrote into its buffer.
    Set,
    /// Remove it.
    Remove,
}

/// The decision of [`KeyedStateBackend::update_value`]: it gets the current
/// value (`None` when there is none) and a cleared buffer for the new one.
pub type ValueUpdateFn<'a> = dyn FnMut(Option<&[u8]>, &mut Vec<u8>) -> Result<ValueUpdate> + 'a;

/// Keyed state of one operator subtask.
///
/// Every access names its state by the [`StateId`] from
/// [`register_state`](Self::register_state) and checks the state's kind:
/// value access on value, reducing and aggregating states; list access on list
/// states; map access on map states. Keys outside the backend's key-group range
/// are errors. Values are encoded bytes (see [`weir_types::encode_value`]); the
/// backend does not decode them.
pub trait KeyedStateBackend: Send {
    /// The key groups this backend holds.
    fn key_group_range(&self) -> KeyGroupRange;

    /// The max parallelism of the state.
    fn max_parallelism(&self) -> MaxParallelism;

    /// Registers a state, or returns the id of an identical one already
    /// registered; a different descriptor under the same name is an error.
    fn register_state(&mut self, descriptor: &StateDescriptor) -> Result<StateId>;

    /// The registered states, indexed by [`StateId`].
    fn descriptors(&self) -> &[StateDescriptor];

    /// Starts attempt `attempt` of `epoch` (see the module docs).
    fn begin_epoch(&mut self, epoch: Epoch, attempt: Attempt) -> Result<()>;

    /// Marks the current attempt of `epoch` as finished.
    fn commit_epoch(&mut self, epoch: Epoch, attempt: Attempt) -> Result<()>;

    /// Folds every epoch `<= epoch` into the base.
    fn finalize_up_to(&mut self, epoch: Epoch) -> Result<()>;

    /// Drops the writes of `epoch` and every later epoch.
    fn discard_from(&mut self, epoch: Epoch) -> Result<()>;

    /// The last finalized epoch, if any.
    fn last_final_epoch(&self) -> Option<Epoch>;

    /// The value of a value, reducing or aggregating state.
    fn get_value(&mut self, state: StateId, key: StateKey<'_>) -> Result<Option<Cow<'_, [u8]>>>;

    /// Sets the value of a value, reducing or aggregating state.
    fn put_value(&mut self, state: StateId, key: StateKey<'_>, value: &[u8]) -> Result<()>;

    /// Reads and rewrites one value of a value, reducing or aggregating
    /// state: `update` gets the current value (`None` when there is none)
    /// and `buffer`, cleared, and says what to do; with
    /// [`ValueUpdate::Set`] the value becomes what it wrote into `buffer`.
    /// An error from `update` changes nothing and is returned. Backends that
    /// can (the heap) find the entry once for both; by default this is a
    /// read, then a write.
    fn update_value(
        &mut self,
        state: StateId,
        key: StateKey<'_>,
        buffer: &mut Vec<u8>,
        update: &mut ValueUpdateFn<'_>,
    ) -> Result<()> {
        buffer.clear();
        let decision = update(self.get_value(state, key)?.as_deref(), buffer)?;
        match decision {
            ValueUpdate::Keep => Ok(()),
            ValueUpdate::Set => self.put_value(state, key, buffer),
            ValueUpdate::Remove => self.clear(state, key),
        }
    }

    /// A hint that `key`'s value in `state` is about to be read or updated:
    /// a backend that holds it in memory (the heap) starts loading it, so a
    /// loop over a batch's random keys that hints a few rows ahead overlaps
    /// their memory waits. Reads and changes nothing; bad input is ignored
    /// here and reported by the access itself. By default it does nothing.
    fn prefetch_value(&self, state: StateId, key: StateKey<'_>) {
        let _ = (state, key);
    }

    /// Removes whatever `state` holds for `key` (any kind).
    fn clear(&mut self, state: StateId, key: StateKey<'_>) -> Result<()>;

    /// The list payload of a list state (see [`crate::list_items`]); `None`
    /// when the list is empty.
    fn get_list(&mut self, state: StateId, key: StateKey<'_>) -> Result<Option<Cow<'_, [u8]>>>;

    /// Appends the items of `payload` (a list payload) to a list state.
    fn append_list(&mut self, state: StateId, key: StateKey<'_>, payload: &[u8]) -> Result<()>;

    /// Replaces a list state's items with those of `payload` (empty clears it).
    fn replace_list(&mut self, state: StateId, key: StateKey<'_>, payload: &[u8]) -> Result<()>;

    /// One entry of a map state.
    fn map_get(
        &mut self,
        state: StateId,
        key: StateKey<'_>,
        user_key: &[u8],
    ) -> Result<Option<Cow<'_, [u8]>>>;

    /// Sets one entry of a map state.
    fn map_put(
        &mut self,
        state: StateId,
        key: StateKey<'_>,
        user_key: &[u8],
        value: &[u8],
    ) -> Result<()>;

    /// Removes one entry of a map state (absent entries are fine).
    fn map_remove(&mut self, state: StateId, key: StateKey<'_>, user_key: &[u8]) -> Result<()>;

    /// Visits every entry of a map state for `key` (in no particular order).
    fn map_for_each(
        &mut self,
        state: StateId,
        key: StateKey<'_>,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<()>;

    /// The synchronous part of a snapshot (see the module docs).
    fn snapshot_sync(&mut self) -> Result<Box<dyn FrozenKeyedState>>;

    /// Writes a canonical entry into the base (restore). `entry.state` is an
    /// id of *this* backend; entries outside the key-group range are errors.
    fn ingest(&mut self, entry: StateEntry<'_>) -> Result<()>;

    /// Starts a bulk load (a restore of many entries): entries
    /// [`ingest`](Self::ingest)ed until
    /// [`finish_bulk_load`](Self::finish_bulk_load) may be buffered and
    /// written together, and reads need not see them before it returns. A
    /// bulk load that fails part way leaves the backend to be discarded, as a
    /// failed restore does. Backends without a faster way ingest each entry
    /// at once.
    fn begin_bulk_load(&mut self) -> Result<()> {
        Ok(())
    }

    /// Ends a bulk load: every entry ingested since
    /// [`begin_bulk_load`](Self::begin_bulk_load) is part of the base.
    fn finish_bulk_load(&mut self) -> Result<()> {
        Ok(())
    }

    /// Takes `key_group` out for a restore that loads several key groups at
    /// once, each on its own thread: entries go in through the returned
    /// [`KeyGroupLoad`], and [`attach_key_group`](Self::attach_key_group)
    /// puts the key group back with them. Until then nothing else may read
    /// or write that key group. `None` (the default): this backend restores
    /// through [`ingest`](Self::ingest) only.
    fn detach_key_group(&mut self, key_group: KeyGroup) -> Result<Option<Box<dyn KeyGroupLoad>>> {
        let _ = key_group;
        Ok(None)
    }

    /// Puts back a key group that [`detach_key_group`](Self::detach_key_group)
    /// of this backend took out, with every entry ingested into it.
    fn attach_key_group(&mut self, load: Box<dyn KeyGroupLoad>) -> Result<()> {
        let _ = load;
        Err(StateError::ForeignKeyGroup)
    }
}

/// One key group taken out of a backend by
/// [`KeyedStateBackend::detach_key_group`], to be filled on another thread.
pub trait KeyGroupLoad: Send {
    /// Writes a canonical entry of this key group into the base, as
    /// [`KeyedStateBackend::ingest`] does; entries of other key groups are
    /// errors. A later entry of a key replaces an earlier one.
    fn ingest(&mut self, entry: StateEntry<'_>) -> Result<()>;

    /// Does, on the calling thread, whatever the load held back (the heap
    /// sizes and fills its tables here), so that
    /// [`KeyedStateBackend::attach_key_group`] only puts the key group back.
    /// Entries may still follow.
    fn finish(&mut self) -> Result<()> {
        Ok(())
    }

    /// The load itself, for the backend that made it to take back.
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
}
