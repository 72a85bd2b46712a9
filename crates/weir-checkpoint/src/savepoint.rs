//! Savepoints: user-owned, self-contained copies of a completed
//! checkpoint that can be moved or copied as a directory, and their disposal.
//!
//! A savepoint directory `savepoint-<job>-<n>/` holds `_metadata` and every
//! state file the state needs, shared RocksDB files included, at the same
//! relative paths as in the checkpoint; nothing points outside it. This
//! module copies and deletes; it does not decide when savepoints are taken.

use object_store::{ObjectStoreExt, PutPayload};
use weir_snapshot::StateFile;

use crate::error::{CheckpointError, Result};
use crate::layout::{self, METADATA_FILE};
use crate::location::StorageLocation;
use crate::metadata::{CheckpointKind, CheckpointMetadata, encode_metadata};
use crate::resolved::ResolvedSnapshot;
use crate::storage::{delete_paths, delete_tree, list_relative, put_new};

/// Copies completed checkpoint (or savepoint) `source` into a new savepoint
/// directory under `savepoint_dir` and returns it opened.
///
/// Every file is read back whole (one file in memory at a time) and verified
/// against its handle before it is written; `_metadata` is written last and create-only, so an interrupted
/// copy leaves a directory that does not open as a savepoint, and an
/// existing savepoint is never overwritten.
pub async fn create_savepoint(
    source: &ResolvedSnapshot,
    savepoint_dir: &StorageLocation,
) -> Result<ResolvedSnapshot> {
    let mut metadata = source.metadata().clone();
    let dir = savepoint_dir.child(&layout::savepoint_dir(
        &metadata.job_id,
        metadata.checkpoint_id,
    ))?;
    for file in metadata.files() {
        if metadata.inline.contains_key(&file.path) {
            continue;
        }
        let bytes = source.read_file(file).await?;
        let path = layout::join(dir.root(), &file.path)?;
        dir.store()
            .put(&path, PutPayload::from_bytes(bytes))
            .await
            .map_err(|source| CheckpointError::Store {
                operation: "put",
                path: file.path.clone(),
                source,
            })?;
    }
    metadata.kind = CheckpointKind::Savepoint;
    let path = layout::join(dir.root(), METADATA_FILE)?;
    put_new(
        dir.store().as_ref(),
        &path,
        encode_metadata(&metadata)?,
        &format!("{}/{METADATA_FILE}", dir.url()),
    )
    .await?;
    ResolvedSnapshot::open(&dir).await
}

/// What disposing a savepoint did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisposedSavepoint {
    /// The savepoint's metadata, as it was.
    pub metadata: CheckpointMetadata,
    /// The state files deleted besides `_metadata` (files stored inside
    /// `_metadata` are not listed).
    pub removed: Vec<StateFile>,
    /// What is still in the directory because the savepoint does not name
    /// it, relative to the directory.
    pub left: Vec<String>,
}

/// Deletes the savepoint whose directory (or `_metadata`) `location` points
/// at: `_metadata` first, so a half-disposed savepoint no longer opens, then
/// the state files it names, and nothing else.
///
/// Refuses anything that is not a readable savepoint (so a mistyped path
/// cannot delete a checkpoint), and deletes nothing when one of its files
/// cannot be reached safely (a symbolic link on a local store).
pub async fn dispose_savepoint(location: &StorageLocation) -> Result<DisposedSavepoint> {
    let savepoint = ResolvedSnapshot::open(location).await?;
    let metadata = savepoint.metadata();
    if metadata.kind != CheckpointKind::Savepoint {
        return Err(CheckpointError::WrongKind {
            checkpoint: metadata.checkpoint_id,
            found: metadata.kind,
            expected: CheckpointKind::Savepoint,
        });
    }
    let dir = savepoint.base();
    let removed: Vec<StateFile> = metadata
        .files()
        .into_iter()
        .filter(|f| !metadata.inline.contains_key(&f.path))
        .cloned()
        .collect();
    for file in &removed {
        reachable(dir, &file.path).await?;
    }
    delete_paths(dir, [METADATA_FILE]).await?;
    delete_paths(dir, removed.iter().map(|f| f.path.as_str())).await?;
    let left = list_relative(dir, None).await?;
    Ok(DisposedSavepoint {
        metadata: savepoint.into_metadata(),
        removed,
        left,
    })
}

/// Fails when the store refuses to reach `relative` under `dir`; a missing
/// file is reachable (there is nothing to delete).
async fn reachable(dir: &StorageLocation, relative: &str) -> Result<()> {
    let path = layout::join(dir.root(), relative)?;
    match dir.store().head(&path).await {
        Ok(_) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(source) => Err(CheckpointError::Store {
            operation: "head",
            path: relative.to_owned(),
            source,
        }),
    }
}

/// Completes a savepoint whose subtasks uploaded their state into its own
/// directory `dir` (paths in `metadata` relative to it): publishes its
/// `_metadata` create-only, so an existing savepoint is never overwritten.
pub async fn publish_savepoint(dir: &StorageLocation, metadata: &CheckpointMetadata) -> Result<()> {
    if metadata.kind != CheckpointKind::Savepoint {
        return Err(CheckpointError::WrongKind {
            checkpoint: metadata.checkpoint_id,
            found: metadata.kind,
            expected: CheckpointKind::Savepoint,
        });
    }
    let path = layout::join(dir.root(), METADATA_FILE)?;
    put_new(
        dir.store().as_ref(),
        &path,
        encode_metadata(metadata)?,
        &format!("{}/{METADATA_FILE}", dir.url()),
    )
    .await
}

/// Deletes what the subtasks of a savepoint that never completed uploaded
/// into `dir`. Refuses a directory holding a `_metadata`, so a completed
/// savepoint is only ever removed by [`dispose_savepoint`].
pub async fn discard_incomplete_savepoint(dir: &StorageLocation) -> Result<()> {
    match ResolvedSnapshot::open(dir).await {
        Ok(found) => Err(CheckpointError::AlreadyExists {
            path: format!("{}/{METADATA_FILE}", found.base().url()),
        }),
        Err(CheckpointError::MissingMetadata { .. }) => delete_tree(dir).await,
        Err(err) => Err(err),
    }
}
