//! The driver's storage work: where each checkpoint and savepoint is
//! uploaded, publishing `_metadata`, the lineage record, and deleting what
//! is aborted or subsumed.
//!
//! Savepoints go to a fresh directory each, `savepoint-<job>-<id>-<random>`,
//! checked empty before the barrier goes out: subtasks upload there and the
//! `_metadata` is written there create-only, so a savepoint never touches
//! another one's files. Checkpoints go to the job directory.

use std::collections::BTreeMap;
use std::sync::Mutex;

use futures::TryStreamExt;
use object_store::ObjectStore;
use weir_checkpoint::{
    CheckpointError, CheckpointKind, CheckpointMetadata, CheckpointStorage, JobTimeline,
    ResolvedSnapshot, RestoreSource, StorageLocation, StorageOptions, discard_incomplete_savepoint,
    layout, publish_savepoint,
};
use weir_types::{CheckpointId, JobId};

use crate::error::{DriverError, Result};

/// Where a savepoint in flight goes.
#[derive(Debug, Clone)]
struct SavepointTarget {
    location: StorageLocation,
    stop: bool,
}

/// The timeline of the current generation; lock it before the coordinator.
#[derive(Debug)]
pub(crate) struct TimelineState {
    pub(crate) generation: u64,
    pub(crate) timeline: JobTimeline,
}

/// The job's checkpoint storage as the driver uses it.
#[derive(Debug)]
pub(crate) struct JobStore {
    pub(crate) storage: CheckpointStorage,
    options: StorageOptions,
    savepoint_dir: Option<String>,
    savepoints: Mutex<BTreeMap<CheckpointId, SavepointTarget>>,
}

impl JobStore {
    pub(crate) fn new(
        storage: CheckpointStorage,
        options: StorageOptions,
        savepoint_dir: Option<String>,
    ) -> Self {
        Self {
            storage,
            options,
            savepoint_dir,
            savepoints: Mutex::new(BTreeMap::new()),
        }
    }

    fn job(&self) -> &JobId {
        self.storage.job_id()
    }

    /// Opens the checkpoint or savepoint at `path` that a run restores from.
    pub(crate) async fn open_restored(&self, path: &str) -> Result<ResolvedSnapshot> {
        let location = StorageLocation::parse(path, &self.options)?;
        Ok(ResolvedSnapshot::open(&location).await?)
    }

    /// How `snapshot`, restored from `path`, relates to the job directory.
    pub(crate) async fn restore_source(
        &self,
        restored: Option<(&str, &ResolvedSnapshot)>,
    ) -> Result<RestoreSource> {
        Ok(match restored {
            Some((path, snapshot)) => {
                JobTimeline::restore_source(&self.storage, path, snapshot).await?
            }
            None => RestoreSource::Empty,
        })
    }

    /// A directory for savepoint `id` under `directory` (or the configured
    /// one) that holds nothing yet.
    pub(crate) async fn fresh_savepoint(
        &self,
        directory: Option<&str>,
        id: CheckpointId,
    ) -> Result<StorageLocation> {
        let dir = directory
            .or(self.savepoint_dir.as_deref())
            .ok_or(DriverError::NoSavepointDir { id })?;
        let parent = StorageLocation::parse(dir, &self.options)?;
        // A random suffix makes a taken name all but impossible; checking
        // makes it impossible to write into one that exists.
        for _ in 0..3 {
            let suffix = format!("{:012x}", rand::random::<u64>() >> 16);
            let location = parent.child(&layout::fresh_savepoint_dir(self.job(), id, &suffix))?;
            if is_empty(&location).await? {
                return Ok(location);
            }
        }
        Err(CheckpointError::AlreadyExists {
            path: format!(
                "{}/{}",
                parent.url(),
                layout::fresh_savepoint_dir(self.job(), id, "*")
            ),
        }
        .into())
    }

    /// Remembers where savepoint `id` goes, until it completes or aborts.
    pub(crate) fn add_savepoint(&self, id: CheckpointId, location: StorageLocation, stop: bool) {
        self.savepoints_lock()
            .insert(id, SavepointTarget { location, stop });
    }

