//! The async driver: a timer task feeding `on_tick`, the HTTP server feeding
//! acks, declines and owner claims, the lease renewal, and the execution of
//! the coordinator's effects.
//!
//! The coordinator sits behind one async mutex and is only ever held for a
//! synchronous decision; storage I/O runs in tracked tasks that report
//! back, so a restart and the shutdown can wait for them. Every run of
//! effects carries the generation it was decided in: a restart starts a new
//! generation, and what the old one still had in flight changes nothing.
//! Lock order: the timeline, then the coordinator.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Mutex, Notify};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use weir_checkpoint::coordinator::{
    CheckpointCoordinator, CheckpointStatsHistory, CoordinatorEffect, CoordinatorError,
    CoordinatorOptions, EpochCut, ExternalizedCleanup, Timestamp,
};
use weir_checkpoint::{
    CheckpointError, CheckpointMetadata, CheckpointStorage, JobLease, JobTimeline,
    ResolvedSnapshot, StorageLocation, SubsumeDecision,
};
use weir_types::{CheckpointId, OperatorUid, SubtaskIndex};

use crate::clock::DriverClock;
use crate::error::{DriverError, Result};
use crate::events::{DriverEvent, Outbox};
use crate::lease;
use crate::options::{DriverOptions, ServerOptions};
use crate::owners::{ClaimOutcome, OwnerClaim, OwnerRegistry};
use crate::progress::{GrantedBarrier, ProgressAnswer, ProgressOutcome, ProgressReport};
use crate::server::{self, ConnectionLimits};
use crate::store::{JobStore, TimelineState};
use crate::token::JobToken;

/// The coordinator and the generation its decisions belong to.
pub(crate) struct Run {
    pub(crate) coordinator: CheckpointCoordinator,
    pub(crate) generation: u64,
    /// The run is shutting down: no `_metadata` write starts any more.
    closing: bool,
}

/// State shared by the timer, the lease renewal, the HTTP connections and
/// the handle.
pub(crate) struct Shared {
    pub(crate) run: Mutex<Run>,
    pub(crate) token: JobToken,
    pub(crate) max_body_bytes: usize,
    clock: DriverClock,
    wake: Notify,
    outbox: Outbox,
    store: JobStore,
    timeline: Mutex<TimelineState>,
    pub(crate) lease: Mutex<Option<JobLease>>,
    owners: std::sync::Mutex<OwnerRegistry>,
    /// `_metadata` writes in flight.
    writes: TaskTracker,
    /// Deletions in flight.
    cleanups: TaskTracker,
    /// Cancelled when the lease is lost: nothing is written or deleted after.
    pub(crate) fenced: CancellationToken,
    /// The coordinator runs short of reserved ids.
    pub(crate) ids_wanted: Notify,
    pub(crate) renew_every: Duration,
    pub(crate) stale_after: Duration,
    id_block: u64,
}

