//! The async driver: a timer task feeding `on_tick`, the HTTP server feeding
//! acks and declines, and the execution of the coordinator's effects.
//!
//! The coordinator sits behind one async mutex and is only ever held for a
//! synchronous decision; storage I/O runs in spawned tasks that report back.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{Mutex, Notify, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use weir_checkpoint::CheckpointMetadata;
use weir_checkpoint::coordinator::{
    CheckpointCoordinator, CheckpointStatsHistory, CoordinatorEffect, CoordinatorOptions, EpochCut,
    Timestamp,
};
use weir_types::CheckpointId;

use crate::clock::DriverClock;
use crate::error::{DriverError, Result};
use crate::http;
use crate::sink::MetadataSink;
use crate::token::JobToken;

/// Largest request body accepted unless configured otherwise: an ack of an
/// incremental RocksDB checkpoint lists every SST file.
pub const DEFAULT_MAX_BODY_BYTES: usize = 16 << 20;

/// How the HTTP server listens and whom it lets in.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Where to listen; `127.0.0.1` on a free port by default. Executors on
    /// other machines need an address they can reach.
    pub bind: SocketAddr,
    /// The job's secret token, required on every request.
    pub token: JobToken,
    /// Requests with a larger body get `413`.
    pub max_body_bytes: usize,
}

impl ServerOptions {
    /// Loopback on a free port, default body limit.
    pub fn new(token: JobToken) -> Self {
        Self {
            bind: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            token,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }
}

/// What the driver tells the job's owner (the PySpark driver).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverEvent {
    /// An effect the owner acts on: triggers, barriers, completions, aborts,
    /// subsumptions, a job failure. Metadata writes are the driver's own
    /// business and never appear here.
    Coordinator(CoordinatorEffect),
    /// Deleting subsumed or aborted checkpoint files failed; the garbage
    /// stays until retention is rebuilt at the next start.
    CleanupFailed {
        /// The storage's explanation.
        message: String,
    },
}

/// State shared by the timer, the HTTP connections and the handle.
pub(crate) struct Shared<S> {
    pub(crate) coordinator: Mutex<CheckpointCoordinator>,
    pub(crate) token: JobToken,
    pub(crate) max_body_bytes: usize,
    clock: DriverClock,
    wake: Notify,
    events: mpsc::UnboundedSender<DriverEvent>,
    sink: S,
}

impl<S: MetadataSink> Shared<S> {
    pub(crate) fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Carries out `effects` in order: storage work in spawned tasks, the rest
    /// to the owner; wakes the timer, since its facts changed.
    pub(crate) fn dispatch(self: &Arc<Self>, effects: Vec<CoordinatorEffect>) {
        if effects.is_empty() {
            return;
        }
        for effect in effects {
            match effect {
                CoordinatorEffect::WriteMetadata(metadata) => {
                    tokio::spawn(Arc::clone(self).write(*metadata));
                }
                CoordinatorEffect::Subsume(ref decision) => {
                    let (shared, decision) = (Arc::clone(self), decision.clone());
                    tokio::spawn(async move {
                        let result = shared.sink.subsume(&decision).await;
                        shared.report_cleanup(result);
                    });
                    self.emit(effect);
                }
                CoordinatorEffect::Aborted { id, .. } => {
                    let shared = Arc::clone(self);
                    tokio::spawn(async move {
                        let result = shared.sink.discard(id).await;
                        shared.report_cleanup(result);
                    });
                    self.emit(effect);
                }
                other => self.emit(other),
            }
        }
        self.wake.notify_one();
    }

    async fn write(self: Arc<Self>, metadata: CheckpointMetadata) {
        let id = metadata.checkpoint_id;
        let result = self.sink.write_metadata(&metadata).await;
        let effects = {
            let mut coordinator = self.coordinator.lock().await;
            let now = self.now();
            match result {
                Ok(()) => coordinator.on_metadata_stored(now, id),
                Err(err) => coordinator.on_metadata_failed(now, id, err.to_string()),
            }
        };
        self.dispatch(effects);
    }

    fn report_cleanup<E: std::error::Error>(&self, result: Result<(), E>) {
        if let Err(err) = result {
            let _ = self.events.send(DriverEvent::CleanupFailed {
                message: err.to_string(),
            });
        }
    }

