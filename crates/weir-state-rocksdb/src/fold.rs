//! Folding final epochs into the database on a thread of their own, so that
//! neither a checkpoint's synchronous part nor the next epoch waits for
//! RocksDB to take the writes.
//!
//! The backend hands the overlays of newly final epochs to the [`Folder`] in
//! epoch order. Its thread replays each hand-off, oldest overlay first, as one
//! `WriteBatch` together with the new last final epoch (so the database always
//! holds exactly a final cut) and counts it as applied. Until the backend sees
//! every hand-off applied it keeps reading those overlays from memory, above a
//! database snapshot taken before the first of them was handed off: a read
//! then never sees a write twice (list appends are merges) nor misses one.
//! A hand-off that fails stops the thread; every later call reports it.
//!
//! Native checkpoints queue behind the hand-offs ([`Folder::checkpoint`]):
//! the thread creates one once it has written every epoch final when it was
//! asked for, and before any later one, so the checkpoint holds exactly that
//! cut while the backend's caller goes on at once.

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use rocksdb::checkpoint::Checkpoint;
use rocksdb::{WriteBatch, WriteOptions};
use weir_state::{StateError, StateId};
use weir_types::Epoch;

use crate::database::{self, Db};
use crate::error::{Result, RocksDbError};
use crate::key::prefix_end;
use crate::overlay::{Overlay, Write};

/// The overlays of epochs that just became final, oldest first.
struct HandOff {
    overlays: Vec<Arc<Overlay>>,
    /// Column family names by state id, as registered at the hand-off.
    cf_names: Vec<String>,
    last_final: Epoch,
}

/// What the thread is asked to do, in order.
enum Work {
    Fold(HandOff),
    /// Create a native checkpoint in `dir` and say how it went.
    Checkpoint {
        dir: PathBuf,
        done: Sender<Result<()>>,
    },
    /// Free overlays the backend no longer reads.
    Free(Vec<Arc<Overlay>>),
}

/// How far the thread got.
#[derive(Debug, Default)]
struct Applied {
    count: u64,
    failure: Option<String>,
}

#[derive(Debug, Default)]
struct Progress {
    applied: Mutex<Applied>,
    changed: Condvar,
}

impl Progress {
    fn lock(&self) -> MutexGuard<'_, Applied> {
        self.applied.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The background writer of one backend's final epochs.
pub(crate) struct Folder {
    work: Option<Sender<Work>>,
    progress: Arc<Progress>,
    thread: Option<JoinHandle<()>>,
    handed: u64,
}

impl Folder {
    /// Starts the thread that writes into `db`.
    pub fn start(db: Arc<Db>) -> Result<Self> {
        let (sender, receiver) = mpsc::channel();
        let progress = Arc::new(Progress::default());
        let shared = Arc::clone(&progress);
        let thread = std::thread::Builder::new()
            .name("weir-rocksdb-fold".to_owned())
            .spawn(move || {
                become_batch_thread();
                fold_all(&db, &receiver, &shared)
            })
            .map_err(RocksDbError::io("start the fold thread of", "the database"))?;
        Ok(Self {
            work: Some(sender),
            progress,
            thread: Some(thread),
            handed: 0,
        })
    }

    /// Queues `overlays` (oldest first) to be written with `last_final`.
    pub fn hand_off(
        &mut self,
        overlays: Vec<Arc<Overlay>>,
        cf_names: Vec<String>,
        last_final: Epoch,
    ) -> Result<()> {
        self.send(Work::Fold(HandOff {
            overlays,
            cf_names,
            last_final,
        }))?;
        self.handed += 1;
        Ok(())
    }

    /// Queues a native checkpoint into `dir` (which must not exist) after
    /// every hand-off so far; the receiver gets its outcome. A checkpoint
    /// that fails fails alone: folding goes on.
    pub fn checkpoint(&mut self, dir: PathBuf) -> Result<Receiver<Result<()>>> {
        let (done, outcome) = mpsc::channel();
        self.send(Work::Checkpoint { dir, done })?;
        Ok(outcome)
    }

    /// Frees `overlays` on the thread, after the work queued before them.
    /// Freeing an epoch's overlay costs about 100 ns a row: a large one
    /// freed by the backend's caller would stall a checkpoint's synchronous
    /// part or the next epoch's start. Where the thread has stopped they are
    /// freed here.
    pub fn free(&self, overlays: Vec<Arc<Overlay>>) {
        if let Some(queue) = &self.work {
            // A stopped thread hands the work back, and it is freed here.
            let _ = queue.send(Work::Free(overlays));
        }
    }

    fn send(&self, work: Work) -> Result<()> {
        self.check()?;
        let sent = self
            .work
            .as_ref()
            .is_some_and(|queue| queue.send(work).is_ok());
        if sent { Ok(()) } else { Err(self.stopped()) }
    }

    /// Why the thread no longer works.
    pub fn stopped(&self) -> RocksDbError {
        self.failure().unwrap_or_else(|| RocksDbError::FoldFailed {
            message: "the fold thread has stopped".to_owned(),
        })
    }

    /// Whether every hand-off is in the database; an error if one failed.
    pub fn all_applied(&self) -> Result<bool> {
        let applied = self.progress.lock();
        match &applied.failure {
            Some(message) => Err(failed(message)),
            None => Ok(applied.count == self.handed),
        }
    }

