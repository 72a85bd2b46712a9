//! The asynchronous part of a full snapshot: serialize a frozen view into a
//! snapshot file and stream it to the object store.
//!
//! Serialization is CPU work, so it runs on a blocking thread (and the
//! encoding threads it starts, one key group each at a time) that feeds
//! chunks (one key group each) through a small channel to the upload; memory
//! stays bounded by the channel, the part size and the largest key groups.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use object_store::ObjectStore;
use object_store::path::Path;
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use weir_state::FrozenKeyedState;
use weir_types::ValueType;

use crate::error::{Result, SnapshotError};
use crate::format::{Compression, SnapshotHeader, encode_frozen};
use crate::handle::{FullSnapshotHandle, StateFile};
use crate::layout::join;
use crate::local_files::LocalFiles;
use crate::task::{SnapshotFuture, SnapshotMetrics, SnapshotOutcome, TaskOutput};
use crate::upload::{ObjectUpload, delete_all};

/// Encoded key groups waiting for the upload; bounds memory.
const CHUNKS_IN_FLIGHT: usize = 4;

/// Where snapshots are stored: a store and the root that handle paths are
/// relative to (the job's checkpoint directory, or a savepoint directory).
#[derive(Debug, Clone)]
pub struct SnapshotStorage {
    /// The object store.
    pub store: Arc<dyn ObjectStore>,
    /// The root inside the store.
    pub root: Path,
    /// The store as a local directory, when it is one: native checkpoint
    /// files are then linked in and out instead of streamed.
    pub local: Option<Arc<dyn LocalFiles>>,
}

/// How a full snapshot is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FullSnapshotOptions {
    /// Block compression.
    pub compression: Compression,
    /// The key columns' types, recorded so tools can decode keys.
    pub key_types: Option<Vec<ValueType>>,
    /// Multipart upload part size in bytes (stores want at least 5 MiB for
    /// every part but the last).
    pub part_size: usize,
    /// Threads that encode and compress key groups at once (1: the upload's
    /// own blocking thread only).
    pub encode_threads: usize,
}

impl FullSnapshotOptions {
    /// The default for [`encode_threads`](Self::encode_threads): the cores
    /// there are, up to [`MAX_ENCODE_THREADS`].
    pub fn default_encode_threads() -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_ENCODE_THREADS))
    }
}

/// More encoding threads than this gain little: the upload and the disk
/// become the limit.
pub const MAX_ENCODE_THREADS: usize = 4;

impl Default for FullSnapshotOptions {
    fn default() -> Self {
        Self {
            compression: Compression::default(),
            key_types: None,
            part_size: 8 << 20,
            encode_threads: Self::default_encode_threads(),
        }
    }
}

/// Starts the asynchronous part of a full snapshot on `runtime`: writes
/// `frozen` to `relative` (a path under `storage.root`) and resolves to its
/// handle, whose path is `relative`.
pub fn spawn_full_snapshot(
    runtime: &Handle,
    frozen: Box<dyn FrozenKeyedState>,
    storage: &SnapshotStorage,
    relative: &str,
    options: FullSnapshotOptions,
) -> SnapshotFuture<FullSnapshotHandle> {
    let location = join(&storage.root, relative);
    let store = Arc::clone(&storage.store);
    let relative = relative.to_owned();
    SnapshotFuture::spawn(
        runtime,
        Arc::clone(&storage.store),
        move |cancel| async move {
            let job = FullSnapshotJob {
                frozen,
                store,
                location: location?,
                relative,
                options,
            };
            job.run(cancel).await
        },
    )
}

struct FullSnapshotJob {
    frozen: Box<dyn FrozenKeyedState>,
    store: Arc<dyn ObjectStore>,
    location: Path,
    relative: String,
    options: FullSnapshotOptions,
}

impl FullSnapshotJob {
    async fn run(self, cancel: CancellationToken) -> Result<TaskOutput<FullSnapshotHandle>> {
        let started = Instant::now();
        let Self {
            frozen,
            store,
            location,
            relative,
            options,
        } = self;
        let key_group_range = frozen.key_group_range();
        let header = SnapshotHeader {
            max_parallelism: frozen.max_parallelism(),
            key_group_range,
            descriptors: frozen.descriptors().to_vec(),
            key_types: options.key_types,
            compression: options.compression,
        };
        let (tx, mut rx) = mpsc::channel::<Bytes>(CHUNKS_IN_FLIGHT);
        let stop = cancel.clone();
        let encoding = tokio::task::spawn_blocking(move || {
            encode_frozen(&*frozen, header, options.encode_threads, &mut |chunk| {
                if stop.is_cancelled() {
                    return Err(SnapshotError::Cancelled);
                }
                tx.blocking_send(chunk)
                    .map_err(|_| SnapshotError::Cancelled)
            })
        });

        let mut upload = ObjectUpload::start(&*store, location.clone(), options.part_size).await?;
        let streamed = tokio::select! {
            r = async {
                while let Some(chunk) = rx.recv().await {
                    upload.write(chunk).await?;
                }
                Ok(())
            } => r,
            () = cancel.cancelled() => Err(SnapshotError::Cancelled),
        };
        drop(rx);
        let encoded = encoding.await.unwrap_or_else(|e| {
            Err(SnapshotError::TaskFailed {
                reason: e.to_string(),
            })
        });
        let summary = match (streamed, encoded) {
            (Ok(()), Ok(summary)) => summary,
            (Err(e), _) | (Ok(()), Err(e)) => {
                upload.abort().await;
                return Err(e);
            }
        };
        let (size, crc32) = upload.finish().await?;
        if cancel.is_cancelled() {
            delete_all(&*store, std::slice::from_ref(&location)).await?;
            return Err(SnapshotError::Cancelled);
        }
        debug_assert_eq!((size, crc32), (summary.size, summary.crc32));
        let handle = FullSnapshotHandle {
            key_group_range,
            file: StateFile {
                path: relative,
                size,
                crc32,
            },
            entries: summary.entries,
        };
        Ok(TaskOutput {
            outcome: SnapshotOutcome {
                handle,
                metrics: SnapshotMetrics {
                    state_size: size,
                    uploaded_size: size,
                    entries: Some(summary.entries),
                    async_duration: started.elapsed(),
                },
            },
            created: vec![location],
        })
    }
}
