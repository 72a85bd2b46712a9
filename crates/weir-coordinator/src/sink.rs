//! Where completed checkpoints go: the one I/O boundary of the driver, and
//! its implementation over the job's [`CheckpointStorage`].

use std::future::Future;

use weir_checkpoint::{
    CheckpointError, CheckpointKind, CheckpointMetadata, CheckpointStorage, StorageLocation,
    SubsumeDecision, create_savepoint,
};
use weir_types::CheckpointId;

/// Durable checkpoint storage as the driver needs it.
///
/// Contract: [`write_metadata`](Self::write_metadata) publishes `_metadata`
/// atomically; when it fails, no complete-looking checkpoint is left behind
/// and the previous one is untouched. Deletions are idempotent: deleting what
/// is already gone succeeds.
pub trait MetadataSink: Send + Sync + 'static {
    /// The storage's error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Publishes the `_metadata` of a checkpoint or savepoint whose subtasks
    /// all acked.
    fn write_metadata(
        &self,
        metadata: &CheckpointMetadata,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Deletes the checkpoints and shared files a retention decision names.
    fn subsume(
        &self,
        decision: &SubsumeDecision,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Deletes whatever an aborted checkpoint or savepoint uploaded.
    fn discard(&self, id: CheckpointId) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

/// Why [`StorageSink`] could not store something.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The storage failed.
    #[error(transparent)]
    Storage(#[from] CheckpointError),
    /// A savepoint was taken but no directory for savepoints is configured.
    #[error("savepoint {id} has no target directory; configure a savepoint directory for the job")]
    NoSavepointDir {
        /// The savepoint.
        id: CheckpointId,
    },
}

/// [`MetadataSink`] over the job's checkpoint storage.
///
/// Subtasks write a savepoint's state like a checkpoint's, under `chk-<n>/`;
/// on completion it is published there as a checkpoint, copied into a
/// self-contained `savepoint-<job>-<n>/` under the savepoint directory, and
/// the checkpoint copy is deleted, so savepoints never enter retention.
#[derive(Debug, Clone)]
pub struct StorageSink {
    storage: CheckpointStorage,
    savepoint_dir: Option<StorageLocation>,
}

impl StorageSink {
    /// A sink writing checkpoints to `storage` and savepoints under
    /// `savepoint_dir`, if given.
    pub fn new(storage: CheckpointStorage, savepoint_dir: Option<StorageLocation>) -> Self {
        Self {
            storage,
            savepoint_dir,
        }
    }
}

impl MetadataSink for StorageSink {
    type Error = SinkError;

    async fn write_metadata(&self, metadata: &CheckpointMetadata) -> Result<(), SinkError> {
        let id = metadata.checkpoint_id;
        match metadata.kind {
            CheckpointKind::Checkpoint => {
                self.storage.complete(metadata).await?;
            }
            CheckpointKind::Savepoint => {
                let dir = self
                    .savepoint_dir
                    .as_ref()
                    .ok_or(SinkError::NoSavepointDir { id })?;
                let mut as_checkpoint = metadata.clone();
                as_checkpoint.kind = CheckpointKind::Checkpoint;
                self.storage.complete(&as_checkpoint).await?;
                let copied = match self.storage.open(id).await {
                    Ok(source) => create_savepoint(&source, dir).await.map(drop),
                    Err(err) => Err(err),
                };
                // The checkpoint copy is only a staging area: remove it
                // whether or not the copy worked.
                self.storage.discard(id).await?;
                copied?;
            }
        }
        Ok(())
    }

    async fn subsume(&self, decision: &SubsumeDecision) -> Result<(), SinkError> {
        Ok(self.storage.apply(decision).await?)
    }

    async fn discard(&self, id: CheckpointId) -> Result<(), SinkError> {
        Ok(self.storage.discard(id).await?)
    }
}
