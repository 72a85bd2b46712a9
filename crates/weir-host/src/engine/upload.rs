//! The asynchronous part of a subtask snapshot: the keyed state as one
//! key-group-indexed full snapshot file (compressed per key group: zstd
//! unless the job chose otherwise) or as RocksDB's own files, uploaded
//! incrementally, and the operator state as one file, all named by `layout`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use weir_checkpoint::{SubtaskStateMeta, layout};
use weir_snapshot::{
    Compression, FullSnapshotOptions, KeyedStateHandle, SnapshotError, SnapshotFuture,
    SnapshotMetrics, SnapshotOutcome, SnapshotStorage, spawn_full_snapshot, write_operator_state,
};
use weir_state::{FrozenKeyedState, OperatorStateSnapshot};
use weir_types::{CheckpointId, OperatorUid, StateDescriptor, SubtaskIndex, ValueType};

use super::Subtask;
use super::incremental::{NativeSnapshot, SnapshotFormat};
use super::keyed::KeyedBackend;
use crate::error::{HostError, Result};

/// A frozen subtask state (the synchronous part of a snapshot); uploading
/// it is the asynchronous part. Later writes to the subtask never show in it.
pub struct SubtaskSnapshot {
    uid: OperatorUid,
    subtask: SubtaskIndex,
    key_types: Option<Vec<ValueType>>,
    descriptors: Vec<StateDescriptor>,
    keyed: FrozenKeyed,
    operator: OperatorStateSnapshot,
    compression: Compression,
}

/// The keyed part, in the format it is stored in.
enum FrozenKeyed {
    Canonical(Box<dyn FrozenKeyedState>),
    Native(Box<NativeSnapshot>),
}

impl std::fmt::Debug for SubtaskSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubtaskSnapshot")
            .field("uid", &self.uid)
            .field("subtask", &self.subtask)
            .field("descriptors", &self.descriptors.len())
            .finish_non_exhaustive()
    }
}

/// What an upload produced: the subtask's entry of `_metadata` and statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubtaskUpload {
    /// The handles to put into [`weir_checkpoint::OperatorStateMeta::subtasks`].
    pub meta: SubtaskStateMeta,
    /// Sizes and time of the upload (operator state bytes included).
    pub metrics: SnapshotMetrics,
    /// The keyed part's own statistics, if it has one. For an incremental
    /// checkpoint its duration is the transfer alone, which starts once
    /// RocksDB created the checkpoint.
    pub keyed_metrics: Option<SnapshotMetrics>,
}

impl Subtask {
    /// The synchronous part of a canonical snapshot: every epoch begun must
    /// be final (call [`Subtask::finalize_all`] first). Cheap: shares the
    /// data.
    pub fn snapshot_sync(&mut self) -> Result<SubtaskSnapshot> {
        self.snapshot_sync_as(&SnapshotFormat::Canonical, CheckpointId(0), "")
    }

    /// The synchronous part of checkpoint `checkpoint` in `format`, to be
    /// uploaded under the job directory `location` (how a later incremental
    /// checkpoint recognizes files it may reference). A RocksDB incremental
    /// snapshot only queues RocksDB's native checkpoint behind the final
    /// epochs; the upload waits for it.
    pub fn snapshot_sync_as(
        &mut self,
        format: &SnapshotFormat,
        checkpoint: CheckpointId,
        location: &str,
    ) -> Result<SubtaskSnapshot> {
        let operator = self.operator.snapshot()?;
        let descriptors = self.keyed.descriptors().to_vec();
        let name = format!(
            "checkpoint-{checkpoint}-{}-{}",
            self.spec.uid, self.spec.subtask
        );
        let keyed = match (format, &mut self.keyed) {
            // Without keyed states nothing is uploaded: no native checkpoint.
            (SnapshotFormat::Incremental { base }, KeyedBackend::RocksDb(backend))
                if !descriptors.is_empty() =>
            {
                FrozenKeyed::Native(Box::new(NativeSnapshot::start(
                    backend,
                    &self.work_dir,
                    &name,
                    *base,
                    location,
                    &self.uploaded,
                )?))
            }
            _ => FrozenKeyed::Canonical(self.keyed.snapshot_sync()?),
        };
        Ok(SubtaskSnapshot {
            uid: self.spec.uid.clone(),
            subtask: self.spec.subtask,
            key_types: self.spec.key_types.clone(),
            descriptors,
            keyed,
            compression: Compression::default(),
            operator,
        })
    }
}

impl SubtaskSnapshot {
    /// The keyed states the snapshot holds.
    pub fn descriptors(&self) -> &[StateDescriptor] {
        &self.descriptors
    }

    /// Compresses a canonical keyed file with `compression` (zstd unless
    /// set); RocksDB's own files keep their SST compression.
    pub fn with_compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    /// The key columns' types recorded with the snapshot.
    pub fn key_types(&self) -> Option<&[ValueType]> {
        self.key_types.as_deref()
    }

