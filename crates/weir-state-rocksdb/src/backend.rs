//! The RocksDB keyed state backend: state access, epoch versions and the
//! synchronous snapshot part.
//!
//! Base state lives in RocksDB, one column family per state. The writes of
//! each not yet final epoch live in an in-memory [`Overlay`]; reads look
//! through the overlays (newest first) and then the database. Finalizing
//! writes the overlays of the final epochs, oldest first, as one `WriteBatch`
//! together with the new last final epoch, so the database always holds
//! exactly a final cut. Discarding drops overlays without touching the
//! database. Native checkpoints and restore live in `checkpoint.rs` and
//! `restore.rs`.
//!
//! Durability: the write-ahead log is off (as in Flink); checkpoints are what
//! make state durable. A clean close flushes the memtables, so reopening after
//! a drop sees every finalized epoch.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocksdb::{BoundColumnFamily, ReadOptions, WriteBatch, WriteOptions};
use weir_state::{
    Access, EntryPayload, EpochLog, FrozenKeyedState, KeyedStateBackend, StateEntry, StateError,
    StateId, StateKey, StateRegistry, check_key_group, list_items,
};
use weir_types::{Attempt, Epoch, KeyGroupRange, MaxParallelism, StateDescriptor, StateKind};

use crate::database::{self, Db, Meta, state_cf_name};
use crate::error::{Result, RocksDbError};
use crate::frozen::RocksDbFrozenState;
use crate::key::{prefix_end, row_key};
use crate::options::{EngineOptions, RocksDbOptions};
use crate::overlay::{Overlay, StateOverlay, Write};

/// Keyed state of one operator subtask in RocksDB (Flink's
/// `EmbeddedRocksDBStateBackend`), with epoch versions held in memory and
/// incremental native checkpoints.
///
/// The database directory is locked while the backend, or any snapshot taken
/// from it, is alive.
pub struct RocksDbKeyedStateBackend {
    db: Arc<Db>,
    path: PathBuf,
    engine: EngineOptions,
    max_parallelism: MaxParallelism,
    key_group_range: KeyGroupRange,
    states: StateRegistry,
    cf_names: Vec<String>,
    epochs: EpochLog,
    overlays: BTreeMap<Epoch, Overlay>,
    write_options: WriteOptions,
}

impl RocksDbKeyedStateBackend {
    /// Opens the database at `options.path`, creating it if missing. An
    /// existing database must hold the same max parallelism and key-group
    /// range; its states are registered again from its metadata.
    pub fn open(options: RocksDbOptions) -> Result<Self> {
        let engine = options.build();
        let db = database::open(&options.path, &engine)?;
        let meta = match database::read_meta(&db, &options.path)? {
            Some(meta) => {
                if meta.max_parallelism != options.max_parallelism {
                    return Err(RocksDbError::MaxParallelismMismatch {
                        path: options.path,
                        stored: meta.max_parallelism,
                        requested: options.max_parallelism,
                    });
                }
                if meta.key_group_range != options.key_group_range {
                    return Err(RocksDbError::KeyGroupRangeMismatch {
                        path: options.path,
                        stored: meta.key_group_range,
                        requested: options.key_group_range,
                    });
                }
                meta
            }
            None => {
                let meta = Meta {
                    max_parallelism: options.max_parallelism,
                    key_group_range: options.key_group_range,
                    last_final: None,
                    descriptors: Vec::new(),
                };
                let mut batch = WriteBatch::default();
                database::put_header(&db, &mut batch, meta.max_parallelism, meta.key_group_range);
                db.write(batch)
                    .map_err(RocksDbError::engine("write metadata"))?;
                meta
            }
        };
        Self::from_db(db, options.path, engine, meta)
    }

