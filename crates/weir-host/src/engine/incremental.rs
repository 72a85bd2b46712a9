//! Incremental checkpoints of a RocksDB subtask: the synchronous part asks
//! the backend for a native checkpoint (queued behind the final epochs, so it
//! returns at once); the upload waits for it and sends only the SST files
//! that the job's newest completed checkpoint does not already hold.
//!
//! Which files that checkpoint holds comes from [`UploadedCheckpoints`]: the
//! handles this subtask's own database uploaded, or the one it was restored
//! from without rescaling. Its lineage is the database's: a restore replaces
//! the subtask and starts a new one, so a file name (`000042.sst`) never
//! stands for another database's bytes. The base a barrier names is the
//! newest completed checkpoint of the run, which the checkpoint storage keeps
//! until a newer one completes and takes over the files it shares.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;
use weir_snapshot::{
    IncrementalSnapshotHandle, IncrementalTarget, KeyedStateHandle, LocalCheckpoint, LocalFile,
    SharedFileRegistry, SnapshotError, SnapshotMetrics, SnapshotStorage,
    spawn_incremental_snapshot,
};
use weir_state_rocksdb::{NativeCheckpoint, PendingNativeCheckpoint};
use weir_types::{CheckpointId, OperatorUid, SubtaskIndex};

use super::upload::cancelable;
use super::workdir::OwnedDir;
use crate::error::Result;

/// How a snapshot stores keyed state.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "format", rename_all = "snake_case")]
pub enum SnapshotFormat {
    /// One key-group-indexed file that any backend restores, at any
    /// parallelism: what savepoints use, and the heap always.
    #[default]
    Canonical,
    /// RocksDB's own files (the heap writes canonical files instead). SST
    /// files that checkpoint `base` of the same job directory uploaded from
    /// this database are referenced, not sent again.
    Incremental {
        /// The job's newest completed checkpoint, if any.
        base: Option<CheckpointId>,
    },
}

/// How many uploaded checkpoints a subtask remembers as possible bases.
const REMEMBERED: usize = 8;

/// The incremental checkpoints of one subtask's database, newest last.
#[derive(Debug, Default)]
pub(crate) struct UploadedCheckpoints {
    by_id: BTreeMap<CheckpointId, Uploaded>,
}

#[derive(Debug)]
struct Uploaded {
    /// The job directory the handle's paths are relative to.
    location: String,
    handle: IncrementalSnapshotHandle,
}

impl UploadedCheckpoints {
    /// Records that checkpoint `id`, stored under `location`, holds `handle`
    /// of this database.
    pub(crate) fn record(
        &mut self,
        id: CheckpointId,
        location: &str,
        handle: IncrementalSnapshotHandle,
    ) {
        self.by_id.insert(
            id,
            Uploaded {
                location: location.to_owned(),
                handle,
            },
        );
        while self.by_id.len() > REMEMBERED {
            self.by_id.pop_first();
        }
    }

    /// The files completed checkpoint `base` under `location` holds; older
    /// checkpoints are forgotten, as `base` completed after them.
    fn files_of(&mut self, base: CheckpointId, location: &str) -> SharedFileRegistry {
        self.by_id = self.by_id.split_off(&base);
        let mut registry = SharedFileRegistry::new();
        if let Some(uploaded) = self.by_id.get(&base)
            && uploaded.location == location
        {
            registry.register(
                base,
                &KeyedStateHandle::Incremental(uploaded.handle.clone()),
            );
        }
        registry
    }
}

/// The synchronous part of an incremental snapshot: a native checkpoint on
/// its way and what its upload may reuse.
pub(crate) struct NativeSnapshot {
    pending: PendingNativeCheckpoint,
    /// Holds the native checkpoint; removed once the upload is over.
    dir: OwnedDir,
    reuse: SharedFileRegistry,
    uploaded: Arc<Mutex<UploadedCheckpoints>>,
    location: String,
}

impl NativeSnapshot {
    /// Queues a native checkpoint of `backend` into a fresh directory under
    /// `work_dir` (the database's file system, so SSTs are hard-linked).
    pub(crate) fn start(
        backend: &mut weir_state_rocksdb::RocksDbKeyedStateBackend,
        work_dir: &std::path::Path,
        name: &str,
        base: Option<CheckpointId>,
        location: &str,
        uploaded: &Arc<Mutex<UploadedCheckpoints>>,
    ) -> Result<Self> {
        let dir = OwnedDir::create(work_dir, name)?;
        let pending = backend
            .start_native_checkpoint(&dir.path().join("db"))
            .map_err(weir_state::StateError::from)?;
        let reuse = match base {
            Some(base) => lock(uploaded).files_of(base, location),
            None => SharedFileRegistry::new(),
        };
        Ok(Self {
            pending,
            dir,
            reuse,
            uploaded: Arc::clone(uploaded),
            location: location.to_owned(),
        })
    }

    /// Waits for the native checkpoint and uploads what `base` lacks; the
    /// handle is remembered as a possible base of later checkpoints.
    pub(crate) async fn upload(
        self,
        runtime: Handle,
        storage: SnapshotStorage,
        target: (OperatorUid, SubtaskIndex, CheckpointId),
        cancel: CancellationToken,
    ) -> Result<(KeyedStateHandle, SnapshotMetrics)> {
        let Self {
            pending,
            dir,
            reuse,
            uploaded,
            location,
        } = self;
        let native = tokio::task::spawn_blocking(move || pending.wait())
            .await
            .map_err(|e| SnapshotError::TaskFailed {
                reason: e.to_string(),
            })?
            .map_err(weir_state::StateError::from)?;
        if cancel.is_cancelled() {
            return Err(SnapshotError::Cancelled.into());
        }
        let (uid, subtask, checkpoint) = target;
        let future = spawn_incremental_snapshot(
            &runtime,
            local_checkpoint(native),
            &reuse,
            &storage,
            IncrementalTarget {
                uid,
                subtask,
                checkpoint,
                part_size: weir_snapshot::FullSnapshotOptions::default().part_size,
            },
        );
        let outcome = cancelable(future, &cancel).await?;
        // Before the ack: a barrier naming this checkpoint as its base can
        // only come after the coordinator counted the ack.
        lock(&uploaded).record(checkpoint, &location, outcome.handle.clone());
        drop(dir);
        Ok((
            KeyedStateHandle::Incremental(outcome.handle),
            outcome.metrics,
        ))
    }
}

pub(super) fn lock(
    uploaded: &Mutex<UploadedCheckpoints>,
) -> std::sync::MutexGuard<'_, UploadedCheckpoints> {
    // The map stays consistent whatever panicked while holding it.
    uploaded.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the upload needs of a native checkpoint.
fn local_checkpoint(native: NativeCheckpoint) -> LocalCheckpoint {
    LocalCheckpoint {
        key_group_range: native.key_group_range,
        max_parallelism: native.max_parallelism,
        descriptors: native.descriptors,
        files: native
            .files
            .into_iter()
            .map(|f| LocalFile {
                local_name: f.local_name,
                path: f.path,
                size: f.size,
                shared: f.shared,
            })
            .collect(),
    }
}
