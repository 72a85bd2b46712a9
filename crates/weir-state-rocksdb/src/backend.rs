//! The RocksDB keyed state backend: state access, epoch versions and the
//! synchronous snapshot part.
//!
//! Base state lives in RocksDB, one column family per state. The writes of
//! each not yet final epoch live in an in-memory [`Overlay`]; reads look
//! through the overlays (newest first) and then the database. Finalizing
//! hands the overlays of the final epochs to the fold thread (`fold.rs`),
//! which writes them as one `WriteBatch` together with the new last final
//! epoch, so the database always holds exactly a final cut; until it has,
//! reads and snapshots take those overlays from memory above a database
//! snapshot that predates them. Finalizing therefore costs no RocksDB write,
//! which keeps a checkpoint's synchronous part short. Once written, the
//! overlays of the epochs folded last (when small) still serve point reads,
//! in front of the database that holds them too. Discarding drops
//! overlays without touching the database. Native checkpoints and restore live
//! in `checkpoint.rs` and `restore.rs`.
//!
//! Durability: the write-ahead log is off (as in Flink); checkpoints are what
//! make state durable. A clean close flushes the memtables, so reopening after
//! a drop sees every finalized epoch.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocksdb::{BoundColumnFamily, ReadOptions, WaitForCompactOptions, WriteBatch, WriteOptions};
use weir_state::{
    Access, EntryPayload, EpochLog, FrozenKeyedState, KeyedStateBackend, StateEntry, StateError,
    StateId, StateKey, StateRegistry, check_key_group, list_items,
};
use weir_types::{Attempt, Epoch, KeyGroupRange, MaxParallelism, StateDescriptor, StateKind};

use crate::bulk::BulkLoad;
use crate::database::{self, Db, Meta, state_cf_name};
use crate::error::{Result, RocksDbError};
use crate::fold::Folder;
use crate::frozen::{OwnedSnapshot, RocksDbFrozenState};
use crate::key::{prefix_end, row_key};
use crate::options::{EngineOptions, RocksDbOptions};
use crate::overlay::{Overlay, StateOverlay, Write};

/// Where a bulk load writes its SST files, inside the database directory
/// (RocksDB looks at no subdirectory).
const BULK_LOAD_DIR: &str = "weir-bulk-load";

/// Overlays of more rows than this in all are freed on the fold thread
/// rather than by the caller that stops reading them. Freeing costs about
/// 100 ns a row on the caller's thread, inside a checkpoint's synchronous
/// part or at the next epoch's start: a load of 10^7 rows took 650 ms there,
/// and several 1% epochs of 10^6 keys caught up at once several ms.
const FREE_INLINE_MAX_ROWS: usize = 4_096;

/// Folded epochs of at most this many rows in all stay in memory as a read
/// cache (about 25 MiB of overlay); larger ones are freed once folded.
const FOLDED_CACHE_MAX_ROWS: usize = 262_144;

/// How many keys [`RocksDbKeyedStateBackend::get_values`] reads from the
/// database in one `MultiGet`. A state of 50,000 keys (a subtask's in the
/// keyed-average benchmark) fills about 500 blocks of 4 KiB, so a chunk's
/// keys share blocks eight to a block; a bound keeps the pinned results of
/// a large batch from holding much of the block cache.
const MULTI_GET_CHUNK: usize = 4_096;

/// The row keys of one chunk of reads, in one buffer.
#[derive(Default)]
struct RowChunk {
    bytes: Vec<u8>,
    ends: Vec<usize>,
    row: Vec<u8>,
}

impl RowChunk {
    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    fn push(&mut self, key: StateKey<'_>) {
        row_key(key, &mut self.row);
        self.bytes.extend_from_slice(&self.row);
        self.ends.push(self.bytes.len());
    }

