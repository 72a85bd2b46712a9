//! Incremental snapshots of RocksDB native checkpoints: upload only the
//! SST files earlier checkpoints have not uploaded, and download a handle's
//! files into a local directory for a native restore.
//!
//! Shared (immutable) files go to [`layout::shared_file`], so a name is never
//! reused for other bytes; private files (MANIFEST, CURRENT, OPTIONS, ...) go
//! to the checkpoint's own directory ([`layout::private_file`]). Which files
//! are already uploaded comes from a [`SharedFileRegistry`] that holds the
//! completed checkpoints of *this* database's lineage: after a rescaling
//! restore, start from an empty one. This module does not open RocksDB.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;
use weir_types::{
    CheckpointId, KeyGroupRange, MaxParallelism, OperatorUid, StateDescriptor, SubtaskIndex,
};

use crate::error::{Result, SnapshotError};
use crate::full::SnapshotStorage;
use crate::handle::{IncrementalSnapshotHandle, SharedStateFile, StateFile};
use crate::layout::{self, check_file_name, join};
use crate::local_files::{LocalFiles, check_checksum, fetch_file, place_file};
use crate::registry::SharedFileRegistry;
use crate::task::{SnapshotFuture, SnapshotMetrics, SnapshotOutcome, TaskOutput};
use crate::upload::{ObjectUpload, delete_all};

/// Bytes read from a local file at a time.
const READ_CHUNK: usize = 4 << 20;

/// Files uploaded or downloaded at once (Flink's
/// `state.backend.rocksdb.checkpoint.transfer.thread.num` defaults to 4): one
/// file at a time leaves the disk and the store mostly idle between reads.
const CONCURRENT_TRANSFERS: usize = 4;

/// One file of a local native checkpoint (`weir_state_rocksdb::NativeFile`
/// maps onto it field by field, `shared` becoming [`LocalFile::shared`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalFile {
    /// The name the file must have in the database directory.
    pub local_name: String,
    /// Where it is now.
    pub path: PathBuf,
    /// Size in bytes.
    pub size: u64,
    /// An immutable SST that later checkpoints may share.
    pub shared: bool,
}

/// A local native checkpoint to upload (what
/// `weir_state_rocksdb::NativeCheckpoint` holds, minus its directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalCheckpoint {
    /// The key groups the database held.
    pub key_group_range: KeyGroupRange,
    /// The max parallelism of the state.
    pub max_parallelism: MaxParallelism,
    /// The states, in column-family order.
    pub descriptors: Vec<StateDescriptor>,
    /// Its files.
    pub files: Vec<LocalFile>,
}

/// Whose checkpoint it is (which names its files) and how to upload them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncrementalTarget {
    /// The operator.
    pub uid: OperatorUid,
    /// The subtask.
    pub subtask: SubtaskIndex,
    /// The checkpoint being taken.
    pub checkpoint: CheckpointId,
    /// Multipart upload part size in bytes.
    pub part_size: usize,
}

/// One file to send, or to reuse.
enum Plan {
    Reuse(SharedStateFile),
    Upload {
        local: LocalFile,
        relative: String,
        shared: bool,
    },
}

/// Starts uploading `checkpoint`: shared files that `uploaded` already holds
/// are referenced, not sent. Resolves to the handle; cancellation removes
/// the files this snapshot uploaded (never the reused ones).
pub fn spawn_incremental_snapshot(
    runtime: &Handle,
    checkpoint: LocalCheckpoint,
    uploaded: &SharedFileRegistry,
    storage: &SnapshotStorage,
    target: IncrementalTarget,
) -> SnapshotFuture<IncrementalSnapshotHandle> {
    let (uid, subtask, id) = (&target.uid, target.subtask, target.checkpoint);
    let dir = layout::shared_dir(uid, subtask);
    let plans: Vec<Plan> = checkpoint
        .files
        .iter()
        .map(
            |f| match uploaded.find_uploaded(&dir, &f.local_name, f.size) {
                Some(done) if f.shared => Plan::Reuse(done.clone()),
                _ if f.shared => Plan::Upload {
                    local: f.clone(),
                    relative: layout::shared_file(id, uid, subtask, &f.local_name),
                    shared: true,
                },
                _ => Plan::Upload {
                    local: f.clone(),
                    relative: layout::private_file(id, uid, subtask, &f.local_name),
                    shared: false,
                },
            },
        )
        .collect();
    let job = IncrementalJob {
        store: Arc::clone(&storage.store),
        root: storage.root.clone(),
        local: storage.local.clone(),
        part_size: target.part_size,
        handle: IncrementalSnapshotHandle {
            key_group_range: checkpoint.key_group_range,
            max_parallelism: checkpoint.max_parallelism,
            descriptors: checkpoint.descriptors,
            shared: Vec::new(),
            private: Vec::new(),
        },
    };
    SnapshotFuture::spawn(runtime, Arc::clone(&storage.store), move |cancel| {
        job.run(plans, cancel)
    })
}