    /// Wraps an open database whose metadata is `meta`.
    pub(crate) fn from_db(
        db: Db,
        path: PathBuf,
        engine: EngineOptions,
        meta: Meta,
    ) -> Result<Self> {
        let cf_names: Vec<String> = (0..meta.descriptors.len())
            .map(|i| {
                state_cf_name(StateId(
                    u32::try_from(i).expect("invariant: fewer than 2^32 states"),
                ))
            })
            .collect();
        if cf_names.iter().any(|name| db.cf_handle(name).is_none()) {
            return Err(RocksDbError::CorruptMetadata {
                path,
                what: "column family of a registered state",
            });
        }
        let mut epochs = EpochLog::new();
        if let Some(last_final) = meta.last_final {
            epochs.finalize_up_to(last_final)?;
        }
        let mut write_options = WriteOptions::default();
        write_options.disable_wal(true);
        Ok(Self {
            db: Arc::new(db),
            path,
            engine,
            max_parallelism: meta.max_parallelism,
            key_group_range: meta.key_group_range,
            states: StateRegistry::from_descriptors(meta.descriptors),
            cf_names,
            epochs,
            overlays: BTreeMap::new(),
            write_options,
        })
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The database, for native checkpoints.
    pub(crate) fn db(&self) -> &Db {
        &self.db
    }

    /// Fails unless every epoch is final (native checkpoints and snapshots
    /// capture exactly the base).
    pub(crate) fn check_all_final(&self) -> Result<()> {
        Ok(self.epochs.check_all_final()?)
    }

    /// The column family of a registered state.
    pub(crate) fn cf(&self, id: StateId) -> Result<Arc<BoundColumnFamily<'_>>> {
        let name = self
            .cf_names
            .get(id.0 as usize)
            .ok_or(StateError::UnknownState(id))?;
        Ok(self
            .db
            .cf_handle(name)
            .expect("invariant: every registered state has a column family"))
    }

    /// Writes `batch` straight into the base.
    pub(crate) fn write_base(&self, batch: WriteBatch) -> Result<()> {
        self.db
            .write_opt(batch, &self.write_options)
            .map_err(RocksDbError::engine("write batch"))
    }

    /// Checks the access and returns the row key of `key`.
    fn row(&self, id: StateId, access: Access, key: StateKey<'_>) -> Result<Vec<u8>, StateError> {
        self.states.get(id, access)?;
        check_key_group(self.key_group_range, key.key_group)?;
        let mut row = Vec::with_capacity(8 + key.key.len() + key.namespace.len());
        row_key(key, &mut row);
        Ok(row)
    }

    /// The overlay of `id` in the epoch that writes go to.
    fn overlay_mut(&mut self, id: StateId) -> Result<&mut StateOverlay, StateError> {
        let epoch = self.epochs.write_epoch()?;
        Ok(self.overlays.entry(epoch).or_default().state_mut(id))
    }

    /// Reads one row through the overlays and the database. `map_prefix` is
    /// the map row prefix when `row` is a map entry, whose clears hide it.
    fn read_row(
        &self,
        id: StateId,
        row: &[u8],
        map_prefix: Option<&[u8]>,
    ) -> Result<Option<Cow<'_, [u8]>>> {
        let mut appends: Vec<&[u8]> = Vec::new();
        let mut base: Option<Cow<'_, [u8]>> = None;
        let mut from_db = true;
        for overlay in self.overlays.values().rev() {
            let Some(state) = overlay.state(id) else {
                continue;
            };
            match state.get(row) {
                Some(Write::Put(value)) => {
                    base = Some(Cow::Borrowed(value.as_slice()));
                    from_db = false;
                }
                Some(Write::Delete) => from_db = false,
                Some(Write::Append(items)) => appends.push(items),
                None => from_db = !map_prefix.is_some_and(|prefix| state.is_cleared(prefix)),
            }
            if !from_db {
                break;
            }
        }
        if from_db {
            base = self
                .db
                .get_cf(&self.cf(id)?, row)
                .map_err(RocksDbError::engine("read"))?
                .map(Cow::Owned);
        }
        if appends.is_empty() {
            return Ok(base);
        }
        let mut list = base.map(Cow::into_owned).unwrap_or_default();
        for items in appends.iter().rev() {
            list.extend_from_slice(items);
        }
        Ok(Some(Cow::Owned(list)))
    }

    fn check_list_payload(payload: &[u8]) -> Result<(), StateError> {
        if list_items(payload).all(|item| item.is_some()) {
            Ok(())
        } else {
            Err(StateError::Corrupt {
                what: "list payload",
            })
        }
    }

    /// The overlays of epochs `<= upto`, replayed oldest first into one batch.
    fn fold_batch(&self, upto: Epoch) -> Result<WriteBatch> {
        let mut batch = WriteBatch::default();
        for overlay in self.overlays.range(..=upto).map(|(_, overlay)| overlay) {
            for (id, state) in overlay.states() {
                let cf = self.cf(id)?;
                for prefix in state.cleared() {
                    match prefix_end(prefix) {
                        Some(end) => batch.delete_range_cf(&cf, prefix, end.as_slice()),
                        None => {
                            return Err(StateError::Corrupt {
                                what: "map row prefix",
                            }
                            .into());
                        }
                    }
                }
                for (row, write) in state.writes() {
                    match write {
                        Write::Put(value) => batch.put_cf(&cf, row, value),
                        Write::Delete => batch.delete_cf(&cf, row),
                        Write::Append(items) => batch.merge_cf(&cf, row, items),
                    }
                }
            }
        }
        Ok(batch)
    }
}

