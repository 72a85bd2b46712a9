//! What all connections of a host share: the token, the generation and the
//! subtasks' slots, the uploads in flight, and the switch that stops the host.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use subtle::ConstantTimeEq;
use tokio::sync::watch;
use weir_coordinator::Tls;
use weir_types::{CheckpointId, OperatorUid, SubtaskIndex};

use super::slot::Slot;
use super::watchdog::ExitReason;
use crate::error::{HostError, Result};
use crate::protocol::{HostStatus, JobToken};

/// A subtask's key in the host.
pub(crate) type SlotKey = (OperatorUid, SubtaskIndex);

/// A slot behind its mutex: one task uses a subtask at a time, and requests
/// of different connections for the same subtask are serialized.
pub(crate) type SharedSlot = Arc<Mutex<Slot>>;

/// An upload in flight: checkpoint, operator, subtask.
pub(crate) type UploadKey = (CheckpointId, OperatorUid, SubtaskIndex);

/// Connections still in their handshake at once; more are closed unread, so
/// peers that never prove the token cannot pile up threads.
const MAX_HANDSHAKES: usize = 64;

/// Aborted checkpoints a host remembers (one a second at most, with a
/// one-second interval: a minute of them).
const REMEMBERED_ABORTS: usize = 64;

/// The host's shared state.
pub(crate) struct Host {
    token: JobToken,
    /// Where subtasks keep working files.
    pub(crate) work_dir: PathBuf,
    /// Runs uploads and acks in the background.
    pub(crate) runtime: tokio::runtime::Handle,
    /// Where the host listens on TCP, if it does.
    pub(crate) tcp_address: Option<String>,
    /// The job's TLS, for acks to an `https://` coordinator.
    pub(crate) tls: Option<Tls>,
    /// The newest generation served. Locked before `slots` whenever both are.
    generation: Mutex<u64>,
    slots: Mutex<BTreeMap<SlotKey, SharedSlot>>,
    /// Uploads in flight: a switch that cancels each.
    uploads: Mutex<HashMap<UploadKey, watch::Sender<bool>>>,
    /// Checkpoints the driver aborted lately, newest last: a barrier of one
    /// that arrives after its abort (a task granted it just before) uploads
    /// nothing.
    aborted: Mutex<VecDeque<CheckpointId>>,
    /// Signaled whenever an upload finishes.
    upload_finished: Condvar,
    acked: AtomicU64,
    failed: AtomicU64,
    /// State bytes (request and reply payloads) exchanged over TCP.
    pub(crate) tcp_payload_bytes: AtomicU64,
    last_failure: Mutex<Option<String>>,
    connections: Arc<AtomicUsize>,
    handshakes: Arc<AtomicUsize>,
    stop: Mutex<Option<ExitReason>>,
    stop_requested: Condvar,
    stopping: AtomicBool,
}

impl Host {
    pub(crate) fn new(
        token: JobToken,
        work_dir: PathBuf,
        runtime: tokio::runtime::Handle,
        tcp_address: Option<String>,
        tls: Option<Tls>,
    ) -> Self {
        Self {
            token,
            work_dir,
            runtime,
            tcp_address,
            tls,
            generation: Mutex::new(0),
            slots: Mutex::new(BTreeMap::new()),
            uploads: Mutex::new(HashMap::new()),
            aborted: Mutex::new(VecDeque::new()),
            upload_finished: Condvar::new(),
            acked: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            tcp_payload_bytes: AtomicU64::new(0),
            last_failure: Mutex::new(None),
            connections: Arc::new(AtomicUsize::new(0)),
            handshakes: Arc::new(AtomicUsize::new(0)),
            stop: Mutex::new(None),
            stop_requested: Condvar::new(),
            stopping: AtomicBool::new(false),
        }
    }

    /// Whether `presented` is the job token, compared in constant time so
    /// the reply's timing says nothing about how close a guess was.
    pub(crate) fn authorizes(&self, presented: &JobToken) -> bool {
        bool::from(
            presented
                .expose()
                .as_bytes()
                .ct_eq(self.token.expose().as_bytes()),
        )
    }

