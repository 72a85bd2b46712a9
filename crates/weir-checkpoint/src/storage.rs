//! Checkpoint storage of one job: where subtasks write state files, the
//! atomic write of `_metadata` that completes a checkpoint, finding the
//! newest completed checkpoint after a crash, and deleting checkpoints.
//!
//! A checkpoint is complete exactly when `chk-<n>/_metadata` exists and
//! decodes: the file is published in one step (staged file + link on the
//! local file system, a create-only put on object stores), so a crash while
//! writing state files or the metadata leaves no complete-looking directory.
//! Which checkpoints to delete is decided by `retention` and `timeline`;
//! this module only performs deletions.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use weir_snapshot::{KeyedStateHandle, SnapshotStorage, StateFile};
use weir_types::{CheckpointId, JobId};

use crate::error::{CheckpointError, Result};
use crate::layout;
use crate::location::StorageLocation;
use crate::metadata::{CheckpointKind, CheckpointMetadata, InlineFile, encode_metadata};
use crate::resolved::{ResolvedSnapshot, read_state_file};
use crate::retention::SubsumeDecision;

/// Where state files go.
#[derive(Debug, Clone)]
enum Placement {
    /// In the job directory, next to `_metadata`.
    Files,
    /// Staged in process memory, then moved into `_metadata` ("jobmanager"
    /// storage), each file at most `max_file_bytes`.
    Inline {
        staging: StorageLocation,
        max_file_bytes: u64,
    },
}

/// The checkpoints of one job: `<checkpoint dir>/<job id>/`.
#[derive(Debug, Clone)]
pub struct CheckpointStorage {
    job: JobId,
    job_dir: StorageLocation,
    placement: Placement,
}

impl CheckpointStorage {
    /// File-system-style storage: state files and `_metadata` under
    /// `checkpoint_dir/<job>/`.
    pub fn filesystem(checkpoint_dir: &StorageLocation, job: JobId) -> Result<Self> {
        Ok(Self {
            job_dir: checkpoint_dir.child(job.as_str())?,
            job,
            placement: Placement::Files,
        })
    }

    /// "jobmanager" storage for small state: state files are staged
    /// in memory and stored inside `_metadata` when the checkpoint
    /// completes; a file larger than `max_file_bytes` fails that checkpoint
    /// with [`CheckpointError::InlineStateTooLarge`], and incremental state
    /// with [`CheckpointError::IncrementalInline`]. `_metadata` itself
    /// still goes to `checkpoint_dir/<job>/` so recovery can find it.
    ///
    /// The staging store lives in this process, so the subtasks must write
    /// through [`CheckpointStorage::state_storage`] of this same value.
    pub fn jobmanager(
        checkpoint_dir: &StorageLocation,
        job: JobId,
        max_file_bytes: u64,
    ) -> Result<Self> {
        let staging = StorageLocation::new(Arc::new(InMemory::new()), Path::default(), "memory://");
        Ok(Self {
            job_dir: checkpoint_dir.child(job.as_str())?,
            job,
            placement: Placement::Inline {
                staging,
                max_file_bytes,
            },
        })
    }

    /// The job.
    pub fn job_id(&self) -> &JobId {
        &self.job
    }

    /// The job directory: handle paths of checkpoints are relative to it.
    pub fn job_dir(&self) -> &StorageLocation {
        &self.job_dir
    }

    /// Where snapshot tasks write state files, at paths relative to the job
    /// directory (named by [`layout`]).
    pub fn state_storage(&self) -> SnapshotStorage {
        match &self.placement {
            Placement::Files => self.job_dir.snapshot_storage(),
            Placement::Inline { staging, .. } => staging.snapshot_storage(),
        }
    }

    /// Completes checkpoint `metadata.checkpoint_id` by publishing its
    /// `_metadata` in one atomic, create-only step, and returns the metadata
    /// as written (with inline files for "jobmanager" storage).
    ///
    /// Fails without publishing anything if the metadata belongs to another
    /// job, is a savepoint, is inconsistent, or the checkpoint exists already.
    pub async fn complete(&self, metadata: &CheckpointMetadata) -> Result<CheckpointMetadata> {
        if metadata.job_id != self.job {
            return Err(CheckpointError::WrongJob {
                expected: self.job.clone(),
                found: metadata.job_id.clone(),
            });
        }
        if metadata.kind != CheckpointKind::Checkpoint {
            return Err(CheckpointError::WrongKind {
                checkpoint: metadata.checkpoint_id,
                found: metadata.kind,
                expected: CheckpointKind::Checkpoint,
            });
        }
        let mut metadata = metadata.clone();
        if let Placement::Inline {
            staging,
            max_file_bytes,
        } = &self.placement
        {
            inline_files(&mut metadata, staging, *max_file_bytes).await?;
        }
        let relative = layout::checkpoint_metadata(metadata.checkpoint_id);
        let path = layout::join(self.job_dir.root(), &relative)?;
        put_new(
            self.job_dir.store().as_ref(),
            &path,
            encode_metadata(&metadata)?,
            &relative,
        )
        .await?;
        if let Placement::Inline { staging, .. } = &self.placement {
            // The bytes live in `_metadata` now; free the staged copies.
            let paths: Vec<String> = metadata.inline.keys().cloned().collect();
            delete_paths(staging, paths.iter().map(String::as_str)).await?;
        }
        Ok(metadata)
    }