    fn emit(&self, effect: CoordinatorEffect) {
        // A closed channel means the owner stopped listening; the
        // coordinator carries on, as Flink's does without listeners.
        let _ = self.events.send(DriverEvent::Coordinator(effect));
    }
}

/// A running coordinator: its timer and HTTP server, stopped on
/// [`shutdown`](Self::shutdown) or drop.
pub struct CoordinatorDriver<S: MetadataSink> {
    shared: Arc<Shared<S>>,
    addr: SocketAddr,
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl<S: MetadataSink> CoordinatorDriver<S> {
    /// Starts a coordinator for `options` (its `started_at` is replaced by the
    /// driver's clock), storing through `sink` and listening per `server`.
    /// Returns the driver and the stream of events for the job's owner.
    pub async fn start(
        mut options: CoordinatorOptions,
        sink: S,
        server: ServerOptions,
    ) -> Result<(Self, mpsc::UnboundedReceiver<DriverEvent>)> {
        let clock = DriverClock::start();
        options.started_at = clock.now();
        let coordinator = CheckpointCoordinator::new(options)?;
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
        let (events, receiver) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            coordinator: Mutex::new(coordinator),
            token: server.token,
            max_body_bytes: server.max_body_bytes,
            clock,
            wake: Notify::new(),
            events,
            sink,
        });
        let cancel = CancellationToken::new();
        let tasks = vec![
            tokio::spawn(run_timer(Arc::clone(&shared), cancel.clone())),
            tokio::spawn(serve(listener, Arc::clone(&shared), cancel.clone())),
        ];
        let driver = Self {
            shared,
            addr,
            cancel,
            tasks,
        };
        Ok((driver, receiver))
    }

    /// Where the HTTP server listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Epoch `cut.epoch` succeeded; a triggered checkpoint may take it as its cut.
    pub async fn epoch_final(&self, cut: EpochCut) {
        let effects = self.shared.coordinator.lock().await.on_epoch_final(cut);
        self.shared.dispatch(effects);
    }

    /// Starts a savepoint beside any checkpoint in flight.
    pub async fn trigger_savepoint(&self) -> Result<CheckpointId> {
        let (id, effects) = {
            let mut coordinator = self.shared.coordinator.lock().await;
            coordinator.trigger_savepoint(self.shared.now())?
        };
        self.shared.dispatch(effects);
        Ok(id)
    }

    /// A copy of the current statistics.
    pub async fn stats(&self) -> CheckpointStatsHistory {
        self.shared.coordinator.lock().await.stats().clone()
    }

    /// The newest completed checkpoint, if any.
    pub async fn latest_completed(&self) -> Option<CheckpointId> {
        self.shared.coordinator.lock().await.latest_completed()
    }

    /// Stops the timer and the server and waits for them.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        for task in std::mem::take(&mut self.tasks) {
            // A task that panicked has nothing left to clean up.
            let _ = task.await;
        }
    }
}

impl<S: MetadataSink> Drop for CoordinatorDriver<S> {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Ticks the coordinator whenever it has work: at its next wakeup, or after
/// an event changed its facts.
async fn run_timer<S: MetadataSink>(shared: Arc<Shared<S>>, cancel: CancellationToken) {
    loop {
        let next = {
            let mut coordinator = shared.coordinator.lock().await;
            let now = shared.now();
            let effects = coordinator.on_tick(now);
            let next = coordinator.next_wakeup(now);
            drop(coordinator);
            shared.dispatch(effects);
            next
        };
        let sleep = async {
            match next {
                Some(t) => tokio::time::sleep_until(shared.clock.instant_of(t)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = cancel.cancelled() => return,
            () = shared.wake.notified() => {}
            () = sleep => {}
        }
    }
}

/// Accepts HTTP/1 connections until cancelled.
async fn serve<S: MetadataSink>(
    listener: TcpListener,
    shared: Arc<Shared<S>>,
    cancel: CancellationToken,
) {
    loop {
        let stream = tokio::select! {
            () = cancel.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // A failed accept (e.g. a reset connection) concerns that
                // client only.
                Err(_) => continue,
            },
        };
        let (shared, cancel) = (Arc::clone(&shared), cancel.clone());
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let shared = Arc::clone(&shared);
                async move { Ok::<_, std::convert::Infallible>(http::handle(&shared, request).await) }
            });
            let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                () = cancel.cancelled() => {}
                // A broken connection concerns that client only.
                _ = connection => {}
            }
        });
    }
}