    /// Serves `generation` from now on. An older one is refused
    /// (`StateLost`: its tasks are stale); a newer one retires and drops
    /// every slot, which all belong to older generations.
    pub(crate) fn enter_generation(&self, generation: u64) -> Result<()> {
        let dropped = {
            let mut current = lock(&self.generation);
            check_generation(*current, generation)?;
            if generation == *current {
                return Ok(());
            }
            *current = generation;
            std::mem::take(&mut *lock(&self.slots))
        };
        if !dropped.is_empty() {
            eprintln!(
                "weir-host: generation {generation} starts; dropping {} subtasks of older \
                 generations",
                dropped.len()
            );
        }
        retire(dropped.into_values());
        Ok(())
    }

    /// The slot of `key`, if the host holds one.
    pub(crate) fn slot(&self, key: &SlotKey) -> Option<SharedSlot> {
        lock(&self.slots).get(key).cloned()
    }

    /// The slot of `key`, created by `open` if the host holds none, while
    /// the host still serves `generation`.
    pub(crate) fn slot_or_open(
        &self,
        generation: u64,
        key: SlotKey,
        open: impl FnOnce() -> Result<Slot>,
    ) -> Result<SharedSlot> {
        let current = lock(&self.generation);
        check_generation(*current, generation)?;
        let mut slots = lock(&self.slots);
        if let Some(slot) = slots.get(&key) {
            return Ok(Arc::clone(slot));
        }
        let slot = Arc::new(Mutex::new(open()?));
        slots.insert(key, Arc::clone(&slot));
        Ok(slot)
    }

