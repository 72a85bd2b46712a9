//! Filling a fresh subtask from stored state (restore and rescale).
//!
//! Canonical snapshot files are read key group by key group into any
//! backend. RocksDB's native (incremental) checkpoints are downloaded and
//! opened: a RocksDB subtask becomes the database built from them (SST files
//! hard-linked, key groups outside its range dropped, see
//! `RocksDbKeyedStateBackend::restore_from_native`); a heap subtask copies
//! its key groups out of that database, so switching backends needs no
//! savepoint.

use std::path::{Path, PathBuf};

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
use weir_types::{CheckpointId, KeyGroup, StateDescriptor};

use super::keyed::KeyedBackend;
use super::workdir::OwnedDir;
use super::{Subtask, rocksdb_dir, subtask_range};
use crate::error::{HostError, Result};
use crate::session::{BackendSpec, SubtaskSession, SubtaskSpec};

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
    /// Builds subtask `spec` from stored state: keyed state (its key groups
    /// only, from any number of snapshot files or RocksDB native
    /// checkpoints) and operator state (its own file, or, after a rescale,
    /// its share of every old subtask's files by each state's redistribution
    /// mode), read from `storage`. `states` are registered first, in order,
    /// so they keep their ids whichever files the subtask reads.
    ///
    /// A RocksDB subtask restoring native checkpoints becomes the database
    /// built from them; no empty database is created first.
    pub async fn restore(
        spec: SubtaskSpec,
        work_dir: &Path,
        restore: &SubtaskRestore,
        states: &[StateDescriptor],
        (storage, origin): (&SnapshotStorage, RestoreOrigin<'_>),
    ) -> Result<Self> {
        let range = subtask_range(&spec)?;
        if restore.subtask != spec.subtask || restore.key_group_range != range {
            return Err(HostError::InvalidRequest(format!(
                "subtask {} (key groups {range}) cannot restore the state planned for subtask {} \
                 (key groups {}); plan the restore with this operator's parallelism",
                spec.subtask, restore.subtask, restore.key_group_range
            )));
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
        let mut subtask = if native.is_empty() {
            Self::open_with_states(spec, work_dir, states)?
        } else {
            let native = NativeRestore {
                handles: &native,
                storage,
                rescaled: restore.rescaled,
                origin,
            };
            Self::from_native(spec, work_dir, native, states).await?
        };
        restore_keyed(
            &mut *subtask.keyed,
            &canonical,
            &*storage.store,
            &storage.root,
        )
        .await?;
        let mut old = Vec::with_capacity(restore.operator_state.len());
        for file in &restore.operator_state {
            old.push(read_operator_state(file, &*storage.store, &storage.root).await?);
        }
        let own = if restore.rescaled {
            let index = subtask.spec.subtask.0 as usize;
            redistribute(&old, subtask.spec.parallelism)?
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
        subtask.operator = OperatorStateStore::restore(&own)?;
        Ok(subtask)
    }

    /// A subtask whose keyed state comes from RocksDB native checkpoints,
    /// with `states` registered.
    async fn from_native(
        spec: SubtaskSpec,
        work_dir: &Path,
        native: NativeRestore<'_>,
        states: &[StateDescriptor],
    ) -> Result<Self> {
        let range = subtask_range(&spec)?;
        let name = format!("restore-{}-{}", spec.uid, spec.subtask);
        let downloads = OwnedDir::create(work_dir, &name)?;
        let mut dirs = Vec::with_capacity(native.handles.len());
        let mut checksums = Vec::with_capacity(native.handles.len());
        for (i, handle) in native.handles.iter().enumerate() {
            let dir = downloads.path().join(i.to_string());
            checksums.push(download_incremental(handle, native.storage, &dir).await?);
            dirs.push(dir);
        }
        // A database at `path` built from the downloaded checkpoints.
        let max_parallelism = spec.max_parallelism;
        let open = |path: PathBuf| {
            let options = RocksDbOptions::new(path, max_parallelism, range);
            RocksDbKeyedStateBackend::restore_from_native(&dirs, options).map_err(StateError::from)
        };
        match spec.backend {
            BackendSpec::RocksDb => {
                let dir = rocksdb_dir(&spec, work_dir)?;
                let restored = verified(open(dir.path().to_owned()), checksums).await?;
                let keyed = KeyedBackend::RocksDb(Box::new(restored));
                let mut subtask = Self::with_backend(spec, keyed, Some(dir), work_dir);
                if let [handle] = native.handles
                    && !native.rescaled
                    && handle.key_group_range == range
                {
                    subtask.lock_uploaded().record(
                        native.origin.checkpoint,
                        native.origin.location,
                        handle.clone(),
                    );
                }
                // The restored database numbered its states already.
                for (index, descriptor) in states.iter().enumerate() {
                    let id = subtask.register_state(descriptor)?;
                    if id.0 as usize != index {
                        return Err(HostError::InvalidRequest(format!(
                            "state {:?} is number {} in the restored checkpoint but number \
                             {index} in the states to register first; register states in the \
                             checkpoint's order",
                            descriptor.name, id.0
                        )));
                    }
                }
                Ok(subtask)
            }
            BackendSpec::Heap => {
                let mut subtask = Self::open_with_states(spec, work_dir, states)?;
                let mut restored =
                    verified(open(downloads.path().join("merged")), checksums).await?;
                copy_entries(restored.snapshot_sync()?.as_ref(), &mut *subtask.keyed)?;
                Ok(subtask)
            }
        }
    }

    /// Empty state with `states` registered, in order.
    fn open_with_states(
        spec: SubtaskSpec,
        work_dir: &Path,
        states: &[StateDescriptor],
    ) -> Result<Self> {
        let mut subtask = Self::open(spec, work_dir)?;
        for descriptor in states {
            subtask.register_state(descriptor)?;
        }
        Ok(subtask)
    }
}

/// Where a restore's RocksDB native checkpoints come from.
#[derive(Clone, Copy)]
struct NativeRestore<'a> {
    handles: &'a [IncrementalSnapshotHandle],
    storage: &'a SnapshotStorage,
    rescaled: bool,
    origin: RestoreOrigin<'a>,
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
            let Some(&state) = ids.get(entry.state.0 as usize) else {
                return Err(StateError::UnknownState(entry.state));
            };
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
