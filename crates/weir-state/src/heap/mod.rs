//! The heap keyed state backend: all state in memory, in hash tables split per
//! key group and into bounded buckets shared copy-on-write with snapshots.
//!
//! Epoch versions are kept by undo logs: writes go in place, and the first
//! write of an entry in an epoch saves what it held before (each entry and
//! each user-map entry carries the epoch of its last write, so later writes in
//! the same epoch log nothing). `discard_from` replays the logs newest first;
//! `finalize_up_to` empties them, without visiting a value or list entry's
//! record (`undo.rs`). Reads therefore cost a plain hash lookup.
//!
//! This module does not serialize anything (see `weir-snapshot`) and does not
//! decode values or enforce TTL.

mod bulk;
mod data;
mod frozen;
mod group_load;
mod table;
mod undo;

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use weir_types::{
    Attempt, Epoch, KeyGroup, KeyGroupRange, MaxParallelism, StateDescriptor, TypesError,
};

use crate::backend::{KeyGroupLoad, KeyedStateBackend, StateId, ValueUpdate, ValueUpdateFn};
use crate::bytes::SmallBytes;
use crate::epoch::EpochLog;
use crate::error::{Result, StateError};
use crate::frozen::{EntryPayload, FrozenKeyedState, StateEntry};
use crate::key::StateKey;
use crate::registry::{Access, StateRegistry, check_key_group};
use bulk::{BulkLoad, Held};
use data::{MapValue, StateData, UserMap};
use frozen::HeapFrozenState;
use group_load::HeapGroupLoad;
use table::{Slot, SlotKey, StateTable};
use undo::{MapUndo, UndoLog, UndoTarget};

pub use table::EntryHint;

/// How many keys ahead of its read a batch read prefetches an entry: enough
/// for the reads in between to cover a memory wait.
pub const PREFETCH_AHEAD: usize = 16;

/// Keyed state of one subtask, held in memory (see the module docs).
///
/// Guarantees: reads see the base and every epoch not yet discarded;
/// [`snapshot_sync`](KeyedStateBackend::snapshot_sync) copies no entry and
/// its view never changes. Nothing is durable: a crash loses everything not
/// in a completed snapshot.
#[derive(Debug)]
pub struct HeapKeyedStateBackend {
    /// Tells this backend's detached key groups from another's.
    id: u64,
    max: MaxParallelism,
    range: KeyGroupRange,
    states: StateRegistry,
    data: Vec<StateData>,
    epochs: EpochLog,
    /// One undo log per pending epoch of `epochs`, in the same order.
    undo: Vec<UndoLog>,
    /// An emptied log whose allocations the next epoch reuses: a log of a
    /// large epoch is megabytes, and a fresh one faults in (and the kernel
    /// zeroes) every page of it again, epoch after epoch. Boxed, like
    /// `bulk`: the host keeps this backend in an enum beside RocksDB's boxed
    /// one.
    spare: Box<UndoLog>,
    /// The entries of a bulk load not inserted yet (during one only; boxed:
    /// restores are rare, and the host keeps this backend in an enum beside
    /// RocksDB's boxed one).
    bulk: Option<Box<BulkLoad>>,
    /// Emptied vectors of key groups loaded on other threads, for the next
    /// ones (until the bulk load ends): grown anew for each key group
    /// (megabytes at 10^7 keys), they faulted fresh pages in every time.
    spare_held: Arc<Mutex<Vec<Held>>>,
}

impl HeapKeyedStateBackend {
    /// An empty backend holding `key_group_range`, which must fit in
    /// `max_parallelism`.
    pub fn new(max_parallelism: MaxParallelism, key_group_range: KeyGroupRange) -> Result<Self> {
        if !key_group_range.fits(max_parallelism) {
            return Err(TypesError::InvalidKeyGroupRange {
                start: key_group_range.start(),
                end: key_group_range.end(),
            }
            .into());
        }
        static BACKENDS: AtomicU64 = AtomicU64::new(0);
        Ok(Self {
            id: BACKENDS.fetch_add(1, Ordering::Relaxed),
            max: max_parallelism,
            range: key_group_range,
            states: StateRegistry::default(),
            data: Vec::new(),
            epochs: EpochLog::new(),
            undo: Vec::new(),
            spare: Box::default(),
            bulk: None,
            spare_held: Arc::default(),
        })
    }