    /// Where subtasks upload checkpoint or savepoint `id`.
    pub(crate) fn upload_url(&self, id: CheckpointId, kind: CheckpointKind) -> String {
        match (kind, self.savepoint(id)) {
            (CheckpointKind::Savepoint, Some(target)) => target.location.url().to_owned(),
            _ => self.storage.job_dir().url().to_owned(),
        }
    }

    /// The directory of completed checkpoint or savepoint `id`.
    pub(crate) fn completed_path(&self, id: CheckpointId, kind: CheckpointKind) -> String {
        match (kind, self.savepoint(id)) {
            (CheckpointKind::Savepoint, Some(target)) => target.location.url().to_owned(),
            _ => format!(
                "{}/{}",
                self.storage.job_dir().url().trim_end_matches('/'),
                layout::checkpoint_dir(id)
            ),
        }
    }

    /// Publishes the `_metadata` that completes `metadata`'s checkpoint or
    /// savepoint, create-only.
    pub(crate) async fn publish(&self, metadata: &CheckpointMetadata) -> Result<()> {
        let id = metadata.checkpoint_id;
        match metadata.kind {
            CheckpointKind::Checkpoint => self.storage.complete(metadata).await.map(drop)?,
            CheckpointKind::Savepoint => {
                let target = self
                    .savepoint(id)
                    .ok_or(DriverError::NoSavepointDir { id })?;
                publish_savepoint(&target.location, metadata).await?;
            }
        }
        Ok(())
    }

    /// Records a published checkpoint or savepoint on the lineage; returns
    /// the abandoned checkpoints to delete now.
    pub(crate) async fn record(
        &self,
        timeline: &mut JobTimeline,
        metadata: &CheckpointMetadata,
    ) -> Result<Vec<CheckpointId>> {
        let id = metadata.checkpoint_id;
        match (metadata.kind, self.savepoint(id)) {
            (CheckpointKind::Checkpoint, _) => Ok(timeline.on_completed(id).await?),
            (CheckpointKind::Savepoint, Some(target)) if target.stop => {
                timeline
                    .on_stopped_with_savepoint(target.location.url())
                    .await?;
                Ok(Vec::new())
            }
            (CheckpointKind::Savepoint, _) => Ok(Vec::new()),
        }
    }

    /// Checkpoint or savepoint `id` ended; forgets its target.
    pub(crate) fn forget(&self, id: CheckpointId) -> Option<StorageLocation> {
        self.savepoints_lock().remove(&id).map(|t| t.location)
    }

    /// Forgets every savepoint in flight, returning their directories.
    pub(crate) fn forget_all(&self) -> Vec<StorageLocation> {
        std::mem::take(&mut *self.savepoints_lock())
            .into_values()
            .map(|t| t.location)
            .collect()
    }

    /// Deletes what aborted checkpoint `id` uploaded, or the directory of
    /// an aborted savepoint.
    pub(crate) async fn discard(
        &self,
        id: CheckpointId,
        savepoint: Option<StorageLocation>,
    ) -> Result<()> {
        match savepoint {
            Some(location) => self.discard_savepoint(&location).await,
            None => Ok(self.storage.discard(id).await?),
        }
    }

    /// Deletes what the subtasks of a savepoint that never completed
    /// uploaded into its directory.
    pub(crate) async fn discard_savepoint(&self, location: &StorageLocation) -> Result<()> {
        Ok(discard_incomplete_savepoint(location).await?)
    }

    fn savepoint(&self, id: CheckpointId) -> Option<SavepointTarget> {
        self.savepoints_lock().get(&id).cloned()
    }

    fn savepoints_lock(
        &self,
    ) -> std::sync::MutexGuard<'_, BTreeMap<CheckpointId, SavepointTarget>> {
        // The map stays consistent whatever panicked while holding it.
        self.savepoints
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

async fn is_empty(location: &StorageLocation) -> Result<bool> {
    let mut listed = location.store().list(Some(location.root()));
    match listed.try_next().await {
        Ok(first) => Ok(first.is_none()),
        Err(object_store::Error::NotFound { .. }) => Ok(true),
        Err(source) => Err(CheckpointError::Store {
            operation: "list",
            path: location.url().to_owned(),
            source,
        }
        .into()),
    }
}
