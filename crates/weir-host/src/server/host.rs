//! What all connections of a host share: the token, the subtasks' slots,
//! the runtime for background uploads, and activity for the idle timer.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use subtle::ConstantTimeEq;
use tokio::sync::watch;
use weir_types::{CheckpointId, OperatorUid, SubtaskIndex};

use super::slot::Slot;
use crate::error::{HostError, Result};
use crate::protocol::HostStatus;

/// A subtask's key in the host.
pub(crate) type SlotKey = (OperatorUid, SubtaskIndex);

/// A slot behind its mutex: one task uses a subtask at a time, and requests
/// of different connections for the same subtask are serialized.
pub(crate) type SharedSlot = Arc<Mutex<Slot>>;

/// The host's shared state.
pub(crate) struct Host {
    token: Vec<u8>,
    /// Where subtasks keep working files.
    pub(crate) work_dir: PathBuf,
    /// Runs uploads and acks in the background.
    pub(crate) runtime: tokio::runtime::Handle,
    slots: Mutex<BTreeMap<SlotKey, SharedSlot>>,
    /// Uploads in flight: a switch that cancels each.
    uploads: Mutex<HashMap<UploadKey, watch::Sender<bool>>>,
    acked: AtomicU64,
    failed: AtomicU64,
    last_failure: Mutex<Option<String>>,
    connections: AtomicUsize,
    last_active: Mutex<Instant>,
}

/// An upload in flight: checkpoint, operator, subtask.
pub(crate) type UploadKey = (CheckpointId, OperatorUid, SubtaskIndex);

impl Host {
    pub(crate) fn new(token: &str, work_dir: PathBuf, runtime: tokio::runtime::Handle) -> Self {
        Self {
            token: token.as_bytes().to_vec(),
            work_dir,
            runtime,
            slots: Mutex::new(BTreeMap::new()),
            uploads: Mutex::new(HashMap::new()),
            acked: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            last_failure: Mutex::new(None),
            connections: AtomicUsize::new(0),
            last_active: Mutex::new(Instant::now()),
        }
    }

    /// Whether `presented` is the job token, compared in constant time so
    /// the reply's timing says nothing about how close a guess was.
    pub(crate) fn authorizes(&self, presented: &str) -> bool {
        bool::from(presented.as_bytes().ct_eq(&self.token))
    }

    /// The slot of `key`, if the host holds one.
    pub(crate) fn slot(&self, key: &SlotKey) -> Option<SharedSlot> {
        lock(&self.slots).get(key).cloned()
    }

    /// The slot of `key`, created by `open` if the host holds none.
    pub(crate) fn slot_or_open(
        &self,
        key: SlotKey,
        open: impl FnOnce() -> Result<Slot>,
    ) -> Result<SharedSlot> {
        let mut slots = lock(&self.slots);
        if let Some(slot) = slots.get(&key) {
            return Ok(Arc::clone(slot));
        }
        let slot = Arc::new(Mutex::new(open()?));
        slots.insert(key, Arc::clone(&slot));
        Ok(slot)
    }

    /// Installs `slot` for `key`, retiring the slot it replaces.
    pub(crate) fn replace_slot(&self, key: SlotKey, slot: Slot) -> SharedSlot {
        let slot = Arc::new(Mutex::new(slot));
        let old = lock(&self.slots).insert(key, Arc::clone(&slot));
        if let Some(old) = old {
            lock(&old).retired = true;
        }
        slot
    }

    /// A directory for the working files of `key`'s subtask.
    pub(crate) fn slot_dir(&self, key: &SlotKey) -> PathBuf {
        self.work_dir.join(format!("{}-{}", key.0, key.1))
    }

    /// Registers an upload; returns the switch receiver that cancels it.
    pub(crate) fn start_upload(&self, key: UploadKey) -> watch::Receiver<bool> {
        let (sender, receiver) = watch::channel(false);
        lock(&self.uploads).insert(key, sender);
        receiver
    }

    /// Forgets a finished upload and counts its outcome.
    pub(crate) fn finish_upload(&self, key: &UploadKey, failure: Option<String>) {
        lock(&self.uploads).remove(key);
        match failure {
            None => {
                self.acked.fetch_add(1, Ordering::Relaxed);
            }
            Some(message) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                *lock(&self.last_failure) = Some(message);
            }
        }
        self.touch();
    }

    /// Cancels every upload of checkpoint `id`; returns how many.
    pub(crate) fn cancel_uploads(&self, id: CheckpointId) -> usize {
        let uploads = lock(&self.uploads);
        let mut canceled = 0;
        for (key, switch) in uploads.iter() {
            if key.0 == id {
                // A finished upload dropped its receiver; nothing to cancel.
                let _ = switch.send(true);
                canceled += 1;
            }
        }
        canceled
    }

    /// Uploads in flight.
    pub(crate) fn pending_uploads(&self) -> usize {
        lock(&self.uploads).len()
    }

    /// A connection opened.
    pub(crate) fn connection_opened(&self) {
        self.connections.fetch_add(1, Ordering::SeqCst);
        self.touch();
    }

    /// A connection closed.
    pub(crate) fn connection_closed(&self) {
        self.connections.fetch_sub(1, Ordering::SeqCst);
        self.touch();
    }

    /// Open connections.
    pub(crate) fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Records activity (a request, a connection, an upload finishing).
    pub(crate) fn touch(&self) {
        *lock(&self.last_active) = Instant::now();
    }

    /// When the host last did something.
    pub(crate) fn last_active(&self) -> Instant {
        *lock(&self.last_active)
    }

    /// Drops every slot (closing databases, removing their directories).
    pub(crate) fn drop_slots(&self) {
        let slots = std::mem::take(&mut *lock(&self.slots));
        drop(slots);
    }

    /// The host's status; waits for requests in progress on each slot.
    /// Slots whose lock is poisoned are left out.
    pub(crate) fn status(&self) -> HostStatus {
        let slots: Vec<SharedSlot> = lock(&self.slots).values().cloned().collect();
        let uploads: Vec<UploadKey> = lock(&self.uploads).keys().cloned().collect();
        let subtasks = slots
            .iter()
            .filter_map(|slot| {
                let slot = slot.lock().ok()?;
                let spec = crate::session::SubtaskSession::spec(&slot.subtask);
                let pending = uploads
                    .iter()
                    .filter(|k| k.1 == spec.uid && k.2 == spec.subtask)
                    .count();
                Some(slot.status(pending))
            })
            .collect();
        HostStatus {
            pid: std::process::id(),
            connections: self.connections(),
            subtasks,
            pending_uploads: uploads.len(),
            acked_uploads: self.acked.load(Ordering::Relaxed),
            failed_uploads: self.failed.load(Ordering::Relaxed),
            last_failure: lock(&self.last_failure).clone(),
        }
    }
}

/// Locks a mutex of the host's own bookkeeping. Those critical sections do
/// not panic, so a poisoned lock still holds consistent data.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Locks a slot; a slot whose lock was poisoned (a request panicked while
/// changing state) cannot be trusted.
pub(crate) fn lock_slot(slot: &SharedSlot) -> Result<MutexGuard<'_, Slot>> {
    slot.lock().map_err(|_| {
        HostError::StateLost(
            "a request on this subtask failed inside the state host; its state cannot be trusted"
                .into(),
        )
    })
}