    /// Checks that `state` exists and allows `access`, and that `key_group`
    /// is in range; returns the key group's index within the range.
    fn locate(&self, state: StateId, key_group: KeyGroup, access: Access) -> Result<usize> {
        self.states.get(state, access)?;
        self.group_index(key_group)
    }

    /// The index of `key_group` within the range, which it must be in.
    fn group_index(&self, key_group: KeyGroup) -> Result<usize> {
        check_key_group(self.range, key_group)?;
        Ok((u32::from(key_group.0) - self.range.start()) as usize)
    }

    fn bytes(&self, state: StateId) -> &StateTable<SmallBytes> {
        match &self.data[state.0 as usize] {
            StateData::Bytes(t) => t,
            StateData::Map(_) => unreachable!("value and list states hold byte tables"),
        }
    }

    fn map(&self, state: StateId) -> &StateTable<UserMap> {
        match &self.data[state.0 as usize] {
            StateData::Map(t) => t,
            StateData::Bytes(_) => unreachable!("map states hold map tables"),
        }
    }

    /// Reads the values of `keys` in value, reducing or aggregating state
    /// `state`, in order, as [`get_value`](KeyedStateBackend::get_value)
    /// does, and passes `each` every value (`None`: absent) with where its
    /// entry lies, for a write of it soon after
    /// ([`put_value_at`](Self::put_value_at)).
    ///
    /// Each key is hashed once, and its entry is prefetched
    /// [`PREFETCH_AHEAD`] keys before it is read, so the reads of a batch's
    /// random keys overlap their memory waits.
    pub fn get_values_at<'k, E: From<StateError>>(
        &self,
        state: StateId,
        keys: impl IntoIterator<Item = StateKey<'k>>,
        mut each: impl FnMut(Option<&[u8]>, Option<EntryHint>) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        self.states.get(state, Access::Value)?;
        let table = self.bytes(state);
        let mut keys = keys.into_iter();
        let mut ahead = VecDeque::with_capacity(PREFETCH_AHEAD + 1);
        loop {
            while ahead.len() <= PREFETCH_AHEAD {
                let Some(key) = keys.next() else { break };
                let group = self.group_index(key.key_group);
                let k = SlotKey::new(key.key, key.namespace);
                if let Ok(group) = group {
                    table.prefetch(group, k);
                }
                ahead.push_back((group, k));
            }
            let Some((group, k)) = ahead.pop_front() else {
                return Ok(());
            };
            match table.find(group?, k) {
                Some((slot, hint)) => each(Some(&slot.payload), hint)?,
                None => each(None, None)?,
            }
        }
    }

    /// Writes `value` at `key` of value state `state`, as
    /// [`put_value`](KeyedStateBackend::put_value) does; `at`, where
    /// [`get_values_at`](Self::get_values_at) found the entry, saves the
    /// lookup while the entry still lies there.
    pub fn put_value_at(
        &mut self,
        state: StateId,
        key: StateKey<'_>,
        at: Option<EntryHint>,
        value: &[u8],
    ) -> Result<()> {
        let group = self.locate(state, key.key_group, Access::Value)?;
        if let Some(at) = at {
            let (epoch, log) = open_log(&self.epochs, &mut self.undo)?;
            let StateData::Bytes(table) = &mut self.data[state.0 as usize] else {
                unreachable!("value states hold byte tables");
            };
            if let Some(slot) = table.get_mut_at(group, at, key.key, key.namespace) {
                write_in_epoch(slot, false, (epoch, log), state, group);
                slot.payload.set(value);
                return Ok(());
            }
        }
        self.write_bytes(state, group, key, |payload| payload.set(value))
    }

    /// Hints the CPU to load the entry of value state `state` in
    /// `key_group` that `at` says, ahead of a
    /// [`put_value_at`](Self::put_value_at).
    pub fn prefetch_at(&self, state: StateId, key_group: KeyGroup, at: EntryHint) {
        if let Ok(group) = self.locate(state, key_group, Access::Value) {
            self.bytes(state).prefetch_at(group, at);
        }
    }

    /// Writes a byte entry in the open epoch: `write` gets the payload (empty
    /// if the entry is new) after what it held before this epoch was logged.
    fn write_bytes(
        &mut self,
        state: StateId,
        group: usize,
        key: StateKey<'_>,
        write: impl FnOnce(&mut SmallBytes),
    ) -> Result<()> {
        let (epoch, log) = open_log(&self.epochs, &mut self.undo)?;
        let StateData::Bytes(table) = &mut self.data[state.0 as usize] else {
            unreachable!("value and list states hold byte tables");
        };
        let (slot, inserted) = table.get_or_insert(
            group,
            SlotKey::new(key.key, key.namespace),
            SmallBytes::default,
        );
        write_in_epoch(slot, inserted, (epoch, log), state, group);
        write(&mut slot.payload);
        Ok(())
    }

    /// Removes a whole entry in the open epoch, logging what it held.
    fn remove_entry(&mut self, state: StateId, group: usize, key: StateKey<'_>) -> Result<()> {
        let (epoch, log) = open_log(&self.epochs, &mut self.undo)?;
        let k = SlotKey::new(key.key, key.namespace);
        match &mut self.data[state.0 as usize] {
            StateData::Bytes(table) => {
                if let Some(slot) = table.remove(group, k)
                    && slot.tag() != Some(epoch)
                {
                    log.save_bytes(state, group, &slot, false);
                }
            }
            StateData::Map(table) => {
                // User entries carry their own tags, so the whole map is
                // logged whatever the entry's tag says; it is a move.
                if let Some(slot) = table.remove(group, k) {
                    log.save_map(MapUndo::removed(state, group, slot));
                }
            }
        }
        Ok(())
    }

    /// Applies the discard decision's undo logs, newest first.
    fn discard(&mut self, count: usize) {
        for _ in 0..count {
            let mut log = self.undo.pop().expect("each pending epoch has an undo log");
            log.apply(&mut self.data);
            keep_spare(&mut self.spare, log);
        }
    }
}