impl Shared {
    pub(crate) fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Carries out `effects`, decided by `run` (whose lock the caller still
    /// holds, so a restart or shutdown sees them all), in order: storage
    /// work in tracked tasks, the rest to the owner; wakes the timer, since
    /// its facts changed. Once the run is closing, no `_metadata` write
    /// starts any more.
    pub(crate) fn dispatch(self: &Arc<Self>, run: &Run, effects: Vec<CoordinatorEffect>) {
        if effects.is_empty() {
            return;
        }
        let (store, generation) = (&self.store, run.generation);
        for effect in effects {
            let event = match effect {
                CoordinatorEffect::Triggered { id, kind } => {
                    DriverEvent::CheckpointTriggered { id, kind }
                }
                CoordinatorEffect::InjectBarrier { id, kind, cut } => {
                    DriverEvent::BarrierInjected {
                        id,
                        kind,
                        cut,
                        storage: store.upload_url(id, kind),
                    }
                }
                CoordinatorEffect::WriteMetadata(metadata) => {
                    if !run.closing {
                        self.writes
                            .spawn(Arc::clone(self).write(generation, *metadata));
                    }
                    continue;
                }
                CoordinatorEffect::NotifyComplete { id, kind, cut } => {
                    let path = store.completed_path(id, kind);
                    store.forget(id);
                    DriverEvent::CheckpointCompleted {
                        id,
                        kind,
                        cut,
                        path,
                    }
                }
                CoordinatorEffect::Subsume(decision) => {
                    let event =
                        (!decision.discard.is_empty()).then(|| DriverEvent::CheckpointSubsumed {
                            ids: decision.discard.clone(),
                        });
                    self.outbox.push(generation, event, Some(decision));
                    continue;
                }
                CoordinatorEffect::Aborted { id, kind, reason } => {
                    let savepoint = store.forget(id);
                    let shared = Arc::clone(self);
                    self.cleanups.spawn(async move {
                        if !shared.fenced.is_cancelled() {
                            let result = shared.store.discard(id, savepoint).await;
                            shared.report_cleanup(result);
                        }
                    });
                    DriverEvent::CheckpointAborted { id, kind, reason }
                }
                CoordinatorEffect::FailJob {
                    consecutive_failures,
                    reason,
                    latest_completed,
                } => DriverEvent::JobFailed {
                    reason,
                    consecutive_failures,
                    latest_completed,
                },
            };
            self.outbox.push(generation, Some(event), None);
        }
        self.wake.notify_one();
    }

    /// Publishes `metadata` and records it on the lineage; only then is it
    /// complete for the coordinator.
    async fn write(self: Arc<Self>, generation: u64, metadata: CheckpointMetadata) {
        let id = metadata.checkpoint_id;
        let published = match self.fenced.is_cancelled() {
            true => Err(self.lease_lost("the lease was lost before the metadata was written")),
            false => self.store.publish(&metadata).await,
        };
        let mut state = self.timeline.lock().await;
        if state.generation != generation {
            // A restart began: its recovery decides what this checkpoint is.
            return;
        }
        let recorded = match published {
            Ok(()) => self.store.record(&mut state.timeline, &metadata).await,
            Err(err) => Err(err),
        };
        let mut run = self.run.lock().await;
        let now = self.now();
        let (effects, abandoned) = match recorded {
            Ok(abandoned) => (run.coordinator.on_metadata_stored(now, id), abandoned),
            Err(err) => (
                run.coordinator.on_metadata_failed(now, id, err.to_string()),
                Vec::new(),
            ),
        };
        self.dispatch(&run, effects);
        drop(run);
        drop(state);
        if !abandoned.is_empty() {
            let event = DriverEvent::CheckpointSubsumed {
                ids: abandoned.clone(),
            };
            let decision = SubsumeDecision {
                discard: abandoned,
                shared_files: Vec::new(),
            };
            self.outbox.push(generation, Some(event), Some(decision));
        }
    }

    /// Deletes what `decision` names, after dropping it from the lineage.
    async fn cleanup(self: Arc<Self>, decision: SubsumeDecision) {
        if self.fenced.is_cancelled() {
            return;
        }
        let recorded = if decision.discard.is_empty() {
            Ok(())
        } else {
            let mut state = self.timeline.lock().await;
            state.timeline.on_subsumed(&decision.discard).await
        };
        let result = match recorded {
            Ok(()) => self.store.storage.apply(&decision).await,
            Err(err) => Err(err),
        };
        self.report_cleanup(result.map_err(DriverError::from));
    }

    fn report_cleanup(&self, result: Result<()>) {
        if let Err(err) = result {
            self.outbox.report(DriverEvent::CleanupFailed {
                message: err.to_string(),
            });
        }
    }

    /// Hears `report` (see [`CheckpointCoordinator::on_progress`]).
    pub(crate) async fn report_progress(
        self: &Arc<Self>,
        report: ProgressReport,
    ) -> ProgressOutcome {
        let progress = &report.progress;
        let known = self
            .owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .has_subtask(&progress.uid, progress.subtask);
        if !known {
            return ProgressOutcome::UnknownSubtask;
        }
        let mut run = self.run.lock().await;
        if report.generation != run.generation {
            return ProgressOutcome::WrongGeneration {
                current: run.generation,
            };
        }
        let (grants, effects) = run.coordinator.on_progress(progress);
        self.dispatch(&run, effects);
        // The report may show the run's first processed epoch, which lets
        // periodic checkpoints start: the timer looks again.
        self.wake.notify_one();
        let barriers = grants
            .into_iter()
            .map(|grant| GrantedBarrier {
                storage: self.store.upload_url(grant.id, grant.kind),
                grant,
            })
            .collect();
        ProgressOutcome::Answered(ProgressAnswer { barriers })
    }

    pub(crate) fn claim_owner(&self, claim: OwnerClaim) -> ClaimOutcome {
        self.owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .claim(claim)
    }

    /// The reservation to ask for now, if ids run short.
    pub(crate) async fn ids_to_reserve(&self) -> Option<CheckpointId> {
        let run = self.run.lock().await;
        let coordinator = &run.coordinator;
        lease::reservation(coordinator.next_id(), coordinator.ids_left(), self.id_block)
    }

    pub(crate) async fn on_ids_reserved(&self, until: CheckpointId) {
        self.run.lock().await.coordinator.on_ids_reserved(until);
        self.wake.notify_one();
    }

    /// The lease is lost: nothing more is written or deleted, nothing in
    /// flight completes, and the owner hears of it.
    pub(crate) async fn fence(&self, message: String) {
        if self.fenced.is_cancelled() {
            return;
        }
        self.fenced.cancel();
        self.run.lock().await.coordinator.suspend(self.now());
        self.outbox.report(DriverEvent::LeaseLost { message });
    }

    fn lease_lost(&self, reason: &str) -> DriverError {
        CheckpointError::LeaseLost {
            job_dir: self.store.storage.job_dir().url().to_owned(),
            reason: reason.to_owned(),
        }
        .into()
    }
}

/// A running coordinator: its timer, HTTP server and lease renewal, stopped
/// by [`shutdown`](Self::shutdown) (or, without releasing the lease, on drop).
pub struct CoordinatorDriver {
    shared: Arc<Shared>,
    addr: SocketAddr,
    address: String,
    retained: NonZeroUsize,
    cleanup: ExternalizedCleanup,
    cleanup_grace: Duration,
    stop: CancellationToken,
    tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
    restarting: Mutex<()>,
    closed: AtomicBool,
    generation: AtomicU64,
}

impl CoordinatorDriver {
    /// Starts a run: listens per `server`, takes the job directory's lease
    /// (failing fast with [`CheckpointError::LeaseHeld`] if another run
    /// holds it), reserves ids, recovers the job directory for a run that
    /// starts from `options.restored`, and starts triggering.
    pub async fn start(options: DriverOptions, server: ServerOptions) -> Result<Self> {
        let config = options.config.clone().validate()?;
        let retained = usize::try_from(config.retained)
            .ok()
            .and_then(NonZeroUsize::new)
            .ok_or(CoordinatorError::NothingRetained)?;
        let location = StorageLocation::parse(&options.checkpoint_dir, &options.storage_options)?;
        let storage = CheckpointStorage::filesystem(&location, options.job_id.clone())?;
        let store = JobStore::new(
            storage,
            options.storage_options.clone(),
            options.savepoint_dir.clone(),
        );
        let restored = match &options.restored {
            Some(path) => Some((path.clone(), store.open_restored(path).await?)),
            None => None,
        };
        let listener =
            TcpListener::bind(server.bind)
                .await
                .map_err(|source| DriverError::Bind {
                    addr: server.bind,
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| DriverError::Bind {
            addr: server.bind,
            source,
        })?;
        let address = server.advertised_url(addr)?;

        let clock = DriverClock::start();
        let me = lease::this_run();
        let taken = store.storage.checkpoint_dirs().await?.last().copied();
        let min_next = [
            taken,
            restored.as_ref().map(|(_, s)| s.metadata().checkpoint_id),
        ]
        .into_iter()
        .flatten()
        .map(|id| CheckpointId(id.0.saturating_add(1)))
        .max()
        .unwrap_or(CheckpointId(1));
        let lease = JobLease::acquire(
            store.storage.job_dir(),
            me.clone(),
            options.lease,
            clock.now().0,
            min_next,
            |holder| lease::liveness(holder, &me),
        )
        .await?;
        let recovered = async {
            let source = store.restore_source(as_restored(&restored)).await?;
            let (timeline, retention) =
                JobTimeline::recover(&store.storage, &source, retained).await?;
            let coordinator = CheckpointCoordinator::new(CoordinatorOptions {
                job_id: options.job_id.clone(),
                config: config.clone(),
                operators: options.operators.clone(),
                first_checkpoint_id: lease.first_id(),
                reserved_until: lease.reserved_until(),
                started_at: clock.now(),
                history: options.history,
                retention: Some(retention),
            })?;
            Ok::<_, DriverError>((timeline, coordinator))
        }
        .await;
        let (timeline, coordinator) = match recovered {
            Ok(started) => started,
            Err(err) => {
                // The reason it failed matters more than whether the release
                // worked; an unreleased lease goes stale on its own.
                let _ = lease.release(clock.now().0).await;
                return Err(err);
            }
        };
        let parallelism = options
            .operators
            .iter()
            .map(|op| (op.uid.clone(), op.parallelism))
            .collect();
        let shared = Arc::new(Shared {
            run: Mutex::new(Run {
                coordinator,
                generation: 1,
                closing: false,
            }),
            token: server.token.clone(),
            max_body_bytes: server.max_body_bytes,
            clock,
            wake: Notify::new(),
            outbox: Outbox::new(1),
            store,
            timeline: Mutex::new(TimelineState {
                generation: 1,
                timeline,
            }),
            lease: Mutex::new(Some(lease)),
            owners: std::sync::Mutex::new(OwnerRegistry::new(1, parallelism)),
            writes: TaskTracker::new(),
            cleanups: TaskTracker::new(),
            fenced: CancellationToken::new(),
            ids_wanted: Notify::new(),
            renew_every: options.renew_every(),
            stale_after: options.lease.stale_after,
            id_block: options.lease.id_block,
        });
        let stop = CancellationToken::new();
        let limits = ConnectionLimits {
            max_connections: server.max_connections.max(1),
            header_read_timeout: server.header_read_timeout,
            tls: server
                .tls
                .as_ref()
                .map(|tls| TlsAcceptor::from(tls.server_config())),
        };
        let tasks = vec![
            tokio::spawn(run_timer(Arc::clone(&shared), stop.clone())),
            tokio::spawn(server::serve(
                listener,
                Arc::clone(&shared),
                limits,
                stop.clone(),
            )),
            tokio::spawn(lease::renew_until_stopped(
                Arc::clone(&shared),
                stop.clone(),
            )),
        ];
        Ok(Self {
            shared,
            addr,
            address,
            retained,
            cleanup: config.externalized_cleanup,
            cleanup_grace: options.cleanup_grace,
            stop,
            tasks: std::sync::Mutex::new(tasks),
            restarting: Mutex::new(()),
            closed: AtomicBool::new(false),
            generation: AtomicU64::new(1),
        })
    }

    /// Where the HTTP server listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL executors send acks and claims to.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The current generation: 1 for the first run, one more per restart.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Fails over: drops everything in flight (late acks are discarded and
    /// events not yet taken are dropped), waits for `_metadata` writes and
    /// deletions, recovers the job directory for a run continuing from
    /// `restored` (which retention then keeps), and starts a new generation
    /// with no state owners. Ids continue. Returns the new generation.
    pub async fn restart(&self, restored: Option<&str>) -> Result<u64> {
        let _one_at_a_time = self.restarting.lock().await;
        self.ensure_open()?;
        let shared = &self.shared;
        if shared.fenced.is_cancelled() {
            return Err(shared.lease_lost("the run lost its lease and cannot restart"));
        }
        let snapshot = match restored {
            Some(path) => Some((path.to_owned(), shared.store.open_restored(path).await?)),
            None => None,
        };
        let generation = {
            let mut state = shared.timeline.lock().await;
            let mut run = shared.run.lock().await;
            let generation = run.generation + 1;
            run.generation = generation;
            state.generation = generation;
            run.coordinator.suspend(shared.now());
            shared.outbox.restart(generation);
            generation
        };
        self.generation.store(generation, Ordering::SeqCst);
        shared
            .owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .next_generation(generation);
        for location in shared.store.forget_all() {
            let owned = Arc::clone(shared);
            shared.cleanups.spawn(async move {
                let result = owned.store.discard_savepoint(&location).await;
                owned.report_cleanup(result);
            });
        }
        self.settle().await;
        let mut state = shared.timeline.lock().await;
        if shared.fenced.is_cancelled() {
            return Err(shared.lease_lost("the run lost its lease while restarting"));
        }
        let source = shared.store.restore_source(as_restored(&snapshot)).await?;
        let (timeline, retention) =
            JobTimeline::recover(&shared.store.storage, &source, self.retained).await?;
        state.timeline = timeline;
        shared
            .run
            .lock()
            .await
            .coordinator
            .resume(shared.now(), retention);
        drop(state);
        shared.wake.notify_one();
        Ok(generation)
    }

    /// Epoch `cut.epoch` succeeded; a triggered checkpoint may take it as its cut.
    pub async fn epoch_final(&self, cut: EpochCut) -> Result<()> {
        self.ensure_open()?;
        let now = self.shared.now();
        let mut run = self.shared.run.lock().await;
        let mut effects = run.coordinator.on_epoch_final(cut);
        // The first final epoch of a run lets periodic checkpoints start. One
        // overdue by then (the first epoch started hosts and workers) starts
        // before the next epoch does, so it can cut at this one.
        effects.extend(run.coordinator.on_tick(now));
        self.shared.dispatch(&run, effects);
        self.shared.wake.notify_one();
        Ok(())
    }

    /// Epochs about to run in one Spark job, with what a checkpoint cut
    /// after each records (see [`CheckpointCoordinator::on_epochs_planned`]).
    pub async fn epochs_planned(&self, cuts: Vec<EpochCut>) -> Result<()> {
        self.ensure_open()?;
        let mut run = self.shared.run.lock().await;
        let effects = run.coordinator.on_epochs_planned(cuts);
        self.shared.dispatch(&run, effects);
        Ok(())
    }

    /// The job is idle after its newest final epoch until a barrier arrives:
    /// a checkpoint waiting for a cut takes that epoch (see
    /// [`CheckpointCoordinator::cut_at_last_final`]), and its barrier is among
    /// the events before this returns.
    pub async fn cut_at_last_final(&self) -> Result<()> {
        self.ensure_open()?;
        let mut run = self.shared.run.lock().await;
        let effects = run.coordinator.cut_at_last_final();
        self.shared.dispatch(&run, effects);
        Ok(())
    }

    /// Asks for a checkpoint ahead of the interval (see
    /// [`CheckpointCoordinator::request_checkpoint`]): a bounded job whose
    /// input ended publishes its last output with it instead of waiting up to
    /// an interval.
    pub async fn request_checkpoint(&self) -> Result<()> {
        self.ensure_open()?;
        self.shared
            .run
            .lock()
            .await
            .coordinator
            .request_checkpoint();
        self.shared.wake.notify_one();
        Ok(())
    }

    /// Starts a savepoint beside any checkpoint in flight, into a fresh
    /// directory under `directory` (or the configured savepoint directory).
    /// A savepoint that `stop`s the job ends periodic checkpoints once it
    /// completes and becomes the state a restore of the latest resumes from.
    pub async fn trigger_savepoint(
        &self,
        directory: Option<&str>,
        stop: bool,
    ) -> Result<CheckpointId> {
        self.ensure_open()?;
        let shared = &self.shared;
        if shared.fenced.is_cancelled() {
            return Err(shared.lease_lost("the run lost its lease and takes no savepoints"));
        }
        let mut run = shared.run.lock().await;
        // Holding the coordinator while the directory is checked keeps the
        // id it is named after the one the savepoint gets.
        let id = run.coordinator.next_id();
        let location = shared.store.fresh_savepoint(directory, id).await?;
        let (id, effects) = run.coordinator.trigger_savepoint(shared.now(), stop)?;
        shared.store.add_savepoint(id, location, stop);
        shared.dispatch(&run, effects);
        Ok(id)
    }

    /// The events since the last call, oldest first; waits up to `wait` for
    /// the first. Taking a subsumption event lets its deletion run.
    pub async fn poll_events(&self, wait: Duration) -> Vec<DriverEvent> {
        let wait = if self.closed.load(Ordering::SeqCst) {
            Duration::ZERO
        } else {
            wait
        };
        let mut events = Vec::new();
        for queued in self.shared.outbox.take(wait).await {
            if let Some(decision) = queued.cleanup {
                self.shared
                    .cleanups
                    .spawn(Arc::clone(&self.shared).cleanup(decision));
            }
            events.extend(queued.event);
        }
        events
    }

    /// The state owners claimed in the current generation.
    pub fn owners(&self) -> BTreeMap<(OperatorUid, SubtaskIndex), String> {
        self.shared
            .owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .owners()
            .clone()
    }

    /// A copy of the current statistics.
    pub async fn stats(&self) -> CheckpointStatsHistory {
        self.shared.run.lock().await.coordinator.stats().clone()
    }

    /// The newest completed checkpoint of the current lineage, if any.
    pub async fn latest_completed(&self) -> Option<CheckpointId> {
        self.shared.run.lock().await.coordinator.latest_completed()
    }

    /// Stops the run: stops triggering and serving, waits for `_metadata`
    /// writes in flight (so no checkpoint appears after the run ended) and,
    /// up to the cleanup grace, for deletions, including those of subsumed
    /// checkpoints whose events were not taken; a `cancelled` job whose
    /// checkpoints are deleted on cancellation deletes them all. Releases
    /// the lease. Later calls do nothing; other methods fail.
    pub async fn shutdown(&self, cancelled: bool) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let _after_any_restart = self.restarting.lock().await;
        self.stop.cancel();
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(PoisonError::into_inner));
        for task in tasks {
            // A task that panicked has nothing left to clean up.
            let _ = task.await;
        }
        let shared = &self.shared;
        // Writes decided before this are tracked and awaited; an ack still
        // arriving on an open connection starts none. Checkpoints that were
        // not writing their metadata can never complete: their files go.
        {
            let mut run = shared.run.lock().await;
            run.closing = true;
            let effects = run.coordinator.on_run_ended(shared.now());
            shared.dispatch(&run, effects);
        }
        shared.writes.close();
        shared.writes.wait().await;
        for decision in shared.outbox.take_cleanups() {
            shared.cleanups.spawn(Arc::clone(shared).cleanup(decision));
        }
        let mut result = Ok(());
        if cancelled
            && self.cleanup == ExternalizedCleanup::DeleteOnCancellation
            && !shared.fenced.is_cancelled()
        {
            shared.cleanups.close();
            shared.cleanups.wait().await;
            result = shared.timeline.lock().await.timeline.delete_all().await;
        }
        self.settle_cleanups().await;
        let lease = shared.lease.lock().await.take();
        match lease {
            Some(lease) if !shared.fenced.is_cancelled() => {
                result = result.and(lease.release(shared.now().0).await);
            }
            _ => {}
        }
        Ok(result?)
    }