struct IncrementalJob {
    store: Arc<dyn ObjectStore>,
    root: Path,
    local: Option<Arc<dyn LocalFiles>>,
    part_size: usize,
    handle: IncrementalSnapshotHandle,
}

/// What the transfer of a checkpoint's files did: the handle's entries so
/// far (and whether each is shared), the objects it created and their bytes,
/// and why it stopped early, if it did.
#[derive(Default)]
struct Transfer {
    placed: Vec<(SharedStateFile, bool)>,
    created: Vec<Path>,
    uploaded_size: u64,
    failure: Option<SnapshotError>,
}

impl Transfer {
    fn reused(&mut self, entry: SharedStateFile) {
        self.placed.push((entry, true));
    }

    fn sent(&mut self, entry: SharedStateFile, shared: bool, location: Path) {
        self.uploaded_size += entry.file.size;
        self.created.push(location);
        self.placed.push((entry, shared));
    }
}

impl IncrementalJob {
    async fn run(
        mut self,
        plans: Vec<Plan>,
        cancel: CancellationToken,
    ) -> Result<TaskOutput<IncrementalSnapshotHandle>> {
        let started = Instant::now();
        // Every object this snapshot may create. A stopped stream drops uploads
        // that already created their object but were not yet collected in
        // plan order, so a failure deletes them all, not only those collected.
        let uploads: Vec<Path> = plans
            .iter()
            .filter_map(|plan| match plan {
                Plan::Upload { relative, .. } => join(&self.root, relative).ok(),
                Plan::Reuse(_) => None,
            })
            .collect();
        let Transfer {
            placed,
            created,
            uploaded_size,
            failure,
        } = match &self.local {
            Some(files) => self.place(Arc::clone(files), plans, cancel.clone()).await,
            None => self.stream(plans, &cancel).await,
        };
        if let Some(e) =
            failure.or_else(|| cancel.is_cancelled().then_some(SnapshotError::Cancelled))
        {
            // Best effort when the snapshot failed already.
            let deleted = delete_all(&*self.store, &uploads).await;
            return match (e, deleted) {
                (SnapshotError::Cancelled, Err(err)) => Err(err),
                (e, _) => Err(e),
            };
        }
        for (entry, shared) in placed {
            if shared {
                self.handle.shared.push(entry);
            } else {
                self.handle.private.push(entry);
            }
        }
        let state_size = self
            .handle
            .shared
            .iter()
            .chain(&self.handle.private)
            .map(|f| f.file.size)
            .sum();
        Ok(TaskOutput {
            outcome: SnapshotOutcome {
                handle: self.handle,
                metrics: SnapshotMetrics {
                    state_size,
                    uploaded_size,
                    entries: None,
                    async_duration: started.elapsed(),
                },
            },
            created,
        })
    }

