//! The asynchronous part of a snapshot as a cancelable future.
//!
//! A [`SnapshotFuture`] owns a background tokio task that uploads what the
//! synchronous part captured and resolves to a state handle. Canceling it
//! (or dropping it unfinished) stops the task and removes every object the
//! task created; awaiting it after [`cancel`](SnapshotFuture::cancel) returns
//! [`SnapshotError::Cancelled`] once that cleanup is done. Purely synchronous
//! snapshots use [`SnapshotFuture::completed`]. This module does not know
//! what is uploaded; `full.rs` and `incremental.rs` do.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures::future::BoxFuture;
use object_store::ObjectStore;
use object_store::path::Path;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::{Result, SnapshotError};
use crate::upload::delete_all;

/// Statistics of one snapshot's asynchronous part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SnapshotMetrics {
    /// Bytes of every file the handle references (the full state size).
    pub state_size: u64,
    /// Bytes this snapshot uploaded (less than `state_size` when
    /// incremental snapshots reuse files).
    pub uploaded_size: u64,
    /// Number of entries, when the snapshot format knows it.
    pub entries: Option<u64>,
    /// Wall time of the asynchronous part.
    pub async_duration: Duration,
}

/// What a finished snapshot hands back: its handle and statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotOutcome<H> {
    /// Where the state is stored.
    pub handle: H,
    /// Statistics.
    pub metrics: SnapshotMetrics,
}

/// What a snapshot task returns: the outcome plus the objects it created,
/// which must go if the snapshot is canceled after all.
pub(crate) struct TaskOutput<H> {
    pub(crate) outcome: SnapshotOutcome<H>,
    pub(crate) created: Vec<Path>,
}

/// The asynchronous part of a snapshot; resolves to its handle.
#[must_use = "dropping a SnapshotFuture cancels the snapshot"]
pub struct SnapshotFuture<H: Send + 'static> {
    cancel: CancellationToken,
    /// Where cleanup goes when the future is dropped unfinished.
    runtime: Option<Handle>,
    inner: Inner<H>,
}

enum Inner<H> {
    Ready(SnapshotOutcome<H>),
    Running {
        join: JoinHandle<Result<TaskOutput<H>>>,
        store: Arc<dyn ObjectStore>,
    },
    Reaping(BoxFuture<'static, ()>),
    Done,
}

// No field is ever pinned in place: the join handle and boxed futures are
// `Unpin` and the outcome is only moved out.
impl<H: Send + 'static> Unpin for SnapshotFuture<H> {}

impl<H: Send + 'static> SnapshotFuture<H> {
    /// A future that is already done: for snapshots with no asynchronous part.
    pub fn completed(outcome: SnapshotOutcome<H>) -> Self {
        Self {
            cancel: CancellationToken::new(),
            runtime: None,
            inner: Inner::Ready(outcome),
        }
    }

    /// Spawns `work` on `runtime`; `work` gets the cancellation token and
    /// must clean up its own unfinished objects when it fires.
    pub(crate) fn spawn<F>(
        runtime: &Handle,
        store: Arc<dyn ObjectStore>,
        work: impl FnOnce(CancellationToken) -> F,
    ) -> Self
    where
        F: Future<Output = Result<TaskOutput<H>>> + Send + 'static,
    {
        let cancel = CancellationToken::new();
        let join = runtime.spawn(work(cancel.clone()));
        Self {
            cancel,
            runtime: Some(runtime.clone()),
            inner: Inner::Running { join, store },
        }
    }

    /// Stops the snapshot and removes what it uploaded. Idempotent; a
    /// snapshot that already resolved is not affected.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// A token that cancels this snapshot when canceled, for the pending
    /// checkpoint to keep while someone else awaits the future.
    pub fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }
}

impl<H: Send + 'static> Future for SnapshotFuture<H> {
    type Output = Result<SnapshotOutcome<H>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            match &mut this.inner {
                Inner::Ready(_) => {
                    let Inner::Ready(outcome) = std::mem::replace(&mut this.inner, Inner::Done)
                    else {
                        unreachable!("matched Ready above");
                    };
                    return Poll::Ready(if this.cancel.is_cancelled() {
                        Err(SnapshotError::Cancelled)
                    } else {
                        Ok(outcome)
                    });
                }
                Inner::Running { join, store, .. } => {
                    let joined = ready!(Pin::new(join).poll(cx));
                    let result = joined.unwrap_or_else(|e| {
                        Err(SnapshotError::TaskFailed {
                            reason: e.to_string(),
                        })
                    });
                    let canceled = this.cancel.is_cancelled();
                    match result {
                        Ok(output) if canceled => {
                            // Finished just before the cancel was seen: its
                            // objects are orphans now.
                            let store = Arc::clone(store);
                            this.inner = Inner::Reaping(Box::pin(async move {
                                let _ = delete_all(&*store, &output.created).await;
                            }));
                        }
                        Ok(output) => {
                            this.inner = Inner::Done;
                            return Poll::Ready(Ok(output.outcome));
                        }
                        Err(e) => {
                            this.inner = Inner::Done;
                            return Poll::Ready(Err(if canceled {
                                SnapshotError::Cancelled
                            } else {
                                e
                            }));
                        }
                    }
                }
                Inner::Reaping(reap) => {
                    ready!(reap.as_mut().poll(cx));
                    this.inner = Inner::Done;
                    return Poll::Ready(Err(SnapshotError::Cancelled));
                }
                Inner::Done => {
                    return Poll::Ready(Err(SnapshotError::TaskFailed {
                        reason: "the snapshot future was polled after it resolved".to_owned(),
                    }));
                }
            }
        }
    }
}

impl<H: Send + 'static> Drop for SnapshotFuture<H> {
    fn drop(&mut self) {
        let Some(runtime) = &self.runtime else {
            return;
        };
        match std::mem::replace(&mut self.inner, Inner::Done) {
            Inner::Running { join, store } => {
                self.cancel.cancel();
                // Nobody will take the handle: whatever the task uploaded goes.
                runtime.spawn(async move {
                    if let Ok(Ok(output)) = join.await {
                        let _ = delete_all(&*store, &output.created).await;
                    }
                });
            }
            Inner::Reaping(reap) => {
                runtime.spawn(reap);
            }
            Inner::Ready(_) | Inner::Done => {}
        }
    }
}

impl<H: Send + 'static> std::fmt::Debug for SnapshotFuture<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.inner {
            Inner::Ready(_) => "ready",
            Inner::Running { .. } => "running",
            Inner::Reaping(_) => "canceling",
            Inner::Done => "done",
        };
        f.debug_struct("SnapshotFuture")
            .field("state", &state)
            .field("canceled", &self.cancel.is_cancelled())
            .finish()
    }
}