    /// Opens completed checkpoint `id`.
    pub async fn open(&self, id: CheckpointId) -> Result<ResolvedSnapshot> {
        ResolvedSnapshot::open(&self.job_dir.child(&layout::checkpoint_dir(id))?).await
    }

    /// The checkpoint directories present, complete or not, in ascending order.
    pub async fn checkpoint_dirs(&self) -> Result<Vec<CheckpointId>> {
        let listing = match self
            .job_dir
            .store()
            .list_with_delimiter(Some(self.job_dir.root()))
            .await
        {
            Ok(listing) => listing,
            Err(object_store::Error::NotFound { .. }) => return Ok(Vec::new()),
            Err(source) => {
                return Err(CheckpointError::Store {
                    operation: "list",
                    path: self.job_dir.url().to_owned(),
                    source,
                });
            }
        };
        let mut ids: Vec<CheckpointId> = listing
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().and_then(layout::parse_checkpoint_dir))
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// Every completed checkpoint, oldest first. A directory whose
    /// `_metadata` is missing, truncated, corrupt or from a newer Weir is
    /// not a completed checkpoint and is left out; storage errors are errors.
    pub async fn completed(&self) -> Result<Vec<CheckpointMetadata>> {
        let mut completed = Vec::new();
        for id in self.checkpoint_dirs().await? {
            if let Some(meta) = self.try_open(id).await? {
                completed.push(meta);
            }
        }
        Ok(completed)
    }

    /// The newest completed checkpoint, if any; see [`Self::completed`]
    /// for what counts as completed.
    pub async fn latest_completed(&self) -> Result<Option<CheckpointMetadata>> {
        for id in self.checkpoint_dirs().await?.into_iter().rev() {
            if let Some(meta) = self.try_open(id).await? {
                return Ok(Some(meta));
            }
        }
        Ok(None)
    }

    /// The bytes of a state file of completed checkpoint `metadata`, verified.
    pub async fn read_state_file(
        &self,
        metadata: &CheckpointMetadata,
        file: &StateFile,
    ) -> Result<bytes::Bytes> {
        read_state_file(metadata, &self.job_dir, file).await
    }

    /// Deletes what a retention decision names: each discarded checkpoint's
    /// directory (metadata first, so it stops counting as completed before
    /// its files go) and the shared files nothing references any more.
    pub async fn apply(&self, decision: &SubsumeDecision) -> Result<()> {
        for &id in &decision.discard {
            self.discard(id).await?;
        }
        let shared = decision.shared_files.iter().map(|f| f.file.path.as_str());
        delete_paths(&self.job_dir, shared).await
    }

    /// Deletes checkpoint `id`'s directory: its `_metadata` first, then
    /// every file under `chk-<id>/` (also those of a checkpoint that never
    /// completed, including files staged in memory for "jobmanager"
    /// storage). Shared files are not touched; see [`Self::apply`].
    pub async fn discard(&self, id: CheckpointId) -> Result<()> {
        let metadata = layout::checkpoint_metadata(id);
        delete_paths(&self.job_dir, [metadata.as_str()]).await?;
        let dir = layout::checkpoint_dir(id);
        let checkpoint = self.job_dir.child(&dir)?;
        delete_tree(&checkpoint).await?;
        if let Some(local) = checkpoint.local_dir() {
            remove_interrupted_writes(local);
        }
        if let Placement::Inline { staging, .. } = &self.placement {
            delete_tree(&staging.child(&dir)?).await?;
        }
        Ok(())
    }

    /// Opens checkpoint `id` if it is complete; `None` if its metadata is
    /// missing or unreadable as a completed checkpoint.
    async fn try_open(&self, id: CheckpointId) -> Result<Option<CheckpointMetadata>> {
        match self.open(id).await {
            Ok(resolved) => Ok(Some(resolved.into_metadata())),
            Err(err) if err.is_incomplete_checkpoint() => Ok(None),
            Err(err) => Err(err),
        }
    }
}