    fn ensure_open(&self) -> Result<()> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(DriverError::ShutDown);
        }
        Ok(())
    }

    /// Waits for every `_metadata` write, then (up to the grace) deletion.
    async fn settle(&self) {
        let writes = &self.shared.writes;
        writes.close();
        writes.wait().await;
        writes.reopen();
        self.settle_cleanups().await;
        self.shared.cleanups.reopen();
    }

    async fn settle_cleanups(&self) {
        let cleanups = &self.shared.cleanups;
        cleanups.close();
        // Whatever is still deleting after the grace is left to finish on
        // its own or to the next run's recovery.
        let _ = tokio::time::timeout(self.cleanup_grace, cleanups.wait()).await;
    }
}

impl Drop for CoordinatorDriver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn as_restored(restored: &Option<(String, ResolvedSnapshot)>) -> Option<(&str, &ResolvedSnapshot)> {
    restored
        .as_ref()
        .map(|(path, snapshot)| (path.as_str(), snapshot))
}

/// Ticks the coordinator whenever it has work: at its next wakeup, or after
/// an event changed its facts. Stops with the run or when the lease is lost.
async fn run_timer(shared: Arc<Shared>, stop: CancellationToken) {
    loop {
        let next = {
            let mut run = shared.run.lock().await;
            let now = shared.now();
            let effects = run.coordinator.on_tick(now);
            let next = run.coordinator.next_wakeup(now);
            if lease::reservation(
                run.coordinator.next_id(),
                run.coordinator.ids_left(),
                shared.id_block,
            )
            .is_some()
            {
                shared.ids_wanted.notify_one();
            }
            shared.dispatch(&run, effects);
            next
        };
        let sleep = async {
            match next {
                Some(t) => tokio::time::sleep_until(shared.clock.instant_of(t)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            () = shared.fenced.cancelled() => return,
            () = shared.wake.notified() => {}
            () = sleep => {}
        }
    }
}

impl std::fmt::Debug for CoordinatorDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoordinatorDriver")
            .field("address", &self.address)
            .field("generation", &self.generation())
            .finish_non_exhaustive()
    }
}
