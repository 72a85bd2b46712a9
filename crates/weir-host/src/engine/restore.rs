//! Filling a fresh subtask from stored state (restore and rescale).
//!
//! Canonical snapshot files are read key group by key group into any
//! backend. RocksDB's native (incremental) checkpoints are downloaded and
//! opened: a RocksDB subtask becomes the database built from them (SST files
//! hard-linked, key groups outside its range dropped, see
//! `RocksDbKeyedStateBackend::restore_from_native`); a heap subtask copies
//! its key groups out of that database, so switching backends needs no
//! savepoint.

use std::path::PathBuf;

use weir_checkpoint::SubtaskRestore;
use weir_snapshot::{
    IncrementalSnapshotHandle, KeyedStateHandle, PendingChecksums, SnapshotStorage,
    download_incremental, read_operator_state, restore_keyed,
};
use weir_state::{
    FrozenKeyedState, KeyedStateBackend, LoadThreads, OperatorStateSnapshot, OperatorStateStore,
    StateEntry, StateError, StateId, load_key_groups, redistribute,
};
use weir_state_rocksdb::{RocksDbKeyedStateBackend, RocksDbOptions};
use weir_types::{CheckpointId, KeyGroup};

use super::keyed::KeyedBackend;
use super::workdir::OwnedDir;
use super::{Subtask, rocksdb_dir};
use crate::error::{HostError, Result};

/// Which stored checkpoint a restore reads: its id and the job directory
/// (or savepoint directory) its handles' paths are relative to.
#[derive(Debug, Clone, Copy)]
pub struct RestoreOrigin<'a> {
    /// The checkpoint or savepoint.
    pub checkpoint: CheckpointId,
    /// Where it is stored, as the job names it (a URL or path).
    pub location: &'a str,
}

impl Subtask {
    /// Restores keyed state (this subtask's key groups only, from any
    /// number of full snapshot files) and operator state (this subtask's own
    /// file, or, after a rescale, its share of every old subtask's files by
    /// each state's redistribution mode) from `storage`.
    ///
    /// Only a subtask that has not begun an epoch nor registered operator
    /// state can restore; a failed restore leaves it unusable (drop it).
    pub async fn restore(
        &mut self,
        restore: &SubtaskRestore,
        storage: &SnapshotStorage,
        origin: RestoreOrigin<'_>,
    ) -> Result<()> {
        if restore.subtask != self.spec.subtask || restore.key_group_range != self.range {
            return Err(HostError::InvalidRequest(format!(
                "subtask {} (key groups {}) cannot restore the state planned for subtask {} \
                 (key groups {}); plan the restore with this operator's parallelism",
                self.spec.subtask, self.range, restore.subtask, restore.key_group_range
            )));
        }
        if self.last_begun.is_some() || self.operator.snapshot().is_ok_and(|s| !s.states.is_empty())
        {
            return Err(HostError::InvalidRequest(
                "restore a subtask before it registers operator state or begins an epoch".into(),
            ));
        }
        let (native, canonical): (Vec<_>, Vec<_>) = restore
            .keyed
            .iter()
            .cloned()
            .partition(|h| matches!(h, KeyedStateHandle::Incremental(_)));
        let native: Vec<IncrementalSnapshotHandle> = native
            .into_iter()
            .filter_map(|h| match h {
                KeyedStateHandle::Incremental(h) => Some(h),
                KeyedStateHandle::Full(_) => None,
            })
            .collect();
        if !native.is_empty() {
            self.restore_native(&native, storage, restore.rescaled, origin)
                .await?;
        }
        restore_keyed(&mut *self.keyed, &canonical, &*storage.store, &storage.root).await?;
        let mut old = Vec::with_capacity(restore.operator_state.len());
        for file in &restore.operator_state {
            old.push(read_operator_state(file, &*storage.store, &storage.root).await?);
        }
        let own = if restore.rescaled {
            let index = self.spec.subtask.0 as usize;
            redistribute(&old, self.spec.parallelism)?
                .into_iter()
                .nth(index)
                .unwrap_or_default()
        } else {
            match old.len() {
                0 => OperatorStateSnapshot::default(),
                1 => old.remove(0),
                n => {
                    return Err(HostError::InvalidRequest(format!(
                        "a restore without rescaling names {n} operator state files; expected \
                         at most this subtask's own"
                    )));
                }
            }
        };
        self.operator = OperatorStateStore::restore(&own)?;
        Ok(())
    }