    /// Installs `slot` for `key`, retiring the slot it replaces, while the
    /// host still serves `generation`.
    pub(crate) fn replace_slot(
        &self,
        generation: u64,
        key: SlotKey,
        slot: Slot,
    ) -> Result<SharedSlot> {
        let slot = Arc::new(Mutex::new(slot));
        let old = {
            let current = lock(&self.generation);
            check_generation(*current, generation)?;
            lock(&self.slots).insert(key, Arc::clone(&slot))
        };
        retire(old);
        Ok(slot)
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
        match failure {
            None => {
                self.acked.fetch_add(1, Ordering::Relaxed);
            }
            Some(message) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                *lock(&self.last_failure) = Some(message);
            }
        }
        lock(&self.uploads).remove(key);
        self.upload_finished.notify_all();
    }

    /// Checkpoint `id` will never complete: cancels its uploads as
    /// [`cancel_uploads`](Self::cancel_uploads) does, and remembers it, so a
    /// barrier of it taken later uploads nothing. Returns how many were
    /// canceled.
    pub(crate) fn abort_checkpoint(&self, id: CheckpointId, limit: Duration) -> usize {
        {
            let mut aborted = lock(&self.aborted);
            if aborted.len() == REMEMBERED_ABORTS {
                aborted.pop_front();
            }
            aborted.push_back(id);
        }
        self.cancel_uploads(Some(id), limit)
    }

    /// Whether the driver aborted checkpoint `id` lately.
    pub(crate) fn was_aborted(&self, id: CheckpointId) -> bool {
        lock(&self.aborted).contains(&id)
    }

    /// Flips the cancel switch of upload `key`, without waiting for it.
    pub(crate) fn cancel_upload(&self, key: &UploadKey) {
        if let Some(switch) = lock(&self.uploads).get(key) {
            let _ = switch.send(true);
        }
    }

    /// Cancels the uploads of checkpoint `id` (every upload if `None`) and
    /// waits up to `limit` until they stopped and deleted what they wrote.
    /// Returns how many were canceled.
    pub(crate) fn cancel_uploads(&self, id: Option<CheckpointId>, limit: Duration) -> usize {
        let deadline = Instant::now() + limit;
        let mut uploads = lock(&self.uploads);
        let canceled: Vec<UploadKey> = uploads
            .iter()
            .filter(|(key, _)| id.is_none_or(|id| key.0 == id))
            .map(|(key, switch)| {
                // An upload past its cancel point dropped its receiver; it
                // finishes on its own.
                let _ = switch.send(true);
                key.clone()
            })
            .collect();
        while canceled.iter().any(|key| uploads.contains_key(key)) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                eprintln!("weir-host: canceled uploads did not stop within {limit:?}");
                break;
            }
            uploads = self
                .upload_finished
                .wait_timeout(uploads, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        canceled.len()
    }

    /// Counts an open connection until the returned guard is dropped.
    pub(crate) fn connection(&self) -> Tally {
        Tally::enter(&self.connections)
    }

    /// Counts a connection in its handshake until the guard is dropped;
    /// `None` if too many are already.
    pub(crate) fn handshake(&self) -> Option<Tally> {
        let tally = Tally::enter(&self.handshakes);
        (tally.count() <= MAX_HANDSHAKES).then_some(tally)
    }

    /// Asks the host to exit (the first reason wins).
    pub(crate) fn request_stop(&self, reason: ExitReason) {
        let mut stop = lock(&self.stop);
        if stop.is_none() {
            *stop = Some(reason);
        }
        self.stop_requested.notify_all();
    }

    /// Waits up to `limit` for a stop request.
    pub(crate) fn wait_for_stop(&self, limit: Duration) -> Option<ExitReason> {
        let stop = lock(&self.stop);
        let (stop, _) = self
            .stop_requested
            .wait_timeout_while(stop, limit, |stop| stop.is_none())
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *stop
    }

    /// Tells the accept loops to stop taking connections.
    pub(crate) fn set_stopping(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Whether the host is on its way out.
    pub(crate) fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Retires every slot and drops it (closing its database, removing its
    /// directory) once no connection holds it, waiting up to `wait` in all
    /// for connections still using one. The host removes its working files
    /// next: a database still open at that point could write into them
    /// again (a memtable flushed while the files were being removed).
    pub(crate) fn drop_slots(&self, wait: Duration) {
        let slots: Vec<SharedSlot> = std::mem::take(&mut *lock(&self.slots))
            .into_values()
            .collect();
        retire(slots.iter().cloned());
        let deadline = Instant::now() + wait;
        for slot in slots {
            // Retired slots are in no map: no connection takes them anew.
            while Arc::strong_count(&slot) > 1 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
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
            tcp_address: self.tcp_address.clone(),
            generation: *lock(&self.generation),
            connections: self.connections.load(Ordering::SeqCst),
            subtasks,
            pending_uploads: uploads.len(),
            acked_uploads: self.acked.load(Ordering::Relaxed),
            failed_uploads: self.failed.load(Ordering::Relaxed),
            tcp_payload_bytes: self.tcp_payload_bytes.load(Ordering::Relaxed),
            last_failure: lock(&self.last_failure).clone(),
        }
    }
}

fn check_generation(current: u64, wanted: u64) -> Result<()> {
    if wanted < current {
        return Err(HostError::StateLost(format!(
            "the task belongs to generation {wanted} of the job, but this state host serves \
             generation {current}; the job restarted since the task was planned"
        )));
    }
    Ok(())
}

/// Marks slots retired, so connections still holding them stop using them.
fn retire(slots: impl IntoIterator<Item = SharedSlot>) {
    for slot in slots {
        lock(&slot).retired = true;
    }
}

/// One member of a count, for as long as it lives: the count stays right
/// whichever way its holder ends (error, panic, or return).
pub(crate) struct Tally {
    count: Arc<AtomicUsize>,
    now: usize,
}

impl Tally {
    fn enter(count: &Arc<AtomicUsize>) -> Self {
        let now = count.fetch_add(1, Ordering::SeqCst) + 1;
        Self {
            count: Arc::clone(count),
            now,
        }
    }

    /// The count right after this member entered.
    fn count(&self) -> usize {
        self.now
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::SeqCst);
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