    /// Spawns the upload on `runtime` into `storage`: the keyed state
    /// (`layout::keyed_state_file`, or RocksDB's files under the shared and
    /// checkpoint directories) if keyed states are registered, the operator
    /// state file (`layout::operator_state_file`) if operator states are.
    pub fn upload(
        self,
        runtime: &Handle,
        storage: &SnapshotStorage,
        checkpoint: CheckpointId,
    ) -> UploadFuture {
        let cancel = CancellationToken::new();
        let operator_file = layout::operator_state_file(checkpoint, &self.uid, self.subtask);
        // An operator without keyed states stores no keyed file, so its
        // `_metadata` needs no key types.
        let keyed = (!self.descriptors.is_empty()).then(|| {
            let upload = keyed_upload(
                self.keyed,
                runtime.clone(),
                storage.clone(),
                (self.uid.clone(), self.subtask, checkpoint),
                FullSnapshotOptions {
                    key_types: self.key_types,
                    compression: self.compression,
                    ..FullSnapshotOptions::default()
                },
                cancel.clone(),
            );
            runtime.spawn(upload)
        });
        let storage = storage.clone();
        let (subtask, operator, canceled) = (self.subtask, self.operator, cancel.clone());
        let join = runtime.spawn(async move {
            let started = std::time::Instant::now();
            let mut metrics = SnapshotMetrics::default();
            let operator_state = if operator.states.is_empty() {
                None
            } else if canceled.is_cancelled() {
                return Err(SnapshotError::Cancelled.into());
            } else {
                let file =
                    write_operator_state(&operator, &*storage.store, &storage.root, &operator_file)
                        .await?;
                metrics.state_size += file.size;
                metrics.uploaded_size += file.size;
                Some(file)
            };
            let (keyed, keyed_metrics) = match keyed {
                Some(task) => {
                    let (handle, keyed_metrics) = task.await.map_err(task_failed)??;
                    metrics.state_size += keyed_metrics.state_size;
                    metrics.uploaded_size += keyed_metrics.uploaded_size;
                    metrics.entries = keyed_metrics.entries;
                    (Some(handle), Some(keyed_metrics))
                }
                None => (None, None),
            };
            metrics.async_duration = started.elapsed();
            Ok(SubtaskUpload {
                meta: SubtaskStateMeta {
                    subtask,
                    keyed,
                    operator_state,
                },
                metrics,
                keyed_metrics,
            })
        });
        UploadFuture {
            cancel,
            join,
            done: false,
        }
    }
}

/// The upload of the keyed part, stopped by `cancel`.
async fn keyed_upload(
    keyed: FrozenKeyed,
    runtime: Handle,
    storage: SnapshotStorage,
    target: (OperatorUid, SubtaskIndex, CheckpointId),
    options: FullSnapshotOptions,
    cancel: CancellationToken,
) -> Result<(KeyedStateHandle, SnapshotMetrics)> {
    match keyed {
        FrozenKeyed::Canonical(frozen) => {
            let (uid, subtask, checkpoint) = &target;
            let file = layout::keyed_state_file(*checkpoint, uid, *subtask);
            let future = spawn_full_snapshot(&runtime, frozen, &storage, &file, options);
            let outcome = cancelable(future, &cancel).await?;
            Ok((KeyedStateHandle::Full(outcome.handle), outcome.metrics))
        }
        FrozenKeyed::Native(native) => native.upload(runtime, storage, target, cancel).await,
    }
}

/// Awaits `future`, canceling it (and waiting until it stopped writing)
/// once `cancel` is.
pub(super) async fn cancelable<H: Send + 'static>(
    mut future: SnapshotFuture<H>,
    cancel: &CancellationToken,
) -> Result<SnapshotOutcome<H>> {
    tokio::select! {
        outcome = &mut future => Ok(outcome?),
        () = cancel.cancelled() => {
            future.cancel();
            Ok(future.await?)
        }
    }
}

fn task_failed(e: tokio::task::JoinError) -> HostError {
    HostError::Snapshot(SnapshotError::TaskFailed {
        reason: e.to_string(),
    })
}

/// The upload of a [`SubtaskSnapshot`]; resolves to its [`SubtaskUpload`].
///
/// [`cancel`](UploadFuture::cancel) (or dropping it unfinished) stops the
/// upload; the keyed snapshot file is removed. An operator state file
/// already written stays until its checkpoint directory is discarded, which
/// is what happens to the directory of a checkpoint that never completes.
#[must_use = "dropping an UploadFuture cancels the upload"]
pub struct UploadFuture {
    cancel: CancellationToken,
    join: JoinHandle<Result<SubtaskUpload>>,
    done: bool,
}

impl std::fmt::Debug for UploadFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UploadFuture")
            .field("canceled", &self.cancel.is_cancelled())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl UploadFuture {
    /// Stops the upload; awaiting it then fails with a canceled error.
    /// Idempotent; an upload that already resolved is not affected.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }
}

impl Future for UploadFuture {
    type Output = Result<SubtaskUpload>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let joined = std::task::ready!(Pin::new(&mut this.join).poll(cx));
        this.done = true;
        Poll::Ready(joined.map_err(task_failed).and_then(|result| result))
    }
}

impl Drop for UploadFuture {
    fn drop(&mut self) {
        if !self.done {
            self.cancel();
        }
    }
}
