//! A minimal HTTP/1 client and a started driver to talk to.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use weir_checkpoint::coordinator::{
    CheckpointConfig, CoordinatorEffect, CoordinatorOptions, Timestamp,
};
use weir_checkpoint::{CheckpointStorage, OperatorStateMeta, StorageLocation, StorageOptions};
use weir_coordinator::{CoordinatorDriver, DriverEvent, JobToken, ServerOptions, StorageSink};
use weir_types::{CheckpointId, JobId, MaxParallelism, OperatorUid, ValueType};

pub const TOKEN: &str = "test-token-7f3a";

/// A driver over storage in a temporary directory, for a job with one
/// keyed operator `avg` at parallelism 2.
pub struct Running {
    pub driver: CoordinatorDriver<StorageSink>,
    pub events: mpsc::UnboundedReceiver<DriverEvent>,
    pub storage: CheckpointStorage,
    pub _dir: tempfile::TempDir,
}

pub async fn start(max_body_bytes: Option<usize>) -> Running {
    start_with(max_body_bytes, None).await
}

/// Like [`start`], with savepoints going under `savepoint_dir`.
pub async fn start_with(
    max_body_bytes: Option<usize>,
    savepoint_dir: Option<&std::path::Path>,
) -> Running {
    let dir = tempfile::tempdir().expect("temp dir");
    let location = StorageLocation::parse(
        &dir.path().display().to_string(),
        &StorageOptions::default(),
    )
    .expect("local storage");
    let job = JobId::new("job").expect("valid");
    let storage = CheckpointStorage::filesystem(&location, job.clone()).expect("storage");
    let mut config = CheckpointConfig::new(Duration::from_millis(20));
    config.timeout = Duration::from_secs(300);
    let options = CoordinatorOptions {
        job_id: job,
        config,
        operators: vec![OperatorStateMeta {
            uid: OperatorUid::new("avg").expect("valid"),
            parallelism: 2,
            max_parallelism: MaxParallelism::new(128).expect("valid"),
            key_types: Some(vec![ValueType::Int64]),
            states: Vec::new(),
            subtasks: Vec::new(),
        }],
        first_checkpoint_id: CheckpointId(1),
        started_at: Timestamp(0),
        history: 10,
        retention: None,
    };
    let mut server = ServerOptions::new(JobToken::new(TOKEN).expect("non-empty"));
    if let Some(limit) = max_body_bytes {
        server.max_body_bytes = limit;
    }
    let savepoints = savepoint_dir.map(|d| {
        StorageLocation::parse(&d.display().to_string(), &StorageOptions::default())
            .expect("local storage")
    });
    let sink = StorageSink::new(storage.clone(), savepoints);
    let (driver, events) = CoordinatorDriver::start(options, sink, server)
        .await
        .expect("starts");
    Running {
        driver,
        events,
        storage,
        _dir: dir,
    }
}

/// The next coordinator effect that `pick` accepts; others are skipped. A
/// generous guard turns a hang into a failure.
pub async fn next_effect<T>(
    events: &mut mpsc::UnboundedReceiver<DriverEvent>,
    mut pick: impl FnMut(&CoordinatorEffect) -> Option<T>,
) -> T {
    let wait = async {
        loop {
            match events.recv().await.expect("driver running") {
                DriverEvent::Coordinator(effect) => {
                    if let Some(found) = pick(&effect) {
                        return found;
                    }
                }
                DriverEvent::CleanupFailed { message } => panic!("cleanup failed: {message}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), wait)
        .await
        .expect("the expected event arrives")
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
