//! What the driver tells the job's owner, and the queue it waits in.
//!
//! Deleting a subsumed checkpoint waits in the same queue as the event that
//! announces it, behind the completion that subsumed it: it runs only once
//! the owner has taken both, so an owner that has not yet heard of the new
//! checkpoint never restores from a deleted one.

use std::collections::VecDeque;
use std::sync::Mutex;

use tokio::sync::Notify;
use weir_checkpoint::coordinator::AbortReason;
use weir_checkpoint::{CheckpointKind, SubsumeDecision};
use weir_types::{CheckpointId, Epoch};

/// One thing the job's owner (the PySpark driver) acts on. Every variant
/// asks for an action or a report; none is noise to skip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverEvent {
    /// A checkpoint or savepoint started: it takes the next final epoch as
    /// its cut, so run a barrier-only epoch if no data epoch follows.
    CheckpointTriggered {
        /// The checkpoint.
        id: CheckpointId,
        /// Checkpoint or savepoint.
        kind: CheckpointKind,
    },
    /// Send barrier `(id, cut)` with the next task of every stateful
    /// subtask; they upload their state under `storage`.
    BarrierInjected {
        /// The checkpoint.
        id: CheckpointId,
        /// Checkpoint or savepoint.
        kind: CheckpointKind,
        /// The epoch the barrier follows.
        cut: Epoch,
        /// Where subtasks upload: the job directory for a checkpoint, the
        /// savepoint's own fresh directory for a savepoint.
        storage: String,
    },
    /// The checkpoint or savepoint at `path` is complete: tell the
    /// listeners; on a checkpoint, sinks publish output up to `cut`.
    CheckpointCompleted {
        /// The checkpoint.
        id: CheckpointId,
        /// Checkpoint or savepoint.
        kind: CheckpointKind,
        /// Its cut.
        cut: Epoch,
        /// Its directory: what a restore from it is given.
        path: String,
    },
    /// These checkpoints left retention and are deleted (after this event
    /// is taken): never restore from them.
    CheckpointSubsumed {
        /// The checkpoints.
        ids: Vec<CheckpointId>,
    },
    /// The checkpoint or savepoint will never complete: cancel its uploads
    /// in the hosts; what it uploaded is deleted.
    CheckpointAborted {
        /// The checkpoint.
        id: CheckpointId,
        /// Checkpoint or savepoint.
        kind: CheckpointKind,
        /// Why.
        reason: AbortReason,
    },
    /// More consecutive checkpoint failures than tolerated: restart the job
    /// from its latest completed checkpoint.
    JobFailed {
        /// The last failure.
        reason: AbortReason,
        /// Consecutive failures, the last one included.
        consecutive_failures: u32,
        /// The checkpoint to restart from, if any completed.
        latest_completed: Option<CheckpointId>,
    },
    /// Deleting old checkpoint files failed; they stay until the next run
    /// recovers the job directory. Report it.
    CleanupFailed {
        /// The storage's explanation.
        message: String,
    },
    /// Another run took the job directory over, or this one could not renew
    /// its lease: nothing more is written, and the job must fail.
    LeaseLost {
        /// What happened.
        message: String,
    },
}

/// An event and the deletion that waits for it to be taken.
#[derive(Debug)]
pub(crate) struct Queued {
    pub(crate) event: Option<DriverEvent>,
    pub(crate) cleanup: Option<SubsumeDecision>,
    /// A report about the run, not about a generation: a restart keeps it.
    report: bool,
}

/// The events of the current generation not yet taken by the owner.
#[derive(Debug, Default)]
struct Queue {
    generation: u64,
    items: VecDeque<Queued>,
}

/// The events not yet taken by the owner.
#[derive(Debug)]
pub(crate) struct Outbox {
    queue: Mutex<Queue>,
    ready: Notify,
}

impl Outbox {
    pub(crate) fn new(generation: u64) -> Self {
        Self {
            queue: Mutex::new(Queue {
                generation,
                items: VecDeque::new(),
            }),
            ready: Notify::new(),
        }
    }

    /// Queues an event of `generation`; one of an earlier generation is
    /// dropped, since the owner restarted past it.
    pub(crate) fn push(
        &self,
        generation: u64,
        event: Option<DriverEvent>,
        cleanup: Option<SubsumeDecision>,
    ) {
        let mut queue = self.lock();
        if queue.generation != generation {
            return;
        }
        queue.items.push_back(Queued {
            event,
            cleanup,
            report: false,
        });
        drop(queue);
        self.ready.notify_one();
    }

    /// Queues a report about the run (a failed cleanup, a lost lease): it
    /// belongs to no generation.
    pub(crate) fn report(&self, event: DriverEvent) {
        let mut queue = self.lock();
        queue.items.push_back(Queued {
            event: Some(event),
            cleanup: None,
            report: true,
        });
        drop(queue);
        self.ready.notify_one();
    }

    /// Everything queued, oldest first; waits up to `wait` for the first.
    pub(crate) async fn take(&self, wait: std::time::Duration) -> Vec<Queued> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let taken: Vec<Queued> = self.lock().items.drain(..).collect();
            if !taken.is_empty() || tokio::time::Instant::now() >= deadline {
                return taken;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.lock().items.drain(..).collect();
            }
        }
    }

    /// Starts `generation`: drops what the generation that ended queued
    /// (recovery decides what its deletions would have done); reports
    /// about the run stay.
    pub(crate) fn restart(&self, generation: u64) {
        let mut queue = self.lock();
        queue.generation = generation;
        queue.items.retain(|q| q.report);
    }

    /// Takes the queued deletions, leaving the events for the owner.
    pub(crate) fn take_cleanups(&self) -> Vec<SubsumeDecision> {
        self.lock()
            .items
            .iter_mut()
            .filter_map(|q| q.cleanup.take())
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        // A panic while holding this lock leaves a valid queue behind.
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