    /// Restores the keyed state from RocksDB native checkpoints.
    async fn restore_native(
        &mut self,
        handles: &[IncrementalSnapshotHandle],
        storage: &SnapshotStorage,
        rescaled: bool,
        origin: RestoreOrigin<'_>,
    ) -> Result<()> {
        let name = format!("restore-{}-{}", self.spec.uid, self.spec.subtask);
        let downloads = OwnedDir::create(&self.work_dir, &name)?;
        let mut dirs = Vec::with_capacity(handles.len());
        let mut checksums = Vec::with_capacity(handles.len());
        for (i, handle) in handles.iter().enumerate() {
            let dir = downloads.path().join(i.to_string());
            checksums.push(download_incremental(handle, storage, &dir).await?);
            dirs.push(dir);
        }
        let registered = self.keyed.descriptors().to_vec();
        let (max_parallelism, range) = (self.spec.max_parallelism, self.range);
        // A database at `path` built from the downloaded checkpoints.
        let open = |path: PathBuf| {
            let options = RocksDbOptions::new(path, max_parallelism, range);
            RocksDbKeyedStateBackend::restore_from_native(&dirs, options).map_err(StateError::from)
        };
        match &mut self.keyed {
            KeyedBackend::RocksDb(_) => {
                let dir = rocksdb_dir(&self.spec, &self.work_dir)?;
                let restored = verified(open(dir.path().to_owned()), checksums).await?;
                // The old database closes before its directory goes.
                self.keyed = KeyedBackend::RocksDb(Box::new(restored));
                self.dir = Some(dir);
                if let [handle] = handles
                    && !rescaled
                    && handle.key_group_range == range
                {
                    self.lock_uploaded()
                        .record(origin.checkpoint, origin.location, handle.clone());
                }
            }
            KeyedBackend::Heap(heap) => {
                let mut restored =
                    verified(open(downloads.path().join("merged")), checksums).await?;
                copy_entries(restored.snapshot_sync()?.as_ref(), heap)?;
            }
        }
        for (index, descriptor) in registered.iter().enumerate() {
            let id = self.keyed.register_state(descriptor)?;
            if id.0 as usize != index {
                return Err(HostError::InvalidRequest(format!(
                    "state {:?} is number {} in the restored checkpoint but was registered as \
                     number {index} before the restore; restore before registering states",
                    descriptor.name, id.0
                )));
            }
        }
        Ok(())
    }
}

/// `opened` (a database built from downloaded files) once every file's
/// checksum matched: the files' checksums are read while the database opens,
/// nothing reads its entries before they all match, and a file that differs
/// is the error even where opening the database failed on it first.
async fn verified<T>(
    opened: std::result::Result<T, StateError>,
    checksums: Vec<PendingChecksums>,
) -> Result<T> {
    for pending in checksums {
        pending.verified().await?;
    }
    Ok(opened?)
}

/// Copies every entry of `frozen` into `into`, registering its states; key
/// groups at once on several threads where `into` hands them out (the heap).
fn copy_entries(frozen: &dyn FrozenKeyedState, into: &mut dyn KeyedStateBackend) -> Result<()> {
    let ids = frozen
        .descriptors()
        .iter()
        .map(|d| into.register_state(d))
        .collect::<weir_state::Result<Vec<StateId>>>()?;
    let copy = |key_group: KeyGroup,
                ingest: &mut dyn FnMut(StateEntry<'_>) -> weir_state::Result<()>| {
        frozen.for_each_entry(key_group, &mut |entry| {
            let state = *ids
                .get(entry.state.0 as usize)
                .ok_or(StateError::UnknownState(entry.state))?;
            ingest(StateEntry { state, ..entry })
        })
    };
    let key_groups: Vec<KeyGroup> = frozen.key_group_range().iter().collect();
    into.begin_bulk_load()?;
    let threads = LoadThreads::take();
    let by_key_group =
        load_key_groups::<StateError>(into, &key_groups, threads.count(), &|i, load| {
            copy(key_groups[i], &mut |entry| load.ingest(entry))
        })?;
    if !by_key_group {
        for &key_group in &key_groups {
            copy(key_group, &mut |entry| into.ingest(entry))?;
        }
    }
    into.finish_bulk_load()?;
    Ok(())
}