/// The most bytes a spare log keeps allocated (32 MiB). A larger log is
/// freed: its epoch wrote that many entries, so allocating the log was a
/// small part of its cost, and keeping the pages would hold that memory for
/// as long as the backend lives.
const SPARE_UNDO_BYTES: usize = 32 << 20;

/// Keeps the larger allocations of `log` (emptied) and `spare`, up to
/// [`SPARE_UNDO_BYTES`].
fn keep_spare(spare: &mut UndoLog, mut log: UndoLog) {
    let allocated = log.allocated();
    if allocated > spare.allocated() && allocated <= SPARE_UNDO_BYTES {
        log.clear();
        *spare = log;
    }
}

/// Tags `slot` with the open epoch, first logging what it held before the
/// epoch (nothing when `inserted`) if this is the epoch's first write to it.
fn write_in_epoch(
    slot: &mut Slot<SmallBytes>,
    inserted: bool,
    (epoch, log): (Epoch, &mut UndoLog),
    state: StateId,
    group: usize,
) {
    if inserted || slot.tag() != Some(epoch) {
        log.save_bytes(state, group, slot, inserted);
    }
    slot.set_tag(Some(epoch));
}

/// The open epoch and its undo log (a function of two fields, so callers can
/// borrow the tables beside it).
fn open_log<'a>(epochs: &EpochLog, undo: &'a mut [UndoLog]) -> Result<(Epoch, &'a mut UndoLog)> {
    let epoch = epochs.write_epoch()?;
    let log = undo.last_mut().expect("an open epoch has an undo log");
    Ok((epoch, log))
}

impl KeyedStateBackend for HeapKeyedStateBackend {
    fn key_group_range(&self) -> KeyGroupRange {
        self.range
    }

    fn max_parallelism(&self) -> MaxParallelism {
        self.max
    }

    fn register_state(&mut self, descriptor: &StateDescriptor) -> Result<StateId> {
        if let Some(id) = self.states.lookup(descriptor)? {
            return Ok(id);
        }
        self.data
            .push(StateData::new(descriptor.kind, self.range.len() as usize));
        Ok(self.states.push(descriptor.clone()))
    }

    fn descriptors(&self) -> &[StateDescriptor] {
        self.states.descriptors()
    }

    fn begin_epoch(&mut self, epoch: Epoch, attempt: Attempt) -> Result<()> {
        let decision = self.epochs.begin(epoch, attempt)?;
        self.discard(decision.epochs.len());
        self.undo.push(std::mem::take(&mut *self.spare));
        Ok(())
    }