    fn rows(&self) -> impl Iterator<Item = &[u8]> {
        let mut start = 0;
        self.ends.iter().map(move |&end| {
            let row = &self.bytes[start..end];
            start = end;
            row
        })
    }
}

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
    /// Final epochs handed to `folder` that reads cannot take from the
    /// database yet, oldest first.
    unfolded: Vec<Arc<Overlay>>,
    /// While `unfolded` is not empty: a snapshot of the database from before
    /// the first of them was handed off, which reads use instead of the
    /// database.
    base: Option<Arc<OwnedSnapshot>>,
    /// The epochs folded last (when small), oldest first: the database holds
    /// them, and point reads take their rows from here instead. A checkpoint
    /// flushes the memtable, so without them the next epoch's reads of the
    /// rows just written would each search the SST files (a task rereads
    /// most of the keys the previous epoch wrote).
    folded: Vec<Arc<Overlay>>,
    folder: Folder,
    /// A restore's rows not yet written (between `begin_bulk_load` and its end).
    bulk: Option<BulkLoad>,
    /// The row key of the entry `ingest` takes, one buffer for all of a
    /// restore's millions.
    ingest_row: Vec<u8>,
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
        let db = Arc::new(db);
        Ok(Self {
            folder: Folder::start(Arc::clone(&db))?,
            db,
            path,
            engine,
            max_parallelism: meta.max_parallelism,
            key_group_range: meta.key_group_range,
            states: StateRegistry::from_descriptors(meta.descriptors),
            cf_names,
            epochs,
            overlays: BTreeMap::new(),
            unfolded: Vec::new(),
            folded: Vec::new(),
            base: None,
            bulk: None,
            ingest_row: Vec::new(),
            write_options,
        })
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes every final epoch (all must be final), reads from the
    /// database alone again, flushes the memtables and waits until RocksDB
    /// runs and queues no compaction, so the set of SST files stays as it is
    /// until the next write.
    ///
    /// Compactions rewrite files in the background, so two native
    /// checkpoints share fewer files when one ran between them: level-0
    /// files merged into the next level, and bottommost files older than an
    /// hour once the snapshot that reads went through while epochs were
    /// being written is released (see `BOTTOMMOST_REWRITE_DELAY`). A test or
    /// benchmark that compares what two checkpoints share calls this first.
    pub fn wait_for_compactions(&mut self) -> Result<()> {
        self.settle()?;
        let mut options = WaitForCompactOptions::default();
        options.set_flush(true);
        self.db
            .wait_for_compact(&options)
            .map_err(RocksDbError::engine("wait for compactions"))
    }

    /// The fold thread, which also creates native checkpoints.
    pub(crate) fn folder_mut(&mut self) -> &mut Folder {
        &mut self.folder
    }

    /// Fails unless a snapshot may be taken now: every epoch final, no bulk
    /// load open (one is ended here).
    pub(crate) fn check_snapshot_ready(&mut self) -> Result<()> {
        self.epochs.check_all_final()?;
        self.end_bulk_load()
    }

    /// Fails unless every epoch is final, then waits until the database
    /// holds all of them (native checkpoints and ingest work on the database
    /// itself).
    pub(crate) fn settle(&mut self) -> Result<()> {
        self.check_snapshot_ready()?;
        self.folder.wait()?;
        self.read_from_database();
        Ok(())
    }

    /// Writes a bulk load's remaining rows, if one is open.
    fn end_bulk_load(&mut self) -> Result<()> {
        match self.bulk.take() {
            Some(bulk) => bulk.finish(&self.db, &self.engine.state, &self.cf_names),
            None => Ok(()),
        }
    }

    /// Reads from the database again once the fold thread has written every
    /// final epoch.
    fn catch_up(&mut self) -> Result<()> {
        if self.base.is_some() && self.folder.all_applied()? {
            self.read_from_database();
        }
        Ok(())
    }

    /// Stops reading the unfolded epochs (the database holds them) and
    /// frees their overlays, on the fold thread when they are large.
    fn read_from_database(&mut self) {
        self.base = None;
        let unfolded = std::mem::take(&mut self.unfolded);
        if unfolded.is_empty() {
            return;
        }
        let stale = if unfolded.iter().map(|overlay| overlay.rows()).sum::<usize>()
            <= FOLDED_CACHE_MAX_ROWS
        {
            std::mem::replace(&mut self.folded, unfolded)
        } else {
            let mut stale = std::mem::take(&mut self.folded);
            stale.extend(unfolded);
            stale
        };
        self.free(stale);
    }

    /// Frees `overlays`, on the fold thread when they are large.
    fn free(&self, overlays: Vec<Arc<Overlay>>) {
        if overlays.iter().map(|overlay| overlay.rows()).sum::<usize>() > FREE_INLINE_MAX_ROWS {
            self.folder.free(overlays);
        }
    }

    /// Stops serving reads from the folded epochs: the database is about to
    /// change other than by folding epochs.
    fn drop_folded(&mut self) {
        let folded = std::mem::take(&mut self.folded);
        self.free(folded);
    }

    /// What the folded epochs say of `row`, newest first: `Some(value)` for
    /// a put, `Some(None)` for a delete or a clear of its map entries, and
    /// `None` where the database must be read: no folded epoch wrote the row,
    /// or the newest one appended to it (the database holds the whole list).
    fn folded_write(
        &self,
        id: StateId,
        row: &[u8],
        map_prefix: Option<&[u8]>,
    ) -> Option<Option<&[u8]>> {
        for overlay in self.folded.iter().rev() {
            let Some(state) = overlay.state(id) else {
                continue;
            };
            match state.get(row) {
                Some(Write::Put(value)) => return Some(Some(&value[..])),
                Some(Write::Delete) => return Some(None),
                Some(Write::Append(_)) => return None,
                None if map_prefix.is_some_and(|prefix| state.is_cleared(prefix)) => {
                    return Some(None);
                }
                None => {}
            }
        }
        None
    }

    /// Read options that see the base: the database, or the snapshot below
    /// the unfolded epochs.
    fn base_read_options(&self) -> ReadOptions {
        let mut options = ReadOptions::default();
        if let Some(base) = &self.base {
            base.read_at(&mut options);
        }
        options
    }

    /// The overlays a read looks through, newest first.
    fn layers(&self) -> impl Iterator<Item = &Overlay> {
        self.overlays
            .values()
            .rev()
            .chain(self.unfolded.iter().rev().map(|overlay| &**overlay))
    }

    /// The column family of a registered state.
    pub(crate) fn cf(&self, id: StateId) -> Result<Arc<BoundColumnFamily<'_>>> {
        // `let else`, not `ok_or`: that builds and drops the error on every
        // access.
        let Some(name) = self.cf_names.get(id.0 as usize) else {
            return Err(StateError::UnknownState(id).into());
        };
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
        let mut row = Vec::with_capacity(8 + key.key.len() + key.namespace.len());
        self.row_into(id, access, key, &mut row)?;
        Ok(row)
    }

    /// Checks the access and writes the row key of `key` into `row`.
    fn row_into(
        &self,
        id: StateId,
        access: Access,
        key: StateKey<'_>,
        row: &mut Vec<u8>,
    ) -> Result<(), StateError> {
        self.states.get(id, access)?;
        check_key_group(self.key_group_range, key.key_group)?;
        row_key(key, row);
        Ok(())
    }

    /// The overlay of `id` in the epoch that writes go to.
    fn overlay_mut(&mut self, id: StateId) -> Result<&mut StateOverlay, StateError> {
        let epoch = self.epochs.write_epoch()?;
        let kind = self.states.get(id, Access::Any)?.kind;
        Ok(self.overlays.entry(epoch).or_default().state_mut(id, kind))
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
        for overlay in self.layers() {
            let Some(state) = overlay.state(id) else {
                continue;
            };
            match state.get(row) {
                Some(Write::Put(value)) => {
                    base = Some(Cow::Borrowed(&value[..]));
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
            base = match self.folded_write(id, row, map_prefix) {
                Some(value) => value.map(Cow::Borrowed),
                None => self
                    .db
                    .get_cf_opt(&self.cf(id)?, row, &self.base_read_options())
                    .map_err(RocksDbError::engine("read"))?
                    .map(Cow::Owned),
            };
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

    /// Reads the values of `keys` of a value, reducing or aggregating state
    /// and passes them to `each` in order (`None`: absent); the batch form of
    /// [`KeyedStateBackend::get_value`].
    ///
    /// Each key looks through the overlays; the keys none of them holds are
    /// read from the database in one `MultiGet` per [`MULTI_GET_CHUNK`]
    /// keys. RocksDB sorts those keys and visits each block once for all of
    /// its keys, where single reads each take the block cache's lock and
    /// search the index and the block again.
    pub fn get_values<'k, E: From<StateError>>(
        &self,
        state: StateId,
        keys: impl IntoIterator<Item = StateKey<'k>>,
        mut each: impl FnMut(Option<&[u8]>) -> Result<(), E>,
    ) -> Result<(), E> {
        self.states.get(state, Access::Value)?;
        let mut keys = keys.into_iter().peekable();
        let mut chunk = RowChunk::default();
        while keys.peek().is_some() {
            chunk.clear();
            for key in keys.by_ref().take(MULTI_GET_CHUNK) {
                check_key_group(self.key_group_range, key.key_group)?;
                chunk.push(key);
            }
            let layered: Vec<_> = chunk
                .rows()
                .map(|row| self.value_in_overlays(state, row))
                .collect();
            let below: Vec<&[u8]> = chunk
                .rows()
                .zip(&layered)
                .filter_map(|(row, value)| value.is_none().then_some(row))
                .collect();
            let mut read = self.read_base_rows(state, &below)?.into_iter();
            for value in layered {
                match value {
                    Some(value) => each(value)?,
                    None => {
                        let value = read.next().expect("invariant: one base read per row below");
                        each(value.as_deref())?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The value the overlays (and the folded epochs) hold for value row
    /// `row`: `Some(None)` if the newest write to it deleted it, `None` if
    /// none of them wrote it.
    fn value_in_overlays(&self, id: StateId, row: &[u8]) -> Option<Option<&[u8]>> {
        self.layers()
            .find_map(|overlay| match overlay.state(id)?.get(row)? {
                Write::Put(value) => Some(Some(&value[..])),
                Write::Delete => Some(None),
                Write::Append(_) => unreachable!("value rows are never appended to"),
            })
            .or_else(|| self.folded_write(id, row, None))
    }

    /// Reads `rows` of `id` from the base in one `MultiGet`.
    fn read_base_rows(
        &self,
        id: StateId,
        rows: &[&[u8]],
    ) -> Result<Vec<Option<rocksdb::DBPinnableSlice<'_>>>, StateError> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let cf = self.cf(id)?;
        self.db
            .batched_multi_get_cf_opt(&cf, rows, false, &self.base_read_options())
            .into_iter()
            .map(|read| read.map_err(|source| RocksDbError::engine("read")(source).into()))
            .collect()
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
        self.end_bulk_load()?;
        for dropped in self.epochs.begin(epoch, attempt)?.epochs {
            self.overlays.remove(&dropped);
        }
        self.catch_up()?;
        Ok(())
    }

    fn commit_epoch(&mut self, epoch: Epoch, attempt: Attempt) -> weir_state::Result<()> {
        self.epochs.commit(epoch, attempt)
    }

    fn finalize_up_to(&mut self, epoch: Epoch) -> weir_state::Result<()> {
        // Decide on a copy so a failed hand-off leaves the epochs as they were.
        let mut epochs = self.epochs.clone();
        let decision = epochs.finalize_up_to(epoch)?;
        if epochs.last_final() == self.epochs.last_final() {
            return Ok(());
        }
        self.catch_up()?;
        if self.unfolded.is_empty() {
            self.base = Some(Arc::new(OwnedSnapshot::take(&self.db)));
        }
        let folded: Vec<(Epoch, Arc<Overlay>)> = decision
            .epochs
            .iter()
            .filter_map(|&final_epoch| {
                let overlay = self.overlays.remove(&final_epoch)?;
                Some((final_epoch, Arc::new(overlay)))
            })
            .collect();
        let handed = folded.iter().map(|(_, overlay)| Arc::clone(overlay));
        if let Err(err) = self
            .folder
            .hand_off(handed.collect(), self.cf_names.clone(), epoch)
        {
            for (final_epoch, overlay) in folded {
                self.overlays
                    .insert(final_epoch, Arc::unwrap_or_clone(overlay));
            }
            return Err(err.into());
        }
        self.unfolded
            .extend(folded.into_iter().map(|(_, overlay)| overlay));
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
        self.overlay_mut(state)?.put(&row, value);
        Ok(())
    }

    fn clear(&mut self, state: StateId, key: StateKey<'_>) -> weir_state::Result<()> {
        let kind = self.states.get(state, Access::Any)?.kind;
        let row = self.row(state, Access::Any, key)?;
        let overlay = self.overlay_mut(state)?;
        match kind {
            StateKind::Map => overlay.clear_prefix(&row),
            _ => overlay.delete(&row),
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
            overlay.append(&row, payload);
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
            overlay.delete(&row);
        } else {
            overlay.put(&row, payload);
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
        self.overlay_mut(state)?.put(&row, value);
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
        self.overlay_mut(state)?.delete(&row);
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
        for overlay in self.layers() {
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
            let mut read_options = self.base_read_options();
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
        self.check_snapshot_ready()?;
        self.catch_up()?;
        let snapshot = match &self.base {
            Some(base) => Arc::clone(base),
            None => Arc::new(OwnedSnapshot::take(&self.db)),
        };
        Ok(Box::new(RocksDbFrozenState::new(
            snapshot,
            self.unfolded.clone(),
            self.states.descriptors().to_vec(),
            self.cf_names.clone(),
            self.key_group_range,
            self.max_parallelism,
        )))
    }

    fn ingest(&mut self, entry: StateEntry<'_>) -> weir_state::Result<()> {
        if self.bulk.is_none() {
            self.settle()?;
            self.drop_folded();
        }
        let access = Access::of_payload(&entry.payload);
        let key = StateKey {
            key_group: entry.key_group,
            key: entry.key,
            namespace: entry.namespace,
        };
        let mut row = std::mem::take(&mut self.ingest_row);
        self.row_into(entry.state, access, key, &mut row)?;
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
        if let Some(bulk) = &mut self.bulk {
            bulk.push(entry.state, &row, value)?;
            if bulk.full() {
                bulk.flush(&self.db, &self.engine.state, &self.cf_names)?;
            }
        } else {
            let cf = self.cf(entry.state)?;
            self.db
                .put_cf_opt(&cf, &row, value, &self.write_options)
                .map_err(RocksDbError::engine("ingest"))?;
        }
        self.ingest_row = row;
        Ok(())
    }

    fn begin_bulk_load(&mut self) -> weir_state::Result<()> {
        self.settle()?;
        self.drop_folded();
        self.bulk = Some(BulkLoad::start(self.path.join(BULK_LOAD_DIR))?);
        Ok(())
    }

    fn finish_bulk_load(&mut self) -> weir_state::Result<()> {
        Ok(self.end_bulk_load()?)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use weir_state::push_list_item;
    use weir_types::{KeyGroup, ValueType};

    use super::*;

    const MAX: u32 = 16;

    fn open(dir: &Path) -> RocksDbKeyedStateBackend {
        let max = MaxParallelism::new(MAX).expect("valid");
        RocksDbKeyedStateBackend::open(RocksDbOptions::new(dir, max, max.full_range()))
            .expect("open")
    }

    fn register(
        b: &mut RocksDbKeyedStateBackend,
        name: &str,
        kind: StateKind,
        value_type: ValueType,
    ) -> StateId {
        b.register_state(&StateDescriptor::new(name, kind, value_type).expect("valid"))
            .expect("registered")
    }

    /// A backend with a value, a list and a map state, in that order.
    fn open_with_every_kind(dir: &Path) -> (RocksDbKeyedStateBackend, [StateId; 3]) {
        let mut b = open(dir);
        let value = register(&mut b, "value", StateKind::Value, ValueType::Int64);
        let items = register(&mut b, "list", StateKind::List, ValueType::Int64);
        let map = b
            .register_state(
                &StateDescriptor::map("map", ValueType::Utf8, ValueType::Int64).expect("ok"),
            )
            .expect("registered");
        (b, [value, items, map])
    }

    fn list(items: &[&[u8]]) -> Vec<u8> {
        let mut payload = Vec::new();
        for item in items {
            push_list_item(item, &mut payload);
        }
        payload
    }

    /// Every entry of `frozen`, in the order it visits them.
    fn dump(frozen: &dyn FrozenKeyedState) -> Vec<String> {
        let (mut out, mut seen) = (Vec::new(), BTreeSet::new());
        for kg in frozen.key_group_range().iter() {
            frozen
                .for_each_entry(kg, &mut |e| {
                    let line = format!("{} {:?} {:?}", e.state.0, e.key, e.payload);
                    assert!(seen.insert(line.clone()), "an entry is visited once");
                    out.push(line);
                    Ok(())
                })
                .expect("scan");
        }
        out
    }

    /// Runs `work` on `keys` as epoch `epoch`, then commits it.
    fn epoch(
        b: &mut RocksDbKeyedStateBackend,
        epoch: u64,
        keys: std::ops::Range<u16>,
        mut work: impl FnMut(&mut RocksDbKeyedStateBackend, StateKey<'_>),
    ) {
        b.begin_epoch(Epoch(epoch), Attempt(0)).expect("begin");
        for i in keys {
            let key = format!("k{i}").into_bytes();
            work(b, StateKey::new(KeyGroup(i % 16), &key));
        }
        b.commit_epoch(Epoch(epoch), Attempt(0)).expect("commit");
    }

    /// The merged view (a database snapshot plus final epochs not yet folded
    /// into it) holds exactly what the database holds once they are folded,
    /// for every way a later epoch can change an earlier write, and visits it
    /// in the same (the rows') order.
    #[test]
    fn a_view_over_unfolded_epochs_equals_the_folded_database() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut b, [value, items, map]) = open_with_every_kind(dir.path());

        epoch(&mut b, 1, 0..40, |b, k| {
            b.put_value(value, k, b"v1").expect("put");
            b.append_list(items, k, &list(&[b"a"])).expect("append");
            b.map_put(map, k, b"u1", b"m1").expect("put");
            b.map_put(map, k, b"u2", b"m1").expect("put");
        });
        b.finalize_up_to(Epoch(1)).expect("finalize");
        b.settle().expect("settle");
        let before = Arc::new(OwnedSnapshot::take(&b.db));

        epoch(&mut b, 2, 0..45, |b, k| {
            let i: u16 = std::str::from_utf8(&k.key[1..])
                .expect("utf8")
                .parse()
                .expect("n");
            match i {
                0..5 => {
                    b.put_value(value, k, b"v2").expect("put");
                    b.append_list(items, k, &list(&[b"b"])).expect("append");
                    b.clear(map, k).expect("clear");
                    b.map_put(map, k, b"u3", b"m2").expect("put");
                }
                5..10 => {
                    b.clear(value, k).expect("clear");
                    b.replace_list(items, k, &list(&[b"r"])).expect("replace");
                    b.map_remove(map, k, b"u1").expect("remove");
                }
                10..15 => {
                    b.clear(items, k).expect("clear");
                    b.map_put(map, k, b"u1", b"m2").expect("put");
                }
                40.. => {
                    b.put_value(value, k, b"new").expect("put");
                    b.map_put(map, k, b"u9", b"new").expect("put");
                }
                _ => {}
            }
        });
        epoch(&mut b, 3, 0..48, |b, k| {
            let i: u16 = std::str::from_utf8(&k.key[1..])
                .expect("utf8")
                .parse()
                .expect("n");
            if !(20..45).contains(&i) {
                b.append_list(items, k, &list(&[b"c"])).expect("append");
            }
            if (3..8).contains(&i) {
                b.clear(map, k).expect("clear");
            }
            if (6..8).contains(&i) {
                b.map_put(map, k, b"u4", b"m3").expect("put");
            }
            if (40..42).contains(&i) {
                b.clear(value, k).expect("clear");
            }
        });
        let unfolded: Vec<Arc<Overlay>> = b
            .overlays
            .values()
            .map(|overlay| Arc::new(overlay.clone()))
            .collect();
        b.finalize_up_to(Epoch(3)).expect("finalize");
        b.settle().expect("settle");

        let folded = dump(b.snapshot_sync().expect("snapshot").as_ref());
        let merged = RocksDbFrozenState::new(
            before,
            unfolded,
            b.descriptors().to_vec(),
            b.cf_names.clone(),
            b.key_group_range(),
            b.max_parallelism(),
        );
        assert_eq!(dump(&merged), folded);
        // Spot checks that the scenario did what it says.
        let k = |i: u16| format!("k{i}").into_bytes();
        let line = |state: StateId, i: u16, payload: EntryPayload<'_>| {
            format!("{} {:?} {:?}", state.0, k(i), payload)
        };
        let abc = list(&[b"a", b"b", b"c"]);
        assert!(folded.contains(&line(items, 0, EntryPayload::List(&abc))));
        let rc = list(&[b"r", b"c"]);
        assert!(folded.contains(&line(items, 7, EntryPayload::List(&rc))));
        let c = list(&[b"c"]);
        assert!(folded.contains(&line(items, 12, EntryPayload::List(&c))));
        assert!(folded.contains(&line(items, 46, EntryPayload::List(&c))));
        let u4 = EntryPayload::MapEntry {
            user_key: b"u4",
            value: b"m3",
        };
        assert!(folded.contains(&line(map, 6, u4)));
        assert_eq!(
            folded
                .iter()
                .filter(|l| l.starts_with(&format!("{} {:?}", map.0, k(3))))
                .count(),
            0
        );
        assert!(!folded.contains(&line(value, 40, EntryPayload::Value(b"new"))));
        assert!(folded.contains(&line(value, 43, EntryPayload::Value(b"new"))));
    }

    /// Reads between a finalize and the fold thread's write see each write
    /// once, and the backend reads the database again afterwards.
    #[test]
    fn reads_see_final_epochs_once_while_and_after_they_are_folded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut b = open(dir.path());
        let items = register(&mut b, "list", StateKind::List, ValueType::Int64);
        let key = StateKey::new(KeyGroup(1), b"k");
        let mut expected: Vec<&[u8]> = Vec::new();
        for e in 1..=30u64 {
            b.begin_epoch(Epoch(e), Attempt(0)).expect("begin");
            b.append_list(items, key, &list(&[b"x"])).expect("append");
            b.commit_epoch(Epoch(e), Attempt(0)).expect("commit");
            b.finalize_up_to(Epoch(e)).expect("finalize");
            expected.push(b"x");
            let read = b.get_list(items, key).expect("read").map(Cow::into_owned);
            assert_eq!(read, Some(list(&expected)), "after epoch {e}");
        }
        b.settle().expect("settle");
        assert!(b.unfolded.is_empty() && b.base.is_none());
        assert_eq!(
            b.get_list(items, key).expect("read").map(Cow::into_owned),
            Some(list(&expected))
        );
        assert_eq!(b.last_final_epoch(), Some(Epoch(30)));
    }

    /// Batched reads see what single reads see, through every layer: the
    /// database, final epochs not yet folded, an epoch not yet final (writes
    /// and deletes), and keys no layer holds, over more than one chunk.
    #[test]
    fn batched_reads_equal_single_reads_through_every_layer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut b = open(dir.path());
        let value = register(&mut b, "value", StateKind::Value, ValueType::Int64);
        let items = register(&mut b, "list", StateKind::List, ValueType::Int64);
        let keys: Vec<Vec<u8>> = (0..6_000u16)
            .rev()
            .chain(0..10)
            .map(|i| format!("k{i}").into_bytes())
            .collect();
        let state_keys = || {
            keys.iter()
                .map(|key| StateKey::new(KeyGroup(key.len() as u16 % 16), key))
        };
        let check = |b: &mut RocksDbKeyedStateBackend, when: &str| {
            let mut batched = Vec::new();
            b.get_values(value, state_keys(), |read| {
                batched.push(read.map(<[u8]>::to_vec));
                Ok::<_, StateError>(())
            })
            .expect("batched read");
            let single: Vec<_> = state_keys()
                .map(|key| b.get_value(value, key).expect("read").map(Cow::into_owned))
                .collect();
            assert_eq!(batched, single, "{when}");
            batched.iter().filter(|read| read.is_some()).count()
        };
        let write =
            |b: &mut RocksDbKeyedStateBackend, e: u64, range: std::ops::Range<u16>, put: bool| {
                b.begin_epoch(Epoch(e), Attempt(0)).expect("begin");
                for i in range {
                    let key = format!("k{i}").into_bytes();
                    let key = StateKey::new(KeyGroup(key.len() as u16 % 16), &key);
                    if put {
                        b.put_value(value, key, &(i64::from(i) * e as i64).to_le_bytes())
                            .expect("put");
                    } else {
                        b.clear(value, key).expect("clear");
                    }
                }
                b.commit_epoch(Epoch(e), Attempt(0)).expect("commit");
            };

        write(&mut b, 1, 0..5_000, true);
        b.finalize_up_to(Epoch(1)).expect("finalize");
        b.settle().expect("settle");
        assert_eq!(check(&mut b, "from the database"), 5_010);
        write(&mut b, 2, 0..1_000, true);
        write(&mut b, 3, 1_000..1_500, false);
        b.finalize_up_to(Epoch(3)).expect("finalize");
        write(&mut b, 4, 1_500..1_700, true);
        write(&mut b, 5, 0..100, false);
        assert_eq!(check(&mut b, "through the overlays"), 4_400);
        b.finalize_up_to(Epoch(5)).expect("finalize");
        b.settle().expect("settle");
        assert_eq!(check(&mut b, "folded"), 4_400);

        let outside = StateKey::new(KeyGroup(MAX as u16), b"k");
        let refused = b.get_values(value, [outside], |_| Ok::<_, StateError>(()));
        assert!(
            matches!(refused, Err(StateError::KeyGroupOutOfRange { .. })),
            "{refused:?}"
        );
        let refused = b.get_values(items, state_keys(), |_| Ok::<_, StateError>(()));
        assert!(refused.is_err(), "a list state has no values to read");
    }

    /// Point reads served by the epochs folded last see what the database
    /// holds: a folded append is not applied twice, a folded clear of a map
    /// hides its older entries, and later epochs still apply on top.
    #[test]
    fn reads_of_folded_epochs_agree_with_the_database() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut b, [value, items, map]) = open_with_every_kind(dir.path());
        let (one, two) = (
            StateKey::new(KeyGroup(1), b"one"),
            StateKey::new(KeyGroup(2), b"two"),
        );
        let reads = |b: &mut RocksDbKeyedStateBackend| {
            let own = |read: Option<Cow<'_, [u8]>>| read.map(Cow::into_owned);
            [
                own(b.get_value(value, one).expect("read")),
                own(b.get_value(value, two).expect("read")),
                own(b.get_list(items, one).expect("read")),
                own(b.map_get(map, one, b"a").expect("read")),
                own(b.map_get(map, one, b"b").expect("read")),
            ]
        };
        b.begin_epoch(Epoch(1), Attempt(0)).expect("begin");
        b.put_value(value, one, b"1").expect("put");
        b.put_value(value, two, b"2").expect("put");
        b.replace_list(items, one, &list(&[b"x"])).expect("replace");
        b.map_put(map, one, b"a", b"a1").expect("put");
        b.map_put(map, one, b"b", b"b1").expect("put");
        b.commit_epoch(Epoch(1), Attempt(0)).expect("commit");
        b.begin_epoch(Epoch(2), Attempt(0)).expect("begin");
        b.clear(value, two).expect("clear");
        b.append_list(items, one, &list(&[b"y"])).expect("append");
        b.clear(map, one).expect("clear");
        b.map_put(map, one, b"b", b"b2").expect("put");
        b.commit_epoch(Epoch(2), Attempt(0)).expect("commit");
        b.finalize_up_to(Epoch(2)).expect("finalize");
        b.settle().expect("settle");
        assert_eq!(b.folded.len(), 2, "both epochs are kept for reads");

        let expected = [
            Some(b"1".to_vec()),
            None,
            Some(list(&[b"x", b"y"])),
            None,
            Some(b"b2".to_vec()),
        ];
        assert_eq!(reads(&mut b), expected, "from the folded epochs");
        b.drop_folded();
        assert_eq!(reads(&mut b), expected, "from the database");

        b.begin_epoch(Epoch(3), Attempt(0)).expect("begin");
        b.append_list(items, one, &list(&[b"z"])).expect("append");
        b.commit_epoch(Epoch(3), Attempt(0)).expect("commit");
        b.finalize_up_to(Epoch(3)).expect("finalize");
        b.settle().expect("settle");
        b.begin_epoch(Epoch(4), Attempt(0)).expect("begin");
        b.append_list(items, one, &list(&[b"w"])).expect("append");
        assert_eq!(
            b.get_list(items, one).expect("read").map(Cow::into_owned),
            Some(list(&[b"x", b"y", b"z", b"w"])),
            "an open epoch's append over a folded one"
        );
    }

    /// An epoch too large to free on the caller's thread is freed on the
    /// fold thread once folded: a snapshot taken while it was unfolded still
    /// reads all of it, reads go to the database, and work queued after the
    /// free (a native checkpoint) still runs.
    #[test]
    fn large_folded_epochs_are_freed_on_the_fold_thread() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut b = open(&dir.path().join("db"));
        let value = register(&mut b, "value", StateKind::Value, ValueType::Binary);
        let rows = u32::try_from(FREE_INLINE_MAX_ROWS).expect("small") + 1;
        let group = |i: u32| KeyGroup(u16::try_from(i % MAX).expect("small"));
        b.begin_epoch(Epoch(1), Attempt(0)).expect("begin");
        for i in 0..rows {
            let bytes = i.to_be_bytes();
            b.put_value(value, StateKey::new(group(i), &bytes), &bytes)
                .expect("put");
        }
        b.commit_epoch(Epoch(1), Attempt(0)).expect("commit");
        b.finalize_up_to(Epoch(1)).expect("finalize");
        let frozen = b.snapshot_sync().expect("snapshot");
        b.folder.wait().expect("folded");

        b.begin_epoch(Epoch(2), Attempt(0)).expect("begin");
        assert!(b.unfolded.is_empty() && b.base.is_none());
        assert_eq!(dump(frozen.as_ref()).len(), rows as usize);
        drop(frozen);
        let native = dir.path().join("native");
        let created = b.folder.checkpoint(native.clone()).expect("queued");
        created.recv().expect("answered").expect("created");
        assert!(native.join("CURRENT").exists());
        for i in [0, rows / 2, rows - 1] {
            let bytes = i.to_be_bytes();
            let read = b
                .get_value(value, StateKey::new(group(i), &bytes))
                .expect("read");
            assert_eq!(read.as_deref(), Some(&bytes[..]));
        }
    }

    /// A full snapshot's scan through a memtable holding several versions of
    /// every row marks it for flush, so the rows written next go to a fresh
    /// memtable; a scan through one version per row leaves the memtable alone.
    #[test]
    fn scans_through_deep_memtables_flush_them() {
        let active_entries = |epochs: u64| {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut b = open(dir.path());
            let value = register(&mut b, "value", StateKind::Value, ValueType::Int64);
            // 1,000 rows per key group: a scan of one steps over 1,000 hidden
            // versions per epoch after the first.
            for e in 1..=epochs {
                epoch(&mut b, e, 0..16_000, |b, k| {
                    b.put_value(value, k, &e.to_be_bytes()).expect("put");
                });
                b.finalize_up_to(Epoch(e)).expect("finalize");
            }
            b.settle().expect("settle");
            let scanned = dump(b.snapshot_sync().expect("snapshot").as_ref());
            assert_eq!(scanned.len(), 16_000);
            // RocksDB switches a marked memtable on the writes that follow.
            for e in epochs + 1..=epochs + 2 {
                epoch(&mut b, e, 0..1, |b, k| {
                    b.put_value(value, k, b"next").expect("put");
                });
                b.finalize_up_to(Epoch(e)).expect("finalize");
                b.settle().expect("settle");
            }
            let cf = b.db.cf_handle(&b.cf_names[0]).expect("state column family");
            b.db.property_int_value_cf(&cf, "rocksdb.num-entries-active-mem-table")
                .expect("property")
                .expect("known")
        };
        assert!(
            active_entries(4) <= 2,
            "three hidden versions per row: flushed"
        );
        assert!(
            active_entries(1) > 16_000,
            "one version per row: not flushed"
        );
    }

    /// A bulk load that writes several files, with rows out of order and
    /// one row twice, holds what ingesting entry by entry holds.
    #[test]
    fn a_bulk_load_holds_what_entry_by_entry_ingest_holds() {
        let d = |name: &str, kind| StateDescriptor::new(name, kind, ValueType::Int64).expect("ok");
        let descriptors = [
            d("value", StateKind::Value),
            d("list", StateKind::List),
            StateDescriptor::map("map", ValueType::Utf8, ValueType::Int64).expect("ok"),
        ];
        let load = |bulk: bool| {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut b = open(dir.path());
            let ids: Vec<StateId> = descriptors
                .iter()
                .map(|descriptor| b.register_state(descriptor).expect("ok"))
                .collect();
            if bulk {
                b.begin_bulk_load().expect("begin");
                let bulk = b.bulk.as_mut().expect("open");
                // Several flushes, each written in parts on threads where
                // there are cores for them.
                bulk.flush_bytes = 500;
                bulk.min_part_rows = 4;
            }
            // Descending keys within each pass, so no file is written in order.
            for pass in 0..2u16 {
                for i in (0..200u16).rev() {
                    let key = format!("k{i}").into_bytes();
                    let value = format!("v{pass}").into_bytes();
                    let items = list(&[&value]);
                    let payloads = [
                        EntryPayload::Value(&value),
                        EntryPayload::List(&items),
                        EntryPayload::MapEntry {
                            user_key: b"u",
                            value: &value,
                        },
                    ];
                    for (state, payload) in ids.iter().zip(payloads) {
                        b.ingest(StateEntry {
                            state: *state,
                            key_group: KeyGroup(i % 16),
                            key: &key,
                            namespace: b"",
                            payload,
                        })
                        .expect("ingest");
                    }
                }
            }
            if bulk {
                b.finish_bulk_load().expect("finish");
                assert!(!dir.path().join(BULK_LOAD_DIR).exists());
            }
            let loaded = dump(b.snapshot_sync().expect("snapshot").as_ref());
            (
                loaded,
                b.get_value(ids[0], StateKey::new(KeyGroup(3), b"k3"))
                    .expect("read")
                    .map(Cow::into_owned),
            )
        };
        let (bulk, read) = load(true);
        assert_eq!(bulk.len(), 600);
        assert_eq!(bulk, load(false).0);
        assert_eq!(read, Some(b"v1".to_vec()), "the later of two rows wins");
    }

    /// A file the writer thread cannot write fails the load where the
    /// restore next waits for the writer, saying what failed.
    #[test]
    fn a_bulk_load_file_that_cannot_be_written_fails_the_load() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut b = open(dir.path());
        let descriptor =
            StateDescriptor::new("value", StateKind::Value, ValueType::Int64).expect("ok");
        let id = b.register_state(&descriptor).expect("register");
        b.begin_bulk_load().expect("begin");
        b.ingest(StateEntry {
            state: id,
            key_group: KeyGroup(1),
            key: b"k",
            namespace: b"",
            payload: EntryPayload::Value(b"v"),
        })
        .expect("ingest");
        // The writer finds no directory for its file.
        std::fs::remove_dir_all(dir.path().join(BULK_LOAD_DIR)).expect("remove");
        let error = b
            .finish_bulk_load()
            .expect_err("no file written")
            .to_string();
        assert!(error.contains("create a bulk-load file"), "{error}");
    }

    /// The fold thread is a batch thread, so waking it inside a checkpoint's
    /// pause does not take the core of the thread that is pausing.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_fold_thread_runs_as_a_batch_thread() {
        const SCHED_BATCH: u32 = 3;
        /// The scheduling policy (field 41 of `stat`) of this process's
        /// fold threads.
        fn fold_policies() -> Vec<u32> {
            let tasks = std::fs::read_dir("/proc/self/task").expect("tasks");
            tasks
                .filter_map(|task| {
                    let task = task.ok()?.path();
                    let name = std::fs::read_to_string(task.join("comm")).ok()?;
                    // Thread names are cut to 15 bytes.
                    if name.trim_end() != &"weir-rocksdb-fold"[..15] {
                        return None;
                    }
                    let stat = std::fs::read_to_string(task.join("stat")).ok()?;
                    let after_name = &stat[stat.rfind(')')? + 2..];
                    after_name.split(' ').nth(38)?.parse().ok()
                })
                .collect()
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let _backend = open(dir.path());
        // The thread switches itself as it starts.
        let started = std::time::Instant::now();
        let mut policies = fold_policies();
        while !policies.contains(&SCHED_BATCH) && started.elapsed().as_secs() < 5 {
            std::thread::sleep(std::time::Duration::from_millis(10));
            policies = fold_policies();
        }
        assert!(policies.contains(&SCHED_BATCH), "policies {policies:?}");
    }
}