/// Moves every state file `metadata` references from `staging` into
/// `metadata.inline`, enforcing the per-file cap.
async fn inline_files(
    metadata: &mut CheckpointMetadata,
    staging: &StorageLocation,
    max_file_bytes: u64,
) -> Result<()> {
    // Shared files outlive the checkpoint that uploaded them, which inline
    // copies cannot; incremental state needs a real directory.
    let incremental = metadata
        .operators
        .iter()
        .flat_map(|o| &o.subtasks)
        .any(|s| matches!(s.keyed, Some(KeyedStateHandle::Incremental(_))));
    if incremental {
        return Err(CheckpointError::IncrementalInline {
            checkpoint: metadata.checkpoint_id,
        });
    }
    let files: Vec<StateFile> = metadata.files().into_iter().cloned().collect();
    for file in files {
        if metadata.inline.contains_key(&file.path) {
            continue;
        }
        if file.size > max_file_bytes {
            return Err(CheckpointError::InlineStateTooLarge {
                checkpoint: metadata.checkpoint_id,
                path: file.path,
                size: file.size,
                limit: max_file_bytes,
            });
        }
        let bytes = read_state_file(metadata, staging, &file).await?;
        metadata.inline.insert(file.path, InlineFile(bytes));
    }
    Ok(())
}

/// Publishes `bytes` at `path` unless something is there already.
pub(crate) async fn put_new(
    store: &dyn ObjectStore,
    path: &Path,
    bytes: Vec<u8>,
    name: &str,
) -> Result<()> {
    let options = PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    };
    match store.put_opts(path, PutPayload::from(bytes), options).await {
        Ok(_) => Ok(()),
        Err(object_store::Error::AlreadyExists { .. }) => Err(CheckpointError::AlreadyExists {
            path: name.to_owned(),
        }),
        Err(source) => Err(CheckpointError::Store {
            operation: "put",
            path: name.to_owned(),
            source,
        }),
    }
}

/// Deletes the given paths (relative to `dir`); missing ones are fine.
pub(crate) async fn delete_paths<'a>(
    dir: &StorageLocation,
    relative: impl IntoIterator<Item = &'a str>,
) -> Result<()> {
    let unique: BTreeSet<&str> = relative.into_iter().collect();
    for name in unique {
        let path = layout::join(dir.root(), name)?;
        match dir.store().delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(source) => {
                return Err(CheckpointError::Store {
                    operation: "delete",
                    path: name.to_owned(),
                    source,
                });
            }
        }
    }
    Ok(())
}

/// Every object under `dir` (only under its subdirectory `sub`, when
/// given), as paths relative to `dir`.
pub(crate) async fn list_relative(dir: &StorageLocation, sub: Option<&str>) -> Result<Vec<String>> {
    let prefix = match sub {
        Some(sub) => dir.child(sub)?,
        None => dir.clone(),
    };
    let listed: Vec<_> = dir
        .store()
        .list(Some(prefix.root()))
        .try_collect()
        .await
        .map_err(|source| CheckpointError::Store {
            operation: "list",
            path: prefix.url().to_owned(),
            source,
        })?;
    let root: Vec<_> = dir.root().parts().collect();
    Ok(listed
        .into_iter()
        .filter_map(|meta| {
            let parts: Vec<_> = meta.location.parts().collect();
            let relative = parts.strip_prefix(root.as_slice())?;
            let names: Vec<&str> = relative.iter().map(|p| p.as_ref()).collect();
            Some(names.join("/"))
        })
        .collect())
}

/// Removes what writes cut short by a crash left under the local directory
/// `dir` (the local store stages a file as `<name>#<n>` and renames it when
/// done; listings never show staging files, so deleting the listed objects
/// leaves them), then the directories that are empty. Links are removed,
/// never followed. Best effort: a file it cannot remove stays.
fn remove_interrupted_writes(dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            remove_interrupted_writes(&entry.path());
        } else if entry.file_name().to_string_lossy().contains('#') {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    // Fails, as it should, while anything else is left.
    let _ = std::fs::remove_dir(dir);
}

/// Deletes every object under `dir`.
pub(crate) async fn delete_tree(dir: &StorageLocation) -> Result<()> {
    let store = dir.store();
    let listed = store
        .list(Some(dir.root()))
        .map_ok(|meta| meta.location)
        .boxed();
    let deleted: Vec<_> = store.delete_stream(listed).collect().await;
    for result in deleted {
        match result {
            Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
            Err(source) => {
                return Err(CheckpointError::Store {
                    operation: "delete",
                    path: dir.url().to_owned(),
                    source,
                });
            }
        }
    }
    Ok(())
}
