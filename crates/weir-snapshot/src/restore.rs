//! Restoring keyed state from full snapshot files, with rescaling.
//!
//! Each handle's key groups are intersected with the backend's range and
//! only those blocks are read, so one backend can be filled from several
//! snapshots (scale in) and one snapshot can feed several backends (scale
//! out); any backend restores any full snapshot. Decoding blocks the
//! calling task: restores happen before the subtask processes records.
//! Where the backend hands out whole key groups (the heap), the blocks of
//! each ranged read are decoded into them on several threads at once
//! ([`load_key_groups`]); otherwise entries go in one by one.
//! Incremental handles restore natively (see `incremental.rs`).

use std::sync::atomic::{AtomicU64, Ordering};

use object_store::ObjectStore;
use object_store::path::Path;
use weir_state::{KeyedStateBackend, LoadThreads, StateEntry, StateId, load_key_groups};
use weir_types::KeyGroup;

use crate::error::{Result, SnapshotError};
use crate::file::{SnapshotFile, StoredRun};
use crate::format::BlockInfo;
use crate::handle::{FullSnapshotHandle, KeyedStateHandle};

/// What a restore read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RestoreStats {
    /// Handles whose key groups overlapped the backend's.
    pub files_read: u32,
    /// Key groups with entries that were ingested.
    pub key_groups: u32,
    /// Entries ingested.
    pub entries: u64,
}

/// Restores the key groups of `backend`'s range from full snapshot `handles`
/// (paths relative to `root`), registering the snapshots' states by name.
///
/// Fails on a max parallelism change, on a state registered with another
/// descriptor, on incremental handles and on unreadable files; entries
/// ingested before an error stay in the backend, which the caller discards.
pub async fn restore_keyed(
    backend: &mut dyn KeyedStateBackend,
    handles: &[KeyedStateHandle],
    store: &dyn ObjectStore,
    root: &Path,
) -> Result<RestoreStats> {
    let mut stats = RestoreStats::default();
    for handle in handles {
        let KeyedStateHandle::Full(full) = handle else {
            return Err(SnapshotError::UnsupportedHandle {
                operation: "restore from snapshot files",
                kind: "incremental",
            });
        };
        restore_full(backend, full, store, root, &mut stats).await?;
    }
    Ok(stats)
}

async fn restore_full(
    backend: &mut dyn KeyedStateBackend,
    handle: &FullSnapshotHandle,
    store: &dyn ObjectStore,
    root: &Path,
    stats: &mut RestoreStats,
) -> Result<()> {
    let wanted = handle.key_group_range.intersect(backend.key_group_range());
    if wanted.is_empty() {
        return Ok(());
    }
    let path = handle.file.path.as_str();
    let file = SnapshotFile::open(store, root, path, Some(handle.file.size)).await?;
    let header = file.layout().header();
    if header.max_parallelism != backend.max_parallelism() {
        return Err(SnapshotError::MaxParallelismMismatch {
            path: path.to_owned(),
            snapshot: header.max_parallelism,
            backend: backend.max_parallelism(),
        });
    }
    if header.key_group_range != handle.key_group_range {
        return Err(SnapshotError::HandleMismatch {
            path: path.to_owned(),
            reason: "the file covers other key groups than the handle says",
        });
    }
    let ids = register_states(backend, &file)?;
    stats.files_read += 1;
    backend.begin_bulk_load()?;
    // Until the backend shows that it hands out no key groups (RocksDB), so
    // that it does not hold threads other restores could use.
    let mut detaches = true;
    file.read_runs(store, wanted, &mut |blocks, run| {
        let key_groups: Vec<KeyGroup> = blocks.iter().map(|b| b.key_group).collect();
        let loaded = AtomicU64::new(0);
        // Held for this ranged read: what other restores free meanwhile is
        // used by the next one.
        let threads = detaches.then(LoadThreads::take);
        let count = threads.as_ref().map_or(1, LoadThreads::count);
        let by_key_group =
            load_key_groups::<SnapshotError>(backend, &key_groups, count, &|i, load| {
                let entries = load_block(&file, &blocks[i], run, &ids, &mut |e| load.ingest(e))?;
                loaded.fetch_add(entries, Ordering::Relaxed);
                Ok(())
            })?;
        if count > 1 && !by_key_group {
            detaches = false;
        }
        stats.entries += loaded.into_inner();
        if !by_key_group {
            for info in blocks {
                stats.entries += load_block(&file, info, run, &ids, &mut |e| backend.ingest(e))?;
            }
        }
        Ok(())
    })
    .await?;
    backend.finish_bulk_load()?;
    stats.key_groups +=
        u32::try_from(file.layout().blocks_in(wanted).len()).expect("at most 32768 key groups");
    Ok(())
}

/// Decodes one block into `ingest`, with the backend's state ids in place of
/// the file's state indexes; returns the entries it held.
fn load_block(
    file: &SnapshotFile,
    info: &BlockInfo,
    run: &StoredRun,
    ids: &[StateId],
    ingest: &mut dyn FnMut(StateEntry<'_>) -> weir_state::Result<()>,
) -> Result<u64> {
    let mut entries = 0;
    file.read_block(info, run, &mut |entry| {
        // Indexes were checked against the header while decoding.
        let state = ids[entry.state.0 as usize];
        ingest(StateEntry { state, ..entry })?;
        entries += 1;
        Ok(())
    })?;
    Ok(entries)
}

/// Registers the file's states in `backend`, returning the backend's id for
/// each of the file's state indexes.
fn register_states(
    backend: &mut dyn KeyedStateBackend,
    file: &SnapshotFile,
) -> Result<Vec<StateId>> {
    let mut ids = Vec::new();
    for descriptor in &file.layout().header().descriptors {
        let existing = backend
            .descriptors()
            .iter()
            .find(|d| d.name == descriptor.name);
        if let Some(registered) = existing.filter(|d| *d != descriptor) {
            return Err(SnapshotError::IncompatibleState {
                path: file.path().to_owned(),
                name: descriptor.name.clone(),
                snapshot: Box::new(descriptor.clone()),
                registered: Box::new(registered.clone()),
            });
        }
        ids.push(backend.register_state(descriptor)?);
    }
    Ok(ids)
}
