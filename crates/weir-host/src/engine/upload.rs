//! The asynchronous part of a subtask snapshot: the keyed state as one
//! key-group-indexed full snapshot file (zstd per key group) and the operator
//! state as one file, both named by `layout`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use weir_checkpoint::{SubtaskStateMeta, layout};
use weir_snapshot::{
    FullSnapshotOptions, KeyedStateHandle, SnapshotError, SnapshotMetrics, SnapshotStorage,
    spawn_full_snapshot, write_operator_state,
};
use weir_state::{FrozenKeyedState, OperatorStateSnapshot};
use weir_types::{CheckpointId, OperatorUid, StateDescriptor, SubtaskIndex, ValueType};

use super::Subtask;
use crate::error::{HostError, Result};

/// A frozen subtask state (the synchronous part of a snapshot); uploading
/// it is the asynchronous part. Later writes to the subtask never show in it.
pub struct SubtaskSnapshot {
    uid: OperatorUid,
    subtask: SubtaskIndex,
    key_types: Option<Vec<ValueType>>,
    keyed: Box<dyn FrozenKeyedState>,
    operator: OperatorStateSnapshot,
}

impl std::fmt::Debug for SubtaskSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubtaskSnapshot")
            .field("uid", &self.uid)
            .field("subtask", &self.subtask)
            .field("key_group_range", &self.keyed.key_group_range())
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
}

impl Subtask {
    /// The synchronous part of a snapshot: every epoch begun must be final
    /// (call [`Subtask::finalize_all`] first). Cheap: shares the data.
    pub fn snapshot_sync(&mut self) -> Result<SubtaskSnapshot> {
        let operator = self.operator.snapshot()?;
        let keyed = self.keyed.snapshot_sync()?;
        Ok(SubtaskSnapshot {
            uid: self.spec.uid.clone(),
            subtask: self.spec.subtask,
            key_types: self.spec.key_types.clone(),
            keyed,
            operator,
        })
    }
}

impl SubtaskSnapshot {
    /// The keyed states the snapshot holds.
    pub fn descriptors(&self) -> &[StateDescriptor] {
        self.keyed.descriptors()
    }

    /// The key columns' types recorded with the snapshot.
    pub fn key_types(&self) -> Option<&[ValueType]> {
        self.key_types.as_deref()
    }

    /// Spawns the upload on `runtime` into `storage`: the keyed file
    /// (`layout::keyed_state_file`) if keyed states are registered, the
    /// operator state file (`layout::operator_state_file`) if operator
    /// states are.
    pub fn upload(
        self,
        runtime: &Handle,
        storage: &SnapshotStorage,
        checkpoint: CheckpointId,
    ) -> UploadFuture {
        let keyed_file = layout::keyed_state_file(checkpoint, &self.uid, self.subtask);
        let operator_file = layout::operator_state_file(checkpoint, &self.uid, self.subtask);
        // An operator without keyed states stores no keyed file, so its
        // `_metadata` needs no key types.
        let keyed = (!self.keyed.descriptors().is_empty()).then(|| {
            spawn_full_snapshot(
                runtime,
                self.keyed,
                storage,
                &keyed_file,
                FullSnapshotOptions {
                    key_types: self.key_types,
                    ..FullSnapshotOptions::default()
                },
            )
        });
        let token = keyed.as_ref().map(|k| k.cancel_token());
        let canceled = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&canceled);
        let storage = storage.clone();
        let (subtask, operator) = (self.subtask, self.operator);
        let join = runtime.spawn(async move {
            let started = std::time::Instant::now();
            let mut metrics = SnapshotMetrics::default();
            let operator_state = if operator.states.is_empty() {
                None
            } else if seen.load(Ordering::Acquire) {
                return Err(SnapshotError::Cancelled.into());
            } else {
                let file =
                    write_operator_state(&operator, &*storage.store, &storage.root, &operator_file)
                        .await?;
                metrics.state_size += file.size;
                metrics.uploaded_size += file.size;
                Some(file)
            };
            let keyed = match keyed {
                Some(future) => {
                    let outcome = future.await?;
                    metrics.state_size += outcome.metrics.state_size;
                    metrics.uploaded_size += outcome.metrics.uploaded_size;
                    metrics.entries = outcome.metrics.entries;
                    Some(KeyedStateHandle::Full(outcome.handle))
                }
                None => None,
            };
            metrics.async_duration = started.elapsed();
            Ok(SubtaskUpload {
                meta: SubtaskStateMeta {
                    subtask,
                    keyed,
                    operator_state,
                },
                metrics,
            })
        });
        UploadFuture {
            canceled,
            cancel_keyed: Box::new(move || {
                if let Some(token) = &token {
                    token.cancel();
                }
            }),
            join,
            done: false,
        }
    }
}

/// The upload of a [`SubtaskSnapshot`]; resolves to its [`SubtaskUpload`].
///
/// [`cancel`](UploadFuture::cancel) (or dropping it unfinished) stops the
/// upload; the keyed snapshot file is removed. An operator state file
/// already written stays until its checkpoint directory is discarded, which
/// is what happens to the directory of a checkpoint that never completes.
#[must_use = "dropping an UploadFuture cancels the upload"]
pub struct UploadFuture {
    canceled: Arc<AtomicBool>,
    cancel_keyed: Box<dyn Fn() + Send + Sync>,
    join: JoinHandle<Result<SubtaskUpload>>,
    done: bool,
}

impl std::fmt::Debug for UploadFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UploadFuture")
            .field("canceled", &self.canceled.load(Ordering::Acquire))
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl UploadFuture {
    /// Stops the upload; awaiting it then fails with a canceled error.
    /// Idempotent; an upload that already resolved is not affected.
    pub fn cancel(&self) {
        self.canceled.store(true, Ordering::Release);
        (self.cancel_keyed)();
    }
}

impl Future for UploadFuture {
    type Output = Result<SubtaskUpload>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let joined = std::task::ready!(Pin::new(&mut this.join).poll(cx));
        this.done = true;
        Poll::Ready(match joined {
            Ok(result) => result,
            Err(e) => Err(HostError::Snapshot(SnapshotError::TaskFailed {
                reason: e.to_string(),
            })),
        })
    }
}

impl Drop for UploadFuture {
    fn drop(&mut self) {
        if !self.done {
            self.cancel();
        }
    }
}