    /// Waits until every hand-off is in the database.
    pub fn wait(&self) -> Result<()> {
        let mut applied = self.progress.lock();
        loop {
            if let Some(message) = &applied.failure {
                return Err(failed(message));
            }
            if applied.count == self.handed {
                return Ok(());
            }
            applied = self
                .progress
                .changed
                .wait(applied)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Fails if a hand-off failed.
    fn check(&self) -> Result<()> {
        self.failure().map_or(Ok(()), Err)
    }

    fn failure(&self) -> Option<RocksDbError> {
        self.progress.lock().failure.as_deref().map(failed)
    }
}

impl Drop for Folder {
    /// Lets the thread write what it was handed, then joins it: the database
    /// closes with every final epoch in it.
    fn drop(&mut self) {
        drop(self.work.take());
        if let Some(thread) = self.thread.take() {
            // The thread catches its panics and records them; there is
            // nobody left to tell of anything else.
            let _ = thread.join();
        }
    }
}

/// Makes the calling thread a batch thread (Linux `SCHED_BATCH`): the same
/// share of the cores, but waking it does not preempt the thread that woke
/// it: it runs when a core is free or at the next scheduler tick.
/// Waking the fold thread is the last thing a finalize does, inside a
/// checkpoint's synchronous pause: as a normal thread, the scheduler often
/// ran it at once and the caller waited for a core (hand-offs of 1.5 to 5.7
/// ms, pause p99 3.8-5.6 ms at 10^6 keys on two cores). A lower priority
/// (nice 10) helped the pause as well but starved the folds behind busy
/// threads (full uploads of 10^7 keys twice as long).
#[cfg(target_os = "linux")]
fn become_batch_thread() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` outlives the call, which only reads it; on Linux a
    // thread id names that thread alone.
    #[allow(unsafe_code)]
    let result =
        unsafe { libc::sched_setscheduler(libc::gettid(), libc::SCHED_BATCH, &raw const param) };
    // Switching to SCHED_BATCH needs no privilege; if it fails anyway,
    // folding only keeps the normal policy.
    let _ = result;
}

#[cfg(not(target_os = "linux"))]
fn become_batch_thread() {}

fn failed(message: &str) -> RocksDbError {
    RocksDbError::FoldFailed {
        message: message.to_owned(),
    }
}

/// The thread's body: applies hand-offs, creates checkpoints and frees
/// overlays in order until the backend is dropped or a hand-off fails.
fn fold_all(db: &Db, work: &Receiver<Work>, progress: &Progress) {
    let mut options = WriteOptions::default();
    options.disable_wal(true);
    for item in work {
        let hand_off = match item {
            Work::Fold(hand_off) => hand_off,
            Work::Checkpoint { dir, done } => {
                // Nobody may be waiting any more: the outcome is theirs alone.
                let _ = done.send(create_checkpoint(db, &dir));
                continue;
            }
            Work::Free(overlays) => {
                drop(overlays);
                continue;
            }
        };
        // A panic must reach the backend as a failure: it may be waiting.
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
            fold_batch(db, &hand_off).and_then(|batch| {
                db.write_opt(batch, &options)
                    .map_err(RocksDbError::engine("write final epochs"))
            })
        }));
        let mut applied = progress.lock();
        let stop = match outcome {
            Ok(Ok(())) => {
                applied.count += 1;
                false
            }
            Ok(Err(err)) => {
                applied.failure = Some(err.to_string());
                true
            }
            Err(_) => {
                applied.failure = Some("the fold thread panicked".to_owned());
                true
            }
        };
        drop(applied);
        progress.changed.notify_all();
        if stop {
            return;
        }
    }
}

/// RocksDB's checkpoint of `db` in `dir`: memtables flushed, SST files
/// hard-linked when `dir` is on the same file system.
fn create_checkpoint(db: &Db, dir: &std::path::Path) -> Result<()> {
    std::panic::catch_unwind(AssertUnwindSafe(|| {
        Checkpoint::new(db)
            .and_then(|checkpoint| checkpoint.create_checkpoint(dir))
            .map_err(RocksDbError::engine("create checkpoint"))
    }))
    .unwrap_or_else(|_| {
        Err(RocksDbError::FoldFailed {
            message: "creating a checkpoint panicked".to_owned(),
        })
    })
}

/// The overlays of a hand-off, replayed oldest first into one batch, with
/// the new last final epoch.
fn fold_batch(db: &Db, hand_off: &HandOff) -> Result<WriteBatch> {
    let mut batch = WriteBatch::default();
    for overlay in &hand_off.overlays {
        for (id, state) in overlay.states() {
            let cf = column_family(db, &hand_off.cf_names, id)?;
            for prefix in state.cleared() {
                let end = prefix_end(prefix).ok_or(StateError::Corrupt {
                    what: "map row prefix",
                })?;
                batch.delete_range_cf(&cf, prefix, end.as_slice());
            }
            for (row, write) in state.writes() {
                match write {
                    Write::Put(value) => batch.put_cf(&cf, row, value),
                    Write::Delete => batch.delete_cf(&cf, row),
                    Write::Append(items) => batch.merge_cf(&cf, row, items),
                }
            }
        }
    }
    database::put_last_final(db, &mut batch, hand_off.last_final);
    Ok(batch)
}

fn column_family<'db>(
    db: &'db Db,
    cf_names: &[String],
    id: StateId,
) -> Result<Arc<rocksdb::BoundColumnFamily<'db>>> {
    cf_names
        .get(id.0 as usize)
        .and_then(|name| db.cf_handle(name))
        .ok_or_else(|| StateError::UnknownState(id).into())
}