impl KeyedStateBackend for RocksDbKeyedStateBackend {
    fn key_group_range(&self) -> KeyGroupRange {
        self.key_group_range
    }

    fn max_parallelism(&self) -> MaxParallelism {
        self.max_parallelism
    }

    fn register_state(&mut self, descriptor: &StateDescriptor) -> weir_state::Result<StateId> {
        let descriptor = descriptor.clone().validated()?;
        if let Some(id) = self.states.lookup(&descriptor)? {
            return Ok(id);
        }
        let id = StateId(u32::try_from(self.states.descriptors().len()).map_err(|_| {
            StateError::Storage {
                message: "too many states".to_owned(),
            }
        })?);
        let name = state_cf_name(id);
        self.db
            .create_cf(&name, &self.engine.state)
            .map_err(RocksDbError::engine("create column family"))?;
        let mut batch = WriteBatch::default();
        database::put_descriptor(&self.db, &mut batch, id, &descriptor);
        self.db
            .write(batch)
            .map_err(RocksDbError::engine("write metadata"))?;
        let pushed = self.states.push(descriptor);
        debug_assert_eq!(pushed, id, "column families follow the registry's ids");
        self.cf_names.push(name);
        Ok(id)
    }

    fn descriptors(&self) -> &[StateDescriptor] {
        self.states.descriptors()
    }

    fn begin_epoch(&mut self, epoch: Epoch, attempt: Attempt) -> weir_state::Result<()> {
        for dropped in self.epochs.begin(epoch, attempt)?.epochs {
            self.overlays.remove(&dropped);
        }
        Ok(())
    }

    fn commit_epoch(&mut self, epoch: Epoch, attempt: Attempt) -> weir_state::Result<()> {
        self.epochs.commit(epoch, attempt)
    }

    fn finalize_up_to(&mut self, epoch: Epoch) -> weir_state::Result<()> {
        // Decide on a copy so a failed write leaves the epochs as they were.
        let mut epochs = self.epochs.clone();
        let decision = epochs.finalize_up_to(epoch)?;
        if epochs.last_final() == self.epochs.last_final() {
            return Ok(());
        }
        let mut batch = self.fold_batch(epoch)?;
        database::put_last_final(&self.db, &mut batch, epoch);
        self.write_base(batch)?;
        for folded in decision.epochs {
            self.overlays.remove(&folded);
        }
        self.epochs = epochs;
        Ok(())
    }

    fn discard_from(&mut self, epoch: Epoch) -> weir_state::Result<()> {
        for dropped in self.epochs.discard_from(epoch)?.epochs {
            self.overlays.remove(&dropped);
        }
        Ok(())
    }

    fn last_final_epoch(&self) -> Option<Epoch> {
        self.epochs.last_final()
    }

