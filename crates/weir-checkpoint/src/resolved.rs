//! Opening a completed checkpoint or savepoint by its directory (or its
//! `_metadata` file) and reading its state files, verified.
//!
//! State file paths resolve against the job directory for checkpoints and
//! against the savepoint directory for savepoints, so a savepoint directory
//! can be moved or copied. Inline files ("jobmanager" storage) are served
//! from the metadata. Deciding *which* checkpoint to open is `storage`'s job.

use std::sync::Arc;

use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use weir_snapshot::{SnapshotStorage, StateFile};

use crate::error::{CheckpointError, Result};
use crate::layout::{self, METADATA_FILE};
use crate::location::StorageLocation;
use crate::metadata::{CheckpointKind, CheckpointMetadata, decode_metadata};

/// A decoded `_metadata` together with the directory its paths are relative to.
#[derive(Debug, Clone)]
pub struct ResolvedSnapshot {
    metadata: CheckpointMetadata,
    base: StorageLocation,
}

impl ResolvedSnapshot {
    /// Opens the checkpoint or savepoint whose directory (or `_metadata`
    /// file) `location` points at. A directory without a readable, valid
    /// `_metadata` is an error, never an empty checkpoint.
    pub async fn open(location: &StorageLocation) -> Result<Self> {
        let mut parts: Vec<_> = location.root().parts().collect();
        let points_at_file = parts.last().is_some_and(|p| p.as_ref() == METADATA_FILE);
        if points_at_file {
            parts.pop();
        }
        let dir: Path = parts.iter().cloned().collect();
        let metadata_path = layout::join(&dir, METADATA_FILE)?;
        let url = if points_at_file {
            location.url().to_owned()
        } else {
            format!("{}/{METADATA_FILE}", location.url().trim_end_matches('/'))
        };
        let bytes = get(location.store().as_ref(), &metadata_path, &url)
            .await?
            .ok_or_else(|| CheckpointError::MissingMetadata {
                location: url.clone(),
            })?;
        let metadata = decode_metadata(&bytes, &url)?;
        // A checkpoint's paths are relative to the job directory, the parent
        // of `chk-<n>/`; a savepoint's to its own directory.
        if metadata.kind == CheckpointKind::Checkpoint {
            parts.pop();
        }
        let root: Path = parts.into_iter().collect();
        let dir_url = url.trim_end_matches(METADATA_FILE).trim_end_matches('/');
        let base_url = match metadata.kind {
            CheckpointKind::Savepoint => dir_url,
            CheckpointKind::Checkpoint => dir_url.rsplit_once('/').map_or(dir_url, |(p, _)| p),
        };
        let base = location.at(root, base_url);
        Ok(Self { metadata, base })
    }

    /// The decoded metadata.
    pub fn metadata(&self) -> &CheckpointMetadata {
        &self.metadata
    }

    /// Consumes self, keeping the metadata.
    pub fn into_metadata(self) -> CheckpointMetadata {
        self.metadata
    }

    /// The directory state file paths are relative to.
    pub fn base(&self) -> &StorageLocation {
        &self.base
    }

    /// The bytes of one state file of this snapshot, checked against the
    /// size and CRC-32 its handle records.
    pub async fn read_file(&self, file: &StateFile) -> Result<Bytes> {
        read_state_file(&self.metadata, &self.base, file).await
    }

    /// Storage that the snapshot crate's restore functions can read this
    /// snapshot's handles from. Inline state is copied into an in-process
    /// store first, since those files exist nowhere else.
    pub async fn state_storage(&self) -> Result<SnapshotStorage> {
        if self.metadata.inline.is_empty() {
            return Ok(self.base.snapshot_storage());
        }
        let store = InMemory::new();
        for (path, file) in &self.metadata.inline {
            let location = layout::join(&Path::default(), path)?;
            store
                .put(&location, PutPayload::from_bytes(file.0.clone()))
                .await
                .map_err(|source| CheckpointError::Store {
                    operation: "put",
                    path: path.clone(),
                    source,
                })?;
        }
        Ok(SnapshotStorage {
            store: Arc::new(store),
            root: Path::default(),
            local: None,
        })
    }
}

/// Reads `file` of `metadata`, from the metadata itself when inline, else
/// relative to `base`, and verifies its size and checksum.
pub(crate) async fn read_state_file(
    metadata: &CheckpointMetadata,
    base: &StorageLocation,
    file: &StateFile,
) -> Result<Bytes> {
    let bytes = match metadata.inline.get(&file.path) {
        Some(inline) => inline.0.clone(),
        None => {
            let path = layout::join(base.root(), &file.path)?;
            get(base.store().as_ref(), &path, &file.path)
                .await?
                .ok_or_else(|| CheckpointError::MissingStateFile {
                    path: file.path.clone(),
                    location: base.url().to_owned(),
                })?
        }
    };
    verify(file, &bytes)?;
    Ok(bytes)
}

/// Checks bytes against the size and CRC-32 their handle records.
pub(crate) fn verify(file: &StateFile, bytes: &[u8]) -> Result<()> {
    let crc32 = crc32fast::hash(bytes);
    if bytes.len() as u64 != file.size || crc32 != file.crc32 {
        return Err(CheckpointError::CorruptStateFile {
            path: file.path.clone(),
            expected_size: file.size,
            size: bytes.len() as u64,
            expected_crc32: file.crc32,
            crc32,
        });
    }
    Ok(())
}

/// The object at `path`, or `None` if there is none.
pub(crate) async fn get(store: &dyn ObjectStore, path: &Path, name: &str) -> Result<Option<Bytes>> {
    let store_error = |source| CheckpointError::Store {
        operation: "get",
        path: name.to_owned(),
        source,
    };
    match store.get_opts(path, Default::default()).await {
        Ok(result) => Ok(Some(result.bytes().await.map_err(store_error)?)),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(source) => Err(store_error(source)),
    }
}