    /// Streams the files through the store, [`CONCURRENT_TRANSFERS`] at a
    /// time; uploads still running when it stops abort as they are dropped
    /// (a finished one waiting for its turn is dropped with them).
    async fn stream(&self, plans: Vec<Plan>, cancel: &CancellationToken) -> Transfer {
        // In plan order, so the handle lists files as the database does.
        let mut sent = futures::stream::iter(plans.into_iter().map(|plan| async move {
            match plan {
                Plan::Reuse(file) => Ok((file, true, None)),
                Plan::Upload {
                    local,
                    relative,
                    shared,
                } => {
                    let (file, location) = self.upload_file(&local, &relative).await?;
                    let entry = SharedStateFile {
                        local_name: local.local_name,
                        file,
                    };
                    Ok((entry, shared, Some(location)))
                }
            }
        }))
        .buffered(CONCURRENT_TRANSFERS);
        let mut transfer = Transfer::default();
        transfer.failure = loop {
            let next = tokio::select! {
                next = sent.next() => next,
                () = cancel.cancelled() => break Some(SnapshotError::Cancelled),
            };
            match next {
                None => break None,
                Some(Ok((entry, _, None))) => transfer.reused(entry),
                Some(Ok((entry, shared, Some(location)))) => transfer.sent(entry, shared, location),
                Some(Err(e)) => break Some(e),
            }
        };
        transfer
    }

    /// Places the files in a local store, one after the other on a blocking
    /// thread that looks for cancellation between files: it stops after the
    /// file at hand, so everything it created is known once it returns.
    async fn place(
        &self,
        files: Arc<dyn LocalFiles>,
        plans: Vec<Plan>,
        cancel: CancellationToken,
    ) -> Transfer {
        let root = self.root.clone();
        let placing = tokio::task::spawn_blocking(move || {
            let mut transfer = Transfer::default();
            for plan in plans {
                if cancel.is_cancelled() {
                    transfer.failure = Some(SnapshotError::Cancelled);
                    break;
                }
                let (local, relative, shared) = match plan {
                    Plan::Reuse(file) => {
                        transfer.reused(file);
                        continue;
                    }
                    Plan::Upload {
                        local,
                        relative,
                        shared,
                    } => (local, relative, shared),
                };
                let placed = join(&root, &relative).and_then(|location| {
                    let file = place_file(&*files, &local.path, &location, &relative)?;
                    Ok((file, location))
                });
                match placed {
                    Ok((file, location)) => {
                        let entry = SharedStateFile {
                            local_name: local.local_name,
                            file,
                        };
                        transfer.sent(entry, shared, location);
                    }
                    Err(e) => {
                        transfer.failure = Some(e);
                        break;
                    }
                }
            }
            transfer
        });
        placing.await.unwrap_or_else(|e| Transfer {
            failure: Some(SnapshotError::TaskFailed {
                reason: e.to_string(),
            }),
            ..Transfer::default()
        })
    }

    /// Streams one local file to `relative`; returns it with the object's
    /// location. Dropped half-way, the multipart upload's own drop cleans up.
    async fn upload_file(&self, local: &LocalFile, relative: &str) -> Result<(StateFile, Path)> {
        let location = join(&self.root, relative)?;
        let io_err = |operation| {
            move |source| SnapshotError::LocalIo {
                operation,
                path: local.path.clone(),
                source,
            }
        };
        let mut reader = tokio::fs::File::open(&local.path)
            .await
            .map_err(io_err("open"))?;
        // One blocking read per chunk, not per 2 MiB (tokio's default).
        reader.set_max_buf_size(READ_CHUNK);
        let mut upload =
            ObjectUpload::start(&*self.store, location.clone(), self.part_size).await?;
        loop {
            let mut chunk = BytesMut::with_capacity(READ_CHUNK);
            let read = match reader.read_buf(&mut chunk).await {
                Ok(read) => read,
                Err(e) => {
                    upload.abort().await;
                    return Err(io_err("read")(e));
                }
            };
            if read == 0 {
                break;
            }
            if let Err(e) = upload.write(chunk.freeze()).await {
                upload.abort().await;
                return Err(e);
            }
        }
        let (size, crc32) = upload.finish().await?;
        let file = StateFile {
            path: relative.to_owned(),
            size,
            crc32,
        };
        Ok((file, location))
    }
}