    fn get_value(
        &mut self,
        state: StateId,
        key: StateKey<'_>,
    ) -> weir_state::Result<Option<Cow<'_, [u8]>>> {
        let row = self.row(state, Access::Value, key)?;
        Ok(self.read_row(state, &row, None)?)
    }

    fn put_value(
        &mut self,
        state: StateId,
        key: StateKey<'_>,
        value: &[u8],
    ) -> weir_state::Result<()> {
        let row = self.row(state, Access::Value, key)?;
        self.overlay_mut(state)?.put(row, value.to_vec());
        Ok(())
    }

    fn clear(&mut self, state: StateId, key: StateKey<'_>) -> weir_state::Result<()> {
        let kind = self.states.get(state, Access::Any)?.kind;
        let row = self.row(state, Access::Any, key)?;
        let overlay = self.overlay_mut(state)?;
        match kind {
            StateKind::Map => overlay.clear_prefix(&row),
            _ => overlay.delete(row),
        }
        Ok(())
    }

    fn get_list(
        &mut self,
        state: StateId,
        key: StateKey<'_>,
    ) -> weir_state::Result<Option<Cow<'_, [u8]>>> {
        let row = self.row(state, Access::List, key)?;
        Ok(self
            .read_row(state, &row, None)?
            .filter(|list| !list.is_empty()))
    }

    fn append_list(
        &mut self,
        state: StateId,
        key: StateKey<'_>,
        payload: &[u8],
    ) -> weir_state::Result<()> {
        let row = self.row(state, Access::List, key)?;
        Self::check_list_payload(payload)?;
        let overlay = self.overlay_mut(state)?;
        if !payload.is_empty() {
            overlay.append(row, payload);
        }
        Ok(())
    }

    fn replace_list(
        &mut self,
        state: StateId,
        key: StateKey<'_>,
        payload: &[u8],
    ) -> weir_state::Result<()> {
        let row = self.row(state, Access::List, key)?;
        Self::check_list_payload(payload)?;
        let overlay = self.overlay_mut(state)?;
        if payload.is_empty() {
            overlay.delete(row);
        } else {
            overlay.put(row, payload.to_vec());
        }
        Ok(())
    }

    fn map_get(
        &mut self,
        state: StateId,
        key: StateKey<'_>,
        user_key: &[u8],
    ) -> weir_state::Result<Option<Cow<'_, [u8]>>> {
        let mut row = self.row(state, Access::Map, key)?;
        let prefix_len = row.len();
        row.extend_from_slice(user_key);
        Ok(self.read_row(state, &row, Some(&row[..prefix_len]))?)
    }

    fn map_put(
        &mut self,
        state: StateId,
        key: StateKey<'_>,
        user_key: &[u8],
        value: &[u8],
    ) -> weir_state::Result<()> {
        let mut row = self.row(state, Access::Map, key)?;
        row.extend_from_slice(user_key);
        self.overlay_mut(state)?.put(row, value.to_vec());
        Ok(())
    }

    fn map_remove(
        &mut self,
        state: StateId,
        key: StateKey<'_>,
        user_key: &[u8],
    ) -> weir_state::Result<()> {
        let mut row = self.row(state, Access::Map, key)?;
        row.extend_from_slice(user_key);
        self.overlay_mut(state)?.delete(row);
        Ok(())
    }

    fn map_for_each(
        &mut self,
        state: StateId,
        key: StateKey<'_>,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> weir_state::Result<()> {
        let prefix = self.row(state, Access::Map, key)?;
        // The newest write of each entry in the overlays above the newest clear.
        let mut written: BTreeMap<&[u8], &Write> = BTreeMap::new();
        let mut from_db = true;
        for overlay in self.overlays.values().rev() {
            let Some(overlay) = overlay.state(state) else {
                continue;
            };
            for (row, write) in overlay.writes_under(&prefix) {
                written.entry(row).or_insert(write);
            }
            if overlay.is_cleared(&prefix) {
                from_db = false;
                break;
            }
        }
        if from_db {
            let mut read_options = ReadOptions::default();
            if let Some(end) = prefix_end(&prefix) {
                read_options.set_iterate_upper_bound(end);
            }
            let cf = self.cf(state)?;
            let mut rows = self.db.raw_iterator_cf_opt(&cf, read_options);
            rows.seek(&prefix);
            while let (Some(row), Some(value)) = (rows.key(), rows.value()) {
                if !row.starts_with(&prefix) {
                    break;
                }
                if !written.contains_key(row) {
                    visit(&row[prefix.len()..], value);
                }
                rows.next();
            }
            rows.status().map_err(RocksDbError::engine("scan map"))?;
        }
        for (row, write) in written {
            if let Write::Put(value) = write {
                visit(&row[prefix.len()..], value);
            }
        }
        Ok(())
    }

    fn snapshot_sync(&mut self) -> weir_state::Result<Box<dyn FrozenKeyedState>> {
        self.epochs.check_all_final()?;
        Ok(Box::new(RocksDbFrozenState::new(
            Arc::clone(&self.db),
            self.states.descriptors().to_vec(),
            self.cf_names.clone(),
            self.key_group_range,
            self.max_parallelism,
        )))
    }

    fn ingest(&mut self, entry: StateEntry<'_>) -> weir_state::Result<()> {
        self.epochs.check_all_final()?;
        let access = Access::of_payload(&entry.payload);
        let key = StateKey {
            key_group: entry.key_group,
            key: entry.key,
            namespace: entry.namespace,
        };
        let mut row = self.row(entry.state, access, key)?;
        let value = match entry.payload {
            EntryPayload::Value(value) => value,
            EntryPayload::List(items) => {
                Self::check_list_payload(items)?;
                items
            }
            EntryPayload::MapEntry { user_key, value } => {
                row.extend_from_slice(user_key);
                value
            }
        };
        let cf = self.cf(entry.state)?;
        self.db
            .put_cf_opt(&cf, row, value, &self.write_options)
            .map_err(RocksDbError::engine("ingest"))?;
        Ok(())
    }
}
