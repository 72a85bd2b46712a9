//! A minimal HTTP/1 client and started drivers to talk to.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use serde_json::json;
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use weir_checkpoint::coordinator::{CheckpointConfig, EpochCut};
use weir_checkpoint::{CheckpointStorage, OperatorStateMeta, StorageLocation, StorageOptions};
use weir_coordinator::{CoordinatorDriver, DriverEvent, DriverOptions, JobToken, ServerOptions};
use weir_types::{CheckpointId, Epoch, JobId, MaxParallelism, OperatorUid, ValueType};

pub const TOKEN: &str = "test-token-7f3a";

/// Waits this long at most for something that must happen; a hang fails.
pub const PATIENCE: Duration = Duration::from_secs(30);

pub fn job() -> JobId {
    JobId::new("job").expect("valid")
}

/// The options of a run of job `job` (one keyed operator `avg` at
/// parallelism 2) under `dir`, checkpointing every 20 ms.
pub fn options(dir: &Path) -> DriverOptions {
    let mut config = CheckpointConfig::new(Duration::from_millis(20));
    config.timeout = Duration::from_secs(300);
    let mut options = DriverOptions::new(job(), config, dir.display().to_string());
    options.operators = vec![OperatorStateMeta {
        uid: OperatorUid::new("avg").expect("valid"),
        parallelism: 2,
        max_parallelism: MaxParallelism::new(128).expect("valid"),
        key_types: Some(vec![ValueType::Int64]),
        states: Vec::new(),
        subtasks: Vec::new(),
    }];
    options
}

pub fn server() -> ServerOptions {
    ServerOptions::new(JobToken::new(TOKEN).expect("non-empty"))
}

/// A driver and the events it reported that no test looked at yet.
pub struct Driver {
    driver: CoordinatorDriver,
    unseen: Mutex<VecDeque<DriverEvent>>,
}

impl Driver {
    pub fn new(driver: CoordinatorDriver) -> Self {
        Self {
            driver,
            unseen: Mutex::new(VecDeque::new()),
        }
    }

    /// The next event that `pick` accepts; earlier ones are skipped, except
    /// a cleanup failure, which fails the test.
    pub async fn next_event<T>(&self, mut pick: impl FnMut(&DriverEvent) -> Option<T>) -> T {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let mut unseen = self.unseen.lock().await;
            if unseen.is_empty() {
                unseen.extend(self.driver.poll_events(Duration::from_millis(200)).await);
            }
            while let Some(event) = unseen.pop_front() {
                if let DriverEvent::CleanupFailed { message } = &event {
                    panic!("cleanup failed: {message}");
                }
                if let Some(found) = pick(&event) {
                    return found;
                }
            }
            assert!(Instant::now() < deadline, "the expected event arrives");
        }
    }
}

impl Driver {
    /// The id of the next checkpoint or savepoint triggered.
    pub async fn next_trigger(&self) -> CheckpointId {
        self.next_event(|e| match e {
            DriverEvent::CheckpointTriggered { id, .. } => Some(*id),
            _ => None,
        })
        .await
    }
}

impl std::ops::Deref for Driver {
    type Target = CoordinatorDriver;

    fn deref(&self) -> &CoordinatorDriver {
        &self.driver
    }
}

/// A driver over storage in a temporary directory.
pub struct Running {
    pub driver: Driver,
    pub dir: tempfile::TempDir,
}

impl Running {
    pub fn job_dir(&self) -> PathBuf {
        self.dir.path().join("job")
    }

    pub fn storage(&self) -> CheckpointStorage {
        storage(self.dir.path())
    }
}

pub fn storage(dir: &Path) -> CheckpointStorage {
    let location = StorageLocation::parse(&dir.display().to_string(), &StorageOptions::default())
        .expect("local storage");
    CheckpointStorage::filesystem(&location, job()).expect("storage")
}

pub async fn start() -> Running {
    start_with(|_| {}, server()).await
}

/// A driver whose options `adjust` changes.
pub async fn start_with(adjust: impl FnOnce(&mut DriverOptions), server: ServerOptions) -> Running {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut options = options(dir.path());
    adjust(&mut options);
    Running {
        driver: launch(options, server).await,
        dir,
    }
}

/// Starts a driver with `options` whose job runs (epoch 0 is final), so
/// periodic checkpoints start.
pub async fn launch(options: DriverOptions, server: ServerOptions) -> Driver {
    let driver = CoordinatorDriver::start(options, server)
        .await
        .expect("starts");
    driver.epoch_final(cut(0)).await.expect("running");
    Driver::new(driver)
}

/// Waits until `check` holds (a condition that must come true, not a
/// timing assertion).
pub async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check().await {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn cut(epoch: u64) -> EpochCut {
    let mut cut = EpochCut {
        epoch: Epoch(epoch),
        ..EpochCut::default()
    };
    cut.sources.insert(
        OperatorUid::new("src").expect("valid"),
        json!({"offset": epoch * 100}),
    );
    cut
}

/// An ack of subtask `subtask` that stored nothing.
pub fn empty_ack(id: CheckpointId, subtask: u32) -> String {
    json!({
        "checkpoint_id": id.0, "uid": "avg", "subtask": subtask, "keyed": null, "operator_state": null,
        "metrics": {"sync_millis": 0, "async_millis": 0, "state_size_bytes": 0, "persisted_bytes": 0}
    })
    .to_string()
}

/// Acks every subtask of `id` with nothing stored.
pub async fn ack_all(addr: SocketAddr, id: CheckpointId) {
    for subtask in 0..2 {
        let (status, body) = request(
            addr,
            Method::POST,
            "/ack",
            Some(TOKEN),
            &empty_ack(id, subtask),
        )
        .await;
        assert_eq!(
            (status, body["outcome"].as_str()),
            (StatusCode::OK, Some("accepted"))
        );
    }
}

/// Runs the next periodic checkpoint to completion at cut `epoch`: reports
/// the epoch before it final (the job runs, also after a restart), waits for
/// the trigger, reports `epoch` final, acks it, waits for completion.
/// Returns its id and path.
pub async fn complete_next(driver: &Driver, epoch: u64) -> (CheckpointId, String) {
    driver.epoch_final(cut(epoch - 1)).await.expect("running");
    let id = driver.next_trigger().await;
    driver.epoch_final(cut(epoch)).await.expect("running");
    ack_all(driver.local_addr(), id).await;
    let path = driver
        .next_event(|e| match e {
            DriverEvent::CheckpointCompleted { id: done, path, .. } if *done == id => {
                Some(path.clone())
            }
            _ => None,
        })
        .await;
    (id, path)
}

/// Sends one request; returns the status and the JSON body.
pub async fn request(
    addr: SocketAddr,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (StatusCode, serde_json::Value) {
    let stream = TcpStream::connect(addr).await.expect("connects");
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("handshake");
    tokio::spawn(connection);
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost");
    if let Some(token) = token {
        builder = builder.header("authorization", format!("Bearer {token}"));
    }
    let request = builder
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("valid request");
    let response = sender.send_request(request).await.expect("response");
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let json = serde_json::from_slice(&bytes).expect("JSON body");
    (status, json)
}