    fn commit_epoch(&mut self, epoch: Epoch, attempt: Attempt) -> Result<()> {
        self.epochs.commit(epoch, attempt)
    }

    fn finalize_up_to(&mut self, epoch: Epoch) -> Result<()> {
        let decision = self.epochs.finalize_up_to(epoch)?;
        for log in self.undo.drain(..decision.epochs.len()) {
            keep_spare(&mut self.spare, log);
        }
        Ok(())
    }

    fn discard_from(&mut self, epoch: Epoch) -> Result<()> {
        let decision = self.epochs.discard_from(epoch)?;
        self.discard(decision.epochs.len());
        Ok(())
    }

    fn last_final_epoch(&self) -> Option<Epoch> {
        self.epochs.last_final()
    }

    fn get_value(&mut self, state: StateId, key: StateKey<'_>) -> Result<Option<Cow<'_, [u8]>>> {
        let group = self.locate(state, key.key_group, Access::Value)?;
        let slot = self
            .bytes(state)
            .get(group, SlotKey::new(key.key, key.namespace));
        Ok(slot.map(|s| Cow::Borrowed(&s.payload[..])))
    }

    fn put_value(&mut self, state: StateId, key: StateKey<'_>, value: &[u8]) -> Result<()> {
        let group = self.locate(state, key.key_group, Access::Value)?;
        self.write_bytes(state, group, key, |payload| payload.set(value))
    }

    fn update_value(
        &mut self,
        state: StateId,
        key: StateKey<'_>,
        buffer: &mut Vec<u8>,
        update: &mut ValueUpdateFn<'_>,
    ) -> Result<()> {
        let group = self.locate(state, key.key_group, Access::Value)?;
        let StateData::Bytes(table) = &mut self.data[state.0 as usize] else {
            unreachable!("value states hold byte tables");
        };
        let k = SlotKey::new(key.key, key.namespace);
        buffer.clear();
        // One probe finds the entry for the read and the write (or removal);
        // a key that had nothing is inserted empty and taken out again unless
        // it is set.
        let mut entry = table.entry(group, k, SmallBytes::default);
        let inserted = entry.inserted;
        let mut decision = update((!inserted).then_some(&entry.slot().payload[..]), buffer);
        // Like `put_value`, setting and removing need an open epoch; keeping
        // does not.
        let open = match decision {
            Ok(ValueUpdate::Set | ValueUpdate::Remove) => {
                match open_log(&self.epochs, &mut self.undo) {
                    Ok(open) => Some(open),
                    Err(err) => {
                        decision = Err(err);
                        None
                    }
                }
            }
            _ => None,
        };
        match (decision, open) {
            (Ok(ValueUpdate::Set), Some(open)) => {
                let slot = entry.slot();
                write_in_epoch(slot, inserted, open, state, group);
                slot.payload.set(buffer);
            }
            (Ok(ValueUpdate::Remove), Some((epoch, log))) if !inserted => {
                let slot = entry.remove();
                if slot.tag() != Some(epoch) {
                    log.save_bytes(state, group, &slot, false);
                }
            }
            (decision, _) => {
                if inserted {
                    entry.remove();
                }
                decision?;
            }
        }
        Ok(())
    }

    fn prefetch_value(&self, state: StateId, key: StateKey<'_>) {
        if let Ok(group) = self.locate(state, key.key_group, Access::Value) {
            self.bytes(state)
                .prefetch(group, SlotKey::new(key.key, key.namespace));
        }
    }

    fn clear(&mut self, state: StateId, key: StateKey<'_>) -> Result<()> {
        let group = self.locate(state, key.key_group, Access::Any)?;
        self.remove_entry(state, group, key)
    }

    fn get_list(&mut self, state: StateId, key: StateKey<'_>) -> Result<Option<Cow<'_, [u8]>>> {
        let group = self.locate(state, key.key_group, Access::List)?;
        let slot = self
            .bytes(state)
            .get(group, SlotKey::new(key.key, key.namespace));
        Ok(slot.map(|s| Cow::Borrowed(&s.payload[..])))
    }

    fn append_list(&mut self, state: StateId, key: StateKey<'_>, payload: &[u8]) -> Result<()> {
        let group = self.locate(state, key.key_group, Access::List)?;
        if payload.is_empty() {
            // Still a write: it needs an open epoch.
            return self.epochs.write_epoch().map(|_| ());
        }
        self.write_bytes(state, group, key, |items| items.extend(payload))
    }

    fn replace_list(&mut self, state: StateId, key: StateKey<'_>, payload: &[u8]) -> Result<()> {
        let group = self.locate(state, key.key_group, Access::List)?;
        if payload.is_empty() {
            return self.remove_entry(state, group, key);
        }
        self.write_bytes(state, group, key, |items| items.set(payload))
    }

    fn map_get(
        &mut self,
        state: StateId,
        key: StateKey<'_>,
        user_key: &[u8],
    ) -> Result<Option<Cow<'_, [u8]>>> {
        let group = self.locate(state, key.key_group, Access::Map)?;
        let slot = self
            .map(state)
            .get(group, SlotKey::new(key.key, key.namespace));
        Ok(slot
            .and_then(|s| s.payload.get(user_key))
            .map(|v| Cow::Borrowed(v.value.as_slice())))
    }

    fn map_put(
        &mut self,
        state: StateId,
        key: StateKey<'_>,
        user_key: &[u8],
        value: &[u8],
    ) -> Result<()> {
        let group = self.locate(state, key.key_group, Access::Map)?;
        let (epoch, log) = open_log(&self.epochs, &mut self.undo)?;
        let StateData::Map(table) = &mut self.data[state.0 as usize] else {
            unreachable!("map states hold map tables");
        };
        let (slot, inserted) = table.get_or_insert(
            group,
            SlotKey::new(key.key, key.namespace),
            UserMap::default,
        );
        let target = || UndoTarget::of(state, group, slot);
        // A new map is undone whole, which covers its user entries too.
        let record = match slot.payload.get(user_key) {
            _ if inserted => Some(MapUndo::Whole {
                target: target(),
                old: None,
            }),
            Some(v) if v.tag == Some(epoch) => None,
            old => Some(MapUndo::Entry {
                target: target(),
                user_key: user_key.into(),
                old: old.cloned(),
            }),
        };
        if let Some(record) = record {
            log.save_map(record);
        }
        slot.set_tag(Some(epoch));
        match slot.payload.get_mut(user_key) {
            Some(v) => {
                v.value.clear();
                v.value.extend_from_slice(value);
                v.tag = Some(epoch);
            }
            None => {
                slot.payload.insert(
                    user_key.into(),
                    MapValue {
                        value: value.to_vec(),
                        tag: Some(epoch),
                    },
                );
            }
        }
        Ok(())
    }

    fn map_remove(&mut self, state: StateId, key: StateKey<'_>, user_key: &[u8]) -> Result<()> {
        let group = self.locate(state, key.key_group, Access::Map)?;
        let (epoch, log) = open_log(&self.epochs, &mut self.undo)?;
        let StateData::Map(table) = &mut self.data[state.0 as usize] else {
            unreachable!("map states hold map tables");
        };
        let k = SlotKey::new(key.key, key.namespace);
        // Look before writing so a no-op copies no bucket a snapshot shares.
        if !table
            .get(group, k)
            .is_some_and(|s| s.payload.contains_key(user_key))
        {
            return Ok(());
        }
        let slot = table.get_mut(group, k).expect("the entry was just found");
        let target = UndoTarget::of(state, group, slot);
        if let Some((user_key, old)) = slot.payload.remove_entry(user_key)
            && old.tag != Some(epoch)
        {
            log.save_map(MapUndo::Entry {
                target,
                user_key,
                old: Some(old),
            });
        }
        if slot.payload.is_empty()
            && let Some(slot) = table.remove(group, k)
        {
            log.save_map(MapUndo::removed(state, group, slot));
        }
        Ok(())
    }

    fn map_for_each(
        &mut self,
        state: StateId,
        key: StateKey<'_>,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<()> {
        let group = self.locate(state, key.key_group, Access::Map)?;
        if let Some(slot) = self
            .map(state)
            .get(group, SlotKey::new(key.key, key.namespace))
        {
            for (user_key, v) in &slot.payload {
                visit(user_key, &v.value);
            }
        }
        Ok(())
    }

    fn snapshot_sync(&mut self) -> Result<Box<dyn FrozenKeyedState>> {
        self.epochs.check_all_final()?;
        Ok(Box::new(HeapFrozenState::new(
            self.states.descriptors(),
            self.range,
            self.max,
            &self.data,
        )))
    }

    fn ingest(&mut self, entry: StateEntry<'_>) -> Result<()> {
        self.epochs.check_all_final()?;
        let group = self.locate(
            entry.state,
            entry.key_group,
            Access::of_payload(&entry.payload),
        )?;
        ingest_into(&mut self.data, group, entry, self.bulk.as_deref_mut());
        Ok(())
    }

    /// Value entries are then held per key group and inserted into tables
    /// sized for them (`bulk.rs`).
    fn begin_bulk_load(&mut self) -> Result<()> {
        self.bulk.get_or_insert_default();
        Ok(())
    }

    fn finish_bulk_load(&mut self) -> Result<()> {
        if let Some(bulk) = self.bulk.take() {
            (*bulk).finish(&mut self.data);
        }
        self.spare_held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        Ok(())
    }

    /// Every state's table of the key group goes out, and comes back whole.
    fn detach_key_group(&mut self, key_group: KeyGroup) -> Result<Option<Box<dyn KeyGroupLoad>>> {
        self.epochs.check_all_final()?;
        let group = self.group_index(key_group)?;
        // Entries this backend's own bulk load holds go in first: they came
        // before anything loaded into the detached key group.
        if let Some(bulk) = &mut self.bulk {
            bulk.insert(&mut self.data);
        }
        let data = self
            .data
            .iter_mut()
            .map(|d| d.detach_group(group))
            .collect();
        Ok(Some(Box::new(HeapGroupLoad::new(
            self.id,
            (key_group, group),
            self.states.clone(),
            data,
            Arc::clone(&self.spare_held),
        ))))
    }

    fn attach_key_group(&mut self, load: Box<dyn KeyGroupLoad>) -> Result<()> {
        let load = load
            .into_any()
            .downcast::<HeapGroupLoad>()
            .map_err(|_| StateError::ForeignKeyGroup)?;
        if load.owner() != self.id {
            return Err(StateError::ForeignKeyGroup);
        }
        let (group, data) = load.into_parts();
        for (table, detached) in self.data.iter_mut().zip(data) {
            table.attach_group(group, detached);
        }
        Ok(())
    }
}

/// Writes a restored entry into `data` at key group index `group` (checked
/// by the caller), or holds a value entry in `bulk` during a bulk load.
fn ingest_into(
    data: &mut [StateData],
    group: usize,
    entry: StateEntry<'_>,
    bulk: Option<&mut BulkLoad>,
) {
    // A held entry is hashed where it is inserted (`bulk.rs`).
    let k = || SlotKey::new(entry.key, entry.namespace);
    match (&mut data[entry.state.0 as usize], entry.payload) {
        (StateData::Bytes(table), EntryPayload::Value(value)) => {
            let value = SmallBytes::from_slice(value);
            match bulk {
                Some(bulk) => bulk.hold(
                    data,
                    entry.state,
                    (entry.key_group, group),
                    Slot::restored(entry.key, entry.namespace, value),
                ),
                None => table.set(group, k(), value, None),
            }
        }
        (StateData::Bytes(table), EntryPayload::List(items)) => {
            if !items.is_empty() {
                let (slot, _) = table.get_or_insert(group, k(), SmallBytes::default);
                slot.payload.extend(items);
            }
        }
        (StateData::Map(table), EntryPayload::MapEntry { user_key, value }) => {
            let (slot, _) = table.get_or_insert(group, k(), UserMap::default);
            slot.payload.insert(
                user_key.into(),
                MapValue {
                    value: value.to_vec(),
                    tag: None,
                },
            );
        }
        _ => unreachable!("the access check matched the payload to the table"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spare_log_keeps_the_larger_allocation_up_to_its_bound() {
        let mut spare = UndoLog::default();
        keep_spare(&mut spare, UndoLog::with_saved_capacity(10));
        keep_spare(&mut spare, UndoLog::with_saved_capacity(4));
        assert!(spare.allocated() >= 10);
        keep_spare(
            &mut spare,
            UndoLog::with_saved_capacity(SPARE_UNDO_BYTES + 1),
        );
        assert!(spare.allocated() < SPARE_UNDO_BYTES, "a huge log is freed");
    }
}