/// Downloads every file of `handle` (paths relative to `root`) into `dir`
/// under its local name, checking sizes and checksums, so `dir` can be
/// opened as the database.
///
/// A download from a remote store checks each file's checksum as it streams
/// it. Files of a local store are linked (or copied) into place and read for
/// their checksums in the background: the caller opens the database
/// meanwhile and uses it only once [`PendingChecksums::verified`] says the
/// files are intact.
pub async fn download_incremental(
    handle: &IncrementalSnapshotHandle,
    storage: &SnapshotStorage,
    dir: &std::path::Path,
) -> Result<PendingChecksums> {
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|source| SnapshotError::LocalIo {
            operation: "create directory",
            path: dir.to_owned(),
            source,
        })?;
    // The database never writes to its SSTs, so those may be shared with
    // the checkpoint; the other files it may rewrite are copied. The copies
    // (small: the manifest, options, WAL) go first: behind the checksum
    // reads of the SSTs they would wait for the disk.
    let private = handle.private.iter().map(|file| (file, false));
    let files = private.chain(handle.shared.iter().map(|file| (file, true)));
    let checks = futures::stream::iter(files.map(|(file, share)| async move {
        check_file_name(&file.local_name)?;
        let target = dir.join(&file.local_name);
        match &storage.local {
            Some(files) => {
                let (files, state_file) = (Arc::clone(files), file.file.clone());
                let location = join(&storage.root, &state_file.path)?;
                let (state_file, target) = blocking(move || {
                    fetch_file(&*files, &state_file, &location, &target, share)
                        .map(|()| (state_file, target))
                })
                .await?;
                Ok(Some(tokio::task::spawn_blocking(move || {
                    check_checksum(&state_file, &target)
                })))
            }
            None => download_file(&file.file, &*storage.store, &storage.root, &target)
                .await
                .map(|()| None),
        }
    }))
    .buffer_unordered(CONCURRENT_TRANSFERS)
    .try_collect::<Vec<_>>()
    .await?;
    Ok(PendingChecksums(checks.into_iter().flatten().collect()))
}

/// The checksums of downloaded files still being read (see
/// [`download_incremental`]).
#[derive(Debug, Default)]
#[must_use = "downloaded files are checked only once `verified` returns"]
pub struct PendingChecksums(Vec<tokio::task::JoinHandle<Result<()>>>);

impl PendingChecksums {
    /// Waits for every checksum: the first file that differs from its
    /// handle (or cannot be read) is the error.
    pub async fn verified(self) -> Result<()> {
        for check in self.0 {
            check.await.unwrap_or_else(|e| {
                Err(SnapshotError::TaskFailed {
                    reason: e.to_string(),
                })
            })?;
        }
        Ok(())
    }
}

/// Runs blocking file work off the runtime's worker threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| {
        Err(SnapshotError::TaskFailed {
            reason: e.to_string(),
        })
    })
}

async fn download_file(
    file: &StateFile,
    store: &dyn ObjectStore,
    root: &Path,
    target: &std::path::Path,
) -> Result<()> {
    let location = join(root, &file.path)?;
    let io_err = |operation| {
        move |source| SnapshotError::LocalIo {
            operation,
            path: target.to_owned(),
            source,
        }
    };
    let size = store
        .head(&location)
        .await
        .map_err(|e| SnapshotError::storage("read", &location, e))?
        .size;
    file.check_size(size)?;
    let mut out = tokio::fs::File::create(target)
        .await
        .map_err(io_err("create"))?;
    // Large ranges: a plain `get` of a local file streams it 8 KiB at a time.
    let mut crc = crc32fast::Hasher::new();
    for start in (0..size).step_by(READ_CHUNK) {
        let end = (start + READ_CHUNK as u64).min(size);
        let chunk = store
            .get_range(&location, start..end)
            .await
            .map_err(|e| SnapshotError::storage("read", &location, e))?;
        crc.update(&chunk);
        out.write_all(&chunk).await.map_err(io_err("write"))?;
    }
    // Flushed, not synced: a local copy lost in a crash is downloaded again.
    out.flush().await.map_err(io_err("flush"))?;
    file.check_crc32(crc.finalize())
}
