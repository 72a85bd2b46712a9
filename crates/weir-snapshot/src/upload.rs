//! Streaming uploads: chunks go out as multipart parts while the size and
//! CRC-32 of the whole object are computed on the way.
//!
//! Memory stays bounded by the part size times the number of parts in
//! flight. An upload that is not finished is aborted, so no partial object
//! stays behind; deleting finished objects is the caller's business.

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, WriteMultipart};

use crate::error::{Result, SnapshotError};

/// How many parts may be uploading at once.
const MAX_PARTS_IN_FLIGHT: usize = 4;

/// An object being uploaded.
pub(crate) struct ObjectUpload {
    location: Path,
    writer: WriteMultipart,
    size: u64,
    crc: crc32fast::Hasher,
}

impl ObjectUpload {
    /// Starts a multipart upload to `location` in parts of `part_size` bytes.
    pub(crate) async fn start(
        store: &dyn ObjectStore,
        location: Path,
        part_size: usize,
    ) -> Result<Self> {
        let upload = store
            .put_multipart(&location)
            .await
            .map_err(|e| SnapshotError::storage("start upload of", &location, e))?;
        Ok(Self {
            location,
            writer: WriteMultipart::new_with_chunk_size(upload, part_size.max(1)),
            size: 0,
            crc: crc32fast::Hasher::new(),
        })
    }

    /// Appends a chunk, waiting first while too many parts are in flight.
    pub(crate) async fn write(&mut self, chunk: Bytes) -> Result<()> {
        self.writer
            .wait_for_capacity(MAX_PARTS_IN_FLIGHT)
            .await
            .map_err(|e| SnapshotError::storage("upload", &self.location, e))?;
        self.size += chunk.len() as u64;
        self.crc.update(&chunk);
        self.writer.put(chunk);
        Ok(())
    }

    /// Completes the upload; returns the object's size and CRC-32.
    pub(crate) async fn finish(self) -> Result<(u64, u32)> {
        let Self {
            location,
            writer,
            size,
            crc,
        } = self;
        writer
            .finish()
            .await
            .map_err(|e| SnapshotError::storage("complete upload of", &location, e))?;
        Ok((size, crc.finalize()))
    }

    /// Aborts the upload and drops the parts uploaded so far.
    pub(crate) async fn abort(self) {
        // Best effort: the upload failed or was canceled already, and stores
        // that keep parts expire them by lifecycle rules.
        let _ = self.writer.abort().await;
    }
}

/// Deletes objects, ignoring those already gone.
pub(crate) async fn delete_all(store: &dyn ObjectStore, locations: &[Path]) -> Result<()> {
    for location in locations {
        match store.delete(location).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(SnapshotError::storage("delete", location, e)),
        }
    }
    Ok(())
}
